"""tunekit predict / do_predict: batched generation, the output files, and metrics against hand-computed values."""

from __future__ import annotations

import json

import pytest

from tests.helpers import base_config, write_dataset
from tunekit.config import load_config

QA = [
    {"instruction": "What is 1 plus 1?", "input": "", "output": "2"},
    {"instruction": "Name a colour.", "input": "", "output": "red"},
    {"instruction": "Say hello in a long and friendly way please.", "input": "", "output": "hello"},
    {"instruction": "中文问题：你好吗？", "input": "", "output": "我很好"},
    {"instruction": "x", "input": "", "output": "y"},
]
GEN = dict(do_sample=False, max_new_tokens=5)


@pytest.mark.parametrize(
    "pred,label,expected",
    [
        # jieba: 我/喜欢/猫 vs 我/喜欢/狗 -> unigrams 2/3 -> F 2/3; bigrams 1/2; LCS 2 -> 2/3;
        # BLEU-4 over characters: p1..p4 = 3/4, 2/3, 1/2, 0/1 -> smoothing method3 makes p4 = 1/2 -> (1/8)^(1/4)
        (
            "我喜欢猫",
            "我喜欢狗",
            {"rouge-1": 66.6667, "rouge-2": 50.0, "rouge-l": 66.6667, "bleu-4": 59.4604, "exact_match": 0.0},
        ),
        # n-grams count once (rouge's sets): R1 = 3 of {the,cat,sat,on,mat} -> P 1, R 3/5 -> F .75;
        # R2 P 1, R 2/5 -> 4/7; LCS 3 of 6 reference tokens -> P 1, R 1/2 -> 2/3;
        # BLEU: all precisions 1, brevity penalty exp(1 - 22/11) = e^-1
        (
            "the cat sat",
            "the cat sat on the mat",
            {"rouge-1": 75.0, "rouge-2": 57.1429, "rouge-l": 66.6667, "bleu-4": 36.7879, "exact_match": 0.0},
        ),
        ("same answer", "same answer ", {"rouge-1": 100.0, "rouge-2": 100.0, "rouge-l": 100.0, "exact_match": 100.0}),
        ("", "abc", {"rouge-1": 0.0, "rouge-2": 0.0, "rouge-l": 0.0, "exact_match": 0.0}),
    ],
)
def test_metrics_match_hand_computed_values(pred, label, expected):
    from tunekit.infer.metrics import sample_scores

    scores = sample_scores(pred, label)
    for (
        key,
        value,
    ) in expected.items():  # the hand values are written to 4 decimals (rounding <= 5e-5); 1e-3 allows that
        assert scores[key] == pytest.approx(value, abs=1e-3), key


def test_scores_are_averaged_over_samples():
    from tunekit.infer.metrics import score_predictions

    got = score_predictions(["我喜欢猫", "abc"], ["我喜欢狗", "abc"])
    assert got["rouge-1"] == pytest.approx((66.6667 + 100) / 2, abs=1e-3) and got["exact_match"] == 50.0


def test_predict_cli_batches_left_padded_like_single_generation(tiny_llama, tmp_path, capsys):
    """tiny_llama: its greedy replies differ per prompt (tiny_qwen's are one repeated token), so order mix-ups show."""
    from tunekit.cli.main import main
    from tunekit.infer.engine import ChatEngine

    write_dataset(tmp_path / "data", "qa", QA)
    opts = dict(
        model_name_or_path=str(tiny_llama),
        template="llama3",
        eval_dataset="qa",
        dataset_dir=str(tmp_path / "data"),
        output_dir=str(tmp_path / "out"),
        per_device_eval_batch_size=3,
        disable_tqdm=True,
        **GEN,
    )
    assert main(["predict", *[f"{k}={v}" for k, v in opts.items()]]) == 0
    assert "generated tokens/s" in capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "out" / "generated_predictions.jsonl").read_text().splitlines()]
    assert [r["label"] for r in rows] == [q["output"] for q in QA]
    engine = ChatEngine(load_config(None, opts))
    for row, q in zip(rows, QA):  # batch of 3, left padded, sorted by length == one prompt at a time
        msgs = [{"role": "user", "content": q["instruction"]}]
        assert row["prompt"] == engine.tokenizer.decode(engine.render(msgs))
        assert row["prediction"] == row["predict"] == engine.chat(msgs)[0].text
    assert len({r["prediction"] for r in rows}) >= 3
    results = json.loads((tmp_path / "out" / "predict_results.json").read_text())
    assert {"predict_bleu-4", "predict_rouge-1", "predict_rouge-2", "predict_rouge-l", "predict_exact_match"} <= set(
        results
    )
    assert (
        results["predict_samples"] == 5
        and results["predict_generated_tokens"] == 25
        and results["predict_tokens_per_second"] > 0
    )


@pytest.mark.slow
def test_do_predict_after_training(tiny_qwen, tmp_path):
    from tunekit.flow import run_train

    data = tmp_path / "data"
    write_dataset(data, "toy", QA)
    out = tmp_path / "run"
    cfg = load_config(
        None,
        base_config(
            tiny_qwen,
            data,
            out,
            max_steps=1,
            finetuning_type="lora",
            do_train=True,
            do_predict=True,
            eval_dataset="toy",
            per_device_eval_batch_size=2,
            **GEN,
        ),
    )
    results = run_train(cfg)
    assert results["predict_samples"] == 5 and "predict_rouge-l" in results
    assert len((out / "generated_predictions.jsonl").read_text().splitlines()) == 5
    assert json.loads((out / "predict_results.json").read_text())["predict_samples"] == 5
