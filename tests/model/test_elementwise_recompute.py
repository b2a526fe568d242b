"""``elementwise_recompute``: recipes instead of the gated MLP's act output and product and the RMSNorm outputs.

Exactness needs no tolerance: a recipe re-runs the same module on the same input tensors with the same kernels, so
the rebuilt tensor has the same bits, and backward computes from the same values. Memory is counted exactly: each
non-checkpointed layer stops keeping ``act(gate)`` and ``act(gate) * up`` (intermediate wide) and the two norm
outputs (hidden wide), nothing else changes.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.modeling_qwen2 import Qwen2MLP

from tests.helpers import alpaca_records, base_config, write_dataset
from tests.memory_helpers import saved_storage_bytes
from tests.stage_helpers import run_losses_and_weights
from tunekit.config import load_config
from tunekit.model.elementwise_recompute import enable

H, FFN, LAYERS, VOCAB = 32, 88, 3, 128  # hidden and intermediate (MLP) width


def _model(arch: str, method: str, ckpt: int | None = None):
    torch.manual_seed(0)
    common = dict(
        hidden_size=H,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        attn_implementation="sdpa",
        use_cache=False,
    )
    model = (
        Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=True))
        if arch == "qwen2"
        else LlamaForCausalLM(LlamaConfig(**common))
    )
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", lora_dropout=0.0))
        for name, p in model.named_parameters():  # PEFT leaves B = 0: give both factors a gradient
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.02, generator=torch.Generator().manual_seed(2))
    if ckpt is not None:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        from tunekit.model.loader import limit_checkpointed_layers

        limit_checkpointed_layers(model, ckpt)
        if method == "lora":
            model.enable_input_require_grads()
    return model.train()


def _step(model, ids, autocast=False):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("method", ["lora", "full"])
@pytest.mark.parametrize("ckpt", [None, 1], ids=["no-ckpt", "lowest-1-ckpt"])
def test_loss_and_gradients_are_bitwise_the_same(arch, method, ckpt):
    ids = torch.randint(0, VOCAB, (2, 29), generator=torch.Generator().manual_seed(1))
    plain = _model(arch, method, ckpt)
    hooked = copy.deepcopy(plain)
    state = enable(hooked)
    loss0, grads0 = _step(plain, ids)
    loss1, grads1 = _step(hooked, ids)
    assert torch.equal(loss0, loss1)
    assert grads0.keys() == grads1.keys() and all(torch.equal(grads0[n], grads1[n]) for n in grads0)
    layers_with_recipes = LAYERS - (ckpt or 0)
    # s (by the product), h (by down's lora_A, or down's weight gradient), the norm outputs (by q, k, v, gate, up)
    assert state.packed == 7 * layers_with_recipes


def test_bf16_autocast_lora_is_bitwise_the_same():
    ids = torch.randint(0, VOCAB, (2, 17), generator=torch.Generator().manual_seed(3))
    plain = _model("qwen2", "lora")
    hooked = copy.deepcopy(plain)
    enable(hooked)
    (l0, g0), (l1, g1) = _step(plain, ids, autocast=True), _step(hooked, ids, autocast=True)
    assert torch.equal(l0, l1) and all(torch.equal(g0[n], g1[n]) for n in g0)


@pytest.mark.parametrize("method", ["lora", "full"])
def test_each_layer_keeps_exactly_the_four_recomputable_tensors_less(method):
    """fp32, no checkpointing: saved bytes fall by layers x tokens x 4 x (2 FFN + 2 H), to the byte."""
    ids = torch.randint(0, VOCAB, (2, 40), generator=torch.Generator().manual_seed(1))
    plain = _model("qwen2", method)
    hooked = copy.deepcopy(plain)
    enable(hooked)
    forward = lambda m: lambda: m(input_ids=ids, labels=ids).loss  # noqa: E731
    before, after = saved_storage_bytes(plain, forward(plain)), saved_storage_bytes(hooked, forward(hooked))
    assert before - after == LAYERS * ids.numel() * 4 * (2 * FFN + 2 * H)


class _ScaledMLP(Qwen2MLP):
    """An MLP whose product is not act(gate) * up: the recipe check must refuse it."""

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x) * 1.5)


def test_an_mlp_that_is_not_act_times_up_keeps_its_product():
    ids = torch.randint(0, VOCAB, (1, 21), generator=torch.Generator().manual_seed(4))
    plain = _model("qwen2", "full")
    for layer in plain.model.layers:
        layer.mlp.__class__ = _ScaledMLP
    hooked = copy.deepcopy(plain)
    state = enable(hooked)
    (l0, g0), (l1, g1) = _step(plain, ids), _step(hooked, ids)
    assert torch.equal(l0, l1) and all(torch.equal(g0[n], g1[n]) for n in g0)
    assert not all(state.checked.values())  # one recipe kind was refused: the product
    assert state.packed == 6 * LAYERS  # s and the five norm-output saves; not h


def test_no_recipes_without_gradients_or_in_eval_mode():
    ids = torch.randint(0, VOCAB, (1, 9))
    model = _model("llama", "full")
    state = enable(model)
    with torch.no_grad():
        model(input_ids=ids)
    model.eval()
    model(input_ids=ids, labels=ids).loss.backward()
    assert state.packed == 0 and state.window is None


def test_recompute_parts_follow_the_options_and_the_device():
    """What the run decides (train/decisions): on the CPU on by default, as measured; on a GPU off unless asked for
    (never measured there), an explicit ``elementwise_recompute: true`` honoured; the norms out under sharding."""
    from tunekit.train.decisions.features import elementwise_recompute
    from tunekit.train.machine import Machine

    def parts(machine=None, **options):
        return elementwise_recompute(
            load_config(None, {"model_name_or_path": "x", "stage": "sft", **options}), machine or Machine.cpu()
        ).detail

    assert parts() == (True, True)
    assert parts(elementwise_recompute=False) == (False, False)
    assert parts(torch_compile=True) == (False, False)
    assert parts(deepspeed="z3") == (True, False)  # norm weights are sharded
    assert parts(fsdp="full_shard") == (True, False)
    assert parts(Machine.cuda()) == (False, False)
    assert parts(Machine.cuda(), elementwise_recompute=True) == (True, True)
    assert parts(Machine.cuda(4), elementwise_recompute=True, deepspeed="z3") == (True, False)


def test_tunekit_train_gives_the_same_losses_and_weights_with_and_without(tiny_qwen, tmp_path):
    """The whole run (``train/run.build_model`` attaches the hooks): 3 fp32 LoRA steps, bitwise the same."""
    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(12))
    runs = {}
    for flag in (True, False):
        opts = base_config(
            tiny_qwen,
            data,
            tmp_path / str(flag),
            stage="sft",
            do_train=True,
            finetuning_type="lora",
            max_steps=3,
            save_strategy="steps",
            save_steps=3,
            use_cpu=True,
            elementwise_recompute=flag,
            gradient_checkpointing=False,
        )
        runs[flag] = run_losses_and_weights(load_config(None, opts))
    (l1, w1), (l0, w0) = runs[True], runs[False]
    assert l1 == l0 and len(l1) == 3
    assert w1.keys() == w0.keys() and all(torch.equal(w1[k], w0[k]) for k in w1)


def test_nothing_outlives_the_step_with_the_garbage_collector_off():
    """A layer's window and its hooks object point at each other; if the window kept its entries, the layer's tensors
    would wait for the cyclic collector (tunekit train keeps long-lived objects out of it) and pile up step by step."""
    import gc

    def live_tensor_bytes():  # dense tensors only: other tests in this process may leave sparse ones (no storage)
        return sum(
            o.untyped_storage().nbytes()
            for o in gc.get_objects()
            if isinstance(o, torch.Tensor)
            and not isinstance(o, torch.nn.Parameter)
            and o.layout == torch.strided
            and o.device.type == "cpu"
        )

    ids = torch.randint(0, VOCAB, (2, 33), generator=torch.Generator().manual_seed(5))
    model = _model("qwen2", "lora")
    state = enable(model)
    gc.collect()
    gc.disable()
    try:
        before = live_tensor_bytes()
        for _ in range(3):
            model(input_ids=ids, labels=ids).loss.backward()
        after = live_tensor_bytes()
    finally:
        gc.enable()
    assert state.packed == 3 * 7 * LAYERS
    assert after - before <= sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad), (
        before,
        after,
    )
