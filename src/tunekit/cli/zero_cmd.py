"""``tunekit zero-to-fp32 CHECKPOINT_DIR OUT_DIR``: consolidate a DeepSpeed ZeRO checkpoint into a normal model
folder."""

from __future__ import annotations

import sys

from tunekit.errors import ConfigError
from tunekit.export.zero import consolidate_zero

from .args import pop_flags

HELP = """usage: tunekit zero-to-fp32 CHECKPOINT_DIR OUT_DIR [--max-shard-size 5GB] [--trust-pickle]

Consolidate the sharded ZeRO-2/3 states of CHECKPOINT_DIR (global_step*/ with *_model_states.pt, as
DeepSpeed saves them) into fp32 safetensors in OUT_DIR with DeepSpeed's own zero_to_fp32 merge, and copy
config.json and the tokenizer files next to them. `tunekit export` does this by itself when
model_name_or_path is such a checkpoint.

The .pt files are read without running code from them (torch weights_only loading plus the few DeepSpeed
types a ZeRO checkpoint holds); a file that needs anything else is refused, naming it.
  --trust-pickle   read such files with a full unpickler: runs code from the checkpoint, so only for
                   checkpoints whose source you trust
"""


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(HELP)
        return 0
    trust = "--trust-pickle" in argv
    flags, rest = pop_flags([a for a in argv if a != "--trust-pickle"], ("--max-shard-size",))
    if len(rest) != 2:
        raise ConfigError("usage: tunekit zero-to-fp32 CHECKPOINT_DIR OUT_DIR [--max-shard-size 5GB] [--trust-pickle]")
    out = consolidate_zero(rest[0], rest[1], max_shard_size=flags.get("--max-shard-size", "5GB"), trust_pickle=trust)
    print(f"consolidated {rest[0]} into {out}")
    return 0
