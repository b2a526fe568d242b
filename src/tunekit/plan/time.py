"""FLOPs per token by method and an estimated wall time at an assumed model-FLOPs utilisation (MFU).

The matmul weights a token goes through (``N``: :func:`active_matmul_params`) drive the ``2 N`` forward / ``4 N``
backward FLOPs; in a mixture of experts they are the active ones (Qwen3-30B-A3B: ~3B of its 30.5B)."""

from __future__ import annotations

from .architectures import ModelShape
from .params import ParamCounts, layer_linears
from .training_setup import Setup

# Assumed MFU (share of the GPU's dense bf16 peak that training reaches); see docs/memory-model.md.
MFU = {"full": 0.40, "freeze": 0.40, "lora": 0.35, "oft": 0.35, "qlora": 0.25, "ptuning": 0.35, "prompt": 0.35}


def active_matmul_params(shape: ModelShape) -> int:
    """The decoder layers' weights one token multiplies: every Linear (each layer with its own structure); in a
    mixture of experts also the routers and ``k`` of the ``E`` routed experts (``plan/moe.py``), not all of them."""
    linear = layer_linears(shape)[0]
    moe = shape.moe
    return linear if moe is None else linear + moe.routers + moe.routed // moe.experts * moe.top_k


def attention_width(shape: ModelShape, attn: str) -> int:
    """Per token and key, the multiply-adds of attention's scores and weighted values over the heads: ``2 q``; latent
    attention: ``H (qk + v)`` (its query/key head wider than its value head), ``2 H qk`` under FlashAttention-2,
    which multiplies the value padded to the query's width (``plan/latent_attention.py``)."""
    lat = shape.latent
    if lat is None:
        return 2 * shape.q_dim
    return shape.heads * (lat.qk_dim + (lat.qk_dim if attn == "fa2" else lat.v_dim))


def flops_per_token(shape: ModelShape, setup: Setup, counts: ParamCounts, seq_len: int) -> dict[str, float]:
    """Training FLOPs per token: forward, backward, recomputation (2 FLOPs per multiply-add)."""
    L = shape.layers
    checkpointed = min(setup.ckpt_layers, L) if setup.ckpt_layers is not None else L  # gradient_checkpointing_layers
    recomputed = checkpointed / L
    N_L = active_matmul_params(shape)
    n_layer = N_L / L
    N_H = shape.hidden * shape.vocab
    att_layer = (
        (1 if setup.attn != "eager" else 2) * seq_len * attention_width(shape, setup.attn)
    )  # causal flash: half
    F_att = att_layer * L
    forward = 2 * N_L + 2 * N_H + F_att
    if setup.finetuning_type == "full":
        backward = 2 * forward
        recompute = recomputed * (2 * N_L + F_att) if setup.grad_ckpt else 0.0
    elif setup.finetuning_type in ("lora", "oft", "ptuning", "prompt"):  # counts.lora: the adapter; ptuning/prompt 0
        backward = (
            2 * N_L + 2 * N_H + 2 * F_att + 6 * counts.lora / 1
        )  # input grads everywhere, weight grads for adapters
        recompute = recomputed * (2 * N_L + F_att) if setup.grad_ckpt else 0.0
        forward += 2 * counts.lora
    else:  # freeze: backward reaches down to the lowest trainable layer
        lowest = min(counts.trainable_layer_ids)
        through = L - lowest
        k = len(counts.trainable_layer_ids)
        backward = 2 * N_H + through * (2 * n_layer + 2 * att_layer) + k * 2 * n_layer
        # checkpointed are the lowest ckpt_layers; backward recomputes those it reaches (lowest and above)
        recompute = max(0, checkpointed - lowest) * (2 * n_layer + att_layer) if setup.grad_ckpt else 0.0
    return {
        "forward": float(forward),
        "backward": float(backward),
        "recompute": float(recompute),
        "total": float(forward + backward + recompute),
    }


def estimate_time(
    shape: ModelShape,
    setup: Setup,
    counts: ParamCounts,
    tokens_per_sample: float,
    samples_per_epoch: int,
    epochs: float,
    total_steps: int,
    peak_flops: float | None,
    mfu: float | None = None,
) -> dict:
    fpt = flops_per_token(shape, setup, counts, int(tokens_per_sample))
    tokens = tokens_per_sample * samples_per_epoch * epochs
    total = fpt["total"] * tokens
    method = "qlora" if setup.quant_bits else setup.finetuning_type
    mfu = mfu if mfu is not None else MFU[method]
    if setup.offload_optimizer or setup.offload_params:
        mfu *= 0.5  # PCIe transfers every step; a rough factor
    ckpt = "no checkpointing"
    if setup.grad_ckpt:
        ckpt = "gradient checkpointing" + (
            f" of the lowest {setup.ckpt_layers} layers" if setup.ckpt_layers is not None else ""
        )
    speed = (
        "a CPU run: no wall time is estimated (benchmarks/real_shape.py measures one)"
        if setup.host
        else f"MFU {mfu:.2f} of dense bf16 peak"
    )
    out = {
        "flops_per_token": fpt["total"],
        "flops_per_token_breakdown": fpt,
        "tokens": tokens,
        "total_flops": total,
        "mfu": mfu,
        "assumptions": f"{method}, {ckpt}, {tokens_per_sample:.0f} tokens per sample, {speed}",
    }
    if peak_flops:
        seconds = total / (peak_flops * mfu * setup.world_size)
        out["seconds"] = seconds
        out["seconds_per_step"] = seconds / max(1, total_steps)
    return out
