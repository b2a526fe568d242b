"""The planner's activations for P-Tuning v2 and prompt tuning against what autograd keeps in a real forward pass of
the tiny Qwen2 (plan/prefix_activations.py): the prefix's keys and values in every layer's attention (repeated to the
query heads, as SDPA gets a mask), that mask, and the prefix MLP's activations; prompt tuning's virtual tokens as
longer rows. Within the bound of the dense activation tests (tests/plan/test_plan_memory.py)."""

from __future__ import annotations

import shutil

import pytest
import torch

from tests.memory_helpers import measured_cfg, saved_storage_bytes
from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.model.elementwise_recompute import enable_for_training
from tunekit.model.loader import load_model, load_tokenizer
from tunekit.plan.activations import saved_bytes
from tunekit.plan.architectures import load_shape
from tunekit.plan.params import count_params
from tunekit.plan.planner import make_plan
from tunekit.plan.prefix_activations import prefix_saved_bytes
from tunekit.plan.training_setup import memory_seq_len, planned_machine, resolve_setup
from tunekit.tiny.text import build_tiny_model
from tunekit.train.decisions import decide_features
from tunekit.train.preflight import check_paths

ACTIVATION_BOUND = 0.10  # the dense models' bound (test_activation_bytes_within_10_percent)
# ChatGLM's P-Tuning v2 scripts train pre_seq_len 128: a prefix longer than these rows, so its terms dominate
METHODS = {
    "ptuning-fp32": dict(finetuning_type="ptuning", pre_seq_len=128),
    "ptuning-projection-bf16": dict(
        finetuning_type="ptuning", pre_seq_len=128, prefix_projection=True, prefix_hidden_size=96, bf16=True
    ),
    "prompt-fp32": dict(finetuning_type="prompt", num_virtual_tokens=24),
}


@pytest.mark.parametrize("method", list(METHODS))
def test_prefix_and_prompt_activation_bytes_within_the_dense_bound(method, tiny_qwen):
    shape = load_shape(None, str(tiny_qwen))
    cfg = measured_cfg(tiny_qwen, 32, 1, template="qwen", **METHODS[method])
    model = load_model(cfg, load_tokenizer(cfg), is_trainable=True).train()
    enable_for_training(model, decide_features(cfg, planned_machine(cfg)).elementwise_recompute.detail)
    errors = []
    for seq, batch in ((32, 1), (64, 2)):
        cfg = measured_cfg(tiny_qwen, seq, batch, template="qwen", **METHODS[method])
        rows, _ = memory_seq_len(cfg)  # prompt tuning: cutoff_len + num_virtual_tokens, as tunekit plan plans it
        setup = resolve_setup(cfg, seq_len=rows).with_(padded=False)  # the ids below carry no mask of their own
        planned = saved_bytes(shape, setup, count_params(shape, setup))["total"]
        torch.manual_seed(1)
        ids = torch.randint(0, shape.vocab, (batch, seq))

        def forward(ids=ids, autocast=cfg.bf16):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                return model(input_ids=ids, labels=ids).loss

        measured = saved_storage_bytes(model, forward)
        errors.append((seq, batch, planned, measured, round(planned / measured - 1, 4)))
    assert all(abs(e[-1]) < ACTIVATION_BOUND for e in errors), errors


