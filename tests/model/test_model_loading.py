"""Model loading options and their errors: attention kernels, RoPE scaling, quantization, methods."""

from __future__ import annotations

import pytest
import torch

from tunekit.config import load_config
from tunekit.errors import ConfigError, EnvironmentProblem, ModelError
from tunekit.model.loader import load_model, load_tokenizer


def _cfg(model, **kw):
    return load_config(None, {"model_name_or_path": str(model), "template": "qwen", **kw})


def _load(model, **kw):
    cfg = _cfg(model, **kw)
    return load_model(cfg, load_tokenizer(cfg)), cfg


def test_fa2_fails_clearly_without_gpu(tiny_qwen):
    with pytest.raises(EnvironmentProblem, match=r"flash_attn: fa2 needs .*(flash-attn|GPU)"):
        _load(tiny_qwen, flash_attn="fa2")


def test_an_attention_the_model_does_not_offer_is_refused_by_name(tmp_path):
    """gpt-oss's attention sinks have no SDPA path in transformers: flash_attn: sdpa is refused in tunekit's words
    (before any weight is read), and auto loads it with transformers' own choice, eager."""
    from tunekit.tiny.text import build_tiny_model

    build_tiny_model(tmp_path / "oss", like="gpt-oss-20b")
    with pytest.raises(ModelError) as refused:
        _load(tmp_path / "oss", flash_attn="sdpa", template="gpt_oss")
    assert str(refused.value).startswith(
        f"flash_attn: sdpa cannot load {tmp_path / 'oss'}: transformers says 'GptOssForCausalLM does not support "
        "an attention implementation through torch.nn.functional.scaled_dot_product_attention yet'. Use "
        "flash_attn: auto (transformers' own choice for this model) or eager."
    )
    model, _ = _load(tmp_path / "oss", template="gpt_oss")
    assert model.config._attn_implementation == "eager"


def test_liger_fails_clearly_without_gpu(tiny_qwen):
    with pytest.raises(EnvironmentProblem, match=r"enable_liger_kernel needs"):
        _load(tiny_qwen, enable_liger_kernel=True)


def test_default_attention_is_sdpa_and_checkpointing_on(tiny_qwen):
    model, _ = _load(tiny_qwen)
    assert model.config._attn_implementation == "sdpa"
    assert model.base_model.model.is_gradient_checkpointing


def test_rope_scaling_reaches_target_length(tiny_qwen):
    from transformers import AutoConfig

    base = AutoConfig.from_pretrained(tiny_qwen).max_position_embeddings
    model, _ = _load(tiny_qwen, rope_scaling="linear", cutoff_len=base * 3 - 5, finetuning_type="full")
    params = model.config.rope_parameters
    assert params["rope_type"] == "linear" and params["factor"] == 3.0
    assert model.config.max_position_embeddings == base * 3
    with torch.no_grad():
        assert torch.isfinite(model(torch.tensor([[1, 2, 3, 4]])).logits).all()


def test_lora_target_names_are_checked(tiny_qwen):
    with pytest.raises(
        ConfigError,
        match=r"lora_target names qkv_proj, which are not linear layers of this model; available: .*q_proj",
    ):
        _load(tiny_qwen, lora_target="q_proj,qkv_proj")


def test_freeze_modules_are_checked(tiny_qwen):
    with pytest.raises(
        ConfigError,
        match=r"freeze_trainable_modules names attention, which the layers do not have; available: .*mlp.*self_attn",
    ):
        _load(tiny_qwen, finetuning_type="freeze", freeze_trainable_modules="attention")
    model, _ = _load(
        tiny_qwen,
        finetuning_type="freeze",
        freeze_trainable_layers=-1,
        freeze_trainable_modules="mlp",
        freeze_extra_modules="norm",
    )
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("model.layers.0.mlp.") or n == "model.norm.weight" for n in trainable), (
        trainable
    )


