"""Several processes, one ``tunekit train``: DDP, DeepSpeed ZeRO 0-3 (+ offload) and FSDP2 on the real engines.

What the runner calls, in order:

1. :func:`maybe_relaunch` (first thing in ``tunekit train``, after :func:`tunekit.train.preflight.preflight` checked
   the config and the machine): re-execute under torchrun when several devices, ``FORCE_TORCHRUN=1``, ``NNODES>1``
   or a DeepSpeed/FSDP config ask for it; with ``USE_RAY=1``, start Ray Train's workers instead
   (:mod:`tunekit.train.engines.ray_launch`).
2. :func:`training_args_kwargs` (last update of the TrainingArguments kwargs): engine, backend, timeout.
   On a CPU-only machine it also starts the process group itself (see :func:`_start_cpu_process_group`).
3. :func:`before_model_load`: ZeRO-3 must be known to transformers before ``from_pretrained`` so the
   weights are partitioned as they load.
4. :func:`fsdp_settings`: what :mod:`tunekit.train.engines.fsdp` shards with (FSDP2 is applied by tunekit itself,
   on GPUs and CPUs alike, when the trainer is built; the Trainer then sees a plain distributed run).
5. :func:`is_main_process` guards printing, logs, plots and anything else written once.

Nothing heavy is imported at module level: the parent process of a relaunch never imports torch.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ...config.engines import FSDP_STRATEGIES, engine_problems, fsdp_strategy, fsdp_words  # noqa: F401 - FSDP_STRATEGIES: this module's name too
from ...config.jsonfile import read_json_object
from ...config.problems import config_error
from ...config.schema import Config
from ...env import env_local_rank, env_rank, env_world_size
from ...errors import ConfigError, TunekitError
from .deepspeed_config import (
    check_options,
    read_deepspeed,
    require_deepspeed,
    resolve_deepspeed,
    takeover_lines,
    takeovers,
)
from .launcher import LaunchPlan, launch_plan, relaunch, under_launcher, visible_device_count
from .ray_launch import check_ray_env, use_ray

__all__ = [
    "maybe_relaunch",
    "training_args_kwargs",
    "before_model_load",
    "world_size",
    "rank",
    "local_rank",
    "is_main_process",
    "is_local_main_process",
    "check_divisibility",
    "engine_plan",
    "EnginePlan",
    "record_rank_error",
    "shutdown",
    "fsdp_settings",
    "FSDPSettings",
    "option_notes",
    "saying",
]


# ------------------------------------------------------------------ who am I
def rank() -> int:
    """Global rank (0 without a launcher)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return env_rank()


def local_rank() -> int:
    return env_local_rank()


def is_main_process() -> bool:
    """Rank 0 of the whole job: the one process that prints progress and writes logs, plots and models."""
    return rank() == 0


def is_local_main_process() -> bool:
    """Rank 0 of this machine: for per-machine work such as filling a local cache."""
    return local_rank() == 0


# ------------------------------------------------------------------ how many
def _needs_launcher(cfg: Config) -> bool:
    """DeepSpeed and FSDP need torch.distributed even with one device, so they always run under torchrun."""
    return cfg is not None and bool(cfg.deepspeed or _fsdp_strategy(cfg) not in (None, "no_shard"))


def _plan(cfg: Config | None = None, env=None) -> LaunchPlan:
    env = dict(os.environ if env is None else env)
    if _needs_launcher(cfg) and not under_launcher(env):
        env["FORCE_TORCHRUN"] = "1"
    return launch_plan(env, use_cpu=bool(cfg is not None and cfg.use_cpu))


def world_size(cfg: Config | None = None) -> int:
    """Processes in the job: WORLD_SIZE under a launcher, else what :func:`maybe_relaunch` would start."""
    if under_launcher():
        return env_world_size() or 1
    if cfg is not None and use_ray():  # USE_RAY=1: Ray Train starts ray_num_workers processes
        return cfg.ray_num_workers
    return _plan(cfg).world_size


def maybe_relaunch(argv: list[str], cfg: Config) -> int | None:
    """Re-execute ``tunekit train argv`` (already parsed into ``cfg``) under torchrun when needed;
    return its exit code, or None to go on here."""
    if under_launcher():
        return None
    check_ray_env(cfg)  # Ray's options need USE_RAY=1; USE_RAY=1 takes no torchrun switch
    if use_ray():
        from .ray_launch import launch  # imports ray: only on this path

        return launch(cfg, list(argv))
    plan = _plan(cfg)
    if not plan.launch:
        return None
    # the config, the DeepSpeed file, the devices and packages were checked before this (train/preflight.py)
    return relaunch(plan, list(argv))


