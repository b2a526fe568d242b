"""What may train: the one selection every fine-tuning method goes through.

A vision-language (or audio-language) model has three parts, declared by its family's plugin in
``tunekit.data.mm_plugins`` (module-name prefixes): the vision tower, the projector and the language model.
``freeze_vision_tower`` / ``freeze_multi_modal_projector`` / ``freeze_language_model`` freeze them, and frozen means
frozen for every method:

- full and freeze-tuning train no parameter of a frozen part (:func:`frozen_parts` gives the prefixes);
- LoRA (and DoRA, PiSSA, rsLoRA ...) and OFT put adapters only on linear layers outside the frozen parts
  (:func:`adapter_targets`, for ``lora_target`` / ``oft_target``: ``all`` and explicit lists alike), and
  ``additional_target`` may not name a module inside one;
- whatever a method (or an adapter it resumes) did, :func:`check_frozen` runs last and refuses a trainable parameter
  under a frozen part, naming the part and its option, so a method added later cannot train a frozen part silently.

The parts belong to the model: the family is found by the model's ``model_type`` (the template's family first).
A text model has no parts (``freeze_*`` do not apply to it).
"""

from __future__ import annotations

import importlib
from typing import Any

from ..config.lists import split_list
from ..config.schema import Config
from ..data.mm_plugins import FAMILIES
from ..errors import ConfigError, ModelError
from .multimodal import is_multimodal_config, plugin_class

#: the freeze options, in the order of the parts they freeze
FREEZE_OPTIONS = ("freeze_vision_tower", "freeze_multi_modal_projector", "freeze_language_model")
#: Linear layers of pre-quantized bases that are not torch.nn.Linear (peft's "all-linear" does not see them): aqlm.
PREQUANTIZED_LINEAR = ("QuantizedLinear",)
_PEFT_PREFIX = "base_model.model."


def base_name(name: str) -> str:
    """A parameter/module name of the base model (a PeftModel's ``base_model.model.`` prefix removed)."""
    return name[len(_PEFT_PREFIX) :] if name.startswith(_PEFT_PREFIX) else name


def under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def model_plugin(model, cfg: Config) -> type | None:
    """The media family (plugin class) of a multimodal ``model``: the template's, else the one serving its
    model_type."""

    if not is_multimodal_config(model.config):
        return None
    plugin = plugin_class(cfg)
    if plugin is not None:
        return plugin
    model_type = getattr(model.config, "model_type", None)
    for module in dict.fromkeys(FAMILIES.values()):
        cls = importlib.import_module(f"tunekit.data.mm_plugins.{module}").PLUGIN
        if model_type in cls.MODEL_TYPES:
            return cls
    return None


def model_parts(model, cfg: Config) -> dict[str, tuple[str, ...]]:
    """freeze option -> the module prefixes of the part it freezes; ``{}`` for a text model. A part the family declares
    but the model lacks is an error (the plugin no longer matches transformers' module names)."""
    plugin = model_plugin(model, cfg)
    if plugin is None:
        return {}
    parts = dict(
        zip(FREEZE_OPTIONS, (tuple(plugin.VISION_TOWER), tuple(plugin.PROJECTOR), tuple(plugin.LANGUAGE_MODEL)))
    )
    names = [base_name(n) for n, _ in model.named_parameters()]
    for prefix in (p for prefixes in parts.values() for p in prefixes):
        if not any(under(n, [prefix]) for n in names):
            raise ConfigError(
                f"the {plugin.NAME} family declares the module '{prefix}', which {type(model).__name__} does "
                f"not have (a different transformers version?); tunekit.data.mm_plugins.{plugin.NAME} needs "
                f"updating."
            )
    return parts


def frozen_parts(model, cfg: Config) -> dict[str, str]:
    """Module prefix -> the option that freezes it, for every part ``cfg`` freezes (``{}`` for a text model)."""
    return {
        prefix: option
        for option, prefixes in model_parts(model, cfg).items()
        if getattr(cfg, option)
        for prefix in prefixes
    }


def is_linear(module) -> bool:
    import torch

    return isinstance(module, torch.nn.Linear) or type(module).__name__ in (
        "Linear4bit",
        "Linear8bitLt",
        *PREQUANTIZED_LINEAR,
    )


