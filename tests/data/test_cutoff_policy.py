"""The cutoff policy (data/processors/cutoff.py): BOS, the system prompt and the tools survive truncation;
the oldest history goes first, then the middle of the user text, then the answer's tail.

Expected ids are the tokenization of the literal strings each family's chat template produces (written
out below), for a BOS template (llama3) and a ChatML template without BOS (qwen), at tight cutoffs.
"""

from __future__ import annotations

import pytest

from tests.helpers import write_dataset
from tunekit.config import load_config
from tunekit.data.pipeline import prepare_datasets
from tunekit.data.processors.cutoff import Head, Spans, cut_turn, fit_turns
from tunekit.model.loader import load_tokenizer

IGNORE = -100
SYSTEM = "You are a terse math tutor."
TURNS = [
    ("What is two plus two?", "Four."),
    ("And three plus three?", "Six."),
    ("And four plus four, step by step?", "Eight, as four and four make eight."),
]

# first prompt (conversation start, with BOS and system), a later prompt, a reply -- per family
LITERAL = {
    "llama3": (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        + SYSTEM
        + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "{u}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|start_header_id|>user<|end_header_id|>\n\n{u}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "{a}<|eot_id|>",
    ),
    "qwen": (
        "<|im_start|>system\n" + SYSTEM + "<|im_end|>\n<|im_start|>user\n{u}<|im_end|>\n<|im_start|>assistant\n",
        "\n<|im_start|>user\n{u}<|im_end|>\n<|im_start|>assistant\n",
        "{a}<|im_end|>",
    ),
}
FAMILIES = [("llama3", "tiny_llama"), ("qwen", "tiny_qwen")]


def _msgs(turns):
    out = []
    for u, a in turns:
        out += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
    return out


def _prepare(model, tmp_path, stage, records, entry, **opts):
    write_dataset(tmp_path / "data", "toy", records, entry)
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(model),
            "dataset": "toy",
            "dataset_dir": str(tmp_path / "data"),
            "output_dir": str(tmp_path / "out"),
            "stage": stage,
            **opts,
        },
    )
    tok = load_tokenizer(cfg)
    return prepare_datasets(cfg, tok, stage), tok


SFT_ENTRY = {
    "formatting": "sharegpt",
    "columns": {"messages": "messages", "system": "system"},
    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
}
PAIR_ENTRY = {
    "ranking": True,
    "formatting": "sharegpt",
    "columns": {"messages": "messages", "chosen": "chosen", "rejected": "rejected", "system": "system"},
    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
}
KTO_ENTRY = {
    "formatting": "sharegpt",
    "columns": {"messages": "messages", "kto_tag": "label", "system": "system"},
    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
}


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def _from_turn(tok, family, turns, start):
    """(pieces, ids) of the conversation rendered from turn ``start`` on: what a history cut must produce."""
    first, later, reply = LITERAL[family]
    pieces = []
    for k, (u, a) in enumerate(turns[start:]):
        pieces += [(first if k == 0 else later).format(u=u), reply.format(a=a)]
    return pieces, [_ids(tok, p) for p in pieces]


@pytest.mark.parametrize("family, model_fixture", FAMILIES)
def test_mask_history_drops_the_oldest_turn_and_keeps_bos_and_system(request, tmp_path, family, model_fixture):
    model = request.getfixturevalue(model_fixture)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    _, whole = _from_turn(tok, family, TURNS, 0)
    pieces, kept = _from_turn(tok, family, TURNS, 1)  # turns 1-2, turn 1 rendered as the start
    need = sum(map(len, kept))
    assert sum(map(len, whole)) > need  # the whole conversation does not fit
    records = [{"system": SYSTEM, "messages": _msgs(TURNS)}]
    data, tok = _prepare(
        model, tmp_path, "sft", records, SFT_ENTRY, template=family, cutoff_len=need, mask_history=True
    )
    row = data.train[0]
    assert row["input_ids"] == [t for ids in kept for t in ids]
    assert row["labels"] == [IGNORE] * sum(map(len, kept[:-1])) + kept[-1]  # only the last reply is trained
    if family == "llama3":
        assert row["input_ids"][0] == tok.bos_token_id == 0
    assert tok.decode(row["input_ids"]).startswith(pieces[0])
    (report,) = data.reports
    assert report.truncated == 1 and report.truncated_sources == [f"{tmp_path / 'data' / 'toy.json'}, record 0"]
    # one token less: turn 1 goes too, turn 2 alone is rendered as the start
    data, _ = _prepare(
        model, tmp_path / "b", "sft", records, SFT_ENTRY, template=family, cutoff_len=need - 1, mask_history=True
    )
    _, last = _from_turn(tok, family, TURNS, 2)
    assert data.train[0]["input_ids"] == [t for ids in last for t in ids]


