"""Resuming a full fine-tuning checkpoint whose weight names differ from the model's own.

transformers 5 saves a model in its original checkpoint layout (``save_pretrained(save_original_format=True)``, the
default): for a model with a weight conversion mapping (Qwen2-VL and the other vision-language models:
``model.language_model.*`` in memory, ``model.*`` on disk; ``visual.*`` for ``model.visual.*``) the names in a
checkpoint's ``model.safetensors`` are not the names of ``model.state_dict()``. ``Trainer._load_from_checkpoint`` loads
that file with ``model.load_state_dict(state, strict=False)`` and only warns about the missing keys: the resumed run
would continue from the weights it started with, not the checkpoint's. :class:`CheckpointWeightsMixin` loads such a
checkpoint the way ``from_pretrained`` does (its conversion mapping), then copies it into the model with every key
checked (``strict``). A checkpoint whose names match (text models, adapters, sharded engines) takes the Trainer's path.

Saving under DeepSpeed ZeRO-3: a model loaded partitioned (``zero.Init``) records every conversion of its family,
the legacy ones included, and reverting them all renames Qwen2-VL's ``model.language_model.layers.*`` to
``model.model.layers.*``, names that ``from_pretrained`` does not map back (the saved folder would load as random
weights). A vision-language model under ZeRO-3 is therefore saved with the names it has in memory
(``save_original_format=False``, the layout transformers 4.52-4.57 wrote), which ``from_pretrained`` loads unchanged.

:class:`CheckpointWeightsMixin` holds tunekit's one override of the Trainer's ``_save`` and ``_load_from_checkpoint``,
for every model tunekit trains: a model sharded by FSDP2 resumes its own sharded state (``engines/fsdp.py``), a
reward model or PPO critic (``stages/value_head.py``) saves and resumes ``value_head.safetensors`` beside its LM, and
a P-Tuning v2 prefix with ``prefix_projection`` saves and resumes its whole prefix encoder (embeddings + MLP) in
``prefix_encoder.safetensors`` beside the adapter, which holds only the MLP's output (``model/prompt_adapters.py``),
so a resumed run continues the MLP exactly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import PreTrainedModel
from transformers.integrations import is_deepspeed_zero3_enabled
from transformers.trainer import TRAINING_ARGS_NAME

from ..config.problems import Said
from ..errors import ModelError
from ..model.multimodal import is_multimodal_config
from ..model.prompt_adapters import ENCODER_FILE, load_prefix_encoder, projected_prefix, save_prefix_encoder
from .engines.fsdp import is_sharded, load_model_state, refuse_fsdp_checkpoint
from .stages.value_head import ValueHeadModel

SAFE_WEIGHTS, SAFE_INDEX = "model.safetensors", "model.safetensors.index.json"


def saved_weight_names(folder: Path) -> set[str] | None:
    """The tensor names of a checkpoint's safetensors weights (one file or an index), or None when it has none."""
    if (folder / SAFE_INDEX).is_file():
        return set(json.loads((folder / SAFE_INDEX).read_text(encoding="utf-8"))["weight_map"])
    if (folder / SAFE_WEIGHTS).is_file():
        with safe_open(str(folder / SAFE_WEIGHTS), framework="pt") as f:
            return set(f.keys())
    return None


def needs_conversion(model, folder: Path) -> bool:
    """True for a full ``PreTrainedModel`` checkpoint whose names are not the model's (see the module docstring)."""
    if not isinstance(model, PreTrainedModel) or getattr(model, "_hf_peft_config_loaded", False):
        return False
    names = saved_weight_names(folder)
    return names is not None and not names <= set(model.state_dict())


def load_converted(model, folder: Path) -> None:
    """The checkpoint's weights into ``model``, loaded by ``from_pretrained`` (same class, config and dtype) on the
    CPU."""
    dtype = next(model.parameters()).dtype
    loaded = type(model).from_pretrained(str(folder), config=model.config, dtype=dtype, device_map="cpu")
    with torch.no_grad():
        model.load_state_dict(loaded.state_dict(), strict=True)
    del loaded


def keeps_memory_layout(model) -> bool:
    """A vision-language model under ZeRO-3: saved with its in-memory names (see the module docstring)."""
    return is_deepspeed_zero3_enabled() and is_multimodal_config(getattr(model, "config", None))


def own_save_options(model) -> dict | None:
    """The ``save_pretrained`` options tunekit saves ``model`` with, or None where the Trainer's ``_save`` is right: a
    value-head model (the LM or adapter + ``value_head.safetensors``) and a VLM under ZeRO-3 (its in-memory names)."""
    lm = model.pretrained_model if isinstance(model, ValueHeadModel) else model
    layout = {"save_original_format": False} if isinstance(lm, PreTrainedModel) and keeps_memory_layout(lm) else {}
    if isinstance(model, ValueHeadModel):
        return {"safe_serialization": True, **layout}
    return layout or None


def refuse_without_encoder(found: bool, folder: str) -> None:
    """A ``prefix_projection`` checkpoint cannot resume without the prefix encoder tunekit saves beside it."""
    if not found:
        raise ModelError(Said("ckpt_no_prefix_encoder", path=str(folder), file=ENCODER_FILE))


class CheckpointWeightsMixin:
    """Trainer overrides that save and resume the model's weights: a value-head model with its head, a VLM under ZeRO-3
    with its in-memory names, a full checkpoint saved in the original layout with its weights, an FSDP2 model from
    its sharded state (module docstring)."""

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        model = self.accelerator.unwrap_model(self.model)
        options = own_save_options(model)
        if options is None:
            super()._save(output_dir, state_dict)
        elif self.args.should_save:  # (the Trainer gathered the ZeRO-3 state dict on every rank already)
            os.makedirs(output_dir, exist_ok=True)
            model.save_pretrained(output_dir, state_dict=state_dict, **options)
            if self.processing_class is not None:
                self.processing_class.save_pretrained(output_dir)
            torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))
        lm = model.pretrained_model if isinstance(model, ValueHeadModel) else model
        if self.args.should_save and projected_prefix(lm):  # beside the adapter (module docstring)
            save_prefix_encoder(lm, output_dir, state_dict)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        head = self.accelerator.unwrap_model(model if model is not None else self.model)
        if isinstance(head, ValueHeadModel):  # the LM as any other, then the head beside it
            model = head.pretrained_model
        if is_sharded(self.model):
            load_model_state(self.model, resume_from_checkpoint)
        else:
            refuse_fsdp_checkpoint(resume_from_checkpoint)
            target = model if model is not None else self.model
            prefix = self.accelerator.unwrap_model(target)
            if needs_conversion(target, Path(resume_from_checkpoint)):
                load_converted(target, Path(resume_from_checkpoint))
            elif projected_prefix(prefix):  # the whole prefix encoder: the adapter file holds only the MLP's output
                refuse_without_encoder(load_prefix_encoder(prefix, resume_from_checkpoint), resume_from_checkpoint)
            else:
                super()._load_from_checkpoint(resume_from_checkpoint, model)
        if isinstance(head, ValueHeadModel):
            head.load_value_head(resume_from_checkpoint)
