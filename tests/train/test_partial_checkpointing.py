"""Gradient checkpointing on the lowest k decoder layers only
(``gradient_checkpointing_layers``, auto's partial choice).

- the model: exactly the lowest k layers go through torch.utils.checkpoint, and the gradients equal those without
  checkpointing (float64: recompute repeats the same operations, so only summation order may differ, bounded by
  ``sum_order_bound`` in float64);
- the planner: the bytes autograd saves with k layers checkpointed (counted with saved_tensors_hooks, unique storages,
  as tests/plan/test_plan_memory.py does) within 10 % of ``saved_bytes`` for every k;
- auto: the fewest layers whose planned peak fits the budget, and the choice reaches the config and the model.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tests.helpers import alpaca_records, base_config, logged_losses, write_dataset
from tests.memory_helpers import saved_storage_bytes
from tests.tolerances import FP64_U, loss_tolerance, sum_order_bound
from tunekit.config import load_config
from tunekit.flow import run_train
from tunekit.model.elementwise_recompute import enable_for_training
from tunekit.model.finetuning import apply_finetuning
from tunekit.model.loader import limit_checkpointed_layers
from tunekit.plan.activations import saved_bytes
from tunekit.plan.architectures import load_shape
from tunekit.plan.checkpointing import decide_for, resolve_gradient_checkpointing
from tunekit.plan.gpus import find_gpu
from tunekit.plan.memory import GiB, estimate_memory
from tunekit.plan.params import count_params
from tunekit.plan.training_setup import planned_machine, resolve_setup
from tunekit.train.decisions import decide_features

LAYERS = 4
ARCH = dict(
    model_type="llama",
    hidden_size=64,
    intermediate_size=160,
    num_hidden_layers=LAYERS,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=512,
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from transformers import AutoConfig

    fields = dict(ARCH)
    path = tmp_path_factory.mktemp("llama4")
    AutoConfig.for_model(fields.pop("model_type"), **fields).save_pretrained(path)
    return path


def _model(folder, cfg, k: int | None, dtype=torch.float32):
    from transformers import AutoConfig, AutoModelForCausalLM

    hf = AutoConfig.from_pretrained(folder)
    hf._attn_implementation = "sdpa"
    hf.use_cache = False
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf, dtype=dtype)
    if k is not None:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        assert limit_checkpointed_layers(model, k) == k
    model = apply_finetuning(model, cfg)
    enable_for_training(
        model, decide_features(cfg, planned_machine(cfg)).elementwise_recompute.detail
    )  # as the run decides
    return model.train()


def _cfg(**over):
    # HF's own loss (labels=) below, so the planner is asked about the plain LM head, not the chunked one
    base = dict(
        cutoff_len=64,
        per_device_train_batch_size=2,
        gradient_checkpointing=False,
        chunked_lm_loss=False,
        elementwise_recompute=True,
        use_cpu=True,
    )  # planned for the CPU it is measured on
    base.update(over)
    return load_config(None, base)


def test_only_the_lowest_layers_are_checkpointed(folder):
    model = _model(folder, _cfg(finetuning_type="full"), 3)
    assert [layer.gradient_checkpointing for layer in model.model.layers] == [True, True, True, False]


@pytest.mark.parametrize("method", ["full", "lora"])
def test_gradients_equal_no_checkpointing(folder, method):
    cfg = _cfg(finetuning_type=method, **({"lora_rank": 4} if method == "lora" else {}))
    ids = torch.randint(0, ARCH["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(1))
    grads = {}
    for k in (None, 2):
        model = _model(folder, cfg, k, dtype=torch.float64)
        if method == "lora":  # PEFT's own init leaves B = 0; give every adapter a gradient path through both factors
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    torch.nn.init.normal_(p, std=0.02, generator=torch.Generator().manual_seed(2))
        model(input_ids=ids, labels=ids).loss.backward()
        grads[k] = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads[None].keys() == grads[2].keys() and grads[2]
    scale = max(g.abs().max().item() for g in grads[None].values())
    worst = max((grads[2][n] - grads[None][n]).abs().max().item() for n in grads[2])
    assert worst <= sum_order_bound(ids.numel() * ARCH["intermediate_size"], scale, FP64_U), worst


def _measure_saved(model, ids) -> int:
    return saved_storage_bytes(model, lambda: model(input_ids=ids, labels=ids).loss)


@pytest.mark.parametrize("method", ["full", "lora"])
def test_planned_saved_bytes_follow_the_checkpointed_count(folder, method):
    shape = load_shape(str(folder), None)
    errors = []
    for k in (None, 1, 2, 3, LAYERS):  # None: no checkpointing
        cfg = _cfg(finetuning_type=method, gradient_checkpointing=k is not None, gradient_checkpointing_layers=k)
        setup = resolve_setup(cfg).with_(padded=False)
        assert setup.ckpt_layers == k
        est = saved_bytes(shape, setup, count_params(shape, setup))["total"]
        ids = torch.randint(0, shape.vocab, (2, 64), generator=torch.Generator().manual_seed(1))
        measured = _measure_saved(_model(folder, cfg, k), ids)
        errors.append((k, round(est / measured - 1, 4)))
    assert all(abs(e) < 0.10 for _, e in errors), errors
    planned = [
        estimate_memory(
            shape,
            resolve_setup(_cfg(finetuning_type=method, gradient_checkpointing=True, gradient_checkpointing_layers=k)),
        ).total
        for k in range(1, LAYERS)
    ]
    assert (
        planned == sorted(planned, reverse=True) and planned[0] > planned[-1]
    )  # each layer checkpointed lowers the peak


def test_auto_checkpoints_the_fewest_layers_that_fit():
    cfg = load_config(
        None,
        {
            "model_name_or_path": "qwen2.5-7b",
            "finetuning_type": "lora",
            "cutoff_len": 4096,
            "per_device_train_batch_size": 4,
            "template": "qwen",
        },
    )
    from tunekit.plan.architectures import load_shape as shape_of

    shape = shape_of("qwen2.5-7b", None)
    setup = resolve_setup(cfg)
    peak = {k: estimate_memory(shape, replace(setup, grad_ckpt=True, ckpt_layers=k)).total for k in (9, 10)}
    without = estimate_memory(shape, replace(setup, grad_ckpt=False)).total
    budget = (peak[9] + peak[10]) / 2  # 10 layers fit, 9 do not
    assert without > budget
    gpu = replace(find_gpu("H200"), memory_gib=budget / GiB / 0.80)  # GPU_SHARE of it is exactly the budget
    decision = decide_for(shape, setup, gpu)
    assert decision.enabled and decision.layers == 10 and decision.of_layers == shape.layers
    assert decision.message().startswith(
        f"gradient checkpointing: on for the lowest 10 of {shape.layers} layers (auto:"
    )
    resolved, _ = resolve_gradient_checkpointing(cfg, gpu=gpu)
    assert resolved.gradient_checkpointing is True and resolved.gradient_checkpointing_layers == 10
    top = {
        k: estimate_memory(shape, replace(setup, grad_ckpt=True, ckpt_layers=k)).total
        for k in (shape.layers - 1, shape.layers)
    }
    # the top layer's recompute would run first thing in backward, rebuilding what it saved:
    # checkpointing it saves nothing
    assert top[shape.layers - 1] <= top[shape.layers]
    tight = replace(
        gpu, memory_gib=top[shape.layers - 1] / GiB / 0.80 * 0.9
    )  # nothing fits: all layers, the safe choice
    on_all = decide_for(shape, setup, tight)
    assert on_all.enabled and on_all.layers is None and "on (auto:" in on_all.message()


def test_training_with_partial_checkpointing_gives_the_same_losses(tiny_qwen, tmp_path):
    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8, seed=3))
    losses = {}
    for name, opts in {
        "none": {"gradient_checkpointing": False},
        "one": {"gradient_checkpointing": True, "gradient_checkpointing_layers": 1},
    }.items():
        out = tmp_path / name
        cfg = base_config(
            tiny_qwen,
            data,
            out,
            finetuning_type="lora",
            per_device_train_batch_size=2,
            max_steps=2,
            dtype="float64",
            **opts,
        )
        run_train(load_config(None, cfg))
        losses[name] = logged_losses(out)
    assert len(losses["one"]) == 2
    # float64 weights: the logged losses differ only by the float32 cross-entropy over <= 2 x 64 tokens per step
    assert all(abs(a - b) <= loss_tolerance(128, b) for a, b in zip(losses["one"], losses["none"])), losses


def _cpu_lora_setup(seq: int):
    cfg = load_config(
        None,
        {
            "model_name_or_path": "qwen2.5-0.5b",
            "finetuning_type": "lora",
            "lora_target": "all",
            "cutoff_len": 1024,
            "per_device_train_batch_size": 2,
            "template": "qwen",
            "use_cpu": True,
            "bf16": True,
        },
    )
    shape = load_shape("qwen2.5-0.5b", None)
    return shape, resolve_setup(cfg, 1, 1, seq, decide_features(cfg, planned_machine(cfg, 1)))


def _peak(shape, setup, k: int | None) -> float:
    return estimate_memory(shape, replace(setup, host=True, grad_ckpt=k != 0, ckpt_layers=k or None)).total


def test_auto_on_a_cpu_stays_under_the_standard_recipe_when_a_few_layers_buy_it():
    """A CPU run that fits without checkpointing but would need more than the standard recipe (every layer
    checkpointed, whole logits) checkpoints the fewest lowest layers that bring it under, within the speed cap."""
    from tunekit.plan.checkpointing import FULL_RECOMPUTE_SHARE, MAX_SPEED_COST, standard_peak

    shape, setup = _cpu_lora_setup(256)
    target = standard_peak(shape, replace(setup, host=True))
    assert _peak(shape, setup, 0) > target  # the premise: without checkpointing this run needs more
    decision = decide_for(shape, setup)  # no GPU: the host's RAM, which this run fits (a few GiB)
    k = decision.layers
    assert decision.enabled and k is not None and decision.of_layers == shape.layers
    assert _peak(shape, setup, k) <= target < _peak(shape, setup, k - 1)  # the fewest that do
    assert k <= shape.layers * MAX_SPEED_COST / FULL_RECOMPUTE_SHARE
    assert "the standard recipe" in decision.message() and f"the lowest {k} layers checkpointed" in decision.message()


def test_auto_on_a_cpu_keeps_speed_when_staying_under_the_standard_recipe_costs_too_much(monkeypatch):
    from tunekit.plan import checkpointing

    shape, setup = _cpu_lora_setup(256)
    monkeypatch.setattr(checkpointing, "MAX_SPEED_COST", 0.0)  # no layer may be spent
    decision = decide_for(shape, setup)
    assert not decision.enabled and "within" in decision.reason


def test_auto_on_a_gpu_does_not_aim_under_the_standard_recipe():
    """On a GPU the device's memory is the run's own: memory left unused buys nothing, so the rule is CPU-only."""
    shape, setup = _cpu_lora_setup(256)
    decision = decide_for(shape, replace(setup, host=False), find_gpu("H200"))
    assert not decision.enabled