@pytest.mark.parametrize("family, model_fixture", FAMILIES)
def test_long_user_text_loses_its_middle_not_bos_system_or_header(request, tmp_path, family, model_fixture):
    model = request.getfixturevalue(model_fixture)
    user = " ".join(f"w{i}" for i in range(40))
    answer = "It is forty words."
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    first, _, reply = LITERAL[family]
    lead, tail = first.split("{u}")
    lead_ids, user_ids, tail_ids, answer_ids = (_ids(tok, t) for t in (lead, user, tail, reply.format(a=answer)))
    assert _ids(tok, first.format(u=user)) == lead_ids + user_ids + tail_ids  # the pieces tokenize cleanly here
    cutoff = len(lead_ids) + len(tail_ids) + len(answer_ids) + 10
    records = [{"system": SYSTEM, "messages": _msgs([(user, answer)])}]
    data, tok = _prepare(model, tmp_path, "sft", records, SFT_ENTRY, template=family, cutoff_len=cutoff)
    row = data.train[0]
    # 10 tokens of room for the user text: its first 5 and last 5 tokens; the whole answer
    expected = lead_ids + user_ids[:5] + user_ids[-5:] + tail_ids
    assert row["input_ids"] == expected + answer_ids
    assert row["labels"] == [IGNORE] * len(expected) + answer_ids
    assert data.reports[0].truncated == 1


def test_lead_longer_than_cutoff_still_keeps_bos(tiny_llama, tmp_path):
    system = " ".join(f"rule{i}" for i in range(60))
    records = [{"system": system, "messages": _msgs([("Add 2 and 2.", "The sum is four, of course.")])}]
    data, tok = _prepare(tiny_llama, tmp_path, "sft", records, SFT_ENTRY, template="llama3", cutoff_len=12)
    row = data.train[0]
    first, _, reply = LITERAL["llama3"]
    prompt = _ids(tok, first.replace(SYSTEM, system).format(u="Add 2 and 2."))
    answer = _ids(tok, reply.format(a="The sum is four, of course."))
    assert len(answer) > 6
    # BOS, then the budget of 11 shared as the policy says: the prompt's last 5 tokens (the header), 6 answer tokens
    assert row["input_ids"] == [tok.bos_token_id] + prompt[-5:] + answer[:6]
    assert row["labels"] == [IGNORE] * 6 + answer[:6]


@pytest.mark.parametrize("family, model_fixture", FAMILIES)
def test_pairs_and_kto_drop_the_oldest_history_and_keep_system(request, tmp_path, family, model_fixture):
    model = request.getfixturevalue(model_fixture)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    first, later, reply = LITERAL[family]
    history, (question, _) = TURNS[:-1], TURNS[-1]
    chosen, rejected = "Eight.", "Nine, I think, but I am not sure."
    prompt_from_1 = (
        _ids(tok, first.format(u=history[1][0]))
        + _ids(tok, reply.format(a=history[1][1]))
        + _ids(tok, later.format(u=question))
    )
    c_ids, r_ids = _ids(tok, reply.format(a=chosen)), _ids(tok, reply.format(a=rejected))
    cutoff = len(prompt_from_1) + len(r_ids)  # turns 1-2 fit with the longer answer, turn 0 does not
    pair = {
        "system": SYSTEM,
        "messages": _msgs(history) + [{"role": "user", "content": question}],
        "chosen": {"role": "assistant", "content": chosen},
        "rejected": {"role": "assistant", "content": rejected},
    }
    data, _ = _prepare(model, tmp_path / "dpo", "dpo", [pair], PAIR_ENTRY, template=family, cutoff_len=cutoff)
    row = data.train[0]
    assert row["chosen_input_ids"] == prompt_from_1 + c_ids and row["rejected_input_ids"] == prompt_from_1 + r_ids
    assert row["chosen_labels"] == [IGNORE] * len(prompt_from_1) + c_ids
    assert data.reports[0].truncated == 1
    kto = {
        "system": SYSTEM,
        "messages": _msgs(history)
        + [{"role": "user", "content": question}, {"role": "assistant", "content": rejected}],
        "label": False,
    }
    data, _ = _prepare(model, tmp_path / "kto", "kto", [kto], KTO_ENTRY, template=family, cutoff_len=cutoff)
    row = data.train[0]
    assert row["prompt_ids"] == prompt_from_1 and row["response_ids"] == r_ids and row["kto_tag"] is False
    assert row["input_ids"] == prompt_from_1 + r_ids and data.reports[0].truncated == 1


