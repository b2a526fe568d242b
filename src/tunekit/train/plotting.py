"""Loss curves from ``trainer_log.jsonl``: raw points plus a smoothed line, labelled axes.

The smoothed line is a centred moving average (:func:`smooth`): point ``i`` is the triangle-weighted mean of the
raw points ``i-k .. i+k``. A trailing average (TensorBoard's EMA started at the first value) lags a falling loss:
on the quickstart it drew its line above every raw point from step 20 to 120 (raw 2.3 at step 30, smoothed 4.7).
A centred window has no lag on a linear trend, and each smoothed value is a mean of raw values at most ``k`` points
away, so it always lies within their range. The y-axis is logarithmic when the plotted loss spans more than a
decade (max / min > 10), so the late, small changes stay visible next to the first steps' large loss.
"""

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
    for line in map(str.strip, path.read_text(encoding="utf-8").splitlines()):
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash
    return rows


def half_window(n: int) -> int:
    """Points on each side of the centre: about 5 % of the curve (at least 1, at most 25)."""
    return max(1, min(25, round(n / 20)))


def smooth(values: list[float], k: int | None = None) -> list[float]:
    """Centred, triangle-weighted moving average with ``k`` points on each side.

    Near the ends the window shrinks symmetrically (point ``i`` uses ``min(k, i, n-1-i)`` neighbours on each side),
    so the first and last smoothed values are the raw ones and no end is pulled towards its neighbours' side.
    Every smoothed value is a weighted mean of raw values within ``k`` points of it: it stays inside their range.
    """
    n = len(values)
    if n == 0:
        return []
    if k is None:
        k = half_window(n)
    out = []
    for i in range(n):
        r = min(k, i, n - 1 - i)
        weights = [r + 1 - abs(j) for j in range(-r, r + 1)]
        out.append(sum(w * values[i + j] for w, j in zip(weights, range(-r, r + 1))) / sum(weights))
    return out


def use_log_scale(values: list[float]) -> bool:
    """True when the (positive) values span more than a decade."""
    low, high = min(values), max(values)
    return low > 0 and high / low > 10


def loss_points(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``key``: finite values only, one per step (the last logged: a resumed run logs the steps
    after its checkpoint again), in step order."""
    by_step: dict[int, float] = {}
    for r in rows:
        value = r.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value) and "step" in r:
            by_step[int(r["step"])] = float(value)
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def loss_figure(steps: list[int], values: list[float], key: str, title: str):
    # matplotlib's object API with the Agg canvas: no pyplot (global figure state, GUI backend probing, and
    # about half a second more to import), safe to call from any thread.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2), dpi=110)
    ax = fig.add_subplot()
    ax.plot(steps, values, "o", color="#7aa6d6", alpha=0.45, markersize=3.5, label="raw")
    if len(values) > 2:
        k = half_window(len(values))
        ax.plot(steps, smooth(values, k), color="#1f5fa8", linewidth=2, label=f"smoothed (centred, ±{k} points)")
    if use_log_scale(values):
        ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(key.replace("_", " ") + (" (log scale)" if use_log_scale(values) else ""))
    ax.set_title(f"{key.replace('_', ' ')} — {title}")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_loss(output_dir: str | Path, keys: tuple[str, ...] = ("loss", "eval_loss")) -> list[Path]:
    rows = read_log(output_dir)
    written = []
    for key in keys:
        steps, values = loss_points(rows, key)
        if not steps:
            continue
        fig = loss_figure(steps, values, key, Path(output_dir).name)
        name = "training_loss.png" if key == "loss" else f"training_{key}.png"
        path = Path(output_dir) / name
        fig.savefig(path)
        written.append(path)
    return written
