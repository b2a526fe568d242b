"""Tokens a config adds (``add_tokens``; ``add_special_tokens`` or ``new_special_tokens_config``) and their rows.

A new token's row is found by its id, never as "the last rows": a model's embedding is often padded beyond its
vocabulary (Qwen2.5: 151665 tokens, 151936 rows), so a token can land in a padding row without any resize and would
keep whatever that row held. Each new row is set as ``init_special_tokens`` says, with LLaMA-Factory's methods
(``model/model_utils/embedding.py``):

- ``noise_init``: the mean of the vocabulary's rows that are not new, plus N(0, 1/sqrt(hidden size)) noise;
- ``desc_init``: the mean of the rows of the description's tokens that are not new (the mean of the vocabulary's rows
  when none is left); ``desc_init_w_noise``: that plus the same noise.

Where tunekit differs from LLaMA-Factory, on purpose:

- "the vocabulary's rows" are the tokenizer's ids, so padding rows (never a token's) stay out of the mean;
  LLaMA-Factory averages every row that is not new, padding included;
- only tokens the tokenizer did not have are new: a checkpoint that already holds them (a run resumed, a fine-tuned
  model) keeps its trained rows, where LLaMA-Factory sets again every listed token once any of them was added;
- an untied output embedding (``lm_head``) gets the same method from its own rows (its mean, or the mean of its rows
  of the description's tokens); LLaMA-Factory starts its desc_init rows from the *input* embedding's rows, vectors of
  the other matrix. The noise is drawn on the CPU from torch's generator (seeded by the run), input rows first.

Under DeepSpeed ZeRO-3 the model loads partitioned: the rows are set inside ``deepspeed.zero.GatheredParameters``
with rank 0 as the modifier, as LLaMA-Factory does.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from ..config.lists import split_list
from ..config.problems import Said
from ..config.special_tokens import read_special_tokens
from ..errors import ModelError

_ATTR = "tunekit_added_tokens"  # set on the tokenizer by add_new_tokens, read by init_new_rows


@dataclass(frozen=True)
class AddedTokens:
    tokens: tuple[str, ...]  # those the tokenizer did not have, in the config's order
    descriptions: dict[str, str] | None  # new_special_tokens_config's, for desc_init


def add_new_tokens(cfg, tokenizer) -> None:
    """Add the config's tokens to ``tokenizer`` (``add_tokens`` as plain tokens, then the special ones) and note
    which were new (for :func:`init_new_rows`)."""
    descriptions = read_special_tokens(cfg.new_special_tokens_config) if cfg.new_special_tokens_config else None
    special = list(descriptions) if descriptions else split_list(cfg.add_special_tokens)
    plain = split_list(cfg.add_tokens)
    if not special and not plain:
        return
    known = tokenizer.get_vocab()
    if plain:
        tokenizer.add_tokens(plain, special_tokens=False)
    if special:
        tokenizer.add_special_tokens({"extra_special_tokens": special}, replace_extra_special_tokens=False)
    new = tuple(dict.fromkeys(t for t in plain + special if t not in known))
    setattr(tokenizer, _ATTR, AddedTokens(new, descriptions))


def init_new_rows(model, tokenizer, method: str = "noise_init") -> list[int]:
    """Set the embedding rows of the tokens :func:`add_new_tokens` added (after any resize); returns their ids."""
    added: AddedTokens | None = getattr(tokenizer, _ATTR, None)
    if added is None or not added.tokens:
        return []
    ids = [tokenizer.convert_tokens_to_ids(t) for t in added.tokens]
    inputs = model.get_input_embeddings().weight
    outputs = model.get_output_embeddings()
    weights = [inputs] + ([outputs.weight] if outputs is not None and outputs.weight is not inputs else [])
    with _gathered(weights), torch.no_grad():
        rows = inputs.shape[0]
        vocabulary = min(ids)  # added tokens take the ids after the tokenizer's own: its rows are those below
        sources = _description_rows(added, tokenizer, set(ids), rows) if method != "noise_init" else None
        for weight in weights:
            _init_rows(weight.data, ids, vocabulary, sources, noise=method != "desc_init")
    return ids


def _description_rows(added: AddedTokens, tokenizer, new: set[int], rows: int) -> list[list[int]]:
    """Per new token, the ids of its description's tokens that have a row of their own (not new, in range)."""
    out = []
    for token in added.tokens:
        text = (added.descriptions or {}).get(token, "")
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
        out.append([i for i in ids if i not in new and 0 <= i < rows])
    return out


def _init_rows(weight, ids: list[int], vocabulary: int, sources: list[list[int]] | None, noise: bool) -> None:
    """Write ``weight[ids]``: the mean of the vocabulary's rows (a view: no copy of a large embedding), or each
    token's description rows' mean, plus noise."""
    mean = weight[:vocabulary].mean(dim=0, dtype=torch.float32)
    if sources is None:
        base = mean.expand(len(ids), -1)
    else:
        base = torch.stack([weight[src].float().mean(dim=0) if src else mean for src in sources])
    if noise:
        dim = weight.shape[1]
        base = base + (torch.randn(len(ids), dim) / math.sqrt(dim)).to(base.device)
    weight[ids] = base.to(weight.dtype)


def _gathered(params):
    """Under ZeRO-3 the full parameters, written back from rank 0; else nothing to do."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if not is_deepspeed_zero3_enabled():
        return nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=0)


def check_new_rows_train(model, cfg, ids: list[int]) -> None:
    """New tokens whose embedding rows never train would be used untrained: refused before training. LoRA, OFT and
    the prompt methods adapt no embedding, freeze trains none unless told; LLaMA-Factory adds the embeddings to the
    trained modules by itself, tunekit asks for it (the memory plan then counts them)."""
    if not any(p.requires_grad for p in model.get_input_embeddings().parameters()):
        raise ModelError(Said("new_tokens_untrained", count=len(ids), method=cfg.finetuning_type))
