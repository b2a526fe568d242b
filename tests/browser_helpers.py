"""The board in headless Chromium (Debian's package, driven by Playwright with the system executable): one way
to find the browser, serve a board, open a page and work its Gradio widgets, for every browser test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if CHROMIUM is None:
        return "chromium is not installed (scripts/test-system-deps.sh installs Debian's chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"playwright is not importable: {exc}"
    return None


def skip_without_browser() -> None:
    if (reason := browser_missing()) is not None:
        pytest.skip(reason)


@contextmanager
def board_process(workspace: Path) -> Iterator[str]:
    """``tunekit webui`` run in ``workspace`` as a user starts it; yields its URL. Its output goes to
    ``workspace/server.log`` (shown when it does not start)."""
    from tunekit.train.engines.launcher import free_port

    port = free_port()
    env = dict(os.environ, GRADIO_SERVER_PORT=str(port), GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1")
    env.pop("GRADIO_SERVER_NAME", None)
    with open(workspace / "server.log", "w") as log:  # the board writes to its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "tunekit.cli.main", "webui"],
            cwd=workspace,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url, deadline = f"http://127.0.0.1:{port}/", time.time() + 90
    try:
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"the board did not start:\n{(workspace / 'server.log').read_text()}")
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def chromium_page(timeout_ms: int = 60_000):
    """A fresh Chromium page, 1440 × 1000, whose waits give up after ``timeout_ms``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            pg = browser.new_page(viewport={"width": 1440, "height": 1000})
            pg.set_default_timeout(timeout_ms)
            yield pg
        finally:
            browser.close()


def open_board(pg, url: str) -> None:
    """Open the board and wait until its page-load handlers have answered: the form a running job restores is
    on the page (``body[data-tk-loaded]``), so what a test types next is not overwritten by it."""
    pg.goto(url)
    pg.wait_for_selector("body[data-tk-loaded]", state="attached")


def field(pg, name: str):
    """An option's widget (``#tk-field-NAME``); ``NAME-box`` is a board widget (``#tk-NAME``)."""
    if name.endswith("-box"):
        return pg.locator(f"#tk-{name[:-4]}")
    return pg.locator(f"#tk-field-{name}")


def fill_text(pg, name: str, value) -> None:
    box = field(pg, name).locator("textarea, input").first
    box.fill(str(value))
    box.blur()


def pick(pg, name: str, shown: str, *, type_first: bool = True) -> None:
    """Choose the option shown as ``shown`` in a dropdown (typing it first narrows the list)."""
    box = field(pg, name).locator("input[role=combobox]")
    box.click()
    if type_first:
        box.fill(shown)
    pg.get_by_role("option", name=shown, exact=True).first.click()
    box.blur()


def expand(pg, elem_id: str) -> None:
    """Open the accordion ``#elem_id`` (its header button carries Gradio's ``open`` class); an open one stays open."""
    head = pg.locator(f"#{elem_id} button.label-wrap").first
    if "open" not in (head.get_attribute("class") or "").split():
        head.click()
    pg.wait_for_function(
        "id => document.querySelector(`#${id} button.label-wrap`)?.classList.contains('open')", arg=elem_id
    )


def open_section(pg, section: str) -> None:
    """Show an Advanced section of the Train form (``#tk-section-NAME``), opening Advanced first."""
    expand(pg, "tk-advanced")
    expand(pg, f"tk-section-{section}")
