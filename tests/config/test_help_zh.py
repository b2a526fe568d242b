"""The board's Chinese mode is complete: every option has Chinese help in config/help_zh.py and every
section of every tab a Chinese title; the board shows that text, not the English description."""

from __future__ import annotations

import re

import pytest

from tunekit.config import iter_fields
from tunekit.config.help_zh import HELP_ZH
from tunekit.webui.fields import field_specs
from tunekit.webui.i18n import TEXT, field_help
from tunekit.webui.sections import section_title, sections

CJK = re.compile(r"[\u4e00-\u9fff]")


def test_every_option_has_chinese_help():
    names = [name for _group, name, _info in iter_fields()]
    missing = [n for n in names if not HELP_ZH.get(n)]
    assert not missing, f"options without Chinese help in src/tunekit/config/help_zh.py: {', '.join(missing)}"
    not_chinese = [n for n in names if not CJK.search(HELP_ZH[n])]
    assert not not_chinese, f"Chinese help holds no Chinese text: {', '.join(not_chinese)}"
    stale = sorted(set(HELP_ZH) - set(names))
    assert not stale, f"help_zh.py has entries for options that do not exist: {', '.join(stale)}"


def test_every_section_has_a_chinese_title():
    specs = field_specs()
    missing = [
        f"sec_{name}"
        for tab in ("train", "chat", "export")
        for name in sections(specs, tab)
        if "zh" not in TEXT.get(f"sec_{name}", {})
    ]
    assert not missing, f"sections without a Chinese title in src/tunekit/webui/i18n.py TEXT: {', '.join(missing)}"
    assert section_title("lora", [], "zh") == "LoRA 参数"


def test_the_board_shows_the_table_in_chinese_and_the_description_in_english():
    assert field_help("learning_rate", "Peak learning rate.", "zh") == "峰值学习率。"
    assert field_help("learning_rate", "Peak learning rate.", "en") == "Peak learning rate."
    gr = pytest.importorskip("gradio")
    from tunekit.webui.form import FormView

    specs = [s for s in field_specs() if s.name in ("learning_rate", "cutoff_len")]
    with gr.Blocks():
        view = FormView(specs)
        view.render("zh", "train")
    assert view["learning_rate"].info == "`learning_rate` · 峰值学习率。 [默认: 5e-05]"
    assert view["cutoff_len"].info == "`cutoff_len` · 每个样本的最大 token 数，超出部分截断。 [默认: 2048]"
