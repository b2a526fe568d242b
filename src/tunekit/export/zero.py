"""DeepSpeed ZeRO checkpoints (``global_step*/`` with sharded model/optimizer states) -> a normal model folder.

The consolidation itself is DeepSpeed's own ``deepspeed.utils.zero_to_fp32`` (the script every ZeRO
checkpoint ships); tunekit adds detection, the config/tokenizer files next to the weights, and errors
that say what is missing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import EnvironmentProblem, ModelError

#: files copied next to the consolidated weights (whatever the checkpoint has of them)
SIDE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
              "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json")


def zero_tag(folder: str | Path) -> str | None:
    """The ``global_step*`` tag of a ZeRO checkpoint folder, or None if ``folder`` is not one."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    latest = folder / "latest"
    tags = [latest.read_text().strip()] if latest.is_file() else sorted(p.name for p in folder.glob("global_step*") if p.is_dir())
    for tag in reversed(tags):
        if any((folder / tag).glob("*model_states.pt")):
            return tag
    return None


def consolidate_zero(checkpoint_dir: str | Path, out_dir: str | Path, max_shard_size: int | str = "5GB") -> Path:
    """Write fp32 safetensors (+ index when sharded) and the checkpoint's config/tokenizer files to ``out_dir``."""
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    tag = zero_tag(checkpoint_dir)
    if tag is None:
        raise ModelError(f"{checkpoint_dir} is not a DeepSpeed ZeRO checkpoint: it has no global_step*/ folder with "
                         f"*_model_states.pt files (and no 'latest' file naming one).")
    if not (checkpoint_dir / "config.json").is_file():
        raise ModelError(f"{checkpoint_dir} has ZeRO weights but no config.json; copy the model's config.json into it "
                         f"(the weights alone do not say which architecture they belong to).")
    try:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    except ImportError:
        raise EnvironmentProblem("consolidating a ZeRO checkpoint needs deepspeed: pip install 'tunekit[deepspeed]'.") from None
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    state = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint_dir), tag=tag)
    # Through the model (not DeepSpeed's own safetensors writer, which refuses tied embeddings): transformers
    # saves tied weights once, shards, and writes the index.
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(checkpoint_dir), dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    model.tie_weights()
    params = dict(model.named_parameters(remove_duplicate=False))
    untied_missing = [k for k in missing if k in params and not _shared_with_loaded(params, k, state)]
    if unexpected or untied_missing:
        raise ModelError(f"the ZeRO states of {checkpoint_dir} do not fit its config.json (missing: {untied_missing[:5]}, "
                         f"unexpected: {list(unexpected)[:5]}): was it saved from a PEFT/LoRA model? Adapters are saved "
                         f"as adapter_model.safetensors next to the checkpoint; export those with adapter_name_or_path.")
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, max_shard_size=max_shard_size)
    for name in SIDE_FILES:
        if name != "config.json" and (checkpoint_dir / name).is_file():
            shutil.copy2(checkpoint_dir / name, out_dir / name)
    return out_dir


def _shared_with_loaded(params: dict, key: str, state: dict) -> bool:
    """A tied parameter (lm_head = embed_tokens) counts as loaded when the one it shares storage with was."""
    ptr = params[key].data_ptr()
    return any(params[k].data_ptr() == ptr for k in state if k in params and k != key)
