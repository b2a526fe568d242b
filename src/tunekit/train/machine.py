"""The device a run trains on (:class:`Machine`, :func:`run_machine`: its kind, its processes, the CPU's native bf16),
which the run's decisions read (``train/decisions``, ``train/precision.py``), and what the precision options need
from it: fp16 an accelerator, bf16 a GPU of compute capability 8.0 or newer (or the CPU), fp8 a GPU of 8.9 or newer.
:func:`check_machine` is the one home of these rules: ``train/preflight.py`` applies it before any process starts,
``train/arguments.py`` before TrainingArguments. torch is imported only on a machine with NVIDIA devices, or to look
for MPS/XPU when fp16 asks for them.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

from ..config.problems import Said, config_error
from ..config.schema import Config
from .engines.deepspeed_config import field, read_deepspeed
from .engines.distributed import world_size
from .engines.launcher import visible_device_count
from .fp8 import MIN_CAPABILITY

BF16_CAPABILITY = (8, 0)  # Ampere and newer compute in bfloat16


@dataclass(frozen=True)
class Machine:
    """The device a run trains on, as the run's decisions (``train/decisions``) and the precision options read it: the
    visible CUDA devices (none with ``use_cpu``), the run's processes, the CPU's native bf16. A description, so tests
    and ``tunekit plan`` build one for a device they do not have (:meth:`cpu`, :meth:`cuda`)."""

    gpus: tuple[tuple[int, int], ...] = ()  # the compute capability of each visible CUDA device
    names: tuple[str, ...] = ()  # their names, for messages
    other_accelerator: bool = False  # Apple MPS or Intel XPU
    processes: int = 1  # the run's processes (its world size): several = a multi-process engine (DDP, DeepSpeed, FSDP)
    cpu_bf16: bool = False  # the CPU computes bf16 natively (AVX512_BF16 or AMX)

    @property
    def kind(self) -> str:
        """Where the model trains: ``cuda`` (an NVIDIA GPU), ``accelerator`` (MPS/XPU) or ``cpu``."""
        return "cuda" if self.gpus else "accelerator" if self.other_accelerator else "cpu"

    @classmethod
    def cpu(cls, processes: int = 1, cpu_bf16: bool = False) -> Machine:
        return cls(processes=processes, cpu_bf16=cpu_bf16)

    @classmethod
    def cuda(cls, processes: int = 1, capability: tuple[int, int] = (9, 0), name: str = "GPU") -> Machine:
        """``processes`` visible devices of one ``capability``, one process per device."""
        return cls(gpus=(capability,) * processes, names=(name,) * processes, processes=processes)


def this_machine(use_cpu: bool = False, need_other: bool = False) -> Machine:
    """The visible CUDA devices (none with ``use_cpu``); ``need_other``: also look for MPS/XPU (imports torch)."""
    count = 0 if use_cpu else visible_device_count()
    if count:
        import torch  # visible_device_count imported it already on a GPU machine

        # a launcher may set CUDA_VISIBLE_DEVICES where torch has no CUDA (deepspeed's on a CPU host): none usable
        count = min(count, torch.cuda.device_count()) if torch.cuda.is_available() else 0
    if count:
        caps = tuple(tuple(torch.cuda.get_device_capability(i)) for i in range(count))
        return Machine(gpus=caps, names=tuple(torch.cuda.get_device_name(i) for i in range(count)))
    other = False
    if need_other and not use_cpu and (sys.platform == "darwin" or os.path.exists("/dev/dri")):
        import torch

        other = torch.backends.mps.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())
    return Machine(other_accelerator=other)


def cpu_has_native_bf16() -> bool:
    """The CPU computes bf16 natively (``avx512_bf16`` or ``amx_bf16`` in ``/proc/cpuinfo``); False where unreadable.
    ``TUNEKIT_CPU_BF16=0``/``1`` describes the CPU instead (the test suite sets 0, so it computes alike on every
    host)."""
    described = os.environ.get("TUNEKIT_CPU_BF16", "").strip()
    if described in ("0", "1"):
        return described == "1"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def run_machine(cfg: Config) -> Machine:
    """The machine the run of ``cfg`` trains on: this one's visible CUDA devices (none with ``use_cpu``), the processes
    the launcher starts (``train.engines.distributed.world_size``) and the CPU's native bf16. Decided from the device
    the run uses, not the one the command starts on."""
    found = this_machine(cfg.use_cpu, need_other=True)  # MPS/XPU too: the precision rule reads them
    return replace(found, processes=max(1, world_size(cfg)), cpu_bf16=cpu_has_native_bf16())


def _deepspeed_enables(cfg: Config, key: str) -> bool:
    if not cfg.deepspeed:
        return False

    return field(read_deepspeed(cfg.deepspeed).config, f"{key}.enabled") is True


def check_machine(cfg: Config, machine: Machine | None = None) -> None:
    """fp16, bf16 (the option or an enabled block of the DeepSpeed file) and fp8 on this machine's devices."""
    fp16 = cfg.fp16 or _deepspeed_enables(cfg, "fp16")
    bf16 = cfg.bf16 or _deepspeed_enables(cfg, "bf16")
    if not (fp16 or bf16 or cfg.fp8):
        return
    machine = machine or this_machine(cfg.use_cpu, need_other=fp16)
    where = Said("part_use_cpu_set") if cfg.use_cpu else Said("part_none_visible")
    if fp16 and not machine.gpus and not machine.other_accelerator:
        raise config_error("machine_fp16_no_gpu", ("fp16",), where=where)
    if cfg.fp8:
        if not machine.gpus:
            raise config_error("machine_fp8_no_gpu", ("fp8",), where=where)

        fix = Said("part_fix_fp8_bf16")
        _refuse_older(machine, MIN_CAPABILITY, ("fp8",), Said("part_fp8_training"), "Ada, Hopper", fix)
    if bf16 and machine.gpus:
        fix = Said("part_fix_bf16_fp16")
        _refuse_older(machine, BF16_CAPABILITY, ("bf16",), "bf16", Said("part_ampere_or_newer"), fix)


def _refuse_older(
    machine: Machine, minimum: tuple[int, int], fields: tuple[str, ...], what: str, family: str, fix: Said
) -> None:
    """The first GPU older than ``minimum`` refuses ``what`` (about the options ``fields``)."""
    for i, capability in enumerate(machine.gpus):
        if tuple(capability) < minimum:
            name = machine.names[i] if i < len(machine.names) else f"GPU {i}"
            raise config_error(
                "machine_gpu_too_old",
                fields,
                what=what,
                minimum=f"{minimum[0]}.{minimum[1]}",
                family=family,
                name=name,
                capability=f"{capability[0]}.{capability[1]}",
                fix=fix,
            )
