"""LM head + cross-entropy in chunks of tokens: the ``[tokens x vocab]`` logits are never held whole.

The plain path (even on trained tokens only, ``token_loss.py``) computes ``N x V`` fp32 logits, keeps the
``log_softmax`` output for backward and then builds two more ``N x V`` tensors in backward (the gradient of the
NLL and of the log-softmax input). With Qwen2.5's 151,936-word vocabulary that is 0.6 MB per token and per
tensor: 2.4 GiB per 1,000 trained tokens at the backward peak, on a GPU as on a CPU.

Here one autograd function does the head and the loss together, ``rows`` tokens at a time, and computes the
gradients in the same pass (the way Liger's fused linear cross-entropy does, without its Triton kernels):

    for each chunk x_c (rows x hidden):
        z   = (x_c @ W^T + b).float()                  the chunk's logits, fp32 as HF's loss upcasts them
        lse = logsumexp(z)                             loss_c = sum(lse - z[target])
        g   = softmax(z) - onehot(target)              d loss_c / d z, in place of z
        dx_c = g @ W ;  dW += g^T @ x_c ;  db += sum(g)   (g cast to W's dtype, as autograd's .float() backward does)

Every chunk of a pass reuses one ``rows x V`` buffer (:func:`_logits_into`), and the logsumexp, softmax and gradient
run in its storage: one chunk alive, one chunk-sized allocation per pass (issue 17: ``torch.logsumexp``'s temporary
and a fresh block per chunk held two chunks and grew glibc's heap; docs/memory-model.md 3.7).

Backward only multiplies the stored ``dx`` / ``dW`` by the incoming scalar gradient (``1 / num_items_in_batch``
times the loss scale), because the loss is a plain sum over tokens. The FLOPs are those of the plain path (one
forward and two backward matmuls of the head); the memory is one chunk of logits plus ``dx`` (``N x hidden``),
and ``dW`` when the head trains (the gradient autograd would have allocated anyway). A chunk holds
:data:`CHUNK_BYTES` of fp32 logits (883 rows of a 152k vocabulary): every chunk streams the whole head weight
through its matmuls twice (three times when the head trains), so small chunks are memory-bound, on a CPU as on a
GPU. Measured at Qwen2.5-0.5B's head on one CPU core (``benchmarks/lm_head_loss.py``, frozen head): 41-row chunks
took 1.47x the plain path's time, 128 rows 1.10x; 883 rows 0.92x at 1,600 tokens, with 0.38x its peak memory.

Equal to the plain path up to summation order (``tests/train/test_chunked_lm_head.py`` holds the loss and every
gradient to a derived fp32 bound). Used by ``TrainedTokensLossMixin`` for the plain token-mean loss only (the
DFT/EAFT/ASFT variants need the per-token probabilities and take the plain path), and only for a head that is a
plain ``nn.Linear`` whose output the model returns unchanged (checked on the model itself, see token_loss.py).
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from ..data.labels import IGNORE_INDEX
from .batching import segment_of_tokens

CHUNK_BYTES = 512 << 20  # fp32 logits per chunk: 883 rows of a 152k vocabulary, enough rows per pass over the weight


def chunk_rows(vocab: int, device: torch.device | None = None) -> int:
    """Tokens per chunk: as many fp32 logit rows as fit :data:`CHUNK_BYTES` (at least 1), on every device."""
    return max(1, CHUNK_BYTES // (4 * max(1, vocab)))


def _logits_into(buf: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The chunk's logits ``x @ W^T + b`` in ``buf[:len(x)]`` (the accumulation dtype): every chunk of one call reuses
    the one buffer. A fresh chunk-sized tensor per chunk (512 MiB at V = 151,936) made glibc's heap grow by a chunk
    each time on CPU — the small tensors allocated between two chunks are carved from the freed block — so the process
    kept ~3 chunks of freed memory resident per forward pass (benchmarks/dpo_memory.py, docs/memory-model.md 3.7)."""
    z = buf[: x.shape[0]]
    if x.dtype != buf.dtype or weight.dtype != buf.dtype or torch.is_autocast_enabled(x.device.type):
        return z.copy_(F.linear(x, weight, bias))  # a 16-bit or autocast matmul as before, upcast into the buffer
    if bias is None:
        return torch.mm(x, weight.t(), out=z)
    return torch.addmm(bias, x, weight.t(), out=z)


