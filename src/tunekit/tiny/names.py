"""What ``tunekit tiny-model --like NAME`` builds: a model name read strictly, never replaced by something else.

A name is a family prefix (``qwen2.5``, ``llama``, ``gemma-2`` ...) followed only by words that do not change the
architecture (sizes ``7b`` / ``0.5b``, versions ``3.1`` / ``v0.3``, ``instruct``, ``chat``, ``it`` ...). A
mixture-of-experts marker (``a3b`` in ``qwen3-30b-a3b``, ``moe``) selects the family's MoE architecture where
tunekit builds one; any other word (``vl``, ``omni``, ``next``, a newer version such as ``qwen3.5``) means an
architecture tunekit does not build, and the name is refused with the list of what it builds. This module imports
nothing of tunekit's model code, so the text (``text.py``) and vision-language (``vlm.py``) builders share it.
"""

from __future__ import annotations

import re

from tunekit.errors import ModelError

#: --like name -> model_type of a vision-language / audio-language family (built by vlm.py and its modules)
VLM_FAMILIES = {
    "qwen2-vl": "qwen2_vl",
    "qwen2_vl": "qwen2_vl",
    "qwen2.5-vl": "qwen2_5_vl",
    "qwen2_5_vl": "qwen2_5_vl",
    "qwen3-vl": "qwen3_vl",
    "qwen3_vl": "qwen3_vl",
    "qwen2-audio": "qwen2_audio",
    "qwen2_audio": "qwen2_audio",
    "llava": "llava",
    "llava-1.5": "llava",
    "llava1.5": "llava",
    "llava-next": "llava_next",
    "llava_next": "llava_next",
    "llava-1.6": "llava_next",
    "llava-next-mistral": "llava_next_mistral",  # LLaVA-NeXT on Mistral (llava_next.py)
    "llava_next_mistral": "llava_next_mistral",
    "llava-next-llama3": "llava_next_llama3",
    "llava_next_llama3": "llava_next_llama3",
    "gemma3": "gemma3",
    "gemma-3-vl": "gemma3",
    "smolvlm": "smolvlm",
    "smolvlm2": "smolvlm",
    "idefics3": "idefics3",
    "smolvlm1": "idefics3",
}

#: Names people write for a model -> text family key (``text.FAMILIES``). Checked in order on the lower-cased name
#: (its last path component); a prefix must end where the family's name ends (``qwen3`` is not ``qwen3.5``).
ALIASES: list[tuple[str, str]] = [
    (r"qwen3(?![.\d])", "qwen3"),
    (r"qwen(2|1\.5|-?1\.5|2\.5)?(?![.\d])", "qwen2"),
    (r"gemma-?3(?![.\d])", "gemma3_text"),
    (r"gemma-?2(?![.\dbm])", "gemma2"),
    (r"gemma(?![.\d])", "gemma"),
    (r"mistral|ministral", "mistral"),
    (r"mixtral(?![.\d])", "mixtral"),  # Mixtral-8x7B / 8x22B: a mixture of experts (tiny/moe.py)
    (r"llama(?!-?4)|yi-|deepseek-r1-distill-llama", "llama"),
    # DeepSeek-V3 / V3.1 / R1 share one architecture (tiny/moe.py); V3.2's sparse attention and V2-Lite differ
    (r"deepseek-?(v3(\.1)?|r1)(?![.\d]|-distill)", "deepseek_v3"),
    (r"deepseek-?v2(?![.\d])", "deepseek_v2"),  # DeepSeek-V2 (and -Chat); V2.5 has its own config
    (r"gpt-?oss(?![.\d])", "gpt_oss"),  # gpt-oss-20b / gpt-oss-120b
    (r"glm-?4-9b-chat", "glm"),  # glm-4-9b-chat(-hf): transformers' GlmForCausalLM port of its remote-code model
    (r"glm-?4(?![.\dvz])", "glm4"),  # GLM-4-9B-0414 / GLM-4-32B-0414 (Glm4ForCausalLM); not GLM-4.5, GLM-4V
]
#: names of models that exist only as remote code (no transformers class): refused with what to build instead
REMOTE_CODE = {
    "chatglm": "ChatGLM's model (model_type chatglm) exists only as remote code, which tunekit does not run; "
    "glm4 builds GLM-4-9B-0414's native architecture"
}
#: text family -> its mixture-of-experts family, selected by an ``a<N>b`` (active parameters) or ``moe`` word
MOE_OF = {"qwen3": "qwen3_moe", "qwen2": "qwen2_moe"}

_PLAIN_WORD = re.compile(
    r"(\d+(\.\d+)*[bmk]?|\d+x\d+(\.\d+)?b|v\d+(\.\d+)*|\d{4}|instruct|chat|base|it|hf|pt|coder|math|distill|"
    r"thinking|nemo|r1)"
)
_MOE_WORD = re.compile(r"a\d+(\.\d+)?b|moe")
_KNOWN_VARIANTS = {
    "vl": "a vision-language model",
    "vision": "a vision-language model",
    "omni": "an omni (audio-visual) model",
    "audio": "an audio-language model",
    "next": "a hybrid-attention model (Qwen3-Next)",
    "moe": "a mixture-of-experts model",
}


def buildable(text_families) -> str:
    """The --like names tunekit builds (``text_families``: tiny.FAMILIES' keys), for messages."""
    vlm = sorted({k for k in VLM_FAMILIES if "_" not in k})
    return (
        f"text: {', '.join(sorted(text_families))} (and names such as qwen2.5-7b, llama-3.1-8b, qwen3-30b-a3b); "
        f"vision-language / audio: {', '.join(vlm)}; or a path to a config.json / model folder"
    )


def refuse(like, why: str, text_families) -> ModelError:
    return ModelError(f"tiny-model: tunekit cannot build '{like}' ({why}); it builds {buildable(text_families)}.")


def family_of_name(like: str, families) -> str:
    """The text family key a model name stands for, or a ModelError naming what it is and what tunekit builds."""
    name = str(like).strip().lower().rsplit("/", 1)[-1]
    if name in VLM_FAMILIES:
        raise refuse(like, "a vision-language family: tunekit.tiny.vlm.build_tiny_vlm builds it", families)
    if name in families:
        return name
    remote = next((why for prefix, why in REMOTE_CODE.items() if name.startswith(prefix)), None)
    if remote:
        raise refuse(like, remote, families)
    match = next(((m, fam) for pat, fam in ALIASES if (m := re.match(pat, name))), None)
    if match is None:
        raise refuse(like, "an unknown family", families)
    m, family = match
    words = [w for w in re.split(r"[-_\s]+", name[m.end() :]) if w]
    moe = [w for w in words if _MOE_WORD.fullmatch(w)]
    others = [w for w in words if not _MOE_WORD.fullmatch(w) and not _PLAIN_WORD.fullmatch(w)]
    if others:
        what = [_KNOWN_VARIANTS[w] for w in others if w in _KNOWN_VARIANTS] + (
            ["a mixture-of-experts model"] if moe else []
        )
        why = " and ".join(dict.fromkeys(what)) or f"'{'-'.join(others)}' is not a {family} variant tunekit knows"
        raise refuse(like, f"{name} is {why}" if what else why, families)
    if moe:
        if family not in MOE_OF:
            raise refuse(
                like, f"a mixture-of-experts {family} model ('{moe[0]}'), which tunekit does not build", families
            )
        return MOE_OF[family]
    return family
