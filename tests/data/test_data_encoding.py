"""Data files that are not UTF-8 (named file, byte offset, likely encoding, how to convert; BOM files accepted)
and unparsable JSONL lines under ``bad_records`` (skip: counted and listed with file and line; error: named)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import write_dataset
from tunekit.config import load_config
from tunekit.data.dataset_info import read_dataset_info, resolve_datasets
from tunekit.data.formats import convert_record
from tunekit.data.readers import read_records
from tunekit.errors import DataError

ZH = [
    {
        "instruction": "你好，请介绍一下你自己。这是一个测试。",
        "input": "",
        "output": "我是一个人工智能助手，很高兴为您服务。",
    }
] * 3


def _lines(records) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def _read(path):
    (attr,) = resolve_datasets([str(path)], path.parent)
    return [convert_record(r, attr, "sft") for r in read_records(attr)]


def _encoding_error(path) -> str:
    with pytest.raises(DataError) as exc:
        _read(path)
    return str(exc.value)


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".csv", ".txt"])
def test_utf8_bom_files_are_read(tmp_path, suffix):
    path = tmp_path / f"bom{suffix}"
    if suffix == ".json":
        text = json.dumps(ZH, ensure_ascii=False)
    elif suffix == ".jsonl":
        text = _lines(ZH)
    elif suffix == ".csv":
        text = "instruction,output\n你好,您好\n"
    else:
        text = "第一行\n第二行\n"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    (attr,) = resolve_datasets([str(path)], tmp_path)
    records = read_records(attr)
    first = records[0].data
    # the BOM is not part of the first key or text
    assert first == (
        {"text": "第一行"}
        if suffix == ".txt"
        else {"instruction": "你好", "output": "您好"}
        if suffix == ".csv"
        else ZH[0]
    )


def test_gb18030_jsonl_names_file_offset_encoding_and_fix(tmp_path):
    path = tmp_path / "zh.jsonl"
    path.write_bytes(_lines(ZH).encode("gb18030"))
    # '{"instruction": "' is 17 ASCII bytes; the first GB18030 byte pair (你 = c4 e3) is not UTF-8
    assert _encoding_error(path) == (
        f"Data file {path} is not UTF-8: byte 17 (line 1: c4 e3 ba c3) cannot be decoded; it looks like GB18030. "
        f"Convert it to UTF-8, e.g. `iconv -f GB18030 -t UTF-8 '{path}' > '{tmp_path / 'zh.utf8.jsonl'}'`, "
        f"and point file_name at the converted file."
    )


def test_offset_and_line_past_the_first_read_chunk(tmp_path):
    """The offset is of the whole file (the search reads in chunks), the line counts every newline before it."""
    path = tmp_path / "late.jsonl"
    good = _lines([{"instruction": "q" * 1000, "output": "a"}] * 1200).encode("utf-8")  # > 1 MiB of valid UTF-8
    path.write_bytes(good + _lines(ZH[:1]).encode("gb18030"))
    msg = _encoding_error(path)
    assert msg.startswith(
        f"Data file {path} is not UTF-8: byte {len(good) + 17} (line 1201: c4 e3 ba c3) cannot be "
        f"decoded; it looks like GB18030."
    )


@pytest.mark.parametrize(
    "encoding, iconv, text",
    [
        ("utf-16", "UTF-16", "你好，请介绍一下你自己。"),
        ("big5", "BIG5", "你好，請介紹一下你自己。這是一個測試。"),
        ("shift_jis", "SHIFT_JIS", "こんにちは、自己紹介をしてください。これはテストです。"),
        ("cp1252", "CP1252", "Café — résumé naïve “quoted” façade, Überprüfung déjà vu"),
    ],
)
def test_likely_encoding_is_named(tmp_path, encoding, iconv, text):
    path = tmp_path / f"data_{encoding}.json"
    path.write_bytes(json.dumps([{"instruction": text, "output": text}] * 3, ensure_ascii=False).encode(encoding))
    msg = _encoding_error(path)
    assert f"; it looks like {iconv}. Convert it to UTF-8, e.g. `iconv -f {iconv} -t UTF-8 '{path}'" in msg, msg
    assert msg.startswith(f"Data file {path} is not UTF-8: byte ")


def test_csv_and_dataset_info_in_another_encoding(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_bytes("instruction,output\n你好,您好\n".encode("gb18030"))
    assert _encoding_error(csv).startswith(
        f"Data file {csv} is not UTF-8: byte 19 (line 2: c4 e3 ba c3) cannot be decoded"
    )
    (tmp_path / "dataset_info.json").write_bytes('{"数据": {"file_name": "t.csv"}}'.encode("gb18030"))
    with pytest.raises(DataError, match=r"dataset_info\.json is not UTF-8: byte 2 \(line 1: ca fd be dd\)"):
        read_dataset_info(tmp_path)


def test_converted_file_loads(tmp_path):
    """What the message says to do works: the iconv output is read."""
    import shutil
    import subprocess

    if shutil.which("iconv") is None:
        pytest.skip("iconv is not installed")
    path = tmp_path / "zh.jsonl"
    path.write_bytes(_lines(ZH).encode("gb18030"))
    out = tmp_path / "zh.utf8.jsonl"
    with open(out, "wb") as f:
        subprocess.run(["iconv", "-f", "GB18030", "-t", "UTF-8", str(path)], stdout=f, check=True)
    assert [s["messages"][0]["content"] for s in _read(out)] == [ZH[0]["instruction"]] * 3


# --- unparsable JSONL lines and bad_records ------------------------------------------------------------------


def _bad_jsonl(tmp_path):
    good = {"instruction": "What is 1 plus 1?", "output": "2"}
    text = json.dumps(good) + "\n" + '{"instruction": "broken", "output": \n' + json.dumps(good) + "\n"
    return write_dataset(tmp_path / "data", "toy", text, suffix=".jsonl")


def _cfg(model, tmp_path, **opts):
    return load_config(
        None,
        {
            "model_name_or_path": str(model),
            "template": "qwen",
            "dataset": "toy",
            "dataset_dir": str(tmp_path / "data"),
            "output_dir": str(tmp_path / "out"),
            **opts,
        },
    )


def test_bad_jsonl_line_is_skipped_and_reported(tiny_qwen, tmp_path):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.data.report import write_reports
    from tunekit.model.loader import load_tokenizer

    path = _bad_jsonl(tmp_path)
    cfg = _cfg(tiny_qwen, tmp_path, bad_records="skip")
    data = prepare_datasets(cfg, load_tokenizer(cfg), "sft")
    assert len(data.train) == 2 and data.train["_source"] == [f"{path}, record 0", f"{path}, record 2"]
    report_file = tmp_path / "out" / "preprocessing_report.json"
    write_reports(data.reports, report_file)  # what `tunekit train` writes
    (report,) = json.loads(report_file.read_text(encoding="utf-8"))
    assert (report["records"], report["invalid"], report["kept"]) == (3, 1, 2)
    assert report["invalid_examples"] == [
        f"Data file {path}, line 2 is not valid JSON: Expecting value (column 37); skipped (bad_records: skip)."
    ]


def test_bad_jsonl_line_with_bad_records_error_names_file_and_line(tiny_qwen, tmp_path):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    path = _bad_jsonl(tmp_path)
    cfg = _cfg(tiny_qwen, tmp_path)
    with pytest.raises(DataError) as exc:
        prepare_datasets(cfg, load_tokenizer(cfg), "sft")
    assert str(exc.value) == (
        f"Data file {path}, line 2 is not valid JSON: Expecting value (column 37). Fix the line, "
        f"or set bad_records: skip to skip it (it is then listed in preprocessing_report.json)."
    )


def test_json_file_of_lines_skips_its_bad_line_too(tmp_path):
    """A .json file holding one object per line is read as JSONL, bad lines included."""
    path = tmp_path / "lines.json"
    path.write_text(
        '{"instruction": "a", "output": "b"}\n{oops\n{"instruction": "c", "output": "d"}\n', encoding="utf-8"
    )
    (attr,) = resolve_datasets([str(path)], tmp_path)
    records = read_records(attr, bad_records="skip")
    assert [r.index for r in records] == [0, 1, 2] and records[1].error == (
        f"Data file {path}, line 2 is not valid JSON: Expecting property name enclosed in double quotes (column 2); "
        f"skipped (bad_records: skip)."
    )


def test_predict_skips_the_bad_line_too(tiny_qwen, tmp_path):
    from tunekit.infer.predict import load_samples

    _bad_jsonl(tmp_path)
    samples = load_samples(_cfg(tiny_qwen, tmp_path, bad_records="skip"))
    assert [s["label"] for s in samples] == ["2", "2"]
    with pytest.raises(
        DataError, match=r"toy\.jsonl, line 2 is not valid JSON: Expecting value \(column 37\)\. Fix the line"
    ):
        load_samples(_cfg(tiny_qwen, tmp_path))
