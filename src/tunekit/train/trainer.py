"""The HF Trainer with tunekit's additions: LoRA+ optimizer groups, token-normalised loss across accumulation, FSDP2,
the LM head on trained tokens only (token_loss.py), micro-batches regrouped by length within a step (window_grouping.py)
and token-budget micro-batches (token_budget.py: max_tokens_per_batch)."""

from __future__ import annotations

from transformers import Trainer

from .checkpoint_weights import ConvertedCheckpointMixin
from .engines.fsdp import FSDPTrainerMixin, reshard
from .fp8 import Fp8AcceleratorMixin
from .optimizers import SparseGradNormMixin
from .token_budget import TokenBudgetMixin
from .token_loss import TrainedTokensLossMixin
from .window_grouping import WindowGroupingMixin


class TunekitTrainer(TokenBudgetMixin, WindowGroupingMixin, TrainedTokensLossMixin, FSDPTrainerMixin, ConvertedCheckpointMixin,
                     Fp8AcceleratorMixin, SparseGradNormMixin, Trainer):
    """``transformers.Trainer`` + LoRA+ (``loraplus_lr_ratio``: B matrices get ``ratio x lr``) + FSDP2 (``fsdp``, see
    :mod:`tunekit.train.engines.fsdp`: the model is sharded before the Trainer sees it) + FP8 (``fp8``: accelerate's
    recipe, :mod:`tunekit.train.fp8`) + resume of a full checkpoint saved in the original weight layout
    (:mod:`tunekit.train.checkpoint_weights`) + on the CPU, freed heap memory returned when a forward pass strands it
(:mod:`tunekit.train.host_heap`)."""

    def __init__(self, *args, tunekit_config=None, **kwargs):
        self.tunekit_config = tunekit_config
        super().__init__(*args, **kwargs)
        if tunekit_config is not None:
            from ..model.layers import decoder_layers
            from . import host_heap
            from .optimizers import badam_callbacks

            # CPU: freed heap memory a forward pass strands goes back to the kernel (host_heap.py)
            self.heap_guard = host_heap.attach(self.model, decoder_layers(self.model), self.args.device)

            for callback in badam_callbacks(tunekit_config):
                self.add_callback(callback)

    def create_optimizer(self, *args, **kwargs):
        reshard(self.model)  # FSDP2: the optimizer must hold the sharded parameters, even after a forward (no-op otherwise)
        cfg = self.tunekit_config
        if cfg is not None and self.optimizer is None:  # GaLore, APOLLO, BAdam, Adam-mini, Muon (train/optimizers.py)
            from .optimizers import build_optimizer

            self.optimizer = build_optimizer(cfg, self.args, self.model, self.get_decay_parameter_names(self.model))
            if self.optimizer is not None:
                return self.optimizer
        if cfg is not None and cfg.loraplus_lr_ratio and self.optimizer is None:
            from peft.optimizers import create_loraplus_optimizer

            optim_cls, optim_kwargs = Trainer.get_optimizer_cls_and_kwargs(self.args, self.model)
            self.optimizer = create_loraplus_optimizer(
                model=self.model, optimizer_cls=optim_cls, lr=self.args.learning_rate,
                loraplus_lr_ratio=cfg.loraplus_lr_ratio, **{k: v for k, v in optim_kwargs.items() if k != "lr"},
            )
            return self.optimizer
        return super().create_optimizer(*args, **kwargs)
