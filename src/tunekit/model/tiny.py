"""Tiny random-weight models of a real architecture family, built locally in a few seconds.

Tests, examples and benchmarks cannot download weights, so they use these: a real transformers
architecture class (Qwen2ForCausalLM, LlamaForCausalLM, ...) with the family's structural flags but
small sizes, random weights drawn from a fixed seed, and a byte-level BPE tokenizer trained on the
small corpus shipped in ``tunekit/resources/corpus``, carrying the family's special tokens,
bos/eos/pad and chat template. Same arguments + same library versions -> byte-identical files.

The tokenizer is built so that a plain ``AutoTokenizer.from_pretrained(folder)`` gives exactly the
ids of the trained tokenizer: qwen folders are re-tokenized by transformers' own ``Qwen2Tokenizer``
(it rebuilds the NFC + split-regex + byte-level pipeline), so every family is trained with that very
pipeline; the other families are declared ``PreTrainedTokenizerFast`` so that the saved
``tokenizer.json`` is used as is (``LlamaTokenizer``/``GemmaTokenizer`` would swap in Metaspace).
Digits are split one per token, as Qwen does. :func:`build_tiny_model` reloads the folder and
checks this before returning.

This module imports torch/transformers lazily: importing it is cheap.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from tunekit.errors import ModelError

from .tiny_config import DEFAULT_MAX_POSITIONS, _make_config, shrink_config  # noqa: F401 (re-exported)
from .tiny_names import family_of_name

CORPUS_DIR = Path(__file__).resolve().parent.parent / "resources" / "corpus"

# Qwen2's pre-tokenizer regex (one digit per piece). Used for every family, see the module docstring.
SPLIT_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

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
}


@dataclass(frozen=True)
class Family:
    """An architecture family: the transformers model_type, its structural defaults and tokenizer."""

    model_type: str
    tokenizer: str
    config: dict[str, Any] = field(default_factory=dict)


# Structural flags of a typical small member of each family (sizes are overwritten).
FAMILIES: dict[str, Family] = {
    "qwen2": Family(
        "qwen2",
        "qwen",
        {
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "use_sliding_window": False,
            "rope_theta": 1000000.0,
        },
    ),
    "qwen3": Family(
        "qwen3",
        "qwen3",
        {
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "attention_bias": False,
            "rope_theta": 1000000.0,
        },
    ),
    "llama": Family(
        "llama",
        "llama3",
        {
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "attention_bias": False,
            "mlp_bias": False,
            "rope_theta": 500000.0,
        },
    ),
    "mistral": Family(
        "mistral",
        "mistral",
        {
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "sliding_window": None,
            "rope_theta": 1000000.0,
        },
    ),
    "gemma": Family(
        "gemma",
        "gemma",
        {
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
            "hidden_activation": "gelu_pytorch_tanh",
            "rope_theta": 10000.0,
        },
    ),
    "gemma2": Family(
        "gemma2",
        "gemma",
        {
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
            "hidden_activation": "gelu_pytorch_tanh",
            "rope_theta": 10000.0,
            "sliding_window": 128,
            "final_logit_softcapping": 30.0,
            "attn_logit_softcapping": 50.0,
        },
    ),
    "gemma3_text": Family(
        "gemma3_text",
        "gemma",
        {
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
            "hidden_activation": "gelu_pytorch_tanh",
            "sliding_window": 128,
        },
    ),
    # mixture of experts (a name's "a3b" word): Qwen3-30B-A3B / -235B-A22B, Qwen1.5-MoE-A2.7B / Qwen2-57B-A14B
    "qwen3_moe": Family(
        "qwen3_moe",
        "qwen3",
        {
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "attention_bias": False,
            "rope_theta": 1000000.0,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 768,
            "norm_topk_prob": True,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
        },
    ),
    "qwen2_moe": Family(
        "qwen2_moe",
        "qwen",
        {
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "rope_theta": 1000000.0,
            "num_experts": 64,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 2560,
            "shared_expert_intermediate_size": 20480,
            "norm_topk_prob": False,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "use_sliding_window": False,
        },
    ),
}

# model_type (from a config.json) -> tokenizer family, for model types not in FAMILIES.
_TOKENIZER_OF_TYPE: list[tuple[str, str]] = [
    (r"qwen3", "qwen3"),
    (r"qwen", "qwen"),
    (r"gemma", "gemma"),
    (r"mistral|mixtral|ministral", "mistral"),
    (r"llama", "llama3"),
]


def family_names() -> list[str]:
    """The family names ``--like`` accepts besides aliases and config paths."""
    return sorted(FAMILIES)


@dataclass
class Resolved:
    """What ``--like`` resolved to: a base config dict (with model_type) and a tokenizer family."""

    config: dict[str, Any]
    tokenizer: TokenizerFamily
    source: str


def resolve_like(like: str | os.PathLike | None) -> Resolved:
    """Resolve a family name, a model name ('qwen2.5-7b') or a config.json / model folder path."""
    like = "qwen2" if like is None else like
    path = Path(like)
    if path.is_dir() or path.suffix == ".json" or os.sep in str(like) and path.exists():
        return _resolve_config_path(path)
    fam = FAMILIES[family_of_name(like, FAMILIES)]  # read strictly: a variant tunekit cannot build is refused
    return Resolved({"model_type": fam.model_type, **fam.config}, TOKENIZERS[fam.tokenizer], str(like))


def _resolve_config_path(path: Path) -> Resolved:
    cfg_file = path / "config.json" if path.is_dir() else path
    if not cfg_file.is_file():
        raise ModelError(f"tiny-model: {cfg_file} not found; --like needs a config.json or a folder holding one.")
    try:
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"tiny-model: cannot read {cfg_file}: {exc}") from exc
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise ModelError(f"tiny-model: {cfg_file} has no 'model_type'; is it a transformers config.json?")
    if isinstance(cfg.get("text_config"), dict) and "model_type" in cfg["text_config"]:
        cfg = dict(cfg["text_config"])  # multimodal wrapper: build its text decoder
    model_type = str(cfg["model_type"])
    if cfg.get("auto_map"):
        raise ModelError(
            f"tiny-model: {cfg_file} needs remote code (auto_map); only architectures built into transformers "
            "can be shrunk."
        )
    tok = next((TOKENIZERS[t] for pat, t in _TOKENIZER_OF_TYPE if re.search(pat, model_type)), TOKENIZERS["qwen"])
    return Resolved(cfg, tok, str(cfg_file))


# ---------------------------------------------------------------------------------------------
# tokenizer


def corpus_texts() -> list[str]:
    """The shipped corpus, one text per file in name order (newlines kept: "\n" and "\n\n" pieces are learned)."""
    texts = [f.read_text(encoding="utf-8") for f in sorted(CORPUS_DIR.glob("*.txt"))]
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise ModelError(f"tiny-model: the tokenizer corpus {CORPUS_DIR} is empty or missing (broken install?).")
    return texts


@lru_cache(maxsize=16)
def _trained_tokenizer_json(family: str, vocab_size: int) -> str:
    """Train the byte-level BPE of a family once per process; returns its JSON (cache-safe, immutable)."""
    fam = TOKENIZERS[family]
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
    order is deterministic either way (tests/test_tiny_model.py checks it with 4 threads).
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
    raw = Tokenizer.from_str(_trained_tokenizer_json(family.name, vocab_size))
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


# ---------------------------------------------------------------------------------------------
# chat template


def chat_template_for(template_name: str) -> str:
    """The family's chat template, exported from tunekit's template registry (errors surface)."""
    from tunekit.data.templates import get_template

    return get_template(template_name).chat_template_jinja()


# ---------------------------------------------------------------------------------------------
# the builder


def build_tiny_model(
    out_dir: str | os.PathLike,
    like: str | os.PathLike | None = "qwen2",
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    intermediate_size: int | None = None,
    num_heads: int = 4,
    num_kv_heads: int | None = 2,
    vocab_size: int | None = None,
    max_position_embeddings: int = DEFAULT_MAX_POSITIONS,
) -> Path:
    """Write a tiny random model + tokenizer of ``like``'s family into ``out_dir``; returns the folder.

    ``vocab_size`` is the BPE target and the model's embedding rows (padded up to it when the corpus
    gives fewer tokens); by default the embeddings are the tokenizer's length rounded up to 64.
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    resolved = resolve_like(like)
    fam = resolved.tokenizer
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = build_tokenizer(
        fam, vocab_size or DEFAULT_VOCAB_SIZE, chat_template_for(fam.template), max_position_embeddings
    )
    n_tok = len(tokenizer)
    model_vocab = max(vocab_size, n_tok) if vocab_size else -(-n_tok // 64) * 64
    tokenizer.save_pretrained(out)
    _set_tokenizer_class(out, fam.tokenizer_class)

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (*fam.special, *fam.extra)}
    cfg = shrink_config(
        resolved.config,
        hidden_size=hidden_size,
        num_layers=num_layers,
        intermediate_size=intermediate_size,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        vocab_size=model_vocab,
        max_position_embeddings=max_position_embeddings,
    )
    cfg.update(
        bos_token_id=ids.get(fam.bos) if fam.bos else None,
        eos_token_id=ids[fam.eos],
        pad_token_id=ids.get(fam.pad) if fam.pad else None,
    )
    config = _make_config(cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.config.architectures = [type(model).__name__]
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=[ids[t] for t in fam.generation_eos],
        pad_token_id=config.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(out)
    check_tokenizer_roundtrip(out, tokenizer)
    return out


def prepare_out_dir(out_dir: str | os.PathLike, overwrite: bool) -> None:
    """``tunekit tiny-model``'s output folder: missing or empty, or (``overwrite``) a model folder whose contents are
    removed first, so no file of another model stays next to the new one. Anything else is refused, nothing touched."""
    import shutil

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ModelError(f"tiny-model: {out} is a file, not a folder: choose a folder to write the model into.")
    entries = sorted(out.iterdir()) if out.is_dir() else []
    if not entries:
        return
    if not overwrite:
        raise ModelError(
            f"tiny-model: {out} exists and is not empty ({len(entries)} entries, e.g. {entries[0].name}): "
            f"choose a new or empty folder, or pass --overwrite to replace the model in it."
        )
    if not (out / "config.json").is_file():
        raise ModelError(
            f"tiny-model: --overwrite replaces a model folder (one with config.json), and {out} has none: "
            f"choose a new or empty folder; nothing was removed."
        )
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def describe(folder: str | os.PathLike) -> str:
    """A few lines about a built folder (architecture, sizes, special tokens), for the CLI."""
    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    tcfg = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    weights = folder / "model.safetensors"
    lines = [
        f"wrote {folder}",
        f"  architecture  {', '.join(cfg.get('architectures') or [])} (model_type {cfg.get('model_type')})",
        f"  sizes         hidden {cfg.get('hidden_size')}, layers {cfg.get('num_hidden_layers')}, "
        f"heads {cfg.get('num_attention_heads')}/{cfg.get('num_key_value_heads')}, vocab {cfg.get('vocab_size')}",
        f"  tokenizer     {tcfg.get('tokenizer_class')}: bos {tcfg.get('bos_token')}, eos {tcfg.get('eos_token')}, "
        f"pad {tcfg.get('pad_token')}",
    ]
    if weights.is_file():
        lines.append(f"  weights       {weights.stat().st_size / 2**20:.2f} MiB")
    return "\n".join(lines)


def _set_tokenizer_class(out: Path, name: str) -> None:
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
            f"({got[:12]}... vs {want[:12]}...); this family's tokenizer setup needs fixing in tunekit.model.tiny."
        )
