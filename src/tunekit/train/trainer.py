"""The HF Trainer with tunekit's additions: LoRA+ optimizer groups, token-normalised loss across accumulation, FSDP2,
the LM head on trained tokens only (token_loss.py), micro-batches regrouped by length within a step
(window_grouping.py) and token-budget micro-batches (token_budget.py: max_tokens_per_batch)."""

from __future__ import annotations

from transformers import Trainer

from ..model.layers import decoder_layers
from .checkpoint_weights import CheckpointWeightsMixin
from .context_parallel import ContextParallelMixin
from .decisions import decisions_for
from .engines.fsdp import FSDPTrainerMixin, reshard
from .fp8 import Fp8AcceleratorMixin
from .optimizers import SparseGradNormMixin, badam_callbacks, build_optimizer
from .token_budget import TokenBudgetMixin
from .token_loss import TrainedTokensLossMixin
from .window_grouping import WindowGroupingMixin


class TunekitTrainer(
    ContextParallelMixin,
    TokenBudgetMixin,
    WindowGroupingMixin,
    TrainedTokensLossMixin,
    FSDPTrainerMixin,
    CheckpointWeightsMixin,
    Fp8AcceleratorMixin,
    SparseGradNormMixin,
    Trainer,
):
    """``transformers.Trainer`` + LoRA+ (``loraplus_lr_ratio``: B matrices get ``ratio x lr``) + FSDP2 (``fsdp``, see
    :mod:`tunekit.train.engines.fsdp`: the model is sharded before the Trainer sees it) + FP8 (``fp8``: accelerate's
    recipe, :mod:`tunekit.train.fp8`) + the model's weights saved and resumed by
    :mod:`tunekit.train.checkpoint_weights` (a value head beside its LM, a full checkpoint saved in the original
    layout) + context parallelism (``cp_size``: :mod:`tunekit.train.context_parallel`) + on the CPU, freed heap
    memory returned when a forward pass strands it (:mod:`tunekit.host.heap`, when ``run_decisions.heap_guard`` says
    so).

    ``run_decisions`` (:class:`~tunekit.train.decisions.RunDecisions`): what the run decided, read by the features
    (trained-token loss, chunked head, heap guard): the value ``train/run.build_trainer`` builds the trainer under
    (:func:`~tunekit.train.decisions.building_with`), else the same function's answer for the config and the device
    the run uses."""

    def __init__(self, *args, tunekit_config=None, **kwargs):
        self.tunekit_config = tunekit_config
        super().__init__(*args, **kwargs)
        self.run_decisions = None
        self.heap_guard = None
        if tunekit_config is not None:
            self.run_decisions = decisions_for(tunekit_config)
            if (
                self.run_decisions.heap_guard.on
            ):  # CPU: freed heap memory a forward pass strands goes back to the kernel
                from ..host import heap

                self.heap_guard = heap.attach(self.model, decoder_layers(self.model), self.args.device)

            for callback in badam_callbacks(tunekit_config):
                self.add_callback(callback)

    def _get_train_sampler(self, train_dataset=None):
        """The Trainer's sampler hook, overridden here only: the rows a feature draws (``train_sampler``: context
        parallelism's sequence groups, ppo/grpo's repeated rollouts), else the Trainer's own."""
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        sampler = self.train_sampler(dataset) if dataset is not None else None
        return sampler if sampler is not None else super()._get_train_sampler(train_dataset)

    def _track_num_input_tokens(self, inputs):
        """The Trainer's ``num_input_tokens_seen``, overridden here only: a stage's own count (``count_input_tokens``),
        else the Trainer's; under context parallelism each sequence group's rows once, not once per process."""
        if self.args.include_num_input_tokens_seen == "no":
            return
        before = self.state.num_input_tokens_seen
        own = self.count_input_tokens(inputs)
        if own is None:
            super()._track_num_input_tokens(inputs)
        else:
            self.state.num_input_tokens_seen += own
        seq = self.sequence_group
        if seq is not None:
            self.state.num_input_tokens_seen = before + (self.state.num_input_tokens_seen - before) // seq.size

    def count_input_tokens(self, inputs) -> int | None:
        """The tokens ``inputs`` adds to ``num_input_tokens_seen`` (None: the Trainer counts them)."""
        return None

    def create_optimizer(self, *args, **kwargs):
        reshard(
            self.model
        )  # FSDP2: the optimizer must hold the sharded parameters, even after a forward (no-op otherwise)
        cfg = self.tunekit_config
        if cfg is not None and self.optimizer is None:  # GaLore, APOLLO, BAdam, Adam-mini, Muon (train/optimizers.py)
            self.optimizer = build_optimizer(cfg, self.args, self.model, self.get_decay_parameter_names(self.model))
            if self.optimizer is not None:
                return self.optimizer
        if cfg is not None and cfg.loraplus_lr_ratio and self.optimizer is None:
            from peft.optimizers import create_loraplus_optimizer

            optim_cls, optim_kwargs = Trainer.get_optimizer_cls_and_kwargs(self.args, self.model)
            self.optimizer = create_loraplus_optimizer(
                model=self.model,
                optimizer_cls=optim_cls,
                lr=self.args.learning_rate,
                loraplus_lr_ratio=cfg.loraplus_lr_ratio,
                **{k: v for k, v in optim_kwargs.items() if k != "lr"},
            )
            return self.optimizer
        return super().create_optimizer(*args, **kwargs)
