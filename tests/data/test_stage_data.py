"""Data of the preference and RL stages: reference files, shared prompt + cutoff, dropped pairs, prompts."""

from __future__ import annotations

import pytest

from tests.helpers import base_config, write_dataset
from tests.stage_helpers import PREF_COLUMNS
from tunekit.config import load_config
from tunekit.data.pipeline import prepare_datasets
from tunekit.model.loader import load_tokenizer


def _prepare(model, folder, stage, dataset, **kw):
    cfg = load_config(None, base_config(model, folder, folder / "o", stage=stage, dataset=dataset, **kw))
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, stage), tok


@pytest.mark.parametrize(
    "stage, name, columns",
    [
        ("dpo", "dpo_en_demo", "chosen_input_ids"),
        ("rm", "dpo_zh_demo", "rejected_input_ids"),
        ("kto", "kto_en_demo", "kto_tag"),
        ("pt", "c4_demo", "input_ids"),
        ("pt", "wiki_demo", "input_ids"),
        ("ppo", "alpaca_en_demo", "prompt_text"),
        ("grpo", "dpo_en_demo", "prompt_text"),
    ],
)
def test_reference_files_load_for_their_stage(tiny_qwen, reference_data, stage, name, columns):
    data, _ = _prepare(tiny_qwen, reference_data, stage, name, cutoff_len=256, max_samples=20)
    report = data.reports[0]
    assert report.records == 20 and report.invalid == 0 and report.kept == len(data.train) > 0
    assert columns in data.train.column_names
    if stage == "kto":
        assert set(data.train["kto_tag"]) == {True, False}
    if stage in ("dpo", "rm"):
        for ex in data.train:
            p = ex["_prompt_len"]
            assert ex["chosen_input_ids"][:p] == ex["rejected_input_ids"][:p]
            assert max(len(ex["chosen_input_ids"]), len(ex["rejected_input_ids"])) <= 256


def test_pairs_share_prompt_and_cutoff_and_bad_pairs_are_dropped(tiny_qwen, tmp_path):
    long_answer = " ".join(f"word{i}" for i in range(60))
    records = [
        {"instruction": "Say it", "input": "", "chosen": "yes indeed", "rejected": "no"},  # kept whole
        {"instruction": "Say it", "input": "", "chosen": "same", "rejected": "same"},  # identical
        {"instruction": "Say it", "input": "", "chosen": "", "rejected": "no"},  # empty
        {
            "instruction": "Say it",
            "input": "",
            "chosen": long_answer + " A",
            "rejected": long_answer + " B",
        },  # identical after the cut
        {
            "instruction": "long " * 80,
            "input": "",
            "chosen": "short",
            "rejected": "much longer answer here",
        },  # prompt cut
    ]
    write_dataset(tmp_path, "p", records, {"ranking": True, "columns": PREF_COLUMNS})
    data, tok = _prepare(
        tiny_qwen, tmp_path, "dpo", "p", cutoff_len=48, bad_records="error", default_system="Be brief."
    )
    report = data.reports[0]
    assert report.records == 5 and report.dropped == 3 and report.kept == 2
    assert [s.rsplit(" ", 1)[-1] for s in report.dropped_sources] == ["1", "2", "3"]
    first, cut = data.train[0], data.train[1]
    p = first["_prompt_len"]
    assert tok.decode(first["chosen_input_ids"][p:]) == "yes indeed<|im_end|>"
    assert tok.decode(first["rejected_input_ids"][p:]) == "no<|im_end|>"
    assert first["chosen_labels"][:p] == [-100] * p and first["chosen_labels"][p:] == first["chosen_input_ids"][p:]
    q = cut["_prompt_len"]
    assert cut["chosen_input_ids"][:q] == cut["rejected_input_ids"][:q]
    assert (
        len(cut["rejected_input_ids"]) == 48
        and tok.decode(cut["rejected_input_ids"][q:]) == "much longer answer here<|im_end|>"
    )
    assert tok.decode(cut["chosen_input_ids"][:q]).endswith("<|im_start|>assistant\n")  # the prompt's end is kept
    assert report.truncated == 1


def test_sharegpt_ranking_with_history(tiny_qwen, tmp_path):
    rec = {
        "conversations": [
            {"from": "human", "value": "hi"},
            {"from": "gpt", "value": "hello"},
            {"from": "human", "value": "pick"},
        ],
        "chosen": {"from": "gpt", "value": "A"},
        "rejected": {"from": "gpt", "value": "B"},
    }
    write_dataset(
        tmp_path,
        "sg",
        [rec],
        {
            "ranking": True,
            "formatting": "sharegpt",
            "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected"},
        },
    )
    data, tok = _prepare(tiny_qwen, tmp_path, "rm", "sg", cutoff_len=256)
    ex = data.train[0]
    text = tok.decode(ex["chosen_input_ids"])
    assert "hello<|im_end|>" in text and text.endswith("pick<|im_end|>\n<|im_start|>assistant\nA<|im_end|>")
    assert tok.decode(ex["rejected_input_ids"]).endswith("assistant\nB<|im_end|>")


def test_prompt_only_data_keeps_the_end_of_long_prompts(tiny_qwen, tmp_path):
    write_dataset(
        tmp_path,
        "q",
        [
            {"instruction": "long " * 100 + "end?", "input": "", "output": "42"},
            {"instruction": "short?", "input": "", "output": "7"},
        ],
    )
    data, tok = _prepare(tiny_qwen, tmp_path, "grpo", "q", cutoff_len=32, default_system="Be brief.")
    assert data.reports[0].truncated == 1
    long, short = data.train[0], data.train[1]
    assert len(long["input_ids"]) == 32 and tok.decode(long["input_ids"]).endswith(
        "end?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert short["reference"] == "7" and short["prompt_text"].endswith("short?<|im_end|>\n<|im_start|>assistant\n")
    assert tok(short["prompt_text"], add_special_tokens=False)["input_ids"] == short["input_ids"]