def test_missing_model_and_offline_hub_id(tmp_path, monkeypatch):
    with pytest.raises(ModelError, match="has no config.json: it is not a Hugging Face model folder"):
        load_tokenizer(_cfg(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        ModelError,
        match=r"Could not load 'someorg/not-cached-model' \(HF_HUB_OFFLINE is set and it is not in the local cache\)",
    ):
        load_tokenizer(_cfg("someorg/not-cached-model"))


def test_qlora_4bit_builds_and_trains_a_step(tiny_qwen):
    pytest.importorskip("bitsandbytes")
    model, _ = _load(tiny_qwen, quantization_bit=4, lora_rank=4)
    assert any(type(m).__name__ == "Linear4bit" for m in model.modules())
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])
    losses = []
    for _ in range(3):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_qlora_keeps_unquantized_weights_in_the_load_dtype(tiny_qwen):
    """No fp32 upcast of embeddings / norms / lm_head (PEFT's prepare_model_for_kbit_training would add 2 B each)."""
    pytest.importorskip("bitsandbytes")
    model, _ = _load(tiny_qwen, quantization_bit=4, lora_rank=4, dtype="bfloat16")
    base = model.get_base_model()
    assert base.get_input_embeddings().weight.dtype == torch.bfloat16
    assert base.model.norm.weight.dtype == torch.bfloat16
    frozen_float = {p.dtype for n, p in model.named_parameters() if not p.requires_grad and p.dtype.is_floating_point}
    assert frozen_float == {torch.bfloat16}, frozen_float
    trainable = [(n, p.dtype) for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n and d == torch.float32 for n, d in trainable), trainable
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])
    model(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_a_lora_rank_larger_than_every_adapted_layer_is_refused_before_training(tiny_qwen, tmp_path):
    """tiny_qwen: hidden 64, 2 KV heads of 16 (k/v_proj 64 -> 32), MLP 256; a LoRA update of a layer has rank at most
    min(d_in, d_out), 64 at most here. Rank 64 still builds; 65 or 100000 (which used to allocate 100000 x 256 adapters
    per layer and train) are refused, in plain loading and by `tunekit train` before anything is written."""
    from tests.helpers import alpaca_records, base_config, write_dataset
    from tunekit.flow import run_train

    message = (
        "lora_rank {} is larger than any adapted layer can use: a LoRA update of a d_in x d_out layer has rank at "
        "most min(d_in, d_out), and the adapted layers are 64x32, 64x64, 64x256, 256x64 (in x out); set lora_rank "
        "to at most 64."
    )
    assert _load(tiny_qwen, lora_rank=64)[0].peft_config["default"].r == 64
    with pytest.raises(ConfigError) as err:
        _load(tiny_qwen, lora_rank=65)
    assert str(err.value) == message.format(65)
    data, out = tmp_path / "data", tmp_path / "out"
    write_dataset(data, "toy", alpaca_records(4))
    with pytest.raises(ConfigError) as err:
        run_train(load_config(None, base_config(tiny_qwen, data, out, lora_rank=100000, max_steps=1)))
    assert str(err.value) == message.format(100000)
    assert not out.exists() or not any(out.iterdir())
    with pytest.raises(
        ConfigError,
        match=r"^lora_rank 40 is larger than any adapted layer can use: .* the adapted layers "
        r"are 64x32 \(in x out\); set lora_rank to at most 32\.$",
    ):
        _load(tiny_qwen, lora_rank=40, lora_target="k_proj,v_proj")


def test_weights_of_another_architecture_are_refused_unless_new_weights_are_allowed(tiny_qwen, tmp_path):
    """Qwen2 weights under a Qwen3 config.json: Qwen3 has q_norm / k_norm (2 layers x 2, missing: they would start
    random) and no q/k/v biases (2 layers x 3, unexpected: dropped). transformers only prints a load report and
    training went on; now it is refused by name, or loaded as asked with allow_new_weights."""
    import json
    import shutil

    from tests.helpers import alpaca_records, base_config, write_dataset
    from tunekit.flow import run_train
    from tunekit.tiny.text import build_tiny_model

    folder = tmp_path / "mixed"
    shutil.copytree(tiny_qwen, folder)
    qwen3 = json.loads((build_tiny_model(tmp_path / "qwen3", like="qwen3") / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(qwen3))
    message = (
        f"the weights in {folder} do not belong to its config.json's architecture (Qwen3ForCausalLM): 4 weights "
        f"it needs are missing and would start random (e.g. model.layers.0.self_attn.k_norm.weight, "
        f"model.layers.0.self_attn.q_norm.weight, model.layers.1.self_attn.k_norm.weight); 6 weights in the "
        f"folder have no place in it and would be dropped (e.g. model.layers.0.self_attn.k_proj.bias, "
        f"model.layers.0.self_attn.q_proj.bias, model.layers.0.self_attn.v_proj.bias). Check that config.json "
        f"and the weight files come from the same model, or set allow_new_weights: true if the difference is "
        f"intended."
    )
    with pytest.raises(ModelError) as err:
        _load(folder)
    assert str(err.value) == message
    data, out = tmp_path / "data", tmp_path / "out"
    write_dataset(data, "toy", alpaca_records(4))
    with pytest.raises(ModelError) as err:
        run_train(load_config(None, base_config(folder, data, out, max_steps=1)))
    assert str(err.value) == message and (not out.exists() or not any(out.iterdir()))
    model, _ = _load(folder, allow_new_weights=True, finetuning_type="full")
    assert type(model).__name__ == "Qwen3ForCausalLM"


def test_weights_of_other_shapes_than_the_config_are_a_named_error(tiny_qwen, tmp_path):
    """intermediate_size 128 in config.json, 256-wide MLP weights in the folder: transformers raised a bare
    RuntimeError (ignore_mismatched_sizes) that ended the run with a traceback."""
    import json
    import shutil

    folder = tmp_path / "resized"
    shutil.copytree(tiny_qwen, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "intermediate_size": 128}))
    with pytest.raises(ModelError) as err:
        _load(folder)
    assert str(err.value) == (
        f"the weights in {folder} do not belong to its config.json's architecture (Qwen2ForCausalLM): "
        f"some have other shapes than the config gives them (transformers' load report above lists "
        f"them). Check that config.json and the weight files come from the same model."
    )
