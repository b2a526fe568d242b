"""gpt-oss (``template: gpt_oss``) tool calls through the OpenAI API: a tiny gpt-oss made to write a harmony call
(tests/reply_helpers.py) comes back as ``tool_calls`` with its analysis message as ``reasoning_content``, whether the
call's header is written as the official chat template writes it or as OpenAI's harmony format does; generation stops
at ``<|call|>``; a tool round trip renders as the official template renders it."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.helpers import freeze_harmony_day, serve_in_thread
from tests.reply_helpers import scripted_engine
from tunekit.tiny.text import build_tiny_model

HI = [{"role": "user", "content": "Weather in Paris?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
THOUGHT = "<|channel|>analysis<|message|>Ask the tool.<|end|><|start|>assistant"
#: the call as the official chat template writes it, and as OpenAI's harmony format (and gpt-oss) writes it
CALLS = {
    "official": THOUGHT + ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>',
    "harmony": THOUGHT
    + '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
}
CALL = {"name": "get_weather", "arguments": '{"city": "Paris"}'}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("gptoss") / "model", like="gpt-oss-20b", num_layers=1)


@pytest.fixture(scope="module", params=list(CALLS))
def served(request, folder):
    from tunekit.serve.app import create_app

    engine = scripted_engine(folder, CALLS[request.param], template="gpt_oss")
    for url in serve_in_thread(create_app(engine, "tiny")):
        yield engine, url


def _post(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"model": "tiny", "messages": HI, **body}, timeout=60)


def test_a_harmony_call_is_returned_as_tool_calls_with_its_thought(served):
    engine, url = served
    assert engine.tokenizer.convert_tokens_to_ids("<|call|>") in engine.stop_ids  # generation ends at the call
    choice = _post(url, tools=TOOLS).json()["choices"][0]
    message = choice["message"]
    assert choice["finish_reason"] == "tool_calls"
    assert [c["function"] for c in message.pop("tool_calls")] == [CALL]
    assert message == {"role": "assistant", "content": None, "reasoning_content": "Ask the tool."}


def test_a_streamed_harmony_call_sends_the_thought_then_the_call(served):
    _, url = served
    events = [line[6:] for line in _post(url, tools=TOOLS, stream=True).text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    deltas = [json.loads(e)["choices"][0]["delta"] for e in events[1:-2]]
    assert deltas[0] == {"reasoning_content": "Ask the tool."}
    assert [c["function"] for c in deltas[1]["tool_calls"]] == [CALL] and deltas[1]["tool_calls"][0]["index"] == 0
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "tool_calls"


def test_without_tools_the_call_stays_text(served):
    _, url = served
    message = _post(url).json()["choices"][0]["message"]
    assert "tool_calls" not in message and message["reasoning_content"] == "Ask the tool."
    assert message["content"] == (
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}'
    )


def test_a_tool_round_trip_renders_as_the_official_template(served, monkeypatch):
    """The call sent back and the tool's result: the prompt is the official template's (the call's thought kept, no
    final answer follows it); several calls in one message are a 400 (harmony makes one call per message)."""
    freeze_harmony_day(monkeypatch)
    engine, url = served
    call = {"id": "call_1", "type": "function", "function": CALL}
    msgs = HI + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    resp = _post(url, messages=msgs, tools=TOOLS)
    hf = HI + [
        {
            "role": "assistant",
            "tool_calls": [{"type": "function", "function": {**CALL, "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "sunny"},
    ]
    official = engine.tokenizer.apply_chat_template(hf, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    turns = HI + [
        {"role": "function_call", "content": json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}])},
        {"role": "observation", "content": "sunny"},
    ]
    ids = engine.render(turns, tools=TOOLS)
    assert engine.tokenizer.decode(ids) == official and official.endswith(
        '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny"<|end|><|start|>assistant'
    )
    assert resp.status_code == 200 and resp.json()["usage"]["prompt_tokens"] == len(ids)
    two = HI + [{"role": "assistant", "content": None, "tool_calls": [call, {**call, "id": "call_2"}]}, msgs[2]]
    refused = _post(url, messages=two, tools=TOOLS)
    assert refused.status_code == 400 and "message 1 holds 2 function calls" in refused.json()["error"]["message"]
