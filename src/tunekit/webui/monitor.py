"""Read a run's progress from its files: ``trainer_log.jsonl``, the job log, the results files.

Reading files (not the trainer's memory) is what lets a refreshed page, or a new board, show a run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRAINER_LOG = "trainer_log.jsonl"


def read_trainer_log(output_dir: str | Path) -> list[dict[str, Any]]:
    """Every complete JSON line (a line being written right now is skipped)."""
    path = Path(output_dir) / TRAINER_LOG
    if not path.is_file():
        return []
    records = []
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            records.append(obj)
    return records


@dataclass
class Progress:
    step: int = 0
    total: int = 0
    epoch: float | None = None
    loss: float | None = None
    eval_loss: float | None = None
    elapsed_s: float | None = None
    eta_s: float | None = None

    @property
    def fraction(self) -> float:
        return min(1.0, self.step / self.total) if self.total else 0.0


def progress_of(records: list[dict[str, Any]]) -> Progress:
    p = Progress()
    for rec in records:
        if "step" in rec:
            p.step = max(p.step, int(rec["step"]))
        if rec.get("total_steps"):
            p.total = int(rec["total_steps"])
        for key in ("epoch", "loss", "eval_loss", "elapsed_s", "eta_s"):
            if rec.get(key) is not None:
                setattr(p, key, rec[key])
    return p


def loss_points(records: list[dict[str, Any]]) -> list[tuple[int, float, str]]:
    """``(step, value, series)`` for the training loss and the eval loss."""
    points = []
    for rec in records:
        for key in ("loss", "eval_loss"):
            if isinstance(rec.get(key), (int, float)) and "step" in rec:
                points.append((int(rec["step"]), float(rec[key]), key))
    return points


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def tail(path: str | Path, lines: int = 30, max_bytes: int = 64_000) -> str:
    """The last lines of a log; carriage-return progress bars keep only their last state."""
    path = Path(path)
    if not path.is_file():
        return ""
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - max_bytes))
        data = fh.read().decode("utf-8", errors="replace")
    out = [line.rsplit("\r", 1)[-1] for line in data.replace("\r\n", "\n").split("\n")]
    out = [line for line in out if line.strip()]
    return "\n".join(out[-lines:])


def error_summary(log_text: str) -> str:
    """The lines that say why a job failed: tunekit's ``error:`` lines, or a traceback's last line."""
    lines = log_text.splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    if errors:
        return "\n".join(errors[-5:])
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback"):
            return "\n".join(lines[i:])[-2000:]
    return "\n".join(lines[-3:])


RESULT_FILES = ("eval_results.json", "predict_results.json", "all_results.json")


def read_results(output_dir: str | Path) -> dict[str, Any]:
    """Every metric evaluation and prediction wrote (loss, BLEU, ROUGE, ...), one dict.

    ``eval_results.json`` and ``predict_results.json`` hold one split each; ``all_results.json`` holds
    the metrics of the whole run. A file being written right now (not yet valid JSON) is skipped.
    """
    merged: dict[str, Any] = {}
    for name in RESULT_FILES:
        try:
            data = json.loads((Path(output_dir) / name).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict):
            merged.update(data)
    return merged
