"""The Train tab's model and data pickers and its Start gate, through the handlers Gradio calls.

Datasets are listed when the page opens, filtered by the stage (and by the model's media), each with its rows and
format; a dataset cannot be picked twice; a local model folder suggests its family's template and says so; Start is
off, with the reason beside it, until the config is valid and has a model and a fitting dataset; the sample preview
marks the trained tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.browser_helpers import chromium_page, open_board, skip_without_browser
from tunekit.webui.board import Board
from tunekit.webui.paths import PathPolicy

gr = pytest.importorskip("gradio")

QWEN2 = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
QWEN2_VL = {"model_type": "qwen2_vl", "architectures": ["Qwen2VLForConditionalGeneration"], "vision_config": {}}
PHI3 = {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"]}


def _model(root: Path, name: str, config: dict, chat_template: str | None = None) -> str:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    if chat_template:
        (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": chat_template}))
    return str(folder)


def _handler(demo, name: str, target=None, event: str = "change"):
    """The one handler called ``name`` (listening to ``target``'s ``event`` when given; "load": the page's)."""
    found = [f for f in demo.fns.values() if name in (f.name, getattr(f.fn, "__name__", ""))]
    if event == "load":
        found = [f for f in found if any(e == "load" for _b, e in f.targets)]
    (fn,) = [f for f in found if target is None or (target._id, event) in f.targets]
    return fn


def _call(fn, values: dict[Any, Any]):
    """The handler's answer to its inputs' initial values with ``values`` (component → value) set over them."""
    return fn.fn({**{c: getattr(c, "value", None) for c in fn.inputs}, **values})


def _lang(fn):
    return next(c for c in fn.inputs if getattr(c, "elem_id", None) == "tk-lang")


@pytest.fixture
def app(tmp_path, reference_data):
    """The board on a workspace whose data/ folder is LLaMA-Factory's demo data (a link: resolved, then allowed)."""
    from tunekit.webui.app import create_app

    (tmp_path / "data").symlink_to(reference_data)
    board = Board(cwd=tmp_path, policy=PathPolicy(tmp_path, caches=[], allow=[reference_data]))
    demo = create_app(board)
    return demo, demo.tk_forms["train"], demo.tk_tabs["train"]


def _choices(demo, form, lang: str = "en", **values) -> list[tuple[str, str]]:
    fn = _handler(demo, "on_dataset_list", event="load")
    out = _call(fn, {_lang(fn): lang, **{form[k]: v for k, v in values.items()}})
    assert out[form["eval_dataset"]]["choices"] == out[form["dataset"]]["choices"]
    return [tuple(c) for c in out[form["dataset"]]["choices"]]


# LLaMA-Factory's demo data folder (tests/helpers.py REFERENCE_DATA), as the pickers list it for a text model: the
# local files first, rows counted (by grep: 999 alpaca_en_demo records), then the hub datasets ("?" rows) in the file's
# order; wikiqa ("wiki_qa", a hub id without a namespace) is refused by the board, so never offered.
PLAIN_LOCAL = [
    ("identity · 91 rows · alpaca", "identity"),
    ("alpaca_en_demo · 999 rows · alpaca", "alpaca_en_demo"),
    ("alpaca_zh_demo · 1,000 rows · alpaca", "alpaca_zh_demo"),
    ("glaive_toolcall_en_demo · 300 rows · sharegpt", "glaive_toolcall_en_demo"),
    ("glaive_toolcall_zh_demo · 300 rows · sharegpt", "glaive_toolcall_zh_demo"),
]
SHAREGPT_HUB = {
    "glaive_toolcall_en",
    "glaive_toolcall_zh",
    "lima",
    "slimorca",
    "sharegpt_hyper",
    "sharegpt4",
    "sgsc_b2b_entities",
    "ultrachat_200k",
    "infinity_instruct",
    "agent_instruct",
    "lmsys_chat",
    "evol_instruct",
    "glaive_toolcall_100k",
    "neo_sft",
    "magpie_pro_300k",
    "open_thoughts",
    "open_r1_math",
}
PLAIN_HUB = [
    "alpaca_en",
    "alpaca_zh",
    "alpaca_gpt4_en",
    "alpaca_gpt4_zh",
    "glaive_toolcall_en",
    "glaive_toolcall_zh",
    "lima",
    "guanaco",
    "belle_2m",
    "belle_1m",
    "belle_0.5m",
    "belle_dialog",
    "belle_math",
    "open_platypus",
    "codealpaca",
    "alpaca_cot",
    "openorca",
    "slimorca",
    "mathinstruct",
    "firefly",
    "webqa",
    "webnovel",
    "nectar_sft",
    "deepctrl",
    "adgen_train",
    "adgen_eval",
    "sharegpt_hyper",
    "sharegpt4",
    "sgsc_b2b_entities",
    "ultrachat_200k",
    "infinity_instruct",
    "agent_instruct",
    "lmsys_chat",
    "evol_instruct",
    "glaive_toolcall_100k",
    "cosmopedia",
    "stem_zh",
    "ruozhiba_gpt4",
    "neo_sft",
    "magpie_pro_300k",
    "magpie_ultra",
    "web_instruct",
    "openo1_sft",
    "open_thoughts",
    "open_r1_math",
    "chinese_r1_distill",
    "oasst_de",
    "dolly_15k_de",
    "alpaca-gpt4_de",
    "openschnabeltier_de",
    "evol_instruct_de",
    "dolphin_de",
    "booksum_de",
    "airoboros_de",
    "ultrachat_de",
    "dlr_web",
]
TEXT_HUB = [
    "refinedweb",
    "redpajama_v2",
    "wikipedia_en",
    "wikipedia_zh",
    "pile",
    "skypile",
    "fineweb",
    "fineweb_edu",
    "cci3_hq",
    "cci3_data",
    "cci4_base",
    "cci4_cot",
    "cci4_extra",
    "the_stack",
    "starcoder_python",
]


