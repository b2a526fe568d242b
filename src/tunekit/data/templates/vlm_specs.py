"""Chat templates of the LLaVA-1.5, LLaVA-NeXT and Gemma 3 vision-language families (listed by the registry).

Each follows the family's official HF chat template (the llava-hf conversions, google/gemma-3-4b-it) where a
training format needs one; where that differs from LLaMA-Factory's template of the same name, docs/data.md says
how (the family's own template wins):

- ``llava`` / ``llava_next``: the llava-hf template renders ``USER: <image>\\n{text} ASSISTANT:`` with no default
  system (LLaMA-Factory's copy of Vicuna adds Vicuna's system prompt). A system text comes first, followed by a
  space, as there. The llava-hf template ends a reply with a space and no ``</s>``; tunekit ends each reply with
  ``</s>`` (trained), as LLaVA-1.5 was trained (``conv_llava_v1``) and LLaMA-Factory does, so the model learns to
  stop; prompts are the official template's up to the reply.
- ``smolvlm`` / ``idefics3`` (LLaMA-Factory 0.9.5 has neither): the SmolVLM chat template transformers ships
  (``processing_smolvlm.DEFAULT_CHAT_TEMPLATE``, which renders image/text parts as SmolVLM-Instruct's own template):
  ``<|im_start|>User: {text}<end_of_utterance>\nAssistant: {reply}<end_of_utterance>\n``, with no space after
  ``User:`` when the message starts with an image (``tight_before``); ``idefics3`` starts with ``<|begin_of_text|>``
  (Idefics3-8B-Llama3) instead of ``<|im_start|>``.
- ``gemma3``: Gemma 3's turns (as ``gemma``). The official template trims each text part; a multimodal dataset's
  messages are trimmed piece by piece by the Gemma 3 plugin around its images, so the template does not trim
  whole user messages (which would cut the ``"\\n\\n"`` before a leading image).
"""

from __future__ import annotations

from .spec import TemplateSpec
from .turns import GEMMA_TURNS, LLAMA3_TURNS, VICUNA_TURNS

_SMOLVLM = dict(
    system="System: {content}<end_of_utterance>\n",
    user="User: {content}<end_of_utterance>\nAssistant:",
    header="Assistant:",
    assistant=" {content}<end_of_utterance>",
    observation="Tool: {content}<end_of_utterance>\nAssistant:",
    sep="\n",
    eos="<end_of_utterance>",
    stop_words=("<end_of_utterance>",),
    replace_eos=True,
    tool_format=None,
    tight_before=("<image>", "<fake_token_around_image>"),
)

VLM_SPECS: list[TemplateSpec] = [
    TemplateSpec(
        name="smolvlm",
        description="SmolVLM / SmolVLM2 (Idefics3 architecture): 'User: ...<end_of_utterance>\\nAssistant:'; <image> "
        "expanded into tile tokens.",
        prefix="<|im_start|>",
        bos="<|im_start|>",
        **_SMOLVLM,
        official_jinja="smolvlm",
        source="transformers processing_smolvlm.DEFAULT_CHAT_TEMPLATE (HuggingFaceTB/SmolVLM-Instruct's format); "
        "not in LLaMA-Factory 0.9.5",
    ),
    TemplateSpec(
        name="idefics3",
        description="Idefics3-8B-Llama3: as smolvlm, starting with <|begin_of_text|>.",
        prefix="<|begin_of_text|>",
        bos="<|begin_of_text|>",
        **_SMOLVLM,
        official_jinja="idefics3",
        source="HuggingFaceM4/Idefics3-8B-Llama3's format (the SmolVLM template with <|begin_of_text|>); "
        "not in LLaMA-Factory 0.9.5",
    ),
    TemplateSpec(
        name="llava",
        description="LLaVA-1.5 (llava-hf): 'USER: <image>\\n... ASSISTANT:'; <image> expanded into the model's image "
        "tokens.",
        **VICUNA_TURNS,
        source="llava-hf/llava-1.5-7b-hf chat_template (replies end with </s> as LLaVA-1.5's conv_llava_v1); "
        "LLaMA-Factory 'llava' without Vicuna's default system",
    ),
    TemplateSpec(
        name="llava_next",
        description="LLaVA-NeXT / LLaVA-1.6 on Vicuna (llava-hf): as llava, <image> expanded into anyres tile tokens.",
        **VICUNA_TURNS,
        source="llava-hf llava-1.5 chat_template (the llava-hf Vicuna format, also used for llava-v1.6-vicuna); "
        "LLaMA-Factory 'llava_next' without Vicuna's default system",
    ),
    TemplateSpec(
        name="llava_next_mistral",
        description="LLaVA-NeXT / LLaVA-1.6 on Mistral (llava-hf/llava-v1.6-mistral-7b-hf): "
        "'[INST] <image>\\n... [/INST]'.",
        prefix="{bos}",
        auto_bos=True,
        bos="<s>",
        system="{content}\n\n",
        system_in="first_user",
        user="[INST] {content} [/INST]",
        header=" [/INST]",
        assistant=" {content}{eos}",
        tool_format=None,
        source="transformers' LLaVA-NeXT conversion chat_mistral (llava-v1.6-mistral-7b-hf; replies end with </s>, "
        "not its literal '<\\s> '); LLaMA-Factory 'llava_next_mistral' (its '[/INST]' has no space before it)",
    ),
    TemplateSpec(
        name="llava_next_llama3",
        description="LLaVA-NeXT on Llama 3 (llava-hf/llama3-llava-next-8b-hf): Llama 3 turns, '<image>…\\n' + text.",
        **LLAMA3_TURNS,
        auto_bos=True,
        stop_words=("<|eot_id|>",),
        tool_format=None,
        source="llava-hf/llama3-llava-next-8b-hf chat_template (as in a fine-tune's copy of its processor; text-only "
        "messages and replies without its extra leading '\\n'); LLaMA-Factory 'llava_next_llama3'",
    ),
    TemplateSpec(
        name="gemma3",
        description="Gemma 3 instruct with images (<start_of_turn>; <image> becomes <start_of_image> + soft tokens).",
        **GEMMA_TURNS,
        trim=frozenset({"assistant", "observation"}),  # not "user", unlike gemma: the Gemma 3 plugin trims its pieces
        source="google/gemma-3-4b-it chat_template; LLaMA-Factory 'gemma3' (text parts trimmed by the Gemma 3 plugin)",
    ),
]
