"""Reward model: pairwise accuracy rises on a synthetic task; the value head is saved and
reloads with the same scores."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import base_config, train_rows
from tests.stage_helpers import write_preference
from tunekit.config import load_config
from tunekit.flow import run_train


@pytest.fixture(scope="module")
def pref_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rmdata")
    write_preference(folder, "toy", n=32, seed=0)
    write_preference(folder, "held", n=16, seed=1)
    return folder


@pytest.mark.parametrize("method", ["lora"])  # the full-model value head is covered by the ppo test
def test_reward_model_learns_and_reloads(tiny_qwen, pref_dir, tmp_path, method):
    from tunekit.train.batching import PairCollator
    from tunekit.train.stages.value_head import load_value_head_model

    out = tmp_path / "out"
    results = run_train(
        load_config(
            None,
            base_config(
                tiny_qwen,
                pref_dir,
                out,
                stage="rm",
                finetuning_type=method,
                max_steps=8,
                learning_rate=5e-3 if method == "lora" else 2e-3,
                eval_dataset="held",
                do_train=True,
                do_eval=True,
                per_device_eval_batch_size=8,
            ),
        )
    )
    rows = train_rows(out)
    accs = [r["rewards/accuracies"] for r in rows]
    assert sum(accs[-3:]) / 3 >= 0.9 and rows[-1]["loss"] < rows[0]["loss"] - 0.2, rows
    assert results["eval_accuracy"] >= 0.9, results
    assert (out / "value_head.safetensors").is_file()
    assert (out / ("adapter_model.safetensors" if method == "lora" else "model.safetensors")).is_file()

    # reload without tunekit's trainer; scores of held-out pairs still rank chosen first
    import json

    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    cfg = load_config(None, base_config(tiny_qwen, pref_dir, tmp_path / "x", stage="rm", dataset="held"))
    tok = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tok, "rm")
    batch = PairCollator(tok.pad_token_id)([data.train[i] for i in range(len(data.train))])
    model = load_value_head_model(out)
    with torch.no_grad():
        scores = model.score(batch["input_ids"], batch["attention_mask"])
    n = len(data.train)
    assert (scores[:n] > scores[n:]).float().mean().item() >= 0.9
    head = json.loads((out / "all_results.json").read_text())
    assert "eval_accuracy" in head


def test_a_saved_reward_model_scores_grpo_rollouts(tiny_qwen, pref_dir, tmp_path):
    from tests.helpers import alpaca_records, train_rows, write_dataset

    rm_out, rl_out = tmp_path / "rm", tmp_path / "rl"
    run_train(load_config(None, base_config(tiny_qwen, pref_dir, rm_out, stage="rm", max_steps=1)))
    write_dataset(pref_dir, "prompts", alpaca_records(4, seed=5))
    run_train(
        load_config(
            None,
            base_config(
                tiny_qwen,
                pref_dir,
                rl_out,
                stage="grpo",
                dataset="prompts",
                max_steps=2,
                reward_model=str(rm_out),
                num_generations=2,
                generation_max_new_tokens=3,
                per_device_train_batch_size=2,
                grpo_iterations=2,
                learning_rate=5e-2,
            ),
        )
    )
    first, second = train_rows(rl_out)
    assert first["rewards/std"] > 0  # scores come from the reward model's value head, one per completion
    # grpo_iterations 2: the second step optimises the same rollout off-policy (same rewards, ratio no longer 1)
    assert second["rewards/mean"] == first["rewards/mean"] and first["objective/clipfrac"] == 0.0
