#!/usr/bin/env python3
"""tunekit quickstart: watch a tiny model learn a task on a CPU, in a few minutes, downloading nothing.

1. build a small random-weight Llama-architecture model with its tokenizer (``tunekit tiny-model``);
2. measure exact-match accuracy on held-out questions (greedy decoding, the training template);
3. fine-tune it with ``tunekit train examples/quickstart.yaml`` (full fine-tuning, English and
   Chinese data in alpaca and sharegpt form, see examples/data and scripts/make_quickstart_data.py);
4. measure again and print both accuracies, the loss curve's path and the wall time.

    .venv/bin/python examples/quickstart.py [--output-dir saves/quickstart] [--quick] [key=value ...]

Extra ``key=value`` arguments are passed to ``tunekit train`` (e.g. ``max_steps=50``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "quickstart.yaml"
DATA_DIR = ROOT / "examples" / "data"
EVAL_FILE = DATA_DIR / "quickstart_eval.json"

# The model the quickstart trains: fixed sizes and seed, so every run starts from the same weights.
MODEL = {"like": "llama", "hidden_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "seed": 0}
# --quick (what the test runs): the same model and flow, fewer steps (at a constant LR: the task "clicks"
# only after ~60 steps at a high LR) and fewer held-out questions.
QUICK_TRAIN = ["max_steps=120", "lr_scheduler_type=constant_with_warmup", "logging_steps=10"]
QUICK_EVAL = 100


def load_eval(path: Path = EVAL_FILE, limit: int | None = None) -> list[tuple[str, str]]:
    """(question, answer) pairs of an alpaca file; the question joins instruction and input as training does.

    ``limit`` keeps that many, evenly spread over the file (so both languages stay represented).
    """
    rows = json.loads(path.read_text(encoding="utf-8"))
    pairs = [("\n".join(p for p in (r["instruction"], r.get("input", "")) if p), r["output"]) for r in rows]
    if limit and limit < len(pairs):
        pairs = [pairs[i * len(pairs) // limit] for i in range(limit)]
    return pairs


def exact_match(
    model_dir: str | Path,
    template: str,
    examples: Sequence[tuple[str, str]],
    *,
    batch_size: int = 50,
    max_new_tokens: int = 16,
) -> tuple[float, list[str]]:
    """Share of questions whose greedy answer equals the reference exactly (after stripping spaces).

    The prompt is rendered by tunekit's template ``template`` (the one training used) and tokenized
    without added special tokens, exactly as the training data was; generation stops at the
    template's stop words. Returns (accuracy, predictions).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tunekit.data.templates import get_template

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tpl = get_template(template, tokenizer)
    stop_ids = [i for i in tokenizer.convert_tokens_to_ids(tpl.stop_words) if i is not None and i >= 0]
    if tokenizer.eos_token_id is not None:
        stop_ids.append(tokenizer.eos_token_id)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]

    predictions: list[str] = []
    for start in range(0, len(examples), batch_size):
        batch = examples[start : start + batch_size]
        prompts = [tpl.render_prompt([{"role": "user", "content": q}]) for q, _ in batch]
        encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        width = max(map(len, encoded))
        input_ids = torch.tensor([[pad_id] * (width - len(e)) + e for e in encoded])  # left padding
        attention = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=sorted(set(stop_ids)),
                pad_token_id=pad_id,
            )
        predictions += [tokenizer.decode(row[width:], skip_special_tokens=True).strip() for row in out]
    correct = sum(p == a.strip() for p, (_, a) in zip(predictions, examples))
    return correct / max(len(examples), 1), predictions


def read_template(config: Path = CONFIG) -> str:
    import yaml

    return yaml.safe_load(config.read_text(encoding="utf-8"))["template"]


def run_train(model_dir: Path, run_dir: Path, extra: Sequence[str]) -> dict[str, Any]:
    """``tunekit train examples/quickstart.yaml`` in a child process (as a user runs it); all_results.json."""
    cmd = [
        sys.executable,
        "-m",
        "tunekit.cli.main",
        "train",
        str(CONFIG),
        f"model_name_or_path={model_dir}",
        f"output_dir={run_dir}",
        f"dataset_dir={DATA_DIR}",
        *extra,
    ]
    print("$ tunekit train " + " ".join(cmd[4:]), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"tunekit train failed (exit {proc.returncode})")
    return json.loads((run_dir / "all_results.json").read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output-dir", default=str(ROOT / "saves" / "quickstart"))
    ap.add_argument("--quick", action="store_true", help="fewer steps and questions (what the test runs)")
    ap.add_argument("--eval-limit", type=int, default=None, help="evaluate on the first N held-out questions")
    ap.add_argument("train_args", nargs="*", help="key=value options for tunekit train")
    args = ap.parse_args(argv)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from tunekit.tiny.text import build_tiny_model

    t0 = time.time()
    out = Path(args.output_dir).resolve()
    model_dir, run_dir = out / "model", out / "run"
    build_tiny_model(model_dir, **MODEL)
    template = read_template()
    examples = load_eval(limit=args.eval_limit or (QUICK_EVAL if args.quick else None))
    print(f"model: {model_dir} | template: {template} | held-out questions: {len(examples)}", flush=True)

    before, _ = exact_match(model_dir, template, examples)
    print(f"accuracy before training: {before:.1%}", flush=True)
    results = run_train(model_dir, run_dir, (QUICK_TRAIN if args.quick else []) + list(args.train_args))
    after, predictions = exact_match(run_dir, template, examples)
    wall = time.time() - t0

    summary = {
        "accuracy_before": before,
        "accuracy_after": after,
        "held_out": len(examples),
        "train_steps": results.get("total_steps"),
        "train_loss": results.get("train_loss"),
        "train_runtime_s": results.get("train_runtime"),
        "wall_time_s": round(wall, 1),
        "loss_plot": str(run_dir / "training_loss.png"),
        "model": str(run_dir),
    }
    (out / "quickstart_results.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print("\nexamples (question -> model answer):")
    for (q, a), p in list(zip(examples, predictions))[:: max(len(examples) // 4, 1)][:4]:
        print(f"  {q.splitlines()[-1]!r} -> {p!r} ({'ok' if p == a else 'expected ' + repr(a)})")
    print(
        f"\naccuracy on {len(examples)} held-out questions: {before:.1%} before -> {after:.1%} after "
        f"{summary['train_steps']} steps"
    )
    print(f"loss curve: {summary['loss_plot']}")
    print(f"fine-tuned model: {run_dir}")
    print(f"wall time: {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
