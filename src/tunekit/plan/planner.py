"""``make_plan``: steps, memory per device, time and fit for a Config, without loading any weights."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np

from ..config import build_config
from ..config.problems import Said
from ..config.schema import Config
from ..data.lengths import measure_lengths
from ..env import env_nodes, env_world_size
from ..errors import ConfigError, TunekitError
from ..model.loader import load_tokenizer
from ..model.sequence_split import check_sequence_split
from ..train.decisions import decide_features
from ..train.engines.ray_launch import use_ray
from ..train.steps import StepPlan, plan_steps, split_sizes
from ..train.token_budget import budget_batches
from .architectures import ModelShape, load_shape, read_config_json, shape_from_config
from .batching import batching_stats, training_rows
from .checkpointing import decide_for, planned_at
from .fit import SAFETY_MARGIN, auto_fit_overrides, usable_bytes
from .global_batch import data_parallel_size, global_batch
from .gpus import GPU, custom_gpu, detect_gpu, find_gpu
from .memory import GiB, MemoryEstimate, estimate_memory
from .notes import Note
from .params import ParamCounts, count_params
from .result import Plan
from .stats import packed_rows, padded_tokens_per_sample
from .time import estimate_time
from .training_setup import Setup, memory_seq_len, planned_machine, resolve_setup
from .vision import assumed_media, measured_media, media_section


def _positive(name: str, value: Any) -> None:
    if value is not None and (not isinstance(value, int) or value < 1):
        raise ConfigError(Said("plan_positive", name=name, value=repr(value)))


def world_from(gpus: int | None, nodes: int | None, cfg: Config | None = None) -> tuple[int, int]:
    """Data-parallel world size: --gpus per node x --nodes, else ``ray_num_workers`` with USE_RAY=1 (Ray Train starts
    that many processes, placed on --nodes or one node), else torchrun's NPROC_PER_NODE x NNODES, else 1."""
    if gpus is None and cfg is not None and use_ray():
        return cfg.ray_num_workers, nodes or 1
    per_node = gpus if gpus is not None else int(os.environ.get("NPROC_PER_NODE", "1") or 1)
    n_nodes = nodes if nodes is not None else env_nodes()
    return per_node * n_nodes, n_nodes


def measure_data(cfg: Config):
    """Token lengths of the configured data, or ``(None, reason)`` when the data/tokenizer is not on disk."""
    if not cfg.dataset:
        return None, Note("why_no_dataset")
    try:
        tokenizer = load_tokenizer(cfg)
        return measure_lengths(cfg, tokenizer), None
    except TunekitError as exc:
        return None, Note("why_error", error=str(exc).splitlines()[0])


