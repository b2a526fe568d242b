"""tunekit api: the official openai client against a live server on 127.0.0.1, plus raw HTTP error cases."""

from __future__ import annotations

import json
import threading

import pytest

from tests.helpers import serve_in_thread
from tunekit.config import load_config

KEY = "sk-tunekit-test"
MODEL = "tiny"
HI = [{"role": "user", "content": "Hello, who are you?"}]


@pytest.fixture(scope="module")
def engine(tiny_qwen):
    from tunekit.infer.engine import ChatEngine

    # sampling (the tiny random model's greedy reply is one repeated token); every request passes a seed
    return ChatEngine(
        load_config(
            None,
            dict(
                model_name_or_path=str(tiny_qwen),
                template="qwen",
                do_sample=True,
                temperature=1.5,
                top_p=1.0,
                top_k=0,
                max_new_tokens=12,
            ),
        )
    )


@pytest.fixture(scope="module")
def server(engine):
    from tunekit.serve.app import create_app

    yield from serve_in_thread(create_app(engine, MODEL, api_key=KEY, max_body_bytes=20_000))


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0, timeout=60)


def test_models_and_non_streaming_completion(client, engine):
    assert [m.id for m in client.models.list().data] == [MODEL]
    expected = engine.chat(HI, max_new_tokens=5, seed=1)[0]
    assert len(set(expected.text)) > 2
    resp = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=5, n=2, seed=1)
    # choice i is seeded seed + i: independent choices, the first one equal to a single reply with that seed
    assert [c.message.content for c in resp.choices] == [
        r.text for r in engine.chat(HI, n=2, max_new_tokens=5, seed=1)
    ]
    assert resp.choices[0].message.content == expected.text != resp.choices[1].message.content
    assert [c.finish_reason for c in resp.choices] == ["length", "length"]
    assert resp.usage.prompt_tokens == 2 * expected.prompt_tokens
    assert resp.usage.completion_tokens == 10 and resp.usage.total_tokens == resp.usage.prompt_tokens + 10


def test_streaming_equals_non_streaming_and_ends_with_done(client, server):
    import httpx

    full = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=8, seed=2).choices[0].message.content
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=HI, max_tokens=8, stream=True, seed=2, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full and len(chunks) > 4
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 8
    body = {"model": MODEL, "messages": HI, "max_tokens": 3, "stream": True}
    raw = httpx.post(
        f"{server}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in raw.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and json.loads(events[0])["object"] == "chat.completion.chunk"


def test_stop_strings_cut_the_reply(client, engine):
    full = engine.chat(HI, max_new_tokens=12, seed=3)[0].text
    stop = full[3:5]
    assert full.index(stop) > 0
    resp = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=12, stop=[stop], seed=3)
    assert resp.choices[0].message.content == full[: full.index(stop)]
    assert resp.choices[0].finish_reason == "stop"


def test_concurrent_requests_do_not_mix(client):
    prompts = [[{"role": "user", "content": f"Count to {i}"}] for i in range(3)]
    alone = [
        client.chat.completions.create(model=MODEL, messages=p, max_tokens=6, seed=i).choices[0].message.content
        for i, p in enumerate(prompts)
    ]
    assert len(set(alone)) == 3
    results = [None] * 3

    def run(i):
        stream = client.chat.completions.create(model=MODEL, messages=prompts[i], max_tokens=6, stream=True, seed=i)
        results[i] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == alone


def test_tools_are_rendered_into_the_prompt(client, engine):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    plain = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
    with_tools = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2, tools=tools)
    assert with_tools.usage.prompt_tokens == len(engine.render(HI, tools=tools)) > plain.usage.prompt_tokens
    # a tool-call round trip: the assistant's call and the tool's result render as function_call / observation
    msgs = HI + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    resp = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=2, tools=tools)
    convo = HI + [
        {"role": "function_call", "content": json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}])},
        {"role": "observation", "content": "sunny"},
    ]
    assert resp.usage.prompt_tokens == len(engine.render(convo, tools=tools))
    assert "<tool_response>\nsunny\n</tool_response>" in engine.tokenizer.decode(engine.render(convo, tools=tools))


