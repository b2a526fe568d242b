"""The API splits a reasoning model's reply: ``reasoning_content`` beside ``content`` (non-streamed), and
``delta.reasoning_content`` chunks before the ``delta.content`` ones (streamed), on tiny models made to write a
thought and an answer (tests/reply_helpers.py)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.helpers import serve_in_thread
from tests.reply_helpers import scripted_engine
from tunekit.tiny.text import build_tiny_model

HI = [{"role": "user", "content": "What is 2 plus 2?"}]
REPLIES = {
    "qwen3": ("<think>\nTwo plus two.\n</think>\n\nIt is 4.<|im_end|>", "Two plus two.", "It is 4."),
    "gpt_oss": (
        "<|channel|>analysis<|message|>Two plus two.<|end|><|start|>assistant<|channel|>final<|message|>"
        "It is 4.<|return|>",
        "Two plus two.",
        "It is 4.",
    ),
}


@pytest.fixture(scope="module", params=["qwen3", "gpt_oss"])
def served(request, tmp_path_factory):
    from tunekit.serve.app import create_app

    template = request.param
    like = {"qwen3": "qwen3", "gpt_oss": "gpt-oss-20b"}[template]
    folder = build_tiny_model(tmp_path_factory.mktemp(template) / "model", like=like, num_layers=1)
    engine = scripted_engine(folder, REPLIES[template][0], template=template)
    for url in serve_in_thread(create_app(engine, "tiny")):
        yield template, url


def _post(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"model": "tiny", "messages": HI, **body}, timeout=60)


def test_message_has_reasoning_content_beside_content(served):
    template, url = served
    _, thought, answer = REPLIES[template]
    choice = _post(url).json()["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": answer, "reasoning_content": thought}
    assert choice["finish_reason"] == "stop"


def test_stream_sends_the_thought_then_the_answer(served):
    template, url = served
    _, thought, answer = REPLIES[template]
    events = [line[6:] for line in _post(url, stream=True).text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    deltas = [json.loads(e)["choices"][0]["delta"] for e in events[1:-2]]
    kinds = [next(iter(d)) for d in deltas]
    assert kinds == sorted(kinds, key=lambda k: k != "reasoning_content")  # every thought chunk before the answer
    assert "".join(d.get("reasoning_content", "") for d in deltas) == thought
    assert "".join(d.get("content", "") for d in deltas) == answer
    assert len(deltas) > 2 and json.loads(events[-2])["choices"][0]["finish_reason"] == "stop"


def test_a_template_without_thought_markers_has_no_reasoning_content(tiny_qwen):
    from tunekit.serve.app import create_app

    engine = scripted_engine(tiny_qwen, "<think>\nHm\n</think>\n\nIt is 4.<|im_end|>", template="qwen")
    server = serve_in_thread(create_app(engine, "tiny"))
    try:
        message = _post(next(server)).json()["choices"][0]["message"]
    finally:
        server.close()
    assert message == {"role": "assistant", "content": "<think>\nHm\n</think>\n\nIt is 4."}
