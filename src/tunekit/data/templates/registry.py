"""The named chat templates (LLaMA-Factory names), each checked against its family's official HF template.

Where a family's official ``chat_template`` exists, the strings here reproduce it exactly (the tests hold
them equal on several conversations); the ``source`` line of each entry says what it follows.
"""

from __future__ import annotations

from .base import Template
from .harmony import HarmonyTemplate
from .reasoning_specs import REASONING_SPECS
from .spec import TemplateSpec
from .turns import GEMMA_TURNS, LLAMA3_HEADER, LLAMA3_TURNS, VICUNA_TURNS
from .vlm_specs import VLM_SPECS

_ALL = frozenset({"system", "user", "assistant", "observation"})
_QWEN_USER = "<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"
_QWEN_OBS = "<|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
_CHATML = dict(
    system="<|im_start|>system\n{content}<|im_end|>\n",
    user=_QWEN_USER,
    header="<|im_start|>assistant\n",
    assistant="{content}<|im_end|>",
    sep="\n",
    stop_words=("<|im_end|>",),
)
#: Qwen's ChatML: <|im_end|> becomes the EOS, <|endoftext|> ends a document; _QWEN_TOOLS adds its tool results
_QWEN = dict(**_CHATML, replace_eos=True, eos="<|im_end|>", document_end="<|endoftext|>")
_QWEN_TOOLS = dict(**_QWEN, observation=_QWEN_OBS)


def _glm_turns(pad: str) -> dict:
    """GLM-4 (pad "") / ChatGLM3 (pad " ": a space after each role line) turns, e.g. '<|user|>\\n{pad}{content}'.

    They have no end-of-turn token: the next role token ends a reply (``role_handoff``).
    """
    return dict(
        system=f"<|system|>\n{pad}{{content}}",
        user=f"<|user|>\n{pad}{{content}}<|assistant|>",
        header="<|assistant|>",
        assistant=f"\n{pad}{{content}}",
        function="{content}",
        observation=f"<|observation|>\n{pad}{{content}}<|assistant|>",
        stop_words=("<|user|>", "<|observation|>"),
        role_handoff=("<|user|>", "<|observation|>"),
        tool_format="glm4",
    )


