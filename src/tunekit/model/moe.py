"""Mixture-of-experts models: where the experts and routers are, what LoRA adapts, and the router auxiliary loss.

Structure, read off the model (transformers 5): a sparse-MoE block is a module with an ``experts`` child; its other
children but the shared expert (``gate``, Qwen2-MoE's ``shared_expert_gate``, gpt-oss's ``router``) route tokens.
Qwen3-MoE, Qwen2-MoE and Mixtral keep each layer's experts as two fused 3-D parameters, ``experts.gate_up_proj``
(experts x 2 x width x hidden) and ``experts.down_proj`` (experts x hidden x width), not as ``nn.Linear`` modules.
A model loaded under DeepSpeed ZeRO-3 holds each parameter partitioned (shape ``(0,)``): its full shape is read from
``ds_shape``, so the experts are found (and adapted) there as in one process.

LoRA (:func:`lora_moe_targets`): ``lora_target: all`` adapts every linear layer but the LM head and the routers
(attention, a shared expert, dense MLP layers) and the fused expert weights through PEFT's ``target_parameters``
(one LoRA pair per fused tensor with rank ``lora_rank`` per expert). A list may name linear layers, the fused weights
(``gate_up_proj``, ``down_proj``) or ``experts`` (both). The routers are never adapted and stay frozen: naming one is
refused. LLaMA-Factory's ``all`` (every module whose class name says Linear) reaches neither the fused experts nor
the routers (not ``nn.Linear`` in transformers 5), but adapts Qwen2-MoE's ``shared_expert_gate``, a router kept
frozen here. Where PEFT (for adapters trained on transformers 4) rewrites linear-layer names to the fused experts of
a model type (DeepSeek-V2/V3: ``gate_proj`` / ``up_proj`` / ``down_proj`` become ``gate_up_proj`` / ``down_proj``,
with the rank doubled; :func:`peft_remapped_linears`), the linear layers of those names (the dense first layers'
MLP, the shared experts) are left out of ``all`` and refused by name: PEFT would move their adapters onto the
experts, in training and again when plain peft loads the adapter.

``moe_aux_loss_coef`` (LLaMA-Factory's option, :func:`configure_moe`): the model's config gets
``output_router_logits: true`` and ``router_aux_loss_coef``, so transformers computes the load-balancing loss of the
router logits; the loss of each forward is the cross-entropy + coef x aux, as transformers adds it when the labels
reach the model (:func:`add_router_aux_loss` does the same where tunekit computes the cross-entropy itself). Under
gradient accumulation every micro-batch adds its own coef x aux while the cross-entropy is divided over the step, as
in transformers and LLaMA-Factory, so the coefficients tuned there carry over. Stages sft and pt only (the schema).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ..config.lists import split_list
from ..config.schema import Config
from ..errors import ConfigError
from .trainable import is_linear, model_plugin, under

_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "moe_topk", "top_k")
_SHARED = ("experts", "shared_expert", "shared_experts")  # children of an MoE block that are not routing
_IN_LAYER = re.compile(r"^.*?\.\d+\.")  # "model.layers.3." : the part before a decoder layer's own names
AUX_LOG_KEY = "moe/aux_loss"  # the router auxiliary loss in trainer_log.jsonl (mean of the forwards since the last)
_AUX_ATTR = "_tunekit_router_aux"


def in_layer(name: str) -> str:
    """A module or parameter name inside its decoder layer ("model.layers.3.mlp.gate" -> "mlp.gate")."""
    return _IN_LAYER.sub("", name)


def _text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def num_experts(config) -> int:
    """Routed experts per MoE layer (0 for a dense model)."""
    text = _text_config(config)
    return next((int(v) for k in _EXPERT_KEYS if isinstance(v := getattr(text, k, None), int) and v > 0), 0)


def experts_per_token(config) -> int:
    text = _text_config(config)
    return next((int(v) for k in _TOP_K_KEYS if isinstance(v := getattr(text, k, None), int) and v > 0), 0)


@dataclass(frozen=True)
class MoeLayout:
    """Where a loaded model's experts and routers are."""

    experts: int
    top_k: int
    blocks: tuple[str, ...]  # module names of the sparse-MoE blocks ("model.layers.0.mlp")
    routers: tuple[str, ...]  # module names of the routing modules ("model.layers.0.mlp.gate")
    fused: dict[str, tuple[int, ...]]  # fused 3-D expert parameters by full name -> shape

    @property
    def fused_targets(self) -> list[str]:
        """The fused weights as PEFT ``target_parameters`` names inside a decoder layer ("mlp.experts.down_proj")."""
        return sorted({in_layer(name) for name in self.fused})

    @property
    def router_paths(self) -> list[str]:
        return sorted({in_layer(name) for name in self.routers})


