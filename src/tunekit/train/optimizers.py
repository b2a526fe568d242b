"""The memory-efficient optimizers, built from the config through their maintained implementations.

``build_optimizer(cfg, args, model, decay_names)`` returns the optimizer for ``use_galore`` (galore-torch's
``GaLoreAdamW`` / ``GaLoreAdafactor``), ``use_apollo`` (apollo-torch's ``APOLLOAdamW``), ``use_badam``
(badam's ``BlockOptimizer`` / ``BlockOptimizerRatio``), ``use_adam_mini`` (adam-mini's ``Adam_mini``) and
``use_muon`` (``torch.optim.Muon`` on the 2-D hidden matrices + ``torch.optim.AdamW`` on the rest), or
``None`` when none is set (the Trainer then builds ``optim``). ``TunekitTrainer.create_optimizer`` calls it.

Parameter split, as LLaMA-Factory does it: weight decay on every weight but norms and biases
(``Trainer.get_decay_parameter_names``); GaLore / APOLLO project the 2-D weights of the target ``nn.Linear``
modules (``all`` = every Linear but the output embedding), the other parameters get the same optimizer without
projection. Muon takes the 2-D weights inside the decoder layers (not the input/output embeddings).

What is tunekit's own here (checkpoint-safe wrappers of the packages' optimizers):
:mod:`tunekit.train.optimizer_wrappers`.
"""

from __future__ import annotations

import torch

from ..config.lists import split_list
from ..config.problems import config_error
from ..config.schema import Config
from .optimizer_wrappers import MuonWithAdamW, layerwise_optimizer, make_resumable, resumable_block_optimizer


def uses_custom_optimizer(cfg: Config) -> bool:
    return any(getattr(cfg, k, False) for k in ("use_galore", "use_apollo", "use_badam", "use_adam_mini", "use_muon"))


