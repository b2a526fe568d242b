"""`tunekit data stats --json` for every stage: LLaMA-Factory's demo data per stage, and exact counts on
small handmade datasets (lengths from the literal rendered strings; pt blocks equal what training builds)."""

from __future__ import annotations

import json
import math

import pytest

from tests.helpers import write_dataset
from tunekit.cli.main import main
from tunekit.config import load_config
from tunekit.data.pipeline import prepare_datasets
from tunekit.model.loader import load_tokenizer

QWEN_FIRST = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\n{u}<|im_end|>\n<|im_start|>assistant\n"
)
QWEN_REPLY = "{a}<|im_end|>"


def _stats(capsys, model, data_dir, dataset, stage, **opts):
    args = [
        "data",
        "stats",
        f"model_name_or_path={model}",
        "template=qwen",
        f"dataset={dataset}",
        f"dataset_dir={data_dir}",
        f"stage={stage}",
        *[f"{k}={v}" for k, v in opts.items()],
        "--json",
    ]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "stage, dataset, parts",
    [
        ("sft", "alpaca_en_demo", ["prompt", "response"]),
        ("dpo", "dpo_en_demo", ["prompt", "chosen", "rejected", "longest"]),
        ("rm", "dpo_en_demo", ["prompt", "chosen", "rejected", "longest"]),
        ("kto", "kto_en_demo", ["prompt", "response"]),
        ("pt", "c4_demo,wiki_demo", ["document"]),
        ("grpo", "alpaca_en_demo", ["prompt"]),
    ],
)
def test_every_stage_on_the_reference_data(tiny_qwen, reference_data, capsys, stage, dataset, parts):
    s = _stats(capsys, tiny_qwen, reference_data, dataset, stage, cutoff_len=512, max_samples=20)
    assert s["stage"] == stage and s["parts"] == parts
    assert set(s["datasets"]) == set(dataset.split(","))
    o = s["overall"]
    assert o["count"] == 20 * len(dataset.split(","))
    for part in parts:
        assert o[part]["count"] == o["count"] and o[part]["max"] <= o["max"]
    if stage in ("dpo", "rm"):  # the longer answer decides the total
        assert o["longest"]["max"] == max(o["chosen"]["max"], o["rejected"]["max"])
        assert o["max"] <= o["prompt"]["max"] + o["longest"]["max"]
    if stage == "kto":
        assert o["labels"]["desirable"] + o["labels"]["undesirable"] == 20 and o["labels"]["undesirable"] > 0
    if stage == "pt":
        b = o["blocks"]
        assert b["packing"] and b["tokens_kept"] == o["total_tokens"] and b["tokens_dropped"] == 0
        assert (
            b["blocks"]
            == b["full_blocks"] + b["tail_blocks"]
            == sum(d["blocks"]["blocks"] for d in s["datasets"].values())
        )
        assert b["full_blocks"] * 512 + b["tail_tokens"] == o["total_tokens"]


