"""Continued pretraining: texts packed into full cutoff_len blocks, the reference text files
train, the model reloads."""

from __future__ import annotations

from tests.helpers import base_config, train_rows, write_dataset
from tunekit.config import load_config
from tunekit.flow import run_train


def test_pt_trains_on_wiki_demo_blocks_and_reloads(tiny_qwen, reference_data, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "out"
    results = run_train(
        load_config(
            None,
            base_config(
                tiny_qwen,
                reference_data,
                out,
                stage="pt",
                dataset="wiki_demo",
                finetuning_type="full",
                max_steps=6,
                learning_rate=3e-3,
                max_samples=4,
            ),
        )
    )
    rows = train_rows(out)
    assert sum(r["loss"] for r in rows[-2:]) / 2 < sum(r["loss"] for r in rows[:2]) / 2 - 0.3, rows
    assert results["num_input_tokens_seen"] == 6 * 4 * 64  # full blocks, no padding
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.vocab_size > 0


def test_pt_packing_blocks_and_unpacked_mode(tiny_qwen, tmp_path):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    texts = [{"text": "one two three " * k} for k in range(1, 9)]
    write_dataset(tmp_path, "txt", texts, {"columns": {"prompt": "text"}}, suffix=".jsonl")
    cfg = load_config(None, base_config(tiny_qwen, tmp_path, tmp_path / "o", stage="pt", dataset="txt", cutoff_len=16))
    tok = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tok, "pt")
    doc_end = tok.convert_tokens_to_ids("<|endoftext|>")  # Qwen's document token, not the chat EOS <|im_end|>
    stream = [t for x in tok([d["text"] for d in texts], add_special_tokens=False)["input_ids"] for t in x + [doc_end]]
    blocks = data.train["input_ids"]
    assert [t for b in blocks for t in b] == stream  # nothing lost, the document token between texts
    assert all(len(b) == 16 for b in blocks[:-1]) and 0 < len(blocks[-1]) <= 16
    assert data.train["labels"] == blocks
    assert ".. record" in data.train[1]["_source"] or "record" in data.train[1]["_source"]
    unpacked = prepare_datasets(cfg.model_copy(update={"packing": False}), tok, "pt")
    assert len(unpacked.train) == len(texts) and max(len(x) for x in unpacked.train["input_ids"]) == 16
    assert unpacked.reports[0].truncated == sum(len(tok(d["text"])["input_ids"]) + 1 > 16 for d in texts)


def test_sft_packing_keeps_every_sample_and_its_labels(tiny_qwen, tmp_path):
    from tests.helpers import alpaca_records
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    write_dataset(tmp_path, "toy", alpaca_records(24, seed=2))
    cfg = load_config(None, base_config(tiny_qwen, tmp_path, tmp_path / "o", cutoff_len=512))
    tok = load_tokenizer(cfg)
    plain = prepare_datasets(cfg, tok, "sft").train
    packed = prepare_datasets(cfg.model_copy(update={"packing": True}), tok, "sft").train
    assert len(packed) <= len(plain) / 4 and max(packed["length"]) <= 512
    pieces = sorted(zip(plain["input_ids"], plain["labels"]))
    # every packed row is a concatenation of whole samples, labels unchanged
    seen = []
    for row in packed:
        pos = 0
        for src in row["_source"].split("; "):
            i = int(src.rsplit(" ", 1)[-1])
            n = len(plain[i]["input_ids"])
            assert (
                row["input_ids"][pos : pos + n] == plain[i]["input_ids"]
                and row["labels"][pos : pos + n] == plain[i]["labels"]
            )
            pos += n
            seen.append(i)
        assert pos == len(row["input_ids"])
    assert sorted(seen) == list(range(len(plain))) and len(pieces) == len(seen)
