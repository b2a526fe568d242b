"""The bad-input corpus of an adversarial run: each case ended in a traceback, a silent misreading or a
vague error, and is now one named error (file, record, entry or option, and the fix) or the right behaviour.

Tables by category: config files and options, dataset_info.json entries, data records and files, command-line
arguments, output_dir. In-process calls where the mechanism allows (load_config, parse_entry, read_records,
convert_record, a verb's main), a few `tunekit` subprocesses for what the program itself prints."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from tests.helpers import alpaca_records, base_config, write_dataset
from tunekit.config import build_config, load_config
from tunekit.data.cache import source_signature
from tunekit.data.dataset_info import parse_entry, resolve_datasets
from tunekit.data.formats import convert_record
from tunekit.data.readers import RawRecord, read_records
from tunekit.errors import ConfigError, DataError, ModelError, RecordError

GOOD = {"instruction": "q", "input": "", "output": "a"}


def _config_error(tmp_path, text: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    return str(err.value)


# ------------------------------------------------------------------ config files and options
@pytest.mark.parametrize(
    "text, where, says",
    [
        ("model_name_or_path: x\n\tstage: sft\n", "line 2, column 1", "YAML indents with spaces, never tabs"),
        ("seed: !!python/object/apply:os.system ['echo hi']\n", "line 1, column 7", "remove the tag"),
        ("a: [1, 2\nb: 3\n", "line 2, column 2", "expected ',' or ']'"),
    ],
)
def test_a_yaml_error_is_one_line_with_its_place(tmp_path, text, where, says):
    message = _config_error(tmp_path, text)
    assert "\n" not in message  # PyYAML's own text spans four lines with a caret; the CLI prints one
    assert message.startswith(f"{tmp_path / 'c.yaml'} is not valid YAML: {where}: ") and says in message


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_an_empty_config_file_is_named(tmp_path, text):
    assert _config_error(tmp_path, text).startswith(
        f"{tmp_path / 'c.yaml'} holds no options (it is empty or only comments)"
    )


def test_a_config_path_that_is_a_folder_is_not_called_missing(tmp_path):
    with pytest.raises(
        ConfigError, match=f"^Config file {tmp_path} is a folder, not a file: give the YAML or JSON file"
    ):
        load_config(tmp_path)  # was "does not exist"


@pytest.mark.parametrize(
    "option, value, says",
    [
        ("adam_beta1", 1.5, "Input should be less than 1"),  # torch's AdamW raised a ValueError at the first step
        ("adam_beta2", 1, "Input should be less than 1"),
        ("adam_beta1", -0.1, "Input should be greater than or equal to 0"),
        ("adam_epsilon", -1e-8, "Input should be greater than or equal to 0"),
        ("lora_target", "", "String should have at least 1 character"),  # peft's NoMatchingPeftModuleError traceback
    ],
)
def test_an_option_out_of_its_range_is_named(option, value, says):
    with pytest.raises(ConfigError) as err:
        build_config({option: value})
    assert str(err.value).startswith(f"Option '{option}'") and says in str(err.value)


def test_a_yaml_list_for_a_comma_separated_option_is_read_as_llamafactory_reads_it(tmp_path):
    """`dataset: [a, b]` was refused as "expected text" (LLaMA-Factory's split_arg keeps a list as the list)."""
    path = tmp_path / "c.yaml"
    path.write_text("dataset: [alpaca_en_demo, identity]\nlora_target:\n  - q_proj\n  - v_proj\nreport_to: [none]\n")
    cfg = load_config(path)
    assert (cfg.dataset_names, cfg.lora_target, cfg.trackers) == (["alpaca_en_demo", "identity"], "q_proj,v_proj", [])
    assert "expected a number" in _config_error(tmp_path, "learning_rate: [0.1]\n")  # a list stays wrong elsewhere


@pytest.mark.parametrize("option", ["model_name_or_path", "adapter_name_or_path", "dataset_dir"])
def test_output_dir_may_not_be_the_folder_the_run_loads(tmp_path, monkeypatch, option):
    """Training wrote adapter files into the model folder (a full run would replace its weights): refused, comparing
    folders as folders (relative and absolute spellings of one folder)."""
    (tmp_path / "m").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        build_config({option: "m", "output_dir": str(tmp_path / "m") + "/"})
    assert [p.fields for p in err.value.problems] == [("output_dir", option)]
    assert f"is the {option} folder m itself" in str(err.value)
    build_config({option: "m", "output_dir": "m_out"})  # a folder of its own
    build_config({"model_name_or_path": "Qwen/Qwen2.5-0.5B", "output_dir": "Qwen/Qwen2.5-0.5B"})  # a hub id: no folder


def test_export_never_deletes_the_weights_of_a_model_it_did_not_export(tmp_path):
    """An export_dir holding another model's weights lost them silently (the export clears old shards first)."""
    from tunekit.export.exporter import PROVENANCE, check_export_dir

    out = tmp_path / "ex"
    out.mkdir()
    (out / "notes.txt").write_text("mine")  # other files: kept beside the export, as before
    cfg = build_config({"model_name_or_path": str(tmp_path / "m"), "export_dir": str(out)})
    assert check_export_dir(cfg) == out
    (out / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(ConfigError) as err:
        check_export_dir(cfg)
    assert str(err.value).startswith(
        f"export_dir {out} holds weights that tunekit did not export (model.safetensors; "
        f"no {PROVENANCE}): exporting would delete them."
    )
    (out / PROVENANCE).write_text("{}")  # an earlier export of its own: re-exported in place
    assert check_export_dir(cfg) == out


# ------------------------------------------------------------------ dataset_info.json entries
@pytest.mark.parametrize(
    "entry, message",
    [
        ({"file_name": "d.json", "hf_hub_url": "org/d"}, "gives both file_name (a local file) and hf_hub_url"),
        ({"file_name": "d.json", "ms_hub_url": "org/d"}, "gives both file_name (a local file) and ms_hub_url"),
        ({"file_name": "d.json", "split": "validation"}, "split 'validation' names a split of a hub dataset"),
        ({"file_name": "d.json", "load_from": "ftp"}, "unknown key(s) load_from"),  # was accepted and never read
    ],
)
def test_a_dataset_info_entry_that_was_read_silently_otherwise_is_named(tmp_path, entry, message):
    with pytest.raises(DataError) as err:
        parse_entry("d", entry, tmp_path)
    assert str(err.value).startswith("dataset_info.json, entry 'd': ") and message in str(err.value)


def test_split_train_of_a_local_file_and_hub_alternatives_still_parse(tmp_path, reference_data):
    assert parse_entry("d", {"file_name": "d.json", "split": "train"}, tmp_path).load_from == "file"
    assert (
        parse_entry("d", {"hf_hub_url": "a/b", "ms_hub_url": "c/d", "split": "validation"}, tmp_path).split
        == "validation"
    )


# ------------------------------------------------------------------ data files and records
@pytest.mark.parametrize(
    "suffix, text, where",
    [
        (".json", '[{"instruction": NaN, "input": "", "output": "x"}]', "d.json holds NaN"),
        (".json", '[{"instruction": "q", "input": "", "output": Infinity}]', "d.json holds Infinity"),
        (
            ".jsonl",
            '{"instruction": "q", "input": "", "output": "x"}\n{"instruction": -Infinity}\n',
            "d.jsonl, line 2 holds -Infinity",
        ),
    ],
)
def test_nan_and_infinity_are_not_json_and_not_text(tmp_path, suffix, text, where):
    """Python's json reader accepts them: the record then trained on the text 'nan'."""
    (tmp_path / f"d{suffix}").write_text(text)
    attr = parse_entry("d", {"file_name": f"d{suffix}"}, tmp_path)
    with pytest.raises(DataError) as err:
        list(read_records(attr))
    assert where in str(err.value) and "which is not JSON" in str(err.value)


def _convert(tmp_path, rec, entry=None, stage="sft"):
    attr = parse_entry("d", {"file_name": "d.json", **(entry or {})}, tmp_path)
    return convert_record(RawRecord(rec, "d.json", 3), attr, stage)


SHAREGPT_TOOLS = {"formatting": "sharegpt", "columns": {"messages": "conversations", "tools": "tools"}}
TURNS = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]


@pytest.mark.parametrize(
    "rec, entry, message",
    [
        (
            {**GOOD, "instruction": "caf\ud800e"},
            None,
            "after 'caf' the text holds U+D800, half of a UTF-16 surrogate pair",
        ),
        (
            {"conversations": [{"from": "human", "value": "\udfff"}, TURNS[1]]},
            {"formatting": "sharegpt"},
            "holds U+DFFF",
        ),
        ({"conversations": TURNS, "tools": "{not json"}, SHAREGPT_TOOLS, "invalid JSON in the tools column"),
        (
            {"conversations": TURNS, "tools": "[1, 2]"},
            SHAREGPT_TOOLS,
            "the tools column must be a JSON list of objects",
        ),
    ],
)
def test_a_record_the_tokenizer_or_template_failed_on_is_named(tmp_path, rec, entry, message):
    """A lone surrogate ended in a UnicodeEncodeError traceback in the tokenizer; broken tools JSON in a DataError
    naming no file or record, raised while rendering."""
    with pytest.raises(RecordError) as err:
        _convert(tmp_path, rec, entry)
    assert str(err.value).startswith("d.json, record 3: ") and message in str(err.value)


def test_good_unicode_and_tools_still_convert(tmp_path):
    sample = _convert(tmp_path, {**GOOD, "instruction": "\u202e مرحبا 😀 \u200d"})
    assert sample["messages"][0]["content"] == "\u202e مرحبا 😀 \u200d"
    tools = '[{"name": "f", "parameters": {}}]'
    assert _convert(tmp_path, {"conversations": TURNS, "tools": tools}, SHAREGPT_TOOLS)["tools"] == tools


def test_a_folder_without_data_files_is_not_walked_for_the_cache_key(tmp_path):
    """``file_name: /`` walked the whole disk for the cache fingerprint and died in /proc (OSError traceback): a folder
    the reader reads no data file from is left to the reader, which names it."""
    folder = tmp_path / "d"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.png").write_bytes(b"x")
    assert source_signature(str(folder)) == [str(folder)]
    (tmp_path / "dataset_info.json").write_text(json.dumps({"d": {"file_name": "d"}}))
    with pytest.raises(DataError, match="holds no .json/.jsonl/.csv/.parquet/.txt files"):
        list(read_records(resolve_datasets(["d"], tmp_path)[0]))
    (folder / "d.json").write_text(json.dumps([GOOD]))  # with data: its files, media in subfolders too
    assert [f[0] for f in source_signature(str(folder))] == [str(folder / "d.json"), str(folder / "sub" / "a.png")]


# ------------------------------------------------------------------ command-line arguments
@pytest.mark.parametrize(
    "flag, value, says",
    [
        ("--hidden-size", "0", "must be 1 or more, got 0"),  # ZeroDivisionError in the init
        ("--num-layers", "-2", "must be 1 or more, got -2"),  # transformers' StrictDataclassClassValidationError
        ("--intermediate-size", "0", "must be 1 or more, got 0"),  # built a model with an empty MLP, exit 0
    ],
)
def test_tiny_model_sizes_are_checked_before_anything_is_built(tmp_path, capsys, flag, value, says):
    from tunekit.cli import tiny_model_cmd

    with pytest.raises(SystemExit) as exc:
        tiny_model_cmd.main([str(tmp_path / "t"), flag, value])
    assert exc.value.code == 2 and f"error: argument {flag}: {says}" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize(
    "flag, value, kind", [("--seq-len", "abc", "a whole number"), ("--gpu-memory", "lots", "a number")]
)
def test_plan_says_what_kind_of_value_a_flag_takes(flag, value, kind):
    from tunekit.cli import plan_cmd

    with pytest.raises(ConfigError, match=f"^{flag} expects {kind}, got '{value}'.$"):  # was "expects a int"
        plan_cmd.main([flag, value])


def test_expand_blocks_names_a_missing_model_folder(tmp_path):
    from tunekit.cli import expand_blocks_cmd

    with pytest.raises(ModelError, match=f"^Model folder {tmp_path}/nomodel does not exist"):  # was a hub OSError
        expand_blocks_cmd.main([str(tmp_path / "nomodel"), str(tmp_path / "e"), "--num-expand", "2"])


def test_env_refuses_arguments_it_does_not_take():
    from tunekit.cli import env_cmd

    with pytest.raises(ConfigError, match="tunekit env takes no arguments, got '--bogus'"):
        env_cmd.main(["--bogus"])


def test_api_names_an_address_it_cannot_listen_on_before_loading_the_model():
    from tunekit.cli.api_cmd import check_listen_address

    with pytest.raises(ConfigError, match=r"^--host 'no such host!' is not an address this machine can listen on"):
        check_listen_address("no such host!", 8000, "--host")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"^cannot listen on 127.0.0.1:{port} \(Address already in use\)"):
            check_listen_address("127.0.0.1", port, "--host")


def test_data_stats_plot_into_a_new_folder_and_config_errors_in_one_line(tmp_path, tiny_qwen):
    """`--plot new/x.png` ended in a FileNotFoundError traceback after the whole measurement; a YAML error printed
    four lines, the last one naming no file."""
    write_dataset(tmp_path / "data", "toy", alpaca_records(4))
    cfg = base_config(tiny_qwen, tmp_path / "data", tmp_path / "out")
    (tmp_path / "c.yaml").write_text(json.dumps(cfg))  # JSON is YAML
    plot = tmp_path / "new" / "deeper" / "x.png"
    cli = [sys.executable, "-m", "tunekit.cli.main", "data", "stats"]
    proc = subprocess.run(
        [*cli, str(tmp_path / "c.yaml"), "--plot", str(plot)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert plot.stat().st_size > 0
    (tmp_path / "bad.yaml").write_text("stage: sft\n\tcutoff_len: 8\n")
    proc = subprocess.run([*cli, str(tmp_path / "bad.yaml")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()  # libyaml and PyYAML word the problem differently
    assert line.startswith(f"error: {tmp_path / 'bad.yaml'} is not valid YAML: line 2, column 1: ")
    assert line.endswith("(YAML indents with spaces, never tabs)")