def test_the_prefix_terms_term_by_term(tiny_qwen):
    """128 prefix positions in front of 2 rows of 64 tokens, fp32, GQA on SDPA (repeated to the 4 query heads): per
    layer the prefix's keys and values 2 x 4 x q x 128 x 2 and the fp32 mask 4 x 64 x (128 + 64) x 2; once, the
    prefix encoder's indices 8 x 128 x 2, and with the projection (hidden 96) its input and tanh output."""
    shape = load_shape(None, str(tiny_qwen))
    assert shape.kv_heads < shape.heads  # grouped-query attention: SDPA repeats the prefix's kv heads too
    plain = resolve_setup(measured_cfg(tiny_qwen, 64, 2, template="qwen", **METHODS["ptuning-fp32"]))
    layer = 2 * 4 * shape.q_dim * 128 * 2 + 4 * 64 * (128 + 64) * 2
    assert prefix_saved_bytes(shape, plain, shape.layers) == shape.layers * layer + 8 * 128 * 2
    projected = resolve_setup(
        measured_cfg(tiny_qwen, 64, 2, template="qwen", **METHODS["ptuning-fp32"], prefix_projection=True)
    )
    projected = projected.with_(prompt=("ptuning", 128, True, 96))
    encoder = 8 * 128 * 2 + 4 * (shape.kv_dim + 96) * 128 * 2
    assert prefix_saved_bytes(shape, projected, shape.layers) == shape.layers * layer + encoder
    eager = plain.with_(attn="eager")  # the scores over the prefix instead of a mask: fp32 softmax, 4 x a x P x s x B
    layer = 2 * 4 * shape.q_dim * 128 * 2 + 4 * shape.heads * 128 * 64 * 2
    assert prefix_saved_bytes(shape, eager, shape.layers) == shape.layers * layer + 8 * 128 * 2
    lora = resolve_setup(measured_cfg(tiny_qwen, 64, 2, template="qwen", finetuning_type="lora"))
    assert prefix_saved_bytes(shape, lora, shape.layers) == 0


# DeepSeek-V2/V3's multi-head latent attention: P-Tuning is refused (model/prompt_adapters.check_prefix_attention)
LATENT_REFUSAL = (
    "finetuning_type ptuning cannot train deepseek_v3: its multi-head latent attention caches one compressed latent "
    "per token (kv_lora_rank {rank} wide) and a shared rotary key (qk_rope_head_dim {rope}), not per-head keys and "
    "values, so PEFT's prefix (pre_seq_len keys and values per head and layer) does not fit its cache. Use "
    "finetuning_type prompt (num_virtual_tokens) or lora."
)


@pytest.fixture(scope="module")
def tiny_deepseek(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("mla") / "deepseek-v3", like="deepseek-v3", seed=0)


def test_peft_s_prefix_does_not_fit_latent_attention_s_cache(tiny_deepseek):
    """Why ``ptuning`` is refused on latent attention: PEFT 0.21.2 builds the prefix as 4 heads of keys and values
    per layer, and transformers 5.24's DeepSeek-V3 caches its latent as one head (kv_lora_rank 16) with the shared
    rotary key (8): the first forward fails in the cache's concatenation. When this fails, the refusal can go."""
    from peft import PrefixTuningConfig, TaskType, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_deepseek)
    model = get_peft_model(model, PrefixTuningConfig(task_type=TaskType.CAUSAL_LM, num_virtual_tokens=4))
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 2"):
        model(input_ids=torch.tensor([[3, 4, 5, 6]]))


def test_ptuning_on_latent_attention_is_refused_before_loading(tiny_deepseek, tmp_path):
    """tunekit train's preflight (before the data is read), the loader (before the weights: a folder with only its
    config.json) and tunekit plan (the built-in DeepSeek-V3) refuse it with one message naming the family and why."""
    cfg = measured_cfg(tiny_deepseek, 32, 1, template="deepseek3", **METHODS["ptuning-fp32"])
    with pytest.raises(ConfigError) as refused:
        check_paths(cfg)
    assert str(refused.value) == LATENT_REFUSAL.format(rank=16, rope=8)
    shutil.copy(tiny_deepseek / "config.json", tmp_path / "config.json")
    cfg = measured_cfg(tmp_path, 32, 1, template="deepseek3", **METHODS["ptuning-fp32"])
    with pytest.raises(ConfigError) as refused:
        load_model(cfg, None)
    assert str(refused.value) == LATENT_REFUSAL.format(rank=16, rope=8)
    options = dict(model_name_or_path="deepseek-v3", template="deepseek3", finetuning_type="ptuning", pre_seq_len=128)
    with pytest.raises(ConfigError) as refused:
        make_plan(load_config(None, options), gpu="H100", num_samples=8)
    assert str(refused.value) == LATENT_REFUSAL.format(rank=512, rope=64)
    prompt = resolve_setup(load_config(None, dict(options, finetuning_type="prompt", num_virtual_tokens=8)))
    assert prefix_saved_bytes(load_shape("deepseek-v3", None), prompt, 61) == 0  # prompt tuning runs (no prefix)
