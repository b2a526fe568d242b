"""``tunekit <verb> ...``: a tiny dispatcher that imports a verb's module only when it runs.

Add a verb by adding one line to :data:`VERBS`: ``name: (module, one-line help)``. The module has
``main(argv: list[str]) -> int``.
"""

from __future__ import annotations

import os
import sys

from tunekit.env import env_flag

VERBS: dict[str, tuple[str, str]] = {
    "train": ("tunekit.cli.train_cmd", "Train a model (any stage) from a config file and/or key=value options."),
    "env": ("tunekit.cli.env_cmd", "Print versions of python, torch and the HF stack, and the devices seen."),
    "plan": ("tunekit.cli.plan_cmd", "Before training: steps, memory per device by component, time, and a set-up that fits."),
    "data": ("tunekit.cli.data_cmd", "data stats: token lengths, truncation, recommended cutoff_len, padding waste."),
    "templates": ("tunekit.cli.templates_cmd", "List the chat templates, or render a sample with one."),
    "tiny-model": ("tunekit.cli.tiny_model_cmd", "Write a small random-weight model + tokenizer of a given family."),
    "expand-blocks": ("tunekit.cli.expand_blocks_cmd", "LLaMA Pro: interleave zero-output copies of decoder blocks into a model (same outputs)."),
    "export": ("tunekit.cli.export_cmd", "Merge adapters / consolidate a checkpoint into a sharded HF folder with the chat template (4/8-bit optional)."),
    "verify": ("tunekit.cli.verify_cmd", "Check an exported folder with plain transformers: index, shapes, template parity, generation, merge logits."),
    "zero-to-fp32": ("tunekit.cli.zero_cmd", "Consolidate a DeepSpeed ZeRO checkpoint (global_step*/) into a normal fp32 model folder."),
    "chat": ("tunekit.cli.chat_cmd", "Chat in the terminal with streaming and history (or answer --prompt / stdin for scripts)."),
    "api": ("tunekit.cli.api_cmd", "Serve an OpenAI-compatible API (/v1/chat/completions, streaming, tools) on API_HOST:API_PORT."),
    "predict": ("tunekit.cli.predict_cmd", "Generate for a dataset in batches and score it: BLEU-4, ROUGE-1/2/L, exact match."),
    "webui": ("tunekit.cli.webui_cmd", "Serve the web board (127.0.0.1:7860): options, plan, training with live loss, chat, export."),
    "warm": ("tunekit.cli.warm", "Keep torch & co. imported in a background process so that commands start in under a second."),
}

# Verbs that import torch & co. and so may run in a warm process (see tunekit/cli/warm.py).
WARM_VERBS = {"train", "plan", "data", "tiny-model", "expand-blocks", "export", "verify", "zero-to-fp32", "chat", "predict"}

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


def main(argv: list[str] | None = None) -> int:
    """The ``tunekit`` program when ``argv`` is None (it may then end the process, see :func:`exit_now`);
    called with a list, a plain function that returns the exit code."""
    if argv is None:
        return exit_now(dispatch(sys.argv[1:], warm=True))
    return dispatch(list(argv))


def dispatch(argv: list[str], warm: bool = False) -> int:
    """Parse the verb and run it: in this process, or (``warm``, the program only) in a warm child when
    ``tunekit warm`` runs one for this environment."""
    # The deepspeed launcher (and torch.distributed.launch) add --local_rank=N; LOCAL_RANK is in the environment too.
    argv = [a for a in argv if not a.startswith(("--local_rank=", "--local-rank="))]
    if not argv or argv[0] in ("-h", "--help", "help"):
        print_usage()
        return 0
    if argv[0] in ("-V", "--version", "version"):
        from tunekit import __version__

        print(f"tunekit {__version__}")
        return 0
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        import difflib

        close = difflib.get_close_matches(verb, VERBS, n=2)
        sys.stderr.write(f"error: unknown command '{verb}'." + (f" Did you mean: {', '.join(close)}?" if close else "") + "\n")
        print_usage(sys.stderr)
        return 2
    if warm and verb in WARM_VERBS and not any(a in ("-h", "--help") for a in rest):
        from tunekit.cli.warm import run_via_warm

        code = run_via_warm(argv)
        if code is not None:
            return code
    return run_verb(VERBS[verb][0], rest)


def run_verb(module_name: str, argv: list[str]) -> int:
    import importlib

    from tunekit.errors import TunekitError

    debug = env_flag("TUNEKIT_DEBUG", False)
    try:
        module = importlib.import_module(module_name)
        return int(module.main(argv) or 0)
    except TunekitError as exc:
        _record_rank_error(exc)
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


def finish_process() -> None:
    """What a normal exit does that matters: join non-daemon threads, run atexit handlers, flush stdio."""
    import atexit
    import threading

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # CPython's own exit step (documented in the atexit module's source), run explicitly
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _record_rank_error(exc: BaseException) -> None:
    """Under torchrun, hand this rank's error to the launcher's failure summary."""
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):
        from tunekit.train.distributed import record_rank_error

        record_rank_error(exc)


if __name__ == "__main__":
    sys.exit(main())
