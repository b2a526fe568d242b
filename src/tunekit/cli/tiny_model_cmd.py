"""``tunekit tiny-model OUT_DIR [--like FAMILY|CONFIG] ...``: a small random model for tests and demos."""

from __future__ import annotations

import argparse
from pathlib import Path

from tunekit.errors import ModelError
from tunekit.tiny.text import build_tiny_model, describe, prepare_out_dir, resolve_like
from tunekit.tiny.vlm import build_tiny_vlm, describe_vlm, is_vlm_family  # every vision-language family

FAMILY_HELP = (
    "qwen2, qwen3, llama, mistral, gemma, gemma2, gemma3_text, qwen3_moe, qwen2_moe, mixtral, glm4, glm; "
    "vision-language: qwen2-vl, qwen2.5-vl, qwen3-vl, llava, llava-next, llava-next-mistral, llava-next-llama3, "
    "gemma3, smolvlm, idefics3; audio: qwen2-audio"
)


def _count(text: str) -> int:
    """A size of the model: a whole number >= 1 (0 or less built a broken model or failed deep in transformers)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tunekit tiny-model",
        description="Write a small random-weight model with a trained byte-level BPE tokenizer and the family's "
        "chat template. The same arguments give identical files on every run. Nothing is downloaded.",
    )
    p.add_argument(
        "out_dir", help="folder to write (created if missing; an existing non-empty one only with --overwrite)"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the contents of OUT_DIR when it already holds a model (config.json)",
    )
    p.add_argument(
        "--like",
        default="qwen2",
        help=f"family ({FAMILY_HELP}), a model name such as qwen2.5-7b / llama-3.1-8b / qwen3-30b-a3b (a "
        "name whose architecture tunekit cannot build is refused, never replaced), or a path to a "
        "config.json or model folder whose architecture is kept and shrunk (default: qwen2)",
    )
    p.add_argument("--seed", type=int, default=0, help="weight init seed (default: 0)")
    p.add_argument("--hidden-size", type=_count, default=64)
    p.add_argument("--num-layers", type=_count, default=2)
    p.add_argument("--intermediate-size", type=_count, default=None, help="default: 4 x hidden size")
    p.add_argument("--num-heads", type=_count, default=4)
    p.add_argument("--num-kv-heads", type=_count, default=2)
    p.add_argument(
        "--vocab-size",
        type=_count,
        default=None,
        help="BPE vocabulary target and embedding rows (default: what the corpus gives, ~1.8k, rounded up to 64)",
    )
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if not is_vlm_family(args.like):
        resolve_like(args.like)  # a name tunekit cannot build is refused before the folder is touched
        source, out = Path(args.like).expanduser().resolve(), Path(args.out_dir).expanduser().resolve()
        if args.overwrite and (source == out or out in source.parents):
            raise ModelError(
                f"tiny-model: --like {args.like} is inside {args.out_dir}, which --overwrite would empty "
                f"first: write the tiny model into another folder."
            )
    prepare_out_dir(args.out_dir, args.overwrite)
    if is_vlm_family(args.like):  # weights + tokenizer with the family's vision tokens + image processor
        if args.intermediate_size is not None:
            print("tiny-model: --intermediate-size is ignored for vision-language families (4 x hidden size)")
        path = build_tiny_vlm(
            args.out_dir,
            like=args.like,
            seed=args.seed,
            hidden_size=args.hidden_size,
            num_layers=args.num_layers,
            num_heads=args.num_heads,
            num_kv_heads=args.num_kv_heads,
            vocab_size=args.vocab_size,
        )
        print(describe_vlm(path))
        return 0
    path = build_tiny_model(
        args.out_dir,
        like=args.like,
        seed=args.seed,
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        intermediate_size=args.intermediate_size,
        num_heads=args.num_heads,
        num_kv_heads=args.num_kv_heads,
        vocab_size=args.vocab_size,
    )
    print(describe(path))
    return 0
