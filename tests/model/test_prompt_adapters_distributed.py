"""P-Tuning v2 on two CPU processes (gloo): DDP and DeepSpeed ZeRO-3 with per-device batch 1 equal one process with
batch 2 (the same two samples per optimizer step), as tests/distributed/test_distributed_engines.py holds full
fine-tuning to. Tolerances as there: losses within loss_tolerance of 2 ranks' summation order, the trained prefix as
``assert_trained_alike`` (Adam's per-element bound, and a small share of the training update)."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

from tests.distributed_helpers import assert_close, assert_trained_alike, run_cache, series
from tests.helpers import alpaca_records, write_dataset
from tests.tolerances import loss_tolerance

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

LOSS_TOL = loss_tolerance(128, 12.0)  # a mean of <= 2 x cutoff 64 token terms of <= ~12 nats, two orders
COMMON = dict(
    finetuning_type="ptuning",
    pre_seq_len=4,
    max_steps=4,
    learning_rate=1e-2,
    cutoff_len=64,
    overwrite_output_dir=True,
    gradient_checkpointing=False,
)


@pytest.fixture(scope="module")
def runs(tiny_qwen, tmp_path_factory):
    data = tmp_path_factory.mktemp("ptuning-dist-data")
    write_dataset(data, "toy", alpaca_records(16, seed=1))
    return run_cache(tiny_qwen, data, tmp_path_factory.mktemp("ptuning-dist"), COMMON)


@pytest.mark.parametrize("engine", ["ddp", "z3"])
def test_two_ranks_train_the_prefix_as_one_process(engine, runs):
    single, _ = runs("single", "inprocess", per_device_train_batch_size=2)
    options = dict(per_device_train_batch_size=1, **({"deepspeed": "z3"} if engine == "z3" else {}))
    out, proc = runs(engine, "reexec", **options)
    assert "tunekit: starting 2 processes with torchrun" in proc.stderr
    assert_close(series(single), series(out), LOSS_TOL, f"{engine} losses")
    name = "adapter_model.safetensors"
    a, b = load_file(str(single / name)), load_file(str(out / name))
    assert list(a) == ["prompt_embeddings"] and b["prompt_embeddings"].shape == a["prompt_embeddings"].shape
    assert_trained_alike(a, b, COMMON["learning_rate"], COMMON["max_steps"], what=f"{engine} prefix")
