"""The board's handlers are wrapped when they are registered (``tunekit.webui.guard.Guard.on``, ``Page.on`` in a
tab): every handler of the built board is a guarded one, and a failing or malformed one answers in the board's
words through Gradio's own call path."""

from __future__ import annotations

import asyncio
import re

import pytest

from tunekit.webui.board import Board

gr = pytest.importorskip("gradio")

HANDLER_FAILED = "⚠ This action could not be completed; the terminal running `tunekit webui` has the details."
HANDLER_FAILED_ZH = "⚠ 此操作未能完成；详情见运行 `tunekit webui` 的终端。"


def unguarded(demo) -> list[str]:
    """The handlers of ``demo`` that were registered around the guard: ``name (event targets)`` each. Events
    without a Python function (JavaScript only) and Gradio's own (cancel, validator) functions are not handlers."""
    found = []
    for block_fn in demo.fns.values():
        internal = block_fn.is_cancel_function or getattr(block_fn, "is_validator_function", False)
        if block_fn.fn is None or internal:
            continue
        if not getattr(block_fn.fn, "__tk_guarded__", False):
            found.append(f"{block_fn.name} {block_fn.targets}")
    return found


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_handler_of_the_board_is_registered_through_the_guard(tmp_path, lang):
    """A handler added to the board later with ``button.click(...)`` instead of ``page.on(button.click, ...)``
    fails here, by name."""
    from tunekit.webui.app import create_app

    demo = create_app(Board(cwd=tmp_path), lang=lang)
    handlers = [f for f in demo.fns.values() if f.fn is not None]
    assert len(handlers) > 60  # the whole board: every tab's events
    assert unguarded(demo) == []
    for block_fn in handlers:  # each wraps the function it was registered with, under that function's name
        assert block_fn.fn.__wrapped__.__name__ == block_fn.name
        assert not getattr(block_fn.fn.__wrapped__, "__tk_guarded__", False)


def test_no_event_of_the_board_tracks_its_progress_on_a_whole_form(tmp_path):
    """Gradio draws a status tracker on each of an event's progress targets (by default: all its outputs) and walks
    the page's component tree for each on every status change; a form-sized event keeps the browser busy after
    every keystroke. Progress shows on at most a few components, and a hidden one on none."""
    from tunekit.webui.app import create_app
    from tunekit.webui.guard import MAX_PROGRESS_TARGETS

    config = create_app(Board(cwd=tmp_path)).get_config_file()
    wide = 0
    for dep in config["dependencies"]:
        targets = dep["show_progress_on"] if dep["show_progress_on"] is not None else dep["outputs"]
        assert len(targets) <= MAX_PROGRESS_TARGETS, (dep["id"], dep["targets"], len(targets))
        if dep["show_progress"] == "hidden":
            assert targets == [], dep["targets"]
        wide += len(dep["outputs"]) > 100
    assert wide >= 5  # the form-wide events exist (edit checks, load, save, auto-fit, language): the check bites


# The most inputs an event of the board takes: the model boxes, a few forms' hidden values, the language. A form's
# ~20 widgets are many more.
MAX_INPUTS = 7


def page_forms(demo) -> dict:
    """Every form of the board read through its hidden values, by its key in the page's store."""
    ev = demo.tk_tabs["eval"]
    return {**demo.tk_forms, "eval_data": ev.data, "eval_run": ev.run, "eval_gen": ev.gen}


# each form's handlers (events with a Python function) that read its hidden values, at least
FORM_READERS = {"train": 8, "chat": 3, "export": 3, "eval_data": 2, "eval_run": 2, "eval_gen": 2}


