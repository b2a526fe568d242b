"""Where tokenized datasets are cached, and the fingerprint that decides whether a cache entry is valid.

The fingerprint covers the data source (path, size, modification time), the dataset entry, every option
that changes tokenization, the tokenizer's content, the template and tunekit's processor version, so a
second run with the same inputs loads the tokenized dataset instead of re-tokenizing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..env import cache_dir

PROCESSOR_VERSION = "2"  # 2: pt documents end with the document token; typed content parts


def cache_root() -> Path:
    return cache_dir("datasets")


def source_signature(path: str) -> list:
    p = Path(path)
    if not p.exists():
        return [path]
    files = sorted(p.rglob("*")) if p.is_dir() else [p]
    return [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files if f.is_file()]


def tokenizer_signature(tokenizer) -> str:
    h = hashlib.sha256()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        h.update(backend.to_str().encode())
    else:
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    h.update(repr(sorted((k, str(v)) for k, v in tokenizer.special_tokens_map.items())).encode())
    h.update(type(tokenizer).__name__.encode())
    return h.hexdigest()


def fingerprint(parts: dict[str, Any]) -> str:
    from tunekit import __version__

    payload = json.dumps({"tunekit": __version__, "processor": PROCESSOR_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]
