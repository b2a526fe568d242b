"""Tokenization, label masks and cutoff of SFT samples: exact ids against the literal rendered string."""

from __future__ import annotations

import pytest

from tests.helpers import alpaca_records, write_dataset
from tunekit.config import load_config
from tunekit.data.pipeline import prepare_datasets
from tunekit.data.processors.cutoff import fit_turns
from tunekit.errors import ConfigError, DataError

IGNORE = -100
CONVO = [
    {
        "conversations": [
            {"from": "system", "value": "Be terse."},
            {"from": "human", "value": "What is 2 plus 2?"},
            {"from": "gpt", "value": "4"},
            {"from": "human", "value": "And 3 plus 3?"},
            {"from": "gpt", "value": "It is 6."},
        ]
    }
]

# The exact strings each model family's own chat template produces for CONVO (turn boundaries marked by |).
LITERAL = {
    "qwen": [
        "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nWhat is 2 plus 2?<|im_end|>\n"
        "<|im_start|>assistant\n",
        "4<|im_end|>",
        "\n<|im_start|>user\nAnd 3 plus 3?<|im_end|>\n<|im_start|>assistant\n",
        "It is 6.<|im_end|>",
    ],
    "llama3": [
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Be terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "What is 2 plus 2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "4<|eot_id|>",
        "<|start_header_id|>user<|end_header_id|>\n\n"
        "And 3 plus 3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "It is 6.<|eot_id|>",
    ],
    "default": [
        "System: Be terse.{eos}\nHuman: What is 2 plus 2?{eos}\nAssistant:",
        "4{eos}",
        "\nHuman: And 3 plus 3?{eos}\nAssistant:",
        "It is 6.{eos}",
    ],
}


def _prepare(model, tmp_path, records, write=True, **opts):
    from tunekit.model.loader import load_tokenizer

    if write:
        write_dataset(
            tmp_path / "data", "toy", records, {"formatting": "sharegpt"} if "conversations" in records[0] else None
        )
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(model),
            "dataset": "toy",
            "dataset_dir": str(tmp_path / "data"),
            "output_dir": str(tmp_path / "out"),
            "cutoff_len": 1024,
            **opts,
        },
    )
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, "sft"), tok


def _expected(tok, pieces, trained):
    ids, labels = [], []
    for i, text in enumerate(pieces):
        piece = tok(text, add_special_tokens=False)["input_ids"]
        ids += piece
        labels += piece if trained(i) else [IGNORE] * len(piece)
    return ids, labels


@pytest.mark.parametrize(
    "template, model_fixture", [("qwen", "tiny_qwen"), ("llama3", "tiny_llama"), ("default", "tiny_qwen")]
)
@pytest.mark.parametrize("variant", ["default", "train_on_prompt", "mask_history"])
def test_exact_ids_and_labels(request, tmp_path, template, model_fixture, variant):
    model = request.getfixturevalue(model_fixture)
    opts = {"template": template}
    if variant != "default":
        opts[variant] = True
    data, tok = _prepare(model, tmp_path, CONVO, **opts)
    row = data.train[0]
    pieces = [p.replace("{eos}", tok.eos_token) for p in LITERAL[template]]
    trained = {"default": lambda i: i % 2 == 1, "train_on_prompt": lambda i: True, "mask_history": lambda i: i == 3}[
        variant
    ]
    ids, labels = _expected(tok, pieces, trained)
    assert row["input_ids"] == ids
    assert row["labels"] == labels
    # the whole conversation tokenized in one go gives the same ids (no drift at piece boundaries)
    assert tok("".join(pieces), add_special_tokens=False)["input_ids"] == ids


def test_special_tokens_are_single_ids(tiny_qwen, tmp_path):
    data, tok = _prepare(tiny_qwen, tmp_path, CONVO, template="qwen")
    ids = data.train[0]["input_ids"]
    im_start, im_end = tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    assert ids[0] == im_start and ids.count(im_start) == 5 and ids.count(im_end) == 5
    labels = data.train[0]["labels"]
    assert labels[-1] == im_end  # the end-of-turn token is trained, so the model learns to stop


def test_jinja_mode_masks_exactly_the_assistant_spans(tiny_qwen, tmp_path):
    data_j, tok = _prepare(tiny_qwen, tmp_path / "j", CONVO, template="jinja")
    row = data_j.train[0]
    rendered = tok.apply_chat_template(
        [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "What is 2 plus 2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "And 3 plus 3?"},
            {"role": "assistant", "content": "It is 6."},
        ],
        tokenize=False,
    )
    assert tok.decode(row["input_ids"]) == rendered.rstrip("\n")
    trained = tok.decode([t for t in row["labels"] if t != IGNORE])
    assert trained == "4<|im_end|>It is 6.<|im_end|>"