def test_no_event_of_the_board_takes_a_whole_form_as_its_inputs(tmp_path):
    """Gradio 6.31's page keeps each input of a completed event in its table of loading statuses (the event
    is closed with a ``stream_state``) and walks its component tree once per entry at every later status update:
    with the Train form's ~230 widgets as inputs the page used a whole core while a run trained (and the Chat,
    Evaluate & predict and Export tabs' ~20 each added as many). Each form's handlers read one hidden JSON
    (``FormView.values``, its own key in the page's store) that the page fills from the store each widget's own
    browser-side event keeps current; those events run no Python."""
    from tunekit.webui.app import create_app
    from tunekit.webui.form import SYNC_JS, TAKE_VALUES_JS, VALUES_MARK

    demo = create_app(Board(cwd=tmp_path))
    config, forms = demo.get_config_file(), page_forms(demo)
    assert max(len(dep["inputs"]) for dep in config["dependencies"]) <= MAX_INPUTS
    assert {key: form.values.value[VALUES_MARK] for key, form in forms.items()} == {key: key for key in FORM_READERS}
    for name, form in forms.items():
        widgets = {comp._id for comp in form.inputs}
        readers = [dep for dep in config["dependencies"] if form.values._id in dep["inputs"]]
        syncs = [dep for dep in readers if dep["js"] and dep["js"].startswith(SYNC_JS.split("%")[0])]
        assert {dep["targets"][0][0] for dep in syncs} == widgets, name  # every widget keeps the store current
        for dep in readers:
            if dep["backend_fn"]:  # Train: edit checks, plan, preview, start, save, samples, pickers, groups
                assert dep["js"] == TAKE_VALUES_JS, (name, dep["targets"])
                assert not widgets & set(dep["inputs"]), (name, dep["targets"])  # nor the widgets themselves
            else:
                assert not dep["outputs"], (name, dep["targets"])  # a store event changes nothing in the page
        assert sum(1 for dep in readers if dep["backend_fn"]) >= FORM_READERS[name], name


def test_no_trigger_of_the_board_has_two_deferring_handlers(tmp_path):
    """Gradio 6.31's page re-dispatches a deferred event's whole trigger when the run it waited for ends
    (``always_last``), so two deferring handlers of one trigger that overlap re-run each other: after a YAML load the
    edit check and the plan (each in its own queue, on every field) did so for seconds with a core busy. Each
    trigger has one deferring handler at most (Guard.on runs the others each time); the plan follows the check."""
    from collections import Counter

    from tunekit.webui.app import create_app

    config = create_app(Board(cwd=tmp_path)).get_config_file()
    deps = config["dependencies"]
    deferring = Counter(
        tuple(target)
        for dep in deps
        if dep["backend_fn"] and dep["trigger_mode"] == "always_last"
        for target in dep["targets"]
    )
    assert deferring and max(deferring.values()) == 1, deferring.most_common(3)
    by_name = {dep["api_name"]: dep for dep in deps}
    plans = [dep for dep in deps if (dep["api_name"] or "").startswith("on_plan")]
    (after,) = [dep for dep in plans if dep["trigger_after"] is not None]
    assert deps[after["trigger_after"]] is by_name["on_edit"] and len(by_name["on_edit"]["targets"]) > 200


def test_a_form_reads_its_values_through_each_widgets_preprocess_and_a_widget_given_wins(tmp_path):
    from tunekit.webui.app import create_app

    demo = create_app(Board(cwd=tmp_path))
    form = demo.tk_forms["train"]
    assert form.values.value["plot_loss"] is True  # the first-run values are the store's first values too
    assert demo.tk_tabs["eval"].run.values.value["do_eval"] is True  # Evaluate & predict's first use: the loss
    held = {**form.values.value, "max_steps": 7.0, "template": "qwen"}
    values = form.read_map({form.values: held, form["template"]: "llama3"})
    assert values["max_steps"] == form["max_steps"].preprocess(7.0) and values["template"] == "llama3"
    assert set(values) == set(form.comps)


def test_the_check_names_a_handler_registered_around_the_guard():
    from tunekit.webui.guard import Guard

    def kept():
        return "x"

    def bypassed():
        return "x"

    with gr.Blocks() as demo:
        box, a, b = gr.Textbox(), gr.Button(), gr.Button()
        Guard().on(a.click, kept, outputs=box)
        b.click(bypassed, outputs=box)
    assert unguarded(demo) == [f"bypassed [({b._id}, 'click')]"]


