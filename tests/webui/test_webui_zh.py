"""The Chinese board: every visible string of the forms (labels, help lines, group and section titles, choices'
words) is Chinese, apart from option names, values, paths and the names of tools and methods (LoRA, DeepSpeed).

A string is split into words; the check (``tests/zh_words.py``) passes a word that is an option name or value, code,
a single letter or one of its ``TERMS``. Everything else is English a Chinese reader was not given in Chinese.

The walks below cover the forms, every tab of the rendered Chinese page, what a switch to Chinese sends, the memory
plan panel after a real plan and the live charts' legend."""

from __future__ import annotations

import re

import pytest

from tests.zh_words import allowed_values as _allowed_values
from tests.zh_words import untranslated
from tunekit.config import iter_fields

gr = pytest.importorskip("gradio")


def _form_strings(demo) -> list[tuple[str, str]]:
    """(where, text) of every string a form shows: titles, labels, help lines, choices' words."""
    out = []
    for tab, form in demo.tk_forms.items():
        for acc, name, _specs in form.accordions:
            out.append((f"{tab}: section {name}", acc.label))
        if form.advanced is not None:
            out.append((f"{tab}: advanced", form.advanced.label))
        for name, widget in form.comps.items():
            out.append((f"{tab}: {name} label", widget.label))
            out.append((f"{tab}: {name} help", widget.info))
            for shown, value in getattr(widget, "choices", None) or []:
                if shown != value:
                    out.append((f"{tab}: {name} choice {value!r}", shown))
    return out


@pytest.fixture(scope="module")
def zh_board():
    from tunekit.webui.app import create_app

    return create_app(lang="zh")


def test_the_chinese_forms_show_no_untranslated_english(zh_board):
    allowed = {name for _g, name, _i in iter_fields()} | _allowed_values()
    found = [(where, text, words) for where, text in _form_strings(zh_board) if (words := untranslated(text, allowed))]
    assert not found, "English left in the Chinese board:\n" + "\n".join(
        f"  {where}: {words} in {text!r}" for where, text, words in found[:40]
    )
    assert len(_form_strings(zh_board)) > 500  # the walk saw the whole form


def test_the_chinese_board_labels_options_in_words_and_help_says_default_in_chinese(zh_board):
    form = zh_board.tk_forms["train"]
    assert form["learning_rate"].label == "学习率"
    assert form["learning_rate"].info == "`learning_rate` · 峰值学习率。 [默认: 5e-05]"
    assert form["num_train_epochs"].label == "训练轮数" and form["lora_rank"].label == "LoRA 秩"
    assert [acc.label for acc, _g, _specs in form.groups][:4] == ["基座模型", "数据", "训练阶段", "微调方法"]
    assert dict(form["deepspeed"].choices)["阶段 3 + 卸载到 CPU"] == "z3_offload"
    assert dict(form["deepspeed"].choices)["不使用"] == ""
    assert ("（无）", "") in form["quantization_bit"].choices and ("（自动）", "") in form["tf32"].choices


def test_the_checker_finds_english(zh_board):
    """The check itself: an English help line or label is caught, option names and values are not."""
    allowed = {"learning_rate", "cosine"}
    assert untranslated("Peak learning rate.", allowed) == ["Peak", "learning", "rate"]
    assert untranslated("`learning_rate` · 学习率 cosine LoRA bf16 z3_offload saves/run", allowed) == []
    assert untranslated("(none)", allowed) == ["none"]  # the English word for unset


def test_the_language_switch_relabels_options_and_choices():
    from tunekit.webui.app import create_app

    form = create_app(lang="en").tk_forms["train"]
    updates = dict(zip(form.specs, form.updates(lang="zh", labels=True)))
    by_name = {s.name: u for s, u in updates.items()}
    assert by_name["learning_rate"]["label"] == "学习率"
    assert by_name["learning_rate"]["info"] == "`learning_rate` · 峰值学习率。 [默认: 5e-05]"
    assert by_name["weight_decay"]["label"] == "权重衰减"
    assert ("阶段 2", "z2") in by_name["deepspeed"]["choices"]
    back = {s.name: u for s, u in zip(form.specs, form.updates(lang="en", labels=True))}
    assert back["learning_rate"]["label"] == "Learning rate" and ("stage 2", "z2") in back["deepspeed"]["choices"]


