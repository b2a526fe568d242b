"""Tiny random-weight LLaVA-1.5, LLaVA-NeXT and Gemma 3 (vision) models, built locally in a few seconds.

Like :mod:`tunekit.tiny.qwen2_vl` (Qwen2-VL): the real transformers classes
(``LlavaForConditionalGeneration``, ``LlavaNextForConditionalGeneration``, ``Gemma3ForConditionalGeneration``)
at tiny sizes, random weights from a fixed seed, the byte-level BPE of :mod:`tunekit.tiny.tokenizer` carrying the
family's special tokens (``<image>``; Gemma 3's ``<start_of_image>`` / ``<image_soft_token>`` /
``<end_of_image>`` as the tokenizer's ``boi_token`` / ``image_token`` / ``eoi_token``), the family's official
chat template, and the family's own processor saved with the folder (``processor_config.json``), built on
transformers' PIL/numpy image processors (``CLIPImageProcessorPil``, ``LlavaNextImageProcessorPil``,
``Gemma3ImageProcessorPil``), so ``AutoProcessor.from_pretrained(folder)`` gives ``LlavaProcessor`` /
``LlavaNextProcessor`` / ``Gemma3Processor`` without torchvision. Nothing is downloaded.

Sizes: images are 56 x 56 pixels in 14-pixel patches (4 x 4 = 16 patches), so LLaVA gives 16 image tokens per
image (CLS dropped, ``vision_feature_select_strategy: default``), LLaVA-NeXT 16 per 56-pixel tile plus its
anyres tiles (``image_grid_pinpoints`` up to 112 x 112) and row newlines, Gemma 3 ``mm_tokens_per_image`` = 4
(the 4 x 4 patches average-pooled 2 x 2).

``vlm.build_tiny_vlm`` is the one entry for every family (``tunekit tiny-model --like``) and calls
:func:`build_tiny_llava_or_gemma3` for these; :func:`describe_vlm` describes their folders.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from tunekit.errors import ModelError

from .multimodal import DEFAULT_SIZES, TinySizes, new_folder, random_model
from .names import VLM_FAMILIES
from .tokenizer import (
    DEFAULT_VOCAB_SIZE,
    TOKENIZERS,
    TokenizerFamily,
    check_tokenizer_roundtrip,
    trained_tokenizer_json,
)

LLAVA_TOKENS = TokenizerFamily(
    name="llava",
    template="llava",
    special=("<unk>", "<s>", "</s>", "<pad>", "<image>"),
    bos="<s>",
    eos="</s>",
    pad="<pad>",
    unk="<unk>",
    add_bos=True,
    generation_eos=("</s>",),
)
GEMMA3_TOKENS = replace(  # Gemma's bos/eos/pad/unk; its special tokens in Gemma 3's id order (<mask>, the image ones)
    TOKENIZERS["gemma"],
    name="gemma3_vl",
    template="gemma3",
    special=(
        "<pad>",
        "<eos>",
        "<bos>",
        "<unk>",
        "<mask>",
        "<start_of_turn>",
        "<end_of_turn>",
        "<start_of_image>",
        "<end_of_image>",
        "<image_soft_token>",
    ),
)

#: llava-hf/llava-1.5-7b-hf's chat_template, verbatim (images first as "<image>\n", then the texts + " ").
LLAVA_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}{% endif %}"
    "{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}{# Render all text next #}{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] + ' '}}"
    "{% endfor %}{% else %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)

#: google/gemma-3-4b-it's chat_template, verbatim.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n"
    '    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = "" -%}\n'
    "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    '        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}\n'
    "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n"
)

IMAGE_SIZE, PATCH = 56, 14  # 4 x 4 patches per image (tile)
PINPOINTS = [[56, 112], [112, 56], [112, 112]]  # LLaVA-NeXT anyres grid (real: multiples of 336)

#: --like name -> family key
#: --like name -> model_type of the families built here (the names are declared once, in names.VLM_FAMILIES)
FAMILIES = {like: family for like, family in VLM_FAMILIES.items() if family in ("llava", "llava_next", "gemma3")}


def _tokenizer(fam: TokenizerFamily, vocab_size: int, chat_template: str, max_length: int, **named: str):
    """The family's BPE as a transformers tokenizer; ``named`` model-specific tokens (``boi_token=...``)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer.from_str(trained_tokenizer_json(fam, vocab_size))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=fam.bos,
        eos_token=fam.eos,
        pad_token=fam.pad,
        unk_token=fam.unk,
        add_bos_token=fam.add_bos,
        add_eos_token=False,
        model_max_length=max_length,
        padding_side="right",
        clean_up_tokenization_spaces=False,
        **named,
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def _text_config(
    model_type: str, sizes: dict[str, int], vocab: int, ids: dict[str, int], fam: TokenizerFamily, max_positions: int
) -> dict[str, Any]:
    h, heads = sizes["hidden_size"], sizes["num_heads"]
    text = dict(
        model_type=model_type,
        hidden_size=h,
        intermediate_size=4 * h,
        num_hidden_layers=sizes["num_layers"],
        num_attention_heads=heads,
        num_key_value_heads=sizes["num_kv_heads"],
        head_dim=h // heads,
        vocab_size=vocab,
        max_position_embeddings=max_positions,
        initializer_range=0.02,
        bos_token_id=ids[fam.bos],
        eos_token_id=ids[fam.eos],
        pad_token_id=ids[fam.pad],
    )
    if model_type == "llama":
        text.update(rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False)
    else:  # gemma3_text, as the real 4B: tied embeddings, local/global layers
        text.update(
            rms_norm_eps=1e-6,
            hidden_activation="gelu_pytorch_tanh",
            sliding_window=128,
            query_pre_attn_scalar=h // heads,
            tie_word_embeddings=True,
        )
    return text


