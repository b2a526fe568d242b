"""Runs llama.cpp's ``convert_hf_to_gguf.py`` in a child process (``python -m tunekit.export.gguf_runner CONVERTER_DIR
ARGS...``) with one documented override of its BPE pre-tokenizer detection; and llama.cpp's quantizer
(``... gguf_runner quantize SOURCE TARGET FTYPE``), so that export shows their logs only when they fail.

The converter names a BPE tokenizer's pre-tokenizer (``tokenizer.ggml.pre``, which tells llama.cpp how to split text
before BPE) by hashing the ids of a fixed text, from a table of known checkpoints (``get_vocab_base_pre``). Real
Qwen2 / Qwen2.5 / Qwen3, Llama 3 and GLM-4 tokenizers are in that table and are converted exactly as llama.cpp converts
them: the override is not reached. A tokenizer not in the table (tunekit's tiny test tokenizers, trained on a small
corpus, hash differently by construction) makes the converter raise; only then is the pre-tokenizer chosen from
``tokenizer.json`` itself: when its pre-tokenizer is exactly a ``Split`` by one of the regexes below followed by a
byte-level step without a regex of its own, the name is the llama.cpp pre-tokenizer that splits by that regex
(``src/llama-vocab.cpp`` keeps each one's original regex beside its adapted form). Anything else still fails with the
converter's message. ``tunekit verify`` then checks llama.cpp's ids equal training's on chat-templated text.

The hook is ``conversion.base.TextModel.get_vocab_base_pre`` of llama-cpp-python 0.3.36's llama.cpp (pinned in
constraints.txt; ``tests/export/test_gguf_export.py`` checks the name still exists in the converter used).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path

#: tokenizer.json split regex -> the llama.cpp pre-tokenizer with that regex (its "original regex from tokenizer.json")
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
_REST = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
KNOWN_SPLITS = {
    _CONTRACTIONS + r"\p{N}" + _REST: "qwen2",  # one digit per piece (Qwen2 / 2.5 / 3)
    _CONTRACTIONS + r"\p{N}{1,3}" + _REST: "llama-bpe",  # up to three digits (Llama 3)
}
HOOK = ("conversion.base", "TextModel", "get_vocab_base_pre")


def pre_tokenizer_from_json(model_dir: Path) -> str | None:
    """The llama.cpp pre-tokenizer name for ``model_dir/tokenizer.json`` when its pipeline is a known regex split
    + byte-level (see the module docstring), else None."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    normalizer, pre = data.get("normalizer"), data.get("pre_tokenizer") or {}
    if normalizer not in (None, {"type": "NFC"}) or pre.get("type") != "Sequence":
        return None
    steps = pre.get("pretokenizers") or []
    if len(steps) != 2:
        return None
    split, byte_level = steps
    regex = (split.get("pattern") or {}).get("Regex")
    if split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert"):
        return None
    if byte_level.get("type") != "ByteLevel" or byte_level.get("use_regex") or byte_level.get("add_prefix_space"):
        return None
    return KNOWN_SPLITS.get(regex)


def install_override(converter_dir: Path) -> None:
    """Wrap the converter's pre-tokenizer detection: its own answer first, tokenizer.json's regex when it has none."""
    sys.path[:0] = [str(converter_dir), str(converter_dir / "gguf-py")]  # the converter's own gguf-py, as it does
    module = importlib.import_module(HOOK[0])
    cls = getattr(module, HOOK[1])
    detect = getattr(cls, HOOK[2])

    def detect_or_read_regex(self, tokenizer):
        try:
            return detect(self, tokenizer)
        except NotImplementedError:
            name = pre_tokenizer_from_json(self.dir_model)
            if name is None:
                raise
            module.logger.warning(f"tunekit: pre-tokenizer '{name}' chosen from tokenizer.json's split regex")
            return name

    setattr(cls, HOOK[2], detect_or_read_regex)


def quantize(source: str, target: str, ftype: int) -> int:
    """``llama_model_quantize`` (what ``llama-quantize`` runs): ``source`` to ``target`` as llama_ftype ``ftype``."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = max(1, os.cpu_count() or 1)
    code = llama_cpp.llama_model_quantize(source.encode(), target.encode(), ctypes.byref(params))
    print(f"llama_model_quantize returned {code}")
    return 0 if code == 0 else 1


def main(argv: list[str]) -> int:
    if argv[0] == "quantize":  # gguf_runner quantize SOURCE TARGET FTYPE
        return quantize(argv[1], argv[2], int(argv[3]))
    converter_dir, args = Path(argv[0]), argv[1:]
    install_override(converter_dir)
    import convert_hf_to_gguf

    sys.argv = [str(converter_dir / "convert_hf_to_gguf.py"), *args]
    convert_hf_to_gguf.main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
