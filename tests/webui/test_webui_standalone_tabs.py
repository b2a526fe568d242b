"""Evaluate & predict, Chat and Export stand on their own: each tab's command is built from its own
fields only (exact argv, equal to the command it shows), the checkpoint picker lists a run's checkpoint-N folders,
"Use the Train tab's" copies the Train tab's values, evaluation carries no training option and keeps a loaded
config's max_new_tokens. The tabs' own Gradio handlers are called with their inputs as Gradio passes them."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.browser_helpers import chromium_page, open_board, skip_without_browser
from tests.helpers import demo_workspace
from tunekit.webui.board import Board

gr = pytest.importorskip("gradio")


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """One board (its workspace: a data folder with dataset_info.json, a run with checkpoints) and its page."""
    from tunekit.webui.app import create_app

    root = demo_workspace(tmp_path_factory.mktemp("ws"))
    run = root / "saves" / "run"
    for step, kind in ((100, "adapter"), (2, "adapter"), (10, "model")):
        folder = run / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / ("adapter_config.json" if kind == "adapter" else "config.json")).write_text("{}")
    (run / "checkpoint-x").mkdir()  # not a step
    (run / "checkpoint-5").write_text("")  # a file, not a folder
    (run / "runs").mkdir()
    (run / "adapter_config.json").write_text("{}")
    board = Board(cwd=root)
    return board, create_app(board), root


@pytest.fixture
def started(app, monkeypatch):
    """The jobs the board would start: (verb, args, kind); nothing is run."""
    board = app[0]
    calls: list[tuple[str, list[str], str]] = []

    def start(verb, args, output_dir, *, form=None, kind="train", env=None):
        calls.append((verb, list(args), kind))

    monkeypatch.setattr(board.runner, "start", start)
    monkeypatch.setattr(type(board.runner), "busy", property(lambda self: False))
    return calls


def handler(demo, comp, event: str = "click", output=None):
    """The one handler of ``comp``'s ``event`` (the one that answers ``output`` when several listen)."""
    fns = [f for f in demo.fns.values() if (comp._id, event) in f.targets]
    if output is not None:
        fns = [f for f in fns if output in f.outputs]
    (fn,) = fns
    return fn


def inputs(fn) -> dict:
    """A handler's inputs as a fresh page holds them (each widget's initial value)."""
    return {c: getattr(c, "value", None) for c in fn.inputs}


def sent(fn, forms, shown: dict) -> dict:
    """A handler's inputs once the page shows ``shown`` (``{widget: value}``): a form's widgets reach it only
    through the form's hidden values, which the page's store keeps current (FormView.add_values)."""
    data = {**inputs(fn), **{c: v for c, v in shown.items() if c in fn.inputs}}
    for form in forms:
        if form.values in data:
            data[form.values] = {**data[form.values], **{n: shown[c] for n, c in form.comps.items() if c in shown}}
    return data


def value(update):
    return update["value"] if isinstance(update, dict) else update


def test_eval_command_is_built_from_its_own_fields_only(app, started):
    board, demo, _root = app
    ev, train = demo.tk_tabs["eval"], demo.tk_tabs["train"]
    run = handler(demo, ev.run_btn)
    assert not set(run.inputs) & set(train.form.inputs)  # nothing of the Train tab is read
    shown = {
        ev.source.model: "models/tiny",
        ev.source.adapter: "saves/run/checkpoint-2",
        ev.source.template: "qwen",
        ev.data["eval_dataset"]: ["demo"],
        ev.data["max_samples"]: "6",
        ev.run["do_predict"]: True,
        ev.run["output_dir"]: "saves/run/eval",
        ev.gen["max_new_tokens"]: "32",
    }
    data = sent(run, ev.forms, shown)
    out = run.fn(data)
    assert out[ev.errors] == ""
    args = [
        "model_name_or_path=models/tiny",
        "adapter_name_or_path=saves/run/checkpoint-2",
        "template=qwen",
        "do_train=false",
        "eval_dataset=demo",
        "max_samples=6",
        "do_eval=true",
        "do_predict=true",
        "output_dir=saves/run/eval",
        "max_new_tokens=32",
    ]
    assert started == [("train", args, "eval")]
    assert out[ev.command] == "tunekit train " + " ".join(args)
    assert shlex.split(out[ev.command])[2:] == started[0][1]  # the command shown is the one run


