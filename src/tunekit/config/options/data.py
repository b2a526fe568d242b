"""Data options: which datasets, how they are rendered and tokenized."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator, model_validator

from ..problems import Problem, Said, problem
from ..stages import STAGES, stages_with
from .base import OptionGroup

if TYPE_CHECKING:  # annotations only: the schema combines this group
    from ..schema import Config


class DataOptions(OptionGroup):
    GROUP = "data"
    TITLE = "Data"

    template: str | None = Field(
        None,
        description="Chat template (qwen, llama3, default, ...), or 'jinja' to use the tokenizer's own chat_template; "
        "see `tunekit templates`. Not needed for stage pt (documents end with the vocabulary's document token).",
    )
    dataset: str | None = Field(
        None, description="Training dataset name(s) from dataset_info.json, or file paths, comma-separated."
    )
    eval_dataset: str | None = Field(
        None, description="Evaluation dataset name(s), comma-separated (instead of val_size)."
    )
    dataset_dir: str = Field("data", description="Folder with dataset_info.json and the data files.")
    cutoff_len: int = Field(
        2048,
        ge=2,
        description="Maximum tokens per sample; longer samples are cut (BOS, system prompt and tools kept; oldest "
        "history first, then the middle of the user text, then the answer's end) and reported.",
    )
    train_on_prompt: bool = Field(
        False, description="Train on prompt tokens too (default: only assistant tokens have labels)."
    )
    mask_history: bool = Field(False, description="Train only on the last assistant turn of each conversation.")
    max_samples: int | None = Field(
        None, ge=1, description="Use at most this many samples of each dataset (the first ones)."
    )
    val_size: float = Field(
        0.0,
        ge=0,
        description="Validation share held out from the training data: a fraction (0-1) or a sample count (>= 1).",
    )
    mix_strategy: Literal["concat", "interleave_under", "interleave_over"] = Field(
        "concat", description="How several datasets are mixed."
    )
    interleave_probs: str | None = Field(
        None, description="Sampling probabilities for interleave strategies, comma-separated."
    )
    dataset_sampling: dict[str, dict[str, int | float]] | None = Field(
        None,
        description="Per dataset (named as dataset / eval_dataset write it): {size: N, weight: W}, LLaMA-Factory "
        "v1's dataset-list keys, drawn as v1 draws them: size draws N records at random with replacement, then "
        "weight draws int(count x W) at random with replacement from those; the draw follows seed. Applied after "
        "dataset_info.json's num_samples and before max_samples; the run reports each dataset's draws, distinct "
        "records and repeats. A v1 config's dataset list sets it.",
    )
    preprocessing_num_workers: int | None = Field(None, ge=1, description="Processes for tokenization (default: one).")
    preprocessing_batch_size: int = Field(1000, ge=1, description="Samples per tokenization batch.")
    overwrite_cache: bool = Field(
        False, description="Re-tokenize even if a cached result with the same fingerprint exists."
    )
    tokenized_path: str | None = Field(
        None,
        description="Save the tokenized dataset here, or load it from here if it exists (skips tokenization). A saved "
        "folder records what its rows depend on (stage, template, tokenizer, cutoff_len, masking, packing, media "
        "settings and files, datasets); a folder made for another config is refused by name (overwrite_cache: true "
        "re-tokenizes).",
    )
    packing: bool | None = Field(
        None, description="Pack several samples into one sequence (default: on for pt, off otherwise)."
    )
    neat_packing: bool = Field(
        False,
        description="Packing without cross-attention between packed samples: position ids restart per sample and each "
        "sample attends only to itself (sft; sdpa, eager or fa2).",
    )
    padding_free: bool = Field(
        False,
        description="Padding-free batches (LLaMA-Factory v1: batching_strategy: padding_free): the sequences of a "
        "micro-batch concatenated into one row without pad tokens or attention mask, position ids restarting per "
        "sequence, attention never crossing a sequence (FlashAttention-2 varlen on GPU, a block-diagonal causal mask "
        "with sdpa/eager). sft and pt (docs/data.md); dpo, kto, rm keep both answers of a pair in the row "
        "(docs/padding-free.md). Not with packing.",
    )
    max_tokens_per_batch: int | None = Field(
        None,
        ge=1,
        description="Form micro-batches by token count instead of per_device_train_batch_size samples (dynamic "
        "batching): samples are grouped until the next would exceed this many tokens, counting real tokens with "
        "padding_free, else rows x the longest row (padded). At least cutoff_len. dpo and rm: a pair is the unit and "
        "costs both its sequences (at least 2 x cutoff_len); not kto. Steps per epoch follow from the data (tunekit "
        "plan shows them).",
    )
    batching_strategy: Literal["normal", "padding_free", "dynamic_batching", "dynamic_padding_free"] | None = Field(
        None,
        description="LLaMA-Factory v1's name for the batching mode, read as tunekit's options: padding_free = "
        "padding_free: true; dynamic_batching = max_tokens_per_batch: cutoff_len x per_device_train_batch_size (its "
        "budget); dynamic_padding_free = both; normal = neither.",
    )
    default_system: str | None = Field(
        None, description="System prompt used when a sample has none (overrides the template's default)."
    )
    enable_thinking: bool = Field(
        True,
        description="For reasoning templates (qwen3, ...): keep thinking on; false renders an empty "
        "<think></think> block.",
    )
    preserve_thinking: bool = Field(
        False,
        description="Reasoning templates (qwen3, qwen3_vl, deepseekr1, gpt_oss): earlier replies that are not trained "
        "(mask_history; "
        "the history of dpo, kto, rm, ppo and grpo samples) keep their <think> block, the empty block for a reply "
        "without a thought, where the official Qwen3 template drops it (LLaMA-Factory's preserve_thinking; Qwen3.6's "
        "template with preserve_thinking=True). With enable_thinking: false thoughts are removed and earlier replies "
        "keep the empty block. No effect where every reply is trained (sft without mask_history). tunekit chat, "
        "api and predict render earlier replies the same way; an exported model's template is the official one "
        "(docs/reasoning.md).",
    )
    thought_loss_weight: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Reasoning templates (qwen3, qwen3_vl, deepseekr1, gpt_oss), stage sft: the loss weight of each "
        "reply's thought block "
        "(<think> ... </think> and the blank line after it; the empty block of a reply without a thought). 1: trained "
        "like the answer (default); 0: not trained (label -100, the tokens stay in the input; the answer and the "
        "end-of-turn are still trained); between: the thought's tokens count that much, and the loss is divided by "
        "the step's summed weights (answer tokens 1, thought tokens this weight), not by its token count. Weights "
        "below 1 need enable_thinking (no thought is trained without it).",
    )
    tool_format: str | None = Field(
        None, description="Tool-call format for function calling (default: the template's)."
    )
    empty_template_eos: bool = Field(
        True,
        description="template: empty ends every reply with EOS so the model learns to stop; false renders replies "
        "without it, as LLaMA-Factory's 'empty' does (to reproduce its runs).",
    )
    bad_records: Literal["error", "skip"] = Field(
        "error", description="On an invalid record: error (stop and name it) or skip (count and report it)."
    )
    ignore_pad_token_for_loss: bool = Field(True, description="Pad tokens get label -100 (not trained).")
    pad_to_multiple_of: int = Field(8, ge=1, description="Pad each batch to a multiple of this many tokens.")
    group_by_length: bool = Field(False, description="Batch samples of similar length together to cut padding.")
    group_within_step: bool = Field(
        True,
        description="Within each optimizer step, re-form its micro-batches from samples of similar length: same "
        "samples, same gradient, less padding (sft, pt, dpo, rm; dpo/rm move whole pairs, padded batches of equal "
        "size only). Not kto: its KL estimate is per micro-batch.",
    )

    @field_validator("dataset_sampling")
    @classmethod
    def _check_sampling(cls, value):
        """Each entry: size (a whole number, at least 1) and/or weight (above 0), nothing else."""
        for name, draw in (value or {}).items():
            unknown = sorted(set(draw) - {"size", "weight"})
            if unknown or not draw:
                raise ValueError(f"entry {name!r} takes size and/or weight, got {', '.join(unknown) or 'neither'}")
            if "size" in draw and (draw["size"] < 1 or draw["size"] != int(draw["size"])):
                raise ValueError(f"entry {name!r}: size {draw['size']:g} is not a whole number of at least 1")
            if "weight" in draw and not draw["weight"] > 0:
                raise ValueError(f"entry {name!r}: weight {draw['weight']:g} is not above 0")
        return value and {n: {k: int(v) if k == "size" else v for k, v in d.items()} for n, d in value.items()}

    @model_validator(mode="before")
    @classmethod
    def _read_batching_strategy(cls, values):
        """``batching_strategy`` (LLaMA-Factory v1) fills ``padding_free`` / ``max_tokens_per_batch`` when they are
        not given; given ones that disagree are reported by :func:`batching_problems`."""
        if not isinstance(values, dict) or values.get("batching_strategy") in (None, "normal"):
            return values
        strategy = values["batching_strategy"]
        values = dict(values)
        if strategy in ("padding_free", "dynamic_padding_free"):
            values.setdefault("padding_free", True)
        if strategy in ("dynamic_batching", "dynamic_padding_free") and "max_tokens_per_batch" not in values:
            try:  # LLaMA-Factory's budget: cutoff_len x micro-batch size (bad values are reported by their own fields)
                fields = cls.model_fields
                values["max_tokens_per_batch"] = int(values.get("cutoff_len", fields["cutoff_len"].default)) * int(
                    values.get("per_device_train_batch_size", fields["per_device_train_batch_size"].default)
                )
            except (TypeError, ValueError):
                pass
        return values


BUDGET_STAGES = ("sft", "pt", "dpo", "rm")  # dpo / rm: a pair is the unit (train/token_budget.py)
# Kernels index a micro-batch's elements with 32-bit integers: the most tokens one micro-batch may hold.
MAX_MICRO_BATCH_TOKENS = 2**31 - 1


def batching_problems(cfg: Config) -> Iterator[Problem]:
    """Cross-field rules of ``padding_free`` and ``max_tokens_per_batch`` (``Config._check_combinations`` calls it)."""
    if cfg.padding_free and cfg.use_packing:
        default = Said("part_pt_packing_default") if cfg.packing is None else None
        yield problem("padding_free_packing", ("padding_free", "packing"), default=default)
    strategy = cfg.batching_strategy
    if strategy is not None and (
        cfg.padding_free != (strategy in ("padding_free", "dynamic_padding_free"))
        or (cfg.max_tokens_per_batch is not None) != (strategy in ("dynamic_batching", "dynamic_padding_free"))
    ):
        yield problem(
            "batching_strategy_disagrees",
            ("batching_strategy", "padding_free", "max_tokens_per_batch"),
            strategy=strategy,
            padding_free=str(cfg.padding_free).lower(),
            budget=str(cfg.max_tokens_per_batch),
        )
    budget = cfg.max_tokens_per_batch
    if budget is None:
        return
    if cfg.stage == "kto":
        yield problem("budget_kto", ("max_tokens_per_batch", "stage"))
    elif cfg.stage not in BUDGET_STAGES:
        yield problem("budget_stage", ("max_tokens_per_batch", "stage"), stage=cfg.stage)
    elif cfg.stage in ("dpo", "rm") and budget < 2 * cfg.cutoff_len:
        yield problem(
            "budget_below_pair",
            ("max_tokens_per_batch", "cutoff_len", "stage"),
            budget=budget,
            cutoff=cfg.cutoff_len,
            stage=cfg.stage,
            least=2 * cfg.cutoff_len,
            example=2 * cfg.cutoff_len * cfg.per_device_train_batch_size,
        )
    if budget < cfg.cutoff_len:
        yield problem(
            "budget_below_cutoff",
            ("max_tokens_per_batch", "cutoff_len"),
            budget=budget,
            cutoff=cfg.cutoff_len,
            example=cfg.cutoff_len * cfg.per_device_train_batch_size,
        )
    if cfg.group_by_length:
        yield problem("budget_group_by_length", ("max_tokens_per_batch", "group_by_length"))
    if budget > MAX_MICRO_BATCH_TOKENS:
        yield problem("budget_too_large", ("max_tokens_per_batch",), budget=budget, limit=MAX_MICRO_BATCH_TOKENS)


def packing_problems(cfg: Config) -> Iterator[Problem]:
    """``packing``, ``neat_packing``, ``padding_free`` and the mixing of datasets, against the stage."""
    if cfg.neat_packing and not cfg.use_packing:
        yield problem("neat_packing_needs_packing", ("neat_packing", "packing"))
    if cfg.neat_packing and cfg.stage == "pt":
        yield problem("neat_packing_pt", ("neat_packing", "stage"))
    if cfg.interleave_probs and cfg.mix_strategy == "concat":
        yield problem("interleave_probs_concat", ("interleave_probs", "mix_strategy"))
    if not STAGES[cfg.stage].packing and cfg.use_packing:
        yield problem("packing_stage", ("packing", "stage"), stage=cfg.stage, stages=tuple(stages_with("packing")))
    if cfg.padding_free and not STAGES[cfg.stage].padding_free:
        yield problem(
            "padding_free_stage", ("padding_free", "stage"), stage=cfg.stage, stages=tuple(stages_with("padding_free"))
        )


def thought_problems(cfg: Config) -> Iterator[Problem]:
    """``thought_loss_weight`` below 1: stage sft, a trained thought (``enable_thinking``). The template's thought
    markers are checked when it is loaded (``data/pipeline.py``): the schema does not know the templates."""
    weight = cfg.thought_loss_weight
    if weight == 1:
        return
    if cfg.stage != "sft":
        yield problem("thought_weight_stage", ("thought_loss_weight", "stage"), weight=weight, stage=cfg.stage)
    if not cfg.enable_thinking:
        yield problem("thought_weight_no_thinking", ("thought_loss_weight", "enable_thinking"), weight=weight)
    if not 0 < weight < 1:
        return
    losses = ("enable_liger_kernel", "use_dft_loss", "use_eaft_loss", "use_asft_loss")
    for name in [name for name in losses if getattr(cfg, name, False)]:
        yield problem("thought_weight_loss", ("thought_loss_weight", name), weight=weight, name=name)


def dataset_name_problems(cfg: Config) -> Iterator[Problem]:
    """``dataset`` / ``eval_dataset`` with an empty name between commas."""
    for key in ("dataset", "eval_dataset"):  # "a,,a": LLaMA-Factory stops on the empty name; never dropped silently
        text = getattr(cfg, key)
        if isinstance(text, str) and text.strip() and any(not part.strip() for part in text.split(",")):
            yield problem("dataset_empty_name", (key,), option=key, text=repr(text))


def micro_batch_problems(cfg: Config) -> Iterator[Problem]:
    """A micro-batch (batch size x cutoff_len) must stay within what a kernel can index."""
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size"):
        tokens = getattr(cfg, name) * cfg.cutoff_len
        if tokens > MAX_MICRO_BATCH_TOKENS:
            yield problem(
                "micro_batch_too_large",
                (name, "cutoff_len"),
                name=name,
                batch=getattr(cfg, name),
                cutoff=cfg.cutoff_len,
                tokens=tokens,
                limit=MAX_MICRO_BATCH_TOKENS,
            )
