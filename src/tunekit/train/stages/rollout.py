"""What ppo and grpo share: sampling completions, scoring them, and reusing a rollout for several updates.

A *rollout* is generated once per batch of prompts and optimised on ``reuse`` consecutive optimizer
steps (``ppo_epochs`` for ppo, ``grpo_iterations`` for grpo): :class:`RepeatSampler` yields every
batch of prompts ``reuse`` times in a row and the trainer keeps the rollout of a batch until it has
been used that often. The first update of a rollout is on-policy (ratio 1); later ones are off-policy
and the ratio clipping bounds them. One "epoch" of these stages therefore runs ``reuse`` x the steps
of one pass over the prompts.

Rewards: reward functions named by dotted path (``package.module:function``; several comma-separated,
summed), called as ``fn(prompts=[...], completions=[...], reference=[...]) -> list[float]`` with the
prompt texts, the decoded completions and the record's reference answer ("" when none) — and/or a
reward model saved by stage rm (``reward_model``), which scores prompt + completion with its value head
(it must use the policy's tokenizer).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils.data import Sampler

from ...config.lists import split_list
from ...config.problems import config_error
from ...config.schema import (
    Config,
    run_problems,  # the reward rule's one home (the board applies it too)
)
from ...errors import ConfigError
from ...model.stops import stop_token_ids
from ..batching import mask_of, pad
from ..losses import token_logps
from .value_head import load_value_head_model


class RepeatSampler(Sampler):
    """Shuffled indices in groups of ``group`` (one optimizer step of prompts, all ranks together), each group
    repeated ``repeats`` times. The last group is filled up from the start of the shuffle, so every group is
    whole and each rank's micro-batches of a group repeat exactly."""

    def __init__(self, n: int, group: int, repeats: int, seed: int):
        self.n, self.group, self.repeats, self.seed, self.epoch = n, group, repeats, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        perm = torch.randperm(self.n, generator=g).tolist()
        for start in range(0, len(self), self.group * self.repeats):
            chunk = [perm[(start // self.repeats + i) % self.n] for i in range(self.group)]
            for _ in range(self.repeats):
                yield from chunk

    def __len__(self) -> int:
        return -(-self.n // self.group) * self.group * self.repeats


def load_reward_functions(spec: str | None) -> list[Callable]:
    fns = []
    for name in split_list(spec):
        module, sep, attr = name.partition(":")
        if not sep:
            module, _, attr = name.rpartition(".")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise config_error("reward_import", ("reward_funcs",), name=name, error=str(exc)) from None
        if not callable(fn):
            raise config_error("reward_not_function", ("reward_funcs",), name=name)
        fns.append(fn)
    return fns


def load_reward_model(cfg: Config):
    if not cfg.reward_model:
        return None

    if cfg.reward_model_adapters:  # an adapter folder (with its value head) on top of reward_model
        return load_value_head_model(cfg.reward_model_adapters, base=cfg.reward_model)
    base = cfg.model_name_or_path if cfg.reward_model_type == "lora" else None
    return load_value_head_model(cfg.reward_model, base=base)


def check_rewards(cfg: Config, fns, reward_model) -> None:
    if not fns and reward_model is None:
        problems = list(run_problems(cfg))
        raise ConfigError("\n".join(p.message for p in problems), problems)


def rollout_stop_ids(model, tokenizer, template) -> list[int]:
    """The tokens a rollout stops on: chat's and predict's (the policy's ``generation_config.eos_token_id`` included;
    a PPO value head's backbone holds it)."""
    lm = getattr(model, "pretrained_model", model)
    return stop_token_ids(tokenizer, template, getattr(lm, "generation_config", None))


@dataclass
class Samples:
    """Prompts (left-padded, width ``prompt_width``) + completions (right-padded) in one tensor."""

    sequences: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    response_mask: torch.Tensor  # [N, T] real completion tokens (up to and including the stop token)
    prompt_width: int

    @property
    def responses(self) -> torch.Tensor:
        return self.sequences[:, self.prompt_width :]


def generate(
    lm,
    input_ids,
    attention_mask,
    *,
    num_return: int,
    max_new_tokens: int,
    temperature: float,
    stop_ids: list[int],
    pad_id: int,
) -> Samples:
    """Sample ``num_return`` completions per prompt (pure sampling: top_p 1, top_k off)."""
    was_training = lm.training
    lm.eval()
    with torch.no_grad():
        out = lm.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            do_sample=True,
            temperature=temperature,
            top_p=1.0,
            top_k=0,
            max_new_tokens=max_new_tokens,
            num_return_sequences=num_return,
            eos_token_id=stop_ids,
            pad_token_id=pad_id,
            use_cache=True,
        )
    lm.train(was_training)
    width = input_ids.shape[1]
    responses = out[:, width:]
    is_stop = torch.zeros_like(responses, dtype=torch.bool)
    for sid in stop_ids:
        is_stop |= responses == sid
    # tokens after the first stop token are padding
    after_stop = (is_stop.long().cumsum(1) - is_stop.long()) > 0
    response_mask = (~after_stop).long()
    responses = responses.masked_fill(after_stop, pad_id)
    prompt_mask = attention_mask.repeat_interleave(num_return, dim=0)
    sequences = torch.cat([out[:, :width], responses], dim=1)
    mask = torch.cat([prompt_mask, response_mask], dim=1)
    position_ids = (mask.cumsum(1) - 1).clamp(min=0)
    return Samples(sequences, mask, position_ids, response_mask, width)


def response_logps(lm_out_logits: torch.Tensor, samples: Samples, temperature: float) -> torch.Tensor:
    """Per-token log-probs of the completion tokens ``[N, T]`` (logits at position t predict token t+1)."""
    logits = lm_out_logits[:, samples.prompt_width - 1 : -1]
    return token_logps(logits, samples.responses, temperature)


def decode_completions(tokenizer, samples: Samples) -> list[str]:
    rows = [r[m.bool()].tolist() for r, m in zip(samples.responses, samples.response_mask)]
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


def compute_rewards(
    samples: Samples,
    prompts: list[str],
    references: list[str],
    completions: list[str],
    fns: list[Callable],
    reward_model,
    pad_id: int,
) -> torch.Tensor:
    n = samples.sequences.shape[0]
    total = torch.zeros(n)
    for fn in fns:
        values = fn(prompts=prompts, completions=completions, reference=references)
        if len(values) != n:
            raise config_error("reward_count", name=str(getattr(fn, "__name__", fn)), count=len(values), n=n)
        total += torch.tensor([float(v) for v in values])
    if reward_model is not None:
        rows = [s[m.bool()].tolist() for s, m in zip(samples.sequences, samples.attention_mask)]
        ids = pad(rows, pad_id)
        device = next(reward_model.parameters()).device
        with torch.no_grad():
            total += reward_model.score(ids.to(device), mask_of(rows, ids).to(device)).float().cpu()
    return total.to(samples.sequences.device)


class RolloutCache:
    """Rollouts of the current optimizer step's micro-batches, each dropped after ``reuse`` uses."""

    def __init__(self, reuse: int):
        self.reuse = reuse
        self.entries: dict[bytes, list] = {}

    @staticmethod
    def key(input_ids: torch.Tensor) -> bytes:
        return input_ids.detach().cpu().numpy().tobytes() + bytes(str(tuple(input_ids.shape)), "ascii")

    def get(self, input_ids: torch.Tensor):
        entry = self.entries.get(self.key(input_ids))
        if entry is None:
            return None
        entry[1] += 1
        if entry[1] >= self.reuse:
            del self.entries[self.key(input_ids)]
        return entry[0]

    def put(self, input_ids: torch.Tensor, rollout) -> None:
        if self.reuse > 1:
            self.entries[self.key(input_ids)] = [rollout, 1]