SPECS: list[TemplateSpec] = [
    TemplateSpec(
        name="default",
        description="Generic 'Human:/Assistant:' format for models without a chat format of their own.",
        prefix="{bos}",
        auto_bos=True,
        system="System: {content}{eos}\n",
        user="Human: {content}{eos}\nAssistant:",
        header="\nAssistant:",
        assistant="{content}{eos}",
        sep="\n",
        source="LLaMA-Factory 'default'",
    ),
    TemplateSpec(
        name="alpaca",
        description="Stanford Alpaca '### Instruction: / ### Response:' format.",
        prefix="{bos}",
        auto_bos=True,
        user="### Instruction:\n{content}\n\n### Response:\n",
        header="### Response:\n",
        assistant="{content}{eos}",
        sep="\n\n",
        default_system="Below is an instruction that describes a task. "
        "Write a response that appropriately completes the request.\n\n",
        source="LLaMA-Factory 'alpaca' (Stanford Alpaca prompt)",
    ),
    TemplateSpec(
        name="empty",
        description="No markup (base models): the texts one after another, each reply ends with EOS.",
        prefix="{bos}",
        auto_bos=True,
        user="{content}",
        assistant="{content}{eos}",
        source="LLaMA-Factory 'empty' (+ EOS after each reply so the model learns to stop; "
        "empty_template_eos: false drops it, as LLaMA-Factory does); tools in LLaMA-Factory's plain 'default' format",
    ),
    TemplateSpec(
        name="vicuna",
        description="Vicuna v1.1/v1.5 'USER: ... ASSISTANT:' format (FastChat).",
        **VICUNA_TURNS,
        default_system="A chat between a curious user and an artificial intelligence assistant. "
        "The assistant gives helpful, detailed, and polite answers to the user's questions.",
        source="FastChat conversation 'vicuna_v1.1' (Vicuna ships no HF chat_template)",
    ),
    TemplateSpec(
        name="qwen",
        description="Qwen2 / Qwen2.5 instruct (ChatML, Hermes <tool_call> tools).",
        **_QWEN_TOOLS,
        default_system="You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
        tool_format="qwen",
        official_jinja="qwen2_5",
        source="Qwen/Qwen2.5-7B-Instruct chat_template",
    ),
    TemplateSpec(
        name="qwen2_vl",
        description="Qwen2-VL / Qwen2.5-VL (ChatML; <image> expanded into the model's image tokens, data/mm_plugins).",
        **_QWEN_TOOLS,
        default_system="You are a helpful assistant.",
        tool_format="qwen",
        source="Qwen/Qwen2-VL-7B-Instruct chat_template; LLaMA-Factory 'qwen2_vl'",
    ),
    TemplateSpec(
        name="qwen3",
        description="Qwen3 hybrid-reasoning models: <think> blocks, enable_thinking on/off.",
        **_QWEN_TOOLS,
        tool_format="qwen3",
        reasoning=True,
        official_jinja="qwen3",
        source="Qwen/Qwen3-8B chat_template; LLaMA-Factory 'qwen3' reasoning semantics",
    ),
    TemplateSpec(
        name="qwen3_nothink",
        description="Qwen3 non-reasoning models (Qwen3-*-Instruct-2507): ChatML without <think> handling.",
        **_QWEN_TOOLS,
        tool_format="qwen3",
        official_jinja="qwen3_nothink",
        source="Qwen/Qwen3-4B-Instruct-2507 chat_template",
    ),
    TemplateSpec(
        name="qwen3_vl",
        description="Qwen3-VL Thinking models (<think> blocks; <image>/<video> expanded into the model's tokens, "
        "data/mm_plugins).",
        **_QWEN_TOOLS,
        tool_format="qwen",
        reasoning=True,
        source="Qwen/Qwen3-VL-8B-Thinking chat_template; LLaMA-Factory 'qwen3_vl' (ReasoningTemplate)",
    ),
    TemplateSpec(
        name="qwen3_vl_nothink",
        description="Qwen3-VL Instruct models (ChatML, no default system; <image>/<video> expanded, data/mm_plugins).",
        **_QWEN_TOOLS,
        tool_format="qwen",
        source="Qwen/Qwen3-VL-8B-Instruct chat_template; LLaMA-Factory 'qwen3_vl_nothink'",
    ),
    TemplateSpec(
        name="qwen2_audio",
        description="Qwen2-Audio-Instruct (ChatML; <audio> expanded into 'Audio k: <|audio_bos|>...<|audio_eos|>', "
        "data/mm_plugins).",
        **_QWEN,
        default_system="You are a helpful assistant.",
        source="Qwen/Qwen2-Audio-7B-Instruct chat_template (Qwen2AudioProcessor.default_chat_template); "
        "LLaMA-Factory 'qwen2_audio'",
    ),
    TemplateSpec(
        name="llama3",
        description="Llama 3 / 3.1 / 3.2 instruct (header tokens, <|eot_id|>).",
        **LLAMA3_TURNS,
        observation="<|start_header_id|>ipython<|end_header_id|>\n\n{content}<|eot_id|>" + LLAMA3_HEADER,
        trim=_ALL,
        stop_words=("<|eot_id|>", "<|eom_id|>"),
        tool_format="llama3",
        source="meta-llama/Meta-Llama-3-8B-Instruct chat_template (contents are trimmed, as there)",
    ),
    TemplateSpec(
        name="llama2",
        description="Llama 2 chat ('<s>[INST] <<SYS>> ... [/INST]').",
        bos="<s>",
        system="<<SYS>>\n{content}\n<</SYS>>\n\n",
        system_in="first_user",
        trim_after_merge=True,
        user="{bos}[INST] {content} [/INST]",
        assistant=" {content} {eos}",
        trim=frozenset({"user", "assistant"}),
        source="meta-llama/Llama-2-7b-chat-hf chat_template",
    ),
    TemplateSpec(
        name="mistral",
        description="Mistral instruct v0.3 / Mixtral ('[INST] ... [/INST]', system before the last user message).",
        prefix="{bos}",
        bos="<s>",
        system="{content}\n\n",
        system_in="last_user",
        user="[INST] {content}[/INST]",
        assistant=" {content}{eos}",
        function="[TOOL_CALLS] {content}{eos}",
        observation='[TOOL_RESULTS] {"content": {content}}[/TOOL_RESULTS]',
        trim=frozenset({"assistant"}),
        tool_format="mistral",
        source="mistralai/Mistral-7B-Instruct-v0.3 chat_template (tools: LLaMA-Factory 'mistral' format)",
    ),
    TemplateSpec(
        name="gemma",
        description="Gemma / Gemma 2 instruct (<start_of_turn>, system glued to the first user turn).",
        **GEMMA_TURNS,
        trim=frozenset({"user", "assistant", "observation"}),  # gemma3 does not trim "user" (its plugin does)
        source="google/gemma-2-9b-it chat_template (system as in Gemma 3: '<system>\\n\\n' before the first user "
        "text)",
    ),
    TemplateSpec(
        name="glm4",
        description="GLM-4 chat (glm-4-9b-chat): [gMASK]<sop>, replies end at the next <|user|>.",
        prefix="[gMASK]<sop>",
        eos="<|endoftext|>",
        **_glm_turns(""),
        final_stop="<|user|>",
        source="THUDM/glm-4-9b-chat chat_template; final <|user|> as in THUDM's finetune demo",
    ),
    TemplateSpec(
        name="chatglm3",
        description="ChatGLM3-6B: [gMASK]sop, replies end at the next <|user|>.",
        prefix="[gMASK]sop",
        eos="</s>",
        **_glm_turns(" "),
        final_stop="{eos}",
        source="THUDM/chatglm3-6b chat_template; the last reply ends with </s> (EOS) as in THUDM's ChatGLM3 "
        "finetune demo",
    ),
    TemplateSpec(
        name="deepseek3",
        description="DeepSeek-V3 / V2.5 chat (<｜User｜>/<｜Assistant｜>, no reasoning).",
        prefix="{bos}",
        bos="<｜begin▁of▁sentence｜>",
        eos="<｜end▁of▁sentence｜>",
        system="{content}",
        user="<｜User｜>{content}<｜Assistant｜>",
        header="<｜Assistant｜>",
        assistant="{content}{eos}",
        source="deepseek-ai/DeepSeek-V3 chat_template (Dec 2024)",
    ),
    TemplateSpec(
        name="phi4",
        description="Phi-4 (<|im_start|>role<|im_sep|>, <|im_end|>).",
        eos="<|im_end|>",
        system="<|im_start|>system<|im_sep|>{content}<|im_end|>",
        user="<|im_start|>user<|im_sep|>{content}<|im_end|><|im_start|>assistant<|im_sep|>",
        header="<|im_start|>assistant<|im_sep|>",
        assistant="{content}<|im_end|>",
        stop_words=("<|im_end|>",),
        replace_eos=True,
        document_end="<|endoftext|>",
        source="microsoft/phi-4 chat_template",
    ),
    TemplateSpec(
        name="yi",
        description="Yi-1.5 / Yi chat (ChatML, no default system).",
        **_CHATML,
        eos="<|endoftext|>",
        document_end="<|endoftext|>",
        source="LLaMA-Factory 'yi' (ChatML); no official HF template was available to check against",
    ),
    TemplateSpec(
        name="baichuan2",
        description="Baichuan2 chat (<reserved_106> user / <reserved_107> assistant tokens).",
        bos="<s>",
        eos="</s>",
        user="<reserved_106>{content}<reserved_107>",
        header="<reserved_107>",
        assistant="{content}",
        stop_words=("</s>", "<reserved_106>"),
        role_handoff=("<reserved_106>",),
        final_stop="{eos}",
        source="baichuan-inc/Baichuan2-7B-Chat build_chat_input (no HF chat_template)",
    ),
]

SPECS.extend(VLM_SPECS)  # llava, llava_next, gemma3 (data/templates/vlm_specs.py)
SPECS.extend(REASONING_SPECS)  # deepseek, deepseekr1, gpt_oss (data/templates/reasoning_specs.py)

#: templates rendered by a Template subclass (a format a TemplateSpec alone cannot say); the others are Template
TEMPLATE_CLASSES: dict[str, type[Template]] = {"gpt_oss": HarmonyTemplate}

BY_NAME: dict[str, TemplateSpec] = {s.name: s for s in SPECS}

#: the mode that renders with the tokenizer's own chat_template
JINJA_DESCRIPTION = "The tokenizer's own chat_template (assistant spans found by rendering prefixes)."
