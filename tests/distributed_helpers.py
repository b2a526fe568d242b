"""Running ``tunekit train`` on 2 CPU processes for the distributed test files: launchers, a run cache, log readers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
import yaml

from tests.helpers import ROOT, alpaca_records, base_config, train_rows, write_dataset
from tests.stage_helpers import PAIR_SGD_OPTIONS
from tests.tolerances import adam_drift
from tunekit.config import load_config
from tunekit.flow import run_train
from tunekit.train.engines.launcher import free_port

BIN = Path(sys.executable).parent
# the run every engine is compared on with one process: full tuning, 4 steps, a checkpoint at step 2
ENGINE_RUN = dict(
    finetuning_type="full",
    max_steps=4,
    save_strategy="steps",
    save_steps=2,
    learning_rate=1e-3,
    cutoff_len=64,
    overwrite_output_dir=True,
)
RUN_TIMEOUT = 900  # the first offload run compiles DeepSpeed's CPU Adam (cached in ~/.cache/torch_extensions)


def note_launch(cmd: list[str]) -> None:
    """With ``TUNEKIT_TEST_LAUNCH_LOG=FILE``, append one line per distributed launch (the suite's launch count)."""
    log = os.environ.get("TUNEKIT_TEST_LAUNCH_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?')}\t{' '.join(cmd[1:4])}\n")


def launch_env(**extra) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT", "FORCE_TORCHRUN")
    }
    env.update(
        CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT), **extra
    )  # reward functions live in tests/
    return env


def launch_command(launch: str, cfg_path: Path) -> tuple[list[str], dict]:
    """The command line and environment of ``tunekit train cfg_path`` under one of the ways users start it."""
    train = ["-m", "tunekit.cli.main", "train", str(cfg_path)]
    if launch in ("reexec", "reexec1"):  # tunekit's own re-exec under torchrun (reexec1: one process, for DeepSpeed)
        return [sys.executable, *train], launch_env(
            FORCE_TORCHRUN="1", NPROC_PER_NODE="1" if launch == "reexec1" else "2"
        )
    if launch == "torchrun":  # an external launcher, as users type it
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            *train,
        ], launch_env()
    if (
        launch == "accelerate"
    ):  # torch.distributed under accelerate: --multi_gpu is its torchrun mode (--cpu = one process)
        return [
            str(BIN / "accelerate"),
            "launch",
            "--multi_gpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            str(free_port()),
            *train,
        ], launch_env()
    assert launch == "deepspeed", (
        launch
    )  # the deepspeed launcher runs one process per --num_gpus on its CPU accelerator
    return [
        str(BIN / "deepspeed"),
        "--num_gpus",
        "2",
        "--master_port",
        str(free_port()),
        str(BIN / "tunekit"),
        "train",
        str(cfg_path),
    ], launch_env()


def launch(how: str, cfg: dict, cfg_path: Path, expect_ok: bool = True) -> subprocess.CompletedProcess:
    cfg_path.write_text(yaml.safe_dump(cfg))
    cmd, env = launch_command(how, cfg_path)
    note_launch(cmd)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=ROOT)
    if expect_ok:
        assert proc.returncode == 0, proc.stderr[-6000:]
    return proc


def launch_batch(jobs: list[tuple[dict, Path, Path | None]]) -> list[subprocess.CompletedProcess]:
    """Several ``tunekit train`` runs (config, its yaml path, a folder where its ranks record their pairs as
    :func:`record_pair_batches` or None) on 2 ranks in ONE torchrun job, each run in a fresh process forked after the
    imports (tests/distributed_batch.py): per run, its ranks' stdout and stderr (rank 0's first) and the first failing
    rank's exit code, as :func:`launch` returns for one launch."""
    plan = []
    for cfg, cfg_path, record in jobs:
        cfg_path.write_text(yaml.safe_dump(cfg))
        output = str(cfg_path.with_suffix(""))
        plan.append({"config": str(cfg_path), "port": free_port(), "output": output, "record": record and str(record)})
    plan_path = jobs[0][1].with_suffix(".batch.json")
    plan_path.write_text(json.dumps(plan))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        "-m",
        "tests.distributed_batch",
        str(plan_path),
    ]
    note_launch(cmd)
    proc = subprocess.run(cmd, env=launch_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-6000:]
    done = []
    for run, (_, cfg_path, _) in zip(plan, jobs):
        out = {s: "".join(Path(f"{run['output']}.rank{r}.{s}").read_text() for r in (0, 1)) for s in ("out", "err")}
        codes = [int(Path(f"{run['output']}.rank{r}.rc").read_text()) for r in (0, 1)]
        rc = next((c for c in codes if c != 0), 0)
        done.append(subprocess.CompletedProcess(["tunekit", "train", str(cfg_path)], rc, out["out"], out["err"]))
    return done