def _hub(names, kinds: str | None = None) -> list[tuple[str, str]]:
    return [(f"{n} · ? rows · {kinds or ('sharegpt' if n in SHAREGPT_HUB else 'alpaca')}", n) for n in names]


PLAIN = PLAIN_LOCAL + _hub(PLAIN_HUB)
PAIRS = [
    ("dpo_en_demo · 300 rows · sharegpt, ranking", "dpo_en_demo"),
    ("dpo_zh_demo · 300 rows · sharegpt, ranking", "dpo_zh_demo"),
    *_hub(["dpo_mix_en", "dpo_mix_zh"], "sharegpt, ranking"),
    *_hub(["ultrafeedback"], "alpaca, ranking"),
    *_hub(["coig_p"], "sharegpt, ranking"),
    *_hub(["orca_pairs", "nectar_rm", "orca_dpo_de"], "alpaca, ranking"),
]
EXPECTED = {
    "sft": PLAIN,
    "ppo": PLAIN,
    "grpo": PLAIN,
    "pt": PLAIN_LOCAL
    + [("wiki_demo · 30 rows · text", "wiki_demo"), ("c4_demo · 300 rows · text", "c4_demo")]
    + _hub(PLAIN_HUB)
    + _hub(TEXT_HUB, "text"),
    "rm": PAIRS,
    "dpo": PAIRS,
    "kto": [
        ("kto_en_demo · 300 rows · sharegpt, kto", "kto_en_demo"),
        *_hub(["kto_mix_en"], "sharegpt, kto"),
        *_hub(["ultrafeedback_kto"], "alpaca, kto"),
    ],
}


def test_the_datasets_are_listed_when_the_page_opens(app):
    """The listing runs on page load (and on each change of the data folder, stage, model, template, language)."""
    demo, form, _tab = app
    fn = _handler(demo, "on_dataset_list", event="load")
    assert {block for block, event in fn.targets if event == "change"} >= {
        form[name]._id for name in ("dataset_dir", "stage", "model_name_or_path", "template")
    }
    assert _choices(demo, form) == PLAIN  # the default form: stage sft, dataset_dir "data"


@pytest.mark.parametrize("stage", sorted(EXPECTED))
def test_each_stage_is_offered_the_data_it_trains_on(app, stage):
    demo, form, _tab = app
    assert _choices(demo, form, stage=stage) == EXPECTED[stage]


