"""Issue 18 §5: a vision-language model under the sharding engines, DeepSpeed ZeRO-3 and tunekit's FSDP2, on 2 CPU ranks.

Full fine-tuning of the tiny Qwen2-VL on images (vision tower frozen, projector and language model trained) for 3
steps with per-device batch 1 on 2 ranks equals one process with batch 2: every optimizer step sees the same two
samples. ZeRO-3 partitions the frozen vision tower too and gathers it in each rank's forward; FSDP2 wraps the
language model's decoder layers and the model root (the vision tower and projector stay in the root's unit). Tolerances
as tests/test_distributed_engines.py: losses within ``loss_tolerance`` (float32, two summation orders), weights as
``assert_trained_alike``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.distributed_helpers import assert_close, assert_trained_alike, run_cache, series
from tests.helpers import write_dataset
from tests.tolerances import loss_tolerance

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

DEMO_DIR = Path(__file__).resolve().parents[2] / "shared" / "reference-data" / "llamafactory"
TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
ENTRY = {"formatting": "sharegpt", "columns": {"messages": "messages", "images": "images"}, "tags": TAGS}
RECORDS = [
    {"messages": [{"role": "user", "content": "<image>Who is this?"}, {"role": "assistant", "content": "Kane."}],
     "images": ["mllm_demo_data/1.jpg"]},
    {"messages": [{"role": "user", "content": "Describe <image> please"}, {"role": "assistant", "content": "A speech."}],
     "images": ["mllm_demo_data/2.jpg"]},
    {"messages": [{"role": "user", "content": "What is in <image>?"}, {"role": "assistant", "content": "Players."}],
     "images": ["mllm_demo_data/3.jpg"]},
] * 2
LR, STEPS = 1e-3, 3
# float32: a step's loss is a mean over <= 2 x ~40 trained and image-free tokens of <= ~8 nats (ln of the vocabulary 1856),
# summed in two orders: loss_tolerance(80, 8)
LOSS_TOL = loss_tolerance(80, 8.0)
COMMON = dict(template="qwen2_vl", cutoff_len=1024, image_max_pixels=28 * 28 * 16, finetuning_type="full",
              freeze_multi_modal_projector=False, max_steps=STEPS, learning_rate=LR, gradient_checkpointing=False,
              overwrite_output_dir=True)


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory) -> Path:
    from tunekit.model.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2-vl-dist") / "model", like="qwen2-vl", seed=0)


@pytest.fixture(scope="module")
def runs(tiny_vlm, tmp_path_factory):
    if not (DEMO_DIR / "mllm_demo_data").is_dir():
        pytest.skip(f"reference data not found at {DEMO_DIR}")
    data = tmp_path_factory.mktemp("vlm-dist-data")
    shutil.copytree(DEMO_DIR / "mllm_demo_data", data / "mllm_demo_data")
    write_dataset(data, "toy", RECORDS, ENTRY)
    return run_cache(tiny_vlm, data, tmp_path_factory.mktemp("vlm-dist"), COMMON)


def _trained_alike(single: Path, other: Path, init: Path) -> None:
    """Compared as plain transformers loads each folder (a ZeRO-3 folder keeps the in-memory names:
    train/checkpoint_weights.py); names as the model holds them."""
    from transformers import AutoModelForImageTextToText

    a, b, start = (AutoModelForImageTextToText.from_pretrained(p).state_dict() for p in (single, other, init))
    assert_trained_alike(a, b, LR, STEPS, start, other.name)
    moved = {k for k in a if not a[k].equal(start[k])}
    assert any(k.startswith("model.visual.merger.") for k in moved)
    assert not any(k.startswith(("model.visual.blocks.", "model.visual.patch_embed.")) for k in moved)


@pytest.mark.parametrize("engine", [{"deepspeed": "z3"}, {"fsdp": "full_shard"}], ids=["zero3", "fsdp2"])
def test_a_vlm_trains_under_a_sharding_engine_as_in_one_process(runs, tiny_vlm, engine):
    single, _ = runs("single", "inprocess", per_device_train_batch_size=2)
    name = next(iter(engine))
    out, proc = runs(name, "reexec", per_device_train_batch_size=1, **engine)
    assert "tunekit: starting 2 processes with torchrun" in proc.stderr
    assert_close(series(single), series(out), LOSS_TOL, f"{name} losses")
    _trained_alike(single, out, tiny_vlm)
