"""The board split by tab: the basic fields first, everything else under a closed "Advanced" accordion,
the template picked from a model folder that ships a chat template, named (not positional) handler state."""

from __future__ import annotations

import json

import pytest

from tunekit.config import Config
from tunekit.webui.board import Board
from tunekit.webui.sections import BASIC_FIELDS

gr = pytest.importorskip("gradio")


def test_basic_fields_first_and_the_rest_under_a_closed_advanced_accordion():
    from tunekit.webui.app import create_app

    demo = create_app()
    form = demo.tk_forms["train"]
    assert list(form.comps)[: len(BASIC_FIELDS)] == list(BASIC_FIELDS)
    assert form.advanced is not None and form.advanced.open is False and form.advanced.label.startswith("Advanced")
    in_sections = [s.name for _acc, _name, specs in form.accordions for s in specs]
    assert not set(in_sections) & set(BASIC_FIELDS)
    names = [n for f in demo.tk_forms.values() for n in f.comps]
    assert sorted(names) == sorted(Config.model_fields)  # every option still has exactly one widget
    assert form["lora_rank"].info.startswith("`lora_rank` · LoRA rank")


def test_chinese_board_labels_the_advanced_section_and_the_help():
    from tunekit.webui.app import create_app

    form = create_app(lang="zh").tk_forms["train"]
    assert form.advanced.label == "高级（其余全部参数）"
    assert form["learning_rate"].info == "`learning_rate` · 峰值学习率。 [默认: 5e-05]"


def test_read_map_addresses_widgets_by_name():
    from tunekit.webui.fields import field_specs
    from tunekit.webui.form import FormView

    specs = [s for s in field_specs() if s.name in ("learning_rate", "cutoff_len", "template")]
    with gr.Blocks():
        view = FormView(specs)
        view.render("en", "train", basic=("cutoff_len",))
    data = {view["template"]: "qwen", view["learning_rate"]: "1e-4", view["cutoff_len"]: "512", object(): "other"}
    assert view.read_map(data) == {"template": "qwen", "learning_rate": "1e-4", "cutoff_len": "512"}
    assert list(view.comps) == ["cutoff_len", "template", "learning_rate"]


def test_template_from_the_model_folder(tmp_path):
    board = Board(cwd=tmp_path)
    with_template = tmp_path / "chatty"
    with_template.mkdir()
    (with_template / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    jinja_file = tmp_path / "jinja-file"
    jinja_file.mkdir()
    (jinja_file / "chat_template.jinja").write_text("{{ messages }}")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512}))
    assert [board.model_chat_template(str(p)) for p in (with_template, jinja_file, plain)] == [True, True, False]
    assert board.model_chat_template(None) is False
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "tokenizer_config.json").write_text(json.dumps({"chat_template": "x"}))
    assert board.model_chat_template(str(outside)) is False  # outside the allowed roots: not even read
