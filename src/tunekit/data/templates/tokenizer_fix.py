"""Make a tokenizer's EOS/PAD agree with a template's stop words (LLaMA-Factory's replace_eos)."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

FALLBACK_EOS = "<|endoftext|>"


def fix_tokenizer(tokenizer: Any, replace_eos_with: list[str], stop_words: list[str]) -> int:
    """EOS := the template's end-of-turn token (if asked), a PAD token, stop words registered as special.

    Returns how many new tokens were added to the vocabulary (the model's embeddings must then be resized).
    """
    added = 0
    if replace_eos_with and tokenizer.eos_token != replace_eos_with[0]:
        new = replace_eos_with[0]
        was_missing = new not in tokenizer.get_vocab()
        added += tokenizer.add_special_tokens({"eos_token": new})
        logger.info("eos token: %s%s", new, " (added to the vocabulary)" if was_missing else "")
    if tokenizer.eos_token_id is None:
        added += tokenizer.add_special_tokens({"eos_token": FALLBACK_EOS})
        logger.info("eos token added: %s", FALLBACK_EOS)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
        logger.info("pad token: %s", tokenizer.pad_token)
    extra = [w for w in stop_words if w and w != tokenizer.eos_token]
    if extra:
        added += tokenizer.add_special_tokens({"extra_special_tokens": extra}, replace_extra_special_tokens=False)
    if added:
        logger.warning("%d new token(s) added to the tokenizer: the model's embeddings must be resized", added)
    return added
