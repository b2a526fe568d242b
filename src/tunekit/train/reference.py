"""The reference policy of dpo, kto, ppo and grpo.

* ``ref_model`` set: that model (+ ``ref_model_adapters``), loaded frozen.
* LoRA without ``ref_model``: the policy itself with its adapter disabled — the frozen base, no
  second copy in memory.
* full / freeze without ``ref_model``: a frozen copy of the starting model (unavoidable; use
  ``precompute_ref_log_probs`` to compute the reference once and free it before training).
"""

from __future__ import annotations

import contextlib

from torch import nn


def load_reference(cfg, tokenizer) -> nn.Module | None:
    """The separate reference model, or ``None`` when the policy's disabled adapter serves as reference."""
    from ..model.loader import load_model

    if cfg.ref_model:
        ref_cfg = cfg.model_copy(update={"model_name_or_path": cfg.ref_model, "adapter_name_or_path": cfg.ref_model_adapters})
        return load_model(ref_cfg, tokenizer, is_trainable=False)
    if cfg.finetuning_type == "lora":
        return None
    return load_model(cfg, tokenizer, is_trainable=False)


def to_device(module, device):
    """Move a frozen helper model (reference, reward model) next to the policy; quantized models stay where they loaded."""
    if module is None or getattr(module, "is_quantized", False) or getattr(module, "hf_device_map", None):
        return module
    return module.to(device)


def peft_of(model):
    """The ``PeftModel`` inside ``model`` (accelerate/value-head wrappers removed), or None."""
    from peft import PeftModel

    seen = model
    for _ in range(4):
        if isinstance(seen, PeftModel):
            return seen
        seen = getattr(seen, "module", None) or getattr(seen, "pretrained_model", None)
        if seen is None:
            return None
    return None


@contextlib.contextmanager
def reference_forward(policy, ref_model):
    """Yields the module that computes reference log-probs (the LM, not a value-head wrapper)."""
    if ref_model is not None:
        yield ref_model
        return
    peft = peft_of(policy)
    if peft is None:
        raise RuntimeError("no reference model: set ref_model, use finetuning_type lora, or precompute_ref_log_probs")
    with peft.disable_adapter():
        yield peft


def iter_reference_logps(dataset, collator, model, ref_model, batch_size: int, fields):
    """Reference log-prob sums over ``dataset`` in batches, in eval mode (for precomputed references).

    ``fields`` lists ``(input_ids, attention_mask, labels)`` column names of the collated batch; yields
    ``(rows_in_batch, [logps per field])`` so each stage can split the batch its own way.
    """
    import torch

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(dataset), batch_size):
            rows = [dataset[i] for i in range(start, min(start + batch_size, len(dataset)))]
            batch = {k: v.to(device) for k, v in collator(rows).items()}
            with torch.no_grad(), reference_forward(model, ref_model) as ref:
                out = [forward_logps(ref, batch[ids], batch[mask], batch[labels])[0] for ids, mask, labels in fields]
            yield len(rows), out
    finally:
        model.train(was_training)


def forward_logps(model, input_ids, attention_mask, labels):
    """``(Σ log p, n)`` per row of ``model`` over the labelled tokens (see :func:`losses.sequence_logps`)."""
    from .losses import sequence_logps

    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    return sequence_logps(logits, labels)