def test_media_datasets_only_for_a_model_that_takes_them(app, tmp_path):
    """A Qwen2-VL folder takes images and videos (its family plugin's MEDIA), not audios; its template says the
    same; a Qwen2-Audio template takes audios only."""
    demo, form, _tab = app
    vlm = _model(tmp_path, "qwen2-vl", QWEN2_VL)
    media = [
        ("mllm_demo · 6 rows · sharegpt, images", "mllm_demo"),
        ("mllm_video_demo · 3 rows · sharegpt, videos", "mllm_video_demo"),
    ]
    image_hub = _hub(
        ["llava_1k_en", "llava_1k_zh", "llava_150k_en", "llava_150k_zh", "pokemon_cap", "mllm_pt_demo"],
        "sharegpt, images",
    )
    cut = PLAIN_HUB.index("chinese_r1_distill") + 1
    want = PLAIN_LOCAL + media + _hub(PLAIN_HUB[:cut]) + image_hub + _hub(PLAIN_HUB[cut:])
    assert _choices(demo, form, model_name_or_path=vlm) == want
    assert _choices(demo, form, model_name_or_path="Qwen/Qwen2-VL-2B-Instruct", template="qwen2_vl") == want
    audio = _choices(demo, form, template="qwen2_audio")
    assert [n for _label, n in audio if n.startswith("mllm")] == ["mllm_audio_demo"]
    dpo = _choices(demo, form, model_name_or_path=vlm, stage="dpo")
    images = _hub(["rlhf_v", "vlfeedback"], "sharegpt, ranking, images") + _hub(["rlaif_v"], "alpaca, ranking, images")
    assert dpo == PAIRS[:6] + images + PAIRS[6:]  # in the file's order: after coig_p


def test_the_labels_follow_the_language(app):
    demo, form, _tab = app
    assert _choices(demo, form, lang="zh", stage="kto")[0] == ("kto_en_demo · 300 条 · sharegpt, kto", "kto_en_demo")


def test_a_dataset_cannot_be_picked_twice(app):
    demo, form, _tab = app
    pick = _handler(demo, "on_dataset_pick", form["dataset"])  # eval_dataset's picker has its own
    assert pick.fn(["identity", "alpaca_en_demo", "identity"]) == ["identity", "alpaca_en_demo"]
    assert pick.fn(["identity", "alpaca_en_demo"]) == gr.skip()
    board = demo.tk_board
    check = board.validate({"dataset": "identity,alpaca_en_demo,identity"})
    assert not check.ok
    assert check.by_field == {
        "dataset": [
            "dataset: 'identity' is chosen twice, so a run would read its samples twice: pick each dataset once."
        ]
    }


def _model_template(demo, form, tab, model: str, template: str = "", auto: str = "", lang: str = "en"):
    fn = _handler(demo, "on_model_template")
    data = {form["model_name_or_path"]: model, form["template"]: template, tab.auto_template: auto, _lang(fn): lang}
    out = _call(fn, data)
    return out.get(form["template"], template), out[tab.auto_template], out[tab.model_note]


def test_the_model_folder_suggests_its_template_and_says_so(app, tmp_path):
    demo, form, tab = app
    qwen = _model(tmp_path, "Qwen2.5-0.5B", QWEN2)  # no chat template of its own: the family's usual template
    owned = _model(tmp_path, "Qwen2.5-own", QWEN2, chat_template="{{ messages }}")  # its own template is exact
    llama = _model(tmp_path, "llama", LLAMA)
    phi = _model(tmp_path, "phi", PHI3, chat_template="{{ messages }}")  # no family tunekit knows: its own template
    bare = _model(tmp_path, "bare", PHI3)
    assert _model_template(demo, form, tab, qwen) == (
        "qwen",
        "qwen",
        "template qwen chosen from the model folder (Qwen2 family)",
    )
    assert _model_template(demo, form, tab, qwen, lang="zh")[2] == "已根据模型目录选择模板 qwen（Qwen2 系列）"
    assert _model_template(demo, form, tab, owned)[:2] == ("jinja", "jinja")
    # the user's own choice is kept, and the line says what the folder suggests
    assert _model_template(demo, form, tab, qwen, template="default") == (
        "default",
        "",
        "template default kept; the model folder (Qwen2 family) suggests qwen",
    )
    # a template the board chose follows the next folder
    assert _model_template(demo, form, tab, llama, template="qwen", auto="qwen") == (
        "llama3",
        "llama3",
        "template llama3 chosen from the model folder (Llama family)",
    )
    assert _model_template(demo, form, tab, phi) == (
        "jinja",
        "jinja",
        "template jinja chosen: the model folder ships its own chat template",
    )
    assert _model_template(demo, form, tab, bare, template="jinja", auto="jinja") == ("", "", "")
    assert _model_template(demo, form, tab, "Qwen/Qwen2.5-7B-Instruct") == ("", "", "")  # a hub id: no folder
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    _model(outside, "m", QWEN2)
    assert _model_template(demo, form, tab, str(outside / "m")) == ("", "", "")  # not even read
    # a config loaded from a file keeps its own template: the board's earlier choice is forgotten
    (tmp_path / "run.yaml").write_text(f"model_name_or_path: {llama}\ntemplate: qwen\n")
    load = _handler(demo, "on_load", tab.load_btn, "click")
    loaded = _call(load, {tab.config_path: "run.yaml", _lang(load): "en"})
    assert (loaded[form["template"]]["value"], loaded[tab.auto_template]) == ("qwen", "")
    assert _model_template(demo, form, tab, llama, template="qwen", auto="")[0] == "qwen"
    vlm = _model(tmp_path, "qwen2-vl", QWEN2_VL)
    assert _model_template(demo, form, tab, vlm)[2] == (
        "template qwen2_vl chosen from the model folder (Qwen2VL family)"
    )


