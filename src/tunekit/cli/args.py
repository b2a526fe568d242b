"""The arguments of the verbs that read a config: ``[CONFIG.yaml] [key=value ...] [--key value ...]``, plus a verb's
own ``--flag VALUE`` options taken out first."""

from __future__ import annotations

from collections.abc import Iterable

from tunekit.config import Config, load_config
from tunekit.config.problems import Said
from tunekit.errors import ConfigError


def split_config_path(argv: list[str]) -> tuple[str | None, list[str]]:
    """``(config file or None, the options after it)``: a first argument that is neither a flag nor ``key=value``."""
    if argv and not argv[0].startswith("-") and "=" not in argv[0]:
        return argv[0], argv[1:]
    return None, argv


def pop_flags(argv: list[str], names: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """Take ``--name VALUE`` / ``--name=VALUE`` for the given names out of argv (the rest are config options)."""
    names = set(names)
    found: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        key = arg.split("=", 1)[0]
        if key in names:
            if "=" in arg:
                found[key] = arg.split("=", 1)[1]
            elif i + 1 < len(argv):
                i += 1
                found[key] = argv[i]
            else:
                raise ConfigError(Said("cli_flag_needs_value", flag=key))
        else:
            rest.append(arg)
        i += 1
    return found, rest


def config_and_flags(argv: list[str], names: Iterable[str]) -> tuple[dict[str, str], Config]:
    """The verb's own ``--flags`` and the config the rest of argv names (``CONFIG.yaml key=value ...``)."""
    flags, argv = pop_flags(argv, names)
    path, rest = split_config_path(argv)
    return flags, load_config(path, rest)
