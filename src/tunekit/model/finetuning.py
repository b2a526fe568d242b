"""Apply the fine-tuning method: full, freeze (train the last layers), or LoRA and its variants, OFT, P-Tuning v2 and
prompt tuning through PEFT (the last two in ``model/prompt_adapters.py``).

What may train is one selection for every method (``model/trainable.py``): a vision-language model's frozen parts
(``freeze_*``) get no adapter and no gradient, and :func:`~tunekit.model.trainable.check_frozen` refuses any method
that would train one.

``apply_finetuning(model, cfg)`` returns the model to train (a ``PeftModel`` for LoRA); for inference
(``is_trainable=False``) every adapter in ``adapter_name_or_path`` is loaded and merged, but a prefix / prompt adapter,
which has no weight to merge into: that one stays a ``PeftModel`` (it can only be the last).
"""

from __future__ import annotations

import re
from typing import Any

from ..config.lists import split_list
from ..config.method_rules import oft_sizes
from ..config.problems import Said, config_error
from ..config.schema import Config
from ..errors import ModelError
from .expand import llama_pro_layer_ids
from .moe import expert_lora_layers, lora_moe_targets
from .pickles import check_adapter_folder
from .prompt_adapters import (
    PROMPT_METHODS,
    apply_prompt_learning,
    check_prompt_adapters,
    is_prompt_adapter,
    load_prompt_adapter,
    refuse_under,
)
from .trainable import (
    adapted_layers,
    adapter_targets,
    check_frozen,
    freeze_by_parts,
    freeze_tuning_scope,
    modules_to_save,
)

_LAYER_INDEX = re.compile(r"\.(\d+)\.")


def apply_finetuning(model, cfg: Config, is_trainable: bool = True):
    adapters = cfg.adapter_paths
    if not is_trainable:
        check_prompt_adapters(adapters)
        for path in adapters:
            model = load_prompt_adapter(model, path) if is_prompt_adapter(path) else _merge_adapter(model, path)
        for p in model.parameters():
            p.requires_grad_(False)
        return model
    if cfg.finetuning_type in PROMPT_METHODS:  # P-Tuning v2 / prompt tuning: only the prefix or prompt trains
        model = apply_prompt_learning(model, cfg, adapters, _merge_adapter)
        if not getattr(cfg, "pure_bf16", False):
            _upcast_trainable(model)
        return model
    refuse_under(cfg.finetuning_type, adapters)  # the adapters are merged before another method trains
    if cfg.finetuning_type in ("lora", "oft"):
        model = _apply_lora(model, cfg, adapters)
        check_frozen(model, cfg)  # every method, whatever it did: nothing of a frozen part trains (model/trainable.py)
        return model
    for path in adapters:  # full/freeze on top of an adapter: merge it first
        model = _merge_adapter(model, path)
    if cfg.finetuning_type == "full":
        freeze_by_parts(model, cfg)  # a VLM's freeze_vision_tower / _multi_modal_projector / _language_model
    else:
        _apply_freeze(model, cfg)
    check_frozen(model, cfg)
    if not getattr(cfg, "pure_bf16", False):  # pure_bf16: no fp32 master weights
        _upcast_trainable(model)
    return model


def _merge_adapter(model, path: str):
    from peft import PeftModel

    check_adapter_folder(path)  # a crafted adapter_model.bin: a one-line error naming it
    try:
        return PeftModel.from_pretrained(model, path).merge_and_unload()
    except (OSError, ValueError) as exc:
        raise ModelError(Said("adapter_unloadable", path=str(path), error=str(exc).splitlines()[0])) from None


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
    raise ModelError(Said("ft_layers_unknown"))


def trainable_layer_ids(n_layers: int, k: int) -> list[int]:
    if k > 0:
        return list(range(max(0, n_layers - k), n_layers))
    return list(range(min(-k, n_layers)))


def _apply_freeze(model, cfg: Config) -> None:
    """Freeze-tuning: the last (or first) ``freeze_trainable_layers`` layers train. In a vision-language model these
    are the language model's layers; its vision tower and projector train as ``freeze_vision_tower`` /
    ``freeze_multi_modal_projector`` say (as in full fine-tuning)."""
    lm_parts, media_trained = freeze_tuning_scope(model, cfg)
    config = model.config.get_text_config() if lm_parts else model.config
    n = num_layers(config)
    if cfg.freeze_trainable_layers == 0 or abs(cfg.freeze_trainable_layers) > n:
        raise config_error(
            "plan_freeze_layers_range", ("freeze_trainable_layers",), k=cfg.freeze_trainable_layers, n=n
        )
    if getattr(cfg, "use_llama_pro", False):  # LLaMA Pro: the blocks tunekit expand-blocks inserted
        ids = set(llama_pro_layer_ids(n, cfg.freeze_trainable_layers))
    else:
        ids = set(trainable_layer_ids(n, cfg.freeze_trainable_layers))
    modules = split_list(cfg.freeze_trainable_modules)
    extras = split_list(cfg.freeze_extra_modules)
    layer_children: set[str] = set()
    all_names: set[str] = set()
    for name, _ in model.named_parameters():
        all_names.update(name.split("."))
        m = _LAYER_INDEX.search(name)
        if m:
            rest = name[m.end() :].split(".")
            if rest:
                layer_children.add(rest[0])
    if modules != ["all"]:
        missing = [mod for mod in modules if mod not in all_names]
        if missing:
            raise config_error(
                "ft_freeze_modules_missing",
                ("freeze_trainable_modules",),
                missing=tuple(missing),
                available=tuple(sorted(layer_children)),
            )
    missing_extra = [mod for mod in extras if mod not in all_names]
    if missing_extra:
        raise config_error("plan_freeze_extra_missing", ("freeze_extra_modules",), missing=tuple(missing_extra))
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


