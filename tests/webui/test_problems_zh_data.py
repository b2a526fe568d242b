"""A data file's and a record's errors said in Chinese on the board (``config/problem_texts_data.py``,
``webui/problems_zh_data.py``): the data layer raises them keyed, so a failed job's line (``data_bad_record`` around
the record's own error) is Chinese through and through; the English the CLI prints is unchanged word for word."""

from __future__ import annotations

import json
import string
from types import SimpleNamespace

import pytest

from tests.helpers import ROOT, failed_job, freeze_harmony_day, write_dataset
from tests.zh_words import HAN, option_words, said_in_both, unkeyed_messages, untranslated, value_words
from tunekit.config import load_config
from tunekit.config.problem_texts import ENGLISH
from tunekit.config.problem_texts_data import ENGLISH_DATA
from tunekit.config.problems import Said
from tunekit.data.dataset_info import parse_entry
from tunekit.data.formats import convert_record
from tunekit.data.pipeline import check_thought_markers, prepare_datasets, thought_templates
from tunekit.data.readers import RawRecord, read_records
from tunekit.data.templates import get_template
from tunekit.errors import ConfigError, DataError, RecordError
from tunekit.model.loader import load_tokenizer
from tunekit.tiny.text import build_tiny_model
from tunekit.webui.paths import PathPolicy
from tunekit.webui.problems_zh import say, say_error

ALLOWED = option_words()
DATA = ROOT / "src" / "tunekit" / "data"
KEYED_MODULES = (
    "formats.py",
    "readers.py",
    "message_content.py",
    "media_columns.py",
    "pipeline.py",
    "dataset_info.py",
    "tokenized_cache.py",
    "collator.py",
    "padding_free.py",
    *(f"templates/{p.name}" for p in sorted((DATA / "templates").glob("*.py"))),
    *(f"mm_plugins/{p.name}" for p in sorted((DATA / "mm_plugins").glob("*.py"))),
    *(f"processors/{p.name}" for p in sorted((DATA / "processors").glob("*.py"))),
)


def test_the_data_layer_raises_its_file_and_record_errors_keyed():
    """A ``RecordError`` / ``DataError`` / ``ConfigError`` made from a literal sentence could not be said in Chinese:
    each is made from a :class:`Said` (or a keyed message already made), whose key has an English template."""
    found = {name: unkeyed_messages(DATA / name, ENGLISH) for name in KEYED_MODULES}
    assert {name: lines for name, lines in found.items() if lines != ([], [])} == {}
    assert len(KEYED_MODULES) > 30  # the plugins, processors and templates were found


def test_a_key_two_tables_define_stops_the_merge():
    """``ENGLISH`` and ``ZH`` merge their tables (``tunekit.messages.merged``): a data key spelled like the config's
    ``part_did_you_mean`` once replaced that sentence silently ("(config).Did you mean")."""
    from tunekit.messages import merged

    assert merged({"a": "A"}, {"b": "B"}) == {"a": "A", "b": "B"}
    with pytest.raises(KeyError, match="message keys defined twice: part_did_you_mean"):
        merged({"part_did_you_mean": " Did you mean: {names}?"}, {"part_did_you_mean": "Did you mean: {names}?"})


# a template of code and values alone: nothing to translate
WORDLESS = (
    "record_template_refused",
    "info_confined",
    "part_harmony_items",
    "part_harmony_one_of",
    "part_harmony_property",
)


@pytest.mark.parametrize("key", sorted(ENGLISH_DATA))
def test_every_data_template_is_chinese(key):
    """Every key, its placeholders filled with a number, has no untranslated English (code, option names and values
    stay as they are); a whole sentence has Chinese words (a piece may be code alone)."""
    from tunekit.webui.problems_zh import ZH

    names = {name for _t, name, _s, _c in string.Formatter().parse(ZH[key]) if name}
    text = ZH[key].format(**dict.fromkeys(names, 1))
    assert untranslated(text, ALLOWED) == [], (key, text)
    assert HAN.search(text) or key.startswith(("part_fix_", "part_with_")) or key in WORDLESS, (key, text)


def _attr(tmp_path, entry):
    return parse_entry("toy", {"file_name": "toy.json", **entry}, str(tmp_path))


