"""Tiny LLaVA-NeXT variants on other language models (``tunekit tiny-model --like llava-next-mistral``).

LLaVA-NeXT (``LlavaNextForConditionalGeneration``) was released on several language models; each llava-hf
conversion carries that model's chat format. Built here: the Mistral variant (llava-hf/llava-v1.6-mistral-7b-hf:
a ``mistral`` text config, ``[INST] <image>\\n... [/INST]``) and the Llama 3 one (llava-hf/llama3-llava-next-8b-hf:
Llama 3's header tokens and ``<|eot_id|>``), with everything else as the tiny Vicuna LLaVA-NeXT of
:mod:`tunekit.tiny.llava_gemma3` (anyres pinpoints, 56-pixel tiles, the same BPE with ``<image>``).
"""

from __future__ import annotations

import os
from pathlib import Path

from . import llava_gemma3 as fams
from .multimodal import DEFAULT_SIZES, TinySizes, new_folder, random_model
from .names import VLM_FAMILIES
from .tokenizer import DEFAULT_VOCAB_SIZE, TokenizerFamily, check_tokenizer_roundtrip

#: the Mistral chat_template of transformers' LLaVA-NeXT conversion (``chat_mistral``: images first as
#: "<image>\n", then the text parts; replies end with the literal text "<\s> " as in that template), verbatim
LLAVA_NEXT_MISTRAL_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' }}{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}"
    "{# Render all text next #}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] }}{% endfor %}{{' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' ' + message['content'][0]['text'] + '<\\s> '}}{% else %}"
    "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

#: llava-hf/llama3-llava-next-8b-hf's chat_template (530 bytes on the hub; this text is the processor copy of a
#: fine-tune of it, threefruits/llama3-llava-next-8b-SCAND): images as "<image>", each text part as "\n" + text +
#: "<|eot_id|>", for every role
LLAVA_NEXT_LLAMA3_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'}}"
    "{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>' }}{% endfor %}{# Render all text next #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ '\n' + content['text'] + '<|eot_id|>' }}{% endfor %}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

#: Llama 3's special tokens + <image> and a pad (as the llava-hf conversion adds them)
LLAMA3_LLAVA_TOKENS = TokenizerFamily(
    name="llava_next_llama3",
    template="llava_next_llama3",
    special=(
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
        "<pad>",
        "<image>",
    ),
    bos="<|begin_of_text|>",
    eos="<|eot_id|>",
    pad="<pad>",
    add_bos=True,
    generation_eos=("<|eot_id|>", "<|end_of_text|>"),
)

#: like name -> (text model_type, chat template, tokenizer family)
VARIANTS = {
    "llava_next_mistral": ("mistral", LLAVA_NEXT_MISTRAL_CHAT_TEMPLATE, fams.LLAVA_TOKENS),
    "llava_next_llama3": ("llama", LLAVA_NEXT_LLAMA3_CHAT_TEMPLATE, LLAMA3_LLAVA_TOKENS),
}


def build_tiny_llava_next_variant(
    out_dir: str | os.PathLike,
    like: str = "llava-next-mistral",
    seed: int = 0,
    sizes: TinySizes = DEFAULT_SIZES,
) -> Path:
    """Write a tiny random LLaVA-NeXT on the variant's language model (weights, tokenizer, template, processor)."""
    from transformers import AutoModelForImageTextToText

    text_type, template, fam = VARIANTS[VLM_FAMILIES[like.strip().lower()]]
    tokenizer = fams._tokenizer(
        fam, sizes.vocab_size or DEFAULT_VOCAB_SIZE, template, sizes.max_position_embeddings, image_token="<image>"
    )
    out, tokenizer, model_vocab = new_folder(out_dir, fam, template, sizes, tokenizer=tokenizer)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in fam.special}
    shape = dict(
        hidden_size=sizes.hidden_size,
        num_layers=sizes.num_layers,
        num_heads=sizes.num_heads,
        num_kv_heads=sizes.num_kv_heads,
    )
    text = fams._text_config("llama", shape, model_vocab, ids, fam, sizes.max_position_embeddings)
    if text_type == "mistral":
        text.update(model_type=text_type, sliding_window=None)  # Mistral-7B-Instruct-v0.2: full attention
    config = fams._config("llava_next", text, ids)
    model = random_model(AutoModelForImageTextToText, config, seed, fam, ids, bos_token_id=ids[fam.bos])
    model.save_pretrained(out)
    fams._processor("llava_next", tokenizer, template).save_pretrained(out)
    check_tokenizer_roundtrip(out, tokenizer)
    fams._check_processor(out, "llava_next")
    return out