def _has_gpu(cfg: Config) -> bool:
    if cfg.use_cpu:
        return False
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch.cuda.is_available()

    return visible_device_count() > 0


# ------------------------------------------------------------------ checks
def check_divisibility(cfg: Config, world: int) -> None:
    """The numbers of a DeepSpeed file and ``cp_size`` against the options and the world size, checked before any
    rank starts (``train/preflight.py``) and again on each rank.

    The HF Trainer never needs it (global batch = per-device x accumulation x world), but numbers written
    in a DeepSpeed file do: DeepSpeed asserts ``train_batch_size == micro x accumulation x world``, and transformers
    refuses any other field that contradicts an option only after the model has loaded (``option_conflicts``).
    """
    if world < 1:
        raise config_error("dist_world_size", world=world)
    if cfg.cp_size > 1 and world % cfg.cp_size:  # each sequence group is cp_size whole processes (engines/ulysses.py)
        raise config_error("cp_world", ("cp_size",), cp=cfg.cp_size, world=world)
    if cfg.deepspeed:
        check_options(read_deepspeed(cfg.deepspeed), cfg, world)


def _fsdp_strategy(cfg: Config) -> str | None:
    return fsdp_strategy(cfg.fsdp)  # the words are config/engines.py's; the schema has refused others already


@dataclass(frozen=True)
class FSDPSettings:
    """How :mod:`tunekit.train.engines.fsdp` shards the model (``fsdp: full_shard | shard_grad_op`` [+
    ``offload``])."""

    strategy: str  # full_shard | shard_grad_op
    reshard_after_forward: bool  # full_shard: True (ZeRO-3 like); shard_grad_op: False (ZeRO-2 like)
    offload: bool  # parameters, gradients and the optimizer step on the CPU (CPUOffloadPolicy)
    mixed_precision: str | None = None  # "bf16": compute in bf16, fp32 master weights and gradient reduction
    wrap_classes: tuple[
        str, ...
    ] = ()  # module classes sharded as their own unit; empty: the model's _no_split_modules


# fsdp_config keys tunekit reads (with or without the "fsdp_" prefix of transformers' fsdp_config).
_FSDP_CONFIG_KEYS = (
    "transformer_layer_cls_to_wrap",
    "reshard_after_forward",
    "cpu_offload",
    "offload_params",
    "version",
)


def fsdp_settings(cfg: Config) -> FSDPSettings | None:
    """The FSDP2 settings of ``cfg``; None without ``fsdp`` or with ``fsdp: no_shard`` (that is DDP).

    ``fsdp_config: file.json`` may set ``transformer_layer_cls_to_wrap`` (class names), ``reshard_after_forward``
    and ``cpu_offload`` (alias ``offload_params``); any other key is an error rather than silently ignored.
    """
    strategy = _fsdp_strategy(cfg)
    if strategy in (None, "no_shard"):
        return None
    problems = list(engine_problems(cfg))  # the schema refuses these too; a config built without validation does not
    if problems:
        raise ConfigError(problems[0].message, problems[:1])
    parts = fsdp_words(cfg.fsdp)
    values: dict = {
        "reshard_after_forward": strategy == "full_shard",
        "offload": "offload" in parts,
        "wrap_classes": (),
    }
    if cfg.fsdp_config:
        user = _read_fsdp_config(cfg.fsdp_config)
        if "reshard_after_forward" in user:
            values["reshard_after_forward"] = bool(user["reshard_after_forward"])
        for key in ("cpu_offload", "offload_params"):
            if key in user:
                values["offload"] = bool(user[key])
        if "transformer_layer_cls_to_wrap" in user:
            classes = user["transformer_layer_cls_to_wrap"]
            classes = classes.replace(",", " ").split() if isinstance(classes, str) else list(classes)
            values["wrap_classes"] = tuple(str(c) for c in classes)
    if cfg.fsdp_transformer_layer_cls_to_wrap:  # the option (Hugging Face's and LLaMA-Factory's name)
        if values["wrap_classes"]:
            raise config_error("dist_wrap_twice", ("fsdp_transformer_layer_cls_to_wrap", "fsdp_config"))
        values["wrap_classes"] = tuple(fsdp_words(cfg.fsdp_transformer_layer_cls_to_wrap))
    return FSDPSettings(strategy=strategy, mixed_precision="bf16" if cfg.bf16 else None, **values)