def test_a_nested_record_error_is_chinese_in_every_part(tmp_path):
    """A message part's error names its place with keyed pieces (``message 0 content, part 1``): each is said again
    in Chinese, the record position and the user's value as they are."""
    raw = RawRecord({"messages": [{"role": "user", "content": [{"type": "weird"}]}]}, "f.jsonl", 7)
    with pytest.raises(RecordError) as err:
        convert_record(raw, _attr(tmp_path, {"formatting": "openai"}), "sft")
    said_in_both(
        err.value,
        "f.jsonl, record 7: message 0 content, part 0 has unknown type 'weird'; supported part types: text, "
        "reasoning, tool_call (and OpenAI's 'text' parts with a 'text' key).",
        "f.jsonl 中的记录 7：消息 0 的内容中的第 0 部分的类型 'weird' 未知；支持的部分类型：text, reasoning, tool_call"
        "（以及 OpenAI 带 `text` 键的 `text` 部分）。",
    )


def test_an_unparsable_jsonl_line_is_said_in_chinese_read_or_skipped(tmp_path):
    """The reader's error for a line that is not JSON: raised (``bad_records: error``) or kept on the record it
    skips, which the formats layer raises as that record's error."""
    path = write_dataset(tmp_path, "toy", '{"instruction": "a", "output": "b"}\n{bad\n', suffix=".jsonl")
    attr = _attr(tmp_path, {"file_name": "toy.jsonl"})
    line = f"Data file {path}, line 2 is not valid JSON: Expecting property name enclosed in double quotes (column 2)"
    with pytest.raises(DataError) as err:
        read_records(attr)
    assert str(err.value) == (
        f"{line}. Fix the line, or set bad_records: skip to skip it (it is then listed in preprocessing_report.json)."
    )
    zh_line = f"数据文件 {path} 第 2 行不是有效的 JSON：Expecting property name enclosed in double quotes（第 2 列）"
    assert say_error(err.value, "zh") == (
        f"{zh_line}。请修正该行，或设置 bad_records: skip 跳过它（跳过的行会列在 preprocessing_report.json 中）。"
    )
    bad = read_records(attr, bad_records="skip")[1]
    with pytest.raises(RecordError) as err:
        convert_record(bad, attr, "sft")
    assert str(err.value) == f"{line}; skipped (bad_records: skip)."
    assert say_error(err.value, "zh") == f"{zh_line}；已跳过（bad_records: skip）。"


KTO = {"columns": {"prompt": "instruction", "response": "output", "kto_tag": "label"}}


def test_a_bad_kto_tag_fails_a_job_with_a_chinese_reason(tiny_qwen, tmp_path, monkeypatch, capsys):
    """The board's route end to end: ``tunekit data stats`` reads the data through the pipeline (as a job's run
    does), fails on the record, prints the English as before and writes the keyed error to ``$TUNEKIT_ERROR_FILE``;
    the board's Chinese line (:func:`say_job_error`) has the record's own sentence in Chinese too."""
    records = [
        {"instruction": "a", "output": "b", "label": True},
        {"instruction": "c", "output": "d", "label": "maybe"},
    ]
    path = write_dataset(tmp_path / "data", "toy", records, KTO)
    options = dict(model_name_or_path=tiny_qwen, template="qwen", stage="kto", dataset="toy")
    argv = ["data", "stats", f"dataset_dir={tmp_path / 'data'}", *(f"{k}={v}" for k, v in options.items())]
    line, written, zh = failed_job(argv, tmp_path, monkeypatch, capsys)
    english = (
        f"{path}, record 1: kto_tag must be true or false, found 'maybe'. (dataset 'toy'; set bad_records: skip to "
        "skip invalid records and count them)"
    )
    assert line == f"error: {english}"
    assert written == [
        {
            "key": "data_bad_record",
            "values": {
                "error": {
                    "key": "record_kto_tag",
                    "values": {
                        "where": {"key": "part_where_record", "values": {"file": str(path), "index": 1}},
                        "value": "'maybe'",
                    },
                },
                "name": "toy",
            },
        }
    ]
    assert zh == (
        f"{path} 中的记录 1：kto_tag 必须是 true 或 false，实际为 'maybe'。（数据集 'toy'；设置 bad_records: skip "
        "可跳过无效记录并计数）"
    )
    said = Said(
        "data_bad_record", error=Said("record_kto_tag", where=f"{path}, record 1", value="'maybe'"), name="toy"
    )
    assert said == english and untranslated(zh, ALLOWED | value_words(said)) == [], zh


