"""``tunekit expand-blocks MODEL OUT --num-expand N``: LLaMA Pro block expansion (see tunekit/model/expand.py)."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

from tunekit.model.expand import expand_blocks
from tunekit.model.loader import model_path


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tunekit expand-blocks",
        description="Interleave N zero-output copies of decoder blocks into a model (LLaMA Pro): the expanded model "
        "gives the same outputs; train only the new blocks with use_llama_pro: true, finetuning_type: freeze, "
        "freeze_trainable_layers: N.",
    )
    p.add_argument("model", help="model folder to expand")
    p.add_argument("out_dir", help="folder for the expanded model (new or empty)")
    p.add_argument("--num-expand", type=int, required=True, help="blocks to add; must divide the number of layers")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    # a folder that is not there (or holds no model) is named now, not handed to the hub client as a repo id
    out = expand_blocks(model_path(SimpleNamespace(model=args.model), "model"), args.out_dir, args.num_expand)
    print(
        f"expanded model written to {out} ({args.num_expand} blocks added); train it with use_llama_pro: true, "
        f"finetuning_type: freeze, freeze_trainable_layers: {args.num_expand}"
    )
    return 0
