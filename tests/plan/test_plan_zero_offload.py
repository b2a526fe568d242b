"""The planner's DeepSpeed model states per device, for every ZeRO stage x offload, against DeepSpeed's own
estimators (``estimate_zero2/3_model_states_mem_needs``, called on parameter counts: no GPU, no model) and, where
the planner departs from them, against the buffers DeepSpeed 0.19.8 allocates (docs/memory-model.md section 2)."""

from __future__ import annotations

import json

import pytest

from tunekit.config import load_config
from tunekit.plan.architectures import load_shape
from tunekit.plan.memory import DS_ABF, GiB, estimate_memory
from tunekit.plan.training_setup import resolve_setup

STATES = ("base_weights", "trainable_params", "gradients", "optimizer_states", "master_weights")
N = 2  # GPUs, one node


def _plan(stage: int, offload_optimizer: bool, offload_params: bool, grad_accum: int = 1):
    cfg = load_config(
        None, dict(finetuning_type="full", bf16=True, deepspeed=f"z{stage}", gradient_accumulation_steps=grad_accum)
    )
    setup = resolve_setup(cfg, world_size=N).with_(offload_optimizer=offload_optimizer, offload_params=offload_params)
    est = estimate_memory(load_shape("qwen2.5-0.5b", None), setup)
    assert est.counts.frozen == 0  # full fine-tuning: the estimators' total_params are all trained
    return est, est.counts.trainable


def _states(est) -> float:
    return sum(est.components[k] for k in STATES)


@pytest.mark.parametrize("offload", [False, True])
def test_zero2_matches_deepspeeds_estimator(offload):
    """ZeRO-2: the estimator's GPU figure exactly (2 B of 16-bit weights, + 18 B / N without offload). With optimizer
    offload no 16-bit gradient partition stays on the GPU (copy_grads_in_partition copies into the fp32 gradients on
    the host); on the host the planner adds the 16-bit copy of the partition the estimator leaves out
    (param_buffer_of_bit16_for_cpu_offload_groups), and with gradient accumulation the 16-bit accumulated gradients."""
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    est, P = _plan(2, offload, False)
    cpu, gpu = estimate_zero2_model_states_mem_needs(P, num_gpus_per_node=N, cpu_offload=offload)
    assert _states(est) == pytest.approx(gpu, abs=1)
    if offload:
        assert est.components["gradients"] == 0
        assert est.cpu_bytes == pytest.approx(cpu + 2 * P * DS_ABF, abs=1)
        accum, _ = _plan(2, True, False, grad_accum=4)
        assert accum.cpu_bytes - est.cpu_bytes == pytest.approx(2 * P * DS_ABF)


