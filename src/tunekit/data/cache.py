"""Where tokenized datasets are cached, and the fingerprint that decides whether a cache entry is valid.

The fingerprint covers the data source (path, size, modification time), the dataset entry, every option
that changes tokenization, the tokenizer's content, the template and tunekit's processor version, so a
second run with the same inputs loads the tokenized dataset instead of re-tokenizing.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from .. import __version__
from ..config.schema import Config
from ..env import cache_dir
from .readers import data_files

PROCESSOR_VERSION = "3"  # 2: pt documents end with the document token; typed content parts; 3: reasoning kept apart


def cache_root() -> Path:
    return cache_dir("datasets")


def source_signature(path: str) -> list:
    """The data files' sizes and times, and of a dataset folder every file below it (media in subfolders too). A folder
    the reader finds no data files in (``file_name: /`` names the whole disk) is left to the reader to refuse."""
    p = Path(path)
    if not p.exists() or (p.is_dir() and not data_files(p)):
        return [path]
    files = sorted(Path(top) / f for top, _, names in os.walk(p) for f in names) if p.is_dir() else [p]
    out = []
    for f in files:
        try:
            st = f.stat()
        except OSError:  # gone meanwhile, or unreadable: the reader names it if it reads it
            continue
        if stat.S_ISREG(st.st_mode):
            out.append([str(f), st.st_size, st.st_mtime_ns])
    return out


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


#: the options that change what a dataset tokenizes to (the dataset cache's key and tokenized_path's check read them)
TOKENIZATION_OPTIONS = (
    "cutoff_len",
    "train_on_prompt",
    "mask_history",
    "enable_thinking",
    "preserve_thinking",
    "thought_loss_weight",
    "default_system",
    "tool_format",
    "empty_template_eos",
    "max_samples",
    "dataset_sampling",
    "bad_records",
)
#: the media plugin's options that change the token counts or the media inputs (data/mm_plugins)
MEDIA_OPTIONS = (
    "image_min_pixels",
    "image_max_pixels",
    "video_min_pixels",
    "video_max_pixels",
    "video_fps",
    "video_maxlen",
    "audio_sampling_rate",
    "use_audio_in_video",
)


def tokenization_options(cfg: Config) -> dict[str, Any]:
    packing = ("neat" if cfg.neat_packing else "packed") if cfg.use_packing else "off"
    return {**{k: getattr(cfg, k) for k in TOKENIZATION_OPTIONS}, "packing": packing}


def media_options(cfg: Config) -> dict[str, Any]:
    return {k: getattr(cfg, k) for k in MEDIA_OPTIONS}


def fingerprint(parts: dict[str, Any]) -> str:
    payload = json.dumps(
        {"tunekit": __version__, "processor": PROCESSOR_VERSION, **parts}, sort_keys=True, default=str
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:24]