def run_cache(model: Path, data_dir: Path, root: Path, common: dict, batches: tuple[dict, ...] = ()):
    """``get(name, how, **options) -> (output_dir, completed process or None)``; each name runs once.

    ``how`` is ``inprocess`` (``run_train`` here), a :func:`launch_command` launcher, or ``batch``: a run declared in
    one of ``batches`` ({name: its options, or a function of ``get`` returning them, called first, which may run
    what the run needs, e.g. the run whose checkpoint it resumes}); the first ``get`` of a run of a batch starts
    every run of that batch in ONE :func:`launch_batch` (outputs bit-equal to separate launches, ~3 s each instead
    of ~20). A run whose assertions are about its launcher is not batched."""
    done: dict[str, tuple[Path, subprocess.CompletedProcess | None]] = {}

    def run_batch(batch: dict) -> None:
        options = {name: opts(get) if callable(opts) else opts for name, opts in batch.items() if name not in done}
        jobs = [
            (base_config(model, data_dir, root / n, **{**common, **o}), root / f"{n}.yaml", None)
            for n, o in options.items()
        ]
        for name, proc in zip(options, launch_batch(jobs)):
            done[name] = (root / name, proc)

    def get(name: str, how: str, **overrides) -> tuple[Path, subprocess.CompletedProcess | None]:
        if name not in done and how == "batch":
            assert not overrides, f"{name}: a batched run's options are declared in its batch"
            run_batch(next(batch for batch in batches if name in batch))
        elif name not in done:
            out = root / name
            cfg = base_config(model, data_dir, out, **{**common, **overrides})
            if how == "inprocess":
                note_launch(["", "inprocess", name])
                run_train(load_config(None, cfg))
                done[name] = (out, None)
            else:
                done[name] = (out, launch(how, cfg, root / f"{name}.yaml"))
        out, proc = done[name]
        if how == "batch":
            assert proc.returncode == 0, f"{name}: {proc.stderr[-6000:]}"
        return out, proc

    return get


def copied_checkpoint(run: Path, step: int, to: Path) -> Path:
    """``run``'s ``checkpoint-{step}`` copied into the folder ``to`` (a resumed run reads only the copy)."""
    checkpoint = to / f"checkpoint-{step}"
    shutil.copytree(run / f"checkpoint-{step}", checkpoint)
    return checkpoint


def series(out: Path, key: str = "loss") -> dict[int, float]:
    return {row["step"]: row[key] for row in train_rows(out) if key in row}


def assert_close(a: dict, b: dict, tol: float, what: str) -> float:
    assert a.keys() == b.keys(), (what, sorted(a), sorted(b))
    worst = max(abs(a[k] - b[k]) for k in a)
    assert worst <= tol, f"{what}: max difference {worst:.3g} > {tol}"
    return worst


def logits(model) -> torch.Tensor:
    ids = torch.tensor([[3, 17, 42, 99, 256, 7, 1000, 12]])
    with torch.no_grad():
        return model.eval()(input_ids=ids).logits


def assert_trained_alike(
    a: dict, b: dict, lr: float, steps: int, init: dict | None = None, what: str = "weights"
) -> float:
    """Two float32 trainings that should be the same computation (2 ranks vs 1 process): compare their weights.

    Ranks sum gradients in another order than one process, and Adam makes a gradient element at the rounding floor
    a full step of either sign, so no per-element bound tighter than ``adam_drift`` holds on every machine (one value
    head moved 4.9e-4 on an AMD EPYC and 5e-5 on an Intel Xeon at lr 5e-3). What machines cannot change is that only
    such elements move that much: with the starting weights ``init``, the distance between the runs must also stay a
    small share of how far training moved the weights (a run that lost a rank's gradient, trained other samples or
    saved its initial weights is at a share of ~0.3 .. 1). Returns the largest element difference."""
    assert set(a) <= set(b), set(a) ^ set(b)  # ZeRO-2 may also save the tied lm_head
    for key, weight in b.items():
        assert weight.numel() > 0, f"{what}: {key} saved empty (a ZeRO-3 partition instead of the gathered weight)"
    worst = max((a[k].double() - b[k].double()).abs().max().item() for k in a)
    assert worst <= adam_drift(lr, steps), (
        f"{what}: differ by {worst:.3g}, more than Adam can move in {steps} steps at lr {lr}"
    )
    if init is not None:
        keys = [k for k in a if k in init]
        diff = sum(float((a[k].double() - b[k].double()).pow(2).sum()) for k in keys) ** 0.5
        moved = sum(float((a[k].double() - init[k].double()).pow(2).sum()) for k in keys) ** 0.5
        assert moved > 0, f"{what}: training did not move the weights"
        print(f"{what}: max element difference {worst:.3g}, {diff / moved:.3g} of the training update")
        assert diff <= 0.05 * moved, f"{what}: runs differ by {diff / moved:.3g} of the training update (limit 0.05)"
    return worst


