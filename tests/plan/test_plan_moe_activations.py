"""The planner's mixture-of-experts activations (plan/moe_activations.py) against what autograd keeps in a real forward
pass of tiny Qwen3-MoE, Qwen2-MoE (shared expert), Mixtral, DeepSeek-V3 and gpt-oss (eager attention with sinks,
clamped SwiGLU experts) models: router softmax and top-k, the routed rows the grouped expert matmuls keep, and the
adapted fused weights that LoRA on the experts forms in every forward; with and without gradient checkpointing, within
the bound of the dense activation tests (tests/plan/test_plan_memory.py)."""

from __future__ import annotations

import pytest
import torch

from tests.memory_helpers import measured_cfg, saved_storage_bytes
from tunekit.config import load_config
from tunekit.model.elementwise_recompute import enable_for_training
from tunekit.model.finetuning import apply_finetuning
from tunekit.model.moe import configure_moe
from tunekit.plan.activations import layer_kinds, saved_bytes, sink_attention_saved
from tunekit.plan.architectures import load_shape
from tunekit.plan.memory import GiB
from tunekit.plan.moe_activations import expert_width, routed_saved_const, routed_saved_per_token
from tunekit.plan.params import count_params
from tunekit.plan.planner import make_plan
from tunekit.plan.training_setup import planned_machine, resolve_setup
from tunekit.tiny.text import build_tiny_model
from tunekit.train.decisions import decide_features

ACTIVATION_BOUND = 0.10  # the dense models' bound (test_activation_bytes_within_10_percent)
FAMILIES = {
    "qwen3_moe": "qwen3-30b-a3b",
    "qwen2_moe": "qwen2-57b-a14b",
    "mixtral": "mixtral-8x7b",
    "deepseek_v3": "deepseek-v3",  # latent attention, a dense layer 0, a shared expert, fp32 sigmoid router
    "qwen3_moe_dense0": "qwen3-30b-a3b",  # mlp_only_layers [0]: a dense layer below the sparse one
    "gpt_oss": "gpt-oss-20b",  # eager attention with sinks, biases, a biased router, clamped SwiGLU experts
}
REBUILT = {"qwen3_moe_dense0": {"mlp_only_layers": [0]}}  # config changes, the weights built again
ATTENTION = {  # lora-attention's targets
    **dict.fromkeys(("qwen3_moe", "qwen2_moe", "mixtral", "qwen3_moe_dense0"), "q_proj,v_proj"),
    "deepseek_v3": "q_b_proj,kv_b_proj",  # latent attention's query and key/value expansions
    "gpt_oss": "q_proj,v_proj",
}
METHODS = {
    "lora-bf16": dict(finetuning_type="lora", bf16=True),  # bf16 base, fp32 adapters (experts too), bf16 autocast
    "lora-attention-bf16": dict(finetuning_type="lora", bf16=True),  # ATTENTION's targets; the experts frozen
    "lora-experts-fp32": dict(finetuning_type="lora", lora_target="experts"),  # no Linear adapted
    "full-fp32": dict(finetuning_type="full"),  # the router trains
}


@pytest.fixture(scope="module")
def moe_folders(tmp_path_factory):
    from transformers import AutoConfig, AutoModelForCausalLM

    root = tmp_path_factory.mktemp("moe-act")
    folders = {family: build_tiny_model(root / family, like=like, seed=0) for family, like in FAMILIES.items()}
    for family, changes in REBUILT.items():
        hf = AutoConfig.from_pretrained(folders[family])
        hf.update(changes)
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(hf).save_pretrained(folders[family])
    return folders


