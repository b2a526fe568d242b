"""``tunekit train CONFIG.yaml [key=value ...] [--key value ...]``."""

from __future__ import annotations

import sys

from .options_help import format_options_help

HELP = """usage: tunekit train [CONFIG.yaml|.json] [key=value ...] [--key value ...]

Train a model. Options come from the config file, then the command line (later wins).
Option names follow LLaMA-Factory and Hugging Face TrainingArguments; LLaMA-Factory v1 configs are read too.
--print-config prints the options the run would get (a v1 config's mapping as comments) and trains nothing.
"""


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(HELP + format_options_help())
        return 0
    if not argv:
        sys.stderr.write(
            "error: tunekit train needs a config file or options, e.g. `tunekit train examples/quickstart.yaml` "
            "or `tunekit train --model_name_or_path DIR --dataset NAME ...`; `tunekit train --help` lists every "
            "option.\n"
        )
        return 2
    from .args import split_config_path  # the config schema only now: `tunekit train --help` must not import it

    path, rest = split_config_path([a for a in argv if a != "--print-config"])
    if "--print-config" in argv:  # the options the run gets, a LLaMA-Factory v1 file's mapping as comments; no run
        from tunekit.config.loader import config_text, load_config

        sys.stdout.write(config_text(load_config(path, rest)))
        return 0
    # The run's modules only now: `tunekit train --help` imports neither the config schema nor pydantic (its target,
    # benchmarks/help_time.py: <= 0.3 s, is met with the help text cached by options_help).
    from tunekit.train.engines.launcher import die_with_parent

    die_with_parent()  # a rank of tunekit's own torchrun ends with it, even when torchrun is SIGKILLed: set it first
    from tunekit.flow import train_command  # the CPU-host machinery starts there, once the run's device is known

    return train_command(argv, path, rest)  # the one flow: tunekit/flow.py
