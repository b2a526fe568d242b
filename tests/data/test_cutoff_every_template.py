"""The cutoff policy (data/processors/cutoff.py) holds for every built-in template, wherever it
writes the system prompt.

A three-turn conversation with a system prompt (and, where the family can express them, tools) is cut at
several small cutoffs, from the smallest the policy promises anything at (the lead and tail of the turn that
may be cut, plus one answer token) to one token below the whole conversation. Every sample must fit, start
with the template's prefix (BOS, ``[gMASK]<sop>`` ...), still hold the system text (and the tool
definitions), and train only reply tokens: labels are -100 or the input id at the same position, and each
trained run is the start of a reply as the template renders it (exact ids). Families differ in where the
system goes: its own block (ChatML, Llama 3), the first user message (Gemma, Llama 2), the last user
message (Mistral): for the last, plain SFT used to keep the system text in no cut sample at all.
"""

from __future__ import annotations

import pytest

from tunekit.data.processors import DROPPED, kto, pairwise, sft
from tunekit.data.processors.context import ProcessContext
from tunekit.data.templates import get_template, list_templates
from tunekit.tiny.tokenizer import DEFAULT_VOCAB_SIZE, TOKENIZERS, build_tokenizer

IGNORE = -100
SYSTEM = "You are a terse math tutor who answers in one line."
TURNS = [
    ("What is two plus two, and why is that so?", "Four, since two and two make four."),
    ("And what is three plus three, and why?", "Six, as three and three make six."),
    ("Finally, what is four plus four, step by step please?", "Eight: four and four make eight, step by step."),
]
TOOLS = [
    {
        "name": "add_numbers",
        "description": "Add two integers exactly.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    }
]
#: named templates (``tunekit templates``); ``jinja`` renders the tokenizer's own template, tested elsewhere
TEMPLATES = [name for name in list_templates() if name != "jinja"]
#: the tiny tokenizer that knows a family's special tokens (the others use the ChatML one: the policy must not care)
_TOKENIZER_OF = {
    "llama2": "mistral",
    "llava_next_mistral": "mistral",
    "gemma3": "gemma",
    "llava_next_llama3": "llama3",
    "qwen3_vl": "qwen3",
}
N_CUTOFFS = 8


def _msgs(turns):
    return [m for u, a in turns for m in ({"role": "user", "content": u}, {"role": "assistant", "content": a})]


MESSAGES = _msgs(TURNS)


def _setup(name, mask_history=False, cutoff_len=0):
    family = _TOKENIZER_OF.get(name, name if name in TOKENIZERS else "qwen")
    tok = build_tokenizer(TOKENIZERS[family], DEFAULT_VOCAB_SIZE, "", 4096)  # fresh: fix_tokenizer changes it
    tpl = get_template(name, tok)
    tpl.fix_tokenizer(tok)
    return tok, tpl, ProcessContext(tokenizer=tok, template=tpl, cutoff_len=cutoff_len, mask_history=mask_history)


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def _tools_for(tpl):
    return TOOLS if tpl.tool_format is not None else None


def _cutoffs(ctx, cut_turn, tools, history_trained):
    """Cutoffs from the least at which the policy keeps the lead (of turn ``cut_turn`` rendered alone)
    to the whole length - 1."""
    alone = MESSAGES[2 * cut_turn : 2 * cut_turn + 2]
    prompt = ctx.render_turns(alone, SYSTEM, tools, history_trained=history_trained)[0][0]
    head = ctx.head_of_text(prompt, alone[0]["content"])
    assert head.lead > 0 and SYSTEM in prompt  # the system text is found in the lead of the turn that may be cut
    least = head.lead + head.tail + 1
    whole = sum(
        len(_ids(ctx.tokenizer, t))
        for pair in ctx.render_turns(MESSAGES, SYSTEM, tools, history_trained=history_trained)
        for t in pair
    )
    assert whole > least
    return sorted({least + (whole - 1 - least) * k // (N_CUTOFFS - 1) for k in range(N_CUTOFFS)})


def _replies(ctx, tools, history_trained, first_only=False, last_only=False):
    """Reply ids per turn index, as any run of kept turns renders them (a run's last reply may end differently)."""
    n, out = len(TURNS), {}
    runs = [(j, i) for j in range(n) for i in range(j, n)]
    for j, i in runs:
        if (first_only and j) or (last_only and i != n - 1):
            continue
        turns = ctx.render_turns(MESSAGES[2 * j : 2 * i + 2], SYSTEM, tools, history_trained=history_trained)
        for k, (_, reply) in enumerate(turns):
            out.setdefault(j + k, []).append(_ids(ctx.tokenizer, reply))
    return out


def _trained_runs(input_ids, labels):
    assert len(labels) == len(input_ids)
    assert all(lab in (IGNORE, x) for lab, x in zip(labels, input_ids))  # aligned: -100 or the input id itself
    runs, cur = [], []
    for lab in labels + [IGNORE]:
        if lab == IGNORE:
            if cur:
                runs.append(cur)
            cur = []
        else:
            cur.append(lab)
    return runs


def _check_frame(tok, tpl, ids, cutoff, tools):
    assert 0 < len(ids) <= cutoff
    text = tok.decode(ids)
    assert text.startswith(tpl.prefix_text)  # BOS / the template's prefix
    assert SYSTEM in text, f"system text lost at cutoff {cutoff}: {text!r}"
    if tools:
        assert "add_numbers" in text and "Add two integers exactly." in text, (
            f"tools lost at cutoff {cutoff}: {text!r}"
        )


@pytest.mark.parametrize("with_tools", [False, True], ids=["system", "system+tools"])
@pytest.mark.parametrize("mask_history", [False, True], ids=["sft", "mask_history"])
@pytest.mark.parametrize("name", TEMPLATES)
def test_sft_cut_keeps_prefix_system_and_tools_and_trains_only_replies(name, mask_history, with_tools):
    tok, tpl, ctx = _setup(name, mask_history)
    tools = _tools_for(tpl) if with_tools else None
    if with_tools and tools is None:
        pytest.skip(f"template {name} cannot express tools")
    last = len(TURNS) - 1
    history_trained = not mask_history
    replies = _replies(ctx, tools, history_trained, first_only=not mask_history, last_only=mask_history)
    cutoffs = _cutoffs(ctx, last if mask_history else 0, tools, history_trained)
    for cutoff in cutoffs:
        ctx.cutoff_len = cutoff
        out = sft.process({"messages": [MESSAGES], "system": [SYSTEM], "tools": [tools], "_source": ["r0"]}, ctx)
        ids, labels = out["input_ids"][0], out["labels"][0]
        _check_frame(tok, tpl, ids, cutoff, tools)
        assert out["_status"][0] != DROPPED
        runs = _trained_runs(ids, labels)
        if mask_history:  # only the last reply, from its start
            assert len(runs) == 1 and any(r[: len(runs[0])] == runs[0] for r in replies[last]), cutoff
            continue
        assert 1 <= len(runs) <= last  # turns 0..i, never the whole conversation (it does not fit)
        for k, run in enumerate(runs):  # reply k of the kept run; only the last one may lose its tail
            whole = k < len(runs) - 1
            assert any((r == run) if whole else (r[: len(run)] == run) for r in replies[k]), (cutoff, k)


@pytest.mark.parametrize("stage", ["dpo", "kto"])
@pytest.mark.parametrize("name", TEMPLATES)
def test_pair_and_kto_cut_keeps_prefix_and_system(name, stage):
    tok, tpl, ctx = _setup(name)
    history, question = MESSAGES[:-2], MESSAGES[-2]
    chosen = {"role": "assistant", "content": TURNS[-1][1]}
    rejected = {"role": "assistant", "content": "Nine, I think, but I am really not sure about that at all."}
    longest = MESSAGES[:-1] + [rejected]
    prompt = ctx.render_turns(longest[-2:], SYSTEM, None, history_trained=False)[0][0]
    head = ctx.head_of_text(prompt, question["content"])
    whole = sum(
        len(_ids(tok, t)) for pair in ctx.render_turns(longest, SYSTEM, None, history_trained=False) for t in pair
    )
    least = head.lead + head.tail + 1
    answers = {}
    for reply in (chosen, rejected):  # the last reply renders the same after any kept history
        answers[reply["content"]] = _ids(
            tok, ctx.render_turns([question, reply], SYSTEM, None, history_trained=False)[0][1]
        )
    for cutoff in sorted({least + (whole - 1 - least) * k // (N_CUTOFFS - 1) for k in range(N_CUTOFFS)}):
        ctx.cutoff_len = cutoff
        if stage == "dpo":
            out = pairwise.process(
                {
                    "messages": [history + [question]],
                    "chosen": [chosen],
                    "rejected": [rejected],
                    "system": [SYSTEM],
                    "tools": [None],
                    "_source": ["r0"],
                },
                ctx,
            )
            rows = [("chosen", chosen), ("rejected", rejected)]
            prompts, runs = set(), []
            for side, reply in rows:
                ids, labels = out[f"{side}_input_ids"][0], out[f"{side}_labels"][0]
                _check_frame(tok, tpl, ids, cutoff, None)
                (run,) = _trained_runs(ids, labels)
                assert labels[len(ids) - len(run) :] == run and run == answers[reply["content"]][: len(run)]
                prompts.add(tuple(ids[: len(ids) - len(run)]))
                runs.append(run)
            assert len(prompts) == 1  # chosen and rejected share their prompt ids
            # a pair whose answers are the same after the cut is dropped (pairwise.py), e.g. both just '<think>'
            assert (out["_status"][0] == DROPPED) == (runs[0] == runs[1]), cutoff
            continue
        else:
            out = kto.process(
                {"messages": [longest], "kto_tag": [False], "system": [SYSTEM], "tools": [None], "_source": ["r0"]},
                ctx,
            )
            ids, labels = out["input_ids"][0], out["labels"][0]
            _check_frame(tok, tpl, out["prompt_ids"][0], cutoff, None)
            assert ids == out["prompt_ids"][0] + out["response_ids"][0] and len(ids) <= cutoff
            (run,) = _trained_runs(ids, labels)
            assert run == out["response_ids"][0] == answers[rejected["content"]][: len(run)]
        assert out["_status"][0] != DROPPED