def _edit(demo, form, lang: str = "en", **values):
    fn = _handler(demo, "on_edit")
    out = _call(fn, {_lang(fn): lang, **{form[k]: v for k, v in values.items()}})
    tab = demo.tk_tabs["train"]
    return out[tab.start_btn]["interactive"], out[tab.start_reason]


def test_start_is_off_with_the_reason_until_the_config_is_valid(app, tmp_path):
    demo, form, tab = app
    assert tab.start_btn.interactive is False  # the page's first state
    assert tab.start_reason.value == "⚠ Start is off: no model chosen"
    model = _model(tmp_path, "qwen", QWEN2)
    assert _edit(demo, form, model_name_or_path=model) == (False, "⚠ Start is off: no dataset chosen")
    assert _edit(demo, form, lang="zh", model_name_or_path=model) == (False, "⚠ 暂不能开始：尚未选择数据集")
    assert _edit(demo, form, model_name_or_path=model, dataset=["identity"]) == (True, "")
    assert _edit(demo, form, model_name_or_path=model, dataset=["identity"], stage="dpo") == (
        False,
        "⚠ Start is off: dataset identity (alpaca) does not fit stage dpo, which trains on ranking data (chosen / "
        "rejected)",
    )
    assert _edit(demo, form, model_name_or_path=model, dataset=["mllm_demo"]) == (
        False,
        "⚠ Start is off: dataset mllm_demo has images, which this model does not take (a vision / audio model's "
        "template does)",
    )
    off, reason = _edit(demo, form, model_name_or_path=model, dataset=["identity", "identity"])
    assert (off, reason) == (
        False,
        "⚠ Start is off: fix the options marked in red (dataset: 'identity' is chosen twice, so a run would read "
        "its samples twice: pick each dataset once.)",
    )


def test_start_refuses_a_config_without_a_dataset_even_when_called(app, tmp_path):
    """The button is off; a client that fires its event anyway starts nothing and is told why."""
    demo, form, tab = app
    board = demo.tk_board
    fn = _handler(demo, "on_start")
    model = _model(tmp_path, "qwen", QWEN2)
    out = _call(fn, {_lang(fn): "en", form["model_name_or_path"]: model, form["output_dir"]: "saves/x"})
    assert board.runner.poll() is None
    assert out[tab.start_reason] == "⚠ Start is off: no dataset chosen"
    assert out[tab.start_btn]["interactive"] is False