# ------------------------------------------------------------------ every tab, the plan panel, the language switch
SHOWN = ("label", "info", "placeholder", "x_title", "y_title")  # a component's words (its value is data)
WORDED = (gr.Button, gr.Markdown, gr.HTML)  # components whose value is the board's words, not data


def _allowed() -> set[str]:
    from tunekit.webui import backend as adapters

    names = {name for _g, name, _i in iter_fields()} | _allowed_values() | set(adapters.template_names())
    return names | {w for gpu in adapters.gpu_choices() for w in gpu.split()} | {"GiB"}  # GPU names are values


def _shown_text(value) -> str:
    return re.sub(r"<[^>]*>", " ", value) if isinstance(value, str) else ""


def _page_strings(demo) -> list[tuple[str, str]]:
    """(where, text) of every string the rendered page shows in any tab: labels, help lines, titles, choices'
    words, buttons, Markdown and HTML (the language picker, which names both languages, left out)."""
    out = []
    for block in demo.blocks.values():
        where = f"{type(block).__name__} {getattr(block, 'elem_id', None) or block._id}"
        if getattr(block, "elem_id", None) == "tk-lang":
            continue
        out += [(f"{where} {prop}", text) for prop in SHOWN if isinstance(text := getattr(block, prop, None), str)]
        if isinstance(block, WORDED):
            out.append((f"{where} value", _shown_text(block.value)))
        for choice in getattr(block, "choices", None) or []:
            if isinstance(choice, (tuple, list)) and choice[0] != choice[1]:
                out.append((f"{where} choice {choice[1]!r}", str(choice[0])))
        out += [(f"{where} legend", str(key)) for key in getattr(block, "color_map", None) or {}]
    return out


def _untranslated_in(strings: list[tuple[str, str]]) -> list[str]:
    allowed = _allowed()
    return [f"{where}: {words} in {text!r}" for where, text in strings if (words := untranslated(text, allowed))]


def test_every_tab_rendered_in_chinese_shows_no_untranslated_english(zh_board):
    found = _untranslated_in(_page_strings(zh_board))
    assert not found, "English left on the Chinese page:\n" + "\n".join(found[:40])
    shown = dict(_page_strings(zh_board))
    assert shown["LinePlot tk-loss-plot x_title"] == "步数" and shown["LinePlot tk-loss-plot y_title"] == "损失"
    assert shown["Dropdown tk-chat-template choice ''"] == "（无）"
    assert ("HighlightedText tk-samples-out legend", "参与训练") in _page_strings(zh_board)


def _lang_handlers(demo):
    radio = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "tk-lang")
    return radio, [f for f in demo.fns.values() if (radio._id, "change") in f.targets]


def _updates(block_fn, answer) -> list[tuple[object, dict]]:
    """(component, its update's props) of a handler's answer."""
    if len(block_fn.outputs) == 1 and not (isinstance(answer, dict) and block_fn.outputs[0] in answer):
        answer = [answer]  # one output: the answer is its update
    pairs = answer.items() if isinstance(answer, dict) else zip(block_fn.outputs, answer)
    out = []
    for comp, update in pairs:
        if isinstance(update, dict):
            out.append((comp, update))
        elif isinstance(update, gr.components.Component):  # a component returned as its update: what it was given
            props = (*SHOWN, "choices", "color_map")
            out.append((comp, {p: getattr(update, p) for p in props if getattr(update, p, None)}))
        else:  # a plain value: the value itself
            out.append((comp, {"value": update}))
    return out


