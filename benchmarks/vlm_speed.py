#!/usr/bin/env python3
"""Training speed of a tiny vision-language model, LoRA SFT on LLaMA-Factory's mllm_demo (issue 18's closing figure).

Per family (``--like``, as ``tunekit tiny-model OUT --like FAMILY`` builds it: random weights, hidden 64, 2 layers,
the family's real transformers class and image processor), one LoRA SFT run with tunekit's defaults (``lora_target:
all`` = the language model's linear layers, vision tower and projector frozen, ``image_max_pixels`` 768x768) on
``../shared/reference-data/llamafactory/mllm_demo.json`` (6 samples, 8 images), batch 2, no accumulation, fp32,
``--steps`` optimizer steps through ``tunekit.flow.run_train``, each family in its own process (so its peak RSS is its
own). Printed per family:

  tokens in/step     tokens entering the model per step (real tokens, padding excluded: HF's num_input_tokens_seen)
  trained/step       tokens with a label (the replies), from tunekit's own length measure (data/lengths.py)
  image tokens/step  the family's image tokens among the tokens in (each <image> expanded by its processor)
  tokens/s           tokens in / s, over the whole training loop (train_runtime) and steady (steps 2..N from
                     trainer_log.jsonl's elapsed_s: no first-step set-up); trained tokens/s likewise
  s/step             train_runtime / steps, and steady
  peak RSS           the training process's ru_maxrss (tunekit's peak_rss_mb)

The default ``--steps`` (30) is whole epochs (3 steps each), so the per-step counts from the data are exact averages;
the tokens in counted by the Trainer are printed next to them as a cross-check. One thread by default: on a 2-core host
shared with other jobs, torch's default (2 threads) made this model's steps 9-24x slower (most likely each tiny op
waiting at an OpenMP barrier for a thread the host has descheduled). On a model this small the figures measure
tunekit's per-step cost on CPU (collation, the image processor's output, the vision tower's forward, the LoRA step),
not a real VLM's throughput.

    .venv/bin/python benchmarks/vlm_speed.py [--like qwen2.5-vl,llava,gemma3] [--steps 30] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LF_DATA, REPO, WORK, fmt, loadavg  # noqa: E402

TEMPLATES = {"qwen2.5-vl": "qwen2_vl", "qwen2-vl": "qwen2_vl", "llava": "llava", "gemma3": "gemma3"}
BATCH = 2
ROOT = WORK / "vlm-speed"


def job(like: str, model: Path, steps: int) -> dict:
    """The run's options: the defaults (LoRA, freeze options, image_max_pixels) plus the fixed batch and steps."""
    return dict(
        model_name_or_path=str(model),
        template=TEMPLATES[like],
        dataset="mllm_demo",
        dataset_dir=str(LF_DATA),
        output_dir=str(ROOT / f"out-{like}"),
        stage="sft",
        do_train=True,
        finetuning_type="lora",
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=1,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        plot_loss=False,
        overwrite_output_dir=True,
        seed=0,
    )


def data_counts(cfg) -> dict:
    """Samples, tokens, trained tokens and image tokens of the training set, as tunekit tokenizes it."""
    from tunekit.data.lengths import measure_lengths
    from tunekit.model.loader import load_tokenizer

    rows = measure_lengths(cfg, load_tokenizer(cfg), "sft")
    total = rows["total_len"]
    if max(total) > cfg.cutoff_len:
        raise SystemExit(
            f"a sample has {max(total)} tokens > cutoff_len {cfg.cutoff_len}: the counts would not be exact"
        )
    return {
        "samples": len(rows),
        "tokens": sum(total),
        "trained": sum(rows["trainable_len"]),
        "image": sum(rows["image_tokens"]),
    }


