#!/usr/bin/env python3
"""Seconds per optimizer step of each distributed engine on a tiny model, on this machine's CPUs (gloo).

Every engine trains the same tiny Qwen2 (``tunekit.tiny.text``, hidden 64, 2 layers; full fine-tuning,
fp32) with the same global batch (2 sequences per step) for ``--steps`` steps, each through a real
``tunekit train`` subprocess:

  single              1 process, per-device batch 2
  ddp                 2 processes (FORCE_TORCHRUN=1 NPROC_PER_NODE=2), per-device batch 1
  fsdp_full_shard     2 processes, fsdp: full_shard            (FSDP2, tunekit.train.engines.fsdp)
  fsdp_shard_grad_op  2 processes, fsdp: shard_grad_op
  fsdp_offload        2 processes, fsdp: full_shard offload
  z2 z2_offload z3 z3_offload   2 processes, deepspeed: <preset>  (needs the deepspeed extra: run with .venv)

Printed per engine, from the run's own files: ``train_runtime / total_steps`` (all_results.json: the whole
training loop, first step's set-up included), the steady-state s/step (trainer_log.jsonl ``elapsed_s``
from the end of step 1 to the last step: no lazy initialisation) and the wall time of the whole command
(start-up, data, model load, save). On a model this small the figures measure each engine's per-step
overhead (collectives, hooks, offload copies), not its throughput on a real model.

    .venv/bin/python benchmarks/distributed_speed.py [--steps 10] [--only ddp,fsdp_full_shard] [--threads 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, WORK, fmt, loadavg  # noqa: E402

ENGINES: dict[str, tuple[int, dict]] = {  # name -> (processes, config overrides)
    "single": (1, {}),
    "ddp": (2, {}),
    "fsdp_full_shard": (2, {"fsdp": "full_shard"}),
    "fsdp_shard_grad_op": (2, {"fsdp": "shard_grad_op"}),
    "fsdp_offload": (2, {"fsdp": "full_shard offload"}),
    "z2": (2, {"deepspeed": "z2"}),
    "z2_offload": (2, {"deepspeed": "z2_offload"}),
    "z3": (2, {"deepspeed": "z3"}),
    "z3_offload": (2, {"deepspeed": "z3_offload"}),
}
GLOBAL_BATCH = 2


def prepare(root: Path) -> tuple[Path, Path]:
    """The tiny model (built once, cached in WORK) and a small alpaca dataset."""
    from tunekit.tiny.text import build_tiny_model

    model = root / "tiny-qwen2"
    if not (model / "model.safetensors").is_file():
        build_tiny_model(model, like="qwen2", seed=0)
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    records = [
        {"instruction": f"What is {a} plus {b}? Answer with the number only.", "input": "", "output": str(a + b)}
        for a, b in ((i * 7 % 100, i * 13 % 100) for i in range(64))
    ]
    (data / "toy.json").write_text(json.dumps(records))
    (data / "dataset_info.json").write_text(json.dumps({"toy": {"file_name": "toy.json"}}))
    return model, data


def run_engine(
    name: str, procs: int, overrides: dict, model: Path, data: Path, root: Path, steps: int, threads: int
) -> dict:
    import yaml

    out = root / "runs" / name
    shutil.rmtree(out, ignore_errors=True)
    cfg = dict(
        model_name_or_path=str(model),
        template="qwen",
        dataset="toy",
        dataset_dir=str(data),
        output_dir=str(out),
        finetuning_type="full",
        cutoff_len=128,
        per_device_train_batch_size=GLOBAL_BATCH // procs,
        gradient_accumulation_steps=1,
        learning_rate=1e-4,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        plot_loss=False,
        overwrite_output_dir=True,
        seed=0,
        **overrides,
    )
    cfg_path = root / "runs" / f"{name}.yaml"
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    env.update(
        CUDA_VISIBLE_DEVICES="",
        OMP_NUM_THREADS=str(threads),
        TUNEKIT_CACHE=str(root / "cache"),
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    if procs > 1:
        env.update(FORCE_TORCHRUN="1", NPROC_PER_NODE=str(procs))
    else:
        env.pop("FORCE_TORCHRUN", None)
    log = root / "runs" / f"{name}.log"
    t0 = time.time()
    with open(log, "w") as fp:
        proc = subprocess.run(
            [sys.executable, "-m", "tunekit.cli.main", "train", str(cfg_path)],
            env=env,
            cwd=REPO,
            stdout=fp,
            stderr=subprocess.STDOUT,
        )
    wall = time.time() - t0
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        return {"error": f"exit {proc.returncode}: {tail[0][:150]} (log: {log})"}
    results = json.loads((out / "all_results.json").read_text())
    rows = [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()]
    elapsed = {r["step"]: r["elapsed_s"] for r in rows if "loss" in r and r.get("elapsed_s") is not None}
    first, last = min(elapsed), max(elapsed)
    steady = (elapsed[last] - elapsed[first]) / (last - first) if last > first else None
    total = results.get("total_steps") or steps
    return {
        "runtime_per_step": results["train_runtime"] / total,
        "steady_per_step": steady,
        "wall": wall,
        "steps": total,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps per engine (default 10)")
    ap.add_argument("--only", default=",".join(ENGINES), help=f"comma list of: {', '.join(ENGINES)}")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every process (default 1)")
    args = ap.parse_args(argv)
    chosen = [e.strip() for e in args.only.split(",") if e.strip()]
    unknown = [e for e in chosen if e not in ENGINES]
    if unknown:
        ap.error(f"unknown engine(s): {', '.join(unknown)}")

    root = WORK / "distributed-speed"
    model, data = prepare(root)
    print(
        f"[bench] tiny qwen2, full fine-tuning, fp32, global batch {GLOBAL_BATCH}, {args.steps} steps, "
        f"OMP_NUM_THREADS={args.threads}, load {loadavg()}",
        flush=True,
    )
    has_deepspeed = importlib.util.find_spec("deepspeed") is not None
    results = {}
    for name in chosen:
        procs, overrides = ENGINES[name]
        if "deepspeed" in overrides and not has_deepspeed:
            results[name] = {"error": "skipped: deepspeed is not installed in this python (use .venv/bin/python)"}
        else:
            results[name] = run_engine(name, procs, overrides, model, data, root, args.steps, args.threads)
        r = results[name]
        print(
            f"[bench] {name}: " + (r["error"] if "error" in r else f"{fmt(r['runtime_per_step'], 3)} s/step"),
            flush=True,
        )

    print(f"\n| engine | processes | train_runtime / steps | steady s/step (steps 2..{args.steps}) | whole command |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        if "error" in r:
            print(f"| {name} | {ENGINES[name][0]} | {r['error']} | | |")
        else:
            print(
                f"| {name} | {ENGINES[name][0]} | {fmt(r['runtime_per_step'], 3)} s | {fmt(r['steady_per_step'], 3)} "
                "s "
                f"| {fmt(r['wall'], 1)} s |"
            )
    print(f"\nload after: {loadavg()}")
    return 0 if all("error" not in r or r["error"].startswith("skipped") for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
