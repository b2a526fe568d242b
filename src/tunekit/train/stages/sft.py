"""Stage ``sft``: supervised fine-tuning on rendered conversations (only reply tokens trained).

The loss is the token-level cross-entropy averaged over every trained token of an optimizer step:
the HF Trainer passes ``num_items_in_batch`` (trained tokens across all accumulated micro-batches),
so batch 1 x accumulation 4 and batch 4 x accumulation 1 give the same loss and gradients.
``use_dft_loss`` / ``use_eaft_loss`` / ``use_asft_loss`` change the per-token loss (``losses.sft_token_losses``);
ASFT also needs the reference policy's logits (``reference_policy``: a frozen copy, or LoRA's disabled adapter).
"""

from __future__ import annotations

from ...config.schema import Config
from ...data.collator import MultimodalCollator, PaddingCollator
from ...data.labels import IGNORE_INDEX
from ...data.padding_free import padding_free_collator, refuse_family, rope_index_of


def build_trainer(cfg: Config, args, model, tokenizer, data, callbacks):
    from ..trainer import TunekitTrainer

    collator = PaddingCollator(
        pad_token_id=tokenizer.pad_token_id, pad_to_multiple_of=cfg.pad_to_multiple_of, label_pad_id=IGNORE_INDEX
    )
    if getattr(data, "mm", None) is not None:  # a vision-language model: the batch's images become model inputs
        if cfg.use_packing and cfg.neat_packing:
            refuse_family(data.mm, "neat_packing")
        collator = MultimodalCollator(
            pad_token_id=tokenizer.pad_token_id,
            pad_to_multiple_of=cfg.pad_to_multiple_of,
            label_pad_id=IGNORE_INDEX,
            mm=data.mm,
            rope_index=rope_index_of(model),
        )
    if cfg.padding_free:  # one row per micro-batch, restarting position ids (data/padding_free.py)
        collator = padding_free_collator(tokenizer, getattr(data, "mm", None), model)
    elif (
        cfg.use_packing
        and cfg.neat_packing
        and getattr(model.config, "_attn_implementation", None) == "flash_attention_2"
    ):
        collator.flatten_packed = (
            True  # FA2 finds the packed samples from position ids only in one row (data/collator.py)
        )
    trainer = TunekitTrainer(
        model=model,
        args=args,
        train_dataset=data.train,
        eval_dataset=data.eval,
        data_collator=collator,
        processing_class=tokenizer,
        callbacks=callbacks,
        tunekit_config=cfg,
    )
    if (
        cfg.use_asft_loss
    ):  # ASFT's KL anchor (token_loss.py): a frozen copy, or with LoRA the policy without its adapter
        from .reference_policy import load_reference, prepare_frozen

        trainer.asft_reference = prepare_frozen(load_reference(cfg, tokenizer), trainer)
    return trainer