def child(like: str, steps: int) -> None:
    """One family's run (in its own process): print a RESULT line of JSON."""
    from tunekit.config import load_config
    from tunekit.flow import run_train

    cfg = load_config(None, job(like, ROOT / f"tiny-{like}", steps))
    results = run_train(cfg)
    counts = data_counts(cfg)
    rows = [json.loads(line) for line in (Path(cfg.output_dir) / "trainer_log.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "loss" in r and r.get("elapsed_s") is not None]
    print(
        "RESULT "
        + json.dumps(
            {
                "results": {k: v for k, v in results.items() if isinstance(v, (int, float))},
                "counts": counts,
                "log": rows,
            }
        ),
        flush=True,
    )


def summarise(run: dict, steps: int) -> dict:
    res, counts, log = run["results"], run["counts"], run["log"]
    done = int(res.get("total_steps") or steps)
    share = done * BATCH / counts["samples"]  # epochs trained (exact counts when whole)
    per_step = {k: counts[k] * share / done for k in ("tokens", "trained", "image")}
    runtime = res["train_runtime"]
    first, last = log[0], log[-1]
    steady = (
        (last["elapsed_s"] - first["elapsed_s"]) / (last["step"] - first["step"])
        if last["step"] > first["step"]
        else None
    )
    seen = res.get("num_input_tokens_seen") or 0
    steady_in = (
        (last["num_input_tokens_seen"] - first["num_input_tokens_seen"]) / (last["elapsed_s"] - first["elapsed_s"])
        if steady
        else None
    )
    return {
        "steps": done,
        "in_step": seen / done,
        "in_step_data": per_step["tokens"],
        "trained_step": per_step["trained"],
        "image_step": per_step["image"],
        "tok_s": seen / runtime,
        "tok_s_steady": steady_in,
        "trained_s": per_step["trained"] * done / runtime,
        "trained_s_steady": per_step["trained"] / steady if steady else None,
        "s_step": runtime / done,
        "s_step_steady": steady,
        "rss": res.get("peak_rss_mb"),
        "loss": res.get("train_loss"),
    }


def run_family(like: str, steps: int, threads: int) -> dict:
    from tunekit.tiny.vlm import build_tiny_vlm

    model = ROOT / f"tiny-{like}"
    if not (model / "config.json").is_file():
        build_tiny_vlm(model, like=like, seed=0)
    env = dict(
        os.environ,
        CUDA_VISIBLE_DEVICES="",
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        TUNEKIT_CACHE=str(ROOT / "cache"),
    )
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    log = ROOT / f"{like}.log"
    with open(log, "w") as fp:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", like, "--steps", str(steps)],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=fp,
            text=True,
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    with open(log, "a") as fp:  # tunekit's own lines (model, trainable params, checkpointing decision) after stderr
        fp.write("".join(f"{line}\n" for line in proc.stdout.splitlines() if not line.startswith("RESULT ")))
    if proc.returncode != 0 or not lines:
        tail = (log.read_text(errors="replace").strip().splitlines() or [""])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:200]} (log: {log})"}
    return summarise(json.loads(lines[-1][len("RESULT ") :]), steps)


def table(results: dict) -> None:
    print(
        "\n| family | tokens in / trained / image tokens per step | tokens/s in (steady) | trained tokens/s (steady) "
        "| s/step (steady) | peak RSS |"
    )
    print("|---|---|---|---|---|---|")
    for like, r in results.items():
        if "error" in r:
            print(f"| {like} | {r['error']} | | | | |")
            continue
        print(
            f"| {like} | {fmt(r['in_step'], 1)} / {fmt(r['trained_step'], 1)} / {fmt(r['image_step'], 1)} "
            f"| {fmt(r['tok_s'], 0)} ({fmt(r['tok_s_steady'], 0)}) | {fmt(r['trained_s'], 0)} "
            f"({fmt(r['trained_s_steady'], 0)}) "
            f"| {fmt(r['s_step'], 3)} ({fmt(r['s_step_steady'], 3)}) | {fmt(r['rss'], 0)} MB |"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--like", default="qwen2.5-vl,llava,gemma3", help=f"comma list of: {', '.join(TEMPLATES)}")
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps per family (default 30: 10 epochs)")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS of each run (default 1; 0: torch's own, which on a shared host can be far slower)",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.steps)
        return 0
    chosen = [x.strip() for x in args.like.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in TEMPLATES]
    if unknown:
        ap.error(f"unknown family: {', '.join(unknown)}")
    if not (LF_DATA / "mllm_demo.json").is_file():
        ap.error(f"{LF_DATA / 'mllm_demo.json'} not found (set TUNEKIT_SHARED to the shared folder)")
    ROOT.mkdir(parents=True, exist_ok=True)
    print(
        f"[bench] tiny VLM LoRA SFT on mllm_demo, batch {BATCH}, {args.steps} steps, threads "
        f"{args.threads or 'default'}, load {loadavg()}",
        flush=True,
    )
    results = {}
    for like in chosen:
        results[like] = r = run_family(like, args.steps, args.threads)
        print(
            f"[bench] {like}: "
            + (
                r["error"]
                if "error" in r
                else f"{fmt(r['tok_s'], 0)} tokens/s in, {fmt(r['s_step'], 3)} s/step, loss {fmt(r['loss'], 3)}; "
                "tokens in/step "
                f"{fmt(r['in_step'], 1)} (Trainer) vs {fmt(r['in_step_data'], 1)} (data)"
            ),
            flush=True,
        )
    table(results)
    print(f"\nload after: {loadavg()}")
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
