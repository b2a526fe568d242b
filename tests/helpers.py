"""Small builders used by several test files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]  # the repository
REFERENCE_DATA = ROOT.parent / "shared" / "reference-data" / "llamafactory"  # LLaMA-Factory's data/ folder
FIXTURES = Path(__file__).resolve().parent / "fixtures"
CHAT_TEMPLATES = FIXTURES / "chat_templates"  # the families' official chat templates
LLAMAFACTORY_INPUTS = FIXTURES / "llamafactory"  # LLaMA-Factory's own configs and command lines, as written there
TUTORIAL_FLAGS = (LLAMAFACTORY_INPUTS / "tutorial_flags.txt").read_text(encoding="utf-8").split()


def write_dataset(
    folder: Path, name: str, records: list[Any] | str, entry: dict | None = None, suffix: str = ".json"
) -> Path:
    """Write ``records`` to ``folder/name.json`` and register it in ``folder/dataset_info.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}{suffix}"
    if isinstance(records, str):
        path.write_text(records, encoding="utf-8")
    elif suffix == ".jsonl":
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    else:
        path.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    info_path = folder / "dataset_info.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    info[name] = {"file_name": path.name, **(entry or {})}
    info_path.write_text(json.dumps(info, indent=1), encoding="utf-8")
    return path


def alpaca_records(n: int, seed: int = 0) -> list[dict]:
    """Deterministic arithmetic questions in alpaca form."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        out.append({"instruction": f"What is {a} plus {b}?", "input": "", "output": f"{a + b}"})
    return out


def base_config(model: Path, data_dir: Path, output_dir: Path, **overrides) -> dict:
    cfg = dict(
        model_name_or_path=str(model),
        template="qwen",
        dataset="toy",
        dataset_dir=str(data_dir),
        output_dir=str(output_dir),
        cutoff_len=64,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        learning_rate=1e-3,
        max_steps=4,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    cfg.update(overrides)
    return cfg


def serve_in_thread(app):
    """Run an ASGI ``app`` with uvicorn on a free loopback port in a thread: a generator of its URL (for fixtures)."""
    import threading
    import time

    import uvicorn

    from tunekit.train.engines.launcher import free_port

    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


def content_parts(messages, images):
    """LLaMA-Factory messages with <image> placeholders -> typed content parts (images in order)."""
    it, out = iter(images), []
    for m in messages:
        parts = []
        for k, piece in enumerate(m["content"].split("<image>")):
            if k:
                parts.append({"type": "image", "image": next(it)})
            if piece:
                parts.append({"type": "text", "text": piece})
        out.append({"role": m["role"], "content": parts})
    return out


def padded_and_padding_free_weights(model_dir: Path, options: dict, root: Path) -> tuple[float, float]:
    """Train ``options`` through ``tunekit train`` twice, padded and ``padding_free``; return (how far the padded run
    moved any weight from ``model_dir``'s, the largest difference between the two runs' weights)."""
    from safetensors.torch import load_file

    from tunekit.config import load_config
    from tunekit.flow import run_train

    weights = {}
    for free in (False, True):
        out = root / f"out-{free}"
        run_train(
            load_config(
                None, {**options, "model_name_or_path": str(model_dir), "output_dir": str(out), "padding_free": free}
            )
        )
        weights[free] = load_file(str(out / "model.safetensors"))
    base = load_file(str(Path(model_dir) / "model.safetensors"))
    moved = max((weights[False][k].double() - base[k].double()).abs().max().item() for k in base)
    return moved, max((weights[True][k] - weights[False][k]).abs().max().item() for k in base)


def log_rows(out: Path) -> list[dict]:
    """Every line of ``out/trainer_log.jsonl`` (rank 0 writes it alone), read as strict JSON: a non-finite value
    must be logged as ``null``, never as ``NaN`` or ``Infinity``."""

    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return [json.loads(line, parse_constant=refuse) for line in (out / "trainer_log.jsonl").read_text().splitlines()]


def train_rows(out: Path) -> list[dict]:
    """The training lines of ``out/trainer_log.jsonl``: those with a ``loss``."""
    return [row for row in log_rows(out) if "loss" in row]


def logged_losses(out: Path) -> list[float]:
    """The loss of every logged training step of the run in ``out``."""
    return [row["loss"] for row in train_rows(out)]


def padded_lm_batch(vocab: int):
    """``(ids, attention_mask, labels)``: two seeded rows of 12 tokens, the second right-padded from position 9, with
    prompt positions (4 and 6) and the padding labelled -100: a batch whose loss depends on the mask being read."""
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab, (2, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0  # right padding
    labels = ids.clone()
    labels[0, :4] = -100  # prompt
    labels[1, :6] = -100
    labels[1, 9:] = -100
    return ids, mask, labels


SHAREGPT_ROLE = {"system": "system", "user": "human", "assistant": "gpt"}


def prepare_jsonl(model: Path, tmp_path: Path, records: list[dict], stage: str = "sft", name: str = "data", **options):
    """``records`` written as a jsonl file and named by its path (as LLaMA-Factory v1 datasets are), prepared by
    tunekit's pipeline for ``stage``: the prepared data and the tokenizer."""
    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    folder = tmp_path / name
    path = write_dataset(folder, name, records, suffix=".jsonl")
    values = {
        "model_name_or_path": str(model),
        "dataset": str(path),
        "dataset_dir": str(folder),
        "output_dir": str(tmp_path / "out"),
        "cutoff_len": 1024,
        "stage": stage,
    }
    cfg = load_config(None, values | options)
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, stage), tok