def _vision_config(model_type: str) -> dict[str, Any]:
    vision = dict(
        model_type=model_type,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
    )
    if model_type == "clip_vision_model":
        vision.update(projection_dim=32, hidden_act="quick_gelu")
    else:
        vision.update(vision_use_head=False)
    return vision


def _config(family: str, text: dict, ids: dict[str, int]):
    from transformers import AutoConfig

    if family == "gemma3":
        return AutoConfig.for_model(
            "gemma3",
            text_config=text,
            vision_config=_vision_config("siglip_vision_model"),
            mm_tokens_per_image=4,
            boi_token_index=ids["<start_of_image>"],
            eoi_token_index=ids["<end_of_image>"],
            image_token_index=ids["<image_soft_token>"],
            initializer_range=0.02,
        )
    extra = {"image_grid_pinpoints": PINPOINTS} if family == "llava_next" else {}
    return AutoConfig.for_model(
        family,
        text_config=text,
        vision_config=_vision_config("clip_vision_model"),
        image_token_id=ids["<image>"],
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
        image_seq_length=(IMAGE_SIZE // PATCH) ** 2,
        tie_word_embeddings=False,
        **extra,
    )


def _processor(family: str, tokenizer, chat_template: str):
    """The family's own processor on transformers' PIL image processor (what the real checkpoints configure)."""
    crop = {"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    if family == "gemma3":
        from transformers import Gemma3Processor
        from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

        return Gemma3Processor(
            image_processor=Gemma3ImageProcessorPil(size=crop),
            tokenizer=tokenizer,
            chat_template=chat_template,
            image_seq_length=4,
        )
    common = dict(
        patch_size=PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=chat_template,
    )
    if family == "llava_next":
        from transformers import LlavaNextProcessor
        from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

        image_processor = LlavaNextImageProcessorPil(
            size={"shortest_edge": IMAGE_SIZE}, crop_size=crop, image_grid_pinpoints=PINPOINTS
        )
        return LlavaNextProcessor(image_processor=image_processor, tokenizer=tokenizer, **common)
    from transformers import LlavaProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    image_processor = CLIPImageProcessorPil(size={"shortest_edge": IMAGE_SIZE}, crop_size=crop)
    return LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer, **common)


def build_tiny_llava_or_gemma3(
    out_dir: str | os.PathLike, like: str = "llava", seed: int = 0, sizes: TinySizes = DEFAULT_SIZES
) -> Path:
    """Write a tiny random LLaVA-1.5 / LLaVA-NeXT / Gemma 3 (weights, tokenizer, chat template, processor)."""
    from transformers import AutoModelForImageTextToText

    key = like.strip().lower()
    family = FAMILIES[key]
    gemma = family == "gemma3"
    fam, template = (GEMMA3_TOKENS, GEMMA3_CHAT_TEMPLATE) if gemma else (LLAVA_TOKENS, LLAVA_CHAT_TEMPLATE)
    named = (
        dict(boi_token="<start_of_image>", eoi_token="<end_of_image>", image_token="<image_soft_token>")
        if gemma
        else dict(image_token="<image>")
    )
    tokenizer = _tokenizer(
        fam, sizes.vocab_size or DEFAULT_VOCAB_SIZE, template, sizes.max_position_embeddings, **named
    )
    out, tokenizer, model_vocab = new_folder(out_dir, fam, template, sizes, tokenizer=tokenizer)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in fam.special}
    shape = dict(
        hidden_size=sizes.hidden_size,
        num_layers=sizes.num_layers,
        num_heads=sizes.num_heads,
        num_kv_heads=sizes.num_kv_heads,
    )
    text = _text_config(
        "gemma3_text" if gemma else "llama", shape, model_vocab, ids, fam, sizes.max_position_embeddings
    )
    config = _config(family, text, ids)
    model = random_model(AutoModelForImageTextToText, config, seed, fam, ids, bos_token_id=ids[fam.bos])
    if gemma:
        _draw_gemma3_projection(model, seed)
    model.save_pretrained(out)
    _processor(family, tokenizer, template).save_pretrained(out)  # processor_config.json + tokenizer + template
    check_tokenizer_roundtrip(out, tokenizer)
    _check_processor(out, family)
    return out