def _read_fsdp_config(value: str) -> dict:
    path = Path(value).expanduser()
    if not path.is_file():
        raise config_error("dist_fsdp_config_missing", ("fsdp_config",), path=str(value))
    raw = read_json_object(path, "fsdp_config")
    user = {k[5:] if k.startswith("fsdp_") else k: v for k, v in raw.items()}
    if "activation_checkpointing" in user:
        raise config_error("dist_fsdp_activation", ("fsdp_config",), path=str(path))
    unknown = sorted(k for k in user if k not in _FSDP_CONFIG_KEYS)
    if unknown:
        raise config_error(
            "dist_fsdp_unknown_keys",
            ("fsdp_config",),
            path=str(path),
            keys=", ".join(unknown),
            known=_FSDP_CONFIG_KEYS,
        )
    if str(user.get("version", 2)) != "2":
        raise config_error("dist_fsdp_version", ("fsdp_config",), path=str(path))
    return user


# ------------------------------------------------------------------ TrainingArguments
def training_args_kwargs(cfg: Config, output_dir) -> dict:
    """Extra ``TrainingArguments`` kwargs for the engine; apply them last (they may override ``use_cpu``).

    - DDP: ``ddp_timeout``, ``ddp_backend`` (gloo without GPUs), ``ddp_find_unused_parameters`` (False for
      LoRA, as LLaMA-Factory does; otherwise the Trainer decides).
    - DeepSpeed: ``deepspeed`` = a JSON path (presets are written to ``output_dir/ds_config.json``).
    - FSDP2: nothing. The Trainer sees a plain distributed (DDP) run; :mod:`tunekit.train.engines.fsdp` shards the
      model when the trainer is built and keeps accelerate from wrapping it in DDP (accelerate enables its own FSDP
      only on accelerators; tunekit's FSDP2 is the same code on GPUs and CPUs).
    - CPU-only machines under a launcher: the process group is started here with ``ddp_timeout`` and the
      Trainer told to use it (``accelerator_config.use_configured_state``), because transformers otherwise
      (a) drops ``ddp_timeout`` for ``use_cpu`` runs and (b) gives DeepSpeed no backend, so every rank
      would believe it is alone (world size 1). DeepSpeed runs on its CPU accelerator (``DS_ACCELERATOR=cpu``).
    """
    world = world_size(cfg)
    distributed = under_launcher() or world > 1
    gpu = _has_gpu(cfg)
    kwargs: dict = {"ddp_timeout": cfg.ddp_timeout}
    backend = cfg.ddp_backend or (None if gpu or not distributed else "gloo")
    if backend:
        kwargs["ddp_backend"] = backend
    find_unused = cfg.ddp_find_unused_parameters
    if find_unused is None and distributed and cfg.finetuning_type == "lora":
        find_unused = False
    kwargs["ddp_find_unused_parameters"] = find_unused
    check_divisibility(cfg, world)

    if cfg.deepspeed:
        check_deepspeed_machine(cfg)
        settings = read_deepspeed(cfg.deepspeed)
        require_deepspeed(settings, on_gpu=gpu)
        if (
            is_main_process()
        ):  # which optimizer / schedule really run, said at the start (tunekit_config.yaml notes it too)
            for line in takeover_lines(settings, cfg):
                print(line, flush=True)
        kwargs["deepspeed"] = resolve_deepspeed(cfg.deepspeed, output_dir)
        if not gpu:
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
            kwargs["use_cpu"] = False  # use_cpu would make accelerate ignore DeepSpeed altogether
            if under_launcher():
                _start_cpu_process_group(backend or "gloo", cfg.ddp_timeout, deepspeed=True)
                kwargs["accelerator_config"] = {"use_configured_state": True}
        return kwargs

    fsdp_settings(
        cfg
    )  # FSDP2 needs no TrainingArguments: tunekit shards the model itself (tunekit.train.engines.fsdp)
    if not gpu and under_launcher():  # DDP, FSDP2 (any fsdp value) on CPU: gloo
        kwargs["use_cpu"] = True
        _start_cpu_process_group(backend or "gloo", cfg.ddp_timeout, deepspeed=False)
        kwargs["accelerator_config"] = {"use_configured_state": True}
    return kwargs


def check_deepspeed_machine(cfg: Config) -> None:
    """DeepSpeed runs on the GPUs, or on its CPU accelerator when none is visible; not on the CPU of a GPU machine."""
    if cfg.deepspeed and cfg.use_cpu and _cuda_visible():
        raise config_error("dist_deepspeed_cpu", ("deepspeed", "use_cpu"))


def _cuda_visible() -> bool:
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch.cuda.is_available()

    return visible_device_count() > 0