def test_the_sample_preview_marks_the_trained_tokens(tmp_path, reference_data, tiny_qwen):
    """The reply (and its end-of-turn token) is "trained", shown green; the prompt is not."""
    from tunekit.webui.app import create_app

    board = Board(cwd=tmp_path, policy=PathPolicy(tmp_path, caches=[], allow=[reference_data, tiny_qwen]))
    demo = create_app(board)
    form, tab = demo.tk_forms["train"], demo.tk_tabs["train"]
    fn = _handler(demo, "on_samples")
    values = {"model_name_or_path": str(tiny_qwen), "template": "qwen", "dataset_dir": str(reference_data)}
    data = {**{form[k]: v for k, v in values.items()}, form["dataset"]: ["identity"], tab.samples_n: 1}
    out = _call(fn, {_lang(fn): "en", **data})
    pieces = out[tab.samples_out]
    trained = "".join(text for text, label in pieces if label == "trained")
    assert (
        trained
        == "Hello! I am {{name}}, an AI assistant developed by {{author}}. How can I assist you today?<|im_end|>"
    )
    assert "".join(text for text, label in pieces if label is None).endswith(
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    shown = tab.samples_out.postprocess(pieces).model_dump()
    assert [p["class_or_confidence"] for p in shown] == [None, "trained"]
    assert tab.samples_out.color_map == {"trained": "green", "media": "blue"} and tab.samples_out.show_legend


# ------------------------------------------------------------------ the rendered page
@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_rendered_page_lists_suggests_and_gates(tmp_path, reference_data):
    """In headless Chromium: the dataset list is there when the page opens, a model folder fills the template and
    says why, and Start stays off (with its reason) until a model and a fitting dataset are picked."""
    from tunekit.train.engines.launcher import free_port
    from tunekit.webui.app import create_app

    skip_without_browser()
    (tmp_path / "data").symlink_to(reference_data)
    model = _model(tmp_path, "Qwen2.5-0.5B", QWEN2)
    board = Board(cwd=tmp_path, policy=PathPolicy(tmp_path, caches=[], allow=[reference_data]))
    demo = create_app(board)
    demo.queue(default_concurrency_limit=4)  # as `tunekit webui` serves it
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, ssr_mode=False, quiet=True)
    try:
        with chromium_page(timeout_ms=180_000) as pg:  # generous: a loaded 2-core host answers in seconds
            open_board(pg, f"http://127.0.0.1:{port}/")
            pg.wait_for_function(
                "() => document.querySelector('#tk-start-reason')?.innerText.includes('no model chosen')"
            )
            assert pg.locator("#tk-start").is_disabled()
            options = _options(pg, "dataset")
            assert options[:2] == ["identity · 91 rows · alpaca", "alpaca_en_demo · 999 rows · alpaca"]
            assert not any(o.startswith(("dpo_en_demo", "kto_en_demo", "mllm_demo", "wiki_demo")) for o in options)
            box = pg.locator("#tk-field-model_name_or_path textarea")
            box.fill(model)
            box.blur()
            pg.wait_for_function(
                "() => document.querySelector('#tk-model-note')?.innerText.includes("
                "'template qwen chosen from the model folder (Qwen2 family)')"
            )
            assert pg.locator("#tk-field-template input[role=combobox]").input_value() == "qwen"
            pg.wait_for_function(
                "() => document.querySelector('#tk-start-reason')?.innerText.includes('no dataset chosen')"
            )
            combo = pg.locator("#tk-field-dataset input[role=combobox]")
            combo.click()
            pg.get_by_role("option", name="identity · 91 rows · alpaca", exact=True).click()
            combo.blur()
            pg.wait_for_function(  # the pick is on the page: no refresh of the list swallowed it
                "() => [...document.querySelectorAll('#tk-field-dataset .token')].map(t => t.innerText)"
                ".join() .includes('identity')",
                timeout=30_000,
            )
            try:
                pg.wait_for_function(
                    "() => !document.querySelector('#tk-start').disabled"
                    " && !document.querySelector('#tk-start-reason').innerText.includes('⚠')"
                )
            except Exception:
                pg.screenshot(path=str(tmp_path / "start-off.png"), full_page=True)
                state = pg.evaluate(
                    "() => ({reason: document.querySelector('#tk-start-reason')?.innerText,"
                    " disabled: document.querySelector('#tk-start')?.disabled,"
                    " tokens: [...document.querySelectorAll('#tk-field-dataset .token')].map(t => t.innerText),"
                    " errors: document.querySelector('#tk-errors')?.innerText})"
                )
                raise AssertionError(f"Start stayed off: {state} (screenshot {tmp_path / 'start-off.png'})") from None
    finally:
        demo.close()


def _options(pg, name: str) -> list[str]:
    """The choices a dropdown of the form offers (opened, read, closed)."""
    combo = pg.locator(f"#tk-field-{name} input[role=combobox]")
    combo.click()
    pg.wait_for_selector("ul[role=listbox] li[role=option]")
    texts = [t.strip() for t in pg.locator("ul[role=listbox] li[role=option]").all_inner_texts()]
    combo.blur()
    pg.keyboard.press("Escape")
    return texts
