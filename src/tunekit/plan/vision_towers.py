"""Saved-for-backward bytes and forward peak of the encoder towers (CLIP, SigLIP, Whisper;
``plan/vision_encoders.py``) and their projectors, per tower position (derivation: docs/memory-model.md section 3.5).
The block rules are the Qwen-VL ones (``plan/vision_memory.py``: norms, the Linear-input and PEFT-cast rules of the
text layers); what differs is the block (separate q/k/v, no rotary), the embeddings and each family's projector.
Checked on CPU against what autograd saves (``tests/plan/test_plan_vlm_towers.py``)."""

from __future__ import annotations

from .training_setup import Setup
from .vision import ACT_SAVED, VisionShape
from .vision_memory import VisionCounts, _Block, _norm, vision_forward_peak, vision_saved_bytes

_EMBED_CONVS = ("patch_embedding.weight", "conv1.weight", "conv2.weight")


def tower_saved_bytes(v: VisionShape, setup: Setup, counts: VisionCounts, patches: int) -> float:
    """Bytes the vision (audio) side keeps for backward for ``patches`` patches (an encoder: tower positions)."""
    if not v.tower:
        return vision_saved_bytes(v, setup, counts, patches)
    tower, projector = counts.grad(v, "tower"), counts.grad(v, "projector")
    if not patches or not (tower or projector):
        return 0.0
    b = _Block(v, setup, counts)
    res = _residual_bytes(v, setup, counts)
    per = _projector(v, b, tower, res)
    if tower:
        per += _embeddings(v, b, counts)
        blocks = sorted(
            {
                n.split(".layers.")[0] + ".layers." + n.split(".layers.")[1].split(".")[0]
                for p, n, _, _ in v.linears
                if p == "tower" and ".layers." in n
            },
            key=lambda k: int(k.rsplit(".", 1)[1]),
        )
        embed = _embeddings_train(v, counts)
        if (
            setup.grad_ckpt
        ):  # a checkpointed layer keeps only its inputs: the hidden state, Whisper's bool padding mask
            per += len(blocks) * res * v.hidden + (v.positions if v.tower == "whisper" else 0)
        else:
            per += sum(_block(v, b, k, input_grad=embed or i > 0) for i, k in enumerate(blocks))
    return per * patches + _const(v, setup, counts)


def tower_forward_peak(v: VisionShape, setup: Setup, patches: int, largest_image: int) -> float:
    """The tower's forward working set (one layer at a time), eager attention's scores per crop / audio."""
    if not v.tower:
        return vision_forward_peak(v, setup, patches, largest_image)
    if not patches:
        return 0.0
    c, h = setup.compute_bytes, v.hidden
    per = max(c * h + 3 * c * h + c * h, c * h + 3 * c * v.intermediate)
    scores = (4 + c) * v.heads * patches * v.positions if setup.attn == "eager" else 0.0
    return per * patches + scores


def _embeddings_train(v: VisionShape, counts: VisionCounts) -> bool:
    return any(".embed" in n or n.split(".")[-2] in ("conv1", "conv2") for n in counts.trained if n.endswith("weight"))


def _residual_bytes(v: VisionShape, setup: Setup, counts: VisionCounts) -> int:
    """The residual stream's dtype: the patch/conv output (compute dtype) plus the position embedding, so fp32 when
    that embedding is an fp32 trained weight (autocast's type promotion), else its load dtype."""
    if not setup.autocast:
        return setup.compute_bytes
    pos = [n for _, n, _ in v.params if "position" in n and n.endswith("weight")]
    dtype = setup.trainable_bytes if pos and pos[0] in counts.trained else setup.base_bytes
    return int(max(dtype, setup.compute_bytes))


def _block(v: VisionShape, b: _Block, prefix: str, input_grad: bool) -> float:
    """One encoder layer per position: two LayerNorms (input copy + mean/rstd), q/k/v/out_proj, SDPA's q, k, v, output
    and logsumexp, fc1 -> activation -> fc2. ``input_grad`` false for the lowest layer over frozen embeddings (with
    its norm frozen too, LoRA: that norm keeps nothing)."""
    c, s, h, inter = b.c, b.setup, v.hidden, v.intermediate
    lin = [n for _, n, _, _ in v.linears if n.startswith(prefix + ".")]
    role = {
        r: [n for n in lin if n.rsplit(".", 1)[1] in names]
        for r, names in (
            ("in", ("q_proj", "k_proj", "v_proj")),
            ("out", ("out_proj",)),
            ("fc1", ("fc1",)),
            ("fc2", ("fc2",)),
        )
    }
    norm_trains = any(n.startswith(prefix + ".") and "norm" in n for n in b.counts.trained)
    per, out = _norm(v, c, norm_trains, s.autocast)
    total = 2 * (per * h + 8) - (0 if input_grad or norm_trains else per * h + 8)
    total += b.consumers(h, out, role["in"])
    total += 4 * c * h + 4 * v.heads  # SDPA keeps q, k, v, its output (out_proj's input) and the fp32 logsumexp
    if v.tower == "whisper":  # the padding mask, made a float bias of q's dtype by each layer's SDPA: c·N² per audio
        total += c * v.positions
    total += b.consumers(h, c, role["out"], already=True)
    total += b.consumers(h, out, role["fc1"])
    return total + (ACT_SAVED[v.act] - 1) * c * inter + b.consumers(inter, c, role["fc2"])


