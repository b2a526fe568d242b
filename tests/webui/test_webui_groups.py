"""The Train tab's tutorial groups (LLaMA Board's, in its order): labels in words with the option name beside them,
each group shown only where it applies (handler-level updates on a stage / method / template / optimizer change),
and DeepSpeed offered as a choice whose value is the option's exact value in the command preview."""

from __future__ import annotations

import pytest

from tests.browser_helpers import board_process, chromium_page, open_board, pick, skip_without_browser
from tunekit.config import iter_fields
from tunekit.webui.groups import TUTORIAL_GROUPS
from tunekit.webui.labels import LABELS

gr = pytest.importorskip("gradio")

LF_ORDER = [
    "model",
    "data",
    "stage",
    "method",
    "quantization",
    "acceleration",
    "rope",
    "general",
    "other",
    "freeze",
    "lora",
    "rlhf",
    "multimodal",
    "galore",
    "apollo",
    "badam",
    "output",
    "trackers",
]


@pytest.fixture(scope="module")
def demo():
    from tunekit.webui.app import create_app

    return create_app()


def _handler(demo, component, event: str = "change", name: str | None = None):
    """The function Gradio runs for ``event`` of ``component`` (named ``name`` when several listen)."""
    found = [
        fn
        for fn in demo.fns.values()
        if any(target[0] == component._id and target[1] == event for target in fn.targets)
        and (name is None or getattr(fn.fn, "__name__", "") == name)
    ]
    assert len(found) == 1, f"{len(found)} handlers for {event} of {component.elem_id}"
    return found[0]


def _form_data(demo, **changes):
    """``{component: value}`` of the Train form at its defaults, with ``changes``."""
    form = demo.tk_forms["train"]
    values = dict(demo.tk_board.defaults(), **changes)
    return {comp: values[name] for name, comp in form.comps.items()}


def _shown(updates, form) -> dict[str, bool]:
    return {g.name: updates[acc]["visible"] for acc, g, _specs in form.groups}


def test_the_groups_come_first_in_llama_boards_order_and_advanced_holds_the_rest(demo):
    form = demo.tk_forms["train"]
    assert [g.name for _acc, g, _specs in form.groups] == LF_ORDER
    assert [acc.elem_id for acc, _g, _specs in form.groups] == [f"tk-group-{n}" for n in LF_ORDER]
    assert [acc.label for acc, _g, _specs in form.groups][:4] == [
        "Base model",
        "Data",
        "Training stage",
        "Finetuning method",
    ]
    grouped = [s.name for _acc, _g, specs in form.groups for s in specs]
    assert list(form.comps)[: len(grouped)] == grouped  # the groups' widgets first, the Advanced ones after
    assert "learning_rate" in grouped and "lora_rank" in grouped and "deepspeed" in grouped
    in_advanced = {s.name for _acc, _name, specs in form.accordions for s in specs}
    assert not in_advanced & set(grouped) and {"fsdp", "weight_decay", "adam_beta1"} <= in_advanced


def test_english_labels_are_words_with_the_option_name_beside_them(demo):
    for tab_form in demo.tk_forms.values():
        for name, widget in tab_form.comps.items():
            assert widget.label == LABELS[name][0], name
            assert "_" not in widget.label and widget.label != name, widget.label
            assert widget.info.startswith(f"`{name}` · "), widget.info
    form = demo.tk_forms["train"]
    assert form["learning_rate"].label == "Learning rate"
    assert form["learning_rate"].info == "`learning_rate` · Peak learning rate. [default: 5e-05]"
    assert form["lora_rank"].label == "LoRA rank" and form["per_device_train_batch_size"].label == (
        "Batch size per device"
    )
    assert form["weight_decay"].label == "Weight decay"  # under Advanced: words too


def test_groups_start_shown_where_the_defaults_apply(demo):
    form = demo.tk_forms["train"]
    shown = {g.name: acc.visible for acc, g, _specs in form.groups}
    assert shown == {
        name: name not in ("freeze", "rlhf", "multimodal", "galore", "apollo", "badam") for name in LF_ORDER
    }


def test_a_method_change_swaps_the_lora_and_freeze_groups(demo):
    form = demo.tk_forms["train"]
    handler = _handler(demo, form["finetuning_type"], name="on_group_switch")
    assert getattr(handler.fn, "__wrapped__", handler.fn) == form.on_group_switch
    assert {demo.blocks[t[0]].elem_id for t in handler.targets} >= {
        "tk-field-finetuning_type",
        "tk-field-stage",
        "tk-field-template",
        "tk-field-use_galore",
    }
    shown = _shown(handler.fn(_form_data(demo, finetuning_type="freeze")), form)
    assert (shown["lora"], shown["freeze"]) == (False, True)
    shown = _shown(handler.fn(_form_data(demo, finetuning_type="full")), form)
    assert (shown["lora"], shown["freeze"]) == (False, False)
    shown = _shown(handler.fn(_form_data(demo)), form)
    assert (shown["lora"], shown["freeze"]) == (True, False)
    # an option set away from its default keeps its group in sight (the rule that refuses it names that field)
    shown = _shown(handler.fn(_form_data(demo, finetuning_type="full", lora_rank="16")), form)
    assert (shown["lora"], shown["freeze"]) == (True, False)


