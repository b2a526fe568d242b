"""The planner's notes as values (``plan/notes.py``): each is its English sentence, made from one template per key,
and keeps its key and values; ``tunekit plan --json`` carries both (``notes`` unchanged, ``structured_notes``)."""

from __future__ import annotations

import ast
import copy
import json
import pickle

import pytest

from tests.helpers import ROOT
from tunekit.config import load_config
from tunekit.plan import make_plan
from tunekit.plan.notes import ENGLISH, JOINS, Note, render

QWEN7B = {"model_name_or_path": "qwen2.5-7b", "finetuning_type": "lora", "cutoff_len": 4096, "template": "qwen"}


def _english(data) -> str:
    return render(data, ENGLISH.__getitem__, JOINS.__getitem__)


def test_a_note_is_its_english_sentence_and_keeps_key_and_values():
    note = Note("note_packing", samples=20, seqs=3, tokens=1024)
    assert note == "packing: 20 samples make about 3 sequences of 1024 tokens." and isinstance(note, str)
    assert (note.key, note.values) == ("note_packing", {"samples": 20, "seqs": 3, "tokens": 1024})
    assert note.to_json() == {"key": "note_packing", "values": {"samples": 20, "seqs": 3, "tokens": 1024}}


def test_nested_parts_and_joins_make_the_planners_sentences_word_for_word():
    """The sentences the planner printed before its notes had keys, made again from keys and values."""
    rows = Note("reason_rows", tokens=64, source=Note("source_padded"))
    lowest = Note(
        "note_ckpt",
        state=Note("ckpt_lowest", k=2, n=24),
        reasons=(
            Note("reason_standard", need=9.5, target=8.25),
            Note("reason_standard_lowest", k=2, gib=8.1, share=0.02),
            rows,
        ),
    )
    assert lowest == (
        "gradient checkpointing: on for the lowest 2 of 24 layers (auto: without it this run needs 9.50 GiB, over "
        "the 8.25 GiB of the standard recipe (every layer checkpointed, whole logits); the lowest 2 layers "
        "checkpointed bring it to 8.10 GiB for about 2% of the step time; planned at 64 tokens per row, from "
        "measured (longest row, padded))"
    )
    device = Note("device_gpu", share=0.8, gpu="A100-80GB", gib=80)
    off = Note(
        "note_ckpt",
        state=Note("ckpt_off"),
        reasons=(
            Note("reason_within", need=0.01, have=64.0, device=device),
            Note("reason_force"),
            Note("reason_rows", tokens=512, source=Note("source_generation", source=Note("source_cutoff"))),
        ),
    )
    assert off == (
        "gradient checkpointing: off (auto: without it this run needs 0.01 GiB per device, within 64.0 GiB (80% of "
        "the A100-80GB's 80 GiB); set gradient_checkpointing: true to force it; planned at 512 tokens per row, "
        "from cutoff_len + generation_max_new_tokens)"
    )
    rung = Note("rung", parts=("DeepSpeed z3_offload", Note("rung_ckpt"), "Liger"))
    fits = Note("note_nothing_fits", gpu="T4", rung=rung, missing=3.5, gib=16, share=0.95, gpus=Note("tail_gpus", n=4))
    assert fits == (
        "Nothing fits on T4: the smallest set-up (DeepSpeed z3_offload + gradient checkpointing + Liger) needs 3.5 "
        "GiB more than the 16 GiB x 0.95 usable or 4 GPUs with ZeRO-3."
    )
    ram = Note("device_ram", share=0.5, gib=31.6, procs=None)  # an optional tail left out says nothing
    assert ram == "50% of 32 GiB RAM" and Note("device_ram", share=0.5, gib=32, procs=Note("tail_procs", n=2)) == (
        "50% of 32 GiB RAM / 2 processes"
    )
    for note in (lowest, off, fits, ram):  # the JSON form says the same sentence again
        assert _english(json.loads(json.dumps(note.to_json()))) == note


def test_an_unknown_key_or_wrong_values_are_refused():
    with pytest.raises(KeyError, match="no English template for the note key 'note_nope'"):
        Note("note_nope")
    with pytest.raises(TypeError, match=r"note 'note_packing' takes the values \['samples', 'seqs', 'tokens'\], got"):
        Note("note_packing", samples=1, seqs=1)
    with pytest.raises(TypeError, match="a note's value is a number, a str, None, a Note or a tuple"):
        Note("note_moe", model=object())


def test_numpy_numbers_become_plain_json_and_a_note_survives_pickle_and_copy():
    import numpy as np

    note = Note("note_packing", samples=np.int64(7), seqs=np.int64(2), tokens=128)
    assert json.dumps(note.to_json()) == (
        '{"key": "note_packing", "values": {"samples": 7, "seqs": 2, "tokens": 128}}'
    )
    nested = Note("note_no_data", why=Note("why_no_dataset"))
    for again in (pickle.loads(pickle.dumps(nested)), copy.deepcopy(nested)):
        assert again == nested and again.key == "note_no_data" and again.to_json() == nested.to_json()


def _keys(arg: ast.expr) -> set[str]:
    if isinstance(arg, ast.IfExp):  # Note("ckpt_on" if enabled else "ckpt_off")
        return _keys(arg.body) | _keys(arg.orelse)
    return {arg.value} if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else set()


def _note_keys_in_source() -> set[str]:
    """Every key a ``Note(...)`` call in src/tunekit names (a conditional's branches included)."""
    keys = set()
    for path in (ROOT / "src" / "tunekit").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Note" and node.args:
                keys |= _keys(node.args[0])
    return keys


def test_every_template_is_used_and_every_note_made_has_one():
    made = _note_keys_in_source()
    assert made - set(ENGLISH) == set(), "Note keys without an English template"
    assert set(ENGLISH) - made == set(), "English templates no Note(...) makes"


def test_plan_json_keeps_its_notes_and_carries_them_with_keys():
    """``tunekit plan --json``: ``notes`` are the sentences, ``structured_notes`` the same notes as key and values."""
    cfg = load_config(None, {**QWEN7B, "stage": "dpo", "finetuning_type": "full"})
    plan = make_plan(cfg, gpu_memory_gib=3, auto_fit=True)  # even ZeRO-3 with offload needs more
    assert all(isinstance(note, Note) for note in plan.notes)
    out = json.loads(json.dumps(plan.to_json()))
    keys = [note["key"] for note in out["structured_notes"]]
    assert {"note_no_data", "note_ckpt", "note_pairs", "note_ref_model", "note_nothing_fits"} <= set(keys), keys
    assert out["notes"] == [str(note) for note in plan.notes]
    assert [_english(note) for note in out["structured_notes"]] == out["notes"]
    assert out["notes"][0] == "Data not measured (no dataset configured); pass --num-samples N to plan the steps."
