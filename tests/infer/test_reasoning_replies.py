"""A reasoning model's reply split into thought and answer by the engine (chat, predict), on tiny models made to
write a thought and an answer (tests/reply_helpers.py); gpt-oss stops where its official template ends a reply."""

from __future__ import annotations

import json

import pytest

from tests.helpers import write_dataset
from tests.reply_helpers import scripted_engine
from tunekit.tiny.text import build_tiny_model

HI = [{"role": "user", "content": "What is 2 plus 2?"}]
GPT_OSS_REPLY = (
    "<|channel|>analysis<|message|>Two plus two.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.<|return|>"
)
REPLIES = {"qwen3": "<think>\nTwo plus two.\n</think>\n\nIt is 4.<|im_end|>", "gpt_oss": GPT_OSS_REPLY}
LIKE = {"qwen3": "qwen3", "gpt_oss": "gpt-oss-20b"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {
        t: build_tiny_model(tmp_path_factory.mktemp(t) / "model", like=like, num_layers=1) for t, like in LIKE.items()
    }


@pytest.mark.parametrize("template", ["qwen3", "gpt_oss"])
def test_chat_reply_is_split(folders, template):
    engine = scripted_engine(folders[template], REPLIES[template], template=template)
    generation = engine.start(HI)
    parts = list(generation.parts())
    assert "".join(t for k, t in parts if k == "reasoning") == "Two plus two."
    assert "".join(t for k, t in parts if k == "content") == "It is 4."
    assert [k for k, _ in parts] == sorted((k for k, _ in parts), key=lambda k: k != "reasoning")
    response = engine.chat(HI)[0]
    assert (response.reasoning, response.text, response.finish_reason) == ("Two plus two.", "It is 4.", "stop")
    assert list(engine.stream_chat(HI)) and "".join(engine.stream_chat(HI)) == "It is 4."  # the answer only


def test_gpt_oss_stops_at_return_and_call_not_at_end(folders):
    engine = scripted_engine(folders["gpt_oss"], GPT_OSS_REPLY, template="gpt_oss")
    vocab = engine.tokenizer.get_vocab()
    assert vocab["<|return|>"] in engine.stop_ids and vocab["<|call|>"] in engine.stop_ids
    assert vocab["<|end|>"] not in engine.stop_ids  # it ends the analysis message, not the reply
    generation = engine.start(HI)
    list(generation)
    assert generation.completion_tokens == len(engine.tokenizer(GPT_OSS_REPLY, add_special_tokens=False).input_ids)


def test_gpt_oss_stop_token_that_is_no_harmony_marker_is_not_answer_text(folders):
    """<|endoftext|> (a stop of gpt-oss's generation_config) ends the reply; it is decoded with the markup kept, so it
    must not reach the answer, streamed or batched."""
    engine = scripted_engine(
        folders["gpt_oss"], GPT_OSS_REPLY.replace("<|return|>", "<|endoftext|>"), template="gpt_oss"
    )
    response = engine.chat(HI)[0]
    assert (response.reasoning, response.text, response.finish_reason) == ("Two plus two.", "It is 4.", "stop")
    batched = engine.generate_batch([engine.render(HI)])[0]
    assert (batched.reasoning, batched.text) == ("Two plus two.", "It is 4.")


@pytest.mark.parametrize("template", ["qwen3", "gpt_oss"])
def test_predict_writes_the_answer_and_the_reasoning(folders, template, tmp_path):
    from tunekit.config import load_config
    from tunekit.infer.predict import run_predict

    records = [
        {"instruction": "What is 2 plus 2?", "input": "", "output": "<think>\nAdd them.\n</think>\n\nIt is 4."},
        {"instruction": "And 2 plus 3?", "input": "", "output": "It is 5."},
    ]
    write_dataset(tmp_path / "data", "qa", records)
    opts = dict(template=template, eval_dataset="qa", dataset_dir=str(tmp_path / "data"), disable_tqdm=True)
    engine = scripted_engine(folders[template], REPLIES[template], **opts)
    cfg = load_config(None, dict(model_name_or_path=str(folders[template]), output_dir=str(tmp_path / "out"), **opts))
    metrics = run_predict(cfg, engine=engine)
    rows = [json.loads(line) for line in (tmp_path / "out" / "generated_predictions.jsonl").read_text().splitlines()]
    assert [(r["predict"], r["prediction"], r["reasoning"]) for r in rows] == [
        ("It is 4.", "It is 4.", "Two plus two.")
    ] * 2
    assert [r["label"] for r in rows] == ["It is 4.", "It is 5."]  # the labels' answers are compared
    assert metrics["predict_exact_match"] == 50.0


def test_cli_chat_marks_the_thought_and_keeps_the_answer(folders):
    import io

    from tunekit.cli.chat_cmd import repl
    from tunekit.infer.reasoning import write_reply

    engine = scripted_engine(folders["qwen3"], REPLIES["qwen3"], template="qwen3")
    out = io.StringIO()
    assert repl(engine, ["What is 2 plus 2?\n"], out) == 1
    assert out.getvalue() == "Thinking: Two plus two.\nIt is 4.\n"
    dimmed = io.StringIO()  # a terminal: the thought dimmed too
    assert write_reply(engine.stream_parts(HI), dimmed, dim=True) == ("Two plus two.", "It is 4.")
    assert dimmed.getvalue() == "\x1b[2mThinking: Two plus two.\x1b[0m\nIt is 4."


def test_board_chat_shows_the_thought_in_a_collapsed_block(folders):
    import copy

    from tunekit.webui.chat import ChatSession

    chat = ChatSession()
    chat.engine = scripted_engine(folders["gpt_oss"], GPT_OSS_REPLY, template="gpt_oss")
    steps = [copy.deepcopy(step) for step in chat.turn(None, "What is 2 plus 2?", lang="zh")]  # as each was shown
    assert steps[-1]["shown"] == [
        {"role": "user", "content": "What is 2 plus 2?"},
        {"role": "assistant", "content": "Two plus two.", "metadata": {"title": "思考过程", "status": "done"}},
        {"role": "assistant", "content": "It is 4."},
    ]
    assert steps[-1]["messages"][-1] == {"role": "assistant", "content": "It is 4.", "reasoning": "Two plus two."}
    streaming = [s["shown"][1]["metadata"]["status"] for s in steps[1:] if len(s["shown"]) == 3]
    assert streaming[0] == "pending" and streaming[-1] == "done"


def test_an_exported_folder_with_its_own_template_is_split(folders):
    """template unset: the folder's chat_template (tunekit's export of qwen3, which writes </think>)."""
    engine = scripted_engine(folders["qwen3"], REPLIES["qwen3"])
    assert engine.cfg.template == "jinja"
    response = engine.chat(HI)[0]
    assert (response.reasoning, response.text) == ("Two plus two.", "It is 4.")
