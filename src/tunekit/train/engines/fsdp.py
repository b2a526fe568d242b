"""FSDP2 (``fsdp: full_shard | shard_grad_op`` [+ ``offload``]): tunekit shards the model itself, on GPUs and CPUs
alike.

Why not accelerate's FSDP plugin (transformers' ``fsdp=True`` + ``fsdp_config``): accelerate 1.15 turns FSDP on
only for accelerator backends; on a CPU the same settings silently train as DDP. Applying ``fully_shard``
ourselves runs one code path everywhere (NCCL on GPUs, gloo on CPUs), so the CPU tests check exactly what GPU
users run. What it does, and where:

- :func:`shard` (called by :class:`FSDPTrainerMixin` before the Trainer is built, so the optimizer is created
  from the sharded parameters): a 1-D device mesh over all ranks; ``fully_shard`` on every decoder layer (the
  model's ``_no_split_modules`` classes, or those ``fsdp_transformer_layer_cls_to_wrap`` names), then on the
  root, which holds the rest (embeddings, tied head, final norm; a LoRA model's non-layer modules).
  ``reshard_after_forward``: True for full_shard (parameters gathered again for backward, ZeRO-3 like), False
  for shard_grad_op (kept gathered from forward to backward, ZeRO-2 like). ``offload``: ``CPUOffloadPolicy``
  (sharded parameters, gradients and the optimizer step on the CPU). bf16: ``MixedPrecisionPolicy``
  (compute in bf16, fp32 master weights, gradients reduced in fp32). Frozen and trainable parameters may share a
  unit (LoRA, freeze); the trainable ones of a unit must share a dtype, which tunekit's fp32 upcast ensures.
- The Trainer then sees a plain distributed run. The sharded model carries accelerate's ``_is_accelerate_prepared``
  marker, so ``Accelerator.prepare`` leaves it as it is instead of wrapping it in DDP (which refuses DTensors).
  Gradients are reduce-scattered (averaged) after every backward, micro-batches of an accumulation included.
  Clipping is the Trainer's: ``clip_grad_norm_`` over DTensor gradients gives the global norm.
- Saving (:func:`full_state_dict`): every rank takes part in gathering the full state dict to rank 0's CPU,
  which writes a normal folder (``model.safetensors`` / ``adapter_model.safetensors`` + config).
- Checkpoints: the same folder, plus ``fsdp_state/`` — the trainable parameters and the optimizer state,
  sharded, written by every rank with ``torch.distributed.checkpoint`` (no full optimizer state on one
  rank). ``resume_from_checkpoint`` loads both back, and the scheduler and RNG states as usual, so training
  continues at the exact step. A multi-machine run resumes only from a folder every machine can read.

Compared with accelerate's FSDP2 on GPUs (what ``fsdp=True`` would have run there): the same ``fully_shard`` per
decoder layer and at the root; not copied: a separate unit for untied embeddings and for the final norm + head
(a communication-overlap tweak), ``no_sync`` during accumulation (gathers full gradients for the whole
window: less communication, more memory), and ``cpu_ram_efficient_loading`` (every rank loads the full model into
CPU memory before sharding, as tunekit's DDP does). If accelerate ever drops the ``_is_accelerate_prepared``
check, the failure is loud: its "DTensor parameters ... incompatible with DDP" error at the first step.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch

from ...config.problems import Said, config_error
from . import distributed

STATE_DIR = "fsdp_state"  # inside checkpoint-N/: the sharded resume state (torch.distributed.checkpoint)
SCHEDULER_NAME = "scheduler.pt"  # transformers' name, so a checkpoint looks like any other


def is_sharded(model) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def reshard(model) -> None:
    """Register the sharded parameters again. A forward without backward (evaluation, DPO's precomputed reference)
    leaves units with ``reshard_after_forward=False`` (shard_grad_op, the root) holding gathered ones; an optimizer
    built then, or a state dict taken then, would see those. No-op for any other model."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


# ------------------------------------------------------------------ sharding
def shard(model, settings, device: torch.device):
    """Apply FSDP2 to ``model`` in place (see the module docstring) and return it."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    if not (dist.is_available() and dist.is_initialized()):
        raise config_error("fsdp_no_distributed", ("fsdp",), strategy=str(settings.strategy))
    units = wrap_units(model, settings)
    _check_trainable_dtypes(model, units)

    kwargs: dict = {"mesh": init_device_mesh(device.type, (dist.get_world_size(),))}
    if settings.offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=device.type == "cuda")
    if settings.mixed_precision == "bf16":
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for unit in reversed(units):  # inner units first: a unit manages the parameters no inner unit took
        fully_shard(unit, reshard_after_forward=settings.reshard_after_forward, **kwargs)
    # The root: torch keeps its parameters gathered from forward to backward (they are needed first in backward).
    fully_shard(model, reshard_after_forward=None, **kwargs)
    model.register_forward_hook(_reshard_after_no_grad_forward)
    # accelerate's own "already prepared" marker: Accelerator.prepare returns the model unchanged (no DDP wrapper).
    model._is_accelerate_prepared = True
    return model


def wrap_units(model, settings) -> list:
    """The modules sharded as their own unit: those of the named classes (every name must exist in ``model``), else
    of the model's ``_no_split_modules`` classes."""
    classes = set(settings.wrap_classes) or _no_split_modules(model)
    missing = sorted(classes - {type(m).__name__ for m in model.modules() if m is not model})
    if settings.wrap_classes and missing:
        own = ", ".join(sorted(_layer_classes(model))) or Said("part_none")
        raise config_error(
            "fsdp_wrap_classes_missing",
            ("fsdp_transformer_layer_cls_to_wrap",),
            missing=tuple(missing),
            name=type(model).__name__,
            own=own,
        )
    units = [m for m in model.modules() if type(m).__name__ in classes and m is not model]
    if not units:
        raise config_error(
            "fsdp_no_wrap_class",
            ("fsdp_transformer_layer_cls_to_wrap",),
            name=type(model).__name__,
            classes=", ".join(sorted(classes)),
        )
    return units


def _reshard_after_no_grad_forward(model, args, output):
    """A forward without autograd (evaluation, a DPO/KTO reference) has no backward to wait for: shard again.

    Besides freeing memory, this keeps ``requires_grad`` right: FSDP2 copies it from the sharded parameters to
    the gathered ones, and PEFT's ``disable_adapter()`` (the LoRA reference) sets it on whichever are registered
    when it is entered and left. Left while the gathered ones were registered, the sharded LoRA weights would
    stay frozen.
    """
    if not torch.is_grad_enabled():
        reshard(model)
    return output


def _no_split_modules(model) -> set[str]:
    """The decoder layer classes transformers never splits across devices (``_no_split_modules``)."""
    names = _layer_classes(model)
    if not names:
        raise config_error("fsdp_no_layer_class", ("fsdp_transformer_layer_cls_to_wrap",), name=type(model).__name__)
    return names


def _layer_classes(model) -> set[str]:
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    return names


def _check_trainable_dtypes(model, units) -> None:
    """FSDP2 flattens the trainable parameters of one unit into one buffer per dtype it expects just one of."""
    owner = {}
    for unit in reversed(units):  # inner units first, as they are sharded
        for p in unit.parameters():
            owner.setdefault(id(p), unit)
    groups: dict[int, set] = {}
    for p in model.parameters():
        if p.requires_grad:
            groups.setdefault(id(owner.get(id(p), model)), set()).add(p.dtype)
    mixed = [dtypes for dtypes in groups.values() if len(dtypes) > 1]
    if mixed:
        shown = ", ".join(str(d).replace("torch.", "") for d in sorted(mixed[0], key=str))
        raise config_error("fsdp_mixed_dtypes", ("fsdp",), dtypes=shown)


# ------------------------------------------------------------------ saving
def full_state_dict(model) -> dict:
    """The full state dict on rank 0's CPU (an empty dict on the other ranks); every rank must call it.

    Parameters shared by several names (tied embeddings) come back as one tensor, so ``save_pretrained``
    drops the copies exactly as it does for an unsharded model.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    reshard(model)
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    first: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if name in state and id(param) in first and first[id(param)] in state:
            state[name] = state[first[id(param)]]
        first.setdefault(id(param), name)
    return state


# ------------------------------------------------------------------ checkpoints (resume)
def _raw_optimizer(optimizer):
    while hasattr(optimizer, "optimizer"):  # accelerate's AcceleratedOptimizer
        optimizer = optimizer.optimizer
    return optimizer


def _model_options():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True)  # frozen weights come from the base model, as in the first run


def save_state(model, optimizer, folder: str | os.PathLike) -> None:
    """Write the trainable parameters and the optimizer state, sharded, to ``folder/fsdp_state`` (all ranks)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    reshard(model)
    state = {
        "model": get_model_state_dict(model, options=_model_options()),
        "optimizer": get_optimizer_state_dict(model, _raw_optimizer(optimizer)),
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*TypedStorage is deprecated.*")
        dcp.save(state, checkpoint_id=str(Path(folder) / STATE_DIR))


def _state_dir(folder: str | os.PathLike) -> Path:
    path = Path(folder) / STATE_DIR
    if not (path / ".metadata").is_file():
        raise config_error("fsdp_no_state", ("resume_from_checkpoint",), path=str(folder), state=STATE_DIR)
    return path


def load_model_state(model, folder: str | os.PathLike) -> None:
    """Load the trainable parameters saved by :func:`save_state` into the sharded model (all ranks)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    path = _state_dir(folder)
    reshard(model)
    state = {"model": get_model_state_dict(model, options=_model_options())}
    dcp.load(state, checkpoint_id=str(path))
    set_model_state_dict(model, state["model"], options=_model_options())


def refuse_fsdp_checkpoint(folder: str | os.PathLike) -> None:
    """A checkpoint written by an fsdp run cannot resume a run that is not sharded (its optimizer state is)."""
    if (Path(folder) / STATE_DIR).is_dir():
        raise config_error("fsdp_checkpoint_sharded", ("resume_from_checkpoint", "fsdp"), path=str(folder))


def load_optimizer_state(model, optimizer, folder: str | os.PathLike) -> None:
    """Load the optimizer state saved by :func:`save_state` (all ranks; the optimizer holds the sharded parameters)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    path = _state_dir(folder)
    reshard(model)
    optimizer = _raw_optimizer(optimizer)
    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    dcp.load(state, checkpoint_id=str(path))
    set_optimizer_state_dict(model, optimizer, state["optimizer"])


# ------------------------------------------------------------------ the Trainer's side
class FSDPTrainerMixin:
    """Trainer overrides for a model sharded by :func:`shard`; every one is a no-op for any other model.

    Mixed into ``TunekitTrainer`` (before ``transformers.Trainer``). Expects ``self.tunekit_config``. The model weights
    of a checkpoint are resumed by ``checkpoint_weights.CheckpointWeightsMixin`` (:func:`load_model_state`).
    """

    def __init__(self, *args, **kwargs):

        cfg = getattr(self, "tunekit_config", None)
        settings = distributed.fsdp_settings(cfg) if cfg is not None else None
        if settings is not None:
            model = kwargs["model"] if "model" in kwargs else args[0]
            device = (kwargs["args"] if "args" in kwargs else args[1]).device  # starts the process group on GPUs
            shard(model, settings, device)  # in place: the Trainer gets the same (now sharded) module
        super().__init__(*args, **kwargs)

    def _move_model_to_device(self, model, device):
        if not is_sharded(model):  # fully_shard placed the shards (offloaded ones stay on the CPU)
            super()._move_model_to_device(model, device)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        if not is_sharded(self.model):
            return super().save_model(output_dir, _internal_call)
        self._save(output_dir or self.args.output_dir, state_dict=full_state_dict(self.model))  # rank 0 writes

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        if not is_sharded(self.model):
            return super()._save_optimizer_and_scheduler(output_dir)
        save_state(self.model, self.optimizer, output_dir)
        if self.args.should_save:
            torch.save(self.lr_scheduler.state_dict(), os.path.join(output_dir, SCHEDULER_NAME))

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        if checkpoint is None or not is_sharded(self.model):
            return super()._load_optimizer_and_scheduler(checkpoint)
        load_optimizer_state(self.model, self.optimizer, checkpoint)
        self.lr_scheduler.load_state_dict(torch.load(os.path.join(checkpoint, SCHEDULER_NAME), weights_only=True))

    def _load_best_model(self) -> None:
        if not is_sharded(self.model):
            return super()._load_best_model()
        load_model_state(self.model, self.state.best_model_checkpoint)