def test_a_broken_dataset_info_entry_fails_a_job_with_a_chinese_reason(tiny_qwen, tmp_path, monkeypatch, capsys):
    """A ``dataset_info.json`` entry whose ``columns`` is a list (not an object) stops ``tunekit data stats`` (the
    pipeline a job runs) with the English it always printed; the board's line names the entry and says why in
    Chinese, the file's path and the entry's name as they are."""
    data = tmp_path / "data"
    write_dataset(data, "toy", [{"instruction": "a", "output": "b"}], {"columns": ["instruction", "output"]})
    options = dict(model_name_or_path=tiny_qwen, template="qwen", stage="sft", dataset="toy")
    argv = ["data", "stats", f"dataset_dir={data}", *(f"{k}={v}" for k, v in options.items())]
    line, written, zh = failed_job(argv, tmp_path, monkeypatch, capsys)
    info = data / "dataset_info.json"
    assert line == f"error: {info}, entry 'toy': 'columns' and 'tags' must be objects."
    assert written == [
        {
            "key": "info_columns_not_objects",
            "values": {"where": {"key": "part_info_entry", "values": {"file": str(info), "name": "toy"}}},
        }
    ]
    assert zh == f"{info} 中的条目 'toy'：`columns` 和 `tags` 必须是对象。"
    assert untranslated(zh, ALLOWED | {str(info), "toy"}) == [], zh


@pytest.mark.parametrize(
    ("entry", "english", "chinese"),
    [
        (
            {"formatting": "sharegpt"},
            "x.json, entry 'toy': needs file_name (a local file) or hf_hub_url / ms_hub_url (a hub dataset).",
            "x.json 中的条目 'toy'：需要 file_name（本地文件）或 hf_hub_url / ms_hub_url（远程数据集）。",
        ),
        (
            {"file_name": "t.json", "ranking": "false"},
            "x.json, entry 'toy': \"ranking\" must be true or false (JSON booleans, no quotes), found 'false'.",
            "x.json 中的条目 'toy'：`\"ranking\"` 必须是 true 或 false（JSON 布尔值，不加引号），实际为 'false'。",
        ),
        (
            {"file_name": "t.json", "columns": {"prompt": 3}},
            "x.json, entry 'toy': columns.prompt must be a column name (text) or null, found 3 (int).",
            "x.json 中的条目 'toy'：columns.prompt 必须是列名（文本）或 null，实际为 3（int）。",
        ),
    ],
)
def test_dataset_info_entry_errors_are_said_in_chinese(tmp_path, entry, english, chinese):
    """An entry's error: the English word for word as before, the Chinese from its key (no English left)."""
    with pytest.raises(DataError) as err:
        parse_entry("toy", entry, str(tmp_path), "x.json")
    assert str(err.value) == english
    zh = say_error(err.value, "zh")
    assert zh == chinese
    assert untranslated(zh, ALLOWED | {"x.json", "int", "toy"}) == [], zh


def test_a_bad_tools_column_is_chinese_inside_the_record_error(tmp_path):
    """``parse_tools``'s own sentence, wrapped in the record's error, is said in Chinese too; the user's value and the
    JSON library's text stay as they are."""
    raw = RawRecord({"conversations": [{"from": "human", "value": "q"}], "tools": "{not json"}, "f.jsonl", 3)
    with pytest.raises(RecordError) as err:
        convert_record(raw, _attr(tmp_path, {"formatting": "sharegpt", "columns": {"tools": "tools"}}), "sft")
    json_error = "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    said_in_both(
        err.value,
        f"f.jsonl, record 3: invalid JSON in the tools column: {json_error}: '{{not json'; the tools column holds a "
        "JSON list of function definitions.",
        f"f.jsonl 中的记录 3：`tools` 列中的 JSON 无效：{json_error}：'{{not json'；`tools` 列应是由函数定义组成的 "
        "JSON 列表。",
    )


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("gptoss") / "model", like="gpt-oss-20b", num_layers=1)


