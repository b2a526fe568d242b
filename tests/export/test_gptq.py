"""GPTQ export without the isolated environment: the reader of the packed weights, the RTN yardstick, the runner's
group size, and every refusal (before anything is written) with its exact message."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from tunekit.config import load_config
from tunekit.errors import ConfigError, EnvironmentProblem
from tunekit.export import gptq_env
from tunekit.export.gptq_check import round_to_nearest, unpack_codes
from tunekit.export.gptq_runner import fitting_group_size


def _pack(codes, bits: int):
    """compressed-tensors' pack-quantized layout, written from its description: ``code + 2**(bits-1)`` as unsigned
    ``bits``-bit fields, ``32 // bits`` per int32 word, the first column in the lowest bits, the last word padded."""
    import torch

    per_word = 32 // bits
    unsigned = codes.to(torch.int64) + (1 << (bits - 1))
    pad = -unsigned.shape[1] % per_word
    unsigned = torch.nn.functional.pad(unsigned, (0, pad))
    fields = unsigned.reshape(unsigned.shape[0], -1, per_word)
    words = (fields << (torch.arange(per_word, dtype=torch.int64) * bits)).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)  # the int32 bit pattern


@pytest.mark.parametrize("bits", [4, 8])
def test_unpack_codes_reads_the_packed_layout_exactly(bits):
    import torch

    top = 2 ** (bits - 1)
    gen = torch.Generator().manual_seed(bits)
    codes = torch.randint(-top, top, (5, 37), generator=gen)  # 37 columns: the last word is padded
    codes[0, :4] = torch.tensor([-top, top - 1, 0, -1])  # both ends of the range and the sign boundary
    assert torch.equal(unpack_codes(_pack(codes, bits), 37, bits), codes.to(torch.float32))


def test_unpack_codes_agrees_with_compressed_tensors_own_packing():
    pytest.importorskip("compressed_tensors", reason="compressed-tensors is tunekit[quant]'s loader for GPTQ exports")
    import torch
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    codes = torch.randint(-8, 8, (3, 64), generator=torch.Generator().manual_seed(0), dtype=torch.int8)
    assert torch.equal(unpack_codes(pack_to_int32(codes, 4), 64, 4), codes.to(torch.float32))


def test_round_to_nearest_uses_the_symmetric_grid_per_group():
    import torch

    weight = torch.tensor([[1.5, -0.2, 0.09, 0.0, 4.0, 2.0, -3.9, 1.1]])
    # group 1: absmax 1.5 -> scale 1.5 / 7.5 = 0.2; w / 0.2 = [7.5 (clamped to 7), -1, 0.45, 0] -> codes [7, -1, 0, 0]
    # group 2: absmax 4 -> scale 4 / 7.5; w / scale = [7.5 (clamped to 7), 3.75, -7.3125, 2.0625] -> [7, 4, -7, 2]
    expected = torch.tensor([[7 * 0.2, -0.2, 0.0, 0.0, 7 * 4 / 7.5, 4 * 4 / 7.5, -7 * 4 / 7.5, 2 * 4 / 7.5]])
    torch.testing.assert_close(round_to_nearest(weight, 4, 4), expected, rtol=0, atol=4 * torch.finfo().eps)


def test_group_size_is_128_unless_a_layer_has_fewer_columns(tiny_qwen):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32)  # hidden 64, intermediate 256
    assert fitting_group_size(model, 128) == 64
    model.model.layers[0].mlp.down_proj = torch.nn.Linear(96, 64)
    assert fitting_group_size(model, 128) == 32
    model.lm_head = torch.nn.Linear(100, 7)  # the LM head is never quantized: its columns do not count
    assert fitting_group_size(model, 128) == 32


def test_runner_does_not_import_tunekit():
    import ast

    from tunekit.export.gptq_export import RUNNER

    tree = ast.parse(RUNNER.read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not [m for m in imported if m.split(".")[0] == "tunekit"]
    assert {"llmcompressor", "llmcompressor.modifiers.gptq"} <= imported


def _gptq_cfg(tiny_qwen, tmp_path, **extra):
    return load_config(
        None,
        dict(
            model_name_or_path=str(tiny_qwen),
            template="qwen",
            export_dir=str(tmp_path / "gptq"),
            export_quantization_bit=4,
            **extra,
        ),
    )


def test_gptq_without_calibration_data_is_refused_before_writing(tiny_qwen, tmp_path):
    from tunekit.export import export_model

    with pytest.raises(ConfigError) as err:
        export_model(_gptq_cfg(tiny_qwen, tmp_path, export_quantization_method="gptq"))
    assert str(err.value) == (
        "export_quantization_method: gptq needs calibration data: set export_quantization_dataset "
        "(a dataset name from dataset_info.json or a file path). Nothing was written."
    )
    assert not (tmp_path / "gptq").exists()


def test_gptq_without_compressed_tensors_names_the_package(tiny_qwen, tmp_path, monkeypatch):
    from tunekit.export import export_model

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "compressed_tensors" else real(name, *a)
    )
    with pytest.raises(EnvironmentProblem) as err:
        export_model(_gptq_cfg(tiny_qwen, tmp_path, export_quantization_dataset="calib.json"))
    assert str(err.value) == (
        "export_quantization_bit 4 with export_quantization_dataset calib.json means GPTQ (as in LLaMA-Factory), "
        "which writes the compressed-tensors format, and transformers loads it (tunekit checks the export by loading "
        "it) through the compressed-tensors package, missing here: pip install 'tunekit[quant]' (or pip install "
        "'compressed-tensors==0.19.0'). Nothing was written."
    )
    assert not (tmp_path / "gptq").exists()


