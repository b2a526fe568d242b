"""The optimizer classes tunekit wraps the packages' ones in (``train/optimizers.py`` builds them from the config).

Each is tunekit's own for one reason:

* **Checkpoints hold only tensors and plain values.** GaLore and APOLLO keep a projector *object* per weight
  in ``optimizer.state``; HF saves the optimizer with ``torch.save`` and resumes with ``weights_only=True``,
  which refuses arbitrary objects. A state-dict post-hook writes each projector's attributes beside the state
  and a load post-hook rebuilds it (:func:`_projectors_to_dicts`, :func:`_dicts_to_projectors`).
* **BAdam's active block is saved.** ``BlockOptimizer.state_dict`` is the base optimizer's, without the block
  index and step counter, so a resumed run would restart at the first block; ``ResumableBlockOptimizer``
  adds them (and the scheduled learning rate of its own groups, which it copies into the base at each step:
  the base's saved one is a step old) and switches back to the saved block on load.
* **Layer-wise GaLore / APOLLO** (``*_layerwise``) step each parameter from a post-accumulate-grad hook
  (``Tensor.register_post_accumulate_grad_hook``, the pattern the packages document) and free its gradient;
  :class:`LayerwiseOptimizer` is what the Trainer sees: its ``step`` is a no-op, its one param group carries the
  scheduled learning rate that each hook copies, and its ``state_dict`` holds every per-parameter optimizer.
"""

from __future__ import annotations

import torch

MUON_DEFAULTS = dict(momentum=0.95, nesterov=True, ns_steps=5)


# ------------------------------------------------------------------ checkpoint-safe projector state
# Projectors are saved beside ``state`` (under ``"projectors"``: parameter index -> class name and attributes), not
# inside it: ``Optimizer.load_state_dict`` casts every value inside ``state`` and turns strings (``proj_type``)
# into garbage, while extra top-level keys pass through untouched.
def _projectors_to_dicts(optimizer, state_dict):
    """State-dict post-hook: move each projector object out of the state into plain values."""
    projectors = {}
    for key, entry in list(state_dict["state"].items()):
        proj = entry.get("projector")
        if proj is not None:
            projectors[key] = {"class": type(proj).__name__, "attrs": dict(vars(proj))}
            state_dict["state"][key] = {k: v for k, v in entry.items() if k != "projector"}
    state_dict["projectors"] = projectors
    return state_dict


def _stash_projectors(optimizer, state_dict):
    state_dict = dict(state_dict)
    optimizer._loaded_projectors = state_dict.pop("projectors", {})
    return state_dict