def test_the_guard_fixes_malformed_answers_and_covers_every_kind_of_handler():
    """Answers Gradio would refuse with its own raw error: ``{}`` for several outputs (nothing to change), a wrong
    count (the board's message instead); a generator that fails mid-stream; a handler without a message area
    (a notice in the board's words). One function wired to two events stays one handler; with other outputs it
    gets its own wrapper, in the function's one concurrency group (as Gradio makes it for a function not wrapped)."""
    from tunekit.webui.guard import Guard

    def nothing():
        return {}

    def short():
        return ("only one",)

    def stream():
        yield "first", "partial"
        raise ValueError("raw text")

    def no_area():
        raise ValueError("raw text")

    on = Guard().on
    with gr.Blocks() as demo:
        box, errors = gr.Textbox(), gr.Markdown(elem_id="tk-errors")
        a, b, c, d = gr.Button(), gr.Button(), gr.Button(), gr.Button()
        on(a.click, nothing, outputs=[box, errors])
        on(b.click, short, outputs=[box, errors])
        on(c.click, stream, outputs=[box, errors])
        on(box.submit, stream, outputs=[box, errors])
        on(d.click, no_area, outputs=box)
        on(errors.change, stream, outputs=[errors, box])
    fns = {f.targets[0]: f for f in demo.fns.values()}
    got = fns[(a._id, "click")].fn()
    assert got == gr.skip() and asyncio.run(demo.postprocess_data(fns[(a._id, "click")], got, None))
    assert fns[(b._id, "click")].fn() == {errors: HANDLER_FAILED}
    streamed, submitted, other = fns[(c._id, "click")], fns[(box._id, "submit")], fns[(errors._id, "change")]
    assert streamed.fn is submitted.fn and streamed.types_generator and other.fn is not streamed.fn
    assert streamed.concurrency_id == submitted.concurrency_id == other.concurrency_id == str(id(stream))
    assert fns[(a._id, "click")].concurrency_id != streamed.concurrency_id
    assert list(streamed.fn()) == [("first", "partial"), {errors: HANDLER_FAILED}]
    with pytest.warns(UserWarning, match=re.escape(HANDLER_FAILED)):
        assert fns[(d._id, "click")].fn() == gr.skip()


def test_registration_keeps_the_events_keywords_chains_and_javascript_events():
    """Every keyword reaches Gradio unchanged (a given concurrency group too); the answer is the event's
    ``Dependency``, so ``.then`` chains; a list of listeners is one ``gr.on`` event; a JavaScript-only event is
    registered as it is."""
    from tunekit.webui.guard import Guard

    def first(text):
        return text

    on = Guard().on
    with gr.Blocks() as demo:
        box, out, button = gr.Textbox(), gr.Textbox(), gr.Button()
        event = on(button.click, first, inputs=box, outputs=out, show_progress="hidden", concurrency_id="mine")
        then = on(event.then, first, inputs=[out], outputs=[box], trigger_mode="multiple", api_visibility="private")
        on([box.submit, out.change], first, inputs=box, outputs=out)
        on(then.then, None, js="() => { document.body.dataset.done = '1'; }")
    clicked, chained, both, js_only = demo.fns.values()
    assert isinstance(event, gr.events.Dependency) and isinstance(then, gr.events.Dependency)
    assert (clicked.show_progress, clicked.concurrency_id, clicked.targets) == (
        "hidden",
        "mine",
        [(button._id, "click")],
    )
    assert (chained.trigger_after, chained.trigger_mode, chained.api_visibility) == (
        clicked._id,
        "multiple",
        "private",
    )
    assert both.targets == [(box._id, "submit"), (out._id, "change")]
    assert js_only.fn is None and js_only.trigger_after == chained._id and "dataset.done" in js_only.js
    assert unguarded(demo) == []


def test_a_failure_answers_in_the_pages_language_through_gradios_call():
    """Called the way Gradio calls an event (its processing of the inputs and outputs included): the message goes
    to the message area in the language the page's picker holds, read from set inputs (one dict) and from a list
    of inputs; a TunekitError keeps its own text."""
    from gradio.state_holder import SessionState

    from tunekit.errors import ConfigError
    from tunekit.webui.guard import Guard

    def from_dict(data):
        raise KeyError("/home/someone/private")

    refused = "Option 'output_dir' is outside the workspace: choose a folder inside it."

    def from_list(text, lang):
        raise ConfigError(refused)

    with gr.Blocks() as demo:
        lang_radio = gr.Radio(choices=["en", "zh"], value="en")
        box, status = gr.Textbox(), gr.Markdown(elem_id="tk-status")
        a, b = gr.Button(), gr.Button()
        on = Guard(lang_radio, "en").on
        on(a.click, from_dict, inputs={box, lang_radio}, outputs=[box, status])
        on(b.click, from_list, inputs=[box, lang_radio], outputs=[status, box])
    by_dict, by_list = demo.fns.values()

    def sent(block_fn, lang):
        values = {box: "text", lang_radio: lang}
        answer = asyncio.run(demo.process_api(block_fn, [values[c] for c in block_fn.inputs], SessionState(demo)))
        return answer["data"]

    kept = {"__type__": "update"}  # the box is left as it is
    assert sent(by_dict, "zh") == [kept, HANDLER_FAILED_ZH]
    assert sent(by_dict, "en") == [kept, HANDLER_FAILED]
    assert sent(by_list, "zh") == [f"⚠ 此操作未能完成：{refused}", kept]
    assert sent(by_list, "en") == [f"⚠ This action could not be completed: {refused}", kept]
