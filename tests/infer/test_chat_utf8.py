"""``tunekit chat`` with input that is not UTF-8: a named one-line error, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

MESSAGE = (
    "error: chat: {what} is not UTF-8 text (byte 0xff at column 3); send UTF-8 (convert it with e.g. iconv -t UTF-8)."
)


def _chat(tiny_qwen, args: list[str], stdin: bytes) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "tunekit.cli.main",
        "chat",
        f"model_name_or_path={tiny_qwen}",
        "template=qwen",
        "do_sample=false",
        "max_new_tokens=2",
        *args,
    ]
    return subprocess.run(
        cmd,
        input=stdin,
        capture_output=True,
        timeout=300,
        env={**os.environ, "TUNEKIT_WARM": "0", "LC_ALL": "C.UTF-8"},
    )


def test_piped_lines_that_are_not_utf8_are_a_named_error(tiny_qwen):
    proc = _chat(tiny_qwen, [], b"Hi\n\nab\xff cd\nnever read\n")
    assert proc.returncode != 0
    assert proc.stdout.endswith(b"\n")  # the reply to line 1 was printed; line 3 stops the chat
    err = proc.stderr.decode().strip().splitlines()
    assert err[-1] == MESSAGE.format(what="input line 3") and "Traceback" not in proc.stderr.decode()


@pytest.mark.parametrize("flag", ["--prompt", "--system"])
def test_flags_that_are_not_utf8_are_a_named_error(tiny_qwen, flag):
    args = [flag, os.fsdecode(b"ab\xffcd")] + (["--prompt", "Hi"] if flag == "--system" else [])
    proc = _chat(tiny_qwen, args, b"")
    assert proc.returncode != 0 and proc.stderr.decode().strip().splitlines()[-1] == MESSAGE.format(what=flag)


def test_repl_checks_each_line():
    from tunekit.cli.chat_cmd import not_utf8

    assert not_utf8("plain ✓ text") is None
    assert not_utf8(b"ok \xe9".decode("utf-8", "surrogateescape")) == "byte 0xe9 at column 4"