def test_a_template_refusal_through_the_pipeline_is_chinese(gpt_oss, tmp_path, monkeypatch):
    """A record whose tool schema gpt-oss's template cannot render stops data preparation with the English it always
    said (the schema's place named step by step); the board says the place and the fix in Chinese, the schema's
    words and code as they are (the record's position too: the sample's ``_source`` keyed again, ``where_of``)."""

    freeze_harmony_day(monkeypatch)
    schema = {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "null"}]}}
    tool = {"name": "f", "description": "Do f.", "parameters": {"type": "object", "properties": {"p": schema}}}
    convo = [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]
    entry = {"formatting": "sharegpt", "columns": {"messages": "conversations", "tools": "tools"}}
    path = write_dataset(tmp_path / "data", "toy", [{"conversations": convo, "tools": json.dumps([tool])}], entry)
    values = dict(model_name_or_path=str(gpt_oss), template="gpt_oss", stage="sft", dataset="toy")
    cfg = load_config(None, [*(f"{k}={v}" for k, v in values.items()), f"dataset_dir={tmp_path / 'data'}"])
    monkeypatch.setenv("TUNEKIT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DataError) as err:
        prepare_datasets(cfg, load_tokenizer(cfg))
    said_in_both(
        err.value,
        f"{path}, record 0: tool 'f', parameter p[]: gpt-oss's official chat template cannot render 'anyOf' (it "
        'declares the parameter as \'any\'); write it as \'oneOf\' or a type list ("type": ["string", "null"])',
        f"{path} 中的记录 0：工具 'f' 的参数 p[]：`gpt-oss` 的官方对话模板无法渲染 'anyOf'（它会把该参数声明为 "
        '`any`）；请把它写成 `oneOf` 或类型列表（`"type": ["string", "null"]`）',
    )


def test_a_run_option_the_template_cannot_serve_is_refused_keyed_with_its_fields():
    """The pipeline's ConfigErrors (options that do not fit the template) name their options for the board and are
    said in Chinese; the English as before."""
    cfg = SimpleNamespace(thought_loss_weight=0.5, preserve_thinking=False, template="qwen")
    with pytest.raises(ConfigError) as err:
        check_thought_markers(cfg, get_template("qwen"))
    assert str(err.value) == (
        f"thought_loss_weight 0.5 needs a reasoning template with thought markers ({thought_templates()}), but "
        "template is qwen: it has no thought block to weight; use your reasoning model's template, or remove "
        "thought_loss_weight."
    )
    assert [p.fields for p in err.value.problems] == [("thought_loss_weight", "template")]
    zh = say_error(err.value, "zh")
    assert zh == (
        f"thought_loss_weight 0.5 需要带思考标记的推理模板（{thought_templates()}），但 template 为 qwen：它没有可加"
        "权的思考块；请使用推理模型的模板，或删除 thought_loss_weight。"
    )
    with pytest.raises(ConfigError) as err:
        get_template("qwen2")
    assert str(err.value).startswith("unknown template 'qwen2'. Did you mean: qwen, qwen3")
    assert say_error(err.value, "zh").startswith("未知的模板 'qwen2'。你是不是想写：qwen、qwen3")


def test_an_unreadable_dataset_info_is_refused_on_the_board_in_chinese(tmp_path):
    """The board refuses a dataset whose dataset_info.json it cannot read with that file's own error, keyed: the
    inner sentence is Chinese too."""
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "dataset_info.json").write_text("{broken")
    said = PathPolicy(tmp_path, caches=[]).dataset_problem("dataset", "toy", "bad")
    info = tmp_path / "bad" / "dataset_info.json"
    assert said == (
        f"Option 'dataset': dataset 'toy': {info} is not valid JSON (line 1, column 2): Expecting property name "
        "enclosed in double quotes."
    )
    assert say(said, "zh") == (
        f"参数 'dataset' 的数据集 'toy'：{info} 不是有效的 JSON（第 1 行，第 2 列）：Expecting property name enclosed "
        "in double quotes。"
    )