def _exp_shifted(z: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(row max m, sum exp(z - m), z[i, t_i])`` with ``z`` overwritten by ``exp(z - m)``: the logsumexp is then
    ``m + log(sum)``, computed in the logits' own storage (``torch.logsumexp`` allocates a second chunk-sized
    tensor)."""
    m = z.amax(dim=-1)
    picked = z.gather(1, t[:, None]).squeeze(1)
    return m, z.sub_(m[:, None]).exp_().sum(dim=-1), picked


def _needs(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[bool, bool, bool]:
    """Which of ``d hidden``, ``d W``, ``d b`` the backward pass will ask for (grad mode on and the tensor requires
    it)."""
    grad = torch.is_grad_enabled()
    return (
        grad and hidden.requires_grad,
        grad and weight.requires_grad,
        grad and bias is not None and bias.requires_grad,
    )


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, rows: int, need_x: bool, need_w: bool, need_b: bool):
        acc = torch.promote_types(weight.dtype, torch.float32)  # fp32 as HF's loss upcasts; float64 stays float64
        total = torch.zeros((), dtype=acc, device=hidden.device)
        grad_x = torch.empty_like(hidden) if need_x else None
        grad_w = None  # fp32 d W: the first chunk's product, the others added in place (no zero-filled V x h buffer)
        grad_b = torch.zeros(bias.shape, dtype=acc, device=bias.device) if need_b else None
        buf = hidden.new_empty((min(rows, hidden.shape[0]), weight.shape[0]), dtype=acc)  # every chunk's logits
        for start in range(0, hidden.shape[0], rows):
            x = hidden[start : start + rows]
            t = targets[start : start + rows]
            z = _logits_into(buf, x, weight, bias)
            m, s, picked = _exp_shifted(z, t)  # z now holds exp(z - m)
            total += (m + s.log() - picked).sum()
            if not (need_x or need_w or need_b):
                continue
            g = z.div_(s[:, None])  # softmax, in the logits' storage
            g[torch.arange(t.shape[0], device=t.device), t] -= 1.0
            if need_b:
                grad_b += g.sum(dim=0)
            low = g.to(weight.dtype)  # g itself when the head is fp32 / float64; a 16-bit copy for the 16-bit matmul
            if need_x:
                grad_x[start : start + rows] = low @ weight
            if need_w:
                if low is not g:  # the 16-bit gradient upcast into g's own storage, not into a second fp32 chunk
                    g.copy_(low)
                low = None
                grad_w = torch.mm(g.t(), x.to(acc)) if grad_w is None else grad_w.addmm_(g.t(), x.to(acc))
            del z, g, low
        # kept on ctx, not save_for_backward: these are this function's own buffers, scaled in place in backward
        ctx.grads = (grad_x, grad_w, grad_b)
        ctx.dtypes = (weight.dtype, bias.dtype if bias is not None else None)
        return total

    @staticmethod
    def backward(ctx, grad_out):
        if ctx.grads is None:  # the buffers became the gradients the first time
            raise RuntimeError(
                "the chunked LM head's backward ran twice over one forward (retain_graph): set "
                "chunked_lm_loss: false for this"
            )
        grad_x, grad_w, grad_b = ctx.grads
        ctx.grads = None
        w_dtype, b_dtype = ctx.dtypes
        dx = grad_x.mul_(grad_out.to(grad_x.dtype)) if grad_x is not None else None
        dw = grad_w.mul_(grad_out).to(w_dtype) if grad_w is not None else None
        db = grad_b.mul_(grad_out).to(b_dtype) if grad_b is not None else None
        return dx, dw, db, None, None, None, None, None


def chunked_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    rows: int | None = None,
) -> torch.Tensor:
    """``sum`` over tokens of ``cross_entropy((hidden @ weight.T + bias).float(), targets)``, ``rows`` tokens at a
    time.

    ``hidden`` is ``[N, hidden]`` (the trained positions only), ``targets`` ``[N]`` (no ignore index: every row is
    trained). Gradients flow to ``hidden``, ``weight`` and ``bias`` where they require grad and grad mode is on."""
    if hidden.shape[0] == 0:
        return hidden.sum() * 0.0 + weight.sum() * 0.0
    rows = rows or chunk_rows(weight.shape[0], hidden.device)
    return _ChunkedLinearCrossEntropy.apply(hidden, weight, bias, targets, rows, *_needs(hidden, weight, bias))


class _Capture:
    """What the head saw and returned during one forward (see :func:`head_input`)."""

    def __init__(self):
        self.hidden = None
        self.output = None
        self.returned = None  # what the head's owner module returned (see head_owner)
        self.mismatch = False


def usable(head) -> bool:
    """A plain ``nn.Linear`` head with its whole weight at hand: not PEFT-wrapped (``modules_to_save`` / LoRA on the
    head), not sharded (an FSDP2 DTensor, a ZeRO-3 partition: the weight is whole only inside the head's own
    forward)."""
    if type(head) is not torch.nn.Linear:
        return False
    weight = head.weight
    return type(weight.data) is torch.Tensor and weight.numel() == head.in_features * head.out_features


def head_input(
    model,
    head: torch.nn.Module,
    inputs: dict,
    keep: torch.Tensor,
    strict: bool = True,
    option: str = "trained_tokens_loss",
):
    """Run ``model(**inputs)`` with the head fed no rows; returns ``(outputs, hidden[keep])`` (the head's input rows).

    ``None`` when the model changed the head's output before returning it (Gemma 2's soft-capping, Cohere's logit
    scale, ...: the loss needs those logits, so the caller takes the plain path; the check is on the model itself: the
    ``logits`` it returns must be the very tensor its head produced) or, with ``strict=False``, when the head received
    hidden states of another shape than ``keep`` (they then pass through unchanged). With ``strict`` that shape is an
    error naming ``option``."""
    cap = _Capture()

    def select(module, args, kwargs):
        hidden = args[0]
        if hidden.dim() != 3 or hidden.shape[:2] != keep.shape:
            if not strict:
                cap.mismatch = True
                return None
            raise RuntimeError(
                f"the LM head received hidden states of shape {tuple(hidden.shape)}, expected "
                f"[{keep.shape[0]}, {keep.shape[1]}, hidden]: set {option}: false for this model"
            )
        cap.hidden = hidden[keep]
        return (cap.hidden[:0].unsqueeze(0), *args[1:]), kwargs

    def record(module, args, output):
        cap.output = output

    def returned(module, args, output):
        cap.returned = output

    handles = [head.register_forward_pre_hook(select, with_kwargs=True), head.register_forward_hook(record)]
    owner = head_owner(model, head)
    if owner is not None:
        handles.append(owner.register_forward_hook(returned))
    try:
        outputs = model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    if cap.mismatch:
        return None
    if cap.hidden is None:
        raise RuntimeError(
            f"the model never called its output embedding (get_output_embeddings()): "
            f"set {option}: false for this model"
        )
    # The check is on what the head's own model returned, not on what reaches the caller: a mixed-precision wrapper
    # (accelerate's fp32 conversion of the outputs under bf16/fp16 autocast) hands back a copy of every 16-bit tensor.
    if getattr(cap.returned if owner is not None else outputs, "logits", None) is not cap.output:
        return None
    return outputs, cap.hidden


def head_owner(model, head: torch.nn.Module) -> torch.nn.Module | None:
    """The module that holds ``head`` as its own child (the ``...ForCausalLM`` that returns the logits), or None."""
    return next((m for m in model.modules() if any(c is head for c in m.children())), None)


def fused_forward(
    model, head: torch.nn.Module, inputs: dict, keep: torch.Tensor, targets: torch.Tensor, rows: int | None = None
):
    """Run ``model(**inputs)`` with the head fed no rows and compute the summed loss of the ``keep`` rows here.

    Returns ``(outputs, loss_sum)``, or ``None`` when the model changed the head's output (:func:`head_input`)."""
    captured = head_input(model, head, inputs, keep)
    if captured is None:
        return None
    outputs, hidden = captured
    return outputs, chunked_linear_cross_entropy(hidden, head.weight, head.bias, targets, rows)


