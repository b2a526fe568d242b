"""The memory estimator against real tiny models: exact parameter/gradient/optimizer bytes, activations
within 10 % of what autograd saves for backward, and the published Qwen2.5-7B LoRA reference figures."""

from __future__ import annotations

import functools

import pytest
import torch

from tests.memory_helpers import measured_cfg, saved_storage_bytes, storage_bytes
from tests.optimizer_helpers import ARCHS as TINY_ARCHS
from tunekit.config import load_config
from tunekit.model.elementwise_recompute import enable_for_training
from tunekit.model.finetuning import apply_finetuning
from tunekit.plan.activations import saved_bytes
from tunekit.plan.architectures import load_shape
from tunekit.plan.memory import GiB, estimate_memory
from tunekit.plan.params import count_params
from tunekit.plan.training_setup import planned_machine, resolve_setup
from tunekit.train.decisions import decide_features

ARCHS = {
    **TINY_ARCHS,  # llama, qwen2: the optimizer tests' tiny models
    "qwen3": dict(
        model_type="qwen3",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,
        vocab_size=384,
    ),
    "mistral": dict(
        model_type="mistral",
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=16,
        vocab_size=256,
    ),
}


def _build(arch: str, cfg, tmp_path):
    """Write config.json (what the planner reads) and build the same model the way tunekit train does."""
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = dict(ARCHS[arch])
    hf = AutoConfig.for_model(fields.pop("model_type"), **fields)
    folder = tmp_path / arch
    hf.save_pretrained(folder)
    hf._attn_implementation = "sdpa"
    hf.use_cache = False
    torch.manual_seed(0)
    dtype = {"bfloat16": torch.bfloat16}.get(cfg.dtype, torch.bfloat16 if cfg.bf16 else torch.float32)
    model = AutoModelForCausalLM.from_config(hf, dtype=dtype)
    if cfg.use_gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model = apply_finetuning(model, cfg)
    enable_for_training(
        model, decide_features(cfg, planned_machine(cfg)).elementwise_recompute.detail
    )  # as the run decides
    model.train()
    return model, folder


def _hf_optimizer(cfg, params):
    """The optimizer exactly as the HF Trainer builds it for cfg.optim."""
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir="/tmp/unused", optim=cfg.optim, use_cpu=True, report_to="none")
    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    return cls(params, **kwargs)


STATE_CASES = [
    ("llama", dict(finetuning_type="lora", lora_rank=8)),
    ("llama", dict(finetuning_type="lora", lora_rank=4, lora_target="q_proj,v_proj", bf16=True)),
    ("qwen2", dict(finetuning_type="lora", lora_rank=16, use_dora=True, bf16=True)),
    (
        "qwen2",
        dict(finetuning_type="lora", lora_rank=2, lora_target="gate_proj,down_proj", additional_target="lm_head"),
    ),
    ("qwen3", dict(finetuning_type="full")),
    ("qwen3", dict(finetuning_type="full", bf16=True)),
    ("mistral", dict(finetuning_type="freeze", freeze_trainable_layers=1, bf16=True)),
    (
        "mistral",
        dict(
            finetuning_type="freeze",
            freeze_trainable_layers=-2,
            freeze_trainable_modules="mlp",
            freeze_extra_modules="embed_tokens",
        ),
    ),
    ("llama", dict(finetuning_type="full", optim="adamw_torch_fused")),
    ("llama", dict(finetuning_type="lora", optim="sgd")),
]