def moe_layout(model) -> MoeLayout | None:
    """The experts and routers of ``model`` (a PeftModel is looked through); None for a dense model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    experts = num_experts(base.config)
    if not experts:
        return None
    blocks, routers, fused = [], [], {}
    for name, module in base.named_modules():
        children = dict(module.named_children())
        if "experts" not in children or ".experts." in f".{name}.":
            continue
        blocks.append(name)
        routers += [f"{name}.{child}" for child in children if child not in _SHARED]
        for pname, param in children["experts"].named_parameters():
            shape = tuple(getattr(param, "ds_shape", None) or param.shape)  # ZeRO-3 partitions: shape (0,)
            if len(shape) == 3 and "lora_" not in pname:
                fused[f"{name}.experts.{pname.replace('base_layer.', '')}"] = shape
    return MoeLayout(experts, experts_per_token(base.config), tuple(blocks), tuple(routers), fused)


def _peft_supports_parameters() -> bool:
    from peft import LoraConfig

    return "target_parameters" in {f.name for f in dataclasses.fields(LoraConfig)}


def peft_remapped_linears(model) -> list[str]:
    """The linear-layer names of ``model`` that PEFT, on transformers 5, rewrites to the fused experts for its model
    type (its compatibility with adapters of transformers 4's per-expert layers); [] where it rewrites none."""
    try:
        from peft.utils import transformers_weight_conversion as conversion
    except ImportError:  # a peft without the rewrite
        return []
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    family = getattr(conversion, "_MODEL_TO_CONVERSION_PATTERN", {}).get(getattr(base.config, "model_type", None))
    if family not in getattr(conversion, "_MOE_FUSED_TARGETS", {}):
        return []
    names = set(getattr(conversion, "_MOE_TARGET_MODULE_MAPPING", {}).get(family, {}))
    return sorted({n.split(".")[-1] for n, m in base.named_modules() if is_linear(m)} & names)


def lora_moe_targets(model, cfg: Config) -> tuple[list[str], list[str]] | None:
    """``(target_modules, target_parameters)`` for ``lora_target`` on a text MoE model (see the module doc); None for
    a dense or vision-language model (``trainable.adapter_targets`` answers)."""
    layout = moe_layout(model)
    if layout is None or model_plugin(model, cfg) is not None:
        return None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    linears = [n for n, m in model.named_modules() if is_linear(m) and m is not head and not under(n, layout.routers)]
    linear_names = sorted({n.split(".")[-1] for n in linears})
    router_names = sorted({n.split(".")[-1] for n in layout.routers} - set(linear_names))
    fused_names = sorted({n.split(".")[-1] for n in layout.fused})
    requested, remapped = str(cfg.lora_target).strip(), peft_remapped_linears(model)
    if requested == "all":
        modules, wanted = [n for n in linear_names if n not in remapped], {"experts"}
    else:
        words = split_list(requested)
        _refuse_remapped([w for w in words if w in remapped and w not in fused_names], model, fused_names)
        routers = [w for w in words if w in router_names]
        if routers:
            raise ConfigError(
                f"lora_target names {', '.join(routers)}, the router of the mixture-of-experts layers "
                f"({', '.join(layout.router_paths)}): tunekit keeps the routers frozen (an adapter there changes "
                f"which experts each token reaches); remove it from lora_target."
            )
        missing = [w for w in words if w not in linear_names and w not in fused_names and w != "experts"]
        if missing:
            raise ConfigError(
                f"lora_target names {', '.join(missing)}, which are not linear layers or expert weights of this "
                f"model; available: {', '.join(linear_names)}; the experts' fused weights: "
                f"{', '.join(fused_names) or 'none'} (or experts for both, or lora_target: all)."
            )
        modules, wanted = [w for w in words if w in linear_names and w not in remapped], set(words)
    if {n.split(".")[-1] for n in layout.routers} & set(modules):  # a router shares a name: full names, not it
        modules = [n for n in linears if n.split(".")[-1] in modules]
    parameters = [p for p in layout.fused_targets if "experts" in wanted or p.split(".")[-1] in wanted]
    if parameters:
        _check_parameter_lora(cfg, parameters)
    return modules, parameters


def _refuse_remapped(names: list[str], model, fused_names: list[str]) -> None:
    if names:
        kind = _text_config(model.config).model_type
        raise ConfigError(
            f"lora_target names {', '.join(names)}: for a {kind} model PEFT reads these names as the experts' fused "
            f"weights (its compatibility with transformers 4 adapters), so LoRA cannot adapt the linear layers of "
            f"that name (the dense layers' MLP, the shared experts); name the fused weights "
            f"({', '.join(fused_names)}) or experts instead, or use lora_target: all."
        )


def _check_parameter_lora(cfg: Config, parameters: list[str]) -> None:
    """PEFT's LoRA on a parameter (``lora.ParamWrapper``) has no dropout, DoRA or PiSSA: refused before it is built."""
    what = f"lora_target {cfg.lora_target} adapts the experts' fused weights ({', '.join(parameters)})"
    if not _peft_supports_parameters():
        raise ConfigError(
            f"{what}, which needs PEFT's target_parameters, and the installed peft has none: upgrade peft "
            f"(>= 0.17), or name the linear layers only in lora_target."
        )
    unsupported = [
        (cfg.lora_dropout > 0, f"lora_dropout {cfg.lora_dropout}", "lora_dropout: 0"),
        (cfg.use_dora, "use_dora", "use_dora: false"),
        (cfg.pissa_init, "pissa_init", "pissa_init: false"),
    ]
    for bad, name, fix in unsupported:
        if bad:
            raise ConfigError(
                f"{what} through PEFT's target_parameters, which does not support {name}: set {fix}, or name "
                f"the linear layers only in lora_target (e.g. q_proj,k_proj,v_proj,o_proj)."
            )


def expert_lora_layers(model, parameters: list[str] | None) -> dict[str, tuple[int, int]]:
    """``{fused parameter: (in, out)}`` of one expert, for the LoRA rank check (PEFT reads a non-transposed fused
    ``experts x out x in`` tensor)."""
    layout = moe_layout(model) if parameters else None
    if layout is None:
        return {}
    return {
        name: (shape[2], shape[1])
        for name, shape in layout.fused.items()
        if any(name.endswith("." + p) for p in parameters)
    }


# ---- the router auxiliary loss ----------------------------------------------------------------------------------


def configure_moe(config, cfg: Config, path: str, is_trainable: bool) -> None:
    """The model config of a mixture of experts before the model is built. ``dtype: float64`` (reference runs): the
    experts run eagerly, expert by expert (transformers' default grouped_mm has no float64 kernel).
    ``moe_aux_loss_coef``: transformers' router load-balancing loss on, with that coefficient (the model reads
    ``router_aux_loss_coef`` once, when built); refused on a dense model and on one whose transformers class has no
    router loss."""
    if num_experts(config) and getattr(cfg, "dtype", None) == "float64":
        config._experts_implementation = "eager"
    coef = getattr(cfg, "moe_aux_loss_coef", None)
    if coef is None or not is_trainable:
        return
    text = _text_config(config)
    if not num_experts(config):
        raise ConfigError(
            f"moe_aux_loss_coef {coef} weights the router loss of a mixture-of-experts model, and {path} "
            f"({getattr(config, 'model_type', '?')}) is dense (no experts): remove moe_aux_loss_coef."
        )
    if not hasattr(text, "router_aux_loss_coef"):
        raise ConfigError(
            f"moe_aux_loss_coef {coef}: transformers' {getattr(text, 'model_type', '?')} model computes no router "
            f"auxiliary loss (its config has no router_aux_loss_coef): remove moe_aux_loss_coef."
        )
    text.output_router_logits = True
    text.router_aux_loss_coef = float(coef)


def add_router_aux_loss(loss, outputs, cfg: Config | None):
    """``loss + coef x aux_loss`` where the model did not add it (its labels were taken away: tunekit's trained-token
    loss computes the cross-entropy itself); ``loss`` unchanged without ``moe_aux_loss_coef``."""
    coef = getattr(cfg, "moe_aux_loss_coef", None)
    aux = getattr(outputs, "aux_loss", None)
    if coef is None or aux is None:
        return loss
    return loss + coef * aux.to(loss.device)


class RouterAuxLog:
    """A forward hook on the model the trainer calls: the router auxiliary loss of each training forward, summed
    until :func:`take_router_aux` reads the mean (no host sync per forward)."""

    def __init__(self):
        self.total = None
        self.count = 0

    def __call__(self, module, args, output) -> None:
        aux = getattr(output, "aux_loss", None)
        if module.training and aux is not None:
            aux = aux.detach().float()
            self.total = aux if self.total is None else self.total + aux
            self.count += 1


def watch_router_aux(model, cfg: Config) -> None:
    """With ``moe_aux_loss_coef``: record each training forward's router auxiliary loss (``trainer_log.jsonl``)."""
    if getattr(cfg, "moe_aux_loss_coef", None) is None or hasattr(model, _AUX_ATTR):
        return
    log = RouterAuxLog()
    model.register_forward_hook(log)
    object.__setattr__(model, _AUX_ATTR, log)  # a plain attribute: not a submodule, not in any state_dict


def take_router_aux(model) -> dict[str, float]:
    """``{"moe/aux_loss": mean}`` of the forwards since the last call (``{}`` when none), and start over."""
    log = getattr(model, _AUX_ATTR, None) if model is not None else None
    if log is None or not log.count:
        return {}
    mean = float(log.total) / log.count
    log.total, log.count = None, 0
    return {AUX_LOG_KEY: round(mean, 6)}


def moe_start_lines(model, cfg: Config) -> list[str]:
    """What the run does with the experts and routers, for the lines a run prints at its start."""
    layout = moe_layout(model)
    if layout is None:
        return []
    lines = [
        f"mixture of experts: {layout.experts} experts per layer, top-{layout.top_k} routing, "
        f"{len(layout.blocks)} sparse layers"
    ]
    peft = getattr(model, "peft_config", {}).get("default")
    routers = ", ".join(layout.router_paths)
    if peft is not None and cfg.finetuning_type == "lora":
        targets = peft.target_modules
        modules = targets if isinstance(targets, str) else ", ".join(sorted(targets or []))
        params = ", ".join(sorted(getattr(peft, "target_parameters", None) or []))
        experts = f"the experts' fused weights {params} (PEFT target_parameters)" if params else "no expert weight"
        on = f"{modules} and {experts}" if modules else experts
        lines.append(f"LoRA on {on}; the routers ({routers}) stay frozen")
        if remapped := peft_remapped_linears(model):
            lines.append(
                f"the linear layers named {', '.join(remapped)} (dense layers' MLP, shared experts) stay frozen: PEFT "
                f"reads those names as the fused experts of a {_text_config(model.config).model_type} model"
            )
    elif peft is not None and cfg.finetuning_type == "oft":
        lines.append(f"OFT on the linear layers only; the fused experts and the routers ({routers}) stay frozen")
    coef = getattr(cfg, "moe_aux_loss_coef", None)
    if coef is not None and cfg.do_train:
        lines.append(
            f"router auxiliary loss: {coef} x load-balancing loss added to each forward's loss "
            f"(moe_aux_loss_coef; logged as {AUX_LOG_KEY})"
        )
    return lines
