"""Ulysses context parallelism (LLaMA-Factory v1's ``cp_mode: ulysses``, ``cp_size: N``): each sequence split over
``N`` processes, so a process holds ``1/N`` of every sequence's activations.

The processes of a *sequence group* (ranks ``g*N .. g*N+N-1``) train the same micro-batch. Each one runs the model on
its contiguous ``1/N`` of the positions (:func:`shard_batch`: global position ids, labels shifted before the cut so
the token after a cut is still predicted). Everything but attention is per token. Around attention, one all-to-all
turns ``[batch, heads, seq/N, dim]`` into ``[batch, heads/N, seq, dim]`` (every process then attends over the whole
sequence with its share of the heads) and another turns the result back (DeepSpeed-Ulysses, Jacobs et al. 2023; the
same exchange as LLaMA-Factory v1's and DeepSpeed's ALST). The exchange's backward is the reverse exchange, so each
process's gradients include what its part of the sequence contributed to the others' losses; data parallelism (DDP,
or FSDP2 over all processes) then sums them as usual.

The attention is registered with transformers' public ``AttentionInterface`` under ``ulysses_<core>`` (``sdpa``, or
``flash_attention_2`` on GPUs) and the model switched to it with ``set_attn_implementation``; the core's own mask
function is registered for that name too, so evaluation and generation (``module.training`` false: no exchange)
attend exactly as the core does. In training the local mask is dropped: the gathered sequence is masked causally,
which is exact for right-padded rows (padding only ever follows a row's tokens, and its labels are IGNORE_INDEX).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ...config.problems import config_error
from ...data.labels import IGNORE_INDEX
from ...model.sequence_split import check_sequence_split

#: the collator's keys a sequence group can split; any other (media, packed positions, per-token weights) is refused
SPLITTABLE_KEYS = frozenset({"input_ids", "attention_mask", "labels"})


@dataclass(frozen=True)
class SequenceGroup:
    """The processes that share one micro-batch, each holding ``1/size`` of its positions."""

    group: object  # torch.distributed.ProcessGroup
    size: int
    rank: int  # this process's place in the group: which part of the sequence it holds


_ACTIVE: dict[str, SequenceGroup] = {}  # the one group of this process, once apply() set it up


def active_group() -> SequenceGroup | None:
    """The sequence group :func:`apply` set up in this process (None without context parallelism)."""
    return _ACTIVE.get("group")


def new_sequence_group(cp_size: int) -> SequenceGroup:
    """Groups of ``cp_size`` consecutive ranks; every rank creates every group (torch.distributed's rule)."""
    world, rank = dist.get_world_size(), dist.get_rank()  # a multiple of cp_size: distributed.check_divisibility
    mine = None
    for start in range(0, world, cp_size):
        group = dist.new_group(list(range(start, start + cp_size)))
        if start <= rank < start + cp_size:
            mine = group
    return SequenceGroup(mine, cp_size, rank % cp_size)


def _exchange(x: torch.Tensor, scatter: int, gather: int, group) -> torch.Tensor:
    """``x`` cut in equal parts along ``scatter``, part ``i`` sent to the group's process ``i``; what arrives is
    joined along ``gather``."""
    size = dist.get_world_size(group)
    parts = [t.contiguous() for t in x.tensor_split(size, dim=scatter)]
    received = [torch.empty_like(parts[0]) for _ in range(size)]
    dist.all_to_all(received, parts, group=group)
    return torch.cat(received, dim=gather)


class _Exchange(torch.autograd.Function):
    """:func:`_exchange` whose gradient is the reverse exchange."""

    @staticmethod
    def forward(ctx, x, scatter: int, gather: int, group):
        ctx.dims, ctx.group = (scatter, gather), group
        return _exchange(x, scatter, gather, group)

    @staticmethod
    def backward(ctx, grad):
        scatter, gather = ctx.dims
        return _exchange(grad, gather, scatter, ctx.group), None, None, None


def ulysses_attention(core: str, seq: SequenceGroup):
    """transformers' attention function ``core`` with the Ulysses exchange around it while the module trains."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    def attend(module, query, key, value, attention_mask, **kwargs):
        attention = ALL_ATTENTION_FUNCTIONS[core]
        if not module.training:  # evaluation and generation see whole sequences on each process
            return attention(module, query, key, value, attention_mask, **kwargs)
        # [batch, heads, seq/N, dim] -> [batch, heads/N, seq, dim]
        query, key, value = (_Exchange.apply(t, 1, 2, seq.group) for t in (query, key, value))
        if torch.is_tensor(kwargs.get("position_ids")):  # flash attention reads them for the whole sequence
            positions = kwargs["position_ids"].contiguous()
            parts = [torch.empty_like(positions) for _ in range(seq.size)]
            dist.all_gather(parts, positions, group=seq.group)
            kwargs["position_ids"] = torch.cat(parts, dim=-1)
        output, _ = attention(module, query, key, value, None, **kwargs)  # causal over the gathered sequence
        # [batch, seq, heads/N, dim] -> [batch, seq/N, heads, dim]
        return _Exchange.apply(output, 1, 2, seq.group), None

    return attend


def core_attention(model) -> str:
    """The attention implementation the model loaded with (what the exchange wraps)."""
    core = str(getattr(model.config, "_attn_implementation", None) or "sdpa")
    if core not in ("sdpa", "flash_attention_2", "flash_attention_3"):
        raise config_error("cp_attention", ("cp_size",), attention=core)
    return core


def apply(model, cp_size: int) -> SequenceGroup:
    """Set up the sequence group and switch ``model`` (a transformers model, or PEFT's wrapper of one) to the
    exchanged attention; every process calls it, after the process group started."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    check_sequence_split(cp_size, base.config)  # also before the model loads: train/preflight.py
    core = core_attention(base)
    seq = new_sequence_group(cp_size)
    name = f"ulysses_{core}"
    AttentionInterface.register(name, ulysses_attention(core, seq))
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[core])
    base.set_attn_implementation(name)
    _ACTIVE["group"] = seq
    return seq


def shard_batch(inputs: dict, seq: SequenceGroup, pad_id: int) -> tuple[dict, torch.Tensor]:
    """This process's part of a right-padded micro-batch: ``({input_ids, position_ids}, shift_labels)``.

    The rows are padded to a multiple of the group's size; ``shift_labels[:, i]`` is the token position ``i``
    predicts (``labels[:, i + 1]``), cut after shifting so no prediction is lost at a cut; positions are global."""
    extra = sorted(set(inputs) - SPLITTABLE_KEYS)
    if extra:
        raise config_error("cp_batch_keys", ("cp_size",), cp=seq.size, keys=", ".join(extra))
    ids, labels = inputs["input_ids"], inputs["labels"]
    mask = inputs.get("attention_mask")
    if mask is not None and bool((mask[:, 1:] > mask[:, :-1]).any()):  # a 0 before a 1: padding not at the end
        raise config_error("cp_left_padding", ("cp_size",), cp=seq.size)
    length = ids.shape[1]
    pad = (-length) % seq.size
    chunk = (length + pad) // seq.size
    part = slice(seq.rank * chunk, (seq.rank + 1) * chunk)
    shifted = F.pad(labels[:, 1:], (0, 1 + pad), value=IGNORE_INDEX)
    ids = F.pad(ids, (0, pad), value=pad_id)
    positions = torch.arange(length + pad, device=ids.device).expand(ids.shape[0], -1)
    return {"input_ids": ids[:, part], "position_ids": positions[:, part]}, shifted[:, part]