def test_pairs_exact_lengths(tiny_qwen, tmp_path, capsys):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen)
    ids = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    pairs = [
        ("Pick one.", "A", "B is the better choice here"),
        ("Which is larger, 3 or 5?", "5 is larger than 3.", "3"),
    ]
    records = [{"instruction": u, "input": "", "chosen": c, "rejected": r} for u, c, r in pairs]
    write_dataset(
        tmp_path,
        "p",
        records,
        {
            "ranking": True,
            "columns": {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"},
        },
    )
    s = _stats(capsys, tiny_qwen, tmp_path, "p", "dpo", cutoff_len=24)
    prompt = [len(ids(QWEN_FIRST.format(u=u))) for u, _, _ in pairs]
    chosen = [len(ids(QWEN_REPLY.format(a=c))) for _, c, _ in pairs]
    rejected = [len(ids(QWEN_REPLY.format(a=r))) for _, _, r in pairs]
    totals = [p + max(c, r) for p, c, r in zip(prompt, chosen, rejected)]
    o = s["overall"]
    assert (o["prompt"]["min"], o["prompt"]["max"]) == (min(prompt), max(prompt))
    assert (o["chosen"]["min"], o["chosen"]["max"], o["rejected"]["min"], o["rejected"]["max"]) == (
        min(chosen),
        max(chosen),
        min(rejected),
        max(rejected),
    )
    assert (o["longest"]["min"], o["longest"]["max"]) == (
        min(map(max, chosen, rejected)),
        max(map(max, chosen, rejected)),
    )
    assert (o["min"], o["max"], o["total_tokens"]) == (min(totals), max(totals), sum(totals))
    assert o["trainable_tokens"] == sum(chosen) + sum(rejected)
    assert o["truncation"]["samples_truncated"] == sum(t > 24 for t in totals) == 2  # both pairs exceed 24 tokens


def test_kto_exact_lengths_and_label_balance(tiny_qwen, tmp_path, capsys):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen)
    ids = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    rows = [("Hi", "Hello there!", True), ("2+2?", "Five.", False), ("Name a colour.", "Blue.", True)]
    records = [
        {"messages": [{"role": "user", "content": u}, {"role": "assistant", "content": a}], "label": t}
        for u, a, t in rows
    ]
    write_dataset(
        tmp_path,
        "k",
        records,
        {
            "formatting": "sharegpt",
            "columns": {"messages": "messages", "kto_tag": "label"},
            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
        },
    )
    s = _stats(capsys, tiny_qwen, tmp_path, "k", "kto")
    prompt = [len(ids(QWEN_FIRST.format(u=u))) for u, _, _ in rows]
    response = [len(ids(QWEN_REPLY.format(a=a))) for _, a, _ in rows]
    o = s["overall"]
    assert o["labels"] == {"desirable": 2, "undesirable": 1, "desirable_share": round(2 / 3, 6)}
    assert (o["prompt"]["min"], o["prompt"]["max"], o["response"]["min"], o["response"]["max"]) == (
        min(prompt),
        max(prompt),
        min(response),
        max(response),
    )
    assert o["total_tokens"] == sum(prompt) + sum(response) and o["trainable_tokens"] == sum(response)


@pytest.mark.parametrize("packing", [True, False])
def test_pt_blocks_equal_what_training_builds(tiny_qwen, tmp_path, capsys, packing):
    docs = [
        "one two three four five six seven",
        "a b",
        "The quick brown fox jumps over the lazy dog again and again.",
        "short",
        "x y z w v u t s r q p o n m",
    ]
    write_dataset(tmp_path, "docs", [{"text": d} for d in docs], {"columns": {"prompt": "text"}})
    opts = dict(cutoff_len=8, preprocessing_batch_size=2, packing=str(packing).lower())
    s = _stats(capsys, tiny_qwen, tmp_path, "docs", "pt", **opts)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen)
    lengths = [len(tok(d, add_special_tokens=False)["input_ids"]) + 1 for d in docs]  # + the document end (no BOS)
    o = s["overall"]
    assert (o["document"]["min"], o["document"]["max"], o["total_tokens"]) == (
        min(lengths),
        max(lengths),
        sum(lengths),
    )
    b = o["blocks"]
    if packing:  # preprocessing batches of 2 documents, each cut into 8-token blocks, its tail kept
        sums = [sum(lengths[i : i + 2]) for i in range(0, 5, 2)]
        assert b == {
            "packing": True,
            "block_len": 8,
            "blocks": sum(math.ceil(t / 8) for t in sums),
            "full_blocks": sum(t // 8 for t in sums),
            "tail_blocks": sum(1 for t in sums if t % 8),
            "tail_tokens": sum(t % 8 for t in sums),
            "tokens_kept": sum(lengths),
            "tokens_dropped": 0,
        }
    else:
        dropped = sum(max(0, n - 8) for n in lengths)
        assert b == {
            "packing": False,
            "block_len": 8,
            "blocks": 5,
            "documents_truncated": sum(n > 8 for n in lengths),
            "tokens_kept": sum(lengths) - dropped,
            "tokens_dropped": dropped,
        }
    # the same numbers from the real pt pipeline
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(tiny_qwen),
            "template": "qwen",
            "dataset": "docs",
            "dataset_dir": str(tmp_path),
            "output_dir": str(tmp_path / "o"),
            "stage": "pt",
            "cutoff_len": 8,
            "preprocessing_batch_size": 2,
            "packing": packing,
        },
    )
    built = prepare_datasets(cfg, load_tokenizer(cfg), "pt").train
    assert len(built) == b["blocks"] and sum(built["length"]) == b["tokens_kept"]
    if packing:
        assert sum(1 for n in built["length"] if n < 8) == b["tail_blocks"]
