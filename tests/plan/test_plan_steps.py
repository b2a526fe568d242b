"""Steps: the planner's arithmetic equals what the Hugging Face Trainer (transformers 5) and
accelerate's multi-process sharding actually do, and what `tunekit train` then runs."""

from __future__ import annotations

import pytest
import torch

from tunekit.train.steps import plan_steps, split_sizes


@pytest.fixture(scope="module")
def trainer_factory(tmp_path_factory):
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    model = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            vocab_size=32,
        )
    )
    out = tmp_path_factory.mktemp("steps")

    def make(n: int, batch: int, accum: int, epochs: float = 3.0, max_steps: int = -1, drop_last: bool = False):
        args = TrainingArguments(
            output_dir=str(out),
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accum,
            num_train_epochs=epochs,
            max_steps=max_steps,
            dataloader_drop_last=drop_last,
            use_cpu=True,
            report_to="none",
            save_strategy="no",
        )
        data = Dataset.from_dict({"input_ids": [[1, 2, 3]] * n, "labels": [[1, 2, 3]] * n})
        return Trainer(model=model, args=args, train_dataset=data), args

    return make


def _trainer_steps(trainer, args, loader=None) -> tuple[int, int]:
    values = trainer.set_initial_training_values(
        args, loader if loader is not None else trainer.get_train_dataloader()
    )
    return values[1], values[6]  # num_update_steps_per_epoch, max_steps


CASES = [  # samples, batch, accumulation, world, epochs, max_steps, drop_last
    (2445, 1, 8, 2, 3.0, -1, False),  # the published tutorial's case
    (100, 3, 4, 1, 2.0, -1, False),
    (101, 4, 3, 3, 1.5, -1, False),
    (37, 2, 5, 4, 3.0, -1, True),
    (11, 2, 2, 2, 1.0, -1, True),
    (64, 8, 1, 2, 1.0, 10, False),
    (5, 8, 4, 1, 3.0, -1, False),
]


@pytest.mark.parametrize("n, batch, accum, world, epochs, max_steps, drop_last", CASES)
def test_plan_steps_match_trainer(trainer_factory, n, batch, accum, world, epochs, max_steps, drop_last):
    from accelerate.data_loader import prepare_data_loader

    trainer, args = trainer_factory(n, batch, accum, epochs, max_steps, drop_last)
    loader = trainer.get_train_dataloader()
    if world > 1:  # what each of `world` processes gets: accelerate's real sharding of the same dataloader
        loader = prepare_data_loader(
            torch.utils.data.DataLoader(range(n), batch_size=batch, drop_last=drop_last),
            num_processes=world,
            process_index=world - 1,
            put_on_device=False,
        )
    per_epoch, total = _trainer_steps(trainer, args, loader)
    plan = plan_steps(n, batch, accum, world, epochs, max_steps, dataloader_drop_last=drop_last)
    assert (plan.steps_per_epoch, plan.total_steps) == (per_epoch, total)


def test_tutorial_reference_case():
    train, evaluation = split_sizes(2876, 0.15)
    assert (train, evaluation) == (2445, 431)
    plan = plan_steps(train, 1, 8, world_size=2, num_train_epochs=3)
    assert plan.effective_batch_size == 16
    assert plan.micro_batches_per_device == 1223
    assert plan.total_steps == 459  # transformers 5; older versions rounded 1223 / 8 down: 3 x 152 = 456
    assert 3 * (plan.micro_batches_per_device // 8) == 456


def test_warmup_and_checkpoints():
    plan = plan_steps(1000, 4, 2, 1, 2.0, warmup_ratio=0.1, save_strategy="steps", save_steps=100)
    assert plan.total_steps == 250 and plan.warmup_steps == 25 and plan.num_checkpoints == 3
    assert plan_steps(10, 1, 1, warmup_steps=3).warmup_steps == 3


@pytest.mark.slow
def test_plan_equals_tunekit_train(tiny_qwen, tmp_path):
    """The plan of a config (data measured from disk) gives the step count `tunekit train` then runs."""
    from tests.helpers import alpaca_records, base_config, write_dataset
    from tunekit.config import load_config
    from tunekit.flow import run_train
    from tunekit.plan import make_plan

    write_dataset(tmp_path / "data", "toy", alpaca_records(23, seed=3))
    cfg = load_config(
        None,
        base_config(
            tiny_qwen,
            tmp_path / "data",
            tmp_path / "out",
            max_steps=-1,
            num_train_epochs=2,
            per_device_train_batch_size=2,
            gradient_accumulation_steps=3,
            val_size=0.2,
        ),
    )
    plan = make_plan(cfg)
    assert (plan.train_samples, plan.eval_samples) == (19, 4)
    assert plan.total_steps == 2 * 4  # 10 micro-batches per epoch -> ceil(10 / 3) = 4 optimizer steps
    assert run_train(cfg)["total_steps"] == plan.total_steps
