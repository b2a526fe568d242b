"""Random-weight models with the exact architecture of published checkpoints, built locally (no download).

The config fields are those of the published ``config.json`` files (Hugging Face ``Qwen/Qwen2.5-*``, base
models): every size, GQA, tied embeddings, RoPE theta, RMSNorm epsilon, sliding-window flags. The embedding
matrix keeps the published number of rows (151,936 for Qwen2.5-0.5B/1.5B, 152,064 for 7B) even though the
locally trained tokenizer has a much smaller real vocabulary: the rows it never uses still cost what they cost
in the LM head, the loss, the gradients and the optimizer.

The tokenizer is a byte-level BPE with Qwen2's pre-tokenizer and ChatML special tokens (``<|endoftext|>``,
``<|im_start|>``, ``<|im_end|>``), so tunekit's and LLaMA-Factory's ``qwen`` template both work on it. It is
trained on LLaMA-Factory's demo data when that folder is given (the text the benchmarks train on, as
``../shared/bench/llamafactory-baseline/make_tiny_model.py`` does), else on tunekit's shipped corpus.

Needs torch, transformers, tokenizers and tunekit (``tunekit.tiny.tokenizer`` for the tokenizer conventions).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # deterministic BPE merges

# Published config.json fields (Qwen/Qwen2.5-0.5B, -1.5B, -7B on the Hugging Face hub, base models).
_QWEN25_COMMON = dict(
    model_type="qwen2",
    hidden_act="silu",
    rms_norm_eps=1e-6,
    rope_theta=1_000_000.0,
    attention_dropout=0.0,
    initializer_range=0.02,
    use_sliding_window=False,
    use_cache=True,
)
REAL_SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": {
        **_QWEN25_COMMON,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 32768,
        "max_window_layers": 24,
        "sliding_window": 32768,
    },
    "qwen2.5-1.5b": {
        **_QWEN25_COMMON,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 131072,
        "max_window_layers": 21,
        "sliding_window": 131072,
    },
    "qwen2.5-7b": {
        **_QWEN25_COMMON,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "max_position_embeddings": 131072,
        "max_window_layers": 28,
        "sliding_window": 131072,
    },
    # A few-M-parameter member of the same family (same flags, GQA 2:1, tied), for dry runs in seconds.
    "tiny": {
        **_QWEN25_COMMON,
        "hidden_size": 128,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 8192,
        "tie_word_embeddings": True,
        "max_position_embeddings": 8192,
        "max_window_layers": 2,
        "sliding_window": 8192,
    },
}
DEMO_FILES = ("alpaca_en_demo.json", "identity.json", "dpo_en_demo.json", "kto_en_demo.json")
BPE_VOCAB = 8192  # the tokenizer's real vocabulary (target; the BPE stops earlier on a small corpus)


def _strings(obj):
    if isinstance(obj, str):
        if obj.strip():
            yield obj
    elif isinstance(obj, list):
        for item in obj:
            yield from _strings(item)
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _strings(value)


def corpus(data_dir: Path | None) -> tuple[list[str], str]:
    """Texts to train the BPE on: the demo data in ``data_dir`` if present, else tunekit's shipped corpus."""
    if data_dir is not None:
        texts: list[str] = []
        for name in DEMO_FILES:
            path = Path(data_dir) / name
            if path.is_file():
                texts.extend(_strings(json.loads(path.read_text(encoding="utf-8"))))
        if texts:
            return texts, f"demo data in {data_dir}"
    from tunekit.tiny.tokenizer import corpus_texts

    return corpus_texts(), "tunekit's shipped corpus"


def build_qwen_tokenizer(texts: list[str], vocab_size: int = BPE_VOCAB, max_length: int = 32768):
    """A Qwen2-style tokenizer (tunekit.tiny.tokenizer's qwen conventions) trained on ``texts``."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    from tunekit.tiny.tokenizer import TOKENIZERS, chat_template_for, train_bpe

    fam = TOKENIZERS["qwen"]
    tok = train_bpe(texts, list(fam.special) + list(fam.extra), vocab_size)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in fam.extra])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=fam.eos,
        pad_token=fam.pad,
        bos_token=None,
        unk_token=None,
        model_max_length=max_length,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = chat_template_for(fam.template)
    return tokenizer, fam


def build_random_model(
    out_dir: Path,
    shape: str,
    *,
    data_dir: Path | None = None,
    dtype: str = "float32",
    device: str = "cpu",
    seed: int = 0,
    layers: int | None = None,
) -> Path:
    """Write ``shape``'s architecture with random weights + a local tokenizer into ``out_dir`` (skipped if done).

    ``dtype`` is the dtype of the saved weights (float32 for the CPU benchmarks, bfloat16 for the GPU kit);
    ``device`` is where the weights are initialised (cuda: seconds for a 7B model instead of minutes).
    ``layers``: that many decoder layers instead of the published count (every other field unchanged), for
    measurements that separate per-layer from per-model memory at a fraction of the cost.
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from tunekit.tiny.config import make_config
    from tunekit.tiny.tokenizer import check_tokenizer_roundtrip

    out = Path(out_dir)
    marker = out / ".built.json"
    fields = dict(REAL_SHAPES[shape])
    if layers is not None:
        fields.update(num_hidden_layers=layers, max_window_layers=min(layers, fields["max_window_layers"]))
    want = {
        "shape": shape,
        "config": fields,
        "dtype": dtype,
        "seed": seed,
        "data_dir": str(data_dir) if data_dir else None,
    }
    if marker.is_file() and json.loads(marker.read_text()) == want:
        return out
    out.mkdir(parents=True, exist_ok=True)
    texts, _source = corpus(data_dir)
    tokenizer, fam = build_qwen_tokenizer(texts, max_length=min(fields["max_position_embeddings"], 32768))
    if len(tokenizer) > fields["vocab_size"]:
        raise ValueError(
            f"{shape}: the tokenizer has {len(tokenizer)} tokens, more than vocab_size {fields['vocab_size']}"
        )
    tokenizer.save_pretrained(out)
    tcfg_path = out / "tokenizer_config.json"
    tcfg = json.loads(tcfg_path.read_text(encoding="utf-8"))
    tcfg["tokenizer_class"] = fam.tokenizer_class  # Qwen2Tokenizer, as the real checkpoints declare
    tcfg_path.write_text(json.dumps(tcfg, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in fam.special}
    fields.update(bos_token_id=None, eos_token_id=ids[fam.eos], pad_token_id=ids[fam.pad])
    config = make_config(fields)
    torch_dtype = getattr(torch, dtype)
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    model.config.architectures = [type(model).__name__]
    model.generation_config = GenerationConfig(
        eos_token_id=[ids[t] for t in fam.generation_eos], pad_token_id=config.pad_token_id, do_sample=False
    )
    model.save_pretrained(out)
    del model
    check_tokenizer_roundtrip(out, tokenizer)
    marker.write_text(json.dumps(want))
    return out


def count_params(shape: str) -> dict[str, int]:
    """Parameter counts of ``shape`` from a meta-device build (no memory)."""
    import torch
    from transformers import AutoModelForCausalLM

    from tunekit.tiny.config import make_config

    config = make_config(dict(REAL_SHAPES[shape]))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())  # tied: counted once
    embed = model.get_input_embeddings().weight.numel()
    return {"total": total, "embedding": embed}