@pytest.mark.parametrize("stage", ["sft", "dpo", "kto"])
def test_bos_survives_every_truncated_sample(tiny_llama, tmp_path, stage):
    """The symptom this policy fixes: cutting from the front removed BOS in more than half of the truncated samples."""
    records = []
    for n in range(12):
        turns = [
            (f"Question {k}: " + "why " * (3 * n + k), f"Answer {k}: " + "because " * (2 * n))
            for k in range(1 + n % 3)
        ]
        msgs = _msgs(turns)
        if stage == "sft":
            records.append({"system": SYSTEM, "messages": msgs})
        elif stage == "dpo":
            records.append(
                {
                    "system": SYSTEM,
                    "messages": msgs[:-1],
                    "chosen": msgs[-1],
                    "rejected": {"role": "assistant", "content": "No. " + msgs[-1]["content"]},
                }
            )
        else:
            records.append({"system": SYSTEM, "messages": msgs, "label": n % 2 == 0})
    entry = {"sft": SFT_ENTRY, "dpo": PAIR_ENTRY, "kto": KTO_ENTRY}[stage]
    data, tok = _prepare(
        tiny_llama, tmp_path, stage, records, entry, template="llama3", cutoff_len=40, mask_history=stage == "sft"
    )
    column = "chosen_input_ids" if stage == "dpo" else "input_ids"
    rows = data.train[column]
    report = data.reports[0]
    assert (report.truncated, report.dropped) == {"sft": (11, 0), "dpo": (12, 0), "kto": (11, 0)}[stage]
    assert all(r[0] == tok.bos_token_id for r in rows) and all(len(r) <= 40 for r in rows)
    system_ids = _ids(tok, "<|start_header_id|>system<|end_header_id|>\n\n" + SYSTEM + "<|eot_id|>")
    assert all(r[1 : 1 + len(system_ids)] == system_ids for r in rows)  # the system prompt survives too


def test_fit_turns_with_heads():
    # three turns; the head of the conversation started at turn j is [9, j] + its prompt body (lead 2, tail 1)
    turns = [([9, 0, 10, 11], [20, 21]), ([30, 31], [40, 41]), ([50, 51, 52, 53, 54, 55], [60, 61, 62])]
    heads = {
        0: Head([9, 0, 10, 11], lead=2, tail=1, keep=1),
        1: Head([9, 1, 30, 31], lead=2, tail=1, keep=1),
        2: Head([9, 2, 50, 51, 52, 53, 54, 55], lead=2, tail=1, keep=1),
    }
    spans = Spans(turns, heads.__getitem__)
    kept, cut = fit_turns(turns, 19, last_first=True, spans=spans)
    assert kept == [(0, turns[0]), (1, turns[1]), (2, turns[2])] and not cut  # 19 tokens: all fits
    kept, cut = fit_turns(turns, 18, last_first=True, spans=spans)
    assert kept == [(1, ([9, 1, 30, 31], [40, 41])), (2, turns[2])] and cut  # turn 1 rendered as the start
    kept, cut = fit_turns(turns, 10, last_first=True, spans=spans)
    # turn 2 alone (11 tokens) is cut: its prompt keeps max(10 - 3, 10 // 2) = 7 of its 8 tokens: lead [9, 2],
    # tail [55] and 4 of the 5 body tokens, 2 from its start and 2 from its end; the answer stays whole
    assert kept == [(2, ([9, 2, 50, 51, 53, 54, 55], [60, 61, 62]))] and cut
    kept, _ = fit_turns(turns, 10, spans=spans)
    assert kept == [(0, turns[0]), (1, turns[1])]  # sft order: later turns dropped whole
    # a lead that leaves no room: only BOS (keep) stays in front of the prompt's end
    assert cut_turn(Head([9, 1, 2, 3, 4, 5, 6], lead=5, tail=2, keep=1), [7, 8, 9], 6) == ([9, 5, 6], [7, 8, 9])