def test_the_language_switch_leaves_no_english_behind():
    """An English page switched to Chinese: every update the switch sends (labels, help, choices such as a template
    picker's "(none)", the charts' axis titles) is Chinese."""
    from tunekit.webui.app import create_app

    demo = create_app(lang="en")
    radio, handlers = _lang_handlers(demo)
    strings = []
    for block_fn in handlers:
        data = {c: getattr(c, "value", None) for c in block_fn.inputs} | {radio: "zh"}
        answer = block_fn.fn(data) if block_fn.inputs_as_dict else block_fn.fn(*[data[c] for c in block_fn.inputs])
        for comp, props in _updates(block_fn, answer):
            where = getattr(comp, "elem_id", None) or comp._id
            strings += [(f"{where} {p}", props[p]) for p in SHOWN if isinstance(props.get(p), str)]
            if isinstance(comp, WORDED) and isinstance(props.get("value"), str):
                strings.append((f"{where} value", _shown_text(props["value"])))
            strings += [(f"{where} choice", str(c[0])) for c in props.get("choices") or () if c[0] != c[1]]
            strings += [(f"{where} legend", str(key)) for key in props.get("color_map") or {}]
    found = _untranslated_in(strings)
    assert not found, "English left after switching to Chinese:\n" + "\n".join(found[:40])
    by_where = dict(strings)
    assert by_where["tk-loss-plot x_title"] == "步数" and by_where["tk-lr-plot y_title"] == "学习率"
    assert ("tk-eval-template choice", "（无）") in strings and ("tk-field-template choice", "（无）") in strings
    assert ("tk-samples-out legend", "参与训练") in strings and ("tk-samples-out legend", "媒体") in strings


def test_the_language_switch_rewords_all_that_the_chinese_page_words_otherwise():
    """Whatever a page built in Chinese words differently from one built in English (labels, help, choices such as
    the plan's "this machine", the board's own texts) is what the switch must send: an English page switched to
    Chinese then shows what a Chinese page shows."""
    from tunekit.webui.app import create_app

    en, zh = create_app(lang="en"), create_app(lang="zh")
    radio, handlers = _lang_handlers(en)
    sent: dict[int, set] = {}
    for block_fn in handlers:
        data = {c: getattr(c, "value", None) for c in block_fn.inputs} | {radio: "zh"}
        answer = block_fn.fn(data) if block_fn.inputs_as_dict else block_fn.fn(*[data[c] for c in block_fn.inputs])
        for comp, props in _updates(block_fn, answer):
            sent.setdefault(comp._id, set()).update(props)
    missed = []
    for a, b in zip(en.blocks.values(), zh.blocks.values(), strict=True):
        props = (*SHOWN, "choices", *(("value",) if isinstance(a, WORDED) else ()))
        for prop in props:
            if getattr(a, prop, None) != getattr(b, prop, None) and prop not in sent.get(a._id, ()):
                missed.append(f"{getattr(a, 'elem_id', None) or type(a).__name__} {prop}: {getattr(a, prop)!r:.60}")
    assert missed == []


@pytest.fixture(scope="module")
def planned(tiny_qwen, tmp_path_factory):
    """A board whose workspace holds the tiny model and a small dataset, and its plan handler."""
    import json

    from tunekit.webui.app import create_app
    from tunekit.webui.board import Board
    from tunekit.webui.paths import PathPolicy

    root = tmp_path_factory.mktemp("zh-plan")
    (root / "data").mkdir()
    rows = [{"instruction": f"Say hello to {i}", "input": "", "output": f"Hello, {i}!"} for i in range(20)]
    (root / "data" / "demo.json").write_text(json.dumps(rows))
    (root / "data" / "dataset_info.json").write_text(json.dumps({"demo": {"file_name": "demo.json"}}))
    board = Board(cwd=root, policy=PathPolicy(root, allow=[tiny_qwen]))
    demo = create_app(board, lang="zh")
    train = demo.tk_tabs["train"]
    on_plan = next(f for f in demo.fns.values() if f.name == "on_plan")  # after an edit's check, or the plan's own
    form = {
        "model_name_or_path": str(tiny_qwen),
        "template": "qwen",
        "dataset_dir": str(root / "data"),
        "dataset": ["demo"],
        "cutoff_len": "64",
    }
    return demo, train, on_plan, form


