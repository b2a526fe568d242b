"""``tunekit env``: versions and devices, for bug reports."""

from __future__ import annotations

import importlib
import platform
import sys
from importlib import metadata

import tunekit
from tunekit.errors import ConfigError

PACKAGES = (
    "torch",
    "transformers",
    "peft",
    "trl",
    "datasets",
    "accelerate",
    "deepspeed",
    "tokenizers",
    "safetensors",
    "pydantic",
    "bitsandbytes",
    "flash_attn",
    "liger_kernel",
    "gradio",
    "fastapi",
    "vllm",
)


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print("usage: tunekit env\n\nPrint versions of python, torch and the HF stack, and the devices seen.")
        return 0
    if argv:
        raise ConfigError(f"tunekit env takes no arguments, got {argv[0]!r}: run `tunekit env` alone.")
    rows = [("tunekit", tunekit.__version__), ("python", sys.version.split()[0]), ("platform", platform.platform())]
    for name in PACKAGES:
        dist = {"flash_attn": "flash-attn", "liger_kernel": "liger-kernel"}.get(name, name)
        try:
            rows.append((name, metadata.version(dist)))
        except metadata.PackageNotFoundError:
            rows.append((name, "not installed"))
    try:
        torch = importlib.import_module("torch")
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                rows.append((f"cuda:{i}", f"{p.name}, {p.total_memory / 2**30:.1f} GiB"))
        else:
            rows.append(("cuda", "not available"))
        rows.append(("cpu threads", str(torch.get_num_threads())))
    except ImportError:
        pass
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0