def _model(folder, cfg):
    """The model as tunekit train builds it: the family's default experts implementation (grouped_mm), the router loss
    as configured, the method, elementwise_recompute as decided."""
    from transformers import AutoConfig, AutoModelForCausalLM

    hf = AutoConfig.from_pretrained(folder)
    if hf.model_type != "gpt_oss":  # gpt-oss: transformers' own choice, eager (no sdpa kernel takes the sinks)
        hf._attn_implementation = "sdpa"
    hf.use_cache = False
    configure_moe(hf, cfg, str(folder), True)  # moe_aux_loss_coef: output_router_logits, as the loader sets it
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16 if cfg.bf16 else torch.float32)
    if cfg.use_gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model = apply_finetuning(model, cfg)
    enable_for_training(model, decide_features(cfg, planned_machine(cfg)).elementwise_recompute.detail)
    return model.train()


def _measured(model, ids, autocast: bool) -> int:
    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return model(input_ids=ids, labels=ids).loss

    return saved_storage_bytes(model, forward)


@pytest.mark.parametrize("gc", [False, True], ids=["no-gc", "gc"])
@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_moe_activation_bytes_within_the_dense_bound(family, method, gc, moe_folders):
    folder = moe_folders[family]
    shape = load_shape(None, str(folder))
    errors = []
    opts = dict(METHODS[method], **({"lora_target": ATTENTION[family]} if "attention" in method else {}))
    model = _model(folder, measured_cfg(folder, 32, 1, gc, template="qwen", **opts))
    for seq, batch in ((32, 1), (64, 2)):
        cfg = measured_cfg(folder, seq, batch, gc, template="qwen", **opts)
        setup = resolve_setup(cfg, shape=shape).with_(padded=False)  # unmasked ids; the model's attention
        planned = saved_bytes(shape, setup, count_params(shape, setup))["total"]
        torch.manual_seed(1)
        measured = _measured(model, torch.randint(0, shape.vocab, (batch, seq)), cfg.bf16)
        errors.append((seq, batch, planned, measured, round(planned / measured - 1, 4)))
    assert all(abs(e[-1]) < ACTIVATION_BOUND for e in errors), errors


@pytest.mark.parametrize(
    "opts",
    [dict(finetuning_type="lora"), dict(finetuning_type="freeze", freeze_trainable_layers=-1)],
    ids=["lora", "freeze-dense"],
)
def test_a_dense_layer_below_a_sparse_one_is_counted_as_built(opts, moe_folders):
    """Qwen3-MoE with mlp_only_layers [0]: layer 0 runs a dense MLP (LoRA adapts its gate/up/down), layer 1 the
    experts; the planned trainable parameters and Linear weights are those of the model tunekit trains."""
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.plan.params import layer_linears

    folder = moe_folders["qwen3_moe_dense0"]
    shape = load_shape(None, str(folder))
    cfg = measured_cfg(folder, template="qwen", **opts)
    model = load_model(cfg, load_tokenizer(cfg), is_trainable=True)
    assert shape.dense_layers == (0,) and shape.moe.sparse_layers == 1
    counts = count_params(shape, resolve_setup(cfg))
    assert counts.trainable == sum(p.numel() for p in model.parameters() if p.requires_grad)
    layers = model.get_base_model().model.layers if hasattr(model, "get_base_model") else model.model.layers
    linears = [m for n, m in layers.named_modules() if isinstance(m, torch.nn.Linear) and "lora_" not in n]
    assert layer_linears(shape)[0] == sum(m.weight.numel() for m in linears)