def lora_config(cfg: Config, model) -> Any:
    from peft import LoraConfig, TaskType

    moe = lora_moe_targets(model, cfg)  # a mixture of experts: its fused experts too, never a router (model/moe.py)
    targets, parameters = moe or (adapter_targets(model, cfg, "lora_target"), None)  # nothing in a frozen part
    check_lora_rank(cfg.lora_rank, {**adapted_layers(model, targets), **expert_lora_layers(model, parameters)})
    init: Any = True
    if cfg.pissa_init:
        init = "pissa" if cfg.pissa_iter == -1 else f"pissa_niter_{cfg.pissa_iter}"
    return LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=cfg.lora_rank,
        lora_alpha=cfg.resolved_lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        target_parameters=parameters,
        modules_to_save=modules_to_save(model, cfg),
        use_rslora=cfg.use_rslora,
        use_dora=cfg.use_dora,
        init_lora_weights=init,
    )


def oft_config(cfg: Config, model) -> Any:
    """peft's OFT (QOFT on a quantized base) with LLaMA-Factory's options: each target Linear gets a block-diagonal
    orthogonal matrix on its input (``oft_rank`` blocks, or blocks of ``oft_block_size``), identity at the start."""
    from peft import OFTConfig, TaskType

    targets = adapter_targets(model, cfg, "oft_target")  # the one selection: nothing inside a frozen part
    rank, block = oft_sizes(cfg)
    check_oft_blocks(rank, block, [shape[0] for shape in adapted_layers(model, targets).values()])
    return OFTConfig(
        task_type=TaskType.CAUSAL_LM,
        r=rank,
        oft_block_size=block,
        target_modules=targets,
        module_dropout=cfg.module_dropout,
        modules_to_save=modules_to_save(model, cfg),
    )


def _widths(layers: dict[str, tuple[int, int]]) -> Said:
    """The first 8 layer shapes ``in x out``, and how many more (keyed: the board says the tail in Chinese)."""
    shapes = sorted(set(layers.values()))
    more = Said("part_ft_more_shapes", count=len(shapes) - 8) if len(shapes) > 8 else None
    return Said("part_ft_shapes", shapes=", ".join(f"{i}x{o}" for i, o in shapes[:8]), more=more)


def check_lora_rank(rank: int, layers: dict[str, tuple[int, int]]) -> None:
    """A LoRA update B A of a d_in x d_out layer has rank at most min(d_in, d_out): a lora_rank above that for every
    adapted layer only adds parameters (and memory) that cannot learn anything more; refused before any is created."""
    usable = max((min(shape) for shape in layers.values()), default=rank)
    if rank > usable:
        raise config_error("ft_lora_rank_too_large", ("lora_rank",), rank=rank, widths=_widths(layers), usable=usable)


def check_oft_blocks(rank: int, block: int, in_widths) -> None:
    """OFT splits each adapted layer's input into blocks: oft_block_size (or oft_rank, the number of blocks; the pair
    is :func:`~tunekit.config.method_rules.oft_sizes`) must divide every input width, or peft silently picks another
    size per layer (a warning, and not the run that was asked for). The planner applies the same rule."""
    option, value = ("oft_block_size", block) if rank == 0 else ("oft_rank", rank)
    widths = sorted(set(in_widths))
    bad = [w for w in widths if w % value or value > w]
    if bad:
        import math

        common = math.gcd(*widths)
        fits = [d for d in range(1, common + 1) if common % d == 0]
        raise config_error(
            "ft_oft_block_divides",
            (option, "oft_target"),
            option=option,
            value=value,
            widths=", ".join(map(str, widths)),
            bad=", ".join(map(str, bad)),
            fits=", ".join(map(str, fits)),
        )


def _apply_lora(model, cfg: Config, adapters: list[str]):
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
        check_adapter_folder(resume)  # a crafted adapter_model.bin: a one-line error naming it
        try:
            return PeftModel.from_pretrained(model, resume, is_trainable=True)
        except (OSError, ValueError) as exc:
            raise ModelError(
                Said("adapter_resume_unloadable", path=str(resume), error=str(exc).splitlines()[0])
            ) from None
    keep_dtype = (
        dict(autocast_adapter_dtype=False) if getattr(cfg, "pure_bf16", False) else {}
    )  # pure_bf16: adapters in bf16 too
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
    """Save the trained PiSSA adapter converted to plain LoRA on the original base (rank 2r, init_lora_weights
    true)."""
    import copy
    import tempfile
    from pathlib import Path

    from safetensors.torch import save_file

    initial = getattr(model, PISSA_INIT_ATTR, None)
    if initial is None:
        raise ModelError(Said("ft_pissa_not_kept"))
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
