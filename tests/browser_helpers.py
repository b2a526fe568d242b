"""The board in headless Chromium (Debian's package, driven by Playwright with the system executable): one way
to find the browser, serve a board, open a page and work its Gradio widgets, for every browser test."""

from __future__ import annotations

import os
import re
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


# ------------------------------------------------------------------ the drawn loss chart and the toasts
AXES = "() => [...document.querySelectorAll('#tk-loss-plot g.role-axis')].map(g => g.getAttribute('aria-label') || '')"
TOAST_WATCH = """() => {
    window.__tkToasts = window.__tkToasts || [];
    new MutationObserver(() => {
        for (const el of document.querySelectorAll('[data-testid=toast-body]')) {
            if (el.__tkSeen) continue;
            el.__tkSeen = true;
            window.__tkToasts.push({cls: el.className, text: el.innerText});
        }
    }).observe(document.documentElement, {subtree: true, childList: true});
}"""


def error_toasts(pg) -> list[dict]:
    """The error and warning toasts seen since :data:`TOAST_WATCH` was installed on this page load."""
    return [t for t in pg.evaluate("() => window.__tkToasts || []") if "error" in t["cls"] or "warning" in t["cls"]]


def line_points(d: str) -> list[tuple[float, float]]:
    """The vertices of an SVG line path (Vega writes ``M x,y L x,y ...``)."""
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", d)]
    return list(zip(numbers[0::2], numbers[1::2]))


def assert_line_through(points: list[tuple[float, float]], losses: list[float]) -> None:
    """The line's vertices, one per logged loss, left to right in step order; their heights a linear function of
    the losses (a numeric y axis: a higher loss is drawn higher, in proportion)."""
    assert len(points) == len(losses), (points, losses)
    xs, ys = [x for x, _ in points], [y for _, y in points]
    assert all(b > a for a, b in zip(xs, xs[1:])), xs
    n = len(losses)
    mean_v, mean_y = sum(losses) / n, sum(ys) / n
    slope = sum((v - mean_v) * (y - mean_y) for v, y in zip(losses, ys)) / sum((v - mean_v) ** 2 for v in losses)
    assert slope < 0  # SVG y grows downwards: a higher loss is a smaller y
    worst = max(abs(mean_y + slope * (v - mean_v) - y) for v, y in zip(losses, ys))
    assert worst < 1.0, (worst, points, losses)
