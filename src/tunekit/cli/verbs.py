"""The verb table and running a verb in this process (``tunekit <verb> ...``).

Add a verb by adding one line to :data:`VERBS`: ``name: (module, one-line help)``. The module has
``main(argv: list[str]) -> int``. :mod:`tunekit.cli.main` (the program) runs verbs through :func:`dispatch`.
"""

from __future__ import annotations

import atexit
import contextlib
import difflib
import importlib
import json
import os
import sys
import threading
from pathlib import Path

from tunekit import __version__
from tunekit.env import ERROR_FILE_ENV, env_flag
from tunekit.errors import TunekitError

VERBS: dict[str, tuple[str, str]] = {
    "train": ("tunekit.cli.train_cmd", "Train a model (any stage) from a config file and/or key=value options."),
    "env": ("tunekit.cli.env_cmd", "Print versions of python, torch and the HF stack, and the devices seen."),
    "plan": (
        "tunekit.cli.plan_cmd",
        "Before training: steps, memory per device by component, time, and a set-up that fits.",
    ),
    "data": ("tunekit.cli.data_cmd", "data stats: token lengths, truncation, recommended cutoff_len, padding waste."),
    "templates": ("tunekit.cli.templates_cmd", "List the chat templates, or render a sample with one."),
    "tiny-model": ("tunekit.cli.tiny_model_cmd", "Write a small random-weight model + tokenizer of a given family."),
    "expand-blocks": (
        "tunekit.cli.expand_blocks_cmd",
        "LLaMA Pro: interleave zero-output copies of decoder blocks into a model (same outputs).",
    ),
    "export": (
        "tunekit.cli.export_cmd",
        "Merge adapters / consolidate a checkpoint into a sharded HF folder with the chat template "
        "(4/8-bit optional).",
    ),
    "verify": (
        "tunekit.cli.verify_cmd",
        "Check an exported folder with plain transformers: index, shapes, template parity, generation, merge logits.",
    ),
    "zero-to-fp32": (
        "tunekit.cli.zero_cmd",
        "Consolidate a DeepSpeed ZeRO checkpoint (global_step*/) into a normal fp32 model folder.",
    ),
    "chat": (
        "tunekit.cli.chat_cmd",
        "Chat in the terminal with streaming and history (or answer --prompt / stdin for scripts).",
    ),
    "api": (
        "tunekit.cli.api_cmd",
        "Serve an OpenAI-compatible API (/v1/chat/completions, streaming, tools) on API_HOST:API_PORT.",
    ),
    "predict": (
        "tunekit.cli.predict_cmd",
        "Generate for a dataset in batches and score it: BLEU-4, ROUGE-1/2/L, exact match.",
    ),
    "webui": (
        "tunekit.cli.webui_cmd",
        "Serve the web board (127.0.0.1:7860): options, plan, training with live loss, chat, export.",
    ),
}

USAGE = """usage: tunekit <command> [CONFIG.yaml] [key=value ...] [--key value ...]

Fine-tune large language models: plan before you train, exact templates and masks, runs that resume.

commands:
{verbs}

Run `tunekit <command> --help` for a command's options. Set TUNEKIT_DEBUG=1 to see tracebacks.
"""


def print_usage(stream=sys.stdout) -> None:
    width = max(len(v) for v in VERBS)
    lines = "\n".join(f"  {name:<{width}}  {help_}" for name, (_, help_) in VERBS.items())
    stream.write(USAGE.format(verbs=lines))


def dispatch(argv: list[str]) -> int:
    """Parse the verb and run it in this process."""
    # The deepspeed launcher (and torch.distributed.launch) add --local_rank=N; LOCAL_RANK is in the environment too.
    argv = [a for a in argv if not a.startswith(("--local_rank=", "--local-rank="))]
    if not argv or argv[0] in ("-h", "--help", "help"):
        print_usage()
        return 0
    if argv[0] in ("-V", "--version", "version"):
        print(f"tunekit {__version__}")
        return 0
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        close = difflib.get_close_matches(verb, VERBS, n=2)
        sys.stderr.write(
            f"error: unknown command '{verb}'." + (f" Did you mean: {', '.join(close)}?" if close else "") + "\n"
        )
        print_usage(sys.stderr)
        return 2
    return run_verb(VERBS[verb][0], rest)


def run_verb(module_name: str, argv: list[str]) -> int:
    """Import the verb's module (the one place a verb is imported: ``tunekit --help`` imports none) and run it."""
    debug = env_flag("TUNEKIT_DEBUG", False)
    try:
        module = importlib.import_module(module_name)
        return int(module.main(argv) or 0)
    except TunekitError as exc:
        _record_rank_error(exc)
        record_keyed_error(exc)
        if debug:
            raise
        sys.stderr.write(f"error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as exc:
        _record_rank_error(exc)
        raise


def finish_process() -> None:
    """What a normal exit does that matters: join non-daemon threads, run atexit handlers, flush stdio."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # CPython's own exit step (documented in the atexit module's source), run explicitly
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def record_keyed_error(exc: TunekitError) -> None:
    """For the web board (``$TUNEKIT_ERROR_FILE`` set): the error's keyed messages (its problems', else its own) as
    JSON, so that the board says the job's reason in the page's language; nothing for a message made as plain text."""
    path = os.environ.get(ERROR_FILE_ENV)
    problems = getattr(exc, "problems", ())
    messages = [p.message for p in problems] if problems else list(exc.args[:1])
    if path and messages and all(hasattr(m, "to_json") for m in messages):  # tunekit.messages.Keyed, not imported
        with contextlib.suppress(OSError):
            Path(path).write_text(json.dumps([m.to_json() for m in messages], ensure_ascii=False), encoding="utf-8")


def _record_rank_error(exc: BaseException) -> None:
    """Under torchrun, hand this rank's error to the launcher's failure summary."""
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):
        # only under torchrun: `tunekit --help` and an unknown verb import nothing but this module
        from tunekit.train.engines.distributed import record_rank_error

        record_rank_error(exc)