def by_id(demo, elem_id: str):
    """The widget with this element id (the ids the browser tests use, stable across the board's versions)."""
    (found,) = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id]
    return found


def call(fn, data: dict):
    """A handler called as Gradio calls it: a dict of its inputs (set inputs), else positionally."""
    return fn.fn(data) if fn.inputs_as_dict else fn.fn(*[data[c] for c in fn.inputs])


def test_eval_preview_reads_its_three_forms_through_gradios_call(app):
    """Called the way Gradio calls it (each input through its component's preprocessing): the tab's data, run and
    generation options come as three hidden values, one per form, as the page's store sends them."""
    import asyncio

    from gradio.state_holder import SessionState

    _board, demo, _root = app
    ev = demo.tk_tabs["eval"]
    preview = handler(demo, ev.preview_btn)
    assert [c for c in preview.inputs if c in {f.values for f in ev.forms}] == [f.values for f in ev.forms]
    shown = {
        ev.source.model: "models/tiny",
        ev.data["eval_dataset"]: ["demo"],
        ev.run["do_predict"]: True,
        ev.run["output_dir"]: "saves/run/eval",
        ev.gen["max_new_tokens"]: "32",
    }
    data = sent(preview, ev.forms, shown)
    answer = asyncio.run(demo.process_api(preview, [data[c] for c in preview.inputs], SessionState(demo)))
    command = answer["data"][preview.outputs.index(ev.command)]
    assert shlex.split(command) == [
        "tunekit",
        "train",
        "model_name_or_path=models/tiny",
        "do_train=false",
        "eval_dataset=demo",
        "do_eval=true",
        "do_predict=true",
        "output_dir=saves/run/eval",
        "max_new_tokens=32",
    ]


def test_eval_carries_no_training_option_and_needs_no_train_tab(app, started):
    """The Evaluate button reads no widget of the Train tab, so an empty Train tab is no error and a Train tab full of
    training options changes nothing."""
    board, demo, _root = app
    run = handler(demo, by_id(demo, "tk-eval-btn"))
    assert not set(run.inputs) & set(demo.tk_forms["train"].inputs)
    ev = demo.tk_tabs["eval"]
    data = sent(run, ev.forms, {ev.source.model: "models/tiny", ev.data["eval_dataset"]: ["demo"]})
    out = run.fn(data)
    assert out[ev.errors] == ""
    (verb, args, kind) = started[0]
    keys = [a.split("=", 1)[0] for a in args]
    assert keys == ["model_name_or_path", "do_train", "eval_dataset", "do_eval", "output_dir"]
    assert args[-1].startswith("output_dir=saves/tiny/lora/eval_")
    missing = {**data, ev.source.model: ""}
    assert "Use the Train tab" in run.fn(missing)[ev.errors] and len(started) == 1  # the tab's own words


def test_a_yaml_loaded_on_the_train_tab_keeps_its_max_new_tokens_for_evaluation(app, started):
    """Load YAML (Train tab), then Evaluate: the command has the file's max_new_tokens (it was dropped: the
    Train form has no generation option, and evaluation read only the Train form)."""
    board, demo, root = app
    cfg = root / "train-and-predict.yaml"
    cfg.write_text("model_name_or_path: models/tiny\ntemplate: qwen\ndataset: demo\nmax_new_tokens: 64\n")
    load_btn, path = by_id(demo, "tk-load"), by_id(demo, "tk-config-path")
    shown: dict = {}
    for fn in [f for f in demo.fns.values() if (load_btn._id, "click") in f.targets]:
        out = call(fn, {**inputs(fn), path: str(cfg)})
        shown.update({c: value(v) for c, v in out.items() if not (isinstance(v, dict) and "value" not in v)})
    run = handler(demo, by_id(demo, "tk-eval-btn"))
    data = sent(run, demo.tk_tabs["eval"].forms, shown)
    out = run.fn(data)
    assert "max_new_tokens=64" in out[by_id(demo, "tk-eval-command")]


