"""Keep cheap activations out of autograd's saved tensors and recompute them in backward (``elementwise_recompute``).

A decoder layer that is not checkpointed keeps, per token, everything its backward needs. Most of it is the gated
MLP's: the gate output ``g``, the activation's output ``s = act(g)``, the up output ``u`` and their product
``h = s * u``, four tensors of the intermediate width (Qwen2.5-0.5B with LoRA: 19,456 of the layer's 25,288 floats
a token). ``s`` and ``h`` are one element-wise op away from ``g`` and ``u``, which backward keeps anyway, and the
RMSNorm outputs that the attention and MLP projections keep are one norm away from the norm input, which the
norm's own backward keeps. So this module lets autograd save *recipes* for those four tensors instead of the
tensors, and re-runs the recipe (the very module, on the very inputs) when backward unpacks them: about half the
activation memory per layer for a few element-wise ops, with the same bits (the same kernels on the same inputs;
each recipe kind is checked once per module class against the forward's own output, and a class whose recompute
differs keeps its tensors).

How (public PyTorch API only, no third-party code is patched):

- each non-checkpointed decoder layer's call runs inside :func:`torch.autograd.graph.saved_tensors_hooks`; a
  forward pre-hook enters it and a forward hook (``always_call``) leaves it, so an exception cannot leak it;
- forward hooks on the layer's ``mlp.gate_proj`` / ``up_proj`` / ``act_fn`` and a pre-hook on ``mlp.down_proj``
  (after PEFT has wrapped them: the hooks see the adapted outputs) and on the layer's norms note which storages are
  recomputable while they are alive; the pack hook turns a saved tensor sharing such a storage into a recipe.
  A saved copy (an autocast cast, LoRA dropout's output) shares nothing and is saved as usual.

Checkpointed layers are left alone: ``GradientCheckpointingLayer`` checkpoints ``forward`` inside the module's
hooks, so torch's checkpoint hooks are the innermost and pack nothing of ours. Off under torch.compile and Liger
(its fused SwiGLU keeps ``g`` and ``u`` only already). The planner counts the saving (``plan/activations.py``).
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .layers import decoder_layers

logger = logging.getLogger(__name__)

MLP_PARTS = ("gate_proj", "up_proj", "down_proj", "act_fn")


class _Recipe:
    """What autograd saves instead of a tensor: how to rebuild the storage, and the saved view's geometry on it."""

    __slots__ = ("build", "size", "stride", "offset")

    def __init__(self, build: Callable[[], torch.Tensor], view: torch.Tensor):
        self.build, self.size, self.stride, self.offset = build, view.size(), view.stride(), view.storage_offset()

    def tensor(self) -> torch.Tensor:
        with torch.no_grad():
            whole = self.build()
        return whole.as_strided(self.size, self.stride, self.offset)


def _owns_storage(t: torch.Tensor) -> bool:
    """A fresh contiguous tensor filling its storage: a rebuilt one then has the same layout, so views map 1:1."""
    return (
        t.is_contiguous() and t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size()
    )


class _LayerWindow:
    """The recomputable storages of one decoder layer's forward call, while that call runs."""

    def __init__(self, owner: ElementwiseRecompute):
        self.owner = owner
        self.entries: dict[int, tuple[weakref.ref, Callable[[], torch.Tensor]]] = {}
        self.mlp: dict[str, torch.Tensor] = {}
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, _unpack)

    def close(self) -> None:
        """Leave the hooks and drop every reference: the window and its hooks object point at each other, and a cycle
        waits for the garbage collector (which training may keep off) while holding the layer's tensors."""
        self.hooks.__exit__(None, None, None)
        self.entries.clear()
        self.mlp.clear()
        self.hooks = None

    def note(self, out: torch.Tensor, build: Callable[[], torch.Tensor]) -> None:
        if isinstance(out, torch.Tensor) and _owns_storage(out):
            self.entries[out.untyped_storage().data_ptr()] = (weakref.ref(out), build)

    def pack(self, t: torch.Tensor) -> Any:
        recipe = self._recipe(t) if self.entries and t.layout == torch.strided else None
        if recipe is not None:
            self.owner.packed += 1
            return recipe
        if self.owner.kept is not None and t.layout == torch.strided:
            self.owner.kept.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        return t

    def _recipe(self, t: torch.Tensor) -> _Recipe | None:
        entry = self.entries.get(t.untyped_storage().data_ptr())
        if entry is None:
            return None
        ref, build = entry
        base = ref()
        if base is None or base.dtype != t.dtype:  # the noted tensor is gone: the pointer now belongs to another one
            return None
        return _Recipe(build, t)


def _unpack(saved: Any) -> torch.Tensor:
    return saved.tensor() if isinstance(saved, _Recipe) else saved


