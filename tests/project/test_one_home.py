"""Small mechanisms, each with one home: adapter paths, launcher rank/world size, the option JSON
reader, the tiny model's chat templates, RAYON_NUM_THREADS, the board's results and GPU default."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tunekit.config import load_config
from tunekit.errors import ConfigError, EnvironmentProblem


def test_adapter_paths_split_once():
    cfg = load_config(None, {"model_name_or_path": "m", "adapter_name_or_path": " a, b ,,c "})
    assert cfg.adapter_paths == ["a", "b", "c"]
    assert load_config(None, {"model_name_or_path": "m"}).adapter_paths == []


def test_launcher_variables_read_one_way(monkeypatch):
    from tunekit.env import env_local_rank, env_rank, env_world_size

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert (env_rank(), env_local_rank(), env_world_size()) == (0, 0, None)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert (env_rank(), env_local_rank(), env_world_size()) == (3, 1, 8)
    monkeypatch.setenv("WORLD_SIZE", "eight")
    with pytest.raises(EnvironmentProblem) as err:
        env_world_size()
    assert str(err.value) == (
        "The environment variable WORLD_SIZE='eight' is not a whole number; unset it or let the "
        "launcher (torchrun, deepspeed) set it."
    )


def test_option_json_files_share_one_reader(tmp_path):
    from tunekit.config.jsonfile import read_json_object
    from tunekit.train.engines.deepspeed_config import read_deepspeed

    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        read_deepspeed(str(listed))
    assert str(err.value) == f"deepspeed: {listed} must hold a JSON object, found list."
    with pytest.raises(ConfigError) as err:
        read_json_object(listed, "fsdp_config")
    assert str(err.value) == f"fsdp_config: {listed} must hold a JSON object, found list."
    good = tmp_path / "ds.json"
    good.write_text(json.dumps({"zero_optimization": {"stage": 2}}), encoding="utf-8")
    assert read_deepspeed(str(good)).stage == 2


def test_tiny_model_templates_come_from_the_registry():
    from tunekit.data.templates import get_template
    from tunekit.tiny import tokenizer as tiny

    assert not hasattr(tiny, "_FALLBACK_TEMPLATES")
    for fam in tiny.TOKENIZERS.values():
        assert tiny.chat_template_for(fam.template) == get_template(fam.template).chat_template_jinja()
    with pytest.raises(ConfigError):  # an unknown name surfaces, no silent copy takes over
        tiny.chat_template_for("no-such-template")


def test_importing_tiny_leaves_rayon_alone_and_training_restores_it():
    code = (
        "import os\nimport tunekit.tiny.tokenizer as t\nprint(repr(os.environ.get('RAYON_NUM_THREADS')))\n"
        "os.environ['RAYON_NUM_THREADS'] = '3'\nt.trained_tokenizer_json(t.TOKENIZERS['qwen'], 600)\n"
        "print(repr(os.environ.get('RAYON_NUM_THREADS')))\n"
        "del os.environ['RAYON_NUM_THREADS']\nt.trained_tokenizer_json(t.TOKENIZERS['llama3'], 600)\n"
        "print(repr(os.environ.get('RAYON_NUM_THREADS')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAYON_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "'3'", "None"]


def test_board_results_merge_every_results_file(tmp_path):
    from tunekit.webui.monitor import read_results

    (tmp_path / "eval_results.json").write_text(json.dumps({"eval_loss": 1.5}), encoding="utf-8")
    (tmp_path / "predict_results.json").write_text(
        json.dumps({"predict_bleu-4": 12.5, "predict_rouge-l": 30.25}), encoding="utf-8"
    )
    (tmp_path / "all_results.json").write_text("{not json", encoding="utf-8")  # being written: skipped
    assert read_results(tmp_path) == {"eval_loss": 1.5, "predict_bleu-4": 12.5, "predict_rouge-l": 30.25}
    assert read_results(tmp_path / "missing") == {}


def test_gpu_picker_default_is_the_detected_gpu_or_none(monkeypatch, tmp_path):
    from tunekit.webui import backend as adapters

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on PATH
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert adapters.detected_gpu() == adapters.NO_GPU == ""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3'\necho 'NVIDIA H100 80GB HBM3'\n", encoding="utf-8")
    smi.chmod(0o755)
    assert adapters.detected_gpu() == "H100-SXM"
    smi.write_text("#!/bin/sh\necho 'NVIDIA GeForce RTX 4090'\n", encoding="utf-8")
    assert adapters.detected_gpu() == "RTX-4090"
    smi.write_text("#!/bin/sh\necho 'Some Unknown Accelerator'\n", encoding="utf-8")
    assert adapters.detected_gpu() == ""