def test_eval_keeps_max_new_tokens_from_a_loaded_yaml(app, started):
    board, demo, root = app
    ev, train = demo.tk_tabs["eval"], demo.tk_tabs["train"]
    cfg = root / "predict.yaml"
    cfg.write_text(
        "model_name_or_path: models/tiny\nadapter_name_or_path: saves/run\ntemplate: qwen\neval_dataset: demo\n"
        "do_predict: true\nmax_new_tokens: 64\ntemperature: 0.5\noutput_dir: saves/run/predict\n"
    )
    load = handler(demo, ev.load_btn)
    got = load.fn({**inputs(load), ev.config_path: str(cfg)})
    run = handler(demo, ev.run_btn)
    data = sent(run, ev.forms, {c: value(v) for c, v in got.items()})
    out = run.fn(data)
    assert out[ev.errors] == "" and "max_new_tokens=64" in out[ev.command] and "temperature=0.5" in out[ev.command]
    assert started[-1][1] == [
        "model_name_or_path=models/tiny",
        "adapter_name_or_path=saves/run",
        "template=qwen",
        "do_train=false",
        "eval_dataset=demo",
        "do_predict=true",  # the file asks for predictions only
        "output_dir=saves/run/predict",
        "temperature=0.5",
        "max_new_tokens=64",
    ]
    # the Train tab's Load sets the tab's generation options too (the Train form has none)
    follow = handler(demo, train.load_btn, output=ev.gen["max_new_tokens"])
    updates = follow.fn(str(cfg))
    assert value(updates[ev.gen["max_new_tokens"]]) == "64" and value(updates[ev.gen["temperature"]]) == "0.5"


def test_checkpoint_picker_lists_the_runs_checkpoint_folders(app):
    board, demo, root = app
    for name in ("eval", "chat", "export"):
        src = demo.tk_tabs[name].source
        refresh = handler(demo, src.refresh)
        listed = refresh.fn({src.run_dir: "saves/run"})[src.checkpoint]
        assert listed["choices"] == [
            ("checkpoint-2", "saves/run/checkpoint-2"),
            ("checkpoint-10", "saves/run/checkpoint-10"),
            ("checkpoint-100", "saves/run/checkpoint-100"),
        ]
        outside = root.parent / f"{root.name}-elsewhere"
        (outside / "checkpoint-1").mkdir(parents=True, exist_ok=True)
        assert refresh.fn({src.run_dir: str(outside)})[src.checkpoint]["choices"] == []  # not the board's to read
        pick = handler(demo, src.checkpoint, "input")
        adapter = pick.fn({src.checkpoint: "saves/run/checkpoint-100", src.model: "models/tiny"})
        assert adapter == {src.model: "models/tiny", src.adapter: "saves/run/checkpoint-100"}
        whole = pick.fn({src.checkpoint: "saves/run/checkpoint-10", src.model: "models/tiny"})
        assert whole == {src.model: "saves/run/checkpoint-10", src.adapter: ""}  # a full-tuning checkpoint


def test_use_the_train_tabs_copies_its_values(app):
    board, demo, root = app
    train = demo.tk_tabs["train"].form
    values = {
        "model_name_or_path": "models/tiny",
        "template": "qwen",
        "finetuning_type": "lora",
        "output_dir": "saves/run",
        "dataset_dir": "data",
        "dataset": ["demo"],
        "eval_dataset": [],
        "cutoff_len": "512",
    }
    checkpoints = [(f"checkpoint-{n}", f"saves/run/checkpoint-{n}") for n in (2, 10, 100)]
    for name in ("eval", "chat", "export"):
        tab = demo.tk_tabs[name]
        use = handler(demo, tab.source.use_trained)
        out = use.fn(sent(use, [train], {train[k]: v for k, v in values.items()}))
        src = tab.source
        assert (out[src.model], out[src.adapter], out[src.template], out[src.run_dir]) == (
            "models/tiny",
            "saves/run",
            "qwen",
            "saves/run",
        )
        assert out[src.checkpoint]["choices"] == checkpoints
        if name == "eval":
            assert (out[tab.data["dataset_dir"]], out[tab.data["eval_dataset"]], out[tab.data["cutoff_len"]]) == (
                "data",
                ["demo"],
                "512",
            )
    full = dict(values, finetuning_type="full", output_dir="saves/run/checkpoint-10")  # a folder with a model
    use = handler(demo, demo.tk_tabs["chat"].source.use_trained)
    out = use.fn(sent(use, [train], {train[k]: v for k, v in full.items()}))
    src = demo.tk_tabs["chat"].source
    assert (out[src.model], out[src.adapter]) == ("saves/run/checkpoint-10", "")


