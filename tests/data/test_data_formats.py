"""Reading dataset_info.json and converting alpaca / sharegpt / openai records to canonical samples,
including the reference files of LLaMA-Factory, unchanged, and every kind of bad record."""

from __future__ import annotations

import json

import pytest

from tests.helpers import write_dataset
from tunekit.data.dataset_info import parse_entry, read_dataset_info, resolve_datasets
from tunekit.data.formats import convert_record
from tunekit.data.readers import read_records
from tunekit.errors import ConfigError, DataError


def _convert_all(attr, stage="sft"):
    return [convert_record(r, attr, stage) for r in read_records(attr)]


def test_reference_dataset_info_parses_every_entry(reference_data):
    info = read_dataset_info(reference_data)
    assert len(info) > 100
    attrs = [parse_entry(name, entry, reference_data) for name, entry in info.items()]
    hub = [a for a in attrs if a.load_from == "hf_hub"]
    assert hub and all("/" in a.path or a.path for a in hub)
    dpo = next(a for a in attrs if a.name == "dpo_en_demo")
    assert dpo.ranking and dpo.formatting == "sharegpt" and dpo.columns["chosen"] == "chosen"


@pytest.mark.parametrize("name, n", [("alpaca_en_demo", 999), ("alpaca_zh_demo", 1000), ("identity", 91)])
def test_reference_alpaca_files_load_unchanged(reference_data, name, n):
    (attr,) = resolve_datasets([name], reference_data)
    samples = _convert_all(attr)
    assert len(samples) == n
    s = samples[0]
    assert s["messages"][-1]["role"] == "assistant" and s["messages"][0]["role"] == "user"
    raw = json.loads((reference_data / f"{name}.json").read_text(encoding="utf-8"))[0]
    expected_prompt = "\n".join(p for p in (raw["instruction"], raw.get("input", "")) if p)
    assert s["messages"][0]["content"] == expected_prompt and s["messages"][1]["content"] == raw["output"]
    assert s["_source"].endswith(f"{name}.json, record 0")


def test_reference_preference_and_kto_files(reference_data):
    (dpo,) = resolve_datasets(["dpo_en_demo"], reference_data)
    samples = _convert_all(dpo, "dpo")
    assert len(samples) == 300 and samples[0]["chosen"]["role"] == "assistant" and samples[0]["rejected"]["content"]
    (kto,) = resolve_datasets(["kto_en_demo"], reference_data)
    ks = _convert_all(kto, "kto")
    assert len(ks) == 300 and {s["kto_tag"] for s in ks} == {True, False}
    (tools,) = resolve_datasets(["glaive_toolcall_en_demo"], reference_data)
    ts = _convert_all(tools)
    assert any(m["role"] == "function_call" for s in ts for m in s["messages"]) and ts[0]["tools"]


def test_reference_pretraining_text(reference_data):
    (c4,) = resolve_datasets(["c4_demo"], reference_data)
    texts = _convert_all(c4, "pt")
    assert len(texts) > 100 and all(s["text"] for s in texts)


def test_alpaca_history_and_system(tmp_path):
    write_dataset(
        tmp_path,
        "h",
        [{"instruction": "q2", "input": "ctx", "output": "a2", "system": "be brief", "history": [["q1", "a1"]]}],
        {
            "columns": {
                "prompt": "instruction",
                "query": "input",
                "response": "output",
                "system": "system",
                "history": "history",
            }
        },
    )
    (attr,) = resolve_datasets(["h"], tmp_path)
    (s,) = _convert_all(attr)
    assert s["system"] == "be brief"
    assert [m["content"] for m in s["messages"]] == ["q1", "a1", "q2\nctx", "a2"]


def test_sharegpt_and_openai_forms(tmp_path):
    write_dataset(
        tmp_path,
        "sg",
        [
            {
                "conversations": [
                    {"from": "system", "value": "S"},
                    {"from": "human", "value": "hi"},
                    {"from": "gpt", "value": "yo"},
                ]
            }
        ],
        {"formatting": "sharegpt"},
    )
    write_dataset(
        tmp_path,
        "oa",
        [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}],
        {"formatting": "openai"},
    )
    sg, oa = resolve_datasets(["sg", "oa"], tmp_path)
    (a,), (b,) = _convert_all(sg), _convert_all(oa)
    assert a["system"] == "S" and a["messages"] == b["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
    ]


def test_direct_file_path_with_guessed_format(tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text(
        json.dumps({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}) + "\n"
    )
    (attr,) = resolve_datasets([str(path)], tmp_path / "nowhere")
    assert _convert_all(attr)[0]["messages"][1]["content"] == "y"


# ---------------------------------------------------------------- bad data: the message names file and record
def _error(tmp_path, records, entry=None, stage="sft", suffix=".json"):
    path = write_dataset(tmp_path, "bad", records, entry, suffix=suffix)
    (attr,) = resolve_datasets(["bad"], tmp_path)
    with pytest.raises(DataError) as err:
        _convert_all(attr, stage)
    return str(err.value), path


def test_missing_column(tmp_path):
    msg, path = _error(tmp_path, [{"instruction": "a", "output": "b"}, {"instruction": "c"}])
    assert msg.startswith(f"{path}, record 1: missing column 'output' (response); the record has: instruction.")


def test_wrong_role_order(tmp_path):
    msg, path = _error(
        tmp_path,
        [{"conversations": [{"from": "human", "value": "a"}, {"from": "human", "value": "b"}]}],
        {"formatting": "sharegpt"},
    )
    assert msg == (
        f"{path}, record 0: message 1 has role 'human' where an assistant/function_call reply is expected; "
        f"conversations must alternate user → assistant."
    )


def test_empty_assistant_turn(tmp_path):
    msg, path = _error(tmp_path, [{"instruction": "a", "output": "ok"}, {"instruction": "b", "output": "  "}])
    assert msg == f"{path}, record 1: assistant turn 0 is empty; remove the record or fill in the answer."


def test_file_that_is_not_json(tmp_path):
    msg, path = _error(tmp_path, "this is { not json", suffix=".json")
    assert msg.startswith(f"Data file {path} is not valid JSON (line 1, column 1)")


def test_bad_jsonl_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"instruction": "a", "output": "b"}\n{oops\n')
    (attr,) = resolve_datasets([str(path)], tmp_path)
    with pytest.raises(DataError, match=r"x\.jsonl, line 2 is not valid JSON"):
        read_records(attr)


def test_unknown_dataset_name_suggests(tmp_path):
    write_dataset(tmp_path, "alpaca_demo", [{"instruction": "a", "output": "b"}])
    with pytest.raises(
        ConfigError,
        match=r"Dataset 'alpaca_dmeo' is not in .*dataset_info\.json and is not a file\. Did you mean: alpaca_demo\?",
    ):
        resolve_datasets(["alpaca_dmeo"], tmp_path)


def test_hub_dataset_offline_fails_clearly(reference_data, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    (attr,) = resolve_datasets(["alpaca_en"], reference_data)
    with pytest.raises(
        DataError,
        match=r"dataset 'alpaca_en' \(llamafactory/alpaca_en\) is a Hugging Face Hub dataset and could not be loaded",
    ):
        read_records(attr)