def sft_row(folder: Path, tmp_path: Path, template: str, messages: list[dict], **options) -> tuple[dict, Any]:
    """One conversation (``role`` / ``content`` messages) written as a sharegpt dataset and prepared by tunekit's
    sft pipeline with ``template``: its row (``input_ids``, ``labels``) and the tokenizer, to pin against the
    family's official chat template (:func:`official_render`)."""
    from tunekit.config import load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    record = {"conversations": [{"from": SHAREGPT_ROLE[m["role"]], "value": m["content"]} for m in messages]}
    write_dataset(tmp_path / "data", "toy", [record], {"formatting": "sharegpt"})
    values = {
        "model_name_or_path": str(folder),
        "template": template,
        "dataset": "toy",
        "dataset_dir": str(tmp_path / "data"),
        "output_dir": str(tmp_path / "out"),
        "cutoff_len": 1024,
    }
    cfg = load_config(None, values | options)
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, "sft").train[0], tok


def official_render(tok, messages: list[dict], gen: bool = False, text: bool = False):
    """The tokenizer's own chat template applied by transformers: token ids, or the text."""
    out = tok.apply_chat_template(messages, add_generation_prompt=gen, tokenize=not text)
    return out if text else out["input_ids"]


def demo_workspace(root: Path) -> Path:
    """A board's workspace: ``data/`` with a dataset_info.json naming one alpaca record (``demo``)."""
    data = root / "data"
    data.mkdir()
    (data / "dataset_info.json").write_text(json.dumps({"demo": {"file_name": "demo.json"}}))
    (data / "demo.json").write_text(json.dumps([{"instruction": "hi", "input": "", "output": "hello"}]))
    return root


HARMONY_DAY = "2025-08-05"


def freeze_harmony_day(monkeypatch) -> None:
    """gpt-oss's date line on one day for both renderers: the official template's ``strftime_now`` (it reads
    transformers' ``datetime``) and tunekit's ``harmony.today``."""
    import datetime

    import transformers.utils.chat_template_utils as chat_utils

    from tunekit.data.templates import harmony

    day = datetime.datetime.fromisoformat(HARMONY_DAY)

    class Fixed(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return day

    monkeypatch.setattr(chat_utils, "datetime", Fixed)
    monkeypatch.setattr(harmony, "today", lambda: HARMONY_DAY)


def failed_job(argv: list[str], tmp_path: Path, monkeypatch, capsys) -> tuple[str, Any, str]:
    """``tunekit ARGV`` run as the board runs a job (its keyed error written to ``$TUNEKIT_ERROR_FILE``), expected to
    fail with exit 2: its last stderr line, the error file's JSON and the board's Chinese line for it."""
    from tunekit.cli.verbs import dispatch
    from tunekit.env import ERROR_FILE_ENV
    from tunekit.webui.problems_zh import say_job_error

    error_file = tmp_path / "job.error.json"
    monkeypatch.setenv(ERROR_FILE_ENV, str(error_file))
    assert dispatch(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    return line, json.loads(error_file.read_text(encoding="utf-8")), say_job_error(error_file, "zh")