class ElementwiseRecompute:
    """The hooks on one model's decoder layers (:func:`enable`) and what they did (``packed``, ``kept``)."""

    def __init__(self, norms: bool = True):
        self.norms = norms
        self.checked: dict[tuple[type, str], bool] = {}  # (module class, recipe kind) -> recompute gives the same bits
        self.window: _LayerWindow | None = None
        self.packed = 0  # tensors saved as recipes so far
        self.layers = 0
        self.kept: dict[int, int] | None = (
            None  # when a dict: storage -> bytes of what was saved as is (tests, benchmarks)
        )

    def _exact(self, module: torch.nn.Module, kind: str, got: torch.Tensor, build: Callable[[], torch.Tensor]) -> bool:
        key = (type(module), kind)
        if key not in self.checked:
            with torch.no_grad():
                again = build()
            self.checked[key] = again.shape == got.shape and again.dtype == got.dtype and torch.equal(again, got)
            if not self.checked[key]:
                logger.info(
                    "elementwise_recompute: %s's %s does not recompute to the same bits; it stays saved",
                    type(module).__name__,
                    kind,
                )
        return self.checked[key]

    def attach(self, layer: torch.nn.Module) -> None:
        mlp = _gated_mlp(layer)
        norms = _norms(layer) if self.norms else []
        if mlp is None and not norms:
            return

        def enter(module, args):
            if module.training and torch.is_grad_enabled() and not getattr(module, "gradient_checkpointing", False):
                module._tunekit_outer_window, self.window = self.window, _LayerWindow(self)
                self.window.hooks.__enter__()

        def leave(module, args, output):
            if hasattr(module, "_tunekit_outer_window"):
                window, self.window = self.window, module.__dict__.pop("_tunekit_outer_window")
                window.close()

        layer.register_forward_pre_hook(enter)
        layer.register_forward_hook(leave, always_call=True)
        for norm in norms:
            norm.register_forward_hook(self._norm_hook)
        if mlp is not None:
            for part in ("gate_proj", "up_proj"):
                getattr(mlp, part).register_forward_hook(self._keep(part))
            mlp.act_fn.register_forward_hook(self._act_hook)
            mlp.down_proj.register_forward_pre_hook(self._down_hook(mlp.act_fn))
        self.layers += 1

    def _norm_hook(self, module, args, output):
        window = self.window
        if window is None or len(args) != 1 or not isinstance(args[0], torch.Tensor):
            return
        x = args[0]
        build = functools.partial(module.forward, x)  # the norm's own forward on its kept input (no module hooks)
        if self._exact(module, "output", output, build):
            window.note(output, build)

    def _keep(self, part: str):
        def hook(module, args, output):
            if self.window is not None:
                self.window.mlp[part] = output

        return hook

    def _act_hook(self, module, args, output):
        window = self.window
        if window is None or not args or args[0] is not window.mlp.get("gate_proj"):
            return
        g = args[0]
        build = functools.partial(module.forward, g)
        if self._exact(module, "output", output, build):
            window.mlp["act"] = output
            window.note(output, build)

    def _down_hook(self, act: torch.nn.Module):
        def hook(module, args):
            window = self.window
            if window is None or not args or not {"act", "up_proj", "gate_proj"} <= window.mlp.keys():
                return
            h, s, u, g = args[0], window.mlp.pop("act"), window.mlp.pop("up_proj"), window.mlp.pop("gate_proj")
            if isinstance(h, torch.Tensor) and self._exact(
                module, "input", h, lambda: s * u
            ):  # the MLP multiplies s by u
                window.note(h, lambda: act.forward(g) * u)

        return hook


def _norms(layer: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for _, m in layer.named_children() if type(m).__name__.endswith("RMSNorm")]


def _gated_mlp(layer: torch.nn.Module) -> torch.nn.Module | None:
    mlp = getattr(layer, "mlp", None)
    return (
        mlp if mlp is not None and all(isinstance(getattr(mlp, p, None), torch.nn.Module) for p in MLP_PARTS) else None
    )


def enable(model, norms: bool = True) -> ElementwiseRecompute | None:
    """Attach the hooks to every decoder layer of ``model`` (after PEFT wrapping); None when no layer has a part to
    recompute. ``norms=False`` leaves the norms out (their weights are sharded under ZeRO-3 / FSDP outside their
    forward)."""
    state = ElementwiseRecompute(norms)
    for layer in decoder_layers(
        model
    ):  # the language model's (a vision tower's blocks: the planner counts them as is)
        state.attach(layer)
    if not state.layers:
        return None
    _STATES[model] = state
    return state


def state_of(model) -> ElementwiseRecompute | None:
    """The hooks :func:`enable` put on ``model``, if any (tests and benchmarks read what they saved)."""
    return _STATES.get(model)


_STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def enable_for_training(model, parts: tuple[bool, bool]) -> ElementwiseRecompute | None:
    """``elementwise_recompute`` as the run decided it: ``parts`` = ``(MLP outputs, norm outputs)``, the detail of
    ``RunDecisions.elementwise_recompute`` (train/decisions/features.py), for a model that trains."""
    on, norms = parts
    return enable(model, norms=norms) if on else None
