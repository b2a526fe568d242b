"""Trainable parameters and activation bytes of a VLM's vision tower and projector (derivation:
docs/memory-model.md, section "Vision tower"). Parameters as ``tunekit.model.trainable`` trains them (module docstring
of ``plan/vision.py``); activations per image patch, checked on CPU against what autograd saves
(``tests/plan/test_plan_vlm.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from .training_setup import Setup
from .vision import ACT_SAVED, VisionShape


@dataclass(frozen=True)
class VisionCounts:
    trainable: int
    tensors: int
    frozen: int
    lora: int
    largest: int
    trained: frozenset[str]  # full names of the parameters that train (full fine-tuning)
    adapted: frozenset[str]  # full names of the Linear modules with a LoRA adapter

    def grad(self, v: VisionShape, part: str) -> bool:
        """Whether anything of ``part`` trains (so gradients flow into it)."""
        return any(p == part and (n in self.trained) for p, n, _ in v.params) or any(
            p == part and n in self.adapted for p, n, _, _ in v.linears
        )


def frozen_parts(setup: Setup) -> set[str]:
    tower, projector, _ = setup.vision_freeze
    return {p for p, frozen in (("tower", tower), ("projector", projector)) if frozen}


def count_vision(v: VisionShape, setup: Setup) -> VisionCounts:
    frozen = frozen_parts(setup)
    trained: set[str] = set()
    adapted: set[str] = set()
    lora = tensors = largest = 0
    if setup.finetuning_type in ("full", "freeze"):  # freeze-tuning: the LM's last layers + the unfrozen media parts
        trained = {n for p, n, _ in v.params if p not in frozen}
    elif setup.finetuning_type == "lora":
        layers = v.linears if setup.lora_targets is None else v.linears + v.convs
        for part, name, fin, fout in layers:
            hit = part not in frozen and (setup.lora_targets is None or name.split(".")[-1] in setup.lora_targets)
            if hit:
                adapted.add(name)
                lora += setup.lora_rank * (fin + fout) + (fout if setup.use_dora else 0)
                tensors += 2 + int(setup.use_dora)
                largest = max(largest, setup.lora_rank * max(fin, fout))
    sizes = {n: k for _, n, k in v.params}
    trainable = lora + sum(sizes[n] for n in trained)
    tensors += len(trained)
    largest = max([largest] + [sizes[n] for n in trained])
    return VisionCounts(
        trainable, tensors, v.total_params - (trainable - lora), lora, largest, frozenset(trained), frozenset(adapted)
    )


def _norm(v: VisionShape, c: int, trains: bool, autocast: bool) -> tuple[float, int]:
    """``(bytes kept per unit of width, bytes per element of the output)`` of one norm: the fp32 input copy (the input
    itself when fp32) and, for a trained RMSNorm weight, the normalized value; the statistics (4 or 8 bytes a row)
    are added by the caller."""
    if v.layer_norm:  # native layer_norm: input (fp32 under autocast) + mean + rstd; fp32 output under autocast
        return 4.0, (4 if autocast else c)
    return 4.0 + (c if trains else 0), (4 if (trains and c != 4) else c)


class _Block:
    """Per-patch saved bytes of one kind of module, with the Linear-input rule of the text layers
    (plan/activations.py)."""

    def __init__(self, v: VisionShape, setup: Setup, counts: VisionCounts):
        self.v, self.setup, self.counts = v, setup, counts
        self.c = setup.compute_bytes

    def consumers(self, width: float, xd: int, names: list[str], already: bool = False) -> float:
        s, c, extra, shared = self.setup, self.c, 0.0, False
        for name in names:
            if name + ".weight" in self.counts.trained:
                if s.autocast and xd != c:
                    extra += c * width
                else:
                    shared = True
            elif name in self.counts.adapted:
                if s.autocast and (xd != 4 or c != xd) or (not s.autocast and xd != 4):
                    extra += (c if s.autocast else 4) * width
                else:
                    shared = True
                extra += (c if s.autocast else 4) * s.lora_rank  # lora_A output, kept for lora_B
        return extra + (xd * width if shared and not already else 0)

    def block(self, prefix: str, input_grad: bool = True) -> float:
        """One tower block (``prefix`` = its module name): norms, attention, MLP. ``input_grad`` false for the
        lowest block when the patch embedding does not train: its first norm's input needs no gradient (nor its
        statistics)."""
        v, c, s = self.v, self.c, self.setup
        h, inter, a = v.hidden, v.intermediate, v.heads
        lin = [n for p, n, _, _ in v.linears if n.startswith(prefix + ".")]
        attn_in = [n for n in lin if n.endswith(".attn.qkv")]
        attn_out = [n for n in lin if n.endswith(".attn.proj")]
        mlp = [n for n in lin if ".mlp." in n]
        mlp_out = [n for n in mlp if n.endswith(("down_proj", "fc2", "linear_fc2"))]
        mlp_in = [n for n in mlp if n not in mlp_out]
        norm_trains = any(n.startswith(prefix + ".norm") for n in self.counts.trained)
        per, out = _norm(v, c, norm_trains, s.autocast)
        total = 2 * (per * h + (8 if v.layer_norm else 4))
        if not input_grad:
            total -= 4 * h + (8 if v.layer_norm else 4)
        total += self.consumers(h, out, attn_in)
        total += 3 * c * h + 2 * c * h + c * h + 4 * a  # qkv output (holds v), rotated q and k, attention output, lse
        total += self.consumers(h, c, attn_out)
        total += self.consumers(h, out, mlp_in)
        total += (ACT_SAVED[v.act] - 1) * c * inter + self.consumers(inter, c, mlp_out)
        return total

    def merger(self, prefix: str, width_norm: float, input_grad: bool) -> float:
        """A patch merger (norm, Linear, GELU, Linear) per patch; ``width_norm``: its norm's width per patch;
        ``input_grad``: whether its input needs a gradient (the tower trains): else the norm keeps only what its
        trained weight multiplies (the normalized value)."""
        v, c, s = self.v, self.c, self.setup
        lin = sorted(n for p, n, _, _ in v.linears if n.startswith(prefix + "."))
        norm_trains = any(n.startswith(prefix + ".") and ("norm" in n or "ln_q" in n) for n in self.counts.trained)
        per, out = _norm(v, c, norm_trains, s.autocast)
        if input_grad:
            total = per * width_norm + (8 if v.layer_norm else 4) / (1 if width_norm == v.hidden else v.merge**2)
        else:
            total = c * width_norm if norm_trains else 0.0
        total += self.consumers(v.hidden, out, lin[:1]) + c * v.hidden + self.consumers(v.hidden, c, lin[1:])
        return total


def vision_saved_bytes(v: VisionShape, setup: Setup, counts: VisionCounts, patches: int) -> float:
    """Bytes the vision side keeps for backward for ``patches`` image/video patches (0 when nothing of it trains)."""
    if not v.patch_size or not patches:
        return 0.0
    tower, projector = counts.grad(v, "tower"), counts.grad(v, "projector")
    if not (tower or projector):
        return 0.0
    b, c = _Block(v, setup, counts), setup.compute_bytes
    per = 0.0
    mergers = sorted(
        {
            n.rsplit(".", 2)[0] if "deepstack" in n else n.split(".merger.")[0] + ".merger"
            for p, n, _, _ in v.linears
            if ".merger" in n
        }
    )
    main = [m for m in mergers if "deepstack" not in m]
    per += sum(b.merger(m, v.hidden, tower) for m in main)
    if tower:
        blocks = sorted(
            {
                n.split(".blocks.")[0] + ".blocks." + n.split(".blocks.")[1].split(".")[0]
                for _, n, _, _ in v.linears
                if ".blocks." in n
            },
            key=lambda k: int(k.rsplit(".", 1)[1]),
        )
        if setup.grad_ckpt:  # a checkpointed block keeps only its input
            per += len(blocks) * c * v.hidden
        else:
            embed = any(".patch_embed." in n for n in counts.trained)
            per += sum(b.block(k, input_grad=embed or i > 0) for i, k in enumerate(blocks))
            per += 2 * 4 * (v.hidden // max(v.heads, 1))  # rotary cos / sin (fp32), shared by the blocks
        per += sum(b.merger(m, v.hidden, True) for m in mergers if "deepstack" in m)
        if any(".patch_embed." in n for n in counts.trained):
            per += v.in_channels * v.temporal_patch * v.patch_size**2 * c  # the pixels in the compute dtype
    return per * patches + _const(v, setup, counts)


def _const(v: VisionShape, setup: Setup, counts: VisionCounts) -> float:
    """Autocast's 16-bit copies of the fp32 trained weights and adapters (do not scale with patches)."""
    if not setup.autocast or setup.trainable_bytes == setup.compute_bytes:
        return 0.0
    c = setup.compute_bytes
    sizes = {n: k for _, n, k in v.params}
    total = 0.0
    for _, name, fin, fout in v.linears:
        if setup.grad_ckpt and ".blocks." in name:  # recomputed in backward: the copies are not kept
            continue
        if name + ".weight" in counts.trained:
            total += c * fin * fout
        if name in counts.adapted:
            total += c * setup.lora_rank * (fin + fout)
    total += sum(
        c * k for n, k in sizes.items() if ".patch_embed." in n and n.endswith("weight") and n in counts.trained
    )
    return total


def vision_forward_peak(v: VisionShape, setup: Setup, patches: int, largest_image: int) -> float:
    """Transient bytes while one tower block runs its forward pass (the tower's own peak before the LM starts): the
    residual stream, qkv and the fp32 rotary temporaries, or the MLP's intermediate; eager attention adds the
    scores of the largest image (fp32 softmax + probabilities)."""
    if not v.patch_size or not patches:
        return 0.0
    c, h = setup.compute_bytes, v.hidden
    per = max(c * h + 3 * c * h + 8 * h + c * h, c * h + 3 * c * v.intermediate)
    scores = (4 + c) * v.heads * largest_image**2 if setup.attn == "eager" else 0.0
    return per * patches + scores