def test_export_and_verify_run_the_commands_they_show(app, started):
    board, demo, _root = app
    ex, train = demo.tk_tabs["export"], demo.tk_tabs["train"]
    export = handler(demo, ex.export_btn)
    assert not set(export.inputs) & set(train.form.inputs)
    shown = {
        ex.source.model: "models/tiny",
        ex.source.adapter: "saves/run",
        ex.source.template: "qwen",
        ex.form["export_dir"]: "exports/tiny",
        ex.form["export_size"]: "1",
        ex.form["export_legacy_format"]: True,
        ex.form["export_quantization_bit"]: "4",
        ex.form["export_quantization_method"]: "bnb",
        ex.form["export_verify"]: False,
    }
    data = sent(export, [ex.form], shown)
    out = export.fn(data)
    args = [
        "model_name_or_path=models/tiny",
        "adapter_name_or_path=saves/run",
        "template=qwen",
        "export_dir=exports/tiny",
        "export_size=1.0",
        "export_legacy_format=true",
        "export_quantization_bit=4",
        "export_quantization_method=bnb",
        "export_verify=false",
    ]
    assert out[ex.errors] == "" and started == [("export", args, "export")]
    assert shlex.split(out[ex.command]) == ["tunekit", "export", *args]
    verify = handler(demo, ex.verify_btn)
    out = verify.fn(data)
    assert out[ex.command] == "tunekit verify exports/tiny" and started[-1] == ("verify", ["exports/tiny"], "verify")
    refused = verify.fn(sent(verify, [ex.form], {**shown, ex.form["export_dir"]: "/etc"}))
    assert "outside the folders" in refused[ex.errors] and len(started) == 2
    # the quantized-export methods are the schema's, no other
    assert [v for _label, v in ex.form["export_quantization_method"].choices] == ["", "bnb", "gptq"]
    assert [v for _label, v in ex.form["export_quantization_bit"].choices] == ["", "4", "8"]


def test_chat_loads_from_its_own_fields(app, monkeypatch):
    board, demo, _root = app
    chat, train = demo.tk_tabs["chat"], demo.tk_tabs["train"]
    load = handler(demo, chat.load_btn)
    assert not set(load.inputs) & set(train.form.inputs)
    loaded = []
    monkeypatch.setattr(board.chat, "load", lambda cfg: loaded.append(cfg) or cfg.model_name_or_path)
    assert "Use the Train tab" in load.fn(inputs(load))
    shown = {chat.source.model: "models/tiny", chat.source.adapter: "saves/run/checkpoint-2"}
    data = sent(load, [chat.form], {**shown, chat.form["max_new_tokens"]: "24"})
    assert load.fn(data) == "✓ loaded models/tiny"
    cfg = loaded[0]
    assert (cfg.model_name_or_path, cfg.adapter_name_or_path, cfg.max_new_tokens) == (
        "models/tiny",
        "saves/run/checkpoint-2",
        24,
    )
    follow = handler(demo, train.load_btn, output=chat.form["max_new_tokens"])
    assert follow.inputs == [train.config_path]


def test_no_tab_reads_a_run_folder_it_may_not(app):
    _board, demo, root = app
    src = demo.tk_tabs["eval"].source
    pick = handler(demo, src.checkpoint, "input")
    hidden = root / ".secret" / "checkpoint-1"
    hidden.mkdir(parents=True)
    (hidden / "config.json").write_text("{}")
    assert (
        pick.fn({src.checkpoint: str(hidden), src.model: "m"}) == gr.skip()
    )  # hidden folders are refused: nothing set
    refresh = handler(demo, src.refresh)
    assert refresh.fn({src.run_dir: str(hidden.parent)})[src.checkpoint]["choices"] == []


