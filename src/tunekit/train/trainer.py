"""The HF Trainer with tunekit's additions: LoRA+ optimizer groups and token-normalised loss across accumulation."""

from __future__ import annotations

from transformers import Trainer


class TunekitTrainer(Trainer):
    """``transformers.Trainer`` + LoRA+ (``loraplus_lr_ratio``): B matrices get ``ratio x lr``."""

    def __init__(self, *args, tunekit_config=None, **kwargs):
        self.tunekit_config = tunekit_config
        super().__init__(*args, **kwargs)

    def create_optimizer(self, *args, **kwargs):
        cfg = self.tunekit_config
        if cfg is not None and cfg.loraplus_lr_ratio and self.optimizer is None:
            from peft.optimizers import create_loraplus_optimizer

            optim_cls, optim_kwargs = Trainer.get_optimizer_cls_and_kwargs(self.args, self.model)
            self.optimizer = create_loraplus_optimizer(
                model=self.model, optimizer_cls=optim_cls, lr=self.args.learning_rate,
                loraplus_lr_ratio=cfg.loraplus_lr_ratio, **{k: v for k, v in optim_kwargs.items() if k != "lr"},
            )
            return self.optimizer
        return super().create_optimizer(*args, **kwargs)
