"""tunekit's precisions side by side on this CPU, A B A B, each run in its own process (``tunekit.flow.run_train``).

Modes (``--modes``): ``fp32`` (``dtype: float32``), ``lf_default`` (``dtype: bfloat16``: the frozen base in bf16, the
trainable weights upcast to fp32, no autocast: what LLaMA-Factory runs by default on a bf16 checkpoint), ``bf16``
(``bf16: true``: bf16 autocast on top, what tunekit's rule picks on a CPU with native bf16 for LoRA/OFT/freeze) and
``auto`` (no precision option: whatever ``train/precision.py`` decides here). A Qwen2-shaped random model (hidden 896,
Qwen2.5-0.5B's layer width, ``--layers`` decoder layers, a small vocabulary) on alpaca_en_demo, cutoff 256, batch 2.
Prints the CPU's native bf16 flags, then per mode the train runtime of each run, the loss and the peak RSS.

    .venv/bin/python benchmarks/precision.py --method lora --steps 12 --pairs 3
    .venv/bin/python benchmarks/precision.py --method full --steps 12 --pairs 3 --modes fp32,bf16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LF_DATA, REPO  # noqa: E402

MODES = {"fp32": {"dtype": "float32"}, "lf_default": {"dtype": "bfloat16"}, "bf16": {"bf16": True}, "auto": {}}
CHILD = (
    "import json, sys; from tunekit.config import load_config; from tunekit.flow import run_train; "
    "r = run_train(load_config(None, json.load(open(sys.argv[1])))); print('RESULT', json.dumps(r))"
)


def cpu_bf16_flags() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next(line for line in cpuinfo if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    found = sorted({"avx512_bf16", "amx_bf16"} & set(flags))
    return ", ".join(found) if found else "none (no native bf16)"


def one_run(args, model: Path, mode: str, work: Path, rep: int) -> dict | None:
    cfg = {
        "model_name_or_path": str(model),
        "template": "qwen",
        "dataset": "alpaca_en_demo",
        "dataset_dir": str(LF_DATA),
        "max_samples": 64,
        "cutoff_len": 256,
        "per_device_train_batch_size": 2,
        "finetuning_type": args.method,
        "max_steps": args.steps,
        "learning_rate": 1e-4,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "seed": 0,
        "use_cpu": True,
        "output_dir": str(work / f"{mode}-{rep}"),
        "overwrite_output_dir": True,
        **MODES[mode],
    }
    path = work / f"{mode}.json"
    path.write_text(json.dumps(cfg))
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)} if args.threads else dict(os.environ)
    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=env, cwd=REPO)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        print(f"{mode}: failed\n{done.stderr[-2000:]}", flush=True)
        return None
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="lora", choices=["lora", "full", "freeze", "oft"])
    ap.add_argument("--modes", default="fp32,lf_default,bf16")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--pairs", type=int, default=2, help="rounds over the modes (2: A B A B)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS (0: torch's default)")
    args = ap.parse_args()
    from tunekit.tiny.text import build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="tunekit-precision-"))
    model = build_tiny_model(
        work / "model",
        like="qwen2",
        seed=0,
        hidden_size=896,
        num_layers=args.layers,
        intermediate_size=4864,
        num_heads=14,
        num_kv_heads=2,
    )
    print(
        f"CPU native bf16: {cpu_bf16_flags()}; {args.method}, {args.steps} steps, threads {args.threads}", flush=True
    )
    rows: dict[str, list] = {}
    for rep in range(args.pairs):
        for mode in args.modes.split(","):
            r = one_run(args, model, mode, work, rep)
            if r is not None:
                rows.setdefault(mode, []).append(
                    (round(r["train_runtime"], 2), round(r["train_loss"], 5), r.get("peak_rss_mb"))
                )
                print(
                    f"{mode:<10} run {rep}: {rows[mode][-1][0]} s, loss {rows[mode][-1][1]}, "
                    f"peak RSS {rows[mode][-1][2]} MB",
                    flush=True,
                )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