@pytest.mark.parametrize("offload_optimizer,offload_params", [(False, False), (True, False), (True, True)])
def test_zero3_matches_deepspeeds_estimator(offload_optimizer, offload_params):
    """ZeRO-3: the estimator's GPU figure less its ``largest_layer_memory`` (4 B per parameter of the largest layer,
    the gathered parameters: the planner's distributed_buffers). Under optimizer offload the 16-bit gradient
    partition (grad_partitions_flat_buffer) is allocated on ``self.device``, the host (stage3.py
    _setup_for_real_optimizer), so the GPU keeps only the 16-bit weights (none with parameter offload). The estimator
    counts 18 B per parameter (16 without the 16-bit weights) where DeepSpeed allocates 20 (18): both the 16-bit
    gradient partition and the fp32 gradient buffer (initialize_optimizer_states) exist; the planner counts the 2 B
    more, on the GPU without offload, on the host with it."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    est, P = _plan(3, offload_optimizer, offload_params)
    largest = load_shape("qwen2.5-0.5b", None).largest_module_params
    cpu, gpu, layer = estimate_zero3_model_states_mem_needs(
        P, largest, num_gpus_per_node=N, cpu_offload=offload_optimizer, cpu_offload_params=offload_params
    )
    grad16 = 2 * P / N  # grad_partitions_flat_buffer, bf16 (gradient_accumulation_dtype defaults to the model dtype)
    if offload_optimizer:
        assert est.components["gradients"] == 0
        assert _states(est) == pytest.approx(gpu - layer, abs=1)
        assert est.cpu_bytes == pytest.approx(cpu + grad16 * N * DS_ABF, abs=1)
    else:
        assert _states(est) == pytest.approx(gpu - layer + grad16, abs=1)
        assert est.cpu_bytes == 0


@pytest.mark.parametrize("offload", [False, True])
def test_zero1_follows_deepspeeds_source(offload):
    """ZeRO-1 has no estimator. Each rank keeps its parameters' whole 16-bit ``.grad`` until the boundary reduction
    (partition_gradients off); the fp32 master, moments and fp32 gradients are partitioned, on
    the host under offload."""
    est, P = _plan(1, offload, False)
    assert est.components["trainable_params"] == 2 * P and est.components["gradients"] >= 2 * P
    assert _states(est) == pytest.approx(4 * P + (0 if offload else 16 * P / N))
    if offload:
        assert est.cpu_bytes == pytest.approx((16 * P / N + 2 * P / N) * N * DS_ABF)


def test_13b_full_finetuning_on_two_24gb_gpus_with_zero3_offload(tmp_path):
    """The tutorial's case: 13B full fine-tuning on 2 x 24 GB, ZeRO-3 with both offloads, measured about 9 GB per
    card. The plan used to count the 16-bit gradient partition (12.12 GiB) on each GPU, 18.68 GiB in all."""
    llama13b = dict(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        hidden_size=5120,
        intermediate_size=13824,
        num_hidden_layers=40,
        num_attention_heads=40,
        num_key_value_heads=40,
        vocab_size=32000,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    (tmp_path / "config.json").write_text(json.dumps(llama13b))
    from tunekit.plan.planner import make_plan

    cfg = load_config(
        None,
        dict(
            model_name_or_path=str(tmp_path),
            finetuning_type="full",
            bf16=True,
            deepspeed="z3_offload",
            cutoff_len=1024,
            per_device_train_batch_size=1,
            gradient_checkpointing=True,
        ),
    )
    mem = make_plan(cfg, gpu_memory_gib=24, gpus=2, seq_len=1024).memory
    assert all(mem[k] == 0 for k in STATES), mem
    # what is left (activations, gathered layers, overhead) stays under the ~9 GB measured per card
    assert mem["total_gib"] < 9e9 / GiB, mem


@pytest.mark.parametrize("stage,offload,master", [(2, False, True), (3, False, False), (3, True, True)])
def test_fp32_weights_under_deepspeed_follow_the_source(stage, offload, master):
    """Without bf16/fp16, ZeRO-1/2 still clone the fp32 partition as the optimizer's own copy (stage_1_and_2.py:
    ``detach().clone()``); ZeRO-3 shares it (stage3.py ``_create_fp32_partitions``: same dtype and device) unless it
    goes to the host. Both keep an fp32 gradient partition beside the weights' own-dtype one."""
    cfg = load_config(None, dict(finetuning_type="full", deepspeed=f"z{stage}", bf16=False))  # fp32 chosen
    setup = resolve_setup(cfg, world_size=N).with_(offload_optimizer=offload)
    est = estimate_memory(load_shape("qwen2.5-0.5b", None), setup)
    P = est.counts.trainable
    assert setup.compute_bytes == 4
    c = est.components
    if offload:
        assert c["master_weights"] == c["gradients"] == c["optimizer_states"] == 0
        assert est.cpu_bytes == pytest.approx((4 + 8 + 4 + 4) * P / N * N * DS_ABF)  # master, moments, both gradients
    else:
        assert c["master_weights"] == (4 * P / N if master else 0)
        assert c["gradients"] == pytest.approx(8 * P / N)
