"""The quickstart (``make demo``): its data is reproducible and held out, and a reduced run learns the task."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT, logged_losses

DATA = ROOT / "examples" / "data"
TRAIN_FILES = ["quickstart_alpaca_en", "quickstart_alpaca_zh", "quickstart_sharegpt_en", "quickstart_sharegpt_zh"]


def _quickstart():
    spec = importlib.util.spec_from_file_location("quickstart", ROOT / "examples" / "quickstart.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _numbers(name: str) -> list[str]:
    rows = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    if "conversations" in rows[0]:
        texts = [r["conversations"][0]["value"] for r in rows]
    else:
        texts = ["\n".join(p for p in (r["instruction"], r["input"]) if p) for r in rows]
    return [re.search(r"(\d+)$", t).group(1) for t in texts]


def test_committed_data_is_what_the_script_writes(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_quickstart_data.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(p.name for p in DATA.iterdir())
    for name in written:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name


def test_data_registry_formats_and_held_out_numbers():
    info = json.loads((DATA / "dataset_info.json").read_text())
    assert set(info) == {*TRAIN_FILES, "quickstart_eval"}
    assert info["quickstart_sharegpt_zh"]["formatting"] == "sharegpt"
    train = {n for name in TRAIN_FILES for n in _numbers(name)}
    held_out = _numbers("quickstart_eval")
    assert len(train) == 4000 and len(held_out) == 200
    assert not train & set(held_out)  # evaluation measures generalisation, not memory
    rows = json.loads((DATA / "quickstart_eval.json").read_text(encoding="utf-8"))
    assert all(r["output"] == n[::-1] for r, n in zip(rows, held_out))
    assert any("倒" in r["instruction"] for r in rows) and any("Reverse" in r["instruction"] for r in rows)


def test_load_eval_limit_keeps_both_languages():
    qs = _quickstart()
    pairs = qs.load_eval(limit=10)
    assert len(pairs) == 10
    assert any(re.search(r"[\u4e00-\u9fff]", q) for q, _ in pairs) and any(
        "digits" in q or "backwards" in q for q, _ in pairs
    )


@pytest.mark.slow
def test_quick_run_learns_the_task(tmp_path):
    qs = _quickstart()
    assert qs.main(["--quick", "--output-dir", str(tmp_path), "disable_tqdm=true"]) == 0
    summary = json.loads((tmp_path / "quickstart_results.json").read_text())
    run = tmp_path / "run"
    assert summary["train_steps"] == 120 and summary["held_out"] == 100
    assert summary["accuracy_before"] <= 0.02, summary  # a random model cannot reverse digits
    assert summary["accuracy_after"] >= 0.3, summary  # measured 0.59 at 120 steps
    assert (run / "training_loss.png").stat().st_size > 0 and (run / "model.safetensors").is_file()
    losses = logged_losses(run)
    assert losses[-1] < losses[0] / 4, losses
