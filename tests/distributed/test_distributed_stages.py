"""The stages other than SFT on 2 CPU processes (gloo), the accelerate and deepspeed launchers, and resuming
with another number of processes — real ``tunekit train`` runs on the tiny Qwen2.

Covering set (the whole stage x engine x method product would take ~15 minutes here; 2-process runs cost
~15-25 s each, mostly start-up):

=====  ==========================  ====================================  ====================
stage  DDP                         DeepSpeed ZeRO-2                      DeepSpeed ZeRO-3
=====  ==========================  ====================================  ====================
pt                                                                       full  (= 1 process)
rm                                                                      full  (= 1 process)
dpo    LoRA  (= 1 process, resumed)                                      LoRA + ref_model (= 1 process)
kto    LoRA  (= 1 process)                                               full, reference copy (= 1 process)
ppo    LoRA                        full (checkpoints: resume errors)
grpo   full                        LoRA
sft    accelerate launch (= 1 p.)  ``deepspeed`` launcher (= 1 process)
=====  ==========================  ====================================  ====================

"= 1 process": 2 ranks x per-device batch 1 against 1 process x batch 2 (same samples per optimizer step):
losses, the logged stage metrics (averaged over the ranks) and the saved weights agree within ``LOSS_TOL``,
``METRIC_TOL``, ``assert_trained_alike``, reloaded logits / reward scores within ``LOGIT_TOL`` (float32; measured:
losses <= 5e-7, metrics <= 3e-5 (``logps/*`` of about -100: 1.2e-5, ``kto/kl`` under ZeRO-3: 3e-5), weights <= 5.3e-5
(Adam turns tiny gradient differences into steps of up to the learning rate), logits <= 1e-6). The rollouts of ppo/grpo
are random, so there the runs must finish with finite losses, reuse each rank's own rollout for the second step
(``ppo_epochs`` / ``grpo_iterations`` 2: same rewards on both steps) and save outputs that reload. Every saved output
is reloaded with plain transformers / peft (+ the value head for rm and ppo).

Resume with another number of processes (docs/distributed.md): DDP checkpoints continue at the exact step
with any world size (1 -> 2 -> 1 processes here, same global batch, losses equal the uninterrupted run);
a ZeRO checkpoint with another world size, or a checkpoint of another engine, stops with a tunekit error
before any model loads (DeepSpeed cannot re-partition ZeRO optimizer state; its universal-checkpoint
conversion gave wrong weights on these checkpoints with deepspeed 0.19.8, so tunekit does not offer it).

Launches: the runs whose assertions are about how they were started (tunekit's own torchrun, the accelerate and
deepspeed launchers, the refused one-process resume) start as users start them; the other 2-process runs (``_batch``)
start in one batch (tests/distributed_helpers.run_cache: each run a fresh 2-rank process, outputs bit-equal to a
launch of its own).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.distributed_helpers import assert_close, assert_trained_alike, launch, logits, run_cache, series
from tests.helpers import alpaca_records, base_config, train_rows, write_dataset
from tests.stage_helpers import write_kto, write_preference
from tests.tolerances import loss_tolerance, sum_order_bound
from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.flow import run_train

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

# Tolerances (float32; 2 ranks sum in another order than one process). Losses: a mean of <= 2 x cutoff 64 = 128 token
# terms of <= ~12 nats summed in two orders differs by at most loss_tolerance(128, 12) = 1.8e-4 in the worst case; the
# Trainer's logged value is averaged over the ranks the same way, and measured differences stay below 5e-7. Metrics
# (sums of per-token log-probs of about -100 over <= 64 tokens): sum_order_bound(64, 100) = 7.6e-4 for each
# order. Reloaded logits / reward scores: the weights differ in elements whose gradient sat at the rounding floor
# (assert_trained_alike), which move the outputs on other inputs by a small share of the training update's effect;
# 1e-3 is below a tenth of what 3-6 training steps change in them (> 1e-2 here), measured <= 1e-6.
LOSS_TOL = loss_tolerance(128, 12.0)
METRIC_TOL = sum_order_bound(64, 100.0)
LOGIT_TOL = 1e-3
COMMON = dict(cutoff_len=64, learning_rate=5e-3, overwrite_output_dir=True)
LORA = dict(finetuning_type="lora", learning_rate=1e-2)
RL = dict(
    dataset="prompts",
    max_steps=2,
    reward_funcs="tests.stage_helpers:ascii_share",
    generation_max_new_tokens=4,
    learning_rate=1e-3,
)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stagedata")
    write_dataset(folder, "sft", alpaca_records(16, seed=1))
    write_preference(folder, "pref", n=16, seed=0)
    write_kto(folder, "kto", n=16, seed=0)
    write_dataset(folder, "prompts", alpaca_records(16, seed=3))
    texts = [{"text": " ".join(["apple river stone cloud green"] * k)} for k in range(1, 17)]
    write_dataset(folder, "text", texts, {"columns": {"prompt": "text"}}, suffix=".jsonl")
    return folder


@pytest.fixture(scope="module")
def runs(tiny_qwen, data_dir, tmp_path_factory):
    """``get(name, how, **options) -> (output_dir, completed process or None)``; each name runs once per module,
    the runs of :func:`_batch` together."""
    return run_cache(tiny_qwen, data_dir, tmp_path_factory.mktemp("stageruns"), COMMON, (_batch(tiny_qwen),))


def _batch(model: Path) -> dict:
    """The 2-process runs (per-device batch 1) without an assertion about their launcher: one batch."""
    runs = {
        # the reference is a separate model (partitioned by ZeRO-3 as it loads) instead of the disabled adapter
        "dpo_z3_lora_ref": dict(deepspeed="z3", ref_model=str(model), **{**DPO, "save_strategy": "no"}),
        "rm_z3_full": dict(finetuning_type="full", deepspeed="z3", **RM),
        "kto_ddp_lora": dict(**KTO, **LORA),
        "kto_z3_full": dict(finetuning_type="full", deepspeed="z3", **KTO),
        "pt_z3_full": dict(deepspeed="z3", **PT),
        **{name: {**RL, **options} for name, options in RL_RUNS.items()},
    }
    return {name: dict(per_device_train_batch_size=1, **options) for name, options in runs.items()}


def _assert_same_metrics(ref: Path, other: Path, keys: list[str]) -> None:
    assert_close(series(ref), series(other), LOSS_TOL, f"{other.name} losses")
    for key in keys:
        assert_close(series(ref, key), series(other, key), METRIC_TOL, f"{other.name} {key}")


def _assert_weights_close(ref: Path, other: Path, name: str, lr: float, steps: int, init: Path | None = None) -> None:
    """Saved weights of the two runs: within what Adam can move (tests/distributed_helpers.assert_trained_alike)."""
    start = load_file(init / "model.safetensors") if init is not None else None
    assert_trained_alike(load_file(ref / name), load_file(other / name), lr, steps, start, f"{other.name}/{name}")


def _adapter_logits(base: Path, adapter: Path) -> torch.Tensor:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    return logits(PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter))


def _finite_run(out: Path, steps: int) -> list[dict]:
    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, steps + 1)), rows
    assert all(math.isfinite(r["loss"]) for r in rows), rows
    return rows


# ------------------------------------------------------------------ dpo
DPO = dict(stage="dpo", dataset="pref", max_steps=6, save_strategy="steps", save_steps=2, **LORA)
DPO_METRICS = [
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
]


def test_dpo_lora_zero3_with_a_reference_model_equals_one_process_and_saves_a_loadable_adapter(runs, tiny_qwen):
    single, _ = runs("dpo_single", "inprocess", per_device_train_batch_size=2, **DPO)
    z3, _ = runs("dpo_z3_lora_ref", "batch")  # with ref_model (_batch)
    _assert_same_metrics(single, z3, DPO_METRICS)
    assert series(z3, "rewards/accuracies")[6] == 1.0  # it learned the preference
    a, b = load_file(single / "adapter_model.safetensors"), load_file(z3 / "adapter_model.safetensors")
    assert a.keys() == b.keys()
    _assert_weights_close(single, z3, "adapter_model.safetensors", LORA["learning_rate"], DPO["max_steps"])
    worst = (_adapter_logits(tiny_qwen, z3) - _adapter_logits(tiny_qwen, single)).abs().max().item()
    assert worst <= LOGIT_TOL, worst


def test_dpo_resumes_from_one_process_on_two_and_from_two_on_one(runs, tmp_path):
    """1 process (batch 2) saves checkpoint-2 -> DDP 2 x batch 1 continues at step 3 and saves checkpoint-4 ->
    1 process continues at step 5: every step equals the uninterrupted 1-process run."""
    single, _ = runs("dpo_single", "inprocess", per_device_train_batch_size=2, **DPO)
    start = tmp_path / "from_single" / "checkpoint-2"
    shutil.copytree(single / "checkpoint-2", start)
    ddp, proc = runs(
        "dpo_ddp_resumed", "reexec", per_device_train_batch_size=1, resume_from_checkpoint=str(start), **DPO
    )
    assert "starting 2 processes" in proc.stderr
    reference = {step: loss for step, loss in series(single).items() if step >= 3}
    assert_close(reference, series(ddp), LOSS_TOL, "DDP resumed from 1 process")
    for key in DPO_METRICS:
        assert_close({s: v for s, v in series(single, key).items() if s >= 3}, series(ddp, key), METRIC_TOL, key)
    assert {p.name for p in (ddp / "checkpoint-4").glob("rng_state*")} == {"rng_state_0.pth", "rng_state_1.pth"}

    middle = tmp_path / "from_ddp" / "checkpoint-4"
    shutil.copytree(ddp / "checkpoint-4", middle)
    back, _ = runs(
        "dpo_single_resumed", "inprocess", per_device_train_batch_size=2, resume_from_checkpoint=str(middle), **DPO
    )
    assert_close(
        {s: v for s, v in series(single).items() if s >= 5}, series(back), LOSS_TOL, "1 process resumed from DDP"
    )
    assert json.loads((back / "trainer_state.json").read_text())["global_step"] == 6
    _assert_weights_close(single, back, "adapter_model.safetensors", LORA["learning_rate"], DPO["max_steps"])


# ------------------------------------------------------------------ rm
RM = dict(stage="rm", dataset="pref", max_steps=3)
# The pairwise loss -log sigma(r_chosen - r_rejected) does not change when every score shifts by a constant, so the
# value head's bias gets a gradient of exactly 0 in exact arithmetic, i.e. pure rounding noise, which Adam turns into
# steps of +-lr (1.6e-3 apart after 3 steps at lr 5e-3 here, rewards/chosen and rewards/rejected shifted by the same
# 1.06e-3). Only shift-invariant quantities are determined by training: margins, accuracies, differences
# between scores.
RM_METRICS = ["rewards/accuracies", "rewards/margins"]


def _scores(folder: Path) -> torch.Tensor:
    from tunekit.train.stages.value_head import load_value_head_model

    model = load_value_head_model(folder)
    ids = torch.tensor([[3, 17, 42, 99, 256, 7, 1000, 12], [5, 6, 7, 8, 9, 10, 11, 12]])
    with torch.no_grad():
        return model.score(ids, torch.ones_like(ids))


def test_rm_full_under_zero3_saves_the_gathered_model_and_value_head(runs, tiny_qwen):
    from transformers import AutoModelForCausalLM

    single, _ = runs("rm_single_full", "inprocess", per_device_train_batch_size=2, finetuning_type="full", **RM)
    z3, _ = runs("rm_z3_full", "batch")
    _assert_same_metrics(single, z3, RM_METRICS)
    lr, steps = COMMON["learning_rate"], RM["max_steps"]
    _assert_weights_close(single, z3, "model.safetensors", lr, steps, init=tiny_qwen)  # not ZeRO-3's empty partitions
    _assert_weights_close(single, z3, "value_head.safetensors", lr, steps)  # its start is random: the scores check it
    AutoModelForCausalLM.from_pretrained(z3)
    a, b = _scores(single), _scores(z3)
    assert ((a - a.mean()) - (b - b.mean())).abs().max().item() <= LOGIT_TOL  # up to the undetermined shift (above)


# ------------------------------------------------------------------ kto
KTO = dict(stage="kto", dataset="kto", max_steps=3)
KTO_METRICS = [
    "kto/kl",
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
]  # margins need both kinds in one micro-batch


def test_kto_lora_under_ddp_equals_one_process(runs, tiny_qwen):
    single, _ = runs("kto_single_lora", "inprocess", per_device_train_batch_size=2, **KTO, **LORA)
    ddp, _ = runs("kto_ddp_lora", "batch")
    assert series(ddp, "kto/kl")[2] != 0  # the KL estimate is in play, averaged over the ranks as over one batch
    _assert_same_metrics(single, ddp, KTO_METRICS)
    worst = (_adapter_logits(tiny_qwen, ddp) - _adapter_logits(tiny_qwen, single)).abs().max().item()
    assert worst <= LOGIT_TOL, worst


def test_kto_full_under_zero3_with_a_reference_copy_equals_one_process(runs, tiny_qwen):
    from transformers import AutoModelForCausalLM

    single, _ = runs("kto_single_full", "inprocess", per_device_train_batch_size=2, finetuning_type="full", **KTO)
    z3, _ = runs("kto_z3_full", "batch")
    rows = train_rows(z3)
    assert rows[0]["kto/kl"] == 0.0 and rows[0]["loss"] == 0.5  # step 0: the partitioned reference equals the policy
    _assert_same_metrics(single, z3, KTO_METRICS)
    _assert_weights_close(single, z3, "model.safetensors", COMMON["learning_rate"], KTO["max_steps"], init=tiny_qwen)
    worst = logits(AutoModelForCausalLM.from_pretrained(z3)) - logits(AutoModelForCausalLM.from_pretrained(single))
    assert worst.abs().max().item() <= LOGIT_TOL


# ------------------------------------------------------------------ pt
PT = dict(stage="pt", dataset="text", max_steps=3, finetuning_type="full")


def test_pt_full_under_zero3_equals_one_process(runs, tiny_qwen):
    from transformers import AutoModelForCausalLM

    single, _ = runs("pt_single_full", "inprocess", per_device_train_batch_size=2, **PT)
    z3, _ = runs("pt_z3_full", "batch")
    assert_close(series(single), series(z3), LOSS_TOL, "pt ZeRO-3 losses")
    _assert_weights_close(single, z3, "model.safetensors", COMMON["learning_rate"], PT["max_steps"], init=tiny_qwen)
    worst = logits(AutoModelForCausalLM.from_pretrained(z3)) - logits(AutoModelForCausalLM.from_pretrained(single))
    assert worst.abs().max().item() <= LOGIT_TOL


# ------------------------------------------------------------------ ppo, grpo
PPO_FULL = dict(stage="ppo", ppo_epochs=2, finetuning_type="full")
RL_RUNS = {
    "ppo_ddp_lora": dict(stage="ppo", ppo_epochs=2, **LORA),
    "ppo_z2_full": dict(deepspeed="z2", save_strategy="steps", save_steps=1, **PPO_FULL),
    "grpo_ddp_full": dict(stage="grpo", grpo_iterations=2, num_generations=2, finetuning_type="full"),
    "grpo_z2_lora": dict(stage="grpo", grpo_iterations=2, num_generations=2, deepspeed="z2", **LORA),
}


@pytest.mark.parametrize("name", list(RL_RUNS))
def test_rl_stages_train_on_two_ranks_and_save_outputs_that_reload(runs, tiny_qwen, name):
    from transformers import AutoModelForCausalLM

    options = RL_RUNS[name]
    out, _ = runs(name, "batch")
    first, second = _finite_run(out, 2)
    # step 2 optimises step 1's rollouts again: each rank got its own prompts back (not the other rank's, not new ones)
    assert second["rewards/mean"] == first["rewards/mean"], (first, second)
    assert first["completions/mean_length"] == second["completions/mean_length"]
    if options["stage"] == "ppo":
        assert (out / "value_head.safetensors").is_file() and math.isfinite(_scores(out).sum().item())
    if options.get("finetuning_type") == "lora":
        _adapter_logits(tiny_qwen, out)
    else:
        assert all(t.numel() > 0 for t in load_file(out / "model.safetensors").values())
        AutoModelForCausalLM.from_pretrained(out)


# ------------------------------------------------------------------ resume across world sizes: what is refused
def test_a_zero2_checkpoint_with_another_world_size_or_engine_is_a_clear_error(runs, tiny_qwen, data_dir, tmp_path):
    options = dict(RL, **PPO_FULL)
    z2, _ = runs("ppo_z2_full", "batch")  # deepspeed z2, a checkpoint at every step (RL_RUNS)
    checkpoint = tmp_path / "checkpoint-1"
    shutil.copytree(z2 / "checkpoint-1", checkpoint)

    def cfg(out: str, **extra) -> dict:
        return base_config(
            tiny_qwen,
            data_dir,
            tmp_path / out,
            per_device_train_batch_size=2,
            resume_from_checkpoint=str(checkpoint),
            **{**COMMON, **options, **extra},
        )

    # the command line: one process under DeepSpeed (always under torchrun) -> tunekit's error line, no traceback
    proc = launch("reexec1", cfg("one", deepspeed="z2"), tmp_path / "one.yaml", expect_ok=False)
    assert proc.returncode != 0
    assert (
        "error: distributed training failed: rank 0 (local rank 0) stopped first with: checkpoint "
        f"{checkpoint} is a DeepSpeed ZeRO checkpoint written by 2 processes, and this run has 1 process"
    ) in proc.stderr, proc.stderr[-4000:]
    assert "Resume with 2 processes" in proc.stderr and f"model_name_or_path: {checkpoint}" in proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    assert not (tmp_path / "one" / "trainer_log.jsonl").exists()  # refused before training
    # the same checkpoint without deepspeed: transformers would restart the optimizer silently; tunekit refuses
    with pytest.raises(ConfigError, match="was written by DeepSpeed .* and this run has no deepspeed"):
        run_train(load_config(None, cfg("ddp")))


# ------------------------------------------------------------------ other launchers
SFT = dict(dataset="sft", finetuning_type="full", max_steps=4, learning_rate=1e-3)


@pytest.mark.parametrize("launch, options", [("accelerate", {}), ("deepspeed", {"deepspeed": "z2"})])
def test_accelerate_and_deepspeed_launchers_equal_one_process(runs, launch, options, tiny_qwen):
    single, _ = runs("sft_single", "inprocess", per_device_train_batch_size=2, **SFT)
    out, proc = runs(f"sft_{launch}", launch, per_device_train_batch_size=1, **SFT, **options)
    assert "starting 2 processes" not in proc.stderr  # the launcher started the ranks; tunekit did not launch again
    assert proc.stdout.count("done: ") == 1  # rank 0 alone prints
    if launch == "deepspeed":
        assert "dist_world_size=2" in proc.stdout + proc.stderr
    assert_close(series(single), series(out), LOSS_TOL, f"{launch} launch losses")
    _assert_weights_close(single, out, "model.safetensors", SFT["learning_rate"], SFT["max_steps"], init=tiny_qwen)