def _require(module: str, package: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise config_error("optim_package_missing", package=package) from None


# ------------------------------------------------------------------ parameter selection
def output_embedding_names(model) -> set[str]:
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    return {name for name, module in model.named_modules() if head is not None and module is head}


def projected_params(model, target: str) -> list[torch.nn.Parameter]:
    """2-D trainable weights of the target ``nn.Linear`` modules (``all`` = every Linear but the LM head)."""
    heads = output_embedding_names(model)
    targets = None if target.strip() == "all" else split_list(target)
    found, names = [], set()
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or name in heads:
            continue
        names.update(
            name.split(".")
        )  # a target is any part of the module path: q_proj, or self_attn / mlp (LLaMA-Factory's examples)
        if targets is not None and not any(t in name.split(".") for t in targets):
            continue
        found.extend(p for p in module.parameters(recurse=False) if p.requires_grad and p.dim() == 2)
    if targets is not None:
        missing = [t for t in targets if t not in names]
        if missing:
            leaves = sorted(
                {
                    n.split(".")[-1]
                    for n, m in model.named_modules()
                    if isinstance(m, torch.nn.Linear) and n not in heads
                }
            )
            raise config_error("optim_targets_missing", missing=tuple(missing), available=tuple(leaves))
    return found


def muon_params(model) -> tuple[list, list]:
    """``(muon, adamw)``: 2-D weights inside the decoder layers for Muon; embeddings, LM head, norms, biases for
    AdamW."""
    heads = output_embedding_names(model)
    get_in = getattr(model, "get_input_embeddings", None)
    embed = get_in() if callable(get_in) else None
    excluded = {id(p) for p in embed.parameters()} if embed is not None else set()
    for name, module in model.named_modules():
        if name in heads:
            excluded.update(id(p) for p in module.parameters())
    muon, adamw = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        (muon if p.dim() == 2 and id(p) not in excluded else adamw).append(p)
    return muon, adamw


def _decay_groups(model, decay_names, wd: float, params=None, **extra) -> list[dict]:
    """``[no-decay group, decay group (weight_decay wd)]`` over the trainable parameters (or ``params``), both with
    ``extra``."""
    chosen = None if params is None else {id(p) for p in params}
    decay, nodecay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad and (chosen is None or id(p) in chosen):
            (decay if name in decay_names else nodecay).append(p)
    return [
        g
        for g in (dict(params=nodecay, weight_decay=0.0, **extra), dict(params=decay, weight_decay=wd, **extra))
        if g["params"]
    ]


def badam_callbacks(cfg: Config) -> list:
    """The callback badam documents for the Trainer (gradient checkpointing of inactive blocks, ZeRO-3 wiring)."""
    if not getattr(cfg, "use_badam", False):
        return []
    return [_require("badam", "badam").BAdamCallback]


def grad_norm_with_sparse(parameters) -> torch.Tensor:
    """The 2-norm of all gradients together, sparse ones (BAdam's ratio mode) by their stored values."""
    norms = [
        (g.coalesce().values() if g.is_sparse else g).norm(2) for g in (p.grad for p in parameters) if g is not None
    ]
    return torch.linalg.vector_norm(torch.stack(norms), 2) if norms else torch.tensor(0.0)


class SparseGradNormMixin:
    """``Trainer._get_grad_norm`` (the logged ``grad_norm``) for BAdam's ratio mode, whose gradients are sparse:
    torch's ``clip_grad_norm_``, which the Trainer calls with an infinite bound to measure it, has no sparse kernel.
    (badam documents replacing ``accelerator.clip_grad_norm_`` instead; ratio mode requires ``max_grad_norm: 0``.)"""

    def _get_grad_norm(self, model, grad_norm=None):
        if grad_norm is None and any(p.grad is not None and p.grad.is_sparse for p in model.parameters()):
            grad_norm = grad_norm_with_sparse(model.parameters())
        return super()._get_grad_norm(model, grad_norm=grad_norm)


# ------------------------------------------------------------------ the one entry point
def _adam_kwargs(args) -> dict:
    return dict(lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon)


def build_optimizer(cfg: Config, args, model, decay_names: list[str]):
    """The optimizer for the configured method, or ``None`` for the Trainer's own ``optim``."""
    if not uses_custom_optimizer(cfg):
        return None
    wd = args.weight_decay
    if cfg.use_galore or cfg.use_apollo:
        return _projected_optimizer(cfg, args, model, decay_names, wd)
    if cfg.use_badam:
        return _badam(cfg, args, model, decay_names, wd)
    if cfg.use_adam_mini:
        adam_mini = _require("adam_mini", "adam-mini")
        conf = model.config
        return adam_mini.Adam_mini(
            named_parameters=model.named_parameters(),
            weight_decay=wd,
            model_sharding=False,
            verbose=False,
            dim=getattr(conf, "hidden_size", None),
            n_heads=getattr(conf, "num_attention_heads", None),
            n_kv_heads=getattr(conf, "num_key_value_heads", None),
            **_adam_kwargs(args),
        )
    # Muon
    muon, adamw = muon_params(model)
    if not muon:
        raise config_error("optim_muon_no_weights", ("use_muon",))
    kw = _adam_kwargs(args)
    return MuonWithAdamW(
        _decay_groups(model, decay_names, wd, muon),
        _decay_groups(model, decay_names, wd, adamw),
        kw["lr"],
        kw["betas"],
        kw["eps"],
    )


def _projected_optimizer(cfg: Config, args, model, decay_names, wd):
    if cfg.use_galore:
        lib = _require("galore_torch", "galore-torch")
        from galore_torch.galore_projector import GaLoreProjector

        optim = args.optim.lower()
        if optim.startswith("adamw") and "8bit" not in optim:
            optim_cls = lib.GaLoreAdamW
        elif "8bit" in optim:
            optim_cls = lib.GaLoreAdamW8bit
        elif optim.startswith("adafactor"):
            optim_cls = lib.GaLoreAdafactor
        else:
            raise config_error("optim_galore_optim", ("use_galore", "optim"), optim=args.optim)
        target, layerwise = cfg.galore_target, cfg.galore_layerwise
        extra = dict(
            rank=cfg.galore_rank,
            update_proj_gap=cfg.galore_update_interval,
            scale=cfg.galore_scale,
            proj_type=cfg.galore_proj_type,
        )
        classes = {"GaLoreProjector": GaLoreProjector}
    else:
        lib = _require("apollo_torch", "apollo-torch")
        from apollo_torch.random_projector import GradientProjector
        from apollo_torch.svd_projector import GaLoreProjector as SVDProjector

        if not args.optim.lower().startswith("adamw"):
            raise config_error("optim_apollo_optim", ("use_apollo", "optim"), optim=args.optim)
        optim_cls = lib.APOLLOAdamW
        target, layerwise = cfg.apollo_target, cfg.apollo_layerwise
        extra = dict(
            rank=cfg.apollo_rank,
            proj=cfg.apollo_proj,
            proj_type=cfg.apollo_proj_type,
            update_proj_gap=cfg.apollo_update_interval,
            scale=cfg.apollo_scale,
            scale_type=cfg.apollo_scale_type,
        )
        classes = {"GradientProjector": GradientProjector, "GaLoreProjector": SVDProjector}
    projected = projected_params(model, target)
    ids = {id(p) for p in projected}
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in ids]
    groups = _decay_groups(model, decay_names, wd, rest)
    groups.append(dict(params=projected, weight_decay=wd, **extra))
    kwargs = (
        _adam_kwargs(args)
        if optim_cls is not getattr(lib, "GaLoreAdafactor", None)
        else dict(lr=args.learning_rate, relative_step=False, scale_parameter=False)
    )
    if cfg.use_apollo:
        kwargs["scale_front"] = cfg.apollo_scale_front
    if layerwise:
        return layerwise_optimizer(
            optim_cls, groups, args.learning_rate, kwargs, lambda opt: make_resumable(opt, classes)
        )
    return make_resumable(optim_cls(groups, **kwargs), classes)


