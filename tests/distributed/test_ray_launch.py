"""``USE_RAY=1``: ``tunekit train`` on Ray Train's TorchTrainer (LLaMA-Factory's ``train_lora/*_ray.yaml``).

Two Ray workers on this machine's CPUs (a local Ray instance: ``ray_init_kwargs`` num_cpus 2, no dashboard) train
the tiny Qwen2 for 4 steps with per-device batch 1; the reference is one process with batch 2, so every optimizer
step sees the same two samples, as in tests/distributed/test_distributed_engines.py, with its tolerances (float32,
2 ranks summing in another order: losses within ``loss_tolerance(128, 12)``, weights as ``assert_trained_alike``).
A rank's error comes back as one ``error:`` line naming the rank. The launch's decisions (when Ray is used, what
each worker asks of the cluster, the failure summary, the planner's world size) are tested without Ray first (fast).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from safetensors.torch import load_file

from tests.distributed_helpers import (
    ENGINE_RUN,
    RUN_TIMEOUT,
    assert_close,
    assert_trained_alike,
    launch_env,
    note_launch,
    series,
)
from tests.helpers import ROOT, alpaca_records, base_config, write_dataset
from tests.tolerances import loss_tolerance
from tunekit.config import build_config, load_config
from tunekit.errors import ConfigError, DataError
from tunekit.flow import run_train
from tunekit.plan.planner import world_from
from tunekit.train.engines import distributed, ray_launch

LOSS_TOL = loss_tolerance(128, 12.0)  # as test_distributed_engines.py: a mean of <= 128 token terms of <= ~12 nats
COMMON = ENGINE_RUN
RAY_LOCAL = {"num_cpus": 2, "include_dashboard": False}  # a local Ray instance sized for this machine


def _ray_train(cfg: dict, tmp_path) -> subprocess.CompletedProcess:
    """``USE_RAY=1 tunekit train cfg`` as users start it (the driver starts a local Ray instance and ends it)."""
    cfg_path = tmp_path / "ray.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "tunekit.cli.main", "train", str(cfg_path)]
    note_launch(cmd)
    env = launch_env(USE_RAY="1", RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=ROOT)


BASE = {"model_name_or_path": "m", "output_dir": "o"}
LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "USE_RAY", "FORCE_TORCHRUN", "NPROC_PER_NODE", "NNODES")


def test_ray_options_need_use_ray_and_use_ray_takes_no_torchrun_switch():
    """LLaMA-Factory ignores its Ray options without USE_RAY=1; tunekit says so before anything starts."""
    cfg = build_config({**BASE, "ray_num_workers": 4, "placement_strategy": "SPREAD"})
    with pytest.raises(ConfigError) as err:
        ray_launch.check_ray_env(cfg, {})
    assert str(err.value) == (
        "ray_num_workers, placement_strategy: LLaMA-Factory's Ray Train options are read only with USE_RAY=1 in the "
        "environment. Set USE_RAY=1 to train on a Ray cluster (docs/workflows/multi-gpu.md), or remove them: "
        "without USE_RAY, tunekit train starts its own processes (torchrun)."
    )
    assert err.value.problems[0].fields == ("ray_num_workers", "placement_strategy")
    ray_launch.check_ray_env(cfg, {"USE_RAY": "1"})
    ray_launch.check_ray_env(build_config(BASE), {"USE_RAY": "0"})  # defaults: nothing to say
    for name, value in (("NPROC_PER_NODE", "2"), ("FORCE_TORCHRUN", "1"), ("NNODES", "2")):
        with pytest.raises(ConfigError) as err:
            ray_launch.check_ray_env(cfg, {"USE_RAY": "1", name: value})
        assert str(err.value) == (
            f"USE_RAY=1 with {name}: Ray Train starts and places the processes itself (ray_num_workers, "
            f"resources_per_worker, placement_strategy); unset {name}."
        )


def test_the_run_and_the_planner_count_ray_num_workers_as_the_processes(monkeypatch):
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    cfg = build_config({**BASE, "ray_num_workers": 4})
    monkeypatch.setenv("USE_RAY", "1")
    assert distributed.world_size(cfg) == 4 and world_from(None, None, cfg) == (4, 1)
    assert world_from(2, 1, cfg) == (2, 1)  # --gpus says otherwise
    monkeypatch.setenv("WORLD_SIZE", "4")  # inside a Ray worker: Ray Train's WORLD_SIZE, no second launch
    monkeypatch.setenv("RANK", "1")
    assert distributed.world_size(cfg) == 4 and distributed.maybe_relaunch(["x.yaml"], cfg) is None


def test_each_worker_asks_the_cluster_for_llamafactorys_resources():
    cpu_only, with_gpus = {"CPU": 16.0}, {"CPU": 16.0, "GPU": 8.0}
    assert ray_launch.worker_resources(build_config(BASE), with_gpus) == ({"GPU": 1.0}, True)  # LF's {"GPU": 1}
    assert ray_launch.worker_resources(build_config(BASE), cpu_only) == ({"CPU": 1.0}, False)
    assert ray_launch.worker_resources(build_config({**BASE, "use_cpu": True}), with_gpus) == ({"CPU": 1.0}, False)
    given = build_config({**BASE, "resources_per_worker": {"CPU": 4, "GPU": 1}})
    assert ray_launch.worker_resources(given, with_gpus) == ({"CPU": 4.0, "GPU": 1.0}, True)
    ray_launch.check_cluster(8, {"CPU": 2.0, "GPU": 1.0}, with_gpus)
    with pytest.raises(ConfigError) as err:  # Ray would wait for them forever
        ray_launch.check_cluster(4, {"CPU": 1.0, "GPU": 4.0}, with_gpus)
    assert str(err.value) == (
        "ray_num_workers=4 with 1 CPU, 4 GPU each needs 16 GPU but the Ray cluster has 8: lower ray_num_workers or "
        "resources_per_worker, or join a larger cluster (RAY_ADDRESS, or address in ray_init_kwargs)."
    )


def test_the_summary_names_the_failing_rank_not_the_peers_that_lost_it():
    error = DataError("Data file d.json is not valid JSON.")
    lost = RuntimeError("[gloo] Connection reset by peer")
    assert ray_launch.failure_summary({0: lost, 1: error, 2: lost}) == (
        "error: distributed training failed: rank 1 stopped first with: Data file d.json is not valid JSON. The other "
        "ranks stopped because of it (rank(s) 0, 2)."
    )
    assert ray_launch.failure_summary({0: error, 1: DataError("Data file d.json is not valid JSON.")}) == (
        "error: distributed training failed: rank 0 stopped first with: Data file d.json is not valid JSON. Rank(s) "
        "1 failed the same way."
    )
    timeout = ray_launch.failure_summary({3: RuntimeError("Timeout(ms)=1800000 while waiting")})
    assert timeout.startswith("error: distributed training failed: rank 3 stopped first with: RuntimeError: Timeout")
    assert timeout.endswith(ray_launch.TIMEOUT_HINT)


def test_the_ray_example_plans_its_workers_as_the_processes(monkeypatch):
    """examples/multi-gpu/qwen_lora_sft_ray.yaml (LLaMA-Factory's train_lora/qwen3_lora_sft_ray.yaml), loaded as a
    user loads it: with USE_RAY=1, tunekit plan counts its 4 workers as the processes (the model's built-in shape)."""
    from tunekit.plan import make_plan

    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("USE_RAY", "1")
    cfg = load_config(ROOT / "examples" / "multi-gpu" / "qwen_lora_sft_ray.yaml")
    assert (cfg.ray_num_workers, cfg.finetuning_type, cfg.ray_storage_path) == (4, "lora", "./saves/ray")
    plan = make_plan(cfg, gpu="A100-80GB", model_config="qwen2.5-0.5b", num_samples=100, seq_len=1024)
    assert (plan.world_size, plan.effective_batch_size, plan.setup["engine"]) == (4, 32, "DDP")


def test_only_a_ray_run_imports_ray():
    code = (
        "import sys, tunekit.flow, tunekit.plan.planner, tunekit.train.engines.ray_launch; "
        "assert 'ray' not in sys.modules, 'ray imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("raydata")
    write_dataset(folder, "toy", alpaca_records(16, seed=1))
    return folder


@pytest.mark.slow
@pytest.mark.distributed
def test_two_ray_workers_batch_1_equal_one_process_batch_2(tiny_qwen, data_dir, tmp_path):
    single = tmp_path / "single"
    run_train(load_config(None, base_config(tiny_qwen, data_dir, single, per_device_train_batch_size=2, **COMMON)))
    out = tmp_path / "ray_out"
    ray_options = dict(
        ray_num_workers=2,
        ray_run_name="tiny",
        ray_storage_path=str(tmp_path / "ray_records"),
        ray_init_kwargs=RAY_LOCAL,
        per_device_train_batch_size=1,
    )
    proc = _ray_train(base_config(tiny_qwen, data_dir, out, **COMMON, **ray_options), tmp_path)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "tunekit: starting 2 processes with Ray Train (1 CPU each)" in proc.stderr
    # tunekit's own files, written once (rank 0), in output_dir; Ray's records in ray_storage_path/ray_run_name
    assert (out / "tunekit_config.yaml").is_file() and (out / "checkpoint-2" / "trainer_state.json").is_file()
    assert (tmp_path / "ray_records" / "tiny").is_dir()
    assert len(series(out)) == 4
    assert_close(series(single), series(out), LOSS_TOL, "Ray Train losses")
    assert_trained_alike(
        load_file(single / "model.safetensors"),
        load_file(out / "model.safetensors"),
        COMMON["learning_rate"],
        COMMON["max_steps"],
        load_file(tiny_qwen / "model.safetensors"),
        "Ray Train weights",
    )


@pytest.mark.slow
@pytest.mark.distributed
def test_a_failing_rank_is_named(tiny_qwen, tmp_path):
    """Every rank fails on the data (the driver reads none): the first rank's error, by rank, with its message."""
    bad = tmp_path / "bad"
    write_dataset(bad, "toy", "not json", suffix=".json")
    cfg = base_config(tiny_qwen, bad, tmp_path / "out", ray_num_workers=2, ray_init_kwargs=RAY_LOCAL)
    proc = _ray_train({**cfg, "ray_storage_path": str(tmp_path / "ray_records")}, tmp_path)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]  # after the workers' own output
    assert last.startswith(
        f"error: distributed training failed: rank 0 stopped first with: Data file {bad / 'toy.json'} is not valid "
        "JSON (line 1, column 1): Expecting value."
    ), proc.stderr[-4000:]


@pytest.mark.slow
@pytest.mark.distributed
def test_sigterm_to_the_driver_stops_the_workers_with_a_checkpoint(tiny_qwen, data_dir, tmp_path):
    """The board's Stop (SIGTERM to ``tunekit train``): Ray's workers cannot be signalled from the driver, so the
    driver writes its stop file and each rank, after its step, saves a checkpoint and ends, as under torchrun; the
    driver exits 128 + 15. Before: Ray ended the workers with the driver, without a checkpoint."""
    import signal
    import time

    out = tmp_path / "ray_out"
    cfg = base_config(
        tiny_qwen,
        data_dir,
        out,
        **{**COMMON, "max_steps": 100000, "save_strategy": "no"},
        ray_num_workers=2,
        ray_init_kwargs=RAY_LOCAL,
        ray_storage_path=str(tmp_path / "ray_records"),
    )
    cfg_path = tmp_path / "ray.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "tunekit.cli.main", "train", str(cfg_path)]
    note_launch(cmd)
    env = launch_env(USE_RAY="1", RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    log = tmp_path / "stderr.txt"
    with log.open("wb") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not (out / "trainer_log.jsonl").is_file() or not series(out):  # a step is done: the ranks train
            assert proc.poll() is None, log.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "no training step was logged"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=RUN_TIMEOUT) == 128 + signal.SIGTERM, log.read_text(errors="replace")[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    text = log.read_text(errors="replace")
    assert "tunekit: SIGTERM: the Ray workers save a checkpoint after their current step and stop" in text
    assert text.rstrip().endswith("tunekit: the run was stopped by SIGTERM"), text[-3000:]
    checkpoints = sorted(out.glob("checkpoint-*"))
    assert len(checkpoints) == 1 and (checkpoints[0] / "trainer_state.json").is_file(), checkpoints
    assert int(checkpoints[0].name.split("-")[1]) < 100000
    assert not (out / ray_launch.STOP_FILE_NAME).exists()  # removed: the next run is not stopped by it
