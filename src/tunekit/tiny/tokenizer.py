"""The byte-level BPE tokenizers of the tiny models: one per family, trained on the shipped corpus.

Each family's tokenizer (:class:`TokenizerFamily`: special tokens, bos/eos/pad, chat template) is trained on the
small corpus shipped in ``tunekit/resources/corpus``. The tokenizer is built so that a plain
``AutoTokenizer.from_pretrained(folder)`` gives exactly the ids of the trained tokenizer: qwen folders are
re-tokenized by transformers' own ``Qwen2Tokenizer`` (it rebuilds the NFC + split-regex + byte-level pipeline), so
every family is trained with that very pipeline; the other families are declared ``PreTrainedTokenizerFast`` so that
the saved ``tokenizer.json`` is used as is (``LlamaTokenizer``/``GemmaTokenizer`` would swap in Metaspace). Digits
are split one per token, as Qwen does. Every builder reloads the folder and checks this before returning.

This module imports tokenizers/transformers lazily: importing it is cheap.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from tunekit.data.templates import get_template
from tunekit.data.templates.jinja_export import official_jinja
from tunekit.errors import ModelError

CORPUS_DIR = Path(__file__).resolve().parent.parent / "resources" / "corpus"

# Qwen2's pre-tokenizer regex (one digit per piece). Used for every family, see the module docstring.
SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)

DEFAULT_VOCAB_SIZE = 2048
PROBE_TEXT = "Hello world 你好，世界! 12345 + 678 = 13023\n  def f(x):\treturn x**2  # 中文 ok"


@dataclass(frozen=True)
class TokenizerFamily:
    """Special tokens and bos/eos/pad of one tokenizer family, as the real checkpoints set them."""

    name: str
    template: str  # name in tunekit.data.templates
    special: tuple[str, ...]  # added tokens with special=True, in id order (they come first)
    extra: tuple[str, ...] = ()  # added tokens with special=False (tool/think tags)
    bos: str | None = None
    eos: str | None = None
    pad: str | None = None
    unk: str | None = None
    add_bos: bool = False
    tokenizer_class: str = "PreTrainedTokenizerFast"
    generation_eos: tuple[str, ...] = ()  # generation_config.eos_token_id (all stop tokens)
    official_template: str | None = None  # the checkpoint's own chat_template: data/templates/official_<this>.jinja


#: Qwen's ChatML tokenizer (Qwen2 / Qwen2.5); qwen3 and the Qwen VL / audio families are it with more tokens
_QWEN = TokenizerFamily(
    name="qwen",
    template="qwen",
    special=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    extra=("<tool_call>", "</tool_call>"),
    eos="<|im_end|>",
    pad="<|endoftext|>",
    tokenizer_class="Qwen2Tokenizer",
    generation_eos=("<|im_end|>", "<|endoftext|>"),
)

_DEEPSEEK_SPECIAL = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>")
_DEEPSEEK_IDS = dict(
    bos="<｜begin▁of▁sentence｜>",
    eos="<｜end▁of▁sentence｜>",
    pad="<｜end▁of▁sentence｜>",
    add_bos=True,
    generation_eos=("<｜end▁of▁sentence｜>",),
)

TOKENIZERS: dict[str, TokenizerFamily] = {
    "qwen": _QWEN,
    "qwen3": replace(
        _QWEN,
        name="qwen3",
        template="qwen3",
        extra=_QWEN.extra + ("<tool_response>", "</tool_response>", "<think>", "</think>"),
    ),
    "llama3": TokenizerFamily(
        name="llama3",
        template="llama3",
        special=(
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|python_tag|>",
            "<|finetune_right_pad_id|>",
        ),
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        add_bos=True,
        generation_eos=("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
    ),
    "mistral": TokenizerFamily(
        name="mistral",
        template="mistral",
        special=(
            "<unk>",
            "<s>",
            "</s>",
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
        ),
        bos="<s>",
        eos="</s>",
        unk="<unk>",
        add_bos=True,
        generation_eos=("</s>",),
    ),
    "gemma": TokenizerFamily(
        name="gemma",
        template="gemma",
        special=("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"),
        bos="<bos>",
        eos="<eos>",
        pad="<pad>",
        unk="<unk>",
        add_bos=True,
        generation_eos=("<eos>", "<end_of_turn>"),
    ),
    # GLM-4 (glm-4-9b-chat-hf, GLM-4-9B-0414): its added tokens in id order (151329 <|endoftext|> ... 151342), eos
    # and pad <|endoftext|>, no bos; generation stops at <|endoftext|>, <|user|> and <|observation|> (its
    # generation_config). The chat template saved is GLM-4's own (data/templates/official_glm4.jinja: the template
    # of THUDM/glm-4-9b-chat's tokenization_chatglm.py, byte-identical to tests/fixtures/chat_templates/glm4.jinja).
    "glm4": TokenizerFamily(
        name="glm4",
        template="glm4",
        special=(
            "<|endoftext|>",
            "[MASK]",
            "[gMASK]",
            "[sMASK]",
            "<sop>",
            "<eop>",
            "<|system|>",
            "<|user|>",
            "<|assistant|>",
            "<|observation|>",
            "<|begin_of_image|>",
            "<|end_of_image|>",
            "<|begin_of_video|>",
            "<|end_of_video|>",
        ),
        eos="<|endoftext|>",
        pad="<|endoftext|>",
        generation_eos=("<|endoftext|>", "<|user|>", "<|observation|>"),
        official_template="glm4",
    ),
    # DeepSeek-V2 / V2-Lite chat (LlamaTokenizerFast): BOS added on encode, EOS also the pad
    "deepseek": TokenizerFamily(
        name="deepseek",
        template="deepseek",
        special=_DEEPSEEK_SPECIAL,
        **_DEEPSEEK_IDS,
    ),
    # DeepSeek-V3 / R1: the role and think tags are added tokens with special=False, as in their tokenizer.json
    "deepseek3": TokenizerFamily(
        name="deepseek3",
        template="deepseek3",
        special=_DEEPSEEK_SPECIAL,
        extra=("<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"),
        **_DEEPSEEK_IDS,
    ),
    # gpt-oss (o200k_harmony): eos <|return|>, pad <|endoftext|>; generation stops at <|return|>, <|endoftext|> and
    # <|call|> (its generation_config). Saved with gpt-oss's own chat template (data/templates/official_gpt_oss.jinja).
    "gpt_oss": TokenizerFamily(
        name="gpt_oss",
        template="gpt_oss",
        special=(
            "<|startoftext|>",
            "<|endoftext|>",
            "<|return|>",
            "<|constrain|>",
            "<|channel|>",
            "<|start|>",
            "<|end|>",
            "<|message|>",
            "<|call|>",
        ),
        bos="<|startoftext|>",
        eos="<|return|>",
        pad="<|endoftext|>",
        generation_eos=("<|return|>", "<|endoftext|>", "<|call|>"),
        official_template="gpt_oss",
    ),
}


def corpus_texts() -> list[str]:
    """The shipped corpus, one text per file in name order (newlines kept: "\n" and "\n\n" pieces are learned)."""
    texts = [f.read_text(encoding="utf-8") for f in sorted(CORPUS_DIR.glob("*.txt"))]
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise ModelError(f"tiny-model: the tokenizer corpus {CORPUS_DIR} is empty or missing (broken install?).")
    return texts


@lru_cache(maxsize=16)
def trained_tokenizer_json(fam: TokenizerFamily, vocab_size: int) -> str:
    """Train the byte-level BPE of a family once per process; returns its JSON (cache-safe, immutable)."""
    with _one_rayon_thread():
        tok = train_bpe(corpus_texts(), list(fam.special) + list(fam.extra), vocab_size)
    return tok.to_str()


def train_bpe(texts: list[str], special_tokens: list[str], vocab_size: int):
    """A byte-level BPE (``tokenizers.Tokenizer``) with Qwen2's NFC + split-regex pipeline, trained on ``texts``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