@pytest.mark.parametrize("method", ["lora-bf16", "full-fp32"])
@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral", "gpt_oss"])
def test_the_router_aux_loss_keeps_each_sparse_layer_s_router_softmax(family, method, moe_folders):
    """moe_aux_loss_coef: transformers' load-balancing loss keeps the softmax of every sparse layer's router logits,
    tokens x experts in the compute dtype per layer; what autograd saves beyond that goes before backward."""
    folder = moe_folders[family]
    shape = load_shape(None, str(folder))
    moe, seq, batch = shape.moe, 64, 2
    planned, measured = [], []
    for coef in (None, 0.01):
        opts = dict(METHODS[method], **({} if coef is None else {"moe_aux_loss_coef": coef}))
        cfg = measured_cfg(folder, seq, batch, False, template="qwen", **opts)
        setup = resolve_setup(cfg).with_(padded=False)
        planned.append(saved_bytes(shape, setup, count_params(shape, setup))["total"])
        torch.manual_seed(1)
        measured.append(_measured(_model(folder, cfg), torch.randint(0, shape.vocab, (batch, seq)), cfg.bf16))
    tokens, c = seq * batch, 2 if cfg.bf16 else 4
    assert planned[1] - planned[0] == tokens * moe.sparse_layers * moe.experts * c
    # the hooks also see each layer's top-k indices (int64), freed with the top-k values the loss discards, and the
    # loss's per-expert fp32 token shares
    topk = tokens * moe.sparse_layers * moe.top_k * 8
    assert abs(measured[1] - measured[0] - topk - (planned[1] - planned[0])) <= 4 * moe.experts


def test_lora_on_the_experts_adds_the_adapted_weights_and_the_routed_rows(moe_folders):
    """LoRA on the fused experts against LoRA on attention only, one sparse layer term by term: the adapted weights
    W + s B A (E x out x in) and their cast factors E r (in + out) that PEFT forms in every forward, in bf16, and the
    routed rows the grouped matmuls then keep (k rows of h + W per token)."""
    folder = moe_folders["qwen3_moe"]
    shape = load_shape(None, str(folder))
    moe, h, T = shape.moe, shape.hidden, 64
    assert (moe.experts, moe.top_k, expert_width(shape), moe.normalized, moe.fp32_scores) == (4, 2, 128, True, False)
    attention = dict(METHODS["lora-bf16"], lora_target="q_proj,k_proj,v_proj,o_proj")
    planned = {}
    for name, opts in (("all", METHODS["lora-bf16"]), ("attention", attention)):
        setup = resolve_setup(measured_cfg(folder, T, 1, False, template="qwen", **opts))
        planned[name] = saved_bytes(shape, setup, count_params(shape, setup))["layers"]
    r, W, E, k = 8, 128, 4, 2
    fused = 2 * E * ((2 * W) * h + r * (h + 2 * W)) + 2 * E * (h * W + r * (W + h))
    assert planned["all"] - planned["attention"] == shape.layers * (fused + T * 2 * k * (h + W))


def test_qwen3_30b_a3b_lora_plans_its_routed_rows_and_adapted_experts():
    """docs/memory-model.md's Qwen3-30B-A3B arithmetic (h 2048, E 128, k 8, W 768, 48 layers; LoRA r 8 on everything,
    bf16, 2048 tokens): 115,508 routed bytes per token and layer; 1.125 GiB of adapted fused weights per layer, which
    every layer holds without checkpointing and the recomputed layer holds with it."""
    options = dict(model_name_or_path="qwen3-30b-a3b", finetuning_type="lora", lora_rank=8, bf16=True)
    options.update(cutoff_len=2048, per_device_train_batch_size=1, template="qwen3")
    shape = load_shape("qwen3-30b-a3b", None)
    setup = resolve_setup(load_config(None, dict(options, gradient_checkpointing=True)), seq_len=2048)
    kind = layer_kinds(shape, setup, count_params(shape, setup))[-1]
    h, E, k, W, r = 2048, 128, 8, 768, 8
    router = 4 * E + 8 * k + 4 + 4 * k
    assert (
        routed_saved_per_token(shape, setup, kind, 2, False)
        == router + 2 * k * (h + 3 * W) + 2 * k * (h + W) + 2 * k + 24 * k
        == 115_508
    )
    adapted = 2 * E * (2 * W * h + h * W)  # W + s B A of gate_up_proj and down_proj, bf16
    assert adapted == 1_207_959_552
    assert routed_saved_const(shape, setup, kind) == 4 * E + adapted + 2 * E * r * ((h + 2 * W) + (W + h))
    with_gc = make_plan(load_config(None, dict(options, gradient_checkpointing=True)), gpu="H100", num_samples=8)
    without = make_plan(load_config(None, dict(options, gradient_checkpointing=False)), gpu="H100", num_samples=8)
    assert with_gc.memory["activations"] > 1.6 * adapted / GiB  # the recomputed layer's adapted experts
    assert without.memory["activations"] > 48 * adapted / GiB  # every layer keeps its own
    assert with_gc.fits is True and without.fits is False


