"""Environment variables, read one way everywhere: tunekit's on/off switches, its cache folder, and the
rank / world size a launcher (torchrun, deepspeed) sets.

Cheap to import (no third-party modules): the CLI's help path and the start-up switches use it. Its errors are keyed
(:class:`EnvSaid`, templates in :data:`ENV_ENGLISH`, part of :data:`tunekit.config.problem_texts.ENGLISH`), so the web
board says a job's bad ``NNODES`` in Chinese too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from .errors import ConfigError, EnvironmentProblem
from .messages import Keyed

FALSE = ("0", "false", "no", "off")
# how many processes run where, as torchrun (and tunekit train's own launch) reads it: Ray places its workers itself
PLACEMENT_VARIABLES = ("NPROC_PER_NODE", "NNODES", "NODE_RANK")

# key → the English template of an error about an environment variable (the Chinese: webui/problems_zh_run.py). A
# value in quotes is given as its repr (a str).
ENV_ENGLISH: dict[str, str] = {
    "env_not_whole_number": "The environment variable {name}={raw} is not a whole number; unset it or let the "
    "launcher (torchrun, deepspeed) set it.",
    "env_nnodes_not_whole_number": "NNODES={raw} is not a whole number.",
    "env_nnodes_below_one": "NNODES={value} must be at least 1.",
}


class EnvSaid(Keyed):
    """An error about an environment variable: ``ENV_ENGLISH[key]`` filled with ``values`` (env.py is below config,
    so it cannot use :class:`~tunekit.config.problems.Said`; the keys are the same table's)."""

    ENGLISH = ENV_ENGLISH
    WHERE = "tunekit.env.ENV_ENGLISH"


# Set by the web board for its jobs: their ``tunekit`` restores Python's Ctrl+C handler, because a board started in
# the background (``nohup tunekit webui &`` from a script) hands its children SIGINT ignored, and the board's Stop
# button (a SIGINT to the job's process group) would then do nothing.
RESET_SIGINT_ENV = "TUNEKIT_RESET_SIGINT"

# Set by the web board for its jobs: the file a failing ``tunekit`` writes its keyed error to (keys and values, as
# JSON), so the board says the job's reason in the page's language (``cli/verbs.py``, ``webui/problems_zh.py``).
ERROR_FILE_ENV = "TUNEKIT_ERROR_FILE"


def restore_sigint_if_asked() -> None:
    """Python installs its KeyboardInterrupt handler only when SIGINT was not ignored at start-up: install it."""
    if env_flag(RESET_SIGINT_ENV, False):
        import signal

        signal.signal(signal.SIGINT, signal.default_int_handler)


def env_flag(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """A switch such as ``TUNEKIT_GC_PAUSE=0``, ``FORCE_TORCHRUN=1`` or ``HF_HUB_OFFLINE=1``: unset or empty gives
    ``default``; 0/false/no/off (any case) is off, anything else on. ``environ``: a launcher's mapping (os.environ)."""
    value = (os.environ if environ is None else environ).get(name, "").strip().lower()
    if not value:
        return default
    return value not in FALSE


def cache_dir(*parts: str) -> Path:
    """``$TUNEKIT_CACHE`` (default ``~/.cache/tunekit``), joined with ``parts``."""
    root = os.environ.get("TUNEKIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tunekit")
    return Path(root, *parts)


def launcher_int(name: str) -> int | None:
    """``RANK``, ``LOCAL_RANK`` or ``WORLD_SIZE`` as a launcher set it; None when unset or empty.

    A value that is not a whole number raises :class:`~tunekit.errors.EnvironmentProblem` naming it.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise EnvironmentProblem(EnvSaid("env_not_whole_number", name=name, raw=repr(raw))) from None


def env_rank() -> int:
    """Global rank from ``RANK`` (0 without a launcher)."""
    return launcher_int("RANK") or 0


def env_local_rank() -> int:
    """Rank on this machine from ``LOCAL_RANK`` (0 without a launcher)."""
    return launcher_int("LOCAL_RANK") or 0


def env_world_size() -> int | None:
    """Processes in the job from ``WORLD_SIZE``; None without a launcher."""
    return launcher_int("WORLD_SIZE")


def env_nodes(environ: Mapping[str, str] | None = None) -> int:
    """Machines in the job from ``NNODES`` (torchrun's and LLaMA-Factory's), 1 when unset or empty.

    A value that is not a whole number of at least 1 raises :class:`~tunekit.errors.ConfigError` naming it.
    """
    raw = (os.environ if environ is None else environ).get("NNODES", "").strip()
    if not raw:
        return 1
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(EnvSaid("env_nnodes_not_whole_number", raw=repr(raw))) from None
    if value < 1:
        raise ConfigError(EnvSaid("env_nnodes_below_one", value=value))
    return value
