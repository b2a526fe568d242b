"""Resuming a full fine-tuning checkpoint whose weight names differ from the model's own.

transformers 5 saves a model in its original checkpoint layout (``save_pretrained(save_original_format=True)``, the
default): for a model with a weight conversion mapping (Qwen2-VL and the other vision-language models:
``model.language_model.*`` in memory, ``model.*`` on disk; ``visual.*`` for ``model.visual.*``) the names in a
checkpoint's ``model.safetensors`` are not the names of ``model.state_dict()``. ``Trainer._load_from_checkpoint`` loads
that file with ``model.load_state_dict(state, strict=False)`` and only warns about the missing keys: the resumed run
would continue from the weights it started with, not the checkpoint's. :class:`ConvertedCheckpointMixin` loads such a
checkpoint the way ``from_pretrained`` does (its conversion mapping), then copies it into the model with every key
checked (``strict``). A checkpoint whose names match (text models, adapters, sharded engines) takes the Trainer's path.

Saving under DeepSpeed ZeRO-3: a model loaded partitioned (``zero.Init``) records every conversion of its family,
the legacy ones included, and reverting them all renames Qwen2-VL's ``model.language_model.layers.*`` to
``model.model.layers.*``, names that ``from_pretrained`` does not map back (the saved folder would load as random
weights). A vision-language model under ZeRO-3 is therefore saved with the names it has in memory
(``save_original_format=False``, the layout transformers 4.52-4.57 wrote), which ``from_pretrained`` loads unchanged.
"""

from __future__ import annotations

import json
import os
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


def keeps_memory_layout(model) -> bool:
    """A vision-language model under ZeRO-3: saved with its in-memory names (see the module docstring)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    from ..model.multimodal import is_multimodal_config

    return is_deepspeed_zero3_enabled() and is_multimodal_config(getattr(model, "config", None))


class ConvertedCheckpointMixin:
    """Trainer overrides: resume a full checkpoint saved in the original layout with its weights; save a VLM under ZeRO-3
    with its in-memory names (module docstring)."""

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        from transformers import PreTrainedModel
        from transformers.trainer import TRAINING_ARGS_NAME

        model = self.accelerator.unwrap_model(self.model)
        if not isinstance(model, PreTrainedModel) or not keeps_memory_layout(model):
            return super()._save(output_dir, state_dict)
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if not self.args.should_save:  # the Trainer gathered the ZeRO-3 state dict on every rank already
            return
        os.makedirs(output_dir, exist_ok=True)
        model.save_pretrained(output_dir, state_dict=state_dict, save_original_format=False)
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)
        import torch

        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        target = model if model is not None else self.model
        if needs_conversion(target, Path(resume_from_checkpoint)):
            return load_converted(target, Path(resume_from_checkpoint))
        return super()._load_from_checkpoint(resume_from_checkpoint, model)
