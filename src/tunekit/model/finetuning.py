"""Apply the fine-tuning method: full, freeze (train the last layers), or LoRA and its variants through PEFT.

``apply_finetuning(model, cfg)`` returns the model to train (a ``PeftModel`` for LoRA); for inference
(``is_trainable=False``) every adapter in ``adapter_name_or_path`` is loaded and merged.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ConfigError, ModelError

_LAYER_INDEX = re.compile(r"\.(\d+)\.")


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def apply_finetuning(model, cfg, is_trainable: bool = True):
    adapters = cfg.adapter_paths
    if not is_trainable:
        for path in adapters:
            model = _merge_adapter(model, path)
        for p in model.parameters():
            p.requires_grad_(False)
        return model
    if cfg.finetuning_type in ("lora", "oft"):
        return _apply_lora(model, cfg, adapters)
    for path in adapters:  # full/freeze on top of an adapter: merge it first
        model = _merge_adapter(model, path)
    from .multimodal import apply_freeze, is_multimodal_config, plugin_class

    if cfg.finetuning_type == "full" and is_multimodal_config(model.config) and plugin_class(cfg) is not None:
        apply_freeze(model, cfg, plugin_class(cfg))  # freeze_vision_tower / _multi_modal_projector / _language_model
    elif cfg.finetuning_type == "full":
        for p in model.parameters():
            p.requires_grad_(True)
    else:
        _apply_freeze(model, cfg)
    if not getattr(cfg, "pure_bf16", False):  # pure_bf16: no fp32 master weights
        _upcast_trainable(model)
    return model


def _merge_adapter(model, path: str):
    from peft import PeftModel

    try:
        return PeftModel.from_pretrained(model, path).merge_and_unload()
    except (OSError, ValueError) as exc:
        raise ModelError(f"Adapter {path} could not be loaded: {str(exc).splitlines()[0]}") from None


def _upcast_trainable(model) -> None:
    """Trainable weights in fp32 (mixed precision keeps fp32 master weights), frozen ones stay in the load dtype."""
    import torch

    for p in model.parameters():
        if p.requires_grad and p.dtype in (torch.float16, torch.bfloat16):
            p.data = p.data.to(torch.float32)


def num_layers(config) -> int:
    for key in ("num_hidden_layers", "num_layers", "n_layer"):
        n = getattr(config, key, None)
        if isinstance(n, int):
            return n
    raise ModelError("Cannot tell how many layers this model has (no num_hidden_layers in config.json); use finetuning_type lora or full.")


def trainable_layer_ids(n_layers: int, k: int) -> list[int]:
    if k > 0:
        return list(range(max(0, n_layers - k), n_layers))
    return list(range(min(-k, n_layers)))


def _apply_freeze(model, cfg) -> None:
    """Freeze-tuning: the last (or first) ``freeze_trainable_layers`` layers train. In a vision-language model these
    are the language model's layers; its vision tower and projector train as ``freeze_vision_tower`` /
    ``freeze_multi_modal_projector`` say (as in full fine-tuning)."""
    from .multimodal import freeze_scope

    lm_parts, media_trained = freeze_scope(model, cfg)
    config = model.config.get_text_config() if lm_parts else model.config
    n = num_layers(config)
    if cfg.freeze_trainable_layers == 0 or abs(cfg.freeze_trainable_layers) > n:
        raise ConfigError(f"freeze_trainable_layers {cfg.freeze_trainable_layers} must be between -{n} and {n} (not 0): "
                          f"the model has {n} layers.")
    if getattr(cfg, "use_llama_pro", False):  # LLaMA Pro: the blocks tunekit expand-blocks inserted
        from .expand import llama_pro_layer_ids

        ids = set(llama_pro_layer_ids(n, cfg.freeze_trainable_layers))
    else:
        ids = set(trainable_layer_ids(n, cfg.freeze_trainable_layers))
    modules = _split(cfg.freeze_trainable_modules)
    extras = _split(cfg.freeze_extra_modules)
    layer_children: set[str] = set()
    all_names: set[str] = set()
    for name, _ in model.named_parameters():
        all_names.update(name.split("."))
        m = _LAYER_INDEX.search(name)
        if m:
            rest = name[m.end():].split(".")
            if rest:
                layer_children.add(rest[0])
    if modules != ["all"]:
        missing = [mod for mod in modules if mod not in all_names]
        if missing:
            raise ConfigError(f"freeze_trainable_modules names {', '.join(missing)}, which the layers do not have; "
                              f"available: {', '.join(sorted(layer_children))}.")
    missing_extra = [mod for mod in extras if mod not in all_names]
    if missing_extra:
        raise ConfigError(f"freeze_extra_modules names {', '.join(missing_extra)}, which the model does not have "
                          f"(e.g. embed_tokens, norm, lm_head).")
    for name, p in model.named_parameters():
        parts = name.split(".")
        if lm_parts and not any(name == q or name.startswith(q + ".") for q in lm_parts):
            p.requires_grad_(any(name == q or name.startswith(q + ".") for q in media_trained))
            continue
        m = _LAYER_INDEX.search(name)
        train = False
        if m and int(m.group(1)) in ids:
            train = modules == ["all"] or any(mod in parts for mod in modules)
        if any(mod in parts for mod in extras):
            train = True
        p.requires_grad_(train)


def linear_module_names(model) -> list[str]:
    import torch

    names = set()
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) or type(module).__name__ in ("Linear4bit", "Linear8bitLt", *PREQUANTIZED_LINEAR):
            names.add(name.split(".")[-1])
    return sorted(names)


# Linear layers of pre-quantized bases that are not torch.nn.Linear (peft's "all-linear" does not see them): aqlm.
PREQUANTIZED_LINEAR = ("QuantizedLinear",)


def _prequantized_linear_names(model) -> list[str]:
    """For lora_target: all on a pre-quantized base: every quantized linear layer's name (the LM head is never one)."""
    return sorted({name.split(".")[-1] for name, module in model.named_modules() if type(module).__name__ in PREQUANTIZED_LINEAR})


