"""The tokens generation stops on, one way for chat, predict, the API, export and the PPO/GRPO rollouts.

In order, without repeats: the template's stop words that are one token, the tokenizer's ``eos_token_id``, and the
model's own end tokens (``generation_config.eos_token_id``, an int or a list: Qwen's ``<|endoftext|>`` next to
``<|im_end|>``), as plain ``model.generate`` would stop on them. Stop words that are not one token are returned as
text, for the caller to cut from the decoded output (:class:`tunekit.infer.stops.StopText`).
"""

from __future__ import annotations

from typing import Any


def generation_stops(tokenizer, template, generation_config: Any = None) -> tuple[list[int], list[str]]:
    """``(stop token ids, multi-token stop texts)`` for ``tokenizer`` + ``template`` + the model's generation
    config."""
    ids: list[int] = []
    texts: list[str] = []
    vocab = tokenizer.get_vocab()
    for word in getattr(template, "stop_words", None) or []:
        if word in vocab:
            ids.append(vocab[word])
        else:
            texts.append(word)
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    model_eos = getattr(generation_config, "eos_token_id", None)
    ids.extend([model_eos] if isinstance(model_eos, int) else [t for t in model_eos or [] if isinstance(t, int)])
    return list(dict.fromkeys(ids)), texts


def stop_token_ids(tokenizer, template, generation_config: Any = None) -> list[int]:
    """The token ids generation must stop on (see the module docstring)."""
    return generation_stops(tokenizer, template, generation_config)[0]
