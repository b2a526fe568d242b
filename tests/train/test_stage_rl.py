"""GRPO and PPO raise a programmatic reward on a tiny model; reward functions load by dotted path;
PPO saves its value head, which reloads."""

from __future__ import annotations

import pytest

from tests.helpers import alpaca_records, base_config, train_rows, write_dataset
from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.flow import run_train

REWARD = "tests.stage_helpers:ascii_share"


@pytest.fixture(scope="module")
def prompt_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rldata")
    write_dataset(folder, "toy", alpaca_records(16, seed=3))
    return folder


def _mean(rows, key, part):
    values = [r[key] for r in rows]
    k = max(1, len(values) // 4)
    chunk = values[:k] if part == "first" else values[-k:]
    return sum(chunk) / len(chunk)


RL_COMMON = dict(
    finetuning_type="full", gradient_checkpointing=False, generation_max_new_tokens=4, reward_funcs=REWARD
)


@pytest.mark.slow
def test_grpo_raises_the_reward(tiny_qwen, prompt_dir, tmp_path):
    out = tmp_path / "out"
    run_train(
        load_config(
            None,
            base_config(
                tiny_qwen,
                prompt_dir,
                out,
                stage="grpo",
                num_generations=8,
                per_device_train_batch_size=4,
                max_steps=24,
                learning_rate=1e-2,
                **RL_COMMON,
            ),
        )
    )
    rows = train_rows(out)
    first, last = _mean(rows, "rewards/mean", "first"), _mean(rows, "rewards/mean", "last")
    assert last > first + 0.1, [r["rewards/mean"] for r in rows]
    assert rows[0]["objective/kl"] == 0.0 and rows[-1]["objective/kl"] > 0
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out)  # the trained policy reloads with plain transformers


@pytest.mark.slow
def test_ppo_raises_the_reward_and_saves_its_value_head(tiny_qwen, prompt_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from tunekit.train.stages.value_head import load_value_head_model

    out = tmp_path / "out"
    run_train(
        load_config(
            None,
            base_config(
                tiny_qwen,
                prompt_dir,
                out,
                stage="ppo",
                per_device_train_batch_size=16,
                max_steps=24,
                learning_rate=1e-2,
                ppo_epochs=1,
                ppo_score_norm=True,
                **RL_COMMON,
            ),
        )
    )
    rows = train_rows(out)
    first, last = _mean(rows, "rewards/mean", "first"), _mean(rows, "rewards/mean", "last")
    assert last > first + 0.04, [r["rewards/mean"] for r in rows]  # PPO's fresh critic makes it noisier than GRPO here
    assert {"ppo/policy_loss", "ppo/value_loss", "objective/kl", "ppo/clipfrac"} <= set(rows[0])
    assert (out / "value_head.safetensors").is_file()
    model = load_value_head_model(out)
    assert model.v_head.weight.abs().sum() > 0
    AutoModelForCausalLM.from_pretrained(out)  # the policy alone reloads with plain transformers


def test_reward_configuration_errors(tiny_qwen, prompt_dir, tmp_path):
    with pytest.raises(ConfigError, match="stage grpo needs a reward: set reward_funcs"):
        run_train(load_config(None, base_config(tiny_qwen, prompt_dir, tmp_path / "a", stage="grpo")))
    with pytest.raises(ConfigError, match="reward_funcs: cannot import 'tests.stage_helpers:nope'"):
        run_train(
            load_config(
                None,
                base_config(
                    tiny_qwen, prompt_dir, tmp_path / "b", stage="grpo", reward_funcs="tests.stage_helpers:nope"
                ),
            )
        )
