"""Option messages: LLaMA-Factory options tunekit lacks are named as such, "did you mean" only for
real typos, and model-path mistakes are not reported as hub downloads."""

from __future__ import annotations

import json

import pytest

from tunekit.config import Config, load_config
from tunekit.config.llamafactory_options import LLAMAFACTORY_OPTIONS, unsupported
from tunekit.config.loader import GC_KWARGS, suggest
from tunekit.config.schema import FORMER_NAMES
from tunekit.errors import ConfigError, ModelError

KNOWN = set(Config.model_fields) | set(FORMER_NAMES) | {GC_KWARGS}  # the schema's options, the names it reads


def _error(*args: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(None, list(args))
    return str(err.value)


def test_llamafactory_option_that_tunekit_lacks_is_named_so():
    assert "use_kt" in LLAMAFACTORY_OPTIONS and "use_kt" not in KNOWN
    assert _error("use_kt=true") == (
        "`use_kt` is a LLaMA-Factory option that tunekit does not support (yet) (on the command line): "
        "remove it; `tunekit train --help` lists what tunekit supports. (KTransformers (LLaMA-Factory's use_kt: MoE "
        "experts computed by its CPU/GPU kernels) is a GPU-only engine that tunekit does not have: LoRA on an MoE "
        "model runs through transformers and peft (docs/moe.md).)"
    )


def lines(err) -> list[str]:
    return str(err.value).splitlines()


def test_unsupported_list_is_llamafactory_minus_the_schema():
    # computed, never hard-coded: an option the schema gains (use_llama_pro, use_muon, ...) drops out by itself
    assert unsupported(KNOWN) == LLAMAFACTORY_OPTIONS - KNOWN
    assert unsupported(KNOWN - {"use_llama_pro"}) >= {"use_llama_pro"}
    values = dict.fromkeys(sorted(unsupported(KNOWN)), 1)
    with pytest.raises(ConfigError) as err:
        load_config(None, values)
    named = sorted(name for problem in err.value.problems for name in problem.fields)
    assert named == sorted(values)  # each named once: one line per engine (Ray, Megatron-Core, ...), the rest one
    assert all("LLaMA-Factory option" in line and "tunekit does not support (yet)" in line for line in lines(err))
    for name in ("learning_rate", "lora_rank", "template", "use_llama_pro", "use_muon"):
        assert name in LLAMAFACTORY_OPTIONS and name not in unsupported(KNOWN), name  # supported: no such message


@pytest.mark.parametrize(
    "name, choices, expected",
    [
        ("use_llama_pro", ["lam", "use_cpu", "lora_rank"], []),  # was: lam (a substring)
        ("use_muon", ["use_cpu", "use_dora", "lam"], []),  # was: use_cpu (3 edits in 8 characters)
        (
            "model",
            ["ref_model", "reward_model", "model_name_or_path", "model_revision"],
            ["model_name_or_path", "model_revision"],
        ),
        ("lora_rnak", ["lora_rank", "lora_alpha", "lora_target", "galore_rank"], ["lora_rank"]),  # a swap is one edit
        ("learning_rat", ["learning_rate", "warmup_ratio"], ["learning_rate"]),
        (
            "per_device_train_batch",
            ["per_device_train_batch_size", "per_device_eval_batch_size"],
            ["per_device_train_batch_size"],
        ),
        ("lr", ["lam", "lora_rank"], []),
    ],
)
def test_did_you_mean_only_for_real_typos(name, choices, expected):
    assert suggest(name, choices) == expected


def test_unknown_option_messages():
    assert _error("lora_rnak=4") == "Unknown option 'lora_rnak' (on the command line). Did you mean: lora_rank?"
    assert _error("model=Qwen/Qwen2.5-0.5B") == (
        "Unknown option 'model' (on the command line). Did you mean: model_name_or_path, model_revision?"
    )
    assert (
        _error("qwertyuiop=1")
        == "Unknown option 'qwertyuiop' (on the command line). See `tunekit train --help` for the options."
    )
    long_key = "k" * 5000
    message = _error(f"{long_key}=1")
    assert len(message) < 200 and "kkk...kkk" in message


def _model_error(path) -> str:
    from tunekit.model.loader import load_tokenizer

    with pytest.raises(ModelError) as err:
        load_tokenizer(load_config(None, {"model_name_or_path": str(path), "template": "qwen"}))
    return str(err.value)


def test_wrong_local_path_is_not_a_hub_download(tmp_path, monkeypatch):
    missing = tmp_path / "models" / "qwen"
    assert _model_error(missing) == (
        f"Model folder {missing} does not exist (model_name_or_path). Check the path, or use "
        f"a hub id like Qwen/Qwen2.5-0.5B."
    )
    # org/name is a hub id unless its first part is a folder here: saves/qwen-run with saves/ present is a wrong path
    monkeypatch.chdir(tmp_path)
    (tmp_path / "saves").mkdir()
    assert _model_error("saves/qwen-run") == (
        "Model folder saves/qwen-run does not exist (model_name_or_path). Check the "
        "path, or use a hub id like Qwen/Qwen2.5-0.5B."
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "huggingface-cli download someorg/not-cached" in _model_error(
        "someorg/not-cached"
    )  # a hub id keeps the hint


def test_adapter_folder_given_as_model_says_adapter_name_or_path(tmp_path):
    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": "/models/base", "peft_type": "LORA"})
    )
    (tmp_path / "adapter_model.safetensors").write_bytes(b"")
    assert _model_error(tmp_path) == (
        f"{tmp_path} is a LoRA adapter folder (adapter_config.json), not a model: set model_name_or_path to its base "
        f"model (/models/base) and adapter_name_or_path: {tmp_path}."
    )
