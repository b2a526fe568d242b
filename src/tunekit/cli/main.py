"""``tunekit <verb> ...``: the program. A tiny dispatcher that imports a verb's module only when it runs.

The verb table and in-process dispatch live in :mod:`tunekit.cli.verbs`; this module adds the fast exit.
"""

from __future__ import annotations

import os
import sys

from tunekit.env import env_flag, restore_sigint_if_asked

from .verbs import USAGE, VERBS, dispatch, finish_process, print_usage, run_verb  # noqa: F401 - the program's names


def main(argv: list[str] | None = None) -> int:
    """The ``tunekit`` program when ``argv`` is None (it may then end the process, see :func:`exit_now`);
    called with a list, a plain function that returns the exit code."""
    if argv is None:
        restore_sigint_if_asked()
        return exit_now(dispatch(sys.argv[1:]))
    return dispatch(list(argv))


def exit_now(code: int) -> int:
    """End the program without the interpreter's teardown once torch & co. are loaded.

    After a verb has finished, CPython's finalisation of the ~10k modules that torch, transformers, peft
    and datasets import takes 1-3 s here (0.9 s for torch alone) and does nothing a user needs: files are
    written and closed, the process group is left. So, as a normal exit would: wait for the non-daemon
    threads, run the atexit handlers (logging, trackers such as wandb/swanlab flush there), flush stdout and
    stderr; then ``os._exit``. Without torch loaded (help, templates ...) it returns ``code`` for a normal
    exit. ``TUNEKIT_SLOW_EXIT=1`` keeps the normal teardown.
    """
    if "torch" not in sys.modules or env_flag("TUNEKIT_SLOW_EXIT", False):
        return code
    finish_process()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
