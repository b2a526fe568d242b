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

from ...config.problems import config_error
from ...config.schema import Config
from ...model.loader import load_model
from .. import chunked_head
from ..batching import packed_sequence_logps, sequence_view
from ..losses import sequence_logps


def load_reference(cfg: Config, tokenizer) -> nn.Module | None:
    """The separate reference model, or ``None`` when the policy's disabled adapter serves as reference."""
    if cfg.ref_model:
        ref_cfg = cfg.model_copy(
            update={"model_name_or_path": cfg.ref_model, "adapter_name_or_path": cfg.ref_model_adapters}
        )
        return load_model(ref_cfg, tokenizer, is_trainable=False)
    if cfg.finetuning_type == "lora":
        return None
    return load_model(cfg, tokenizer, is_trainable=False)


def to_device(module, device):
    """Move a frozen helper model (reference, reward model) next to the policy; quantized models stay where they
    loaded."""
    if module is None or getattr(module, "is_quantized", False) or getattr(module, "hf_device_map", None):
        return module
    return module.to(device)


def prepare_frozen(module, trainer):
    """Place a frozen helper model (reference, reward model) for the trainer's engine.

    Under DeepSpeed ZeRO-3 the helper was loaded partitioned (``zero.Init``, like the policy): it gets a
    ZeRO-3 inference engine of its own, which gathers its weights layer by layer in each forward (the
    ranks must then run the same number of forwards, as every stage does). Otherwise (single process, DDP,
    ZeRO-0/1/2) it is a whole copy moved next to the policy.
    """
    if module is None:
        return None
    if getattr(trainer, "is_deepspeed_enabled", False):
        from transformers.integrations import is_deepspeed_zero3_enabled

        if is_deepspeed_zero3_enabled():
            return zero3_inference_engine(module, trainer.accelerator.state.deepspeed_plugin.deepspeed_config)
    return to_device(module, trainer.args.device)


def zero3_inference_engine(module, train_config: dict):
    """``deepspeed.initialize`` without optimizer for a frozen ZeRO-3 model (as TRL's ``prepare_deepspeed``)."""
    import copy

    import deepspeed

    config = copy.deepcopy(train_config)
    for key in ("optimizer", "scheduler"):
        config.pop(key, None)
    zero = config.setdefault("zero_optimization", {})
    zero.pop("offload_optimizer", None)
    hidden = getattr(module.config, "hidden_size", None) or module.config.get_text_config().hidden_size
    # the "auto" sizes transformers fills only for the trained model
    for key, value in (
        ("reduce_bucket_size", hidden * hidden),
        ("stage3_prefetch_bucket_size", int(0.9 * hidden * hidden)),
        ("stage3_param_persistence_threshold", 10 * hidden),
    ):
        if zero.get(key, "auto") == "auto":
            zero[key] = value
    engine, *_ = deepspeed.initialize(model=module, config=config)
    engine.eval()
    return engine


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

    ``fields`` lists the key prefixes of the sequence sets of the collated batch (``""``; kto also ``"kl_"``:
    :func:`~tunekit.train.batching.sequence_view`, padded or padding-free); yields
    ``(rows_in_batch, [logps per field])`` so each stage can split the batch its own way.
    """
    import torch
    from transformers.integrations import is_deepspeed_zero3_enabled

    if ref_model is None and is_deepspeed_zero3_enabled():
        raise config_error("ref_precompute_zero3", ("precompute_ref_log_probs", "deepspeed"))
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(dataset), batch_size):
            rows = [dataset[i] for i in range(start, min(start + batch_size, len(dataset)))]
            batch = {k: v.to(device) for k, v in collator(rows).items()}
            with torch.no_grad(), reference_forward(model, ref_model) as ref:
                out = [
                    forward_logps(ref, **sequence_view(batch, prefix), **media_inputs(batch, prefix))[0]
                    for prefix in fields
                ]
            yield len(rows), out
    finally:
        model.train(was_training)


#: batch keys a vision-language / audio model takes besides the text (``data/mm_plugins``: the family plugin's collate)
MEDIA_INPUTS = (
    "pixel_values",
    "image_grid_thw",
    "mm_token_type_ids",
    "image_sizes",
    "token_type_ids",  # LLaVA-NeXT's tile layout, Gemma 3's image-token mask
    "pixel_values_videos",
    "video_grid_thw",
    "second_per_grid_ts",  # Qwen2-VL / Qwen2.5-VL / Qwen3-VL videos
    "input_features",
    "feature_attention_mask",
)  # Qwen2-Audio


def media_inputs(batch, prefix: str = "") -> dict:
    """The media inputs of a collated batch for one set of its sequences (``prefix`` as :func:`~tunekit.train.batching.
    sequence_view`: ``kl_`` for KTO's mismatched pairs), under the model's own names; empty for text models."""
    return {k: batch[prefix + k] for k in MEDIA_INPUTS if prefix + k in batch}


def forward_logps(model, input_ids, attention_mask, labels, position_ids=None, cu_seqlens=None, chunked=True, **media):
    """``(Σ log p, n)`` per row of ``model`` over the labelled tokens (see :func:`losses.sequence_logps`); per sequence
    of a padding-free row when ``cu_seqlens`` is given (no mask, restarting ``position_ids``: ``train/batching.py``).

    ``chunked`` (``chunked_lm_loss``): the LM head and log-softmax on the labelled positions only, a chunk of tokens at
    a time (``train/chunked_head.py``: the tokens x vocabulary logits are never held whole), where the head allows it.
    ``media``: a vision-language model's image inputs for these rows (:data:`MEDIA_INPUTS`)."""
    if position_ids is not None:
        media["position_ids"] = position_ids
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "use_cache": False, **media}
    out = chunked_head.forward_sequence_logps(model, inputs, labels, cu_seqlens) if chunked else None
    if out is not None:
        return out
    logits = model(**inputs).logits
    return sequence_logps(logits, labels) if cu_seqlens is None else packed_sequence_logps(logits, labels, cu_seqlens)