def _embeddings(v: VisionShape, b: _Block, counts: VisionCounts) -> float:
    """Per position, below the layers: the pixels (mel frames) a trained patch convolution keeps, an Embedding's
    indices, CLIP's pre-LayerNorm, Whisper's two convolutions + GELUs; nothing when they are frozen."""
    if not _embeddings_train(v, counts):
        return 0.0
    c = b.c
    if v.tower == "whisper":  # conv1 (k 3) on 2 mel frames per position, GELU, conv2 (stride 2), GELU
        return 2 * v.in_channels * c + 2 * c * v.hidden + 2 * c * v.hidden + c * v.hidden
    per = (v.positions - (v.tower == "clip")) / v.positions * v.in_channels * c + 8  # pixels; position ids (int64)
    if v.tower == "clip":
        per += 4 * v.hidden + 8  # pre_layrnorm: its input (fp32 residual) and statistics
    return per


def _projector(v: VisionShape, b: _Block, tower: bool, res: int) -> float:
    """The tower's last norm (SigLIP / Whisper) and the family's projector, per tower position."""
    c, s, h = b.c, b.setup, v.hidden
    proj = [n for p, n, _, _ in v.linears if p == "projector"]
    per_ln, out = _norm(v, c, False, s.autocast)
    ln = per_ln * h + 8 if tower else 0.0  # SigLIP's post_layernorm, Whisper's layer_norm: input + statistics
    if v.tower == "clip":  # the feature layer without CLS -> linear_1 -> GELU -> linear_2
        width = max((fout for p, n, _, fout in v.linears if n in proj[:1]), default=h)
        share = v.feature_tokens / v.positions
        return share * (b.consumers(h, res, proj[:1]) + c * width + b.consumers(width, c, proj[1:]))
    if v.tower == "whisper":  # avg-pool (keeps its input) by 2, LayerNorm, Linear
        return (res * h if tower else 0.0) + 0.5 * (ln + b.consumers(h, out, proj))
    if v.family == "idefics3":  # post_layernorm, pixel shuffle (views), one Linear on scale² positions
        return ln + b.consumers(h, out, proj)
    return ln + _gemma3_projector(v, b, tower, out)


def _gemma3_projector(v: VisionShape, b: _Block, tower: bool, xd: int) -> float:
    """Gemma 3: avg-pool (keeps its contiguous input) to mm_tokens_per_image, Gemma's RMSNorm in fp32 (x, rstd, and the
    normalized value for a trained weight) and a matmul with ``mm_input_projection_weight`` (keeps its input)."""
    c, trained = b.c, b.counts.trained
    norm = any("mm_soft_emb_norm" in n for n in trained)
    weight = any(n.endswith("mm_input_projection_weight") for n in trained)
    pooled = (4 * v.hidden + 4 if tower else 0.0) + (4 * v.hidden if norm else 0.0)
    if weight:
        pooled += (c if b.setup.autocast else 4) * v.hidden
    return (xd * v.hidden if tower else 0.0) + pooled * v.feature_tokens / v.positions


def _const(v: VisionShape, setup: Setup, counts: VisionCounts) -> float:
    """Autocast's 16-bit copies of the fp32 trained weights and adapters (do not scale with positions); the layers'
    are recomputed under gradient checkpointing, not kept."""
    if not setup.autocast or setup.trainable_bytes == setup.compute_bytes:
        return 0.0
    c = setup.compute_bytes
    total = 0.0
    first = [n for p, n, _, _ in v.linears if p == "projector"][:1] if not counts.grad(v, "tower") else []
    for _, name, fin, fout in v.linears:
        if setup.grad_ckpt and ".layers." in name:
            continue
        if name + ".weight" in counts.trained and name not in first:  # no input gradient: its weight copy is not kept
            total += c * fin * fout
        if name in counts.adapted:
            total += c * setup.lora_rank * (fin + fout)
    other = _EMBED_CONVS + ("mm_input_projection_weight",)
    return total + sum(c * k for _, n, k in v.params if n.endswith(other) and n in counts.trained)