def lora_config(cfg, model) -> Any:
    from peft import LoraConfig, TaskType

    from .multimodal import is_multimodal_config, lora_targets, plugin_class

    if cfg.lora_target.strip() == "all" and is_multimodal_config(model.config) and plugin_class(cfg) is not None:
        targets: Any = lora_targets(model, cfg, plugin_class(cfg))  # the unfrozen parts' linear layers only
    elif cfg.lora_target.strip() == "all":
        targets = _prequantized_linear_names(model) or "all-linear"
    else:
        targets = _split(cfg.lora_target)
        available = linear_module_names(model)
        missing = [t for t in targets if t not in available]
        if missing:
            raise ConfigError(f"lora_target names {', '.join(missing)}, which are not linear layers of this model; "
                              f"available: {', '.join(available)} (or lora_target: all).")
    init: Any = True
    if cfg.pissa_init:
        init = "pissa" if cfg.pissa_iter == -1 else f"pissa_niter_{cfg.pissa_iter}"
    return LoraConfig(
        task_type=TaskType.CAUSAL_LM, r=cfg.lora_rank, lora_alpha=cfg.resolved_lora_alpha, lora_dropout=cfg.lora_dropout,
        target_modules=targets, modules_to_save=_split(cfg.additional_target) or None, use_rslora=cfg.use_rslora,
        use_dora=cfg.use_dora, init_lora_weights=init,
    )


def oft_config(cfg, model) -> Any:
    """peft's OFT (QOFT on a quantized base) with LLaMA-Factory's options: each target Linear gets a block-diagonal
    orthogonal matrix on its input (``oft_rank`` blocks, or blocks of ``oft_block_size``), identity at the start."""
    from peft import OFTConfig, TaskType

    targets: Any = "all-linear"
    if cfg.oft_target.strip() != "all":
        targets, available = _split(cfg.oft_target), linear_module_names(model)
        missing = [t for t in targets if t not in available]
        if missing:
            raise ConfigError(f"oft_target names {', '.join(missing)}, which are not linear layers of this model; "
                              f"available: {', '.join(available)} (or oft_target: all).")
    return OFTConfig(task_type=TaskType.CAUSAL_LM, r=cfg.oft_rank, oft_block_size=cfg.oft_block_size, target_modules=targets,
                     module_dropout=cfg.module_dropout, modules_to_save=_split(cfg.additional_target) or None)


