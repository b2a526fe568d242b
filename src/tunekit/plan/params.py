"""Which parameters a run trains, holds frozen or quantizes, counted from the shape alone.

Mirrors ``tunekit.model.finetuning``: LoRA through PEFT (``all`` = every Linear of the decoder layers,
``additional_target`` = trainable copies via ``modules_to_save``), freeze = the last/first N layers
(optionally only some modules) plus ``freeze_extra_modules``, full = everything; P-Tuning v2 / prompt tuning
(``model/prompt_adapters.py``) = PEFT's prefix / prompt encoder only (:func:`prompt_params`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..config.problems import Said
from ..errors import ConfigError
from ..model.expand import llama_pro_layer_ids
from ..model.finetuning import check_oft_blocks
from .architectures import ModelShape
from .moe import expert_lora
from .optimizer_states import custom_state_bytes
from .training_setup import Setup
from .vision_memory import count_vision


@dataclass(frozen=True)
class ParamCounts:
    trainable: int
    trainable_tensors: int
    frozen_linear: int  # frozen Linear weights inside decoder layers (what QLoRA quantizes)
    frozen_linear_out_rows: int  # their output rows (8-bit keeps one fp32 scale per row)
    frozen_other: int  # every other frozen parameter (embeddings, norms, biases, lm_head)
    lora: int  # adapter parameters (part of trainable)
    adapted_per_layer: tuple[str, ...]  # adapted Linear paths inside a layer, of every structure (MoE dense ones)
    trainable_layer_ids: tuple[int, ...]  # layers with trainable weights (all for full/LoRA)
    largest_trainable_tensor: int
    media_grad: bool = False  # a VLM's vision side trains: the image embeddings entering the LM need a gradient

    @property
    def frozen(self) -> int:
        return self.frozen_linear + self.frozen_other


def lora_adapted(shape: ModelShape, setup: Setup) -> tuple[str, ...]:
    """The adapted Linear modules of one layer; a mixture of experts' routers never (``model/moe.py``), its fused
    experts are counted by :func:`~tunekit.plan.moe.expert_lora`."""
    routers = (*shape.moe.router_paths, *shape.moe.unadapted) if shape.moe is not None else ()  # model/moe.py
    every = {lin.path: lin for view, _ in shape.variants() for lin in view.linears}  # dense layers' too
    linears = [lin for lin in every.values() if lin.path not in routers]
    if setup.lora_targets is None:
        return tuple(lin.path for lin in linears)
    vision = (
        {n.split(".")[-1] for _, n, _, _ in shape.vision.linears + shape.vision.convs}
        if shape.vision is not None
        else set()
    )
    experts = {"experts", *(f.name for f in shape.moe.fused)} if shape.moe is not None else set()
    missing = [
        t for t in setup.lora_targets if not any(lin.name == t for lin in linears) and t not in vision | experts
    ]
    if missing:
        available = tuple(sorted({lin.name for lin in linears} | experts))
        raise ConfigError(
            Said("plan_lora_target_missing", missing=tuple(missing), name=shape.name, available=available)
        )
    return tuple(lin.path for lin in linears if lin.name in setup.lora_targets)


def layer_linears(shape: ModelShape) -> tuple[int, int]:
    """``(parameters, output rows)`` of the Linear weights of all decoder layers, each layer with its own structure
    (an MoE model's dense layers apart)."""
    params = sum(view.linear_params_per_layer * n for view, n in shape.variants())
    rows = sum(sum(lin.out_features for lin in view.linears) * n for view, n in shape.variants())
    return params, rows


def freeze_layer_ids(n_layers: int, k: int) -> tuple[int, ...]:
    if k == 0 or abs(k) > n_layers:
        raise ConfigError(Said("plan_freeze_layers_range", k=k, n=n_layers))
    return tuple(range(max(0, n_layers - k), n_layers)) if k > 0 else tuple(range(min(-k, n_layers)))


def lm_frozen(shape: ModelShape, setup: Setup) -> bool:
    """Full fine-tuning of a VLM with ``freeze_language_model``: only vision parts train."""
    return shape.vision is not None and setup.vision_freeze[2] and setup.finetuning_type == "full"


def count_params(shape: ModelShape, setup: Setup) -> ParamCounts:
    """Trainable and frozen parameters of the language model, plus a VLM's vision tower and projector."""
    if shape.vision is None:
        return _count_lm(shape, setup)
    if setup.finetuning_type in ("ptuning", "prompt"):
        raise ConfigError(Said("plan_vlm_prompt", method=setup.finetuning_type, name=shape.name))
    if setup.finetuning_type == "oft" and not (setup.vision_freeze[0] and setup.vision_freeze[1]):
        raise ConfigError(Said("plan_vlm_oft", name=shape.name))
    if lm_frozen(shape, setup):
        linear, rows = layer_linears(shape)
        lm = ParamCounts(0, 0, linear, rows, shape.total_params - linear, 0, (), (), 0)
    elif setup.vision_freeze[2] and setup.finetuning_type == "lora":
        lm = _count_lm(
            shape, setup.with_(lora_targets=())
        )  # no adapter on a frozen language model (model/trainable.py)
    else:
        lm = _count_lm(shape, setup)
    v = count_vision(shape.vision, setup)
    return replace(
        lm,
        trainable=lm.trainable + v.trainable,
        trainable_tensors=lm.trainable_tensors + v.tensors,
        frozen_other=lm.frozen_other + v.frozen,
        lora=lm.lora + v.lora,
        largest_trainable_tensor=max(lm.largest_trainable_tensor, v.largest),
        media_grad=v.trainable > 0,
    )


def _count_lm(shape: ModelShape, setup: Setup) -> ParamCounts:
    """The language model's parameters under ``setup.finetuning_type``."""
    if setup.finetuning_type == "lora":
        return _count_lora(shape, setup)
    if setup.finetuning_type == "oft":
        return _count_oft(shape, setup)
    if setup.finetuning_type in ("ptuning", "prompt"):
        return _count_prompt(shape, setup)
    if setup.finetuning_type == "full":
        names = [*shape.layer_param_names, *shape.dense_param_names, *shape.other_param_names]
        largest = max(k for _, k in names)
        return ParamCounts(
            shape.total_params, shape.num_param_tensors, 0, 0, 0, 0, (), tuple(range(shape.layers)), largest
        )
    return _count_freeze(shape, setup)


def _count_lora(shape: ModelShape, setup: Setup) -> ParamCounts:
    """LoRA (DoRA): the adapters of the targeted Linears, and ``additional_target``'s trainable copies."""
    L = shape.layers
    adapted = lora_adapted(shape, setup)
    r = setup.lora_rank
    lora = n_tensors = largest = 0
    for view, n in shape.variants():  # an MoE model's dense layers apart
        for lin in view.linears:
            if lin.path in adapted:
                lora += n * (r * (lin.in_features + lin.out_features) + (lin.out_features if setup.use_dora else 0))
                n_tensors += n * (2 + int(setup.use_dora))
                largest = max(largest, r * lin.in_features, r * lin.out_features)
    expert_params, expert_tensors, expert_largest = expert_lora(shape.moe, setup.lora_targets, r)
    sparse = shape.moe.sparse_layers if shape.moe is not None else 0
    lora += expert_params * sparse  # + LoRA on the fused experts (PEFT target_parameters)
    trainable, n_tensors = lora, n_tensors + expert_tensors * sparse
    largest = max(largest, expert_largest)
    for target in setup.additional_target:  # modules_to_save: a trainable copy, the original stays frozen
        found = [(n, k) for n, k in shape.other_param_names if target in n.split(".")]
        if not found and target == "lm_head" and shape.tied:  # tied to the embeddings: PEFT copies that weight
            found = [(n, k) for n, k in shape.other_param_names if "embed_tokens" in n.split(".")]
        if not found:
            raise ConfigError(Said("plan_additional_target_missing", target=repr(target), name=shape.name))
        trainable += sum(k for _, k in found)
        n_tensors += len(found)
        largest = max([largest] + [k for _, k in found])
    frozen_linear, rows = layer_linears(shape)
    frozen_other = shape.total_params - frozen_linear
    return ParamCounts(
        trainable, n_tensors, frozen_linear, rows, frozen_other, lora, adapted, tuple(range(L)), largest
    )


def _count_freeze(shape: ModelShape, setup: Setup) -> ParamCounts:
    """Freeze tuning: the trainable layers' (``freeze_trainable_modules``) and ``freeze_extra_modules``' parameters."""
    L = shape.layers
    if setup.llama_pro:
        ids = tuple(llama_pro_layer_ids(L, setup.freeze_layers))
    else:
        ids = freeze_layer_ids(L, setup.freeze_layers)
    modules = setup.freeze_modules
    layer_parts = set()
    for n, _ in (*shape.layer_param_names, *shape.dense_param_names):
        layer_parts.update(n.split("."))
    other_parts = set()
    for n, _ in shape.other_param_names:
        other_parts.update(n.split("."))
    if modules != ("all",):
        missing = [m for m in modules if m not in layer_parts and m not in other_parts]
        if missing:
            raise ConfigError(Said("plan_freeze_modules_missing", missing=tuple(missing)))
    missing_extra = [
        m for m in setup.freeze_extra if m not in layer_parts | other_parts | set(shape.layers_path.split("."))
    ]
    if missing_extra:
        raise ConfigError(Said("plan_freeze_extra_missing", missing=tuple(missing_extra)))
    trainable = tensors = frozen_linear = rows = 0
    largest = 0
    path_parts = shape.layers_path.split(".")
    for i in range(L):
        layer = shape.layer_at(i)  # an MoE model's dense layers have their own structure
        linear_weight = {f"{lin.path}.weight": lin for lin in layer.linears}
        for n, k in layer.layer_param_names:
            parts = path_parts + [str(i)] + n.split(".")
            train = (i in ids and (modules == ("all",) or any(m in parts for m in modules))) or any(
                m in parts for m in setup.freeze_extra
            )
            if train:
                trainable += k
                tensors += 1
                largest = max(largest, k)
            elif n in linear_weight:
                frozen_linear += k
                rows += linear_weight[n].out_features
    for n, k in shape.other_param_names:
        if any(m in n.split(".") for m in setup.freeze_extra):
            trainable += k
            tensors += 1
            largest = max(largest, k)
    frozen_other = shape.total_params - trainable - frozen_linear
    return ParamCounts(trainable, tensors, frozen_linear, rows, frozen_other, 0, (), ids, largest)


def _count_oft(shape: ModelShape, setup: Setup) -> ParamCounts:
    """peft OFT: per adapted Linear, ``in / b`` blocks of ``b(b-1)/2`` skew-symmetric parameters (one ``oft_R``
    tensor), ``b = oft_block_size`` or ``in / oft_rank``."""
    rank, block, targets = setup.oft
    L = shape.layers
    params = tensors = largest = 0
    adapted: dict[str, None] = {}  # the adapted paths of every layer structure (an MoE model's dense layers too)
    chosen = [(lin, count) for view, count in shape.variants() for lin in view.linears]
    chosen = [(lin, count) for lin, count in chosen if targets is None or lin.name in targets]
    check_oft_blocks(rank, block, [lin.in_features for lin, _count in chosen])  # what the run refuses, refused here
    for lin, count in chosen:
        adapted[lin.path] = None
        b = block or lin.in_features // rank
        n = (lin.in_features // b) * (b * (b - 1) // 2)
        params, tensors, largest = params + n * count, tensors + count, max(largest, n)
    frozen_linear, rows = layer_linears(shape)
    return ParamCounts(
        params,
        tensors,
        frozen_linear,
        rows,
        shape.total_params - frozen_linear,
        params,
        tuple(adapted),
        tuple(range(L)),
        largest,
    )


def prompt_params(shape: ModelShape, setup: Setup) -> list[int]:
    """The sizes of the tensors PEFT trains for ``setup.prompt`` (``training_setup.Setup``).

    ``("ptuning", n, projection, h)``: prefix tuning keeps one key and one value vector per layer and prefix position,
    of the layer's key/value width ``kv_dim`` (PEFT's ``token_dim`` on a grouped-query model): an
    ``n x (layers x 2 x kv_dim)`` embedding; with ``prefix_projection`` an ``n x kv_dim`` embedding and the MLP
    ``kv_dim -> h -> layers x 2 x kv_dim`` (weights and biases; ``h`` defaults to ``kv_dim``).
    ``("prompt", n)``: prompt tuning's ``n x hidden`` virtual token embeddings."""
    kind, n, *rest = setup.prompt
    if kind == "prompt":
        return [n * shape.hidden]
    width, out = shape.kv_dim, shape.layers * 2 * shape.kv_dim
    projection, hidden = rest
    if not projection:
        return [n * out]
    h = hidden or width
    return [n * width, width * h, h, h * out, out]


def _count_prompt(shape: ModelShape, setup: Setup) -> ParamCounts:
    """P-Tuning v2 / prompt tuning: the prefix or prompt trains, every weight of the model stays frozen."""
    tensors = prompt_params(shape, setup)
    frozen_linear, rows = layer_linears(shape)
    return ParamCounts(
        sum(tensors),
        len(tensors),
        frozen_linear,
        rows,
        shape.total_params - frozen_linear,
        0,
        (),
        tuple(range(shape.layers)),  # the gradient reaches every layer (each has prefix keys; the prompt is below all)
        max(tensors),
    )


def quantized_bytes(counts: ParamCounts, setup: Setup) -> float:
    """Bytes of the frozen Linear weights under bitsandbytes 4-/8-bit (see docs/memory-model.md)."""
    if setup.quant_bits == 4:
        per = 0.5 + (1 / 64 + 4 / (64 * 256) if setup.double_quant else 4 / 64)
        return counts.frozen_linear * per
    if setup.quant_bits == 8:
        return counts.frozen_linear * 1.0 + 4 * counts.frozen_linear_out_rows
    return counts.frozen_linear * setup.base_bytes


def optimizer_state_bytes(setup: Setup, counts: ParamCounts, shape: ModelShape, state_bytes: int) -> float:
    """Persistent optimizer state for the trainable parameters (not sharded here)."""
    name = setup.optim.lower()
    p, n = counts.trainable, counts.trainable_tensors
    if setup.custom_optim:  # GaLore, APOLLO, BAdam, Adam-mini, Muon: tensor by tensor (plan/optimizer_states.py)
        exact = custom_state_bytes(setup.custom_optim, setup.custom_optim_settings, shape, state_bytes)
        return exact if setup.finetuning_type == "full" else exact * p / max(shape.total_params, 1)
    if setup.zero_stage is not None:  # DeepSpeed's own Adam keeps fp32 moments
        return 0.0 if name in ("sgd",) else 8.0 * p
    if "8bit" in name:
        return 2.0 * p + 2 * p / 256 * 4 + 4 * n
    if name in ("sgd",) or name.startswith("lomo") or name.startswith("adalomo"):
        return 0.0
    if name.startswith("adafactor"):
        return 4.0 * math.sqrt(max(p, 1)) * 2 * n  # factored second moment: ~4(rows + cols) per matrix
    if name.startswith("galore") or name.startswith("apollo"):
        return 2.0 * p * state_bytes / 4  # projected states: an upper bound at rank 1/4 of the width
    # AdamW family: exp_avg and exp_avg_sq like the parameter, plus an fp32 step counter per tensor
    return 2.0 * p * state_bytes + 4 * n


def optimizer_step_temp_bytes(setup: Setup, counts: ParamCounts, state_bytes: int) -> float:
    """Extra memory inside ``optimizer.step()``: torch's foreach AdamW copies exp_avg_sq once."""
    name = setup.optim.lower()
    if setup.zero_stage is not None or "fused" in name:
        return 0.0
    if name in ("adamw_torch", "adamw_hf", "adamw"):
        return float(counts.trainable * state_bytes)
    return 0.0