def _draw_gemma3_projection(model, seed: int) -> None:
    """transformers initialises Gemma 3's ``mm_input_projection_weight`` to zeros (a pretrained checkpoint overwrites
    it), which would make every image embedding 0: the images would change nothing and no gradient would reach the
    vision tower. The tiny model draws it like its other weights (normal, std 0.02, from ``seed``)."""
    import torch

    weight = model.model.multi_modal_projector.mm_input_projection_weight
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        weight.copy_(torch.randn(weight.shape, generator=generator) * 0.02)


def _check_processor(out: Path, family: str) -> None:
    """The saved folder must reload as the family's processor (PIL image processor) with the model's image token."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(out)
    want = {"llava": "LlavaProcessor", "llava_next": "LlavaNextProcessor", "gemma3": "Gemma3Processor"}[family]
    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    token = processor.tokenizer.image_token
    got = processor.tokenizer.convert_tokens_to_ids(token)
    model_id = cfg.get("image_token_id", cfg.get("image_token_index"))
    if type(processor).__name__ != want or got != model_id:
        raise ModelError(
            f"tiny-model: {out} reloads as {type(processor).__name__} with image token {token} = {got}, "
            f"expected {want} with the model's image token id {model_id} (tunekit.tiny.llava_gemma3 "
            f"needs fixing)."
        )


def describe_vlm(folder: str | os.PathLike) -> str:
    """A few lines about a built LLaVA / Gemma 3 / Idefics3 / SmolVLM folder, for the CLI."""
    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    text, vision = cfg.get("text_config", {}), cfg.get("vision_config", {})
    proc = json.loads((folder / "processor_config.json").read_text(encoding="utf-8"))
    image = proc.get("image_processor") or json.loads(
        (folder / "preprocessor_config.json").read_text(encoding="utf-8")
    )
    per_image = cfg.get("mm_tokens_per_image") or cfg.get("image_seq_length") or proc.get("image_seq_len")
    return "\n".join(
        [
            f"wrote {folder}",
            f"  architecture  {', '.join(cfg.get('architectures') or [])} (model_type {cfg.get('model_type')})",
            f"  language      {text.get('model_type')}: hidden {text.get('hidden_size')}, "
            f"layers {text.get('num_hidden_layers')}, "
            f"heads {text.get('num_attention_heads')}/{text.get('num_key_value_heads')}, "
            f"vocab {text.get('vocab_size')}",
            f"  vision        {vision.get('model_type')}: layers {vision.get('num_hidden_layers')}, image "
            f"{vision.get('image_size')} px, patch {vision.get('patch_size')}",
            f"  processor     {proc.get('processor_class')} + {image.get('image_processor_type')} (PIL path); "
            f"{per_image} image tokens per image (tile); "
            f"template {'smolvlm' if proc.get('image_seq_len') else cfg['model_type']}",
            f"  weights       {(folder / 'model.safetensors').stat().st_size / 2**20:.2f} MiB",
        ]
    )
