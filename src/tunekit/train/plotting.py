"""Loss curves from ``trainer_log.jsonl``: raw points plus an exponentially smoothed line, labelled axes."""

from __future__ import annotations

import json
import math
from pathlib import Path

LOG_NAME = "trainer_log.jsonl"


def read_log(output_dir: str | Path) -> list[dict]:
    path = Path(output_dir) / LOG_NAME
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash
    return rows


def smooth(values: list[float], weight: float | None = None) -> list[float]:
    """TensorBoard-style EMA; the weight grows with the number of points (noisier runs smooth more)."""
    if not values:
        return []
    if weight is None:
        weight = 1.8 * (1 / (1 + math.exp(-0.05 * len(values))) - 0.5)
    out, last = [], values[0]
    for v in values:
        last = last * weight + (1 - weight) * v
        out.append(last)
    return out


def plot_loss(output_dir: str | Path, keys: tuple[str, ...] = ("loss", "eval_loss")) -> list[Path]:
    # matplotlib's object API with the Agg canvas: no pyplot (global figure state, GUI backend probing, and
    # about half a second more to import), safe to call from any thread.
    from matplotlib.figure import Figure

    rows = read_log(output_dir)
    written = []
    for key in keys:
        points = [(r["step"], r[key]) for r in rows if key in r and r[key] is not None]
        if not points:
            continue
        steps, values = zip(*points)
        fig = Figure(figsize=(7, 4.2), dpi=110)
        ax = fig.add_subplot()
        ax.plot(steps, values, "o", color="#7aa6d6", alpha=0.45, markersize=3.5, label="raw")
        if len(values) > 1:
            ax.plot(steps, smooth(list(values)), color="#1f5fa8", linewidth=2, label="smoothed")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(key.replace("_", " "))
        ax.set_title(f"{key.replace('_', ' ')} — {Path(output_dir).name}")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        name = "training_loss.png" if key == "loss" else f"training_{key}.png"
        path = Path(output_dir) / name
        fig.savefig(path)
        written.append(path)
    return written
