"""tunekit chat (driven non-interactively) and the ChatEngine contract: streaming, history, stops, serialization."""

from __future__ import annotations

import io
import threading

import pytest

from tunekit.config import load_config
from tunekit.errors import ConfigError, EnvironmentProblem

SAMPLING = ["do_sample=true", "temperature=1.5", "top_p=1.0", "top_k=0", "max_new_tokens=6"]


@pytest.fixture(scope="module")
def engine(tiny_qwen):
    from tunekit.infer.engine import ChatEngine

    return ChatEngine(load_config(None, [f"model_name_or_path={tiny_qwen}", "template=qwen", *SAMPLING]))


def test_chat_prompt_flag_prints_the_streamed_reply(tiny_qwen, engine, capsys, monkeypatch):
    from tunekit.cli.main import main

    expected = engine.chat([{"role": "user", "content": "Hi"}], system="Be brief.", seed=5)[0].text
    capsys.readouterr()
    args = [
        f"model_name_or_path={tiny_qwen}",
        "template=qwen",
        *SAMPLING,
        "generation_seed=5",
        "--system",
        "Be brief.",
    ]
    assert main(["chat", *args, "--prompt", "Hi"]) == 0
    assert capsys.readouterr().out == expected + "\n"
    monkeypatch.setattr("sys.stdin", io.StringIO("Hi\nexit\n"))  # not a terminal: one reply per line
    assert main(["chat", *args]) == 0
    assert capsys.readouterr().out == expected + "\n"


def test_stdin_repl_keeps_history_clear_resets_and_exit_stops(engine):
    from tunekit.cli.chat_cmd import repl

    seen = []

    class Recorder:
        """Wraps the engine to record what each turn sent (the REPL only calls stream_parts)."""

        def stream_parts(self, messages, system=None, **gen):
            seen.append([dict(m) for m in messages])
            yield from engine.stream_parts(messages, system=system, seed=len(seen))

    out = io.StringIO()
    n = repl(Recorder(), io.StringIO("Hi\nHow are you?\n\nclear\nAgain\nexit\nnever sent\n"), out)
    assert n == 3
    assert [len(m) for m in seen] == [1, 3, 1]  # second turn carries the first exchange; `clear` reset it
    assert seen[1][1]["role"] == "assistant" and seen[1][1]["content"] == out.getvalue().split("\n")[0]
    assert seen[2] == [{"role": "user", "content": "Again"}]
    assert len(out.getvalue().splitlines()) >= 3


def test_stream_chunks_join_to_chat_and_report_usage(engine):
    msgs = [{"role": "user", "content": "Tell me something"}]
    gen = engine.start(msgs, seed=11)
    pieces = list(gen)
    assert len(pieces) > 1 and "".join(pieces) == gen.text == engine.chat(msgs, seed=11)[0].text
    assert (
        gen.prompt_tokens == len(engine.render(msgs)) and gen.completion_tokens == 6 and gen.finish_reason == "length"
    )
    assert gen.tokens_per_second > 0


def test_template_stop_token_ends_generation(engine):
    """The end-of-turn token is an eos id of generate; it never shows in the text."""
    im_end = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end in engine.stop_ids
    assert "<|im_end|>" not in engine.chat([{"role": "user", "content": "x"}], seed=1)[0].text


def test_generation_is_serialized(engine):
    msgs = [[{"role": "user", "content": f"Question {i}"}] for i in range(3)]
    alone = [engine.chat(m, seed=i)[0].text for i, m in enumerate(msgs)]
    out = [None] * 3

    def run(i):
        out[i] = "".join(engine.stream_chat(msgs[i], seed=i))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert out == alone


def test_engine_errors(engine, tiny_qwen):
    from tunekit.infer.engine import ChatEngine

    with pytest.raises(ConfigError, match="unknown generation option"):
        engine.start([{"role": "user", "content": "x"}], beams=2)
    with pytest.raises(EnvironmentProblem, match="infer_backend: vllm needs the vllm package"):
        ChatEngine(load_config(None, dict(model_name_or_path=str(tiny_qwen), template="qwen", infer_backend="vllm")))