@pytest.mark.parametrize(
    "stage, rlhf", [("sft", False), ("pt", False), ("rm", True), ("ppo", True), ("dpo", True), ("kto", True)]
)
def test_the_rlhf_group_is_shown_for_the_preference_and_rl_stages(demo, stage, rlhf):
    form = demo.tk_forms["train"]
    shown = _shown(form.on_group_switch(_form_data(demo, stage=stage)), form)
    assert shown["rlhf"] is rlhf
    assert shown["lora"] and shown["general"] and not shown["freeze"]


def test_multimodal_for_a_vision_template_and_optimizer_groups_for_their_switch(demo):
    form = demo.tk_forms["train"]
    switch = form.on_group_switch
    assert _shown(switch(_form_data(demo, template="qwen")), form)["multimodal"] is False
    assert _shown(switch(_form_data(demo, template="qwen2_vl")), form)["multimodal"] is True
    for name in ("galore", "apollo", "badam"):
        shown = _shown(switch(_form_data(demo, **{f"use_{name}": True})), form)
        assert [g for g in ("galore", "apollo", "badam") if shown[g]] == [name]


def test_deepspeed_is_a_choice_of_presets_and_the_preview_names_the_exact_value(demo, tmp_path):
    form = demo.tk_forms["train"]
    widget = form["deepspeed"]
    assert isinstance(widget, gr.Dropdown)
    assert widget.choices == [
        ("none", ""),
        ("stage 2", "z2"),
        ("stage 3", "z3"),
        ("stage 2 + offload to CPU", "z2_offload"),
        ("stage 3 + offload to CPU", "z3_offload"),
    ]
    assert widget.value == "" and widget.allow_custom_value  # a JSON file loaded from a YAML stays accepted
    picked = dict(widget.choices)["stage 3 + offload to CPU"]
    preview = _handler(demo, demo.tk_tabs["train"].preview_btn, "click", name="on_preview")
    data = _form_data(demo, deepspeed=picked, model_name_or_path="Qwen/Qwen2.5-0.5B", output_dir="saves/ds")
    data[_lang(demo)] = "en"
    out = preview.fn(data)
    command = out[demo.tk_tabs["train"].command]
    assert "deepspeed=z3_offload" in command.split()
    assert "deepspeed: z3_offload" in out[demo.tk_tabs["train"].yaml]
    out = preview.fn({**data, form["deepspeed"]: ""})
    assert "deepspeed" not in out[demo.tk_tabs["train"].command]


def _lang(demo):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "tk-lang")


def test_every_option_has_words_in_both_languages():
    grouped = [n for g in TUTORIAL_GROUPS for n in g.options]
    assert len(grouped) == len(set(grouped)), "an option in two groups"
    names = [name for _group, name, _info in iter_fields()]
    assert set(grouped) <= set(names)
    missing = [n for n in names if n not in LABELS or not all(LABELS[n])]
    assert not missing, f"options without a label in src/tunekit/webui/labels.py: {', '.join(missing)}"
    assert sorted(set(LABELS) - set(names)) == [], "labels of options that do not exist"
    raw = [n for n, (en, _zh) in LABELS.items() if "_" in en or en == n]
    assert not raw, f"labels that are option names, not words: {raw}"


# ------------------------------------------------------------------ the same, on the rendered page
@pytest.fixture
def page_url(tmp_path):
    skip_without_browser()
    with board_process(tmp_path) as url:
        yield url


@pytest.mark.browser
@pytest.mark.slow
def test_the_page_shows_groups_where_they_apply_in_both_languages(page_url):
    with chromium_page() as pg:
        open_board(pg, page_url)
        pg.wait_for_selector("#tk-group-lora")
        assert not pg.locator("#tk-group-freeze").is_visible()
        lr = pg.locator("#tk-field-learning_rate")
        assert "Learning rate" in lr.inner_text()
        assert lr.locator("code").first.inner_text() == "learning_rate"  # the name, small, beside the label
        pick(pg, "finetuning_type", "freeze", type_first=False)
        pg.wait_for_selector("#tk-group-freeze", state="visible")
        pg.wait_for_selector("#tk-group-lora", state="hidden")
        pick(pg, "deepspeed", "stage 3 + offload to CPU", type_first=False)
        pg.locator("#tk-preview").click()
        pg.wait_for_function("() => document.querySelector('#tk-command')?.innerText.includes('deepspeed=')")
        assert "deepspeed=z3_offload" in pg.locator("#tk-command .cm-content").inner_text().split()
        pg.locator("#tk-lang label", has_text="中文").click()
        pg.wait_for_function("() => document.querySelector('#tk-field-learning_rate')?.innerText.includes('学习率')")
        assert "冻结" in pg.locator("#tk-group-freeze").inner_text()
