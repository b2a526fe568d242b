"""``tunekit chat CONFIG.yaml [key=value ...] [--system TEXT] [--prompt TEXT]``: talk to a model in the terminal."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import TextIO

from tunekit.errors import DataError
from tunekit.infer.engine import ChatEngine
from tunekit.infer.reasoning import write_reply

from .args import config_and_flags

HELP = """usage: tunekit chat [CONFIG.yaml] [key=value ...] [--system TEXT] [--prompt TEXT]

Chat with a base model, a base + adapter(s) (adapter_name_or_path) or an exported folder. Replies stream
as they are generated and the conversation is kept: type `clear` to start over, `exit` to quit.

  --system TEXT   system prompt (default: default_system, else the template's)
  --prompt TEXT   answer this one message, print the reply and exit (for scripts)
  --image PATH    an image for the first message (vision-language models, e.g. template qwen2_vl);
                  in the conversation, a line `/image PATH` adds an image to the next message

Without a terminal (stdin is a pipe or file) each input line is one user message and only the replies
are printed, one per message; `clear` and `exit` work there too. Generation options are ordinary options:
max_new_tokens, temperature, top_p, top_k, repetition_penalty, do_sample (e.g. do_sample=false). Sampled
replies differ from run to run; generation_seed=N makes them reproducible (the training seed is not used).
"""

FLAGS = ("--system", "--prompt", "--image")


def _interactive_lines(out: TextIO) -> Iterator[str]:
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (line editing and history for input())
    while True:
        try:
            yield input("\nUser: ")
        except UnicodeDecodeError:
            out.write(NOT_UTF8_AGAIN)
        except EOFError:
            out.write("\n")
            return


NOT_UTF8_AGAIN = "That line is not UTF-8 text (check the terminal's encoding); type it again.\n"


def not_utf8(text: str) -> str | None:
    """Where ``text`` (decoded with ``surrogateescape``: argv, a piped stdin) holds bytes that are not UTF-8."""
    for col, ch in enumerate(text, 1):
        if "\udc80" <= ch <= "\udcff":
            return f"byte 0x{ord(ch) - 0xDC00:02x} at column {col}"
    return None


def check_utf8(text: str | None, what: str) -> None:
    where = not_utf8(text or "")
    if where:
        raise DataError(f"chat: {what} is not UTF-8 text ({where}); send UTF-8 (convert it with e.g. iconv -t UTF-8).")


def _stdin_lines(stream) -> Iterator[str]:
    """A piped stdin's lines, each decoded as UTF-8 on its own (bytes that are not UTF-8 stay visible to repl)."""
    raw = getattr(stream, "buffer", None)
    if raw is None:  # already text
        yield from stream
        return
    for n, line in enumerate(raw, 1):
        text = line.decode("utf-8", "surrogateescape")
        yield text.removeprefix("\ufeff") if n == 1 else text


def repl(
    engine,
    lines: Iterable[str],
    out: TextIO,
    system: str | None = None,
    interactive: bool = False,
    images: list[str] | None = None,
    **gen,
) -> int:
    """Run the conversation loop; returns the number of replies.

    ``images``: for the first message; a line ``/image PATH`` adds one to the next message. Every image of the
    conversation stays in it (each placed as ``<image>`` at the start of its message)."""
    history: list[dict] = []
    pending: list[str] = list(images or [])
    shown: list[str] = []
    replies = 0
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        if text.lower() in ("exit", "quit"):
            break
        if text.startswith("/image "):
            pending.append(text[len("/image ") :].strip())
            if interactive:
                out.write(f"Image added to your next message: {pending[-1]}\n")
            continue
        if text.lower() == "clear":
            history, shown, pending = [], [], []
            if interactive:
                out.write("History cleared.\n")
            continue
        if interactive and not_utf8(text):
            out.write(NOT_UTF8_AGAIN)
            continue
        check_utf8(line.rstrip("\r\n"), f"input line {n}")  # (an /image path may be any bytes: a file name)
        history.append({"role": "user", "content": "<image>" * len(pending) + text})
        shown += pending
        pending = []
        if interactive:
            out.write("Assistant: ")
        parts = engine.stream_parts(history, system=system, images=shown or None, **gen)
        thought, reply = write_reply(parts, out, dim=interactive)  # a thought first, marked (infer/reasoning.py)
        out.write("\n")
        out.flush()
        history.append({"role": "assistant", "content": reply, **({"reasoning": thought} if thought else {})})
        replies += 1
    return replies


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(HELP)
        return 0
    flags, cfg = config_and_flags(argv, FLAGS)
    for name in ("--prompt", "--system"):
        check_utf8(flags.get(name), name)
    engine = ChatEngine(cfg)
    system = flags.get("--system")
    images = [flags["--image"]] if "--image" in flags else None
    gen: dict = {}  # sampled replies: fresh randomness, or generation_seed=N (not the training seed) to reproduce them
    if "--prompt" in flags:
        repl(engine, [flags["--prompt"]], sys.stdout, system, images=images, **gen)
        return 0
    interactive = sys.stdin.isatty()
    if interactive:
        sys.stdout.write(
            f"tunekit chat: {cfg.model_name_or_path}"
            + (f" + {cfg.adapter_name_or_path}" if cfg.adapter_name_or_path else "")
            + f" (template {engine.cfg.template}). Type `clear` to reset the history, `exit` to quit.\n"
        )
        repl(engine, _interactive_lines(sys.stdout), sys.stdout, system, interactive=True, images=images, **gen)
    else:
        repl(engine, _stdin_lines(sys.stdin), sys.stdout, system, images=images, **gen)
    return 0
