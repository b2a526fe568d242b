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
    with pytest.raises(ConfigError, match=r"lora_target names qkv_proj, which are not linear layers of this model; available: .*q_proj"):
        _load(tiny_qwen, lora_target="q_proj,qkv_proj")


def test_freeze_modules_are_checked(tiny_qwen):
    with pytest.raises(ConfigError, match=r"freeze_trainable_modules names attention, which the layers do not have; available: .*mlp.*self_attn"):
        _load(tiny_qwen, finetuning_type="freeze", freeze_trainable_modules="attention")
    model, _ = _load(tiny_qwen, finetuning_type="freeze", freeze_trainable_layers=-1, freeze_trainable_modules="mlp",
                     freeze_extra_modules="norm")
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("model.layers.0.mlp.") or n == "model.norm.weight" for n in trainable), trainable


def test_missing_model_and_offline_hub_id(tmp_path, monkeypatch):
    with pytest.raises(ModelError, match="has no config.json: it is not a Hugging Face model folder"):
        load_tokenizer(_cfg(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match=r"Could not load 'someorg/not-cached-model' \(HF_HUB_OFFLINE is set and it is not in the local cache\)"):
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
