"""The declarative description of a chat template (what the registry lists), free of any tokenizer.

Format strings hold ``{content}`` plus the placeholders ``{bos}`` / ``{eos}``, which become the tokenizer's
BOS/EOS strings (or the family's standard ones when no tokenizer is given).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class TemplateSpec:
    name: str
    description: str
    #: first prompt only (BOS, ``[gMASK]<sop>`` ...)
    prefix: str = ""
    #: the system block; where it goes is ``system_in``
    system: str = "{content}"
    #: ``block``: after the prefix; ``first_user`` / ``last_user``: glued in front of that user message
    system_in: Literal["block", "first_user", "last_user"] = "block"
    #: a user message followed by the assistant header (the generation prompt ends with ``header``)
    user: str = "{content}"
    #: the trailing part of ``user`` / ``observation`` that opens the assistant turn ("" if none)
    header: str = ""
    #: the reply: content + end-of-turn marker (``{eos}`` or the stop token)
    assistant: str = "{content}{eos}"
    #: a tool result (default: like ``user``)
    observation: str | None = None
    #: a function-call reply (default: like ``assistant``)
    function: str | None = None
    #: text between an end-of-turn marker and the next user message (belongs to the next prompt)
    sep: str = ""
    default_system: str | None = None
    #: extra stop strings besides EOS (the first one is the end-of-turn marker)
    stop_words: tuple[str, ...] = ()
    #: a content starting with one of these drops the space that ends the text before it (Idefics3 / SmolVLM:
    #: ``User: text`` but ``User:<image>...``, the official template's rule for a message whose first part is an image)
    tight_before: tuple[str, ...] = ()
    #: which roles' contents the official template strips (``| trim``)
    trim: frozenset[str] = field(default_factory=frozenset)
    #: llama2: the system is merged into the first user message and then the whole thing is stripped
    trim_after_merge: bool = False
    #: tool format name in ``tools.TOOL_FORMATS``; None: the template cannot express tools
    tool_format: str | None = "default"
    #: ``fix_tokenizer`` makes the first stop word the EOS token (LLaMA-Factory's replace_eos)
    replace_eos: bool = False
    #: GLM-style templates have no end-of-turn token: the next role token ends a reply, so it is moved
    #: from the next prompt into the reply (trained), and ``final_stop`` ends the last reply
    role_handoff: tuple[str, ...] = ()
    final_stop: str = ""
    #: the family's standard special-token strings (used when no tokenizer is given)
    bos: str = ""
    eos: str = "</s>"
    #: the vocabulary's end-of-document token, which ``stage: pt`` puts after every document. Declare it when
    #: it is not the chat end-of-turn (``replace_eos`` templates, instruct tokenizers whose EOS is the
    #: end-of-turn: ``<|end_of_text|>`` for Llama 3, ``<|endoftext|>`` for Qwen); None: the tokenizer's EOS
    document_end: str | None = None
    #: the prefix's ``{bos}`` is emitted only when the tokenizer itself adds a BOS token on encode
    auto_bos: bool = False
    #: Qwen3-style ``<think>`` handling
    reasoning: bool = False
    #: reasoning templates whose generation prompt opens the thought (DeepSeek-R1: ``<think>\n``): that text ends every
    #: prompt whose reply is generated or trained with its thought, so a trained thought starts after it
    think_prompt: str = ""
    #: official HF template shipped in this package (``<file>.jinja``), used for export
    official_jinja: str | None = None
    #: where the format comes from (shown by ``tunekit templates NAME``)
    source: str = ""
