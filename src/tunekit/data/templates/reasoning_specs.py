"""Chat templates of the DeepSeek mixture-of-experts chat models and gpt-oss (listed by the registry).

Each follows the family's official HF chat template, vendored beside this module (``official_<name>.jinja``, byte for
byte) and pinned token for token by ``tests/data/test_template_deepseek.py`` / ``test_template_gpt_oss.py``. Where
LLaMA-Factory's template of the same name differs, the official format wins (docs/templates.md says how):

- ``deepseek`` (DeepSeek-V2 / V2-Lite / V2.5-era chat, DeepSeek-LLM chat): ``User: {text}\\n\\nAssistant:``, the reply
  after a space (the official history renders ``'Assistant: ' + reply + eos``; LLaMA-Factory's has no space).
- ``deepseekr1`` (DeepSeek-R1): ``<｜User｜>{text}<｜Assistant｜>`` with a ``<think>`` block; the official generation
  prompt ends with ``<think>\\n`` (``think_prompt``), so that opening is prompt and the thought trained after it
  (LLaMA-Factory trains ``<think>\\n`` as reply text and prompts without it).
- ``gpt_oss`` (gpt-oss-20b / 120b, OpenAI's harmony format): rendered by :class:`~.harmony.HarmonyTemplate`, as the
  format's system block, developer instructions, analysis/final channels and tool calls (:mod:`.harmony_tools`) do not
  fit a :class:`TemplateSpec`.
"""

from __future__ import annotations

from .spec import TemplateSpec

_DEEPSEEK_TOKENS = dict(bos="<｜begin▁of▁sentence｜>", eos="<｜end▁of▁sentence｜>")

REASONING_SPECS: list[TemplateSpec] = [
    TemplateSpec(
        name="deepseek",
        description="DeepSeek-V2 / V2-Lite chat ('User: ...\\n\\nAssistant:'; the reply after a space).",
        prefix="{bos}",
        **_DEEPSEEK_TOKENS,
        system="{content}\n\n",
        user="User: {content}\n\nAssistant:",
        header="Assistant:",
        assistant=" {content}{eos}",
        source="deepseek-ai/DeepSeek-V2-Lite-Chat tokenizer_config.json chat_template (official_deepseek.jinja; the "
        "same as DeepSeek-V2-Chat's and deepseek-llm-7b-chat's); LLaMA-Factory 'deepseek' has no space before the "
        "reply",
    ),
    TemplateSpec(
        name="deepseekr1",
        description="DeepSeek-R1 (<｜User｜>/<｜Assistant｜>, <think> blocks; the prompt opens the thought).",
        prefix="{bos}",
        **_DEEPSEEK_TOKENS,
        system="{content}",
        user="<｜User｜>{content}<｜Assistant｜>",
        header="<｜Assistant｜>",
        assistant="{content}{eos}",
        reasoning=True,
        think_prompt="<think>\n",
        source="deepseek-ai/DeepSeek-R1 tokenizer_config.json chat_template (official_deepseekr1.jinja: the revision "
        "whose generation prompt ends with '<think>\\n'); LLaMA-Factory 'deepseekr1' reasoning semantics; tools in "
        "LLaMA-Factory's 'default' format (not R1's own tool tokens)",
    ),
    TemplateSpec(
        name="gpt_oss",
        description="gpt-oss (OpenAI harmony: system block, developer instructions, analysis/final channels).",
        system="<|start|>developer<|message|># Instructions\n\n{content}\n\n<|end|>",
        user="<|start|>user<|message|>{content}<|end|><|start|>assistant",
        header="<|start|>assistant",
        assistant="<|channel|>final<|message|>{content}<|return|>",
        eos="<|return|>",
        stop_words=("<|return|>", "<|call|>"),
        document_end="<|endoftext|>",
        tool_format=None,  # HarmonyTemplate writes tools itself (harmony_tools.py); its tool_format is 'harmony'
        reasoning=True,
        source="openai/gpt-oss-20b chat_template.jinja (official_gpt_oss.jinja, as llama.cpp vendors it: "
        "models/templates/openai-gpt-oss-120b.jinja); LLaMA-Factory 'gpt_oss' enable_thinking semantics",
    ),
]