def _apply_lora(model, cfg, adapters: list[str]):
    from peft import PeftModel, get_peft_model

    if cfg.quantization_bit is not None:
        _freeze_quantized_base(model)
    resume = None
    if adapters and not cfg.create_new_adapter:
        adapters, resume = adapters[:-1], adapters[-1]
    for path in adapters:
        model = _merge_adapter(model, path)
    if cfg.use_gradient_checkpointing:
        model.enable_input_require_grads()
    if resume:
        try:
            return PeftModel.from_pretrained(model, resume, is_trainable=True)
        except (OSError, ValueError) as exc:
            raise ModelError(f"Adapter {resume} could not be loaded to continue training: {str(exc).splitlines()[0]}") from None
    keep_dtype = dict(autocast_adapter_dtype=False) if getattr(cfg, "pure_bf16", False) else {}  # pure_bf16: adapters in bf16 too
    if cfg.finetuning_type == "oft":
        return get_peft_model(model, oft_config(cfg, model), **keep_dtype)
    model = get_peft_model(model, lora_config(cfg, model), **keep_dtype)
    if cfg.pissa_init and cfg.pissa_convert:
        remember_pissa_init(model)
    return model


# ------------------------------------------------------------------------------------------- PiSSA -> LoRA
# PiSSA moves the principal part of each target weight into the adapter: W = W_res + s B0 A0. The trained adapter
# (A, B) only makes sense on W_res, which is not saved, and re-applying the adapter config to the original base
# re-runs the (randomised) SVD, so a different W_res. With pissa_convert the saved adapter is the plain LoRA of the
# change, s (B A - B0 A0) = s [B | -B0] [A ; A0] (rank 2r), which applies to the ORIGINAL base like any LoRA; peft
# computes it in save_pretrained(path_initial_model_for_weight_conversion=...) from the initial adapter.
PISSA_INIT_ATTR = "tunekit_pissa_init"


def remember_pissa_init(model) -> None:
    """Keep the freshly initialised PiSSA adapter (A0, B0; adapter-sized, on CPU) for the conversion at save time.

    Taken right after ``get_peft_model``, before any step or checkpoint load: on a resumed run it is the same
    initialisation again (the run's seed is set before the model is built).
    """
    from peft import get_peft_model_state_dict

    state = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in get_peft_model_state_dict(model).items()}
    object.__setattr__(model, PISSA_INIT_ATTR, state)  # a plain attribute: not a parameter, not in any state_dict


def save_pissa_converted(model, folder) -> None:
    """Save the trained PiSSA adapter converted to plain LoRA on the original base (rank 2r, init_lora_weights true)."""
    import copy
    import tempfile
    from pathlib import Path

    from safetensors.torch import save_file

    initial = getattr(model, PISSA_INIT_ATTR, None)
    if initial is None:
        raise ModelError("pissa_convert: the initial PiSSA adapter was not kept (the model was not built with "
                         "pissa_init and pissa_convert by tunekit); cannot convert the adapter to plain LoRA.")
    with tempfile.TemporaryDirectory(prefix="tunekit-pissa-") as tmp:
        init_dir = Path(tmp) / "pissa_init"
        config = copy.deepcopy(model.peft_config["default"])
        config.init_lora_weights = True  # loading the initial adapter must not run PiSSA on the base again
        config.save_pretrained(str(init_dir))
        save_file(initial, str(init_dir / "adapter_model.safetensors"), metadata={"format": "pt"})
        model.save_pretrained(str(folder), path_initial_model_for_weight_conversion=str(init_dir))


def _freeze_quantized_base(model) -> None:
    """QLoRA set-up: freeze the quantized base, and keep its other weights in the load dtype.

    PEFT's ``prepare_model_for_kbit_training`` also upcasts every weight that is not quantized (embeddings,
    norms, lm_head) to fp32: +2 B per parameter, about 2 GiB more on a 7B model with a 152k vocabulary,
    for nothing the adapters need (autocast computes in 16 bits either way). LLaMA-Factory skips that
    upcast too. Gradient checkpointing is set up by the loader and ``_apply_lora`` like for plain LoRA.
    """
    for p in model.parameters():
        p.requires_grad_(False)


def count_parameters(model) -> tuple[int, int]:
    def numel(p) -> int:  # ZeRO-3 partitions leave numel() == 0; ds_numel is the full size
        return getattr(p, "ds_numel", None) or p.numel()

    trainable = sum(numel(p) for p in model.parameters() if p.requires_grad)
    total = sum(numel(p) for p in model.parameters())
    return trainable, total