@contextlib.contextmanager
def _one_rayon_thread():
    """RAYON_NUM_THREADS=1 while the BPE trains, the old value (or none) restored after.

    It takes effect only if rayon's thread pool does not exist yet in this process; the trainer's merge
    order is deterministic either way (tests/tiny/test_tiny_model.py checks it with 4 threads).
    """
    old = os.environ.get("RAYON_NUM_THREADS")
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("RAYON_NUM_THREADS", None)
        else:
            os.environ["RAYON_NUM_THREADS"] = old


def build_tokenizer(family: TokenizerFamily, vocab_size: int, chat_template: str, max_length: int):
    """The family's tokenizer as a transformers tokenizer (not saved)."""
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast

    min_size = 256 + len(family.special) + len(family.extra)
    if vocab_size < min_size:
        raise ModelError(f"tiny-model: vocab_size {vocab_size} is too small; the byte-level BPE needs >= {min_size}.")
    raw = Tokenizer.from_str(trained_tokenizer_json(family, vocab_size))
    # Tool/think tags are plain added tokens (special=False) in the real checkpoints: kept when decoding.
    raw.add_tokens([AddedToken(t, special=False, normalized=False) for t in family.extra])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=family.bos,
        eos_token=family.eos,
        pad_token=family.pad,
        unk_token=family.unk,
        add_bos_token=family.add_bos,
        add_eos_token=False,
        model_max_length=max_length,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def chat_template_for(template_name: str) -> str:
    """The family's chat template, exported from tunekit's template registry (errors surface)."""
    return get_template(template_name).chat_template_jinja()


def family_chat_template(family: TokenizerFamily) -> str:
    """The chat template a family's tokenizer is saved with: the checkpoint's own where tunekit ships it
    (``official_template``), else tunekit's export of the family's template."""
    if family.official_template:
        return official_jinja(family.official_template)
    return chat_template_for(family.template)


def set_tokenizer_class(out: Path, name: str) -> None:
    """Declare the tokenizer class transformers must use on reload (see the module docstring)."""
    path = out / "tokenizer_config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["tokenizer_class"] = name
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


def check_tokenizer_roundtrip(folder: Path, tokenizer, text: str = PROBE_TEXT) -> None:
    """Raise if ``AutoTokenizer.from_pretrained(folder)`` tokenizes differently from ``tokenizer``."""
    from transformers import AutoTokenizer

    reloaded = AutoTokenizer.from_pretrained(folder)
    want, got = tokenizer(text)["input_ids"], reloaded(text)["input_ids"]
    if want != got:
        raise ModelError(
            f"tiny-model: the tokenizer saved in {folder} reloads as {type(reloaded).__name__} with different ids "
            f"({got[:12]}... vs {want[:12]}...); this family's tokenizer setup needs fixing in tunekit.tiny.tokenizer."
        )