def _dicts_to_projectors(optimizer):
    """Load post-hook: rebuild the projector objects the package's ``step`` expects."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for key, saved in getattr(optimizer, "_loaded_projectors", {}).items():
        cls = optimizer._projector_classes[saved["class"]]
        obj = cls.__new__(cls)
        obj.__dict__.update(saved["attrs"])
        optimizer.state[params[int(key)]]["projector"] = obj
    optimizer._loaded_projectors = {}


def make_resumable(optimizer, projector_classes: dict):
    optimizer._projector_classes = projector_classes
    optimizer.register_state_dict_post_hook(_projectors_to_dicts)
    optimizer.register_load_state_dict_pre_hook(_stash_projectors)
    optimizer.register_load_state_dict_post_hook(_dicts_to_projectors)
    return optimizer


# ------------------------------------------------------------------ layer-wise stepping
class LayerwiseOptimizer(torch.optim.Optimizer):
    """What the Trainer sees for layer-wise GaLore/APOLLO: each parameter has its own optimizer, stepped by a
    post-accumulate-grad hook during backward (its gradient is freed right after). ``param_groups[0]["lr"]`` is
    the scheduled learning rate; every hook applies it to its optimizer before stepping."""

    def __init__(self, optimizers: dict, lr: float):
        self.optimizers = optimizers  # parameter -> optimizer (insertion order = model order)
        self._base_lr = {p: [g["lr"] for g in opt.param_groups] for p, opt in optimizers.items()}
        super().__init__([torch.zeros(1)], {"lr": lr})
        self._lr0 = lr
        for p in optimizers:
            p.register_post_accumulate_grad_hook(self._hook)

    def _hook(self, param) -> None:
        if param.grad is None:
            return
        opt = self.optimizers[param]
        scale = self.param_groups[0]["lr"] / self._lr0 if self._lr0 else 0.0
        for group, base in zip(opt.param_groups, self._base_lr[param]):
            group["lr"] = base * scale
        opt.step()
        opt.zero_grad(set_to_none=True)

    def step(self, closure=None):  # the hooks already stepped every parameter
        return closure() if closure is not None else None

    def zero_grad(self, set_to_none: bool = True) -> None:
        pass

    def state_dict(self):
        return {
            "layerwise": [opt.state_dict() for opt in self.optimizers.values()],
            "param_groups": super().state_dict()["param_groups"],
        }

    def load_state_dict(self, state_dict) -> None:
        for opt, sd in zip(self.optimizers.values(), state_dict["layerwise"]):
            opt.load_state_dict(sd)
        self.param_groups[0]["lr"] = state_dict["param_groups"][0]["lr"]  # the scheduled lr of the next step

    @property
    def inner_states(self) -> dict:
        return {p: s for opt in self.optimizers.values() for p, s in opt.state.items()}


def layerwise_optimizer(optim_cls, groups: list[dict], lr: float, kwargs: dict, wrap) -> LayerwiseOptimizer:
    optimizers, index = {}, 0
    for group in groups:
        for p in group["params"]:
            index += 1
            opt = optimizers[p] = wrap(optim_cls([{**group, "params": [p]}], **kwargs))
            if "seed" in opt.state[p]:  # APOLLO seeds each projection by the parameter's position in the optimizer:
                opt.state[p]["seed"] = index  # keep the whole-model position, so layer-wise = whole-model APOLLO
    return LayerwiseOptimizer(optimizers, lr)


# ------------------------------------------------------------------ Muon + AdamW
class MuonWithAdamW(torch.optim.Optimizer):
    """``torch.optim.Muon`` on the hidden matrices and ``torch.optim.AdamW`` on everything else, as one optimizer.

    ``param_groups`` are the two optimizers' own group dicts (a scheduler that sets ``lr`` sets it on both);
    ``state_dict`` holds both. Muon's update is scaled with ``adjust_lr_fn="match_rms_adamw"`` (0.2·sqrt(max(A, B)),
    Moonlight's rule, which LLaMA-Factory's Muon uses) so one ``learning_rate`` suits both parts.
    """

    def __init__(self, muon_groups: list[dict], adamw_groups: list[dict], lr: float, betas, eps: float):
        self.muon = (
            torch.optim.Muon(muon_groups, lr=lr, adjust_lr_fn="match_rms_adamw", **MUON_DEFAULTS)
            if muon_groups
            else None
        )
        self.adamw = torch.optim.AdamW(adamw_groups, lr=lr, betas=betas, eps=eps) if adamw_groups else None
        inner = [o for o in (self.muon, self.adamw) if o is not None]
        super().__init__([p for o in inner for g in o.param_groups for p in g["params"]], {"lr": lr})
        self.param_groups = [g for o in inner for g in o.param_groups]

    @property
    def inner(self) -> list:
        return [o for o in (self.muon, self.adamw) if o is not None]

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for opt in self.inner:
            opt.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.inner:
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return {
            "muon": self.muon.state_dict() if self.muon else None,
            "adamw": self.adamw.state_dict() if self.adamw else None,
        }

    def load_state_dict(self, state_dict) -> None:
        for name in ("muon", "adamw"):
            opt = getattr(self, name)
            if opt is not None and state_dict.get(name) is not None:
                opt.load_state_dict(state_dict[name])

    @property
    def inner_states(self) -> dict:
        return {p: s for opt in self.inner for p, s in opt.state.items()}


# ------------------------------------------------------------------ BAdam
def resumable_block_optimizer():
    from badam import BlockOptimizer

    class ResumableBlockOptimizer(BlockOptimizer):
        """badam's ``BlockOptimizer`` whose state dict also holds the active block and the step counter."""

        def switch_trainable_params(self, verbose=None):
            self.active_block_idx = self.current_block_idx
            super().switch_trainable_params(verbose=self.verbose if verbose is None else verbose)

        def _full_state_dict(self):
            sd = self.base_optimizer.state_dict()
            sd["badam"] = {
                "active_block_idx": self.active_block_idx,
                "global_step": self.global_step,
                "block_order": list(getattr(self, "block_order", [])),
                "lr": [g["lr"] for g in self.param_groups],
            }  # the scheduled lr of the next step (the base has the last one)
            return sd

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.state_dict = self._full_state_dict  # BlockOptimizer sets state_dict per instance too

        def load_state_dict(self, state_dict) -> None:
            state_dict = dict(state_dict)
            saved = state_dict.pop("badam", None)
            if saved is not None:
                for group, lr in zip(self.param_groups, saved["lr"]):  # BAdam copies its own groups' lr into the base
                    group["lr"] = lr
                if saved["active_block_idx"] != self.active_block_idx:
                    self.current_block_idx = saved["active_block_idx"]
                    self.switch_trainable_params(verbose=0)
                self.global_step = saved["global_step"]
                if saved["block_order"]:
                    self.block_order = list(saved["block_order"])
            self.base_optimizer.load_state_dict(state_dict)

        @property
        def inner_states(self) -> dict:
            return dict(self.base_optimizer.state)

    return ResumableBlockOptimizer