def test_tool_calls_are_parsed_for_each_format():
    from tunekit.serve.toolcalls import extract_tool_calls

    args = '{"city": "Paris"}'
    assert extract_tool_calls('<tool_call>\n{"name": "w", "arguments": {"city": "Paris"}}\n</tool_call>', "qwen") == (
        None,
        [("w", args)],
    )
    assert extract_tool_calls(
        'Sure.\n<tool_call>\n{"name": "w", "arguments": {"city": "Paris"}}\n</tool_call>', "qwen3"
    ) == ("Sure.", [("w", args)])
    assert extract_tool_calls('Action: w\nAction Input: {"city": "Paris"}', "default") == (None, [("w", args)])
    assert extract_tool_calls('w\n{"city": "Paris"}', "glm4") == (None, [("w", args)])
    assert extract_tool_calls('{"name": "w", "parameters": {"city": "Paris"}}', "llama3") == (None, [("w", args)])
    assert extract_tool_calls('[TOOL_CALLS] [{"name": "w", "arguments": {"city": "Paris"}}]', "mistral") == (
        None,
        [("w", args)],
    )
    assert extract_tool_calls("It is sunny.", "qwen") == ("It is sunny.", [])
    assert extract_tool_calls("<tool_call>not json</tool_call>", "qwen") == ("<tool_call>not json</tool_call>", [])


@pytest.mark.parametrize(
    "body,headers,status,fragment",
    [
        ({"model": MODEL, "messages": HI}, {}, 401, "API key"),
        ({"model": "gpt-4o", "messages": HI}, None, 404, "does not exist"),
        ({"model": MODEL, "messages": []}, None, 400, "must not be empty"),
        (
            {"model": MODEL, "messages": [{"role": "assistant", "content": "x"}]},
            None,
            400,
            "last message must be a user",
        ),
        ({"model": MODEL, "messages": HI + HI}, None, 400, "role 'user' but must be one of assistant"),
        ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, None, 400, "text only"),
        ({"model": MODEL, "messages": HI, "max_tokens": 0}, None, 422, "max_tokens"),
        ({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, None, 422, "messages.0.role"),
        ({"model": MODEL, "messages": HI, "n": "many"}, None, 422, "n:"),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "x" * 30_000}]},
            None,
            413,
            "larger than the limit",
        ),
        ("{not json", None, 400, "not valid JSON"),
    ],
)
def test_bad_requests_get_openai_errors(server, body, headers, status, fragment):
    import httpx

    headers = {"Authorization": f"Bearer {KEY}"} if headers is None else headers
    content = body if isinstance(body, str) else json.dumps(body)
    resp = httpx.post(
        f"{server}/v1/chat/completions",
        content=content,
        headers={**headers, "Content-Type": "application/json"},
        timeout=60,
    )
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and fragment in error["message"]


def test_unknown_route_and_model_card(server):
    import httpx

    auth = {"Authorization": f"Bearer {KEY}"}
    assert httpx.get(f"{server}/v1/nothing", headers=auth).json()["error"]["code"] == "not_found"
    assert httpx.get(f"{server}/v1/models/{MODEL}", headers=auth).json()["id"] == MODEL
    missing = httpx.get(f"{server}/v1/models/other", headers=auth)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    assert httpx.get(f"{server}/v1/models").status_code == 401


def test_api_settings_from_flags_and_env(monkeypatch):
    from tunekit.cli.args import pop_flags
    from tunekit.serve.server import settings_from_env

    monkeypatch.setenv("API_PORT", "9123")
    monkeypatch.setenv("API_KEY", "from-env")
    flags, rest = pop_flags(
        ["cfg.yaml", "--host", "0.0.0.0", "max_new_tokens=4", "--model-name=m"], ("--host", "--port", "--model-name")
    )
    assert rest == ["cfg.yaml", "max_new_tokens=4"]
    s = settings_from_env(host=flags.get("--host"), model_name=flags.get("--model-name"))
    assert (s.host, s.port, s.api_key, s.model_name) == ("0.0.0.0", 9123, "from-env", "m")
