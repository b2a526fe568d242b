"""Resuming a full fine-tuning checkpoint whose weight names differ from the model's own.

transformers 5 saves a model in its original checkpoint layout (``save_pretrained(save_original_format=True)``, the
default): for a model with a weight conversion mapping (Qwen2-VL and the other vision-language models:
``model.language_model.*`` in memory, ``model.*`` on disk; ``visual.*`` for ``model.visual.*``) the names in a
checkpoint's ``model.safetensors`` are not the names of ``model.state_dict()``. ``Trainer._load_from_checkpoint`` loads
that file with ``model.load_state_dict(state, strict=False)`` and only warns about the missing keys: the resumed run
would continue from the weights it started with, not the checkpoint's. :class:`ConvertedCheckpointMixin` loads such a
checkpoint the way ``from_pretrained`` does (its conversion mapping), then copies it into the model with every key
checked (``strict``). A checkpoint whose names match (text models, adapters, sharded engines) takes the Trainer's path.
"""

from __future__ import annotations

import json
from pathlib import Path

SAFE_WEIGHTS, SAFE_INDEX = "model.safetensors", "model.safetensors.index.json"


def saved_weight_names(folder: Path) -> set[str] | None:
    """The tensor names of a checkpoint's safetensors weights (one file or an index), or None when it has none."""
    if (folder / SAFE_INDEX).is_file():
        return set(json.loads((folder / SAFE_INDEX).read_text(encoding="utf-8"))["weight_map"])
    if (folder / SAFE_WEIGHTS).is_file():
        from safetensors import safe_open

        with safe_open(str(folder / SAFE_WEIGHTS), framework="pt") as f:
            return set(f.keys())
    return None


def needs_conversion(model, folder: Path) -> bool:
    """True for a full ``PreTrainedModel`` checkpoint whose names are not the model's (see the module docstring)."""
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel) or getattr(model, "_hf_peft_config_loaded", False):
        return False
    names = saved_weight_names(folder)
    return names is not None and not names <= set(model.state_dict())


def load_converted(model, folder: Path) -> None:
    """The checkpoint's weights into ``model``, loaded by ``from_pretrained`` (same class, config and dtype) on the CPU."""
    import torch

    dtype = next(model.parameters()).dtype
    loaded = type(model).from_pretrained(str(folder), config=model.config, dtype=dtype, device_map="cpu")
    with torch.no_grad():
        model.load_state_dict(loaded.state_dict(), strict=True)
    del loaded


class ConvertedCheckpointMixin:
    """Trainer override: resume a full checkpoint saved in the original layout with its weights (module docstring)."""

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        target = model if model is not None else self.model
        if needs_conversion(target, Path(resume_from_checkpoint)):
            return load_converted(target, Path(resume_from_checkpoint))
        return super()._load_from_checkpoint(resume_from_checkpoint, model)
