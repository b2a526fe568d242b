"""Shared fixtures: an isolated tunekit cache, offline hubs, tiny models built once per session.

Helpers for writing small datasets live in tests/helpers.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import REFERENCE_DATA
from tests.stage_helpers import write_unequal_pairs

# Tiny models gain nothing from intra-op threads, and on a shared 2-core machine torch's spinning
# threads slow small ops down several times: one thread per process (subprocesses inherit it).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The suite describes its CPU as without native bf16, so a run that leaves precision to the device computes in fp32 on
# every host (train/precision.py); tests of the bf16 default describe their machine themselves.
os.environ.setdefault("TUNEKIT_CPU_BF16", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
# llama.cpp's converter (export/gguf_source.py) is extracted once per machine, not into each session's temporary cache
os.environ.setdefault("TUNEKIT_LLAMA_CPP_DIR", str(Path.home() / ".cache" / "tunekit" / "llama.cpp"))


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("tunekit-cache")
    old = os.environ.get("TUNEKIT_CACHE")
    os.environ["TUNEKIT_CACHE"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("TUNEKIT_CACHE", None)
    else:
        os.environ["TUNEKIT_CACHE"] = old


def _tiny(tmp_path_factory, like: str, **kwargs) -> Path:
    from tunekit.tiny.text import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp(f"tiny-{like}") / "model", like=like, seed=0, **kwargs)


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory) -> Path:
    """A tiny Qwen2 (hidden 64, 2 layers) with a ChatML tokenizer; the default model of the tests."""
    return _tiny(tmp_path_factory, "qwen2")


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    return _tiny(tmp_path_factory, "llama")


@pytest.fixture(scope="session")
def reference_data() -> Path:
    if not REFERENCE_DATA.is_dir():
        pytest.skip(f"reference data not found at {REFERENCE_DATA}")
    return REFERENCE_DATA


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    """LLaMA-Factory's demo data folder (mllm_demo.json and its mllm_demo_data/ images, videos, audios)."""
    if not (REFERENCE_DATA / "mllm_demo.json").is_file():
        pytest.skip(f"reference data not found at {REFERENCE_DATA}")
    return REFERENCE_DATA


@pytest.fixture(scope="module")
def pair_data(tmp_path_factory) -> Path:
    """Four preference pairs, one long and three short (stage_helpers.write_unequal_pairs): dataset "pairs"."""
    return write_unequal_pairs(tmp_path_factory.mktemp("pairs"))
