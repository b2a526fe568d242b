"""GPUs the planner knows: usable memory (GiB, as the driver reports it) and dense bf16 peak FLOP/s."""

from __future__ import annotations

from dataclasses import dataclass

from ..config.problems import Said
from ..errors import ConfigError


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gib: float
    bf16_tflops: float  # dense (no sparsity), tensor cores; fp16 for GPUs without bf16

    @property
    def peak_flops(self) -> float:
        return self.bf16_tflops * 1e12


_TABLE = [
    GPU("B200", 179.1, 2250),
    GPU("H200", 140.4, 989),
    GPU("H100-SXM", 79.6, 989),
    GPU("H100-PCIe", 79.6, 756),
    GPU("H800", 79.6, 989),
    GPU("H20", 95.6, 148),
    GPU("GH200", 94.5, 989),
    GPU("A100-80GB", 80.0, 312),
    GPU("A100-40GB", 40.0, 312),
    GPU("A800", 80.0, 312),
    GPU("L40S", 45.0, 362),
    GPU("L40", 45.0, 181),
    GPU("L4", 22.5, 121),
    GPU("A10G", 22.5, 70),
    GPU("A10", 22.5, 125),
    GPU("A6000", 48.0, 155),
    GPU("RTX-6000-Ada", 48.0, 364),
    GPU("RTX-5090", 31.8, 210),
    GPU("RTX-4090", 24.0, 165),
    GPU("RTX-3090", 24.0, 71),
    GPU("V100-32GB", 32.0, 125),
    GPU("V100-16GB", 16.0, 125),
    GPU("T4", 15.0, 65),
    GPU("MI300X", 192.0, 1307),
    GPU("MI250X", 128.0, 383),
    GPU("Ascend-910B", 64.0, 320),
]
GPUS = {g.name.lower(): g for g in _TABLE}
_ALIASES = {
    "h100": "h100-sxm",
    "a100": "a100-80gb",
    "4090": "rtx-4090",
    "3090": "rtx-3090",
    "5090": "rtx-5090",
    "v100": "v100-32gb",
    "910b": "ascend-910b",
    "a100-80g": "a100-80gb",
    "a100-40g": "a100-40gb",
}


def known_gpus() -> list[str]:
    return [g.name for g in _TABLE]


def find_gpu(name: str) -> GPU:
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    for prefix in ("nvidia-", "geforce-", "amd-", "instinct-"):
        key = key[len(prefix) :] if key.startswith(prefix) else key
    key = _ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    if "rtx-" + key in GPUS:
        return GPUS["rtx-" + key]
    raise ConfigError(Said("plan_gpu_unknown", name=repr(name), known=tuple(known_gpus())))


def custom_gpu(memory_gib: float) -> GPU:
    if memory_gib <= 0:
        raise ConfigError(Said("plan_gpu_memory_positive", memory=str(memory_gib)))
    return GPU(f"{memory_gib:g} GiB GPU", float(memory_gib), 0.0)


def detect_gpu() -> GPU | None:
    """The first visible CUDA device, or None (no torch, no GPU)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return GPU(props.name, props.total_memory / 2**30, 0.0)
