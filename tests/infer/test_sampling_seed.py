"""Sampling is random unless a seed is given: the training seed is not applied on every call.

Before: every generation ran ``torch.manual_seed(cfg.seed)`` (the training seed, 42 by default), so ``n=3``
returned three identical replies, the next call the same again, and two ``tunekit chat`` runs answered alike.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tunekit.config import load_config

HI = [{"role": "user", "content": "Hello"}]
SAMPLING = dict(template="qwen", do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8)


@pytest.fixture(scope="module")
def engine(tiny_qwen):
    from tunekit.infer.engine import ChatEngine

    # seed=42 set explicitly, as training configs do: it must not seed generation
    return ChatEngine(load_config(None, dict(model_name_or_path=str(tiny_qwen), seed=42, **SAMPLING)))


def test_unseeded_replies_differ_and_n_choices_are_independent(engine):
    three = [r.text for r in engine.chat(HI, n=3)]
    assert len(set(three)) == 3, three
    again = [r.text for r in engine.chat(HI, n=3)]
    assert not set(again) & set(three), (three, again)


def test_a_seed_reproduces_and_choice_i_uses_seed_plus_i(engine):
    from tunekit.infer.engine import choice_seed

    seeded = [r.text for r in engine.chat(HI, n=3, seed=7)]
    assert len(set(seeded)) == 3
    assert [r.text for r in engine.chat(HI, n=3, seed=7)] == seeded
    assert [engine.chat(HI, seed=s)[0].text for s in (7, 8, 9)] == seeded
    assert choice_seed(7, 2) == 9 and choice_seed(2**64 - 1, 1) == 0 and choice_seed(None, 3) is None


def test_generation_seed_option_seeds_and_the_call_overrides_it(tiny_qwen, engine):
    from tunekit.infer.engine import ChatEngine

    seeded = ChatEngine(
        load_config(None, dict(model_name_or_path=str(tiny_qwen), generation_seed=7, **SAMPLING)),
        model=engine.model,
        tokenizer=engine.tokenizer,
    )
    assert [r.text for r in seeded.chat(HI, n=2)] == [r.text for r in engine.chat(HI, n=2, seed=7)]
    assert seeded.chat(HI, seed=8)[0].text == engine.chat(HI, seed=8)[0].text


def _chat_once(model, *extra: str) -> str:
    env = {**os.environ, "TUNEKIT_WARM": "0"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tunekit.cli.main",
            "chat",
            f"model_name_or_path={model}",
            *[f"{k}={v}" for k, v in SAMPLING.items()],
            *extra,
            "--prompt",
            "Hello",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow
def test_two_chat_runs_differ_unless_generation_seed_is_set(tiny_qwen, engine, capsys):
    from tunekit.cli.main import main

    # separate processes: torch's default generator starts from the same seed in every process
    assert _chat_once(tiny_qwen) != _chat_once(tiny_qwen)
    capsys.readouterr()
    args = [f"model_name_or_path={tiny_qwen}", *[f"{k}={v}" for k, v in SAMPLING.items()], "generation_seed=3"]
    for _ in range(2):
        assert main(["chat", *args, "--prompt", "Hello"]) == 0
        assert capsys.readouterr().out == engine.chat(HI, seed=3)[0].text + "\n"