# ---- per-token log-probs (dpo / kto): log p(target) = z[target] - logsumexp(z), a chunk of tokens at a time
# ----------


class _ChunkedTokenLogps(torch.autograd.Function):
    """``log_softmax(hidden @ W^T + b)[target]`` per row. Its gradient with respect to the chunk's logits is
    ``grad_out[:, None] * (onehot(target) - softmax(z))``, the log-softmax gather's backward.

    The upstream gradient is per token here (a sequence's sum feeds a per-pair loss), so ``d W`` cannot be formed in
    the forward pass as for the cross-entropy: when the head trains, backward recomputes each chunk's logits (one more
    head matmul). When only ``hidden`` needs a gradient (LoRA: the tied head is frozen), ``d hidden`` is formed in the
    forward pass per row, ``(onehot - softmax) @ W``, and backward scales each row by its ``grad_out``: exact, since
    that gradient is linear in ``grad_out`` row by row, and no recompute."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, rows: int, need_x: bool, need_w: bool, need_b: bool):
        acc = torch.promote_types(weight.dtype, torch.float32)
        out = torch.empty(hidden.shape[0], dtype=acc, device=hidden.device)
        early = need_x and not (need_w or need_b)
        grad_x = torch.empty_like(hidden) if early else None
        lses = torch.empty_like(out) if (need_w or need_b) else None
        buf = hidden.new_empty((min(rows, hidden.shape[0]), weight.shape[0]), dtype=acc)
        for start in range(0, hidden.shape[0], rows):
            x, t = hidden[start : start + rows], targets[start : start + rows]
            z = _logits_into(buf, x, weight, bias)
            m, s, picked = _exp_shifted(z, t)  # z now holds exp(z - m)
            lse = m + s.log()
            out[start : start + rows] = picked - lse
            if lses is not None:
                lses[start : start + rows] = lse
            if early:
                g = z.div_(s[:, None]).neg_()  # - softmax, in the logits' storage
                g[torch.arange(t.shape[0], device=t.device), t] += 1.0
                grad_x[start : start + rows] = g.to(weight.dtype) @ weight
                del g  # g is z: holding it would keep this chunk alive while the next one is computed
            del z
        ctx.rows, ctx.needs, ctx.early = rows, (need_x, need_w, need_b), early
        ctx.grad_x = grad_x
        if not early and (need_x or need_w or need_b):
            ctx.save_for_backward(hidden, weight, bias, targets, lses)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        need_x, need_w, need_b = ctx.needs
        if ctx.early:
            if ctx.grad_x is None:  # the buffer became the gradient the first time
                raise RuntimeError(
                    "the chunked log-probs' backward ran twice over one forward (retain_graph): set "
                    "chunked_lm_loss: false for this"
                )
            grad_x, ctx.grad_x = ctx.grad_x, None
            return grad_x.mul_(grad_out[:, None].to(grad_x.dtype)), None, None, None, None, None, None, None
        hidden, weight, bias, targets, lses = ctx.saved_tensors
        acc = lses.dtype
        dx = torch.empty_like(hidden) if need_x else None
        dw = None
        db = torch.zeros(bias.shape, dtype=acc, device=bias.device) if need_b else None
        buf = hidden.new_empty((min(ctx.rows, hidden.shape[0]), weight.shape[0]), dtype=acc)
        for start in range(0, hidden.shape[0], ctx.rows):
            x, t = hidden[start : start + ctx.rows], targets[start : start + ctx.rows]
            z = _logits_into(buf, x, weight, bias)
            g = z.sub_(lses[start : start + ctx.rows, None]).exp_().neg_()
            g[torch.arange(t.shape[0], device=t.device), t] += 1.0
            g.mul_(grad_out[start : start + ctx.rows, None].to(acc))
            if need_b:
                db += g.sum(dim=0)
            g = g.to(weight.dtype)
            if need_x:
                dx[start : start + ctx.rows] = g @ weight
            if need_w:
                dw = torch.mm(g.t().to(acc), x.to(acc)) if dw is None else dw.addmm_(g.t().to(acc), x.to(acc))
            del z, g
        dw = dw.to(weight.dtype) if dw is not None else None
        if need_w and dw is None:  # no rows
            dw = torch.zeros_like(weight)
        db = db.to(bias.dtype) if db is not None else None
        return dx, dw, db, None, None, None, None, None


def chunked_token_logps(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    rows: int | None = None,
) -> torch.Tensor:
    """``log_softmax((hidden @ weight.T + bias).float())[i, targets[i]]`` for every row ``i`` of ``hidden``
    (``[N, hidden]``), ``rows`` tokens at a time (fp32, float64 for float64 weights, as
    :func:`tunekit.train.losses.sequence_logps`)."""
    rows = rows or chunk_rows(weight.shape[0], hidden.device)
    return _ChunkedTokenLogps.apply(hidden, weight, bias, targets, rows, *_needs(hidden, weight, bias))


def output_head(model):
    """The output embedding of ``model`` through its DDP / DeepSpeed / PEFT wrappers, or None."""
    for _ in range(4):
        get = getattr(model, "get_output_embeddings", None)
        if callable(get):
            return get()
        model = getattr(model, "module", None)
        if model is None:
            return None
    return None


_PLAIN_HEADS = weakref.WeakSet()  # heads whose model changes their output (soft-capping) or feeds them other shapes


def trained_positions(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(``keep`` mask over ``[batch, seq]`` hidden states, their target ids): position t predicts label t+1."""
    targets = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)
    keep = targets != IGNORE_INDEX
    return keep, targets[keep]