def test_cutoff_keeps_answer_and_reports(tiny_qwen, tmp_path):
    long_answer = " ".join(["word"] * 300)
    records = [
        {"instruction": "Say word many times.", "output": long_answer},
        {"instruction": "Q " * 200, "output": "short"},
    ] + alpaca_records(3)
    data, tok = _prepare(tiny_qwen, tmp_path, records, template="qwen", cutoff_len=96)
    (report,) = data.reports
    assert (report.records, report.truncated, report.dropped, report.kept) == (5, 2, 0, 5)
    assert report.truncated_sources == [
        f"{tmp_path / 'data' / 'toy.json'}, record 0",
        f"{tmp_path / 'data' / 'toy.json'}, record 1",
    ]
    first, second = data.train[0], data.train[1]
    assert len(first["input_ids"]) == 96 and len(second["input_ids"]) == 96
    # long prompt + short answer: the whole answer survives and the prompt keeps its tail (the assistant header)
    answer = tok("short<|im_end|>", add_special_tokens=False)["input_ids"]
    assert [t for t in second["labels"] if t != IGNORE] == answer
    header = tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert second["input_ids"][-len(answer) - len(header) : -len(answer)] == header
    assert sum(t != IGNORE for t in first["labels"]) >= 48


def test_fit_turns_policy():
    turns = [([1] * 10, [2] * 10), ([3] * 10, [4] * 10), ([5] * 10, [6] * 10)]
    kept, cut = fit_turns(turns, 45)
    assert [i for i, _ in kept] == [0, 1] and cut  # third turn dropped whole, history never mangled
    kept, cut = fit_turns(turns, 45, last_first=True)
    assert [i for i, _ in kept] == [1, 2] and cut
    kept, cut = fit_turns([([1] * 100, [2] * 100)], 10)
    ((_, (p, r)),) = kept
    assert (len(p), len(r)) == (5, 5) and cut
    kept, _ = fit_turns([([1] * 100, [2] * 3)], 10)
    assert [len(x) for x in kept[0][1]] == [7, 3]  # all of a short answer fits
    for budget in range(2, 12):
        ((_, (p, r)),) = fit_turns([([1] * 50, [2] * 50)], budget)[0]
        assert len(r) >= 1 and len(p) + len(r) == budget


def test_bad_records_skip_is_counted(tiny_qwen, tmp_path):
    records = alpaca_records(4) + [{"instruction": "no output here"}, {"instruction": "empty", "output": ""}]
    with pytest.raises(DataError, match=r"toy\.json, record 4: missing column 'output'.*set bad_records: skip"):
        _prepare(tiny_qwen, tmp_path / "a", records, template="qwen")
    data, _ = _prepare(tiny_qwen, tmp_path / "b", records, template="qwen", bad_records="skip")
    (report,) = data.reports
    assert (report.records, report.invalid, report.kept) == (6, 2, 4)
    assert "record 5: assistant turn 0 is empty" in report.invalid_examples[1]


def test_second_run_loads_from_cache(tiny_qwen, tmp_path, monkeypatch):
    first, _ = _prepare(tiny_qwen, tmp_path, alpaca_records(20), template="qwen")
    from tunekit.data import pipeline

    def boom(*a, **k):
        raise AssertionError("re-read the data although the cache is valid")

    monkeypatch.setattr(pipeline, "read_records", boom)
    second, _ = _prepare(tiny_qwen, tmp_path, None, write=False, template="qwen")
    assert second.train["input_ids"] == first.train["input_ids"]
    with pytest.raises(AssertionError, match="re-read"):  # a changed option invalidates the cache
        _prepare(tiny_qwen, tmp_path, None, write=False, template="qwen", cutoff_len=32)


def test_val_split_sizes_and_errors(tiny_qwen, tmp_path):
    data, _ = _prepare(tiny_qwen, tmp_path, alpaca_records(20), template="qwen", val_size=0.15)
    assert (len(data.train), len(data.eval)) == (17, 3)
    data2, _ = _prepare(tiny_qwen, tmp_path, alpaca_records(20), template="qwen", val_size=0.15)
    assert data2.eval["input_ids"] == data.eval["input_ids"]  # seeded split
    with pytest.raises(ConfigError, match=r"val_size 20 leaves no training samples: the data has 20 usable sample"):
        _prepare(tiny_qwen, tmp_path, alpaca_records(20), template="qwen", val_size=20)


def test_template_required(tiny_qwen, tmp_path):
    with pytest.raises(ConfigError, match="template is not set"):
        _prepare(tiny_qwen, tmp_path, alpaca_records(2))
