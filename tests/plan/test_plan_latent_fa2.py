"""Multi-head latent attention (DeepSeek-V2/V3) under FlashAttention-2 in the plan (plan/latent_attention.py;
docs/memory-model.md, "Multi-head latent attention"). FA2 needs CUDA, so the terms are checked one by one against
the derivation: transformers' ``flash_attention_forward`` pads the value from ``dv`` to the query/key width ``d``
and slices the output back, so flash-attn keeps the query, the key, the padded value and the padded output, ``c H d``
each, and the fp32 log-sum-exp ``4 H``; the sliced output is made contiguous by the model, a fresh ``c H dv`` that
``o_proj`` keeps when it trains (where SDPA's output is ``o_proj``'s input itself)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tunekit.config import load_config
from tunekit.plan.activations import NOGC_BACKWARD_EXTRA, dynamic_peak_bytes, layer_kinds, saved_bytes
from tunekit.plan.architectures import load_shape
from tunekit.plan.latent_attention import latent_saved_per_token
from tunekit.plan.memory import GiB
from tunekit.plan.params import count_params
from tunekit.plan.planner import make_plan
from tunekit.plan.training_setup import planned_machine, resolve_setup
from tunekit.train.decisions import decide_features

T = 2048  # tokens of the micro-batch (1 x cutoff_len)
# float64 sums of terms up to ~2e11 bytes (a few dozen additions): the rounding error stays far below one byte
BYTE = 1.0


def _options(method: str, attn: str) -> dict:
    return dict(
        model_name_or_path="deepseek-v3",
        finetuning_type=method,
        flash_attn=attn,
        bf16=True,
        cutoff_len=T,
        per_device_train_batch_size=1,
        gradient_checkpointing=False,
        template="deepseek3",
    )


def _terms(shape, setup):
    """latent_saved_per_token with its Linears' inputs recorded instead of counted: the attention's own terms, and
    each ``consumers(width, bytes, paths, already_saved)`` call."""
    calls = []
    kind = layer_kinds(shape, setup, count_params(shape, setup))[-1]

    def consumers(width, xd, paths, already_saved):
        calls.append((width, xd, tuple(p.rsplit(".", 1)[-1] for p in paths), already_saved))
        return 0

    return latent_saved_per_token(shape, setup, kind, 2, False, consumers), calls


@pytest.mark.parametrize("method", ["full", "lora"])
def test_fa2_keeps_the_padded_value_and_output_term_by_term(method):
    """DeepSeek-V3 (H 128, ql 1536, kr 512, nope 128, rope 64, d 192, dv 128), bf16 on a GPU. The inner norms keep
    4 ql + 4 and 4 kr + 4 (+ c ql, c kr when they train); the attention 4 c H d + 4 H under FA2, c H (2d + nope + dv)
    + c H dv + 4 H under SDPA, which DeepSeek's widths make equal (2d = nope + 2dv); o_proj's input is a fresh copy
    under FA2 (``already_saved`` False), SDPA's own output under SDPA. With dv 96 the two attention terms part:
    c H (4 x 192) against c H (2 x 192 + 128 + 2 x 96); with dv = d nothing is padded and FA2 keeps what SDPA keeps."""
    shape = load_shape("deepseek-v3", None)
    fa2 = resolve_setup(load_config(None, _options(method, "fa2")), seq_len=T)
    sdpa = resolve_setup(load_config(None, _options(method, "sdpa")), seq_len=T)
    assert (fa2.attn, sdpa.attn, fa2.host, fa2.compute_bytes) == ("fa2", "sdpa", False, 2)
    c, H, d, nope, dv, ql, kr = 2, 128, 192, 128, 128, 1536, 512
    assert shape.latent.qk_dim == d and (shape.heads, shape.latent.v_dim, shape.latent.q_rank) == (H, dv, ql)
    norms = 4 * ql + 4 + 4 * kr + 4 + (c * (ql + kr) if method == "full" else 0)
    inner = 4 if method == "full" else 2  # the inner norms' output: promoted to fp32 by a trained fp32 weight
    total, calls = _terms(shape, fa2)
    assert total == norms + 4 * c * H * d + 4 * H == norms + 197_120
    assert calls == [
        (7168, 2, ("q_a_proj", "kv_a_proj_with_mqa"), False),
        (ql, inner, ("q_b_proj",), False),
        (kr, inner, ("kv_b_proj",), False),
        (H * dv, c, ("o_proj",), False),  # the sliced output made contiguous: o_proj's own input
    ]
    total, calls = _terms(shape, sdpa)
    assert total == norms + c * H * (2 * d + nope + dv) + c * H * dv + 4 * H == norms + 197_120
    assert calls[-1] == (H * dv, c, ("o_proj",), True)  # SDPA's output is o_proj's input

    narrow = replace(shape, latent=replace(shape.latent, v_dim=96))
    assert _terms(narrow, fa2)[0] - _terms(narrow, sdpa)[0] == c * H * (4 * d - (2 * d + nope + 2 * 96)) == 16_384
    square = replace(shape, latent=replace(shape.latent, v_dim=d))
    assert _terms(square, fa2) == _terms(square, sdpa)


def test_the_planner_decides_fa2_as_training_does():
    """``flash_attn: fa2`` is one decision (train/decisions): the planned GPU machine runs it, and the plan says so."""
    cfg = load_config(None, _options("lora", "fa2"))
    assert decide_features(cfg, planned_machine(cfg)).attention == "fa2"
    assert resolve_setup(cfg, seq_len=T).attn == "fa2"
    assert make_plan(cfg, gpu="H100", num_samples=8).setup["attention"] == "fa2"


def test_deepseek_v3_on_an_h100_with_fa2_differs_from_sdpa_by_the_derived_bytes():
    """Full fine-tuning, bf16, 2048 tokens, no checkpointing: every one of the 61 layers keeps o_proj's input
    c H dv = 32,768 B per token more under FA2 (its attention terms are SDPA's at DeepSeek's widths), 61 x 2048 x
    32,768 B = 3.81 GiB saved; the peak adds the back-propagated layer's 0.6 x T x 32,768. LoRA: no difference
    (o_proj's adapted input is autocast's copy either way)."""
    shape = load_shape("deepseek-v3", None)
    per_token = 2 * 128 * 128
    plans, saved, peaks = {}, {}, {}
    for attn in ("sdpa", "fa2"):
        cfg = load_config(None, _options("full", attn))
        setup = resolve_setup(cfg, seq_len=T)
        saved[attn] = saved_bytes(shape, setup, count_params(shape, setup))["total"]
        peaks[attn] = dynamic_peak_bytes(shape, setup, count_params(shape, setup))["activations"]
        plans[attn] = make_plan(cfg, gpu="H100", num_samples=8)
    assert saved["fa2"] - saved["sdpa"] == 61 * T * per_token == 4_093_640_704
    assert abs(peaks["fa2"] - peaks["sdpa"] - (61 + NOGC_BACKWARD_EXTRA) * T * per_token) < BYTE
    reported = plans["fa2"].memory["activations"] - plans["sdpa"].memory["activations"]
    assert abs(reported - (61 + NOGC_BACKWARD_EXTRA) * T * per_token / GiB) <= 0.001  # two values rounded to 0.001
    lora = [resolve_setup(load_config(None, _options("lora", attn)), seq_len=T) for attn in ("sdpa", "fa2")]
    assert len({saved_bytes(shape, s, count_params(shape, s))["total"] for s in lora}) == 1


def test_fa2_multiplies_the_padded_value():
    """The time estimate's attention FLOPs (plan/time.py): scores ``q k`` and weighted values ``p v`` per head, token
    and key, causal (half) under SDPA and FA2. FA2 multiplies the value padded from dv to d: H (d + d), where SDPA
    multiplies H (d + dv); DeepSeek-V3 (H 128, d 192, dv 128, 61 layers) at 2048 tokens."""
    from tunekit.plan.time import flops_per_token

    shape = load_shape("deepseek-v3", None)
    L, H, d, dv = 61, 128, 192, 128
    att = {}
    for attn in ("fa2", "sdpa"):
        setup = resolve_setup(load_config(None, _options("lora", attn)), seq_len=T)
        fpt = flops_per_token(shape, setup, count_params(shape, setup), T)
        att[attn] = fpt["forward"]
    assert att["fa2"] - att["sdpa"] == L * T * H * (d - dv)