def forward_sequence_logps(
    model, inputs: dict, labels: torch.Tensor, cu_seqlens: torch.Tensor | None = None, rows: int | None = None
):
    """``(Σ log p, n)`` over the labelled tokens per row of a padded batch (``labels [B, T]``) or, with ``cu_seqlens``,
    per sequence of a padding-free row: what ``losses.sequence_logps`` / ``batching.packed_sequence_logps`` give
    from whole logits, with the head and the log-softmax run on the labelled positions only, a chunk at a time.

    ``None`` where this does not apply (a wrapped or sharded head, a model that changes its head's output or feeds it
    other shapes: remembered per head); the caller then computes the logits whole."""
    head = output_head(model)
    if head is None or not usable(head) or head in _PLAIN_HEADS:
        return None
    keep, targets = trained_positions(labels)
    captured = head_input(model, head, inputs, keep, strict=False)
    if captured is None:
        _PLAIN_HEADS.add(head)
        return None
    token = chunked_token_logps(captured[1], head.weight, head.bias, targets, rows)
    if cu_seqlens is None:
        owner, n = keep.nonzero(as_tuple=True)[0], labels.shape[0]
    else:
        owner, n = segment_of_tokens(cu_seqlens)[1:][keep[0, :-1]], cu_seqlens.numel() - 1
    sums = torch.zeros(n, dtype=token.dtype, device=token.device).index_add(0, owner, token)
    counts = torch.zeros(n, dtype=torch.long, device=labels.device).index_add(0, owner, torch.ones_like(owner))
    return sums, counts
