#!/usr/bin/env python3
"""One cell of the GPU check kit, in its own process (benchmarks/gpu/kit.py starts it with a timeout).

    python benchmarks/gpu/cell.py train SPEC.json RESULT.json   # tunekit train on the spec's config; measure
    python benchmarks/gpu/cell.py build SHAPE OUT_DIR DTYPE DEVICE [DATA_DIR]   # a random-weight model folder

``train`` runs what ``tunekit train`` runs (tunekit/cli/train_cmd.py: malloc tuning, config, the
gradient-checkpointing decision, ``run_train``) in this process, then records:
  max_memory_allocated / max_memory_reserved   torch.cuda's peaks over the whole run (reset before it)
  peak_rss_mb                                   the process's max RSS (on the CPU this is the measured figure)
  tokens/s                                      steady state from trainer_log.jsonl: tokens seen (non-padding)
                                                between the first and last logged step, over the time between
  train_runtime, train_loss, steps              from run_train's metrics
The result is written even when training raises (with the error), so the kit can record the failure.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def steady_tokens_per_s(out_dir: Path) -> tuple[float | None, float | None]:
    """(tokens/s, s/step) between the first and the last logged training step (logging_steps 1)."""
    path = out_dir / "trainer_log.jsonl"
    rows = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "loss" in row and row.get("elapsed_s") is not None:
                rows.append(row)
    if len(rows) < 2 or rows[-1]["elapsed_s"] <= rows[0]["elapsed_s"]:
        return None, None
    dt = rows[-1]["elapsed_s"] - rows[0]["elapsed_s"]
    tokens = (rows[-1].get("num_input_tokens_seen") or 0) - (rows[0].get("num_input_tokens_seen") or 0)
    return (tokens / dt if tokens else None), dt / (rows[-1]["step"] - rows[0]["step"])


def train(spec_path: str, result_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    result: dict = {"cell": spec.get("name"), "ok": False}
    t0 = time.time()
    try:
        from tunekit.config import load_config
        from tunekit.flow import run_train, start_host  # decides the run as tunekit train does
        from tunekit.train.machine import run_machine

        cfg = load_config(None, dict(spec["config"]))
        start_host(cfg, run_machine(cfg))  # the CPU-host machinery only for a CPU run, as tunekit train
        import torch

        cuda = torch.cuda.is_available() and not cfg.use_cpu
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        metrics = run_train(cfg)
        result.update(
            ok=True,
            train_runtime=metrics.get("train_runtime"),
            train_loss=metrics.get("train_loss"),
            steps=metrics.get("total_steps"),
            num_input_tokens_seen=metrics.get("num_input_tokens_seen"),
            train_tokens_per_second=metrics.get("train_tokens_per_second"),
        )
        tps, sps = steady_tokens_per_s(Path(cfg.output_dir))
        runtime, seen = metrics.get("train_runtime"), metrics.get("num_input_tokens_seen")
        result.update(
            tokens_per_s=tps, s_per_step=sps, runtime_tokens_per_s=seen / runtime if runtime and seen else None
        )
        if cuda:
            result.update(
                max_memory_allocated=torch.cuda.max_memory_allocated(),
                max_memory_reserved=torch.cuda.max_memory_reserved(),
                measured_kind="cuda_max_memory_allocated",
            )
        else:
            result["measured_kind"] = "cpu_peak_rss"
    except BaseException as exc:  # noqa: BLE001 - the kit records every failure and goes on
        result.update(error=f"{type(exc).__name__}: {exc}"[:2000], traceback=traceback.format_exc()[-4000:])
    import resource

    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["cell_wall_s"] = time.time() - t0
    Path(result_path).write_text(json.dumps(result, indent=1, default=str))
    return 0 if result["ok"] else 1


def build(shape: str, out_dir: str, dtype: str, device: str, data_dir: str | None = None) -> int:
    import _shapes

    _shapes.build_random_model(
        Path(out_dir), shape, data_dir=Path(data_dir) if data_dir else None, dtype=dtype, device=device
    )
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "train" and len(argv) == 3:
        return train(argv[1], argv[2])
    if argv and argv[0] == "build" and len(argv) in (5, 6):
        return build(*argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main(sys.argv[1:]))
