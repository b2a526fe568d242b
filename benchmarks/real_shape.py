#!/usr/bin/env python3
"""tunekit vs LLaMA-Factory 0.9.5 at a real model's shape (Qwen2.5-0.5B, random weights), alternating A B A B.

The model: Qwen2.5-0.5B's exact architecture (benchmarks/_shapes.py: hidden 896, 24 layers, 14 heads / 2 KV
heads, intermediate 4864, 151,936 embedding rows, tied, RoPE theta 1e6, from the published config.json) with
random weights and a locally trained Qwen-style BPE tokenizer (8,192 real tokens; the other rows of the
embedding are never looked up but still cost their full share of the LM head, the loss and the optimizer).
494,032,768 parameters, as the published checkpoint.

The job (one YAML, given unchanged to both ``tunekit train`` and ``llamafactory-cli train``; each tool's
defaults otherwise): ``--stage sft`` alpaca_en_demo + identity (``--max-samples`` each, default 40),
``--stage dpo`` dpo_en_demo; ``qwen`` template, cutoff 1024, batch 2 x accumulation 2, ``--method lora``
(r8, ``lora_target: all``) or ``full``, each tool's own default precision (no bf16/fp16 keys), ``--steps``
optimizer steps (default: one epoch, so that both tools train on exactly the same samples and the token counts
below are the same for both).

Printed per run and as medians / pairwise ratios (tunekit / LF, each tunekit run against the LF run beside it):
  tokens/s in       tokens entering the model (real tokens, padding excluded; chosen + rejected for DPO)
                    over train_runtime. Counted once from the data (tunekit's pipeline, the same ids as
                    LLaMA-Factory's for this template), for the samples an epoch holds; with ``--steps``
                    shorter than an epoch, scaled by the share of samples consumed.
  tokens/s trained  tokens with a label (the replies), likewise
  s/step            train_runtime / steps, and the steady step time from the tools' own per-step logs
                    (the last logged step minus the first, over the steps between: start-up and the first
                    step's warm-up left out)
  peak RSS          the largest process's max RSS (wait4), as ``/usr/bin/time -v`` reports it

``--profile``: after the timed runs, one more run per tool with torch.profiler over optimizer step
``--profile-step`` (default 3) grouped into LM head + loss, attention, MLP/linear, optimizer, other, and the
padding share of every batch of that run (benchmarks/_profile.py says how each is counted).

``--shape tiny`` is a few-M-parameter model of the same family, so the whole script dry-runs in seconds.

    .venv/bin/python benchmarks/real_shape.py [--shape qwen2.5-0.5b|tiny] [--method lora|full] [--stage sft|dpo]
        [--pairs 2] [--steps N] [--max-samples 40] [--only tunekit|lf] [--threads 1] [--profile] [--json OUT]

tunekit runs from ``benchmarks/.venv-base`` when it exists (see _common.py), else from this interpreter's
venv; LLaMA-Factory from ``$LF_VENV`` (default ~/.cache/lf-venv, ``../shared/bench/llamafactory-baseline/setup.sh``).
Without it the LF runs are skipped with a message and only tunekit's figures are printed.
The 0.5B job needs ~7 GB of RAM per run and minutes per step on 2 cores: do not run it beside other work.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BASE_VENV, LF_DATA, LF_VENV, WORK, fmt, loadavg, med, run_measured  # noqa: E402

HERE = Path(__file__).resolve().parent


def job_config(args, model_dir: Path, data_dir: Path) -> dict:
    """The one job both tools run (LLaMA-Factory's option names)."""
    job = {
        "model_name_or_path": str(model_dir),
        "trust_remote_code": False,
        "stage": args.stage,
        "do_train": True,
        "finetuning_type": args.method,
        "dataset_dir": str(data_dir),
        "template": "qwen",
        "cutoff_len": args.cutoff,
        "max_samples": args.max_samples,
        "overwrite_cache": True,
        "preprocessing_num_workers": 1,
        "dataloader_num_workers": 0,
        "logging_steps": 1,
        "save_steps": 1000,
        "overwrite_output_dir": True,
        "report_to": "none",
        "per_device_train_batch_size": args.batch,
        "gradient_accumulation_steps": args.grad_accum,
        "learning_rate": 1.0e-4 if args.method == "lora" else 1.0e-5,
        "lr_scheduler_type": "cosine",
        "warmup_ratio": 0.1,
        "seed": 42,
        "use_cpu": True,
        "plot_loss": False,
    }
    if args.method == "lora":
        job.update(lora_rank=8, lora_target="all")
    if args.stage == "sft":
        job["dataset"] = "alpaca_en_demo,identity"
    else:
        job.update(dataset="dpo_en_demo", pref_beta=0.1, pref_loss="sigmoid")
    if args.steps:
        job["max_steps"] = args.steps
    else:
        job["num_train_epochs"] = 1.0
    return job


def cpu_bf16() -> str:
    """Which CPU this is and whether it has native bf16 (the default precision of both tools depends on it)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    native = sorted(flags & {"avx512_bf16", "amx_bf16"})
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA")
    if native and isa and os.environ.get("TUNEKIT_CPU_BF16") == "0":
        return f"cpu {name}, native bf16 masked (ONEDNN_MAX_CPU_ISA={isa}, TUNEKIT_CPU_BF16=0)"
    return f"cpu {name}, native bf16: {'yes (' + ', '.join(native) + ')' if native else 'no'}"


def write_yaml(job: dict, path: Path) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


def count_tokens(job: dict, stage: str) -> dict:
    """Samples, real tokens and trained tokens of the training set, through tunekit's own pipeline."""
    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    values = {k: v for k, v in job.items() if k not in ("max_steps", "num_train_epochs")}
    values["output_dir"] = str(WORK / "real-shape-count")
    cfg = load_config(None, values)
    tokenizer = load_tokenizer(cfg)
    train = prepare_datasets(cfg, tokenizer, stage).train
    cols = ("chosen_input_ids", "rejected_input_ids") if stage == "dpo" else ("input_ids",)
    labels = ("chosen_labels", "rejected_labels") if stage == "dpo" else ("labels",)
    tokens = sum(len(x) for c in cols for x in train[c])
    trained = sum(sum(1 for t in x if t != -100) for c in labels for x in train[c])
    return {"samples": len(train), "tokens": tokens, "trained_tokens": trained}


def _lf_seconds(text: str) -> float | None:
    m = re.fullmatch(r"(?:(\d+) days?, )?(\d+):(\d\d):(\d\d)", str(text).strip())
    if not m:
        return None
    d, h, mi, s = (int(g or 0) for g in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s


def step_times(out_dir: Path) -> list[tuple[int, float]]:
    """(step, seconds since training began) from the tool's trainer_log.jsonl (tunekit: step/elapsed_s;
    LLaMA-Factory: current_steps/elapsed_time as H:MM:SS)."""
    path = out_dir / "trainer_log.jsonl"
    rows = []
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "loss" not in row:
            continue
        if "elapsed_s" in row:
            rows.append((int(row["step"]), float(row["elapsed_s"])))
        elif "current_steps" in row and _lf_seconds(row.get("elapsed_time", "")) is not None:
            rows.append((int(row["current_steps"]), _lf_seconds(row["elapsed_time"])))
    return rows


def run_one(
    tool: str, exe: list[str], job_path: Path, out_dir: Path, log: Path, threads: int, counts: dict, extra: list[str]
) -> dict:
    shutil.rmtree(out_dir, ignore_errors=True)
    env = dict(
        os.environ,
        CUDA_VISIBLE_DEVICES="",
        TOKENIZERS_PARALLELISM="false",
        TUNEKIT_WARM="0",
        TUNEKIT_CACHE=str(WORK / "tunekit-cache"),
    )
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [*exe, "train", str(job_path), f"output_dir={out_dir}", *extra]
    m = run_measured(cmd, env=env, cwd=WORK, log=log)
    row = {
        "tool": tool,
        "rc": m.rc,
        "wall_s": m.wall_s,
        "cpu_s": m.cpu_s,
        "maxrss_mb": m.maxrss_mb,
        "tree_rss_mb": m.tree_rss_mb,
        "load": f"{m.load_before} -> {m.load_after}",
        "log": str(log),
    }
    res_path = out_dir / "all_results.json"
    if m.rc == 0 and res_path.is_file():
        res = json.loads(res_path.read_text())
        runtime = res.get("train_runtime")
        logged = step_times(out_dir)
        steps = max((s for s, _ in logged), default=None) or res.get("total_steps") or res.get("global_step")
        row.update(train_runtime=runtime, train_loss=res.get("train_loss"), steps=steps)
        if runtime and steps:
            share = min(1.0, steps * counts["per_step_samples"] / counts["samples"])
            row["tokens_per_s"] = counts["tokens"] * share / runtime
            row["trained_tokens_per_s"] = counts["trained_tokens"] * share / runtime
            row["s_per_step"] = runtime / steps
        if len(logged) >= 2 and logged[-1][0] > logged[0][0]:
            row["steady_s_per_step"] = (logged[-1][1] - logged[0][1]) / (logged[-1][0] - logged[0][0])
    elif m.rc != 0:
        print(
            f"[real_shape] {tool} failed (exit {m.rc}); last lines of {log}:\n"
            f"{log.read_text(errors='replace')[-3000:]}",
            flush=True,
        )
    return row


KEYS = (
    "tokens_per_s",
    "trained_tokens_per_s",
    "s_per_step",
    "steady_s_per_step",
    "train_runtime",
    "wall_s",
    "cpu_s",
    "maxrss_mb",
)
NAMES = {
    "tokens_per_s": "tokens/s entering the model",
    "trained_tokens_per_s": "trained tokens/s",
    "s_per_step": "s per optimizer step",
    "steady_s_per_step": "steady s/step (logs)",
    "train_runtime": "train_runtime (s)",
    "wall_s": "whole command (s)",
    "cpu_s": "CPU time (s)",
    "maxrss_mb": "peak RSS (MB)",
}
TARGETS = {("lora", "sft"): 1.5, ("full", "sft"): 1.3, ("lora", "dpo"): 1.5, ("full", "dpo"): 1.5}


def print_row(r: dict) -> None:
    print(
        f"  {r['tool']:<8} rc {r['rc']} | {fmt(r.get('tokens_per_s'), 1):>7} tok/s in | "
        f"{fmt(r.get('trained_tokens_per_s'), 1):>7} trained tok/s | {fmt(r.get('s_per_step'), 2):>6} s/step "
        f"(steady {fmt(r.get('steady_s_per_step'), 2)}) | train_runtime {fmt(r.get('train_runtime'), 1)} s | "
        f"wall {fmt(r['wall_s'], 1)} s | peak RSS {fmt(r['maxrss_mb'], 0)} MB | loss {fmt(r.get('train_loss'), 4)} | "
        f"load {r['load']}",
        flush=True,
    )


def summarize(rows: list[dict], method: str, stage: str) -> dict:
    tk = [r for r in rows if r["tool"] == "tunekit" and r["rc"] == 0]
    lf = [r for r in rows if r["tool"] == "lf" and r["rc"] == 0]
    summary = {
        "tunekit": {k: med([r.get(k) for r in tk]) for k in KEYS},
        "lf": {k: med([r.get(k) for r in lf]) for k in KEYS},
        "runs": {"tunekit": len(tk), "lf": len(lf)},
    }
    pairs = list(zip(tk, lf))
    summary["ratio"] = {k: med([a[k] / b[k] for a, b in pairs if a.get(k) and b.get(k)]) for k in KEYS}
    target = TARGETS[(method, stage)]
    print(f"\n==== summary {method} {stage} (medians; ratio = median of pairwise tunekit/LF) ====")
    print(f"  {'metric':<30}{'tunekit':>11}{'LF':>11}{'ratio':>8}  target")
    goals = {
        "tokens_per_s": f"ratio >= {target}",
        "trained_tokens_per_s": f"ratio >= {target}",
        "maxrss_mb": "ratio <= 1.0",
    }
    for k in KEYS:
        print(
            f"  {NAMES[k]:<30}{fmt(summary['tunekit'][k]):>11}{fmt(summary['lf'][k]):>11}"
            f"{fmt(summary['ratio'][k]):>8}  {goals.get(k, '')}"
        )
    if not lf:
        print("  (no LLaMA-Factory run: the LF column and the ratios are n/a)")
    print(f"  (load now {loadavg()})")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=["qwen2.5-0.5b", "tiny"])
    ap.add_argument("--method", default="lora", choices=["lora", "full"])
    ap.add_argument("--stage", default="sft", choices=["sft", "dpo"])
    ap.add_argument("--pairs", type=int, default=2, help="A B pairs (default 2: A B A B)")
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps (default 0: one epoch)")
    ap.add_argument("--max-samples", type=int, default=40, help="max_samples of each dataset (default 40)")
    ap.add_argument("--cutoff", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--grad-accum", type=int, default=2)
    ap.add_argument(
        "--dtype",
        default="bfloat16",
        choices=["bfloat16", "float32"],
        help="the saved weights' dtype and config.json's (default bfloat16: the published Qwen2.5-0.5B's; each tool's "
        "default precision starts from it)",
    )
    ap.add_argument("--only", choices=["tunekit", "lf"])
    ap.add_argument("--tunekit", help="the tunekit executable (default: benchmarks/.venv-base's, else this venv's)")
    ap.add_argument("--lf", default=str(LF_VENV / "bin" / "llamafactory-cli"), help="the llamafactory-cli executable")
    ap.add_argument("--data-dir", default=str(LF_DATA), help="LLaMA-Factory's demo data folder")
    ap.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS for both tools (0: torch's default)")
    ap.add_argument("--profile", action="store_true", help="one profiled run per tool after the timed runs")
    ap.add_argument("--profile-step", type=int, default=3, help="the optimizer step --profile records (1-based)")
    ap.add_argument("--json", help="write rows, summary and profiles to this file")
    ap.add_argument("extra", nargs="*", help="key=value overrides passed to both tools")
    args = ap.parse_args(argv)

    data_dir = Path(args.data_dir)
    if not (data_dir / "dataset_info.json").is_file():
        print(
            f"[real_shape] {data_dir} has no dataset_info.json: give --data-dir (LLaMA-Factory's data folder)",
            file=sys.stderr,
        )
        return 2
    tk_exe = Path(args.tunekit) if args.tunekit else (BASE_VENV / "bin" / "tunekit")
    if not tk_exe.exists():
        tk_exe = Path(sys.executable).parent / "tunekit"
    tools: dict[str, list[str]] = {"tunekit": [str(tk_exe)], "lf": [args.lf]}
    if args.only:
        tools = {args.only: tools[args.only]}
    if "lf" in tools and not Path(args.lf).exists():
        print(
            f"[real_shape] LLaMA-Factory skipped: {args.lf} not found (bash ../shared/bench/llamafactory-baseline/"
            f"setup.sh creates it, a few minutes)",
            flush=True,
        )
        tools.pop("lf")
    if not tools:
        return 2
    WORK.mkdir(parents=True, exist_ok=True)
    import _shapes

    suffix = "" if args.dtype == "float32" else f"-{args.dtype}"
    model_dir = _shapes.build_random_model(
        WORK / f"real-{args.shape}{suffix}", args.shape, data_dir=data_dir, dtype=args.dtype
    )
    n = _shapes.count_params(args.shape)
    job = job_config(args, model_dir, data_dir)
    job_path = write_yaml(job, WORK / f"real-shape-{args.method}-{args.stage}.yaml")
    counts = count_tokens(job, args.stage)
    counts["per_step_samples"] = args.batch * args.grad_accum
    epoch_steps = math.ceil(counts["samples"] / counts["per_step_samples"])
    print(
        f"[real_shape] {args.shape}: {n['total']:,} parameters (embedding {n['embedding']:,}) | {args.method} "
        f"{args.stage} | {counts['samples']} samples, {counts['tokens']:,} tokens, {counts['trained_tokens']:,} "
        "trained "
        f"| {args.steps or epoch_steps} steps (one epoch = {epoch_steps}) | job {job_path} | cpus {os.cpu_count()} | "
        f"OMP_NUM_THREADS {args.threads or os.environ.get('OMP_NUM_THREADS', 'unset')} | load {loadavg()} | "
        f"{cpu_bf16()}",
        flush=True,
    )
    rows = []
    for i in range(args.pairs):
        for name, exe in tools.items():
            row = run_one(
                name,
                exe,
                job_path,
                WORK / f"real-out-{name}",
                WORK / f"real-{name}-{i}.log",
                args.threads,
                counts,
                args.extra,
            )
            print_row(row)
            rows.append(row)
    summary = summarize(rows, args.method, args.stage)
    profiles = {}
    if args.profile:
        print(f"\n==== profile of optimizer step {args.profile_step} ====", flush=True)
        pythons = {
            "tunekit": Path(tools["tunekit"][0]).parent / "python" if "tunekit" in tools else None,
            "lf": Path(args.lf).parent / "python" if "lf" in tools else None,
        }
        steps = max(args.profile_step, min(args.steps or epoch_steps, args.profile_step + 1))
        for name, py in pythons.items():
            if py is None:
                continue
            out = WORK / f"real-profile-{name}.json"
            out.unlink(missing_ok=True)
            env = dict(
                os.environ,
                CUDA_VISIBLE_DEVICES="",
                TOKENIZERS_PARALLELISM="false",
                TUNEKIT_CACHE=str(WORK / "tunekit-cache"),
            )
            if args.threads:
                env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
            out_dir = WORK / f"real-profile-out-{name}"
            shutil.rmtree(out_dir, ignore_errors=True)
            log = WORK / f"real-profile-{name}.log"
            with open(log, "wb") as fh:
                rc = subprocess.call(
                    [
                        str(py),
                        str(HERE / "_profile_run.py"),
                        "--profile-step",
                        str(args.profile_step),
                        name,
                        str(job_path),
                        str(out),
                        f"output_dir={out_dir}",
                        f"max_steps={steps}",
                        *args.extra,
                    ],
                    env=env,
                    cwd=WORK,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                )
            if rc != 0 or not out.is_file():
                print(f"  {name}: profile run failed (exit {rc}); see {log}", flush=True)
                continue
            profiles[name] = json.loads(out.read_text())
            from _profile import format_profile

            print(format_profile(profiles[name]), flush=True)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "shape": args.shape,
                    "params": n,
                    "counts": counts,
                    "job": job,
                    "rows": rows,
                    "summary": summary,
                    "profiles": profiles,
                },
                indent=1,
            )
        )
    return 0 if rows and all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
