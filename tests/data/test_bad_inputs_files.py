"""Bad files and arguments that ended in a traceback, a hang or a silent misreading: each is one named error
that says which file, entry or argument and how to fix it, raised before anything reads on or is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import alpaca_records, write_dataset
from tunekit.config import load_config
from tunekit.config.loader import parse_overrides
from tunekit.data.dataset_info import parse_entry, resolve_datasets
from tunekit.data.pipeline import check_kind_fits_stage
from tunekit.data.readers import read_records
from tunekit.errors import ConfigError, DataError


def _read(folder, name):
    return list(read_records(resolve_datasets([name], folder)[0]))


# ------------------------------------------------------------------ data files
def test_a_named_pipe_is_refused_instead_of_blocking(tmp_path):
    write_dataset(tmp_path, "real", alpaca_records(2))
    os.mkfifo(tmp_path / "pipe.json")  # opening it for reading would block until a writer comes: forever
    (tmp_path / "dataset_info.json").write_text(json.dumps({"pipe": {"file_name": "pipe.json"}}))
    with pytest.raises(DataError, match=r"pipe\.json is not a regular file \(a named pipe"):
        _read(tmp_path, "pipe")


@pytest.mark.parametrize(
    "target, why", [("loop.json", "loops back on itself"), ("gone.json", "points at 'gone.json'")]
)
def test_a_broken_symlink_says_what_is_wrong_with_it(tmp_path, target, why):
    (tmp_path / "loop.json").symlink_to(target)
    (tmp_path / "dataset_info.json").write_text(json.dumps({"d": {"file_name": "loop.json"}}))
    with pytest.raises(DataError) as err:
        _read(tmp_path, "d")
    assert why in str(err.value) and "loop.json is a symbolic link" in str(err.value)


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_a_file_nested_100000_levels_deep_is_a_data_error(tmp_path, suffix):
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / f"deep{suffix}").write_text(deep if suffix == ".json" else '{"a": ' + deep + "}\n")
    (tmp_path / "dataset_info.json").write_text(json.dumps({"deep": {"file_name": f"deep{suffix}"}}))
    with pytest.raises(DataError, match="too deeply"):
        _read(tmp_path, "deep")


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"file_name": 5}, '"file_name" must be text, found 5 (int)'),
        ({"file_name": "d.json", "ranking": "false"}, '"ranking" must be true or false'),  # bool("false") is True
        ({"file_name": "d.json", "columns": {"response": 5}}, "columns.response must be a column name"),
        ({"file_name": "d.json", "tags": {"role_tag": 5}}, "tags.role_tag must be text"),
        ({"file_name": "d.json", "num_samples": "5"}, '"num_samples" must be a whole number'),
    ],
)
def test_a_dataset_info_value_of_the_wrong_kind_is_named(tmp_path, entry, message):
    with pytest.raises(DataError) as err:
        parse_entry("d", entry, tmp_path)
    assert str(err.value).startswith("dataset_info.json, entry 'd': ") and message in str(err.value)


def test_every_entry_of_llamafactorys_dataset_info_still_parses(reference_data):
    info = json.loads((reference_data / "dataset_info.json").read_text(encoding="utf-8"))
    for name, entry in info.items():
        parse_entry(name, entry, reference_data)


@pytest.mark.parametrize("stage", ["sft", "pt", "kto"])
def test_preference_data_for_a_single_reply_stage_is_refused_by_dataset(reference_data, stage):
    attr = resolve_datasets(["dpo_en_demo"], reference_data)[0]
    with pytest.raises(DataError) as err:
        check_kind_fits_stage(attr, stage)
    assert str(err.value).startswith("Dataset 'dpo_en_demo' is preference data") and f"stage {stage}" in str(err.value)
    check_kind_fits_stage(attr, "dpo")  # what it is for


# ------------------------------------------------------------------ config files and arguments
def test_a_config_not_in_utf8_names_the_byte_and_line(tmp_path):
    path = tmp_path / "latin.yaml"
    path.write_bytes("stage: sft\nmodel_name_or_path: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path} is not UTF-8: byte 34 (line 2: e9 0a)")


@pytest.mark.parametrize("arg", ["=5", " =5", "--=5", "--"])
def test_an_argument_without_an_option_name_is_named(arg):
    with pytest.raises(ConfigError, match="has no option name"):
        parse_overrides([arg])


def test_the_cli_prints_these_without_a_traceback(tmp_path):
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"model_name_or_path: caf\xe9\n")
    proc = subprocess.run(
        [sys.executable, "-m", "tunekit.cli.main", "train", str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {path} is not UTF-8")


# ------------------------------------------------------------------ resume
def test_resume_compares_paths_as_paths(tmp_path, monkeypatch):
    from tunekit.train.resume import training_differences

    (tmp_path / "tiny").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "tiny")
    monkeypatch.chdir(tmp_path)
    saved = {"model_name_or_path": "tiny", "adapter_name_or_path": "tiny,link", "learning_rate": 1e-4}
    same = {
        "model_name_or_path": str(tmp_path / "tiny"),
        "adapter_name_or_path": f"link, {tmp_path}/tiny",
        "learning_rate": 1e-4,
    }
    assert training_differences(saved, same) == []
    other = {**same, "model_name_or_path": "Qwen/tiny"}  # a hub id is text: not the folder of the same name
    assert training_differences(saved, other) == ["model_name_or_path: 'tiny' there, 'Qwen/tiny' here"]


def test_a_record_too_large_to_be_one_sample_is_refused_before_tokenizing(tmp_path):
    from tunekit.data.formats import MAX_RECORD_CHARS, RecordError, convert_record
    from tunekit.data.readers import RawRecord

    attr = parse_entry("d", {"file_name": "d.json"}, tmp_path)
    half = "x" * (MAX_RECORD_CHARS // 2)
    fits = convert_record(RawRecord({"instruction": half, "input": "", "output": half}, "d.json", 0), attr, "sft")
    assert fits["messages"][-1]["content"] == half
    with pytest.raises(RecordError, match=r"^d\.json, record 1: the record holds 4,000,001 characters"):
        convert_record(RawRecord({"instruction": half, "input": "", "output": half + "y"}, "d.json", 1), attr, "sft")


def test_train_without_a_config_says_what_to_give():
    proc = subprocess.run(
        [sys.executable, "-m", "tunekit.cli.main", "train"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: tunekit train needs a config file or options")


# ------------------------------------------------------------------ model folders
def _edited_model(tiny_qwen, tmp_path, **fields):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_qwen, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_config_json_transformers_rejects_is_named_when_loading_and_planning(tiny_qwen, tmp_path):
    from tunekit.errors import ModelError
    from tunekit.model.loader import load_model_config, load_tokenizer
    from tunekit.plan.architectures import load_shape

    folder = _edited_model(tiny_qwen, tmp_path, layer_types=["full_attention"])  # 1 entry for its 2 layers
    cfg = load_config(None, {"model_name_or_path": str(folder)})
    for load in (load_model_config, load_tokenizer):
        with pytest.raises(ModelError, match=rf"^{folder}/config\.json is not a valid configuration \(.*layer_types"):
            load(cfg)
    with pytest.raises(ModelError, match=r"^config\.json of .* is not a valid qwen2 configuration"):
        load_shape(None, str(folder))


def test_a_hidden_size_that_does_not_split_into_heads_is_named_by_the_planner(tiny_qwen, tmp_path):
    from tunekit.errors import ModelError
    from tunekit.plan.architectures import load_shape

    folder = _edited_model(tiny_qwen, tmp_path, num_attention_heads=3, head_dim=None)
    with pytest.raises(ModelError, match="hidden_size 64 does not split into num_attention_heads 3 heads"):
        load_shape(None, str(folder))


def test_plot_loss_with_nothing_logged_says_so(tiny_qwen, tmp_path, capsys):
    """LLaMA-Factory warns when there is no loss to plot; tunekit wrote no PNG and said nothing."""
    from tests.helpers import base_config
    from tunekit.flow import run_train

    write_dataset(tmp_path / "data", "toy", alpaca_records(4))
    out = tmp_path / "out"
    run_train(
        load_config(
            None,
            base_config(
                tiny_qwen, tmp_path / "data", out, max_steps=2, logging_steps=10, plot_loss=True, save_strategy="no"
            ),
        )
    )
    assert (
        "plot_loss: no loss was logged, so no plot was written (logging_steps 10.0 against 2 steps): lower "
        "logging_steps to see the curve."
    ) in capsys.readouterr().out
    assert not list(out.glob("*.png"))
