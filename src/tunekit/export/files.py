"""Weight files of an exported folder: safetensors shards + index, or legacy ``.bin`` shards when asked."""

from __future__ import annotations

import json
from pathlib import Path

SAFE_INDEX = "model.safetensors.index.json"
SAFE_SINGLE = "model.safetensors"
BIN_INDEX = "pytorch_model.bin.index.json"


def shard_bytes(export_size_gb: float) -> int:
    """``export_size`` (GB, 10^9 bytes as transformers counts them) as a byte count."""
    return max(1, int(export_size_gb * 10**9))


def ensure_index(folder: Path) -> Path:
    """transformers writes no index for a single shard; tunekit always writes one (one layout for every size)."""
    index = folder / SAFE_INDEX
    if index.is_file() or not (folder / SAFE_SINGLE).is_file():
        return index
    from safetensors import safe_open

    weight_map, total = {}, 0
    with safe_open(str(folder / SAFE_SINGLE), framework="pt") as f:
        for name in list(f.keys()):  # a safetensors handle, not a dict: it has keys() only
            sl = f.get_slice(name)
            weight_map[name] = SAFE_SINGLE
            total += _numel(sl.get_shape()) * _dtype_bytes(sl.get_dtype())
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
    return index


def to_legacy_bin(folder: Path) -> None:
    """Rewrite every safetensors shard as a pickled ``.bin`` shard with the same keys (``export_legacy_format``)."""
    import torch
    from safetensors.torch import load_file

    index = json.loads((folder / SAFE_INDEX).read_text())
    files = sorted(set(index["weight_map"].values()))
    renamed = {}
    for i, name in enumerate(files):
        new = "pytorch_model.bin" if len(files) == 1 else f"pytorch_model-{i + 1:05d}-of-{len(files):05d}.bin"
        torch.save(load_file(str(folder / name)), folder / new)
        (folder / name).unlink()
        renamed[name] = new
    (folder / SAFE_INDEX).unlink()
    index["weight_map"] = {k: renamed[v] for k, v in index["weight_map"].items()}
    (folder / BIN_INDEX).write_text(json.dumps(index, indent=2) + "\n")


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


_DTYPE_BYTES = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}


def _dtype_bytes(dtype: str) -> int:
    return _DTYPE_BYTES.get(dtype, 4)