def _check_sharding(shape: ModelShape, setup: Setup, trainable: int) -> None:
    if setup.zero_stage is None and setup.fsdp is None:
        return
    n = setup.world_size
    what = f"ZeRO-{setup.zero_stage}" if setup.zero_stage is not None else f"FSDP {setup.fsdp}"
    if n > 1 and trainable < n:
        raise ConfigError(Said("plan_shard_fewer", what=what, trainable=trainable, name=shape.name, n=n))
    if n > 1 and (setup.zero_stage or 0) >= 2 and trainable // n < 1024:
        most = max(1, trainable // 1024)
        raise ConfigError(Said("plan_shard_small", what=what, n=n, per_gpu=trainable // n, name=shape.name, most=most))


def make_plan(
    cfg: Config,
    gpu: str | None = None,
    gpu_memory_gib: float | None = None,
    gpus: int | None = None,
    nodes: int | None = None,
    num_samples: int | None = None,
    seq_len: int | None = None,
    model_config: str | None = None,
    auto_fit: bool = False,
    lengths=None,
    images: int | None = None,
    image_size: tuple[int, int] | None = None,
    videos: int | None = None,
    video_seconds: float | None = None,
) -> Plan:
    """Plan a run of ``cfg``; ``Plan.to_json()`` is what ``tunekit plan --json`` prints (docs/memory-model.md)."""
    for name, value in (("--gpus", gpus), ("--nodes", nodes), ("--num-samples", num_samples), ("--seq-len", seq_len)):
        _positive(name, value)
    if gpu and gpu_memory_gib:
        raise ConfigError(Said("plan_gpu_both"))
    device: GPU | None = find_gpu(gpu) if gpu else (custom_gpu(gpu_memory_gib) if gpu_memory_gib else None)
    name, config = read_config_json(model_config, cfg.model_name_or_path)
    shape = shape_from_config(name, config)
    check_sequence_split(cfg.cp_size, config)  # cp_size: the heads divide, full attention only, text only
    world, n_nodes = world_from(gpus, nodes, cfg)
    dp = data_parallel_size(cfg, world)  # the micro-batches of one accumulation step: world / cp_size
    notes: list[Note] = []
    fields: dict[str, Any] = {"model": shape.to_dict(), "world_size": world, "nodes": n_nodes}
    fields["gpus_per_node"] = world // n_nodes

    lengths, samples, s_mem, s_time, s_source = _data_section(cfg, lengths, num_samples, seq_len, notes)
    steps = _steps_section(cfg, lengths if num_samples is None else None, samples, dp, fields, notes)
    fields["effective_batch_size"] = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * dp
    fields["global_batch"] = global_batch(cfg, dp, cfg.max_tokens_per_batch, world)  # and the learning-rate advice
    if lengths is not None and num_samples is None:  # pad share and tokens per optimizer step of every batching mode
        fields["batching"] = batching_stats(lengths, cfg, dp)

    # memory: the run's decisions for the planned device, the same step tunekit train takes (plan/decide.py)
    decisions = decide_features(cfg, planned_machine(cfg, world))
    fields["decisions"] = {name: {"on": d.on, "why": d.why} for name, d in decisions.features().items()}
    setup = resolve_setup(cfg, world, n_nodes, s_mem, decisions, shape)
    if shape.vision is not None:
        measured = lengths if num_samples is None else None
        setup = _media(shape, cfg, setup, measured, (images, image_size, videos, video_seconds), fields, notes)
    if decisions.gradient_checkpointing.detail[1]:  # auto, still to decide
        setup = _auto_checkpointing(shape, setup, device, notes, s_source)
    counts = count_params(shape, setup)
    _check_sharding(shape, setup, counts.trainable)
    mem = estimate_memory(shape, setup, counts)
    notes.extend(mem.notes)
    fields.update(seq_len=s_mem, seq_len_source=s_source, tokens_per_micro_batch=setup.batch_tokens)
    if setup.cp_size > 1:
        fields["context_parallel"] = _context_parallel(cfg, setup, dp)
    fields.update(params=_params(shape, counts), memory=mem.gib(), cpu_memory_gib=round(mem.cpu_bytes / GiB, 2))
    fields["setup"] = _describe(setup)

    if steps is not None:
        fields["time"] = _time_section(
            cfg, shape, setup, counts, steps, s_time, fields["effective_batch_size"], device
        )
    _fit_section(cfg, shape, setup, mem, device, auto_fit, fields, notes)
    return Plan(**fields, notes=notes)


def _steps_section(
    cfg: Config, lengths, samples: int | None, world: int, fields: dict[str, Any], notes: list[Note]
) -> StepPlan | None:
    """The steps as the trainer counts them (``train/steps.py``) into ``fields``; ``None`` without a sample count.

    ``lengths``: the measured rows, when they are what trains (not replaced by ``--num-samples``); ``world``: the
    data-parallel size (sequence groups under context parallelism: their processes draw the same rows)."""
    if samples is None:
        return None
    if cfg.eval_dataset:
        train_n, eval_n = samples, None
        notes.append(Note("note_eval_separate"))
    else:
        train_n, eval_n = split_sizes(samples, cfg.val_size)
    if train_n < 1:
        raise ConfigError(Said("plan_val_size_no_train", val_size=cfg.val_size, samples=samples))
    warm, ratio = cfg.warmup
    budget = _budget_batches(cfg, lengths, notes) if lengths is not None else None
    steps = plan_steps(
        train_n,
        cfg.per_device_train_batch_size,
        cfg.gradient_accumulation_steps,
        world,
        cfg.num_train_epochs,
        cfg.max_steps,
        warm,
        ratio,
        cfg.save_strategy,
        cfg.save_steps,
        num_batches=budget,
    )
    legacy = max(steps.micro_batches_per_device // cfg.gradient_accumulation_steps, 1)
    fields.update(num_samples=samples, train_samples=train_n, eval_samples=eval_n)
    fields.update({k: v for k, v in steps.to_dict().items() if k not in ("train_samples", "world_size")})
    fields["steps_per_epoch_floor_rounding"] = legacy
    if legacy != steps.steps_per_epoch:
        notes.append(Note("note_rounding", floor=legacy))
    return steps


def _context_parallel(cfg: Config, setup: Setup, dp: int) -> dict[str, Any]:
    """The ``context_parallel`` section: how the processes split (sequence groups of ``cp_size``) and the tokens of
    a micro-batch each process holds (``Setup.tokens``, what its activations are planned for)."""
    return {
        "cp_size": setup.cp_size,
        "cp_mode": cfg.cp_mode,
        "processes": setup.world_size,
        "data_parallel": dp,
        "tokens_per_process": setup.tokens,
    }


def _params(shape: ModelShape, counts: ParamCounts) -> dict[str, Any]:
    """The ``params`` section: every parameter (a VLM's tower and projector included) and the trainable ones."""
    total = shape.total_params + (shape.vision.total_params if shape.vision is not None else 0)
    return {
        "total": total,
        "trainable": counts.trainable,
        "lora": counts.lora,
        "trainable_share": round(counts.trainable / max(1, total), 6),
    }


def _time_section(
    cfg: Config,
    shape: ModelShape,
    setup: Setup,
    counts: ParamCounts,
    steps: StepPlan,
    tokens_per_sample: float,
    effective_batch_size: int,
    device: GPU | None,
) -> dict[str, Any]:
    """FLOPs of the planned steps and, on a GPU with a known peak, their time."""
    processed = (
        steps.total_steps * effective_batch_size if cfg.max_steps > 0 else steps.train_samples * cfg.num_train_epochs
    )
    return estimate_time(
        shape,
        setup,
        counts,
        tokens_per_sample,
        int(processed),
        1.0,
        steps.total_steps,
        device.peak_flops if device and device.bf16_tflops else None,
    )


def _data_section(cfg: Config, lengths, num_samples, seq_len, notes: list[Note]):
    """``(lengths, samples, seq_len for memory, tokens per sample for time, where the seq came from)``."""
    if lengths is None and num_samples is None:
        lengths, why = measure_data(cfg)
        if lengths is None:
            notes.append(Note("note_no_data", why=why))
    measured = None
    if lengths is not None:
        measured = np.asarray(lengths["total_len"], dtype=np.int64)
    samples = num_samples if num_samples is not None else (len(measured) if measured is not None else None)
    pad = max(1, cfg.pad_to_multiple_of)
    if seq_len is not None:
        s_mem, s_time, s_source = seq_len, float(seq_len), Note("source_seq_len")
    elif measured is not None and len(measured) and not cfg.use_packing:  # packed rows are cutoff_len long
        clipped = np.minimum(measured, cfg.cutoff_len)
        s_mem, s_source = memory_seq_len(cfg, int(clipped.max()))
        s_time = (
            float(clipped.mean())
            if cfg.padding_free
            else padded_tokens_per_sample(clipped, cfg.per_device_train_batch_size, pad, cfg.group_by_length)
        )
    else:
        s_mem, s_source = memory_seq_len(cfg)
        s_time = float(cfg.cutoff_len)
    if cfg.use_packing and measured is not None and num_samples is None:
        samples = max(1, packed_rows(measured, cfg.cutoff_len, cfg.preprocessing_batch_size))
        notes.append(Note("note_packing", samples=len(measured), seqs=samples, tokens=cfg.cutoff_len))
    return lengths, samples, s_mem, s_time, s_source


def _media(
    shape: ModelShape, cfg: Config, setup: Setup, lengths, assumed, fields: dict[str, Any], notes: list[Note]
) -> Setup:
    """A VLM's media per sample (measured, else assumed from the resolution options) into the plan and the set-up."""
    v = shape.vision
    media = (measured_media(v, lengths) if assumed == (None,) * 4 else None) or assumed_media(v, cfg, *assumed)
    fields["media"], more = media_section(v, cfg, media, setup.micro_batch)
    notes.extend(more)
    return setup.with_(
        media_patches=setup.micro_batch * media.patches,
        largest_image_patches=max(media.image_patches, media.video_patches),
    )


def _fit_section(
    cfg: Config,
    shape: ModelShape,
    setup: Setup,
    mem: MemoryEstimate,
    device: GPU | None,
    auto_fit: bool,
    fields: dict[str, Any],
    notes: list[Note],
) -> None:
    """Whether the plan fits the GPU, and ``--auto-fit``'s overrides, into ``fields``."""
    if device is not None:
        fields["gpu"] = {
            "name": device.name,
            "memory_gib": device.memory_gib,
            "bf16_tflops": device.bf16_tflops or None,
        }
        fields["fits"] = bool(mem.total <= usable_bytes(device))
        fields["headroom_gib"] = round(device.memory_gib - mem.total / GiB, 3)
        fields["safety_margin"] = SAFETY_MARGIN
    else:
        fields["fits"] = None
    if auto_fit:
        if device is None:
            raise ConfigError(Said("plan_auto_fit_no_gpu"))
        fit = auto_fit_overrides(cfg, shape, setup, device)
        fields["overrides"] = fit.overrides
        fields["fit"] = {**fit.to_dict(), "memory": fit.memory.gib()}
        if not fit.fits:
            more = Note("tail_gpus", n=fit.gpus_needed) if fit.gpus_needed else None
            notes.append(
                Note(
                    "note_nothing_fits",
                    gpu=device.name,
                    rung=fit.rung,
                    missing=fit.missing_gib,
                    gib=device.memory_gib,
                    share=1 - SAFETY_MARGIN,
                    gpus=more,
                )
            )


def _budget_batches(cfg: Config, lengths, notes: list[Note]) -> int | None:
    """``max_tokens_per_batch``: the micro-batches of an epoch, formed from the measured rows as the trainer does."""
    if not cfg.max_tokens_per_batch:
        return None
    if lengths is None:
        notes.append(Note("note_budget_unmeasured"))
        return None
    rows = training_rows(
        lengths,
        cfg.stage,
        cfg.cutoff_len,
        cfg.use_packing,
        cfg.preprocessing_batch_size,
        0.0 if cfg.eval_dataset else cfg.val_size,
        cfg.seed,
        pairs=True,
    )
    plan = budget_batches(
        rows,
        cfg.max_tokens_per_batch,
        cfg.padding_free,
        1 if cfg.padding_free else cfg.pad_to_multiple_of,
        cfg.data_seed or cfg.seed,
    )
    notes.append(Note("note_budget", budget=cfg.max_tokens_per_batch, rows=len(rows), batches=len(plan)))
    if plan.oversized:
        notes.append(Note("note_budget_oversized", n=len(plan.oversized), multiple=cfg.pad_to_multiple_of))
    return len(plan)


def _auto_checkpointing(shape: ModelShape, setup: Setup, device: GPU | None, notes: list[Note], source: str) -> Setup:
    """``gradient_checkpointing: auto`` as ``tunekit train`` decides it (plan/checkpointing.py), for the planned GPU,
    or for this host's RAM when the run trains on the CPU (``use_cpu``)."""
    if device is None and not setup.host:
        notes.append(Note("note_ckpt_planned_on"))
        return setup
    decision = planned_at(
        decide_for(shape, setup, device, setup.gpus_per_node), setup, source
    )  # host: RAM per process
    notes.append(decision.message())
    return replace(setup, grad_ckpt=decision.enabled, ckpt_layers=decision.layers)


def _describe(setup: Setup) -> dict:
    engine = (
        ("CPU" if setup.host else "single GPU") if setup.world_size == 1 else "DDP" + (" (CPU)" if setup.host else "")
    )
    if setup.zero_stage is not None:
        engine = (
            f"DeepSpeed ZeRO-{setup.zero_stage}"
            + (" + optimizer offload" if setup.offload_optimizer else "")
            + (" + param offload" if setup.offload_params else "")
        )
    elif setup.fsdp:
        engine = f"FSDP {setup.fsdp}" + (" + offload" if setup.offload_params else "")
    precision = {2: "bf16/fp16", 4: "fp32", 8: "fp64"}[setup.compute_bytes] + (" autocast" if setup.autocast else "")
    return {
        "method": setup.finetuning_type + (f" (QLoRA {setup.quant_bits}-bit)" if setup.quant_bits else ""),
        "engine": engine,
        "precision": precision,
        "gradient_checkpointing": setup.grad_ckpt,
        "liger": setup.liger,
        "attention": setup.attn,
        "optimizer": setup.optim,
        "micro_batch": setup.micro_batch,
        "gradient_accumulation_steps": setup.grad_accum,
        "host": setup.host,
    }


def apply_auto_fit(cfg: Config, gpu: GPU | None = None, world_size: int | None = None) -> Config:
    """``auto_fit: true`` in a train config: return the Config with the chosen overrides applied.

    On a machine without a GPU there is nothing to fit and ``cfg`` comes back unchanged.
    """
    gpu = gpu or detect_gpu()
    if gpu is None:
        print("auto_fit: no GPU visible, nothing to fit; training with the options as given.")
        return cfg
    world = world_size or env_world_size() or world_from(None, None, cfg)[0]
    nodes = env_nodes()
    shape = load_shape(None, cfg.model_name_or_path)
    setup = resolve_setup(cfg, world, nodes, shape=shape)
    fit = auto_fit_overrides(cfg, shape, setup, gpu)
    if not fit.fits:
        more = Said("part_fit_more_gpus", n=fit.gpus_needed) if fit.gpus_needed else None
        raise ConfigError(
            Said(
                "plan_auto_fit_nothing",
                gpu=gpu.name,
                memory=f"{gpu.memory_gib:.1f}",
                rung=fit.rung,
                short=f"{fit.missing_gib:.1f}",
                more=more,
            )
        )
    values = {k: getattr(cfg, k) for k in cfg.model_fields_set}
    values.update(fit.overrides)
    print("auto_fit: " + " ".join(f"{k}={v}" for k, v in fit.overrides.items()))
    return build_config(values)
