"""Stage ``sft``: supervised fine-tuning on rendered conversations (only reply tokens trained).

The loss is the token-level cross-entropy averaged over every trained token of an optimizer step:
the HF Trainer passes ``num_items_in_batch`` (trained tokens across all accumulated micro-batches),
so batch 1 x accumulation 4 and batch 4 x accumulation 1 give the same loss and gradients.
"""

from __future__ import annotations


def build_trainer(cfg, args, model, tokenizer, data, callbacks):
    from ...data.collator import PaddingCollator
    from ..trainer import TunekitTrainer

    collator = PaddingCollator(pad_token_id=tokenizer.pad_token_id, pad_to_multiple_of=cfg.pad_to_multiple_of,
                               label_pad_id=-100)
    if getattr(data, "mm", None) is not None:  # a vision-language model: the batch's images become model inputs
        from ...data.collator import MultimodalCollator

        collator = MultimodalCollator(pad_token_id=tokenizer.pad_token_id, pad_to_multiple_of=cfg.pad_to_multiple_of,
                                      label_pad_id=-100, mm=data.mm)
    return TunekitTrainer(
        model=model, args=args, train_dataset=data.train, eval_dataset=data.eval, data_collator=collator,
        processing_class=tokenizer, callbacks=callbacks, tunekit_config=cfg,
    )

