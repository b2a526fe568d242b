"""tunekit api under load: no single client can stall the others.

Generations take turns on the model every few tokens (``infer/turns.py``), prompts are tokenized in a worker
thread after a cheap size check, and bodies are refused by byte size before they are parsed. The tiny random model
decodes greedily, so a reply is one fixed text per prompt and a generation runs exactly ``max_tokens`` tokens.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.helpers import serve_in_thread
from tunekit.config import load_config

MODEL = "tiny"
HI = [{"role": "user", "content": "Hi"}]
CLIENTS = 16
HOSTILE_GENERATIONS = 2  # the n=16 request and the stalled stream reader take turns beside the clients


@pytest.fixture(scope="module")
def engine(tiny_qwen):
    from tunekit.infer.engine import ChatEngine

    return ChatEngine(
        load_config(None, dict(model_name_or_path=str(tiny_qwen), template="qwen", do_sample=False, max_new_tokens=8))
    )


@pytest.fixture(scope="module")
def server(engine):
    from tunekit.serve.app import Limits, create_app

    limits = Limits(
        max_tokens=2000, queue_timeout=30.0, max_queue=CLIENTS + HOSTILE_GENERATIONS + 2, stream_timeout=5.0
    )
    app = create_app(engine, MODEL, max_body_bytes=200_000, limits=limits)
    for url in serve_in_thread(app):
        yield url, app


def _post(url: str, body, timeout: float = 120) -> httpx.Response:
    content = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return httpx.post(
        f"{url}/v1/chat/completions", content=content, headers={"Content-Type": "application/json"}, timeout=timeout
    )


def _idle(app, within: float) -> None:
    start = time.time()
    while app.state.inflight and time.time() - start < within:
        time.sleep(0.05)
    assert not app.state.inflight, "a cancelled generation still runs"


def _run_alone(g) -> str:
    return "".join(g)


def test_generations_take_turns_and_keep_their_own_tokens(engine):
    """Two short generations queued behind a long one finish after a few turns, not after the long one; each
    produces exactly the tokens it produces alone: greedy, and seeded sampling (the two sampled ones hand their
    turns on mid-reply, each keeps its own random state)."""
    from tunekit.infer.turns import QUANTUM

    def sampled(seed: int) -> dict:
        return dict(max_new_tokens=QUANTUM + 2, seed=seed, do_sample=True, temperature=1.0, top_p=1.0, top_k=0)

    alone = [_run_alone(engine.start(HI, **sampled(seed))) for seed in (5, 6)]
    long_alone = _run_alone(engine.start(HI, max_new_tokens=3 * QUANTUM))
    long = engine.start(HI, max_new_tokens=2000)  # greedy: the tiny model runs all 2,000 tokens
    shorts = [engine.start(HI, **sampled(seed)) for seed in (5, 6)]
    out: dict = {}
    me = object()
    assert engine.lock.acquire(me)  # hold the model: the generations queue in this order
    try:
        threads = []
        for k, g in enumerate([long, *shorts]):
            threads.append(threading.Thread(target=lambda k=k, g=g: out.__setitem__(k, _run_alone(g)), daemon=True))
            threads[-1].start()
            while engine.lock.waiting() < k + 1:
                time.sleep(0.01)
    finally:
        engine.lock.release(me)
    for t in threads[1:]:
        t.join(60)
    assert [out.get(1), out.get(2)] == alone and alone[0] != alone[1]
    assert threads[0].is_alive() and 0 not in out  # the long generation was still running
    long.cancel()
    threads[0].join(60)
    assert long_alone.startswith(out[0][: len(long_alone)]) and out[0].startswith(long_alone[:1])
    assert 2 * QUANTUM <= long.completion_tokens < 2000 and not engine.lock.locked()


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


def test_bodies_are_parsed_and_prompts_tokenized_off_the_event_loop(server, engine, monkeypatch):
    from tunekit.serve import app as app_module

    url, _ = server
    seen: dict[str, list[bool]] = {"render": [], "parse": []}
    render, parse = engine.render, app_module.parse_json

    def watched_render(*args, **kwargs):
        seen["render"].append(_on_event_loop())
        return render(*args, **kwargs)

    def watched_parse(body):
        seen["parse"].append(_on_event_loop())
        return parse(body)

    monkeypatch.setattr(engine, "render", watched_render)
    monkeypatch.setattr(app_module, "parse_json", watched_parse)
    resp = _post(url, {"model": MODEL, "messages": HI, "max_tokens": 2})
    assert resp.status_code == 200 and seen == {"render": [False], "parse": [False]}


def test_text_that_cannot_fit_the_context_is_refused_before_tokenizing(server, engine, monkeypatch):
    url, _ = server
    calls: list = []
    monkeypatch.setattr(engine, "render", lambda *a, **k: calls.append(a))
    ctx, per_token = engine.context_length, engine.most_chars_per_token
    assert per_token == max(len(t) for t in engine.tokenizer.get_vocab())
    fits = "x" * (ctx * per_token)
    too_long = fits + "y"
    resp = _post(url, {"model": MODEL, "messages": [{"role": "user", "content": too_long}]})
    assert resp.status_code == 400 and calls == []
    assert resp.json()["error"] == {
        "message": f"The messages hold {len(too_long):,} characters, more than the model's context of {ctx} tokens "
        "can "
        f"hold (at most {ctx * per_token:,}: this tokenizer's longest token has {per_token} characters); "
        f"shorten the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    # at the bound the text is tokenized (and then found too long by its real token count)
    monkeypatch.undo()
    at_bound = _post(url, {"model": MODEL, "messages": [{"role": "user", "content": fits}]})
    assert (
        at_bound.status_code == 400 and "but the model's context is 2048 tokens" in at_bound.json()["error"]["message"]
    )


def test_body_limits_default_and_flags(monkeypatch):
    from tunekit.errors import ConfigError
    from tunekit.serve.admission import default_body_bytes
    from tunekit.serve.server import settings_from_env

    assert default_body_bytes(2048) == 2**20 and default_body_bytes(131072) == 32 * 131072
    assert default_body_bytes(None) == 4 * 2**20
    monkeypatch.delenv("API_PORT", raising=False)
    monkeypatch.setenv("API_MAX_BODY_MB", "0.5")
    assert settings_from_env().max_body_bytes == 500_000
    assert settings_from_env(max_body_bytes=123).max_body_bytes == 123
    monkeypatch.setenv("API_PORT", "0")
    with pytest.raises(ConfigError, match=r"^API_PORT must be a port number from 1 to 65535, got '0'\.$"):
        settings_from_env()
    assert settings_from_env(port=8123).port == 8123  # the flag wins; the environment is not read
    monkeypatch.delenv("API_PORT")
    monkeypatch.setenv("API_MAX_BODY_MB", "lots")
    with pytest.raises(
        ConfigError, match=r"^API_MAX_BODY_MB must be a positive number of megabytes \(e.g. 4\), got 'lots'\.$"
    ):
        settings_from_env()


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--port", "70000"], "--port must be a port number from 1 to 65535, got '70000'."),
        (["--port", "http"], "--port must be a port number from 1 to 65535, got 'http'."),
        (["--max-body-mb", "-1"], "--max-body-mb must be a positive number of megabytes (e.g. 4), got '-1'."),
    ],
)
def test_api_flags_are_checked_before_the_model_loads(tiny_qwen, capsys, argv, message):
    from tunekit.cli.main import main

    assert main(["api", f"model_name_or_path={tiny_qwen}", "template=qwen", *argv]) != 0
    assert message in capsys.readouterr().err


def _timed(url: str, body: dict) -> tuple[float, httpx.Response]:
    start = time.perf_counter()
    resp = _post(url, body)
    return time.perf_counter() - start, resp


def test_sixteen_clients_and_a_hostile_one(server, engine):
    """16 concurrent clients and one hostile client (a 4 MB body, a prompt far past the context, n=16 x 1,900
    tokens, a stream it stops reading): every client gets its exact answer, and the slowest one within
    (clients + hostile generations + 1) x the latency of one request alone x a safety factor of 4 (the clients'
    generations share the model with each other and with the hostile ones, turn by turn)."""
    url, app = server
    prompts = [[{"role": "user", "content": f"Count to {i}"}] for i in range(CLIENTS)]
    expected = [engine.chat(p, max_new_tokens=8)[0].text for p in prompts]
    alone = max(_timed(url, {"model": MODEL, "messages": prompts[0], "max_tokens": 8})[0] for _ in range(3))
    bound = (CLIENTS + HOSTILE_GENERATIONS + 1) * alone * 4

    huge_n = {"model": MODEL, "messages": HI, "n": 16, "max_tokens": 1900, "stream": True}
    stalled = {"model": MODEL, "messages": HI, "max_tokens": 2000, "stream": True}
    with (
        httpx.stream("POST", f"{url}/v1/chat/completions", json=huge_n, timeout=120) as hog,
        httpx.stream("POST", f"{url}/v1/chat/completions", json=stalled, timeout=120) as staller,
    ):
        held = [hog.iter_lines(), staller.iter_lines()]  # kept: a dropped iterator closes the stream
        for it in held:
            assert next(it).startswith("data: ")  # both generate from now on; the staller reads nothing more
        with ThreadPoolExecutor(CLIENTS + 2) as pool:
            big = pool.submit(_post, url, {"model": MODEL, "messages": [{"role": "user", "content": "x" * 4_000_000}]})
            wide = pool.submit(_post, url, {"model": MODEL, "messages": [{"role": "user", "content": "x " * 90_000}]})
            runs = [pool.submit(_timed, url, {"model": MODEL, "messages": p, "max_tokens": 8}) for p in prompts]
            results = [r.result() for r in runs]
            assert big.result().status_code == 413 and wide.result().status_code == 400
        assert [r.status_code for _, r in results] == [200] * CLIENTS
        assert [r.json()["choices"][0]["message"]["content"] for _, r in results] == expected
        slowest = max(t for t, _ in results)
        assert slowest <= bound, f"slowest client {slowest:.2f} s > bound {bound:.2f} s (alone {alone:.3f} s)"
        assert app.state.inflight  # the hostile generations were still running all along
    _idle(app, within=10)


def test_a_composite_model_generates_one_request_at_a_time(engine, tmp_path):
    """A vision-language model keeps generation state on its modules between steps (Qwen2-VL's rope_deltas): its
    generations never interleave, and the API serves one request at a time there."""
    import anyio

    from tunekit.infer.engine import ChatEngine
    from tunekit.serve.admission import Places
    from tunekit.serve.app import Limits
    from tunekit.serve.request_checks import APIError
    from tunekit.tiny.vlm import build_tiny_vlm

    vlm = ChatEngine(
        load_config(
            None,
            dict(
                model_name_or_path=str(build_tiny_vlm(tmp_path / "vl", like="qwen2-vl", seed=0)),
                template="qwen2_vl",
                do_sample=False,
                max_new_tokens=4,
            ),
        )
    )
    assert engine.interleaves and not vlm.interleaves
    places = Places(Limits(queue_timeout=0.0, max_queue=3), interleaved=vlm.interleaves)

    async def second_request() -> APIError:
        await places.acquire()
        with pytest.raises(APIError) as err:
            await places.acquire()
        places.release()
        return err.value

    err = anyio.run(second_request)
    assert (places.size, err.status) == (1, 429)
    assert err.message == (
        "The server is busy: it serves one request at a time and no place came free for 0 s "
        "(api_queue_timeout); retry later."
    )