def test_gptq_python_override_must_exist(tmp_path, monkeypatch):
    monkeypatch.setenv(gptq_env.PYTHON_VAR, str(tmp_path / "nope" / "python"))
    with pytest.raises(EnvironmentProblem) as err:
        gptq_env.gptq_python()
    assert str(err.value) == (
        f"TUNEKIT_GPTQ_PYTHON={tmp_path / 'nope' / 'python'} is not a file: name the python of an environment with "
        f"llmcompressor==0.14.0.1 transformers==5.17.0, or unset it and tunekit builds one. Nothing was written."
    )


def test_environment_key_follows_the_exact_pins(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv(gptq_env.ENVS_VAR, str(tmp_path))
    pins = gptq_env.env_pins()
    assert pins == [f"torch=={torch.__version__}", "llmcompressor==0.14.0.1", "transformers==5.17.0"]
    folder = gptq_env.env_dir(pins)
    assert folder.parent == tmp_path and folder.name.startswith("gptq-")
    assert gptq_env.env_dir([*pins[:-1], "transformers==5.17.1"]) != folder
    assert gptq_env.torch_index_args("torch==2.13.0+cpu") == [
        "--extra-index-url",
        "https://download.pytorch.org/whl/cpu",
    ]
    assert gptq_env.torch_index_args("torch==2.13.0") == []


def test_offline_export_stops_before_merging_with_what_to_do(tiny_qwen, tmp_path, monkeypatch, capsys):
    """pip without any index (offline): the export stops before the merge; the message names the step, pip's last
    line, the log and the two ways out; the unfinished environment is not marked ready, so the next export builds
    it again."""
    from tunekit.export import export_model

    real = importlib.util.find_spec  # compressed-tensors present (tunekit[quant]), whether or not it is here
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "compressed_tensors" else real(name, *a)
    )
    monkeypatch.setenv(gptq_env.ENVS_VAR, str(tmp_path / "envs"))
    monkeypatch.delenv(gptq_env.PYTHON_VAR, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no find-links / extra index from this machine's pip.conf
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    for name in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    pins = gptq_env.env_pins()
    folder = gptq_env.env_dir(pins)
    with pytest.raises(EnvironmentProblem) as err:
        export_model(_gptq_cfg(tiny_qwen, tmp_path, export_quantization_dataset="calib.json"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["envs"]  # no export_dir, no merge folder
    log = tmp_path / "envs" / f"{folder.name}.log"
    last = [line for line in log.read_text().splitlines() if line.strip()][-1]
    assert last.startswith("ERROR: No matching distribution found for torch==")
    index_args = " ".join(gptq_env.torch_index_args(pins[0]))
    assert str(err.value) == (
        f"GPTQ export runs llm-compressor in its own environment, and creating it in {folder} failed: "
        f"`pip install --no-input {pins[0]}{' ' + index_args if index_args else ''}` exited with 1 ({last}; the "
        f"whole log: {log}). It needs PyPI (about 1.5 GB with a CPU torch, once per machine): connect this machine "
        f"to the network and export again, or build the environment elsewhere with `python -m venv ENV && "
        f"ENV/bin/pip install {' '.join(pins)}` and point TUNEKIT_GPTQ_PYTHON at ENV/bin/python. Nothing was written."
    )
    assert folder.is_dir() and not (folder / gptq_env.MARKER).exists()
    assert f"creating {folder} with {' '.join(pins)}" in capsys.readouterr().out


def test_calibration_texts_render_conversations_and_keep_plain_text(tiny_qwen, tmp_path, reference_data):
    """A conversation dataset is rendered by the training template; LLaMA-Factory's own GPTQ example
    (merge_lora/qwen3_gptq.yaml) calibrates on c4_demo.jsonl, plain ``{"text": ...}`` records, taken as they are."""
    from transformers import AutoTokenizer

    from tests.helpers import write_dataset
    from tunekit.data.pipeline import load_template
    from tunekit.export.quantize import calibration_texts

    write_dataset(tmp_path, "calib", [{"instruction": "What is 2 plus 3?", "input": "", "output": "5"}])
    cfg = _gptq_cfg(tiny_qwen, tmp_path, export_quantization_dataset="calib", dataset_dir=str(tmp_path))
    template = load_template(cfg, AutoTokenizer.from_pretrained(tiny_qwen))
    assert calibration_texts(cfg, template) == [
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 plus 3?<|im_end|>\n<|im_start|>assistant\n5<|im_end|>"  # as training renders it
    ]
    c4 = reference_data / "c4_demo.jsonl"
    cfg = _gptq_cfg(tiny_qwen, tmp_path, export_quantization_dataset=str(c4), export_quantization_nsamples=3)
    expected = [json.loads(line)["text"] for line in c4.read_text(encoding="utf-8").splitlines()[:3]]
    assert calibration_texts(cfg, template) == expected


def test_a_failing_runner_shows_its_last_lines(tiny_qwen, tmp_path):
    """tunekit's own interpreter has no llm-compressor: the runner fails there, and the error shows why."""
    from tunekit.errors import ModelError
    from tunekit.export.gptq_export import RUNNER, run_runner

    request = dict(model=str(tiny_qwen), out=str(tmp_path / "q"), bits=4, group_size=128, texts=["hi"], max_length=8)
    with pytest.raises(ModelError) as err:
        run_runner(Path(sys.executable), {**request, "max_shard_bytes": 10**9}, tmp_path / "work")
    message = str(err.value)
    assert message.startswith(f"GPTQ quantization ({sys.executable} {RUNNER.name}) failed with exit code 1:\n")
    assert message.endswith("ModuleNotFoundError: No module named 'llmcompressor'")
    assert not (tmp_path / "q").exists()
