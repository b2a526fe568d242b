"""``fsdp_transformer_layer_cls_to_wrap`` (Hugging Face's and LLaMA-Factory's option): the classes tunekit's FSDP2
shards as their own units, each checked against the loaded model, with an error that names the option."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from transformers import AutoModelForCausalLM

from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.train.engines import distributed, fsdp


def _cfg(**values):
    return load_config(None, {"model_name_or_path": "m", "output_dir": "o", "fsdp": "full_shard", **values})


def test_the_option_sets_the_units_and_clashes_with_the_same_key_in_fsdp_config(tmp_path):
    settings = distributed.fsdp_settings(_cfg(fsdp_transformer_layer_cls_to_wrap=["Qwen2DecoderLayer", "Qwen2MLP"]))
    assert settings.wrap_classes == ("Qwen2DecoderLayer", "Qwen2MLP")
    assert distributed.fsdp_settings(_cfg()).wrap_classes == ()  # the model's _no_split_modules
    path = tmp_path / "fsdp.json"
    path.write_text(json.dumps({"fsdp_transformer_layer_cls_to_wrap": ["Qwen2MLP"]}))
    with pytest.raises(ConfigError) as err:
        distributed.fsdp_settings(_cfg(fsdp_config=str(path), fsdp_transformer_layer_cls_to_wrap="Qwen2DecoderLayer"))
    assert str(err.value) == (
        "fsdp_transformer_layer_cls_to_wrap and fsdp_config's transformer_layer_cls_to_wrap are both set: keep one of "
        "them."
    )


def test_llamafactory_fp8_fsdp_example_keys_load_and_name_the_units(tmp_path):
    """LLaMA-Factory's examples/extras/fp8/llama3_fp8_fsdp_sft.yaml writes fsdp as Hugging Face's list and the layer
    class as a top-level option (refused by name before)."""
    path = tmp_path / "llama3_fp8_fsdp_sft.yaml"
    path.write_text(
        "model_name_or_path: m\noutput_dir: o\nstage: sft\ndo_train: true\nfinetuning_type: full\nbf16: true\n"
        "fp8: true\nfp8_backend: torchao\nfp8_enable_fsdp_float8_all_gather: true\nfsdp:\n  - full_shard\n"
        "  - auto_wrap\nfsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n"
    )
    settings = distributed.fsdp_settings(load_config(path))
    assert (settings.strategy, settings.reshard_after_forward, settings.wrap_classes) == (
        "full_shard",
        True,
        ("LlamaDecoderLayer",),
    )


def test_a_class_the_model_lacks_is_refused_naming_the_option(tiny_qwen):
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen)
    settings = distributed.fsdp_settings(
        _cfg(fsdp_transformer_layer_cls_to_wrap="Qwen2DecoderLayer,LlamaDecoderLayer")
    )
    with pytest.raises(ConfigError) as err:
        fsdp.wrap_units(model, settings)
    assert str(err.value) == (
        "fsdp_transformer_layer_cls_to_wrap (or fsdp_config's transformer_layer_cls_to_wrap) names LlamaDecoderLayer, "
        "which Qwen2ForCausalLM has no module of (its decoder layer classes: Qwen2DecoderLayer): name classes of the "
        "loaded model, or remove the option to shard its decoder layers."
    )
    layers = fsdp.wrap_units(model, distributed.fsdp_settings(_cfg()))
    assert [type(m).__name__ for m in layers] == ["Qwen2DecoderLayer"] * model.config.num_hidden_layers


def test_the_named_class_is_what_fsdp_shards(tiny_qwen):
    """One rank (world size 1, gloo) in this process: naming the MLP shards each MLP as a unit instead of each decoder
    layer, and the sharded model computes the same logits."""
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen)
    ids = torch.tensor([[3, 14, 15, 92, 65, 35]])
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    settings = distributed.fsdp_settings(_cfg(fsdp_transformer_layer_cls_to_wrap="Qwen2MLP"))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        fsdp.shard(model, settings, torch.device("cpu"))
        units = sorted(type(m).__name__ for m in model.modules() if isinstance(m, FSDPModule))
        assert units == ["FSDPQwen2ForCausalLM"] + ["FSDPQwen2MLP"] * model.config.num_hidden_layers
        with torch.no_grad():
            assert torch.equal(model(input_ids=ids).logits, expected)  # one rank: gathering changes no value
    finally:
        dist.destroy_process_group()