def _plan_panel(planned, gpu: str, lang: str) -> str:
    demo, train, on_plan, form = planned
    radio, _ = _lang_handlers(demo)
    data = {c: getattr(c, "value", None) for c in on_plan.inputs}
    data.update({train.form[k]: v for k, v in form.items()} | {train.gpu: gpu, train.gpus: 1, radio: lang})
    return on_plan.fn(data)


@pytest.mark.parametrize("gpu", ["", "A100-80GB"], ids=["memory-only", "gpu"])
def test_the_memory_plan_panel_is_chinese_on_the_chinese_board(planned, gpu):
    """The plan beside the form after a plan, for the tiny model and data: every line in Chinese (numbers, option
    names, values and paths as they are), the planner's notes said again; the same panel in English is English."""
    from tunekit.webui import backend as adapters

    if gpu and gpu not in adapters.gpu_choices():
        pytest.skip(f"{gpu} is not in the planner's GPU table")
    zh, en = _plan_panel(planned, gpu, "zh"), _plan_panel(planned, gpu, "en")
    assert "⚠" not in zh and "- " in zh, zh  # a plan, with notes (each said from its key: test_plan_panel_notes.py)
    found = untranslated(zh, _allowed())
    assert not found, f"English left in the Chinese plan panel: {found}\n{zh}"
    assert untranslated(en, _allowed())  # the check sees the English panel's words
    assert "总步数" in zh and "| 组成部分 | GiB |" in zh and "| 运行时开销 |" in zh
    if gpu:
        assert zh.startswith("### ✓ 显存够用 — ") and en.startswith("### ✓ fits — ")


def test_the_live_charts_legend_follows_the_language():
    """The loss chart's series are named in the page's words (the legend), coloured as in English."""
    from tunekit.webui.monitor import loss_frame, lr_frame
    from tunekit.webui.tabs.train_live import chart_data

    records = [{"step": 1, "loss": 2.0, "lr": 1e-3}, {"step": 2, "eval_loss": 1.5}, {"step": 2, "loss": 1.75}]
    view = {"chart": loss_frame(records), "lr_chart": lr_frame(records), "total": 4}
    zh, en = chart_data({**view, "lang": "zh"})["loss_plot"], chart_data({**view, "lang": "en"})["loss_plot"]
    assert list(zh["value"]["series"]) == ["损失", "损失", "验证损失"]
    assert list(en["value"]["series"]) == ["loss", "loss", "eval_loss"]
    assert zh["color_map"] == {"损失": "#1f77b4", "验证损失": "#ff7f0e"} and zh["x_lim"] == [0, 4]
    assert list(zh["value"]["value"]) == [2.0, 1.75, 1.5] == list(en["value"]["value"])


def test_the_sample_preview_names_its_pieces_in_chinese(planned):
    """The preview's highlighted pieces carry the legend's Chinese words (参与训练: the trained tokens)."""
    demo, train, _on_plan, form = planned
    radio, _ = _lang_handlers(demo)
    (on_samples,) = [f for f in demo.fns.values() if f.name == "on_samples"]
    data = {c: getattr(c, "value", None) for c in on_samples.inputs}
    data.update({train.form[k]: v for k, v in form.items()} | {train.samples_n: 1, radio: "zh"})
    pieces = on_samples.fn(data)[train.samples_out]
    assert {label for _text, label in pieces} == {None, "参与训练"}
    assert "".join(text for text, label in pieces if label) == "Hello, 0!<|im_end|>"
