"""Two CPU processes over gloo on the real engines: DDP, DeepSpeed ZeRO-2/3 (+ offload) and FSDP2 equal one process.

Each engine trains the tiny Qwen2 for 4 steps with per-device batch 1 on 2 ranks; the reference is one
process with batch 2, so every optimizer step sees the same two samples. Tolerances (float32, 2 ranks; derived
below ``LOSS_TOL``): losses within loss_tolerance (measured: <= 2e-6), final weights as ``assert_trained_alike``
(measured: <= 1e-5), logits of the reloaded outputs within 1e-3 (measured: <= 1e-6).

FSDP2 is tunekit's own ``fully_shard`` (tunekit.train.engines.fsdp), the same code that runs on GPUs: full_shard,
shard_grad_op and full_shard offload (full fine-tuning), full_shard with LoRA, and resume from its sharded
checkpoint. Measured against DDP: losses equal to the last digit, weights <= 1.1e-6, the logged grad_norm (the
global norm over all shards, clipped at max_grad_norm 1.0) within 1.5e-5 relative (tolerance: see the test); LoRA
adapter vs one process <= 3.3e-6; the resumed run equals the uninterrupted one exactly.

Launches: ddp, z2 and fsdp start as users start them (their launchers' messages are checked), and so does the job
whose rank is killed; the other runs (the sharding variants and the resumed runs) have no assertion about their
launcher and start in one batch (tests/distributed_helpers.run_cache: each run a fresh 2-rank process, outputs
bit-equal to a launch of its own), once ddp, z2 and fsdp have written the checkpoints it resumes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from tests.distributed_helpers import (
    ENGINE_RUN,
    RUN_TIMEOUT,
    assert_close,
    assert_trained_alike,
    copied_checkpoint,
    launch_command,
    logits,
    note_launch,
    run_cache,
    series,
)
from tests.helpers import alpaca_records, base_config, train_rows, write_dataset
from tests.tolerances import loss_tolerance, sum_order_bound

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

# float32, ranks sum in another order than one process. Losses: a mean of <= 2 x cutoff 64 = 128 token terms of <= ~12
# nats, two orders: loss_tolerance(128, 12) = 1.8e-4 at worst (measured <= 2e-6). Weights: assert_trained_alike (Adam's
# step bound per element, and a small share of the training update overall). Reloaded logits: see
# tests/distributed/test_distributed_stages.py (1e-3 is under a tenth of what the 4 training steps change;
# measured <= 1e-6).
LOSS_TOL = loss_tolerance(128, 12.0)
LOGIT_TOL = 1e-3
COMMON = ENGINE_RUN


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("distdata")
    write_dataset(folder, "toy", alpaca_records(16, seed=1))
    return folder


# the launches users make: how each engine of the resume tests starts
ENGINES = {"ddp": ("reexec", {}), "z2": ("torchrun", {"deepspeed": "z2"}), "fsdp": ("reexec", {"fsdp": "full_shard"})}
LORA = dict(finetuning_type="lora", learning_rate=1e-2)
SHARDED = {  # 2 ranks x per-device batch 1 under each engine
    name: dict(per_device_train_batch_size=1, **options)
    for name, options in {
        "z3": {"deepspeed": "z3"},
        "fsdp_shard_grad_op": {"fsdp": "shard_grad_op"},
        "fsdp_full_shard_offload": {"fsdp": "full_shard offload"},
        "fsdp_lora": {"fsdp": "full_shard", **LORA},
        "z3_offload_lora": {"deepspeed": "z3_offload", **LORA},
        "ddp_batched": {},  # the ddp run again: test_a_batched_run_is_its_own_launch_bit_for_bit
    }.items()
}


def _resumed(engine: str):
    """The options of ``engine``'s run resumed from a copy of its uninterrupted run's checkpoint-2 (run first)."""

    def options(get) -> dict:
        launch, extra = ENGINES[engine]
        full, _ = get(engine, launch, per_device_train_batch_size=1, **extra)
        checkpoint = copied_checkpoint(full, 2, full.parent / f"{engine}_resume_from")
        return dict(per_device_train_batch_size=1, resume_from_checkpoint=str(checkpoint), **extra)

    return options


RESUMED = {f"{engine}_resumed": _resumed(engine) for engine in ENGINES}


@pytest.fixture(scope="module")
def runs(tiny_qwen, data_dir, tmp_path_factory):
    """Run each configuration once per module, on first use (SHARDED and RESUMED together, in one batch)."""
    return run_cache(tiny_qwen, data_dir, tmp_path_factory.mktemp("dist"), COMMON, ({**SHARDED, **RESUMED},))


def _weights_close(ref: Path, other: Path, name: str = "model.safetensors", init: Path | None = None) -> float:
    start = load_file(init / "model.safetensors") if init is not None else None
    return assert_trained_alike(
        load_file(ref / name), load_file(other / name), COMMON["learning_rate"], COMMON["max_steps"], start, other.name
    )


# ------------------------------------------------------------------ equivalence
def test_ddp_two_ranks_batch_1_equals_one_process_batch_2(runs, tiny_qwen):
    single, _ = runs("single", "inprocess", per_device_train_batch_size=2)
    ddp, proc = runs("ddp", "reexec", per_device_train_batch_size=1)
    assert "tunekit: starting 2 processes with torchrun" in proc.stderr
    assert len(series(ddp)) == 4  # rank 0 alone writes the log
    assert proc.stdout.count("done: ") == 1  # and prints
    assert_close(series(single), series(ddp), LOSS_TOL, "DDP losses")
    _weights_close(single, ddp, init=tiny_qwen)


def test_zero2_under_external_torchrun_equals_ddp(runs):
    ddp, _ = runs("ddp", "reexec", per_device_train_batch_size=1)
    z2, proc = runs("z2", "torchrun", per_device_train_batch_size=1, deepspeed="z2")
    assert "starting 2 processes" not in proc.stderr  # torchrun launched it: no second launch
    assert json.loads((z2 / "ds_config.json").read_text())["zero_optimization"]["stage"] == 2
    assert_close(series(ddp), series(z2), LOSS_TOL, "ZeRO-2 losses")
    _weights_close(ddp, z2)


def test_zero3_equals_ddp_and_saves_a_plain_transformers_folder(runs, tiny_qwen):
    from transformers import AutoModelForCausalLM

    single, _ = runs("single", "inprocess", per_device_train_batch_size=2)
    ddp, _ = runs("ddp", "reexec", per_device_train_batch_size=1)
    z3, _ = runs("z3", "batch")
    assert_close(series(ddp), series(z3), LOSS_TOL, "ZeRO-3 losses")
    _weights_close(ddp, z3, init=tiny_qwen)
    reloaded = AutoModelForCausalLM.from_pretrained(z3)
    reference = AutoModelForCausalLM.from_pretrained(single)
    worst = (logits(reloaded) - logits(reference)).abs().max().item()
    assert worst <= LOGIT_TOL, worst


def test_fsdp2_full_shard_equals_ddp_and_saves_a_plain_transformers_folder(runs, tiny_qwen):
    from transformers import AutoModelForCausalLM

    single, _ = runs("single", "inprocess", per_device_train_batch_size=2)
    ddp, _ = runs("ddp", "reexec", per_device_train_batch_size=1)
    fsdp, proc = runs("fsdp", "reexec", per_device_train_batch_size=1, fsdp="full_shard")
    assert "tunekit: starting 2 processes with torchrun" in proc.stderr
    assert_close(series(ddp), series(fsdp), LOSS_TOL, "FSDP2 losses")
    # The global grad norm is the square root of a sum of n = (parameter count) squares, summed in another order over
    # the shards: relative error <= sum_order_bound(n, 1) / 2 through the square root (n * u = 0.0x here, a worst-case
    # bound; measured 1.5e-5). A norm over one rank's shard only would be off by ~30 %.
    n = sum(t.numel() for t in load_file(tiny_qwen / "model.safetensors").values())
    assert_close(
        series(ddp, "grad_norm"),
        series(fsdp, "grad_norm"),
        sum_order_bound(n, 1.0) / 2 * max(series(ddp, "grad_norm").values()),
        "FSDP2 grad norms",
    )
    _weights_close(ddp, fsdp, init=tiny_qwen)
    assert set(load_file(fsdp / "model.safetensors")) == set(
        load_file(single / "model.safetensors")
    )  # tied head saved once
    assert (fsdp / "checkpoint-2" / "fsdp_state" / ".metadata").is_file()  # the sharded resume state
    reloaded = AutoModelForCausalLM.from_pretrained(fsdp)
    reference = AutoModelForCausalLM.from_pretrained(single)
    worst = (logits(reloaded) - logits(reference)).abs().max().item()
    assert worst <= LOGIT_TOL, worst


@pytest.mark.parametrize("fsdp", ["shard_grad_op", "full_shard offload"])
def test_fsdp2_shard_grad_op_and_offload_equal_ddp(runs, fsdp):
    ddp, _ = runs("ddp", "reexec", per_device_train_batch_size=1)
    out, _ = runs(f"fsdp_{fsdp.replace(' ', '_')}", "batch")
    assert_close(series(ddp), series(out), LOSS_TOL, f"FSDP2 {fsdp} losses")
    _weights_close(ddp, out)


@pytest.mark.parametrize(
    "name, engine", [("fsdp_lora", {"fsdp": "full_shard"}), ("z3_offload_lora", {"deepspeed": "z3_offload"})]
)
def test_lora_under_a_sharding_engine_saves_an_adapter_plain_peft_loads(runs, tiny_qwen, name, engine):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    single, _ = runs("single_lora", "inprocess", per_device_train_batch_size=2, **LORA)
    sharded, proc = runs(name, "batch")
    assert {k: SHARDED[name][k] for k in engine} == engine
    assert_close(series(single), series(sharded), LOSS_TOL, f"LoRA {engine} losses")
    a, b = load_file(single / "adapter_model.safetensors"), load_file(sharded / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(t.numel() > 0 for t in b.values())
    assert not (sharded / "model.safetensors").exists()
    base = sum(t.numel() for t in load_file(tiny_qwen / "model.safetensors").values())
    adapter = sum(t.numel() for t in b.values())
    assert f"trainable params: {adapter:,} / {base + adapter:,}" in proc.stdout  # full sizes, not shards
    assert_trained_alike(a, b, LORA["learning_rate"], COMMON["max_steps"], what=f"LoRA {engine}")
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_qwen), sharded)
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_qwen), single)
    assert (logits(loaded) - logits(reference)).abs().max().item() <= LOGIT_TOL


def test_a_batched_run_is_its_own_launch_bit_for_bit(runs):
    """A batch's run (a fresh pair of ranks forked after the imports, tests/distributed_batch.py) writes what the same
    run launched on its own writes: the same log (timings aside), weights and checkpoint, bit for bit."""
    ddp, _ = runs("ddp", "reexec", per_device_train_batch_size=1)
    batched, proc = runs("ddp_batched", "batch")
    assert proc.stdout.count("done: ") == 1  # rank 0 alone prints, as in a launch
    timings = ("elapsed_s", "eta_s")
    rows = [[{k: v for k, v in row.items() if k not in timings} for row in train_rows(out)] for out in (ddp, batched)]
    assert rows[0] == rows[1] and len(rows[0]) == COMMON["max_steps"]
    for name in ("model.safetensors", "checkpoint-2/model.safetensors"):
        a, b = load_file(ddp / name), load_file(batched / name)
        assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a), name
    assert sorted(p.name for p in (ddp / "checkpoint-2").iterdir()) == sorted(
        p.name for p in (batched / "checkpoint-2").iterdir()
    )


# ------------------------------------------------------------------ resume
@pytest.mark.parametrize("engine", ["ddp", "z2", "fsdp"])
def test_resume_continues_at_the_exact_step(runs, engine):
    launch, extra = ENGINES[engine]
    full, _ = runs(engine, launch, per_device_train_batch_size=1, **extra)
    resumed, _ = runs(f"{engine}_resumed", "batch")  # from a copy of full's checkpoint-2 (RESUMED)
    losses = series(resumed)
    assert min(losses) == 3, losses  # continues at step 3, not from the start
    reference = {step: loss for step, loss in series(full).items() if step >= 3}
    assert_close(reference, losses, LOSS_TOL, f"{engine} resumed losses")
    assert json.loads((resumed / "trainer_state.json").read_text())["global_step"] == 4
    _weights_close(full, resumed)


# ------------------------------------------------------------------ a rank that dies
def test_killed_rank_ends_the_job_with_a_clear_error(tiny_qwen, data_dir, tmp_path):
    import psutil

    out = tmp_path / "out"
    cfg = base_config(
        tiny_qwen, data_dir, out, per_device_train_batch_size=1, max_steps=100000, save_strategy="no", ddp_timeout=30
    )
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    cmd, env = launch_command("reexec", cfg_path)
    note_launch(cmd)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        log = out / "trainer_log.jsonl"
        deadline = time.time() + RUN_TIMEOUT
        while not (log.is_file() and log.stat().st_size > 0):
            assert proc.poll() is None, proc.communicate()[1][-4000:]
            assert time.time() < deadline, "training did not start"
            time.sleep(0.2)
        victims = [p for p in psutil.Process(proc.pid).children(recursive=True) if _rank_of(p) == "1"]
        assert len(victims) == 1, victims
        killed_at = time.time()
        victims[0].send_signal(signal.SIGKILL)
        _, stderr = proc.communicate(timeout=60)
        elapsed = time.time() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert elapsed < 30, elapsed  # well inside ddp_timeout: torchrun stops the surviving rank
    assert "error: distributed training failed: rank 1 (local rank 1) was killed by SIGKILL" in stderr, stderr[-4000:]


def _rank_of(process) -> str | None:
    try:
        return process.environ().get("RANK")
    except Exception:  # a process that just exited, or a launcher helper we may not read
        return None
