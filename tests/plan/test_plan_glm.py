"""`tunekit plan` knows GLM-4-9B-0414 (THUDM/GLM-4-9B-0414, Glm4ForCausalLM) without a download: its shape from
config.json's fields, the exact parameter count of transformers' model built from them, and a LoRA plan for one
24 GB GPU."""

from __future__ import annotations

import pytest

from tunekit.config import load_config
from tunekit.plan import make_plan
from tunekit.plan.architectures import load_shape
from tunekit.plan.builtin_shapes import builtin_key, find_builtin

H, INTER, LAYERS, HEADS, KV, HEAD_DIM, VOCAB = 4096, 13696, 40, 32, 2, 128, 151552


def _by_hand() -> int:
    """GLM-4-9B-0414's parameters written out: q/k/v with biases, o, the fused gate_up (2 x intermediate), down,
    four RMSNorms per layer (Glm4's sandwich norms); untied embeddings and head; the final norm."""
    q, kv, o = H * HEADS * HEAD_DIM + HEADS * HEAD_DIM, 2 * (H * KV * HEAD_DIM + KV * HEAD_DIM), HEADS * HEAD_DIM * H
    layer = q + kv + o + H * 2 * INTER + INTER * H + 4 * H
    return LAYERS * layer + 2 * VOCAB * H + H


def _lora_by_hand(rank: int) -> int:
    """LoRA on every linear layer but the head: rank x (in + out) per adapted layer."""
    widths = [
        (H, HEADS * HEAD_DIM),
        (H, KV * HEAD_DIM),
        (H, KV * HEAD_DIM),
        (HEADS * HEAD_DIM, H),
        (H, 2 * INTER),
        (INTER, H),
    ]
    return LAYERS * sum(rank * (i + o) for i, o in widths)


@pytest.mark.parametrize("name", ["THUDM/GLM-4-9B-0414", "zai-org/GLM-4-9B-0414", "glm-4-9b-0414", "glm4-9b"])
def test_glm4_0414_names_find_its_builtin_shape(name):
    assert builtin_key(name) == "glm-4-9b-0414"
    assert find_builtin(name)["model_type"] == "glm4"


def test_glm4_shape_and_parameter_count_equal_transformers_model_on_meta():
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = load_shape(None, "THUDM/GLM-4-9B-0414")
    assert (shape.model_type, shape.hidden, shape.layers, shape.heads, shape.kv_heads) == (
        "glm4",
        H,
        LAYERS,
        HEADS,
        KV,
    )
    assert (shape.head_dim, shape.intermediate, shape.vocab, shape.tied) == (HEAD_DIM, INTER, VOCAB, False)
    fields = find_builtin("glm-4-9b-0414")
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert type(model).__name__ == "Glm4ForCausalLM"
    assert shape.total_params == sum(p.numel() for p in model.parameters()) == _by_hand() == 9_400_279_040
    assert {lin.name for lin in shape.linears} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj"}


def test_glm4_9b_lora_on_one_24gb_gpu_reads_sensibly():
    cfg = load_config(
        None,
        {
            "model_name_or_path": "THUDM/GLM-4-9B-0414",
            "template": "glm4",
            "finetuning_type": "lora",
            "lora_target": "all",
            "lora_rank": 8,
            "bf16": True,
            "per_device_train_batch_size": 1,
            "gradient_accumulation_steps": 8,
            "cutoff_len": 1024,
        },
    )
    plan = make_plan(cfg, gpu="RTX-4090", num_samples=1000)
    assert plan.model["model_type"] == "glm4" and plan.model["total_params"] == _by_hand()
    assert plan.params["trainable"] == _lora_by_hand(8) == 23_797_760  # 0.25 % of the model
    weights = plan.memory["base_weights"]
    assert weights == pytest.approx(_by_hand() * 2 / 2**30, abs=0.01)  # bf16 weights: 17.51 GiB
    assert plan.fits is True and weights < plan.memory["total_gib"] <= 24
    assert plan.memory["total_gib"] == pytest.approx(
        sum(v for k, v in plan.memory.items() if k != "total_gib"), abs=0.01
    )
