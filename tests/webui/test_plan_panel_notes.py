"""The plan panel says the planner's notes in the board's language from their keys and values (``plan/notes.py``),
never by reading the English back: every key the planner has must have a Chinese template taking the same values."""

from __future__ import annotations

import re

from tunekit.config import load_config
from tunekit.plan import make_plan
from tunekit.plan.notes import ENGLISH, JOINS, Note, placeholders
from tunekit.webui.i18n import TEXT
from tunekit.webui.plan_panel import format_plan, note_lines

CJK = re.compile(r"[\u4e00-\u9fff]")


def test_every_note_key_has_a_chinese_template_with_the_same_placeholders():
    """A new English note (or a new value in one) without its Chinese fails here."""
    missing = [key for key in ENGLISH if not TEXT.get(f"plan_{key}", {}).get("zh")]
    assert not missing, f"note keys without a Chinese template (plan_<key> in webui/i18n.py TEXT): {missing}"
    differ = {
        key: (placeholders(english), placeholders(TEXT[f"plan_{key}"]["zh"]))
        for key, english in ENGLISH.items()
        if placeholders(english) != placeholders(TEXT[f"plan_{key}"]["zh"])
    }
    assert not differ, f"Chinese templates whose placeholders differ from the English ones: {differ}"
    assert all(TEXT.get(f"plan_join_{name}", {}).get("zh") for name in JOINS)
    assert all(TEXT[f"plan_{key}"]["en"] == english for key, english in ENGLISH.items())  # one English: the planner's


def _panel_notes(*notes: Note, lang: str) -> list[str]:
    return note_lines({"notes": list(notes), "structured_notes": [n.to_json() for n in notes]}, lang)


def test_a_note_is_said_again_in_chinese_from_its_key_and_values():
    lowest = Note(
        "note_ckpt",
        state=Note("ckpt_lowest", k=2, n=24),
        reasons=(
            Note("reason_standard", need=9.5, target=8.25),
            Note("reason_standard_lowest", k=2, gib=8.1, share=0.02),
            Note("reason_rows", tokens=64, source=Note("source_padded")),
        ),
    )
    ram = Note("device_ram", share=0.5, gib=32, procs=Note("tail_procs", n=2))
    off = Note(
        "note_ckpt",
        state=Note("ckpt_off"),
        reasons=(Note("reason_within", need=0.5, have=16.0, device=ram), Note("reason_force")),
    )
    rung = Note("rung", parts=("DeepSpeed z3_offload", Note("rung_ckpt"), "Liger"))
    fits = Note("note_nothing_fits", gpu="T4", rung=rung, missing=3.5, gib=16, share=0.95, gpus=None)
    assert _panel_notes(lowest, off, fits, lang="zh") == [
        "梯度检查点：仅对最底部 2 层开启（共 24 层）（auto：不开启时需 9.50 GiB，"
        "超过标准做法（每层都做检查点、完整 logits）的 8.25 GiB；对最底部 2 层做检查点可降到 8.10 GiB，"
        "约多花单步时间的 2%；按每行 64 个 token 规划（实测最长一行，含填充））",
        "梯度检查点：关闭（auto：不开启时每个设备需 0.50 GiB，在 16.0 GiB（32 GiB 内存的 50%，由 2 个进程分摊）以内；"
        "设 gradient_checkpointing: true 可强制开启）",
        "T4 上任何配置都放不下：最省显存的配置（DeepSpeed z3_offload + 梯度检查点 + Liger）比可用的 16 GiB x 0.95 "
        "还多需 3.5 GiB。",
    ]
    assert _panel_notes(lowest, off, fits, lang="en") == [lowest, off, fits]  # English: the planner's sentences


def test_a_real_plans_notes_are_all_chinese_on_the_chinese_panel():
    """A plan with many notes (no data, checkpointing, dpo pairs and reference, nothing fits): each note line of the
    Chinese panel is the Chinese template of its key, none is the planner's English."""
    cfg = load_config(
        None,
        {"model_name_or_path": "qwen2.5-7b", "stage": "dpo", "finetuning_type": "full", "template": "qwen"},
    )
    plan = make_plan(cfg, gpu_memory_gib=3, auto_fit=True).to_json()
    zh, en = format_plan(plan, "zh"), format_plan(plan, "en")
    assert [f"- {note}" for note in plan["notes"]] == [line for line in en.splitlines() if line.startswith("- ")]
    zh_notes = [line[2:] for line in zh.splitlines() if line.startswith("- ")]
    assert len(zh_notes) == len(plan["notes"]) >= 5
    for said, english in zip(zh_notes, plan["notes"], strict=True):
        assert said != english and CJK.search(said), said
    assert zh_notes[0] == "数据未测量（未选择数据集）；传入 `--num-samples N` 可规划步数。"
    assert plan["notes"][0] == "Data not measured (no dataset configured); pass --num-samples N to plan the steps."


def test_a_plan_without_keys_shows_its_sentences_as_written():
    """Not the planner's (an older JSON): its notes are shown as they are, in any language."""
    plan = {"notes": ["something the planner once said"]}
    assert format_plan(plan, "zh").splitlines()[-1] == "- something the planner once said"