def test_prompt_only_stages_keep_bos_and_system_too(tiny_llama, tmp_path):
    first, later, reply = LITERAL["llama3"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama)
    question = TURNS[2][0]
    from_1 = _ids(tok, first.format(u=TURNS[1][0]) + reply.format(a=TURNS[1][1]) + later.format(u=question))
    long_user = " ".join(f"w{i}" for i in range(40))
    lead, tail = first.split("{u}")
    lead_ids, user_ids, tail_ids = _ids(tok, lead), _ids(tok, long_user), _ids(tok, tail)
    records = [
        {"system": SYSTEM, "messages": _msgs(TURNS[:2]) + [{"role": "user", "content": question}]},
        {"system": SYSTEM, "messages": [{"role": "user", "content": long_user}]},
    ]
    cutoff = len(from_1)  # the first prompt fits once turn 0 is dropped
    room = cutoff - len(lead_ids) - len(tail_ids)  # what the second one leaves for its user text
    assert len(user_ids) > room > 0
    data, _ = _prepare(tiny_llama, tmp_path, "grpo", records, SFT_ENTRY, template="llama3", cutoff_len=cutoff)
    assert data.reports[0].truncated == 2
    history_cut, middle_cut = data.train["input_ids"]
    assert history_cut == from_1  # turn 0 dropped, turn 1 rendered as the start (BOS + system)
    assert middle_cut == lead_ids + user_ids[: room - room // 2] + user_ids[len(user_ids) - room // 2 :] + tail_ids


def test_sft_keeps_a_system_prompt_that_lives_in_the_last_user_message():
    """Mistral writes the system prompt into the *last* [INST] block: a cut conversation is rendered as the
    shorter conversation it is, so the system moves into its last kept user message instead of being dropped
    with the later turns (it was lost in every cut sample)."""
    from tunekit.data.processors import sft
    from tunekit.data.processors.context import ProcessContext
    from tunekit.data.templates import get_template
    from tunekit.tiny.tokenizer import DEFAULT_VOCAB_SIZE, TOKENIZERS, build_tokenizer

    tok = build_tokenizer(TOKENIZERS["mistral"], DEFAULT_VOCAB_SIZE, "", 4096)
    ctx = ProcessContext(tokenizer=tok, template=get_template("mistral", tok), cutoff_len=0)
    (u0, a0), (u1, a1), _ = TURNS
    p0, r0 = _ids(tok, f"<s>[INST] {u0}[/INST]"), _ids(tok, f" {a0}</s>")
    p1_sys, r1 = _ids(tok, f"[INST] {SYSTEM}\n\n{u1}[/INST]"), _ids(tok, f" {a1}</s>")
    p0_sys = _ids(tok, f"<s>[INST] {SYSTEM}\n\n{u0}[/INST]")
    assert p0[0] == p0_sys[0] == tok.bos_token_id
    batch = {"messages": [_msgs(TURNS)], "system": [SYSTEM], "tools": [None], "_source": ["r0"]}
    # turns 0-1 as a conversation of their own: the system before the last kept user message
    ctx.cutoff_len = len(p0 + r0 + p1_sys + r1)
    out = sft.process(batch, ctx)
    assert out["input_ids"][0] == p0 + r0 + p1_sys + r1
    assert out["labels"][0] == [IGNORE] * len(p0) + r0 + [IGNORE] * len(p1_sys) + r1
    # one token less: turn 0 alone, which then holds the system prompt
    ctx.cutoff_len -= 1
    out = sft.process(batch, ctx)
    assert out["input_ids"][0] == p0_sys + r0 and out["labels"][0] == [IGNORE] * len(p0_sys) + r0
    assert out["_status"][0] == 1  # truncated