def _start_cpu_process_group(backend: str, timeout_s: int, deepspeed: bool) -> None:
    """Start accelerate's process state ourselves on a CPU-only machine (see :func:`training_args_kwargs`).

    ``PartialState`` is a singleton, so a second call is a no-op. For DeepSpeed it is built the way
    transformers builds it on GPUs (``ACCELERATE_USE_DEEPSPEED`` set while it initialises, DeepSpeed's
    ``init_distributed`` with our backend and timeout), only with the backend named, which accelerate
    cannot infer on a CPU.
    """
    from datetime import timedelta

    from accelerate import PartialState

    previous = os.environ.get("ACCELERATE_USE_DEEPSPEED")
    if deepspeed:
        os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    what = "starting the process group (waiting for every rank" + (
        "; DeepSpeed compiles its CPU communication op on first use)" if deepspeed else ")"
    )
    try:
        with saying(what):
            PartialState(cpu=not deepspeed, backend=backend, timeout=timedelta(seconds=timeout_s))
    finally:
        if previous is None:
            os.environ.pop("ACCELERATE_USE_DEEPSPEED", None)
        else:
            os.environ["ACCELERATE_USE_DEEPSPEED"] = previous


@contextmanager
def saying(what: str, every_s: float = 60.0, out=None):
    """While the block runs, say on the main process every ``every_s`` seconds that it is still ``what``, so a step
    that takes minutes without output (a rendezvous, an op compiled on first use) does not look like a hang.
    ``out(line)`` defaults to printing the line."""
    if not is_main_process():
        yield
        return
    import threading

    done = threading.Event()
    start = time.monotonic()
    say = out or (lambda line: print(line, flush=True))

    def tell() -> None:
        while not done.wait(every_s):
            say(f"tunekit: still {what}, {time.monotonic() - start:.0f} s so far")

    thread = threading.Thread(target=tell, name="tunekit-saying", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def before_model_load(cfg: Config) -> None:
    """Call after TrainingArguments exist and before ``from_pretrained``.

    ZeRO-3 partitions weights while they load (``deepspeed.zero.Init``), which transformers does only if
    it already knows the ZeRO-3 config (TrainingArguments registers it). Loading first would put a full
    copy of the model on every rank.
    """
    if not cfg.deepspeed:
        return
    if read_deepspeed(cfg.deepspeed).stage == 3:
        from transformers.integrations import is_deepspeed_zero3_enabled

        if not is_deepspeed_zero3_enabled():
            raise RuntimeError(
                "ZeRO-3 is configured but transformers does not know it: build TrainingArguments "
                "(with training_args_kwargs) before loading the model."
            )


def option_notes(cfg: Config) -> dict[str, str]:
    """``{option: note}`` for the options the engine's own config replaces (a DeepSpeed file's ``optimizer`` /
    ``scheduler`` block): ``tunekit_config.yaml`` writes each note above its option."""
    return takeovers(read_deepspeed(cfg.deepspeed), cfg) if cfg.deepspeed else {}


# ------------------------------------------------------------------ planner
@dataclass(frozen=True)
class EnginePlan:
    """The engine facts, decided once: the launcher's helpers and the memory planner (plan/training_setup.py) both use
    it."""

    engine: str  # single | ddp | deepspeed | fsdp
    world_size: int
    zero_stage: int | None = None  # DeepSpeed stage; FSDP full_shard ~ 3, shard_grad_op ~ 2
    offload_optimizer: bool = False
    offload_param: bool = False


def engine_plan(cfg: Config, world: int | None = None) -> EnginePlan:
    """Engine, world size, sharding and offload of ``cfg``; ``world`` defaults to what the launcher starts."""
    world = world_size(cfg) if world is None else world
    if cfg.deepspeed:
        ds = read_deepspeed(cfg.deepspeed)
        return EnginePlan("deepspeed", world, ds.stage, ds.offload_optimizer, ds.offload_param)
    fsdp = fsdp_settings(cfg)
    if fsdp is not None:  # offload moves parameters, gradients and the optimizer step to the CPU
        return EnginePlan("fsdp", world, 3 if fsdp.reshard_after_forward else 2, fsdp.offload, fsdp.offload)
    return EnginePlan("ddp" if world > 1 else "single", world)


# ------------------------------------------------------------------ failures and shutdown
def record_rank_error(exc: BaseException) -> None:
    """Under torchrun, write this rank's error to the file torchrun reads (its summary and tunekit's show it).

    The format is torchrun's error-file format (``ErrorHandler.record_exception``); a user error
    (TunekitError) is stored without its Python traceback, since the message already says what to fix.
    """
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return

    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, TunekitError):
        stack = text
    else:
        import traceback

        stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    data = {"message": {"message": text, "extraInfo": {"py_callstack": stack, "timestamp": str(int(time.time()))}}}
    try:
        with open(path, "w", encoding="utf-8") as fp:
            json.dump(data, fp)
    except OSError:
        pass


def shutdown() -> None:
    """Leave the process group cleanly at the end of a run (avoids gloo/NCCL teardown warnings and aborts)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
        try:
            torch.distributed.barrier()
        finally:
            torch.distributed.destroy_process_group()