def _output_layer(model) -> str:
    """The name of the LM head module (never adapted by ``all``, as peft's "all-linear")."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return next((n for n, m in model.named_modules() if head is not None and m is head), "lm_head")


def _frozen_hint(names: list[str], frozen: dict[str, str]) -> str:
    options = sorted({frozen[p] for n in names for p in frozen if under(n, [p])})
    return " and ".join(f"{o}: true" for o in options)


def adapter_targets(model, cfg: Config, option: str) -> Any:
    """What ``lora_target`` / ``oft_target`` (``option``) adapts, as peft's ``target_modules``: "all" = every linear
    layer but the LM head, a list = the linear layers of those names; in both, none inside a frozen part."""
    requested = str(getattr(cfg, option)).strip()
    frozen = frozen_parts(model, cfg)
    linears = [n for n, m in model.named_modules() if is_linear(m)]
    if requested == "all":
        if not frozen and model_plugin(model, cfg) is None:  # a text model: peft's own selection
            prequantized = sorted(
                {n.split(".")[-1] for n, m in model.named_modules() if type(m).__name__ in PREQUANTIZED_LINEAR}
            )
            return prequantized or "all-linear"
        head = _output_layer(model)
        names = [n for n in linears if not under(n, frozen) and n != head and not n.endswith(".lm_head")]
        if not names:
            raise ConfigError(
                f"{option}: all finds no linear layer to adapt: every part is frozen. Set freeze_language_model: "
                f"false (or unfreeze the vision tower / projector)."
            )
        return names
    wanted = split_list(requested)
    available = sorted({n.split(".")[-1] for n in linears})
    missing = [t for t in wanted if t not in available]
    if missing:
        raise ConfigError(
            f"{option} names {', '.join(missing)}, which are not linear layers of this model; available: "
            f"{', '.join(available)} (or {option}: all)."
        )
    if not frozen:
        return wanted
    names = [n for n in linears if n.split(".")[-1] in wanted and not under(n, frozen)]
    only_frozen = [t for t in wanted if not any(n.split(".")[-1] == t for n in names)]
    if only_frozen:
        inside = [n for n in linears if n.split(".")[-1] in only_frozen]
        raise ConfigError(
            f"{option} names {', '.join(only_frozen)}, which only frozen parts have ({_frozen_hint(inside, frozen)}): "
            f"remove {'it' if len(only_frozen) == 1 else 'them'} from {option}, or unfreeze that part."
        )
    return names


def adapted_layers(model, targets) -> dict[str, tuple[int, int]]:
    """``{module name: (in_features, out_features)}`` of the linear layers peft adapts for ``targets`` (what
    :func:`adapter_targets` returns: "all-linear", a list of last-name components, or full names)."""
    head = _output_layer(model)
    out = {}
    for name, module in model.named_modules():
        if not is_linear(module):
            continue
        hit = name != head if targets == "all-linear" else any(name == t or name.endswith("." + t) for t in targets)
        width = (getattr(module, "in_features", None), getattr(module, "out_features", None))
        if hit and all(isinstance(w, int) for w in width):
            out[name] = width
    return out


def modules_to_save(model, cfg: Config) -> list[str] | None:
    """``additional_target`` (peft's modules_to_save: trained in full); a module inside a frozen part is refused."""
    wanted = split_list(cfg.additional_target)
    frozen = frozen_parts(model, cfg)
    inside = [n for n, _ in model.named_modules() if n and n.split(".")[-1] in wanted and under(n, frozen)]
    if inside:
        names = sorted({n.split(".")[-1] for n in inside})
        raise ConfigError(
            f"additional_target names {', '.join(names)}, which lies in a frozen part "
            f"({_frozen_hint(inside, frozen)}: "
            f"e.g. {inside[0]}): remove it from additional_target, or unfreeze that part."
        )
    return wanted or None


def check_frozen(model, cfg: Config) -> None:
    """No parameter under a frozen part may train, whatever the method did (see the module docstring)."""
    frozen = frozen_parts(model, cfg)
    if not frozen:
        return
    bad = [n for n, p in model.named_parameters() if p.requires_grad and under(base_name(n), frozen)]
    if bad:
        where = {
            "lora": "lora_target / additional_target",
            "oft": "oft_target / additional_target",
            "freeze": "freeze_extra_modules / freeze_trainable_modules",
        }.get(cfg.finetuning_type, "the method")
        if cfg.adapter_paths and cfg.finetuning_type in ("lora", "oft"):
            where = f"the adapter {cfg.adapter_paths[-1]} (adapter_name_or_path)"
        raise ModelError(
            f"{len(bad)} parameters of a frozen part would train "
            f"({_frozen_hint([base_name(n) for n in bad], frozen)}; "
            f"e.g. {bad[0]}), from {where}: unfreeze that part or keep it out of {where}."
        )


def freeze_by_parts(model, cfg: Config) -> None:
    """Full fine-tuning: every parameter trains but those of the frozen parts."""
    frozen = frozen_parts(model, cfg)
    for name, p in model.named_parameters():
        p.requires_grad_(not under(name, frozen))


def freeze_tuning_scope(model, cfg: Config) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Freeze-tuning of a VLM: (the language model's prefixes, whose layers freeze_trainable_layers counts; the vision
    tower / projector prefixes that train by the freeze_* options). ``((), ())`` for a text model."""
    parts = model_parts(model, cfg)
    if not parts:
        return (), ()
    if cfg.freeze_language_model:
        raise ConfigError(
            "finetuning_type freeze trains the language model's last layers, but freeze_language_model is "
            "true: set freeze_language_model: false, or use finetuning_type full to train only the vision "
            "tower / projector."
        )
    media = tuple(p for option in FREEZE_OPTIONS[:2] if not getattr(cfg, option) for p in parts[option])
    return parts["freeze_language_model"], media