@pytest.mark.parametrize("arch, opts", STATE_CASES)
def test_model_state_bytes_are_exact(arch, opts, tmp_path):
    cfg = measured_cfg(**opts)
    model, folder = _build(arch, cfg, tmp_path)
    shape = load_shape(str(folder), None)
    est = estimate_memory(shape, resolve_setup(cfg)).components
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    assert est["base_weights"] + est["trainable_params"] == storage_bytes(params)
    assert est["trainable_params"] == storage_bytes(trainable)

    ids = torch.randint(0, shape.vocab, (1, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
        model(input_ids=ids, labels=ids).loss.backward()
    assert est["gradients"] == sum(p.grad.untyped_storage().nbytes() for p in trainable)

    opt = _hf_optimizer(cfg, trainable)
    opt.step()
    state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    assert est["optimizer_states"] == storage_bytes(state)


def _measure_saved(model, ids, autocast: bool) -> int:
    """Bytes of unique non-parameter storages that autograd keeps for backward (elementwise_recompute's too)."""

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return model(input_ids=ids, labels=ids).loss

    return saved_storage_bytes(model, forward)


@pytest.mark.parametrize("gc", [False, True], ids=["no-gc", "gc"])
@pytest.mark.parametrize("method", ["lora", "full"])
def test_activation_bytes_within_10_percent(method, gc, tmp_path):
    """LoRA: 3 architectures x 3 sequence lengths x 2 batch sizes, bf16 base + fp32 adapters under bf16
    autocast (the GPU recipe); full: the 3 architectures at one size, fp32 weights (tunekit's upcast)."""
    errors = []
    grid = [(s, b) for s in (32, 64, 128) for b in (1, 2)] if method == "lora" else [(64, 2)]
    for arch in ("llama", "qwen3", "mistral"):
        opts = dict(finetuning_type=method, gradient_checkpointing=gc, bf16=method == "lora")
        model, folder = _build(arch, measured_cfg(**opts), tmp_path)
        shape = load_shape(str(folder), None)
        for s, b in grid:
            cfg = measured_cfg(**opts, per_device_train_batch_size=b, cutoff_len=s)
            setup = resolve_setup(cfg).with_(padded=False)  # unpadded batch: no attention mask, like the ids below
            est = saved_bytes(shape, setup, count_params(shape, setup))["total"]
            torch.manual_seed(1)
            measured = _measure_saved(model, torch.randint(0, shape.vocab, (b, s)), cfg.bf16)
            errors.append((arch, s, b, round(est / measured - 1, 4)))
    worst = max(errors, key=lambda e: abs(e[3]))
    assert abs(worst[3]) < 0.10, errors


@functools.cache
def _qwen7b():
    return load_shape("qwen2.5-7b", None)


def _reference(b: int, s: int, liger: bool) -> float:
    cfg = load_config(
        None,
        dict(
            finetuning_type="lora",
            lora_rank=8,
            lora_target="all",
            bf16=True,
            flash_attn="fa2",
            enable_liger_kernel=liger,
            per_device_train_batch_size=b,
            cutoff_len=s,
            chunked_lm_loss=False,
        ),
    )  # the published runs computed the whole logits
    return estimate_memory(_qwen7b(), resolve_setup(cfg)).total


def test_qwen25_7b_lora_reference_figures():
    """Published single-GPU measurements (LoRA r8 all-linear, bf16, checkpointing + FlashAttention, AdamW)."""
    GB = 1e9
    # about 2.5 GB more per 1K tokens of micro-batch x cutoff, without Liger
    slope = (_reference(1, 4096, False) - _reference(1, 1024, False)) / 3
    assert abs(slope / (2.5 * GB) - 1) < 0.10
    # 1024 x 2 and 2048 x 1 use the same memory
    assert _reference(2, 1024, False) == _reference(1, 2048, False)
    # with Liger: 16.6 GB at 2K tokens, 17.9 GB at 4K (read as GiB, as nvidia-smi's MiB columns are)
    assert abs(_reference(1, 2048, True) / (16.6 * GiB) - 1) < 0.10
    assert abs(_reference(1, 4096, True) / (17.9 * GiB) - 1) < 0.10
    liger_slope = (_reference(1, 4096, True) - _reference(1, 2048, True)) / 2
    assert abs(liger_slope / (0.6 * GB) - 1) < 0.15


def test_zero_sharding_and_offload_arithmetic():
    shape = _qwen7b()
    P = shape.total_params

    def comps(**over):
        cfg = load_config(None, dict(finetuning_type="full", bf16=True, **over))
        return estimate_memory(shape, resolve_setup(cfg, world_size=8)), cfg

    z2, _ = comps(deepspeed="z2")
    c = z2.components
    assert c["trainable_params"] == 2 * P  # 16-bit weights stay whole under ZeRO-2
    assert c["optimizer_states"] == pytest.approx(8 * P / 8) and c["master_weights"] == pytest.approx(4 * P / 8)
    z3, _ = comps(deepspeed="z3")
    assert z3.components["trainable_params"] == pytest.approx(2 * P / 8)
    off, _ = comps(deepspeed="z3_offload")
    assert off.components["optimizer_states"] == 0 and off.components["trainable_params"] == 0
    assert off.cpu_bytes > 16 * P  # master + moments + fp32 grads + 16-bit params on the host (x 1.5 buffers)
    assert off.total < z3.total < z2.total


@pytest.mark.parametrize("seq_len", [1024, 64])
def test_cpu_fragmentation_is_bounded_by_the_heap_guard(monkeypatch, seq_len):
    """On the CPU the heap keeps freed memory resident: 45 % of the token-dependent bytes without host/heap.py's
    guard (measured, docs/memory-model.md 3.7); with it (glibc, TUNEKIT_MALLOC_TUNE on) never more than twice its
    slack, whichever is smaller. Qwen2.5-0.5B at 2 x 1,024 tokens (~2 GiB of activations + logits) hits the bound,
    2 x 64 tokens stays under it; TUNEKIT_MALLOC_TUNE=0 (no guard) plans the 45 %."""
    from tunekit.host import malloc as host_malloc
    from tunekit.plan.memory import HOST_FRAGMENTATION, HOST_GUARD_BOUND

    if not host_malloc.available():
        pytest.skip("the heap guard needs glibc")
    cfg = load_config(
        None,
        dict(
            model_name_or_path="Qwen/Qwen2.5-0.5B",
            finetuning_type="lora",
            use_cpu=True,
            per_device_train_batch_size=2,
            cutoff_len=seq_len,
            gradient_checkpointing=False,
        ),
    )
    shape, setup = load_shape("qwen2.5-0.5b", None), resolve_setup(cfg, seq_len=seq_len)
    est = estimate_memory(shape, setup)
    tokens = est.components["activations"] + est.components["logits"]
    assert HOST_GUARD_BOUND == 2 * host_malloc.GUARD_SLACK == 512 << 20
    assert est.components["fragmentation"] == min(HOST_FRAGMENTATION * tokens, HOST_GUARD_BOUND)
    assert (HOST_FRAGMENTATION * tokens > HOST_GUARD_BOUND) == (seq_len == 1024), tokens
    assert any(("heap guard" in n) == (seq_len == 1024) and "on the CPU" in n for n in est.notes), est.notes
    assert setup.heap_guard  # read from the run's decisions (train/decisions: heap_guard)
    monkeypatch.setenv("TUNEKIT_MALLOC_TUNE", "0")  # decided again: no guard
    setup = resolve_setup(cfg, seq_len=seq_len)
    assert not setup.heap_guard
    assert estimate_memory(shape, setup).components["fragmentation"] == HOST_FRAGMENTATION * tokens
