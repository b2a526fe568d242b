"""``tunekit zero-to-fp32 CHECKPOINT_DIR OUT_DIR``: consolidate a DeepSpeed ZeRO checkpoint into a normal model folder."""

from __future__ import annotations

import sys

HELP = """usage: tunekit zero-to-fp32 CHECKPOINT_DIR OUT_DIR [--max-shard-size 5GB]

Consolidate the sharded ZeRO-2/3 states of CHECKPOINT_DIR (global_step*/ with *_model_states.pt, as
DeepSpeed saves them) into fp32 safetensors in OUT_DIR with DeepSpeed's own zero_to_fp32, and copy
config.json and the tokenizer files next to them. `tunekit export` does this by itself when
model_name_or_path is such a checkpoint.
"""


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(HELP)
        return 0
    from tunekit.errors import ConfigError

    from .chat_cmd import pop_flags

    flags, rest = pop_flags(argv, ("--max-shard-size",))
    if len(rest) != 2:
        raise ConfigError("usage: tunekit zero-to-fp32 CHECKPOINT_DIR OUT_DIR [--max-shard-size 5GB]")
    from tunekit.export.zero import consolidate_zero

    out = consolidate_zero(rest[0], rest[1], max_shard_size=flags.get("--max-shard-size", "5GB"))
    print(f"consolidated {rest[0]} into {out}")
    return 0