def test_an_evaluation_shows_in_its_own_tab_not_in_the_train_tabs_progress(app, monkeypatch):
    from tunekit.webui.runner import Job

    board, demo, root = app
    ev, ex, train = demo.tk_tabs["eval"], demo.tk_tabs["export"], demo.tk_tabs["train"]
    out_dir = root / "saves" / "eval-done"
    out_dir.mkdir(parents=True)
    (out_dir / "eval_results.json").write_text(json.dumps({"eval_loss": 1.25}))
    log = root / "eval.log"
    log.write_text("$ tunekit train do_train=false\nfinished\n")
    job = Job("train", ["do_train=false"], out_dir, log, kind="eval", returncode=0)
    monkeypatch.setattr(board.runner, "job", job)
    monkeypatch.setattr(board.runner, "last", {"eval": job})
    tick = handler(demo, ev.area.timer, "tick")
    out = tick.fn(inputs(tick))
    assert out[ev.area.results] == board.job_view()["results"] and "1.25" in json.dumps(out[ev.area.results])
    assert "finished" in out[ev.area.status] and "finished" in out[ev.area.log]
    assert out[ev.area.timer].active is False  # the job has ended: the tab stops polling
    other = handler(demo, ex.area.timer, "tick")
    assert set(other.fn(inputs(other))) == {ex.area.timer}  # the Export tab shows only its own jobs
    drawn = {train.progress, train.status, train.loss_plot, train.loss_png, train.log}
    (train_tick,) = [
        f for f in demo.fns.values() if train.progress in f.outputs and "tick" in dict(f.targets).values()
    ]
    shown = train_tick.fn(inputs(train_tick))
    assert isinstance(shown, dict) and not set(shown) & drawn  # nor does the Train tab's progress and chart


# ------------------------------------------------------------------ the rendered page
@pytest.mark.browser
@pytest.mark.timeout(300)
def test_the_evaluate_tab_in_the_browser(tmp_path):
    """Headless Chromium: list a run's checkpoints, pick one (the adapter box takes it), set options of two of the
    tab's forms (each read through its own hidden values, filled from the page's store), preview the command (this
    tab's fields only), and no error toast on the way."""
    skip_without_browser()
    from tunekit.train.engines.launcher import free_port
    from tunekit.webui.app import launch

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dataset_info.json").write_text(json.dumps({"demo": {"file_name": "demo.json"}}))
    (tmp_path / "data" / "demo.json").write_text(json.dumps([{"instruction": "hi", "input": "", "output": "yo"}]))
    for step in (1, 3):
        (tmp_path / "saves" / "run" / f"checkpoint-{step}").mkdir(parents=True)
        (tmp_path / "saves" / "run" / f"checkpoint-{step}" / "adapter_config.json").write_text("{}")
    port = free_port()
    demo = launch("127.0.0.1", port, cwd=tmp_path, block=False)
    try:
        with chromium_page() as pg:
            open_board(pg, f"http://127.0.0.1:{port}/")
            pg.locator("#tk-tabs button[role=tab]", has_text="Evaluate").click()
            pg.locator("#tk-eval-model textarea").fill("models/tiny")
            pg.locator("#tk-eval-run-dir textarea").fill("saves/run")
            pg.locator("#tk-eval-checkpoints-refresh").click()
            box = pg.locator("#tk-eval-checkpoint input[role=combobox]")
            box.click()
            pg.get_by_role("option", name="checkpoint-3", exact=True).first.click()
            pg.wait_for_function(
                "() => document.querySelector('#tk-eval-adapter textarea')?.value === 'saves/run/checkpoint-3'"
            )
            pg.locator("#tk-eval-field-do_predict input[type=checkbox]").check()
            pg.locator("#tk-eval-field-max_new_tokens textarea").fill("32")
            pg.locator("#tk-eval-preview").click()
            pg.wait_for_function(
                "() => document.querySelector('#tk-eval-command')?.innerText.includes('do_train=false')"
            )
            command = pg.locator("#tk-eval-command .cm-content").inner_text()
            assert command.startswith(
                "tunekit train model_name_or_path=models/tiny adapter_name_or_path=saves/run/checkpoint-3 "
                "do_train=false do_eval=true do_predict=true max_new_tokens=32 output_dir=saves/tiny/lora/eval_"
            )  # (the output folder left empty: a fresh one, added last)
            assert pg.locator(".toast-body").count() == 0
    finally:
        demo.close()
