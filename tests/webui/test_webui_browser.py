"""End to end: the board in headless Chromium, the whole workflow (form, plan, start, stop, resume, evaluate,
export and verify, chat) and the rules shown at their fields (the Chinese board: test_webui_zh_browser.py). A
screenshot of each stage is saved under test-artifacts/webui/ (or $TUNEKIT_TEST_ARTIFACTS).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path

import pytest

from tests.browser_helpers import (
    AXES,
    TOAST_WATCH,
    assert_line_through,
    board_process,
    browser_missing,
    chromium_page,
    error_toasts,
    expand,
    field,
    fill_text,
    line_points,
    open_board,
    open_section,
    pick,
)
from tests.helpers import ROOT, train_rows
from tests.zh_words import option_words, untranslated

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(1500)]  # a loaded CI host: 3x

ARTIFACTS = Path(os.environ.get("TUNEKIT_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "webui"


def _missing() -> str | None:
    if (reason := browser_missing()) is not None:
        return reason
    for mod in ("gradio", "tunekit.train.run", "tunekit.tiny.text"):
        try:
            __import__(mod)
        except ImportError as exc:
            return f"{mod} is not importable: {exc}"
    return None


if (_reason := _missing()) is not None:
    pytest.skip(_reason, allow_module_level=True)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    from tunekit.tiny.text import build_tiny_model

    root = tmp_path_factory.mktemp("board")
    build_tiny_model(root / "tiny", like="qwen2")
    data = root / "data"
    data.mkdir()
    records = [
        {"instruction": f"Say hello to number {i}", "input": "", "output": f"Hello, number {i}!"} for i in range(16)
    ]
    (data / "demo.json").write_text(json.dumps(records), encoding="utf-8")
    (data / "dataset_info.json").write_text(json.dumps({"demo": {"file_name": "demo.json"}}), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def server(workspace):
    with board_process(workspace) as url:
        yield url, (workspace / "server.log").read_text()


@pytest.fixture(scope="module")
def page(server):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "steps.log").write_text("")
    with chromium_page() as pg:
        yield pg
        shot(pg, "last-state")


# ------------------------------------------------------------------ helpers for Gradio widgets
def shot(pg, name):
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


_T0 = time.time()


def step(what):
    """A timestamped line in test-artifacts/webui/steps.log: where a slow or failed run spent its time."""
    with open(ARTIFACTS / "steps.log", "a") as fh:
        fh.write(f"{time.time() - _T0:7.1f}s  {what}\n")


# Gradio's own words (the upload box, the footer) follow the browser's language, en-US here
GRADIO_OWN = ("Drop File Here", "- or -", "Click to Upload", "Settings")


# the page's text without its code (commands, YAML, names set as code) and the chat's messages: innerText skips
# hidden elements
WITHOUT_CODE = """() => {
    const style = document.createElement('style');
    style.textContent = 'code, pre, .cm-editor, [data-testid=user], [data-testid=bot] { visibility: hidden }';
    document.head.append(style);
    const text = document.body.innerText;
    style.remove();
    return text;
}"""


def english_left(pg, names: set[str]) -> list[str]:
    """The lines of the page (its selected tab) with English a Chinese reader was not given in Chinese: the check of
    tests/zh_words.py over what the browser draws, code left out; option names and values, template names and paths
    are allowed, and ``names`` (the user's: datasets); "Language / 语言" and "English" name the switch itself."""
    from tunekit.data.templates import list_templates

    text = pg.evaluate(WITHOUT_CODE)
    for phrase in GRADIO_OWN:
        text = text.replace(phrase, " ")
    allowed = option_words() | set(list_templates()) | names | {"alpaca", "sharegpt", "Language", "English"}
    return [line for line in text.splitlines() if untranslated(line, allowed)]


def english_left_after(pg, names: set[str], timeout_s: float = 60.0) -> list[str]:
    """:func:`english_left` once the switch's handlers have answered (the plan, the charts and each job area re-say
    their text in their own events, later on a busy machine): what is still English after ``timeout_s``."""
    deadline = time.time() + timeout_s
    while (left := english_left(pg, names)) and time.time() < deadline:
        time.sleep(0.5)
    return left


def wait_status(pg, tab: str, verb: str) -> str:
    """Wait until ``tab``'s job area says ``tunekit VERB`` ended; its state word (finished / failed / stopped)."""
    pg.wait_for_function(
        "([id, verb]) => { const t = document.querySelector(id)?.innerText || '';"
        " return t.includes(verb) && /finished|failed|stopped/.test(t); }",
        arg=[f"#tk-{tab}-status", f"tunekit {verb}"],
        timeout=180_000,
    )
    return pg.locator(f"#tk-{tab}-status").inner_text().split()[0]


def test_board_end_to_end(server, page, workspace):
    """The whole workflow a newcomer follows, in one page: fill the form (a YAML, a model, a picked dataset), see
    an invalid value at its field, preview rendered samples, plan, preview the command, start, stop, resume from
    the checkpoint Stop saved, reload while it runs, watch it finish with its live loss chart (a line through every
    logged loss), evaluate, export (merge) and verify the export, chat with a streamed reply, then the same page
    switched to 中文 with no English left on any tab, no error toast anywhere. A screenshot of each stage is kept under
    test-artifacts/webui/ (``last-state.png`` shows where a failure stopped)."""
    url, banner = server
    pg = page
    assert "127.0.0.1" in banner and "loopback" in banner
    out = workspace / "saves" / "e2e"

    open_board(pg, url)
    pg.evaluate(TOAST_WATCH)  # no error toast in the whole workflow (checked before the reload and at the end)

    step("the form: a YAML, the tiny model, the demo dataset picked from dataset_info.json")
    # 60 steps of 16 micro-batches (~0.3 s a step on a quiet core): long enough to be stopped midway
    (workspace / "run.yaml").write_text(
        "max_steps: 60\nper_device_train_batch_size: 1\ngradient_accumulation_steps: 16\nlogging_steps: 1\n"
        "plot_loss: true\noutput_dir: saves/e2e\n"
    )
    fill_text(pg, "config-path-box", "run.yaml")
    pg.locator("#tk-load").click()
    pg.wait_for_function("() => document.querySelector('#tk-field-max_steps textarea')?.value === '60'")
    fill_text(pg, "model_name_or_path", workspace / "tiny")
    # the folder's own chat template is suggested first (webui/pickers.py); then the test picks tunekit's
    pg.wait_for_function("() => document.querySelector('#tk-field-template input')?.value === 'jinja'")
    pick(pg, "template", "qwen")
    fill_text(pg, "dataset_dir", workspace / "data")
    pg.locator("#tk-ds-refresh").click()
    pick(pg, "dataset", "demo · 16 rows · alpaca")  # each choice shows its rows and format

    step("an invalid value is shown next to its field before anything starts")
    fill_text(pg, "learning_rate", "-1")
    pg.wait_for_selector("#tk-field-learning_rate.tk-invalid")
    assert "learning_rate" in field(pg, "learning_rate").inner_text()
    fill_text(pg, "learning_rate", "0.001")
    pg.wait_for_selector("#tk-field-learning_rate:not(.tk-invalid)")

    step("data preview: trained tokens highlighted")
    pg.locator("#tk-samples-btn").click()
    pg.wait_for_function(
        "() => document.querySelector('#tk-samples-out')?.innerText.includes('Hello, number 0')", timeout=60_000
    )

    step("the memory plan for this machine")
    pg.locator("#tk-plan-btn").click()
    pg.wait_for_function(
        "() => { const t = document.querySelector('#tk-plan-out')?.innerText || '';"
        " return t.includes('GiB') && /\\b60\\b/.test(t); }"
    )
    shot(pg, "1-plan")

    step("preview the command")
    pg.locator("#tk-preview").click()
    pg.wait_for_function("() => document.querySelector('#tk-command')?.innerText.includes('tunekit train')")
    command = pg.locator("#tk-command .cm-content").inner_text().strip()
    assert "max_steps=60" in command and "dataset=demo" in command and "plot_loss=true" in command
    shot(pg, "2-train-form")

    step("start, then stop: the trainer saves a checkpoint")
    pg.locator("#tk-start").click()
    pg.wait_for_function("() => +document.querySelector('#tk-progress-bar')?.dataset.step >= 2", timeout=120_000)
    pg.locator("#tk-stop").click()
    pg.wait_for_selector("#tk-progress-bar:is([data-state=stopped], [data-state=finished])", timeout=120_000)
    assert pg.locator("#tk-progress-bar").get_attribute("data-state") == "stopped", "the run ended before Stop"
    saved = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert saved and 2 <= saved[-1] < 60, saved
    shot(pg, "3-stopped")

    step("resume from the checkpoint Stop saved, reload while it runs (the board reattaches), run to the end")
    open_section(pg, "training")
    fill_text(pg, "resume_from_checkpoint", "true")
    pg.wait_for_selector("#tk-start:not([disabled])")
    pg.locator("#tk-start").click()
    pg.wait_for_function("() => document.querySelector('#tk-command')?.innerText.includes('resume_from_checkpoint')")
    command = pg.locator("#tk-command .cm-content").inner_text().strip()
    assert error_toasts(pg) == []
    open_board(pg, url)  # a reload: the form of the board's job comes back
    pg.evaluate(TOAST_WATCH)
    pg.wait_for_function(
        "() => document.querySelector('#tk-field-model_name_or_path textarea')?.value === "
        f"{json.dumps(str(workspace / 'tiny'))}",
    )
    pg.wait_for_function("() => document.querySelector('#tk-command')?.innerText.includes('resume_from_checkpoint')")
    pg.wait_for_selector("#tk-progress-bar:is([data-state=finished], [data-state=failed])", timeout=240_000)
    bar = pg.locator("#tk-progress-bar")
    assert bar.get_attribute("data-state") == "finished", pg.locator("#tk-status").inner_text()
    assert bar.get_attribute("data-step") == "60" and bar.get_attribute("data-total") == "60"
    rows = train_rows(out)
    assert [row["step"] for row in rows] == list(range(1, 61))  # each step logged once
    # the live chart: a line through the 60 logged losses in step order, on a numeric axis, and its lr line
    pg.wait_for_function(
        "n => (document.querySelector('#tk-loss-plot .mark-line path')?.getAttribute('d') || '')"
        ".split(/[ML]/).filter(s => s.trim()).length >= n",
        arg=len(rows),
        timeout=30_000,
    )
    assert any(a.startswith("Y-axis") and "linear scale" in a for a in pg.evaluate(AXES))  # numbers, not labels
    assert_line_through(
        line_points(pg.locator("#tk-loss-plot .mark-line path").first.get_attribute("d")),
        [row["loss"] for row in rows],
    )
    assert len(line_points(pg.locator("#tk-lr-plot .mark-line path").first.get_attribute("d"))) == len(rows)
    pg.wait_for_selector("#tk-loss-png img", state="attached", timeout=20_000)
    pg.locator("#tk-loss-png").scroll_into_view_if_needed()  # the image loads lazily: only once it is in view
    pg.wait_for_selector("#tk-loss-png img", timeout=20_000)
    shot(pg, "4-train-finished")

    # the previewed command, parsed by the CLI's own parser, resolves to the config the board ran
    from tunekit.config import config_to_dict, load_config

    argv = shlex.split(command)
    assert argv[:2] == ["tunekit", "train"]
    previewed = config_to_dict(load_config(None, argv[2:]))
    ran = config_to_dict(load_config(out / "tunekit_config.yaml"))
    # gradient_checkpointing: auto is decided at train time and saved resolved (off: the tiny run fits easily)
    assert previewed.pop("gradient_checkpointing") == "auto" and ran.pop("gradient_checkpointing") is False
    assert previewed == ran

    step("evaluate the trained adapter on the demo data")
    pg.locator("#tk-tabs button[role=tab]", has_text="Evaluate").click()
    pg.locator("#tk-eval-use-trained").click()
    pg.wait_for_function("() => document.querySelector('#tk-eval-adapter textarea')?.value.includes('e2e')")
    ticked = pg.locator("#tk-eval-field-do_eval input[type=checkbox]")
    if not ticked.is_checked():
        ticked.check()
    pg.locator("#tk-eval-btn").click()
    assert wait_status(pg, "eval", "train") == "finished", pg.locator("#tk-eval-log textarea").input_value()
    pg.wait_for_function("() => document.querySelector('#tk-eval-results')?.innerText.includes('eval_loss')")
    shot(pg, "5-evaluate")

    step("export (merge the adapter) and verify the exported folder")
    pg.locator("#tk-tabs button[role=tab]", has_text="Export").click()
    pg.locator("#tk-export-use-trained").click()
    pg.wait_for_function("() => document.querySelector('#tk-export-adapter textarea')?.value.includes('e2e')")
    fill_text(pg, "export_dir", "exported")
    pg.locator("#tk-export-btn").click()
    assert wait_status(pg, "export", "export") == "finished", pg.locator("#tk-export-log textarea").input_value()
    assert (workspace / "exported" / "config.json").is_file()
    pg.locator("#tk-export-verify").click()
    assert wait_status(pg, "export", "verify") == "finished", pg.locator("#tk-export-log textarea").input_value()
    shot(pg, "6-export-verified")

    step("chat with the trained adapter: the reply streams in")
    pg.locator("#tk-tabs button[role=tab]", has_text="Chat").click()
    pg.locator("#tk-chat-use-trained").click()
    pg.wait_for_function("() => document.querySelector('#tk-chat-adapter textarea')?.value.includes('e2e')")
    expand(pg, "tk-section-infer")
    fill_text(pg, "max_new_tokens", 24)
    pg.locator("#tk-chat-load").click()
    pg.wait_for_function("() => document.querySelector('#tk-chat-info')?.innerText.includes('loaded')", timeout=90_000)
    pg.evaluate("""() => {
        window.__tkReplies = new Set();
        const box = document.querySelector('#tk-chatbot');
        new MutationObserver(() => {
            const bots = box.querySelectorAll('.bot, [data-testid=bot]');
            if (bots.length) window.__tkReplies.add(bots[bots.length - 1].innerText);
        }).observe(box, {subtree: true, childList: true, characterData: true});
    }""")
    pg.locator("#tk-chat-input textarea").fill("Say hello to number 3")
    pg.locator("#tk-chat-send").click()
    pg.wait_for_function("() => document.querySelector('#tk-chatbot')?.innerText.includes('Say hello to number 3')")
    pg.wait_for_function(
        "() => window.__tkReplies && [...window.__tkReplies].some(t => t.trim().length > 0)", timeout=60_000
    )
    time.sleep(2)
    states = pg.evaluate("() => [...window.__tkReplies].filter(t => t.trim().length > 0).length")
    assert states >= 2, f"the reply arrived in {states} piece(s), expected a stream"
    shot(pg, "7-chat")

    step("the same page switched to Chinese: every tab, its finished job included, in Chinese")
    pg.locator("#tk-lang").get_by_text("中文").click()
    for tab, status in (
        ("训练", "#tk-status"),
        ("评估与预测", "#tk-eval-status"),
        ("对话", None),
        ("导出", "#tk-export-status"),
    ):
        pg.locator("#tk-tabs").get_by_role("tab", name=tab).click()
        if status:  # a finished job's line is said again in the new words
            pg.wait_for_function("id => document.querySelector(id)?.innerText.includes('已完成')", arg=status)
        assert not (left := english_left_after(pg, {"demo"})), f"{tab}: {left}"
    shot(pg, "8-chinese")
    pg.locator("#tk-lang").get_by_text("English").click()
    assert error_toasts(pg) == []


def test_a_broken_rule_shows_next_to_its_fields(server, page):
    """A cross-field rule broken in the form: its message is shown at each option the rule names (the rule's
    Problem.fields, config/problems.py), and at no other; fsdp with stage rm is a rule training alone had before."""
    url, _ = server
    pg = page
    open_board(pg, url)
    step("a broken cross-field rule is shown at the fields it names")
    fill_text(pg, "lora_rank", "16")  # set under lora; the LoRA group stays shown with full (lora_rank is set)
    pick(pg, "finetuning_type", "full")
    pg.wait_for_selector("#tk-field-lora_rank.tk-invalid")
    pg.wait_for_selector("#tk-field-finetuning_type.tk-invalid")
    lora = "lora_rank is a LoRA option but finetuning_type is 'full'"
    assert lora in field(pg, "lora_rank").inner_text() and lora in field(pg, "finetuning_type").inner_text()
    assert pg.locator(".tk-invalid").count() == 2
    fill_text(pg, "lora_rank", "8")
    pg.wait_for_selector("#tk-field-finetuning_type:not(.tk-invalid)")
    assert pg.locator(".tk-invalid").count() == 0
    pick(pg, "stage", "rm")
    open_section(pg, "distributed")
    fill_text(pg, "fsdp", "full_shard")
    pg.wait_for_selector("#tk-field-fsdp.tk-invalid")
    pg.wait_for_selector("#tk-field-stage.tk-invalid")
    assert "fsdp: full_shard is not supported for stage rm" in field(pg, "fsdp").inner_text()
    assert pg.locator(".tk-invalid").count() == 2
    shot(pg, "7-rule-at-its-fields")
