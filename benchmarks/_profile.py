"""One optimizer step under torch.profiler, grouped by what the time is spent on; and the padding share.

Imports only torch and transformers, so that it runs under tunekit's venv and under LLaMA-Factory's alike
(``benchmarks/_profile_run.py`` is the entry point for both).

Groups (each profiler op's *self* time, so nothing is counted twice; on a GPU the device time of the kernels
an op launched is reported beside its CPU time):

  optimizer      everything under torch's ``Optimizer.step#...`` / ``Optimizer.zero_grad#...`` ranges, and
                 gradient clipping's norms (``_foreach_norm``, ``clip_grad``)
  lm_head+loss   ops with a tensor dimension equal to the model's vocabulary (the LM-head matmuls forward and
                 backward, log-softmax, NLL; tied embeddings' head included) and the loss kernels by name
  attention      scaled-dot-product / flash / memory-efficient attention kernels (forward and backward), and
                 matmuls/softmax on 4-D tensors (eager attention)
  mlp/linear     the other matmuls (q/k/v/o projections, gate/up/down, LoRA's A/B)
  other          the rest: element-wise work (norms, rotary, SiLU, residual adds, dropout), copies, the
                 embedding, the framework's own bookkeeping

Padding share: a forward pre-hook on the model counts, for every forward of the run, the tokens of the batch
tensor (``input_ids.numel()``) and the real ones (``attention_mask.sum()``, or every token when the batch
carries no mask, e.g. padding-free rows); share = 1 - real / batch tokens.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from transformers import TrainerCallback

GROUPS = ("lm_head+loss", "attention", "mlp/linear", "optimizer", "other")
_ATTN = (
    "scaled_dot_product",
    "flash_attention",
    "flash_attn",
    "efficient_attention",
    "_cudnn_attention",
    "flex_attention",
)
_LOSS = ("log_softmax", "nll_loss", "cross_entropy", "fused_linear_cross_entropy")
_MATMUL = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::matmul",
    "aten::linear",
    "aten::baddbmm",
    "aten::_addmm_activation",
)
_OPTIM_NAMES = ("_foreach_norm", "clip_grad", "_fused_adamw", "_fused_adam")


def _shapes(event) -> list:
    try:
        return [s for s in (event.input_shapes or []) if isinstance(s, (list, tuple))]
    except Exception:  # noqa: BLE001 - some events carry no shapes
        return []


def classify(event, vocab: int) -> str:
    name = event.name
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(("Optimizer.step", "Optimizer.zero_grad")):
            return "optimizer"
        parent = parent.cpu_parent
    if name.startswith(("Optimizer.step", "Optimizer.zero_grad")) or any(k in name for k in _OPTIM_NAMES):
        return "optimizer"
    shapes = _shapes(event)
    if any(k in name for k in _LOSS) or any(vocab in s for s in shapes):
        return "lm_head+loss"
    if any(k in name for k in _ATTN):
        return "attention"
    if (name in _MATMUL or "softmax" in name) and shapes and all(len(s) == 4 for s in shapes[:2] if s):
        return "attention"
    if name in _MATMUL:
        return "mlp/linear"
    return "other"


def summarize(prof, vocab: int, wall_s: float) -> dict:
    cpu = dict.fromkeys(GROUPS, 0.0)
    dev = dict.fromkeys(GROUPS, 0.0)
    top: dict[str, float] = {}
    for ev in prof.events():
        if getattr(ev, "device_type", None) is not None and "CUDA" in str(ev.device_type):
            continue  # kernels are counted through the CPU op that launched them (self_device_time_total)
        group = classify(ev, vocab)
        cpu[group] += ev.self_cpu_time_total / 1e6
        dev[group] += getattr(ev, "self_device_time_total", 0.0) / 1e6
        top[ev.name] = top.get(ev.name, 0.0) + ev.self_cpu_time_total / 1e6
    cpu_total = sum(cpu.values()) or 1.0
    dev_total = sum(dev.values())
    out = {
        "step_wall_s": wall_s,
        "cpu_s": cpu,
        "cpu_share": {k: v / cpu_total for k, v in cpu.items()},
        "top_ops_cpu_s": dict(sorted(top.items(), key=lambda kv: -kv[1])[:10]),
    }
    if dev_total > 0:
        out.update(device_s=dev, device_share={k: v / dev_total for k, v in dev.items()})
    return out


class ProfileCallback(TrainerCallback):
    """Profile optimizer step ``profile_step`` (1-based) and count padding over every forward; write ``out``."""

    def __init__(self, out: str | Path, profile_step: int = 3, tool: str = ""):
        self.out = Path(out)
        self.profile_step = profile_step
        self.tool = tool
        self.prof = None
        self.t0 = 0.0
        self.batch_tokens = 0
        self.real_tokens = 0
        self.forwards = 0
        self.vocab = 0
        self.result: dict = {}
        self.c0 = 0.0

    def _count(self, module, args, kwargs):
        ids = kwargs.get("input_ids")
        if ids is None and args:
            ids = args[0]
        if ids is None or not hasattr(ids, "numel"):
            return
        mask = kwargs.get("attention_mask")
        self.forwards += 1
        self.batch_tokens += ids.numel()
        self.real_tokens += (
            int(mask.sum()) if mask is not None and hasattr(mask, "sum") and mask.dim() == 2 else ids.numel()
        )

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is not None:
            model.register_forward_pre_hook(self._count, with_kwargs=True)
            conf = getattr(model, "config", None)
            self.vocab = int(getattr(conf, "vocab_size", 0) or 0)
            emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
            if emb is not None:
                self.vocab = int(emb.weight.shape[0])

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.profile_step and self.prof is None:
            import torch
            from torch.profiler import ProfilerActivity, profile

            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.prof = profile(activities=acts, record_shapes=True)
            self.prof.__enter__()
            self.t0 = time.perf_counter()
            self.c0 = time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        if self.prof is not None and not self.result:
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()
            wall = time.perf_counter() - self.t0
            cpu = time.process_time() - self.c0  # the process's CPU time: what a shared host's contention leaves out
            self.prof.__exit__(None, None, None)
            self.result = summarize(self.prof, self.vocab, wall)
            self.result["step_process_cpu_s"] = cpu
            self.result["profiled_step"] = state.global_step

    def on_train_end(self, args, state, control, **kwargs):
        res = dict(
            self.result,
            tool=self.tool,
            vocab=self.vocab,
            forwards=self.forwards,
            batch_tokens=self.batch_tokens,
            real_tokens=self.real_tokens,
            padding_share=1 - self.real_tokens / self.batch_tokens if self.batch_tokens else None,
            steps=state.global_step,
        )
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(res, indent=1))


def format_profile(res: dict) -> str:
    """A few lines for one tool's profile."""
    if not res or "cpu_s" not in res:
        return f"  {res.get('tool', '?')}: no profile recorded"
    key = "device_s" if "device_s" in res else "cpu_s"
    total = sum(res[key].values()) or 1.0
    parts = " | ".join(f"{g} {1000 * res[key][g]:.0f} ms ({100 * res[key][g] / total:.0f} %)" for g in GROUPS)
    pad = res.get("padding_share")
    return (
        f"  {res.get('tool', '?'):<8} step {res['profiled_step']}: wall {res['step_wall_s']:.2f} s | {parts} "
        f"[{'GPU' if key == 'device_s' else 'CPU'} self time] | padding share "
        f"{'n/a' if pad is None else f'{100 * pad:.1f} %'} over {res.get('forwards')} forwards"
    )