def _badam(cfg: Config, args, model, decay_names, wd):
    _require("badam", "badam")
    groups = _decay_groups(model, decay_names, wd)
    if cfg.badam_mode == "layer":
        # BlockOptimizer rebuilds each block's groups as {"weight_decay": <base group 0's>, **base.defaults} and
        # {"weight_decay": 0.0, **base.defaults} (biases; badam's split): a weight_decay in the defaults (AdamW's own
        # 0.01, whatever weight_decay says) would override both, so the defaults carry none, decay group first
        base = torch.optim.AdamW(groups[::-1], **_adam_kwargs(args))
        base.defaults.pop("weight_decay")
        return resumable_block_optimizer()(
            base_optimizer=base,
            named_parameters_list=list(model.named_parameters()),
            block_prefix_list=None,
            switch_block_every=cfg.badam_switch_interval,
            start_block=cfg.badam_start_block,
            switch_mode=cfg.badam_switch_mode,
            verbose=cfg.badam_verbose,
        )
    from badam import BlockOptimizerRatio

    if args.max_grad_norm:
        raise config_error("optim_badam_ratio_clip", ("badam_mode", "max_grad_norm"))
    named = list(model.named_parameters())
    # badam freezes the parameter named lm_head (include_lm_head=False, LLaMA-Factory's setting) and fails when there
    # is none: with tied embeddings the head is the embedding, already frozen by include_embedding=False
    tied = not any("lm_head" in n for n, _ in named)
    return BlockOptimizerRatio(
        param_groups=groups,
        named_parameters_list=named,
        update_ratio=cfg.badam_update_ratio,
        mask_mode=cfg.badam_mask_mode,
        verbose=cfg.badam_verbose,
        include_embedding=False,
        include_lm_head=tied,
        **_adam_kwargs(args),
    )


def optimizer_state_tensors(optimizer) -> list[torch.Tensor]:
    """Every tensor the optimizer holds as state (what the planner's ``optimizer_states`` counts), projectors
    included."""
    states = getattr(optimizer, "inner_states", None)
    if states is None:
        states = optimizer.state
    out: list[torch.Tensor] = []

    def collect(value):
        if torch.is_tensor(value):
            out.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                collect(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                collect(v)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            collect(vars(value))

    for entry in states.values():
        collect(entry)
    return out
