"""The user's stop strings end the visible answer, never the thought (docs/reasoning.md, "Stop strings"): matched
against the answer's text after the reply is split, as vLLM's reasoning outputs and hosted APIs do, so a stop word a
reasoning model writes while it thinks (or gpt-oss's channel markup) does not end its reply. Streamed (chat, API) and
batched (predict) alike, on tiny models that write a scripted reply (tests/reply_helpers.py)."""

from __future__ import annotations

import pytest

from tests.reply_helpers import scripted_engine
from tunekit.infer.reasoning import ANSWER, THOUGHT, PlainSplitter, ThinkSplitter
from tunekit.infer.stops import ReplyStops
from tunekit.tiny.text import build_tiny_model

HI = [{"role": "user", "content": "What is 2 plus 2?"}]
QWEN3_REPLY = "<think>\nTwo plus two, is it four?\n</think>\n\nIt is 4. Done.<|im_end|>"
GPT_OSS_REPLY = (
    "<|channel|>analysis<|message|>Two plus two, is it four?<|end|><|start|>assistant<|channel|>final<|message|>"
    "It is 4. Done.<|return|>"
)
REPLIES = {"qwen3": QWEN3_REPLY, "gpt_oss": GPT_OSS_REPLY}
LIKE = {"qwen3": "qwen3", "gpt_oss": "gpt-oss-20b"}
THOUGHT_TEXT = "Two plus two, is it four?"


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    out = {}
    for template, like in LIKE.items():
        folder = build_tiny_model(tmp_path_factory.mktemp(template) / "model", like=like, num_layers=1)
        out[template] = scripted_engine(folder, REPLIES[template], template=template)
    return out


def _replies(engine, stop):
    """``(thought, answer, finish_reason)`` streamed (the parts in order) and batched (predict's path)."""
    generation = engine.start(HI, stop=stop)
    parts = list(generation.parts())
    streamed = (generation.reasoning, generation.text, generation.finish_reason)
    assert streamed[:2] == (
        "".join(t for k, t in parts if k == THOUGHT),
        "".join(t for k, t in parts if k == ANSWER),
    )
    batched = engine.generate_batch([engine.render(HI)], stop=stop)[0]
    return streamed, (batched.reasoning, batched.text, batched.finish_reason), generation.completion_tokens


@pytest.mark.parametrize("template", ["qwen3", "gpt_oss"])
@pytest.mark.parametrize(
    "stop, answer",
    [
        (["is it", "four"], "It is 4. Done."),  # only in the thought: the reply runs to its end
        (["is"], "It "),  # the first match in the answer ends it (the thought's "is" does not)
        (["Two", "Done"], "It is 4. "),
        (["think", "analysis", "<|channel|>", "final"], "It is 4. Done."),  # markup is no answer text
    ],
)
def test_stop_strings_end_the_answer_not_the_thought(engines, template, stop, answer):
    engine = engines[template]
    streamed, batched, tokens = _replies(engine, stop)
    assert streamed == batched == (THOUGHT_TEXT, answer, "stop")
    whole = len(engine.tokenizer(REPLIES[template], add_special_tokens=False).input_ids)
    assert (tokens < whole) == (answer != "It is 4. Done.")  # a stop in the answer ends the generation there


def test_reply_stops_hold_back_what_may_become_a_stop():
    """Fed piece by piece, a stop string split across pieces is never shown; the template's own stop words end the
    raw reply (the thought included)."""
    stops = ReplyStops(ThinkSplitter(), ["END"], [])
    text, shown = "", []
    for piece in ["<think>E", "N", "D</think>\n", "ok E", "N", "D and more"]:
        text += piece
        shown += stops.feed(text)
    assert shown == [(THOUGHT, "E"), (THOUGHT, "N"), (THOUGHT, "D"), (ANSWER, "ok ")] and stops.hit
    stops = ReplyStops(ThinkSplitter(), ["x"], ["<END>"])
    assert stops.feed("<think>a<END>b</think>c", final=True) == [(THOUGHT, "a")] and stops.hit
    stops = ReplyStops(PlainSplitter(), ["xyz"], [])
    assert stops.feed("abcxy") == [(ANSWER, "abc")]
    assert stops.feed("abcxy", final=True) == [(ANSWER, "xy")] and not stops.hit
