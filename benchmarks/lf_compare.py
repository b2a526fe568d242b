#!/usr/bin/env python3
"""tunekit vs LLaMA-Factory 0.9.5 on the same LoRA SFT job, alternating runs (A B A B ...).

The job is ``../shared/bench/llamafactory-baseline/lora_sft.yaml`` (alpaca_en_demo max 200 + identity,
qwen template, cutoff 512, LoRA r8 on all linear layers, bs 2 x GA 4, lr 1e-4 cosine warmup 0.1,
val 0.1 with eval every 20 steps, fp32, 33 optimizer steps) on the tiny Qwen2 that the baseline's
``make_tiny_model.py`` builds (5.0M parameters). Both tools get the same command line::

    tunekit train          lora_sft.yaml $ARGS
    llamafactory-cli train lora_sft.yaml $ARGS

with ``ARGS="model_name_or_path=M output_dir=O dataset_dir=D logging_first_step=true do_eval=true"``.

``logging_first_step=true`` (a TrainingArguments option both accept; it adds one log line) makes each
tool append its first line to ``output_dir/trainer_log.jsonl`` right after optimizer step 1.
``do_eval=true`` changes nothing for LLaMA-Factory (HF turns do_eval on whenever eval_strategy is set,
and LLaMA-Factory then evaluates once more after training); tunekit reads its own ``do_eval``
(default false), so without it tunekit would skip that final evaluation and do less work.

What is measured, per run:
  wall       spawn of the command -> exit (the whole command, as a user waits for it)
  startup    spawn -> optimizer step 1 completed: the moment the first line appears in the tool's own
             ``trainer_log.jsonl`` (polled every 20 ms by this script; both tools write that line in
             their ``on_log`` callback after step 1's optimizer.step)
  cpu        user + sys CPU seconds of the process tree (wait4 rusage): much less sensitive than wall
             time to other work on a shared machine, so quoted beside it
  peak RSS   the largest single process's max RSS (wait4 ru_maxrss; what ``/usr/bin/time -v`` shows,
             as in the baseline README) and the largest sampled sum over the process tree (psutil)
  train_runtime / losses from each tool's all_results.json (to show both ran the same job)

tunekit runs from ``benchmarks/.venv-base`` (base install, no extras: see benchmarks/_common.py for
why and how to create it); LLaMA-Factory from ``$LF_VENV`` (default ~/.cache/lf-venv, created by the
baseline's setup.sh). Environment for both, as in run_baseline.sh: CUDA_VISIBLE_DEVICES="",
TOKENIZERS_PARALLELISM=false; tunekit's dataset cache goes to the work folder.

    benchmarks/.venv-base/bin/python benchmarks/lf_compare.py [--pairs 2] [--only tunekit|lf] [--threads 1]

On a machine whose cores are busy with other work, torch's default (one thread per core, spinning
barriers) runs several times slower than one thread and burns CPU while waiting: use ``--threads 1``
there (both tools get OMP_NUM_THREADS=1) and compare the CPU-time ratio, the least load-sensitive figure.

Timings swing 2-10x when other work shares the cores: runs alternate, the load average is printed
with each run, and the ratios (tunekit / LF) are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    BASE_VENV,
    LF_BASELINE,
    LF_DATA,
    LF_VENV,
    WORK,
    Measured,
    fmt,
    loadavg,  # noqa: E402
    med,
    run_measured,
)

JOB = LF_BASELINE / "lora_sft.yaml"
# Given to both tools. logging_first_step: the first log line (start-up mark) right after step 1.
# do_eval: HF TrainingArguments turns do_eval on whenever eval_strategy != "no", and LLaMA-Factory then
# runs a final evaluation after training; tunekit reads its own do_eval (default false), so it is
# spelled out here to make both tools do the same work.
COMMON = ["logging_first_step=true", "do_eval=true"]
TARGETS = {"wall_ratio": 0.67, "startup_s": 2.0, "help_s": 0.3}
LF_QUOTED = "LLaMA-Factory measured quiet: wall 28.5-29.3 s, start-up 6.4-7.2 s, ~850 MB peak RSS"


def build_model(model_dir: Path, python: Path) -> None:
    if (model_dir / "model.safetensors").is_file():
        return
    print(f"[lf_compare] building the tiny Qwen2 in {model_dir}", flush=True)
    subprocess.run(
        [str(python), str(LF_BASELINE / "make_tiny_model.py"), str(model_dir), "--data-dir", str(LF_DATA)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def first_log_line(path: Path):
    def check() -> bool:
        try:
            return path.stat().st_size > 0  # both tools write whole lines (one write per line)
        except OSError:
            return False

    return check


def tool_env(threads: int = 0) -> dict:
    env = dict(
        os.environ, CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false", TUNEKIT_CACHE=str(WORK / "tunekit-cache")
    )
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def run_one(
    tool: str, exe: Path, model_dir: Path, out_dir: Path, log: Path, extra: list[str], threads: int = 0
) -> dict:
    shutil.rmtree(out_dir, ignore_errors=True)
    env = tool_env(threads)
    cmd = [
        str(exe),
        "train",
        str(JOB),
        f"model_name_or_path={model_dir}",
        f"output_dir={out_dir}",
        f"dataset_dir={LF_DATA}",
        *COMMON,
        *extra,
    ]
    m: Measured = run_measured(
        cmd, env=env, cwd=WORK, log=log, watch={"first_step": first_log_line(out_dir / "trainer_log.jsonl")}
    )
    row = {
        "tool": tool,
        "rc": m.rc,
        "wall_s": m.wall_s,
        "cpu_s": m.cpu_s,
        "startup_s": m.marks.get("first_step"),
        "maxrss_mb": m.maxrss_mb,
        "tree_rss_mb": m.tree_rss_mb,
        "load": f"{m.load_before} -> {m.load_after}",
        "log": str(log),
    }
    results = out_dir / "all_results.json"
    if results.is_file():
        res = json.loads(results.read_text())
        row.update(
            train_runtime=res.get("train_runtime"), train_loss=res.get("train_loss"), eval_loss=res.get("eval_loss")
        )
    if m.rc != 0:
        tail = log.read_text(errors="replace")[-3000:]
        print(f"[lf_compare] {tool} failed (exit {m.rc}); last lines of {log}:\n{tail}", flush=True)
    return row


def print_row(r: dict) -> None:
    print(
        f"  {r['tool']:<8} wall {fmt(r['wall_s'], 1):>6} s | start-up to step 1 {fmt(r['startup_s']):>6} s | "
        f"cpu {fmt(r['cpu_s'], 1):>6} s | peak RSS {fmt(r['maxrss_mb'], 0):>5} MB (tree {fmt(r['tree_rss_mb'], 0)}) | "
        f"train_runtime {fmt(r.get('train_runtime'), 1)} s | train_loss {fmt(r.get('train_loss'), 4)} | "
        f"eval_loss {fmt(r.get('eval_loss'), 4)} | load {r['load']}",
        flush=True,
    )


def summarize(rows: list[dict]) -> dict:
    tk = [r for r in rows if r["tool"] == "tunekit" and r["rc"] == 0]
    lf = [r for r in rows if r["tool"] == "lf" and r["rc"] == 0]
    keys = ["wall_s", "startup_s", "cpu_s", "maxrss_mb", "tree_rss_mb", "train_runtime"]
    summary = {
        "tunekit": {k: med([r.get(k) for r in tk]) for k in keys},
        "lf": {k: med([r.get(k) for r in lf]) for k in keys},
        "runs": {"tunekit": len(tk), "lf": len(lf)},
    }
    # Pairwise ratios (each tunekit run against the LF run next to it) are robust to load drifting over time.
    pairs = list(zip(tk, lf))
    summary["ratio"] = {k: med([a[k] / b[k] for a, b in pairs if a.get(k) and b.get(k)]) for k in keys}
    print("\n==== summary (medians; ratio = median of pairwise tunekit/LF) ====")
    print(f"  {'metric':<26}{'tunekit':>10}{'LF':>10}{'ratio':>8}  target")
    names = {
        "wall_s": "whole command wall (s)",
        "startup_s": "start-up to step 1 (s)",
        "cpu_s": "CPU time user+sys (s)",
        "maxrss_mb": "peak RSS (MB)",
        "tree_rss_mb": "peak tree RSS (MB)",
        "train_runtime": "train_runtime (s)",
    }
    goals = {
        "wall_s": f"ratio <= {TARGETS['wall_ratio']}",
        "startup_s": f"tunekit <= {TARGETS['startup_s']} s",
        "maxrss_mb": "ratio <= 1.0",
        "tree_rss_mb": "ratio <= 1.0",
    }
    for k in keys:
        print(
            f"  {names[k]:<26}{fmt(summary['tunekit'][k]):>10}{fmt(summary['lf'][k]):>10}"
            f"{fmt(summary['ratio'][k]):>8}  {goals.get(k, '')}"
        )
    print(f"  ({LF_QUOTED}; load now {loadavg()})")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=2, help="A B pairs to run (default 2: A B A B)")
    ap.add_argument("--only", choices=["tunekit", "lf"], help="run one tool only")
    ap.add_argument("--tunekit", default=str(BASE_VENV / "bin" / "tunekit"), help="the tunekit executable")
    ap.add_argument("--lf", default=str(LF_VENV / "bin" / "llamafactory-cli"), help="the llamafactory-cli executable")
    ap.add_argument("--json", help="write the rows and summary to this file")
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="OMP_NUM_THREADS for both tools (default: unset = torch's default, one per core). On a machine "
        "where other work keeps the cores busy, torch's spinning thread barriers make 2 threads several "
        "times slower than 1; --threads 1 keeps such a comparison meaningful (and say so when quoting it)",
    )
    ap.add_argument(
        "--nice",
        type=int,
        default=0,
        help="renice this script (and so both tools, which inherit it) by N; negative needs root. On a machine "
        "shared with other work a negative value brings timings closer to a quiet machine's",
    )
    ap.add_argument("extra", nargs="*", help="key=value overrides passed to both tools")
    args = ap.parse_args(argv)

    tools = {"tunekit": Path(args.tunekit), "lf": Path(args.lf)}
    if args.only:
        tools = {args.only: tools[args.only]}
    for name, exe in tools.items():
        if not exe.exists():
            hint = (
                "create it: see benchmarks/_common.py (or run benchmarks/run_all.py)"
                if name == "tunekit"
                else f"run bash {LF_BASELINE / 'setup.sh'} (a few minutes)"
            )
            print(f"[lf_compare] {exe} not found: {hint}", file=sys.stderr)
            return 2
    if args.nice:
        os.nice(args.nice)
    WORK.mkdir(parents=True, exist_ok=True)
    model_dir = WORK / "tiny-qwen2"
    build_model(model_dir, Path(args.tunekit).parent / "python")
    print(
        f"[lf_compare] job {JOB} | model {model_dir} | cpus {os.cpu_count()} | "
        f"OMP_NUM_THREADS {args.threads or os.environ.get('OMP_NUM_THREADS', 'unset')} | nice {args.nice} | load "
        f"{loadavg()}",
        flush=True,
    )
    rows = []
    for i in range(args.pairs):
        for name, exe in tools.items():
            row = run_one(
                name, exe, model_dir, WORK / f"out-{name}", WORK / f"{name}-{i}.log", args.extra, args.threads
            )
            print_row(row)
            rows.append(row)
    summary = summarize(rows)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
