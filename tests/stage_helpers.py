"""Synthetic data and reward functions for the stage tests (rm, dpo, kto, ppo, grpo, pt)."""

from __future__ import annotations

import random
from pathlib import Path

from tests.helpers import logged_losses, write_dataset
from tests.tolerances import FP64_U, sum_order_bound

WORDS = ["apple", "river", "stone", "cloud", "green", "table", "music", "light", "paper", "window"]
PREF_COLUMNS = {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"}
PAIR_LR = 0.5
# The pair-weighting runs (test_pair_weighting.py's module doc): one plain SGD step in float64 on write_unequal_pairs
PAIR_SGD_OPTIONS = dict(
    dataset="pairs",
    dtype="float64",
    gradient_checkpointing=False,
    cutoff_len=128,
    max_steps=1,
    learning_rate=PAIR_LR,
    optim="sgd",
    max_grad_norm=0.0,
    warmup_steps=0,
    weight_decay=0.0,
)
KTO_ENTRY = {
    "formatting": "sharegpt",
    "columns": {"messages": "messages", "kto_tag": "label"},
    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
}


def preference_records(n: int, seed: int = 0) -> list[dict]:
    """The chosen answer always ends in "7 7 7", the rejected one in "3 3 3"; the words before are random."""
    rng = random.Random(seed)
    return [
        {
            "instruction": "Describe " + " ".join(rng.sample(WORDS, 3)),
            "input": "",
            "chosen": " ".join(rng.sample(WORDS, 3)) + " 7 7 7",
            "rejected": " ".join(rng.sample(WORDS, 3)) + " 3 3 3",
        }
        for _ in range(n)
    ]


def kto_records(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        good = i % 2 == 0
        answer = " ".join(rng.sample(WORDS, 3)) + (" 7 7 7" if good else " 3 3 3")
        out.append(
            {
                "messages": [
                    {"role": "user", "content": "Describe " + " ".join(rng.sample(WORDS, 3))},
                    {"role": "assistant", "content": answer},
                ],
                "label": good,
            }
        )
    return out


def write_preference(folder: Path, name: str = "toy", n: int = 32, seed: int = 0) -> Path:
    return write_dataset(folder, name, preference_records(n, seed), {"ranking": True, "columns": PREF_COLUMNS})


def write_kto(folder: Path, name: str = "toy", n: int = 32, seed: int = 0) -> Path:
    return write_dataset(folder, name, kto_records(n, seed), KTO_ENTRY)


def ascii_share(prompts, completions, reference, **kwargs):
    """Reward for the RL tests: the share of lowercase ASCII letters in the completion (about 0.4 for the
    untrained tiny model, whose vocabulary mixes Latin and CJK pieces)."""
    return [sum("a" <= c <= "z" for c in text) / max(1, len(text)) for text in completions]


def random_words(rng: random.Random, lo: int, hi: int | None = None) -> str:
    """``lo``..``hi`` words of :data:`WORDS` (exactly ``lo`` when ``hi`` is None), drawn from ``rng``."""
    n = lo if hi is None else rng.randint(lo, hi)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def pair_stage_trainer(cfg):
    """The dpo/rm trainer a run of ``cfg`` would train with (its DataLoader and ``get_batch_samples``), not trained."""
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.stages import dpo, rm

    module = {"dpo": dpo, "rm": rm}[cfg.stage]
    tokenizer = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tokenizer, cfg.stage)
    model = module.load_model(cfg, tokenizer) if cfg.stage == "rm" else load_model(cfg, tokenizer)
    return module.build_trainer(cfg, build_training_arguments(cfg, []), model, tokenizer, data, [])


def run_losses_and_weights(cfg) -> tuple[list[float], dict]:
    """Train ``cfg``; the logged loss of every step and the final LoRA (+ value head) weights."""
    from tunekit.flow import run_train

    run_train(cfg)
    return losses_and_weights(Path(cfg.output_dir))


def losses_and_weights(out: Path) -> tuple[list[float], dict]:
    """The logged loss of every step of the run in ``out`` and its final LoRA (+ value head) weights."""
    from safetensors.torch import load_file

    weights = load_file(out / "adapter_model.safetensors")
    if (out / "value_head.safetensors").is_file():
        weights.update(load_file(out / "value_head.safetensors"))
    return logged_losses(out), weights


def write_unequal_pairs(folder: Path) -> Path:
    """Dataset "pairs" in ``folder``: 4 pairs, one long (answers of ~90 words) and three short, so that a token budget
    forms micro-batches of unequal pair counts."""
    rng = random.Random(3)
    pairs = [
        {
            "instruction": "Describe " + random_words(rng, 2),
            "input": "",
            "chosen": random_words(rng, 90) + " 7 7",
            "rejected": random_words(rng, 90) + " 3 3",
        }
    ]
    pairs += [
        {
            "instruction": "Describe " + random_words(rng, 1),
            "input": "",
            "chosen": random_words(rng, 1 + i) + " 7",
            "rejected": random_words(rng, 3 - i) + " 3",
        }
        for i in range(3)
    ]
    write_dataset(folder, "pairs", pairs, {"ranking": True, "columns": PREF_COLUMNS})
    return folder


def sgd_step_bound(weights: dict) -> float:
    """Float64 bound on two summation orders of one SGD step (test_pair_weighting.py's module doc), scaled by the
    largest trained weight."""
    return sum_order_bound(10**5, max(w.abs().max().item() for w in weights.values()), FP64_U)


def lora_step(weights: dict) -> float:
    """The largest element of the step: LoRA's B starts at zero, so after one step it IS ``-lr x`` its gradient."""
    return max(w.abs().max().item() for k, w in weights.items() if "lora_B" in k)
