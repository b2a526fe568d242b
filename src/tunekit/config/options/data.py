"""Data options: which datasets, how they are rendered and tokenized."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from ..problems import Problem
from ..stages import STAGES, spoken_list, stages_with
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
    thought_loss_weight: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Reasoning templates (qwen3, qwen3_vl), stage sft: the loss weight of each reply's thought block "
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
        default = " (on by default for pt)" if cfg.packing is None else ""
        yield Problem(
            f"padding_free and packing{default} are two ways to remove padding: choose one (padding_free: "
            f"concatenate each micro-batch's samples, set packing: false; or packing, remove padding_free).",
            ("padding_free", "packing"),
        )
    strategy = cfg.batching_strategy
    if strategy is not None and (
        cfg.padding_free != (strategy in ("padding_free", "dynamic_padding_free"))
        or (cfg.max_tokens_per_batch is not None) != (strategy in ("dynamic_batching", "dynamic_padding_free"))
    ):
        yield Problem(
            f"batching_strategy {strategy} (LLaMA-Factory's name) disagrees with padding_free "
            f"{str(cfg.padding_free).lower()} / max_tokens_per_batch {cfg.max_tokens_per_batch}: keep "
            "batching_strategy alone, or use only tunekit's padding_free and max_tokens_per_batch.",
            ("batching_strategy", "padding_free", "max_tokens_per_batch"),
        )
    budget = cfg.max_tokens_per_batch
    if budget is None:
        return
    if cfg.stage == "kto":
        yield Problem(
            "max_tokens_per_batch is not supported for stage kto: its KL estimate is taken over each micro-batch, "
            "so batches of varying size would change the loss; remove max_tokens_per_batch (padding_free cuts "
            "kto's padding).",
            ("max_tokens_per_batch", "stage"),
        )
    elif cfg.stage not in BUDGET_STAGES:
        yield Problem(
            f"max_tokens_per_batch is for stages sft, pt, dpo and rm (stage is {cfg.stage}): remove "
            f"max_tokens_per_batch.",
            ("max_tokens_per_batch", "stage"),
        )
    elif cfg.stage in ("dpo", "rm") and budget < 2 * cfg.cutoff_len:
        yield Problem(
            f"max_tokens_per_batch {budget} is below 2 x cutoff_len {cfg.cutoff_len}: a {cfg.stage} pair is two "
            f"sequences of up to cutoff_len tokens each and must fit one micro-batch; set max_tokens_per_batch "
            f"to at least {2 * cfg.cutoff_len} (e.g. {2 * cfg.cutoff_len * cfg.per_device_train_batch_size}) or "
            f"lower cutoff_len.",
            ("max_tokens_per_batch", "cutoff_len", "stage"),
        )
    if budget < cfg.cutoff_len:
        yield Problem(
            f"max_tokens_per_batch {budget} is below cutoff_len {cfg.cutoff_len}: a sample of cutoff_len tokens "
            f"could never fit a micro-batch; set max_tokens_per_batch to at least {cfg.cutoff_len} (e.g. "
            f"{cfg.cutoff_len * cfg.per_device_train_batch_size}) or lower cutoff_len.",
            ("max_tokens_per_batch", "cutoff_len"),
        )
    if cfg.group_by_length:
        yield Problem(
            "max_tokens_per_batch forms its own batches (padded: by length already), group_by_length groups "
            "the sampler's: remove group_by_length.",
            ("max_tokens_per_batch", "group_by_length"),
        )
    if budget > MAX_MICRO_BATCH_TOKENS:
        yield Problem(
            f"max_tokens_per_batch {budget:,} is more than {MAX_MICRO_BATCH_TOKENS:,} (2**31 - 1) tokens in one "
            f"micro-batch: use a smaller value.",
            ("max_tokens_per_batch",),
        )


def packing_problems(cfg: Config) -> Iterator[Problem]:
    """``packing``, ``neat_packing``, ``padding_free`` and the mixing of datasets, against the stage."""
    if cfg.neat_packing and not cfg.use_packing:
        yield Problem("neat_packing needs packing: set packing: true.", ("neat_packing", "packing"))
    if cfg.neat_packing and cfg.stage == "pt":
        yield Problem(
            "neat_packing is for sft: pt packing cuts one continuous text into cutoff_len blocks, so there are no "
            "samples to keep apart; remove neat_packing.",
            ("neat_packing", "stage"),
        )
    if cfg.interleave_probs and cfg.mix_strategy == "concat":
        yield Problem(
            "interleave_probs is set but mix_strategy is concat: set mix_strategy: interleave_under or "
            "interleave_over.",
            ("interleave_probs", "mix_strategy"),
        )
    if not STAGES[cfg.stage].packing and cfg.use_packing:
        yield Problem(
            f"packing is not supported for stage {cfg.stage}: remove packing (it is only for "
            f"{spoken_list(stages_with('packing'))}).",
            ("packing", "stage"),
        )
    if cfg.padding_free and not STAGES[cfg.stage].padding_free:
        yield Problem(
            f"padding_free is not supported for stage {cfg.stage}: remove padding_free (it is only for "
            f"{spoken_list(stages_with('padding_free'))}).",
            ("padding_free", "stage"),
        )


def thought_problems(cfg: Config) -> Iterator[Problem]:
    """``thought_loss_weight`` below 1: stage sft, a trained thought (``enable_thinking``). The template's thought
    markers are checked when it is loaded (``data/pipeline.py``): the schema does not know the templates."""
    weight = cfg.thought_loss_weight
    if weight == 1:
        return
    if cfg.stage != "sft":
        yield Problem(
            f"thought_loss_weight {weight:g} is for stage sft (stage is {cfg.stage}): {cfg.stage} scores or rewards "
            "each reply whole, thought included; remove thought_loss_weight.",
            ("thought_loss_weight", "stage"),
        )
    if not cfg.enable_thinking:
        yield Problem(
            f"thought_loss_weight {weight:g} with enable_thinking: false: no thought is trained (thoughts are "
            "removed and the empty <think></think> block is part of the prompt); remove thought_loss_weight or set "
            "enable_thinking: true.",
            ("thought_loss_weight", "enable_thinking"),
        )
    if not 0 < weight < 1:
        return
    losses = ("enable_liger_kernel", "use_dft_loss", "use_eaft_loss", "use_asft_loss")
    for name in [name for name in losses if getattr(cfg, name, False)]:
        yield Problem(
            f"thought_loss_weight {weight:g} (a weighted thought) and {name} each compute their own token loss: "
            f"remove one of them.",
            ("thought_loss_weight", name),
        )


def dataset_name_problems(cfg: Config) -> Iterator[Problem]:
    """``dataset`` / ``eval_dataset`` with an empty name between commas."""
    for key in ("dataset", "eval_dataset"):  # "a,,a": LLaMA-Factory stops on the empty name; never dropped silently
        text = getattr(cfg, key)
        if isinstance(text, str) and text.strip() and any(not part.strip() for part in text.split(",")):
            yield Problem(f"{key} {text!r} has an empty name between commas: remove the extra comma.", (key,))


def micro_batch_problems(cfg: Config) -> Iterator[Problem]:
    """A micro-batch (batch size x cutoff_len) must stay within what a kernel can index."""
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size"):
        tokens = getattr(cfg, name) * cfg.cutoff_len
        if tokens > MAX_MICRO_BATCH_TOKENS:
            yield Problem(
                f"{name} {getattr(cfg, name)} x cutoff_len {cfg.cutoff_len} = {tokens:,} tokens in one micro-batch, "
                f"more than {MAX_MICRO_BATCH_TOKENS:,} (2**31 - 1): kernels index a batch's elements with 32-bit "
                f"integers and no device holds its activations; use a smaller {name} (and gradient_accumulation_steps "
                "for a larger effective batch).",
                (name, "cutoff_len"),
            )