def zero_checkpoint_run(model: Path, tmp_path: Path, stage: str) -> Path:
    """``tunekit train`` with DeepSpeed ``stage`` (z2/z3) on 2 CPU processes, 2 steps, a checkpoint at
    step 2: its output_dir."""
    write_dataset(tmp_path / "data", "toy", alpaca_records(8))
    out = tmp_path / "run"
    cfg = base_config(
        model,
        tmp_path / "data",
        out,
        finetuning_type="full",
        deepspeed=stage,
        max_steps=2,
        per_device_train_batch_size=1,
        save_strategy="steps",
        save_steps=2,
    )
    launch("reexec", cfg, tmp_path / "cfg.yaml")
    return out


DDP_PAIR_OPTIONS = {**PAIR_SGD_OPTIONS, "gradient_accumulation_steps": 1, "overwrite_output_dir": True}
PADDED_PAIR_BUDGET = 384  # write_unequal_pairs padded: batches [long], [short x 3] (test_pair_weighting.py)


def record_pair_batches(folder: Path):
    """``StageTrainer.get_batch_samples`` wrapped: every rank appends, per accumulation window, the pairs of each of
    its micro-batches (chosen / rejected lengths from the padded batch's attention mask) and the step's pair count."""
    from tunekit.train.stages.stage_trainer import StageTrainer, pair_count

    original = StageTrainer.get_batch_samples

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batches, num_items = original(self, epoch_iterator, num_batches, device)
        if batches:
            rows = []
            for batch in batches:  # sequence lengths: padded rows' masks, or a padding-free row's cu_seqlens
                cu = batch.get("cu_seqlens")
                n, mask = (
                    pair_count(batch),
                    (cu.diff() if cu is not None else batch["attention_mask"].sum(dim=1)).tolist(),
                )
                rows.append([[mask[i], mask[n + i]] for i in range(n)])
            line = {"micro_batches": rows, "num_items": None if num_items is None else int(num_items)}
            with open(folder / f"rank{self.args.process_index}.jsonl", "a") as f:
                f.write(json.dumps(line) + "\n")
        return batches, num_items

    return get_batch_samples


def read_pair_records(folder: Path) -> dict[int, list[dict]]:
    """What :func:`record_pair_batches` wrote in ``folder``: each rank's windows, by rank."""
    return {
        int(p.stem[4:]): [json.loads(x) for x in p.read_text().splitlines()]
        for p in sorted(folder.glob("rank*.jsonl"))
    }


def ddp_pair_batch(model: Path, data_dir: Path, root: Path, runs: dict[str, tuple[str, dict]]) -> dict:
    """``tunekit train`` runs ({name: (stage, options)}, ``options`` replace :data:`DDP_PAIR_OPTIONS`) on 2 gloo
    processes, each rank recording its pairs (:func:`record_pair_batches`), in one :func:`launch_batch`:
    {name: (output_dir, completed process, record folder)} for :func:`ddp_pair_result`."""
    jobs, outs = [], []
    defaults = {**DDP_PAIR_OPTIONS, "max_tokens_per_batch": PADDED_PAIR_BUDGET, "per_device_train_batch_size": 1}
    for name, (stage, options) in runs.items():
        record = root / name / "record"
        record.mkdir(parents=True)
        outs.append(root / name / "ddp")
        cfg = base_config(model, data_dir, outs[-1], stage=stage, **{**defaults, **options})
        jobs.append((cfg, root / name / "ddp.yaml", record))
    procs = launch_batch(jobs)
    return {name: (out, proc, job[2]) for name, out, proc, job in zip(runs, outs, procs, jobs)}


def ddp_pair_result(run: tuple[Path, subprocess.CompletedProcess, Path]) -> tuple[Path, dict]:
    """One run of :func:`ddp_pair_batch`: its output_dir and, by rank, what its ranks recorded."""
    out, proc, record = run
    assert proc.returncode == 0, proc.stderr[-6000:]
    return out, read_pair_records(record)
