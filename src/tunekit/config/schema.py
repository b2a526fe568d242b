"""The one typed configuration of tunekit.

:class:`Config` is every option group combined. YAML/JSON files, ``key=value`` overrides, CLI flags,
the web board and the docs all go through it. :meth:`Config._check_combinations` runs every cross-field rule, in
the order :func:`_combination_problems` lists them: each group's rules live with its options
(``options/<group>.py``), those that read the options' facts in ``method_rules.py``, the engines' in
``engines.py``. Each one says how to fix the problem.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import model_validator

from .engines import engine_problems
from .lists import split_list
from .method_rules import checkpointing_auto_off, method_problems, oft_problems, switch_problems
from .options import (
    GROUPS,
    DataOptions,
    DistributedOptions,
    ExportOptions,
    InferOptions,
    LoggingOptions,
    MethodOptions,
    ModelOptions,
    OptimizerOptions,
    RLHFOptions,
    TrainingOptions,
)
from .options.data import (
    batching_problems,
    dataset_name_problems,
    micro_batch_problems,
    packing_problems,
    thought_problems,
)
from .options.distributed import context_parallel_problems, fsdp_config_problems, fsdp_wrap_problems, ray_problems
from .options.export import export_problems
from .options.logging import tracker_problems
from .options.model import checkpointing_problems, kernel_problems, moe_problems
from .options.multimodal import MultimodalOptions, multimodal_problems
from .options.optimizers import optimizer_problems, sft_loss_problems
from .options.training import (
    evaluation_problems,
    neftune_problems,
    output_problems,
    schedule_problems,
    scheduler_kwargs_problems,
)
from .problems import Problem, ProblemsError, as_problem, problem
from .stages import STAGES

# Former names of options that configs users have still write (the loader reads them as the current name): Hugging
# Face renamed evaluation_strategy to eval_strategy in transformers 4.46; LLaMA-Factory's older examples keep it.
FORMER_NAMES = {"evaluation_strategy": "eval_strategy"}


class Config(
    ModelOptions,
    DataOptions,
    MethodOptions,
    TrainingOptions,
    RLHFOptions,
    OptimizerOptions,
    DistributedOptions,
    LoggingOptions,
    ExportOptions,
    InferOptions,
    MultimodalOptions,
):
    """All tunekit options. Build it with :func:`tunekit.config.load_config`."""

    # ---------------------------------------------------------------- derived values
    @property
    def dataset_names(self) -> list[str]:
        return split_list(self.dataset)

    @property
    def eval_dataset_names(self) -> list[str]:
        return split_list(self.eval_dataset)

    @property
    def adapter_paths(self) -> list[str]:
        """``adapter_name_or_path`` split at commas, blanks dropped: the adapters applied in this order."""
        return split_list(self.adapter_name_or_path)

    @property
    def resolved_lora_alpha(self) -> int:
        return self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_rank

    @property
    def use_gradient_checkpointing(self) -> bool:
        """True unless turned off; ``auto`` counts as on until ``tunekit train`` decides it (plan/checkpointing.py),
        and is off for ptuning, which cannot be checkpointed (``method_rules.checkpointing_auto_off``)."""
        on = self.gradient_checkpointing is not False and not self.disable_gradient_checkpointing
        return on and not checkpointing_auto_off(self)

    @property
    def trackers(self) -> list[str]:
        names = [t for t in split_list(self.report_to) if t != "none"]
        if self.use_swanlab and "swanlab" not in names:
            names.append("swanlab")
        return names

    @property
    def use_packing(self) -> bool:
        return self.packing if self.packing is not None else self.stage == "pt"

    # ---------------------------------------------------------------- cross-field rules
    @property
    def warmup(self) -> tuple[int, float]:
        """``(steps, ratio)`` of the warm-up: ``warmup_steps`` below 1 is a ratio (transformers 5), else whole
        steps."""
        if 0 < self.warmup_steps < 1:
            return 0, float(self.warmup_steps)
        return int(self.warmup_steps), (self.warmup_ratio if not self.warmup_steps else 0.0)

    @model_validator(mode="after")
    def _do_train_default(self) -> Config:
        """LLaMA-Factory's rule (Hugging Face's do_train defaults to false): a config that asks for do_predict or
        do_eval and does not set do_train runs only those (its predict.yaml: do_predict + eval_dataset + an
        adapter)."""
        if "do_train" not in self.model_fields_set and (self.do_predict or self.do_eval):
            self.__dict__["do_train"] = False  # not an assignment: validate_assignment would run the validators again
        return self

    @model_validator(mode="after")
    def _check_combinations(self) -> Config:
        problems = [as_problem(p) for p in _combination_problems(self)]  # a bare string: a whole-config problem
        if problems:
            raise ProblemsError(problems)  # the loader turns it into a ConfigError carrying the problems
        return self


def run_problems(cfg: Config) -> Iterator[Problem]:
    """Rules of a training run that a config for ``tunekit plan``, ``data stats`` or ``chat`` does not need, so
    building a Config does not apply them: the board's validation (which starts runs) and the stages' trainers do."""
    if cfg.do_train and STAGES[cfg.stage].generation and not split_list(cfg.reward_funcs) and not cfg.reward_model:
        yield problem("stage_needs_reward", ("reward_funcs", "reward_model", "stage"), stage=cfg.stage)


def _combination_problems(cfg: Config) -> Iterator[Problem]:
    """Every cross-field rule of a config, in the order a refused config lists their messages; each group's rules live
    with its options (``config/options/<group>.py``), those that read the options' facts in ``method_rules.py``."""
    # "given" = set and different from the default, so a saved resolved config (every option written out) reloads.
    given = {k for k in cfg.model_fields_set if getattr(cfg, k) != type(cfg).model_fields[k].default}
    yield from schedule_problems(cfg)
    if cfg.bf16 and cfg.fp16:
        yield problem("bf16_and_fp16", ("bf16", "fp16"))
    yield from method_problems(cfg, given)
    yield from export_problems(cfg)
    yield from evaluation_problems(cfg)
    if cfg.deepspeed and cfg.fsdp:
        yield problem("deepspeed_and_fsdp", ("deepspeed", "fsdp"))
    if cfg.mask_history and cfg.train_on_prompt:
        yield problem("mask_history_train_on_prompt", ("mask_history", "train_on_prompt"))
    yield from checkpointing_problems(cfg, given)
    yield from kernel_problems(cfg)
    yield from moe_problems(cfg)  # moe_aux_loss_coef: sft and pt
    yield from neftune_problems(cfg)
    yield from tracker_problems(cfg)
    yield from packing_problems(cfg)
    yield from batching_problems(cfg)  # padding_free with packing, max_tokens_per_batch
    yield from output_problems(cfg)  # output_dir is not the model's or an adapter's folder
    yield from dataset_name_problems(cfg)
    yield from micro_batch_problems(cfg)
    yield from thought_problems(cfg)  # thought_loss_weight: sft, enable_thinking
    if cfg.lr_scheduler_kwargs:
        yield from scheduler_kwargs_problems(cfg.lr_scheduler_type, cfg.lr_scheduler_kwargs)
    yield from switch_problems(cfg, given)
    yield from oft_problems(cfg, given)
    yield from optimizer_problems(cfg)
    yield from fsdp_config_problems(cfg)
    yield from fsdp_wrap_problems(cfg)
    yield from context_parallel_problems(cfg)  # cp_size: Ulysses context parallelism
    yield from ray_problems(cfg)  # USE_RAY=1's options (LLaMA-Factory's RayArguments)
    yield from sft_loss_problems(cfg)
    yield from multimodal_problems(cfg)
    yield from engine_problems(cfg)  # fsdp words; fsdp with rm/ppo/grpo, fp16, do_predict (config/engines.py)


def iter_fields():
    """Yield ``(group_class, name, FieldInfo)`` in display order."""
    for group in GROUPS:
        for name, info in group.model_fields.items():
            yield group, name, info
