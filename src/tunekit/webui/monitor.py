"""Read a run's progress from its files: ``trainer_log.jsonl``, the job log, the results files; the live charts'
data and the progress bar drawn from them.

Reading files (not the trainer's memory) is what lets a refreshed page, or a new board, show a run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .i18n import t

TRAINER_LOG = "trainer_log.jsonl"
LOSS_SERIES = ("loss", "eval_loss")  # the loss chart's lines, in legend order


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


def final_progress(prog: Progress, results: dict[str, Any], state: str) -> Progress:
    """A training run that ended: its last step, epoch and run time from ``train_results.json``.

    The log has a line only every ``logging_steps`` steps, so a 12-step run logging every 5 ends at "step 10"
    in it; the results file the run writes at its end has the step it reached (``total_steps``)."""
    steps = results.get("total_steps")
    if not isinstance(steps, int) or isinstance(steps, bool):
        return prog
    p = replace(prog, step=max(prog.step, steps), eta_s=0.0)
    if state == "finished" or not p.total:
        p.total = max(p.total, p.step)
    for key, attr in (("epoch", "epoch"), ("train_runtime", "elapsed_s")):
        if _number(results.get(key)):
            setattr(p, attr, float(results[key]))
    return p


def train_results(output_dir: str | Path, since: float = 0.0) -> dict[str, Any]:
    """``train_results.json`` when it was written at or after ``since`` (a file left by an earlier run in the same
    folder is not this run's), else ``{}``."""
    path = Path(output_dir) / "train_results.json"
    try:
        if path.stat().st_mtime < since - 1.0:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def loss_points(records: list[dict[str, Any]]) -> list[tuple[int, float, str]]:
    """``(step, value, series)`` for the training loss and the eval loss."""
    points = []
    for rec in records:
        for key in LOSS_SERIES:
            if _number(rec.get(key)) and "step" in rec:
                points.append((int(rec["step"]), float(rec[key]), key))
    return points


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def loss_frame(records: list[dict[str, Any]]):
    """The loss chart's data: numeric ``step`` and ``value`` columns and a ``series`` column (loss, eval_loss), in
    step order. Numeric dtypes even with no rows: the chart fixes its axis types from the first data it gets, and
    an empty frame of text columns would make both axes categorical for the whole run."""
    import pandas as pd  # only the running board draws charts

    rank = {key: i for i, key in enumerate(LOSS_SERIES)}
    rows = sorted(loss_points(records), key=lambda p: (p[0], rank[p[2]]))
    frame = pd.DataFrame(rows, columns=["step", "value", "series"])
    return frame.astype({"step": "int64", "value": "float64", "series": "object"})


def lr_frame(records: list[dict[str, Any]]):
    """The learning-rate chart's data: numeric ``step`` and ``learning_rate`` columns, in step order."""
    import pandas as pd

    rows = sorted((int(r["step"]), float(r["lr"])) for r in records if "step" in r and _number(r.get("lr")))
    return pd.DataFrame(rows, columns=["step", "learning_rate"]).astype({"step": "int64", "learning_rate": "float64"})


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


def failed_status(returncode: int | None, log_text: str, lang: str = "en", said: str = "") -> str:
    """What a failed job's status line adds: its exit code and, below, why it failed (:func:`error_summary` of its
    log) in a code block.

    The reason is the log's own text, in the language the job wrote it (English: tunekit's ``error:`` lines, a
    traceback), never translated; in Chinese it gets a lead-in (``任务失败：``) and the exit code is said in Chinese,
    so the line reads as the board's own words around the job's. ``said``: the job's keyed error said in the page's
    language (``problems_zh.say_job_error``), after the lead-in."""
    lead = t("job_failed_reason", lang)
    return (
        f" · {t('job_exit', lang).format(code=returncode)}\n\n"
        + (f"{lead}{said}\n\n" if lead else "")
        + f"```\n{error_summary(log_text)}\n```"
    )


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


def progress_html(prog, state: str = "idle", lang: str = "en") -> str:
    """The progress bar: step / total, epoch, elapsed, ETA (0 once the run finished), the last losses."""
    if prog is None:
        return (
            '<div id="tk-progress-bar" class="tk-progress" data-state="idle">'
            '<div class="tk-bar" style="width:0%"></div><span>-</span></div>'
        )
    pct = 100.0 if state == "finished" and prog.total and prog.step >= prog.total else 100.0 * prog.fraction
    parts = [f"{t('prog_step', lang)} {prog.step}/{prog.total or '?'}"]
    if prog.epoch is not None:
        parts.append(f"{t('prog_epoch', lang)} {prog.epoch:.2f}")
    if prog.elapsed_s is not None:
        parts.append(f"{t('prog_elapsed', lang)} {format_seconds(prog.elapsed_s)}")
    if state in ("running", "finished"):
        parts.append(f"{t('prog_eta', lang)} {format_seconds(prog.eta_s if state == 'running' else 0)}")
    if prog.loss is not None:
        parts.append(f"{t('prog_loss', lang)} {prog.loss:.4f}")
    if prog.eval_loss is not None:
        parts.append(f"{t('prog_eval_loss', lang)} {prog.eval_loss:.4f}")
    return (
        f'<div id="tk-progress-bar" class="tk-progress" data-state="{state}" data-step="{prog.step}" '
        f'data-total="{prog.total}"><div class="tk-bar" style="width:{pct:.1f}%"></div>'
        f"<span>{' · '.join(parts)}</span></div>"
    )
