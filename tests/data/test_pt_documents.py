"""Pretraining documents end with the vocabulary's document token (<|end_of_text|> for Llama 3, <|endoftext|>
for Qwen), not the chat end-of-turn that the instruct tokenizer's EOS is, and ``stage: pt`` needs no template."""

from __future__ import annotations

import json
import logging

import pytest

from tests.helpers import base_config, write_dataset
from tunekit.config import load_config
from tunekit.data.processors import pt as pt_processor

TEXTS = [{"text": "one two"}, {"text": "three"}]
# exact ids of the tiny family tokenizers (tunekit.tiny, seed 0): BOS <|begin_of_text|> = 0,
# <|end_of_text|> = 1 (the chat EOS <|eot_id|> is 4); Qwen: <|endoftext|> = 0 (the chat EOS <|im_end|> is 2)
LLAMA3 = [[0, 1416, 785, 1], [0, 454, 277, 76, 1]]
QWEN = [[1413, 782, 0], [451, 274, 73, 0]]


def _prepare(model, tmp_path, template, **overrides):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    write_dataset(tmp_path / "data", "txt", TEXTS, {"columns": {"prompt": "text"}}, suffix=".jsonl")
    opts = {"template": template, "cutoff_len": 16, "packing": False, **overrides}
    cfg = load_config(None, base_config(model, tmp_path / "data", tmp_path / "out", stage="pt", dataset="txt", **opts))
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, "pt"), tok


@pytest.mark.parametrize("template", ["llama3", None, "default"])
def test_llama3_documents_end_with_end_of_text(tiny_llama, tmp_path, template):
    data, tok = _prepare(tiny_llama, tmp_path, template)
    assert data.train["input_ids"] == LLAMA3 and data.train["labels"] == LLAMA3
    assert tok.convert_ids_to_tokens(LLAMA3[0]) == ["<|begin_of_text|>", "one", "Ġtwo", "<|end_of_text|>"]
    assert tok.eos_token == "<|eot_id|>" and tok.eos_token_id == 4  # the chat end-of-turn stays the EOS for chat


@pytest.mark.parametrize("template", ["qwen", "qwen3", None, "default"])
def test_qwen_documents_end_with_endoftext(tiny_qwen, tmp_path, template):
    data, tok = _prepare(tiny_qwen, tmp_path, template)
    assert data.train["input_ids"] == QWEN and data.train["labels"] == QWEN
    assert tok.convert_ids_to_tokens(QWEN[0])[-1] == "<|endoftext|>" and tok.eos_token == "<|im_end|>"


def test_packed_blocks_join_documents_with_the_document_token(tiny_llama, tmp_path):
    data, _ = _prepare(tiny_llama, tmp_path, "llama3", packing=True, cutoff_len=6)
    assert data.train["input_ids"] == [[0, 1416, 785, 1, 0, 454], [277, 76, 1]]


def test_which_token_and_why(tiny_llama, tiny_qwen):
    from transformers import AutoTokenizer

    from tunekit.data.templates import get_template

    llama = AutoTokenizer.from_pretrained(tiny_llama)
    qwen = AutoTokenizer.from_pretrained(tiny_qwen)
    assert pt_processor.document_end(llama, get_template("llama3", llama)) == (
        1,
        "<|end_of_text|>",
        "the document token of template 'llama3'",
    )
    assert pt_processor.document_end(llama) == (
        1,
        "<|end_of_text|>",
        "no chat template: the tokenizer's EOS <|eot_id|> is the llama3 chat end-of-turn, so "
        "documents end with that family's document token",
    )
    # a template whose document token the vocabulary lacks: said, and the tokenizer's own is used
    assert pt_processor.document_end(qwen, get_template("llama3", qwen)) == (
        0,
        "<|endoftext|>",
        "template 'llama3' ends documents with <|end_of_text|>, which this tokenizer does not have: "
        "the tokenizer's EOS <|im_end|> is the qwen chat end-of-turn, so documents end with that family's document "
        "token",
    )
    # a base tokenizer (EOS is the document token already) keeps its EOS
    llama.eos_token = "<|end_of_text|>"
    assert pt_processor.document_end(llama) == (1, "<|end_of_text|>", "no chat template: the tokenizer's EOS")


def test_no_template_says_which_token(tiny_llama, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(pt_processor, "_ANNOUNCED", set())
    with caplog.at_level(logging.INFO, logger="tunekit.data.processors.pt"):
        _prepare(tiny_llama, tmp_path, None)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.endswith(".pt")]
    assert warnings == [
        "stage pt: documents end with <|end_of_text|> (no chat template: the tokenizer's EOS <|eot_id|> "
        "is the llama3 chat end-of-turn, so documents end with that family's document token)."
    ]


def test_pt_trains_without_a_template(tiny_llama, reference_data, tmp_path):
    """LLaMA-Factory's pretraining example (c4_demo, no template) runs as it is."""
    from tunekit.flow import run_train

    out = tmp_path / "out"
    cfg = base_config(
        tiny_llama,
        reference_data,
        out,
        stage="pt",
        dataset="c4_demo",
        max_samples=4,
        max_steps=2,
        per_device_train_batch_size=2,
    )
    del cfg["template"]
    results = run_train(load_config(None, cfg))
    assert results["num_input_tokens_seen"] == 2 * 2 * 64  # full blocks
    (report,) = json.loads((out / "preprocessing_report.json").read_text(encoding="utf-8"))
    assert report["records"] == 4 and report["invalid"] == 0
    assert (out / "model.safetensors").is_file() or (out / "adapter_model.safetensors").is_file()