def test_gpt_oss_above_its_sliding_window_keeps_every_row_s_scores(moe_folders):
    """gpt-oss at 256 tokens, above its 128-token sliding window, as tunekit's loader builds it (eager: transformers
    has no SDPA for its sinks): eager attention scores the whole row on the sliding layers too and only masks what lies
    outside the window, so the planned probabilities c a (s + 1) per token and layer, with the clamped SwiGLU's routed
    rows, still meet the measurement."""
    from transformers import AutoConfig

    from tunekit.model.loader import load_model, load_tokenizer

    folder = moe_folders["gpt_oss"]
    hf = AutoConfig.from_pretrained(folder)
    assert hf.sliding_window < 256 and hf.layer_types == ["sliding_attention", "full_attention"]
    shape = load_shape(None, str(folder))
    errors = []
    for method in ("lora-bf16", "full-fp32"):
        cfg = measured_cfg(folder, 256, 1, False, template="qwen", **METHODS[method])
        setup = resolve_setup(cfg, shape=shape).with_(padded=False)
        planned = saved_bytes(shape, setup, count_params(shape, setup))["total"]
        torch.manual_seed(1)
        measured = _measured(_model(folder, cfg), torch.randint(0, shape.vocab, (1, 256)), cfg.bf16)
        errors.append((method, planned, measured, round(planned / measured - 1, 4)))
    loaded = load_model(cfg, load_tokenizer(cfg), is_trainable=True)
    assert loaded.config._attn_implementation == shape.default_attn == setup.attn == "eager"
    assert all(abs(e[-1]) < ACTIVATION_BOUND for e in errors), errors


def test_gpt_oss_20b_plans_eager_sink_attention_and_its_routed_rows():
    """docs/memory-model.md's gpt-oss-20b arithmetic (h 2880, W 2880, E 32, k 4, 64 heads of 64; LoRA r 8 on
    everything, bf16, 2048 tokens): per token and layer the eager attention core keeps 287,360 B (q, repeated k and v;
    the probabilities over the row and the sink; the row max's indices) and the router and routed rows 207,504 B (the
    top-k softmax; the whole gate/up output and four elementwise tensors of the clamped SwiGLU)."""
    options = dict(model_name_or_path="gpt-oss-20b", finetuning_type="lora", lora_rank=8, bf16=True)
    options.update(cutoff_len=2048, per_device_train_batch_size=1, template="qwen3", gradient_checkpointing=True)
    shape = load_shape("gpt-oss-20b", None)
    setup = resolve_setup(load_config(None, options), seq_len=2048, shape=shape)
    assert shape.default_attn == setup.attn == "eager"
    kind = layer_kinds(shape, setup, count_params(shape, setup))[-1]
    h, W, k, a, q, s, c = 2880, 2880, 4, 64, 64 * 64, 2048, 2
    assert (shape.moe.experts, shape.moe.top_k, expert_width(shape), shape.heads, shape.q_dim) == (32, k, W, a, q)
    assert sink_attention_saved(shape, setup, kind) == 3 * c * q + c * a * (s + 1) + 8 * a == 287_360
    routed = 8 * k + c * k + c * k * (h + 6 * W) + c * k * (h + W) + c * k + 24 * k
    assert routed_saved_per_token(shape, setup, kind, c, False) == routed == 207_504
