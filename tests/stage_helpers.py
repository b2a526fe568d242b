"""Synthetic data and reward functions for the stage tests (rm, dpo, kto, ppo, grpo, pt)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from tests.helpers import write_dataset

WORDS = ["apple", "river", "stone", "cloud", "green", "table", "music", "light", "paper", "window"]
PREF_COLUMNS = {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"}
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


def read_log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()]


def train_rows(out: Path) -> list[dict]:
    return [row for row in read_log(out) if "loss" in row]


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
    data = prepare_datasets(cfg, tokenizer, cfg.stage, verbose=False)
    model = module.load_model(cfg, tokenizer) if cfg.stage == "rm" else load_model(cfg, tokenizer)
    return module.build_trainer(cfg, build_training_arguments(cfg, []), model, tokenizer, data, [])


def run_losses_and_weights(cfg) -> tuple[list[float], dict]:
    """Train ``cfg``; the logged loss of every step and the final LoRA (+ value head) weights."""
    from safetensors.torch import load_file

    from tunekit.flow import run_train

    run_train(cfg)
    out = Path(cfg.output_dir)
    weights = load_file(out / "adapter_model.safetensors")
    if (out / "value_head.safetensors").is_file():
        weights.update(load_file(out / "value_head.safetensors"))
    return [r["loss"] for r in train_rows(out)], weights
