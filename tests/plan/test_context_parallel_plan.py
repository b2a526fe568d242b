"""`tunekit plan` with context parallelism (``cp_size``, train/engines/ulysses.py): the processes of a sequence group
train one micro-batch, so the steps and the global batch are those of world / cp_size devices, and each process
holds 1/cp_size of every row's tokens (plan/global_batch.data_parallel_size, plan/training_setup.Setup.tokens)."""

from __future__ import annotations

import json

import pytest

from tunekit.cli.main import main
from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.plan import make_plan
from tunekit.plan.activations import layer_kinds, layer_saved_per_token
from tunekit.plan.architectures import load_shape
from tunekit.plan.memory import estimate_memory
from tunekit.plan.params import count_params
from tunekit.plan.training_setup import resolve_setup
from tunekit.train.context_parallel import SequenceGroupSampler

QWEN = {
    "model_name_or_path": "Qwen/Qwen2.5-0.5B",
    "finetuning_type": "lora",
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 2,
    "cutoff_len": 1024,
    "learning_rate": 1.0e-4,
}
STEP_KEYS = ("micro_batches_per_device", "effective_batch_size", "steps_per_epoch", "total_steps", "warmup_steps")


def _plan(options: dict, gpus: int, **kw):
    return make_plan(load_config(None, options), gpus=gpus, model_config="qwen2.5-0.5b", **kw).to_json()


def test_a_sequence_group_plans_the_steps_and_global_batch_of_one_device():
    """cp_size 2 on 2 processes steps like cp_size 1 on one device; on 4 processes like 2 devices, with their
    learning-rate advice; the processes and the split are named beside it."""
    one = _plan(QWEN, 1, num_samples=1000)
    cp = _plan({**QWEN, "cp_size": 2}, 2, num_samples=1000)
    assert [cp[k] for k in STEP_KEYS] == [one[k] for k in STEP_KEYS] == [500, 4, 250, 750, 0]
    assert cp["world_size"] == 2 and "context_parallel" not in one
    assert cp["global_batch"] == {**one["global_batch"], "processes": 2, "cp_size": 2}
    assert (cp["global_batch"]["devices"], cp["global_batch"]["size"], cp["global_batch"]["advice"]) == (1, 4, [])
    assert cp["context_parallel"] == {
        "cp_size": 2,
        "cp_mode": "ulysses",
        "processes": 2,
        "data_parallel": 1,
        "tokens_per_process": 2 * 512,
    }
    two = _plan(QWEN, 2, num_samples=1000)
    four = _plan({**QWEN, "cp_size": 2}, 4, num_samples=1000)
    assert [four[k] for k in STEP_KEYS] == [two[k] for k in STEP_KEYS] == [250, 8, 125, 375, 0]
    assert four["global_batch"] == {**two["global_batch"], "processes": 4, "cp_size": 2}
    assert four["global_batch"]["advice"][0].startswith("learning rate: the global batch is 2 x one device's")


@pytest.mark.parametrize("rows, batch, dp, cp", [(1000, 2, 1, 2), (37, 4, 2, 2), (101, 3, 3, 2)])
def test_the_planned_micro_batches_are_those_the_sequence_group_sampler_deals(rows, batch, dp, cp):
    """The trainer's sampler (train/context_parallel.py) writes each batch cp times and accelerate deals the batches
    to the dp x cp processes in turn: every process draws len / (dp x cp x batch) of them in an epoch."""
    options = {**QWEN, "per_device_train_batch_size": batch, "gradient_accumulation_steps": 1, "cp_size": cp}
    plan = _plan(options, dp * cp, num_samples=rows)
    sampler = SequenceGroupSampler(rows, batch, dp, cp, seed=0)
    assert plan["micro_batches_per_device"] == len(sampler) // (dp * cp * batch) == -(-rows // (batch * dp))


def test_the_report_says_the_split_in_one_line(capsys, tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in QWEN.items()) + "cp_size: 2\n")
    common = ("plan", str(path), "--num-samples", "1000", "--model-config", "qwen2.5-0.5b", "--gpus", "2")
    assert main(list(common)) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index(
        "global batch: 4 samples per optimizer step (= 1 sequence group x per-device batch 2 x gradient "
        "accumulation 2)"
    )
    assert lines[start + 1] == (
        "context parallelism: each sequence split over 2 processes (global batch 4 = 2 per device x 2 accumulation x "
        "2 processes / 2)"
    )
    assert any(
        "world size (processes)" in line and "2 (1 node(s)), 1 data parallel x context parallel 2" in line
        for line in lines
    )
    assert "1/2 of each sequence per process;" in " ".join(" ".join(lines).split())  # the memory table's title
    assert main([*common, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["context_parallel"]["tokens_per_process"] == 1024
    path.write_text("".join(f"{k}: {v}\n" for k, v in QWEN.items()))
    assert main(list(common)) == 0
    out = capsys.readouterr().out
    assert not [line for line in out.splitlines() if line.startswith("context parallelism:")]
    assert "sequence group" not in out and "world size (data parallel)" in out


def test_a_world_that_is_not_a_multiple_of_cp_size_is_refused():
    with pytest.raises(ConfigError) as err:
        _plan({**QWEN, "cp_size": 2}, 3, num_samples=10)
    assert str(err.value) == (
        "cp_size 2 splits each sequence over 2 processes, but the plan is for 3 process(es): plan a multiple of 2 "
        "(--gpus per node x --nodes, or NPROC_PER_NODE x NNODES), or remove cp_size."
    )


def test_a_model_whose_heads_cp_size_does_not_divide_is_refused_by_the_plan_too():
    """The same check as train/preflight.py (model/sequence_split.py), on the planned config (Qwen2.5-0.5B: 14 query
    and 2 key/value heads)."""
    with pytest.raises(ConfigError) as err:
        _plan({**QWEN, "cp_size": 4}, 4, num_samples=10)
    assert str(err.value) == (
        "cp_size 4 gives each process 1/4 of the attention heads, but the model has 14 query and 2 key/value heads: "
        "cp_size must divide both (here: 2). Change cp_size (and the processes) or remove it."
    )


def _mha(tmp_path) -> str:
    """A small Llama with as many key/value heads as query heads (the masked SDPA of cp_size 1 repeats none)."""
    from transformers import LlamaConfig

    folder = tmp_path / "mha"
    LlamaConfig(
        hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8, vocab_size=1000
    ).save_pretrained(folder)
    return str(folder / "config.json")


def _memory(options: dict, world: int, model: str):
    cfg = load_config(None, options)
    shape = load_shape(model, None)
    setup = resolve_setup(cfg, world, 1, cfg.cutoff_len, shape=shape)
    return shape, setup, estimate_memory(shape, setup)


def test_a_process_holds_the_activations_of_its_share_of_each_row(tmp_path):
    """LoRA without checkpointing, whole logits: cp_size 2 at cutoff 2048 plans per process exactly what cp_size 1
    plans at cutoff 1024 (same rows per micro-batch, same world): its activations, logits and their fragmentation;
    the weights, gradients and optimizer states are the world's either way. Only the all-to-all's send and receive
    copies of the query come on top: 2 x c q bytes per token of the process."""
    model = _mha(tmp_path)
    options = {**QWEN, "cutoff_len": 2048, "gradient_checkpointing": False, "chunked_lm_loss": False}
    shape, cp, split = _memory({**options, "cp_size": 2}, 2, model)
    _, half, whole = _memory({**options, "cutoff_len": 1024}, 2, model)
    assert (cp.tokens, cp.batch_tokens, cp.row_len, half.tokens) == (2 * 1024, 2 * 2048, 2048, 2 * 1024)
    assert not cp.grad_ckpt and not cp.chunked_loss and not cp.padded
    same = ("activations", "logits", "fragmentation", "base_weights", "trainable_params", "gradients")
    assert {k: split.components[k] for k in same} == {k: whole.components[k] for k in same}
    q, c = shape.q_dim, 2
    exchange = split.components["distributed_buffers"] - whole.components["distributed_buffers"]
    assert exchange == 2 * c * q * 2 * 1024
    _, _, full_row = _memory(options, 2, model)  # cp_size 1 at cutoff 2048: twice the tokens per process
    assert split.components["activations"] / full_row.components["activations"] == pytest.approx(0.5, abs=0.01)


def test_cp_size_plans_the_loss_head_the_run_decided(tmp_path):
    """train/context_parallel.py computes each process's loss itself (the model's forward never sees labels): Liger's
    fused loss is off under cp_size and the trained-token, chunked head is on, Liger or not (RunDecisions, the one
    decision the trainer and the plan read)."""
    cfg = {**QWEN, "enable_liger_kernel": True, "cp_size": 2}
    _, cp, _ = _memory(cfg, 2, "qwen2.5-0.5b")
    _, plain, _ = _memory({**cfg, "cp_size": 1}, 2, "qwen2.5-0.5b")
    assert (plain.liger_loss, plain.chunked_loss) == (True, False)
    assert (cp.liger, cp.liger_loss, cp.chunked_loss) == (True, False, True)
    _, cp, _ = _memory({**QWEN, "cp_size": 2}, 2, "qwen2.5-0.5b")
    _, plain, _ = _memory(QWEN, 2, "qwen2.5-0.5b")
    assert (plain.chunked_loss, cp.chunked_loss) == (True, True)


def _layer(options: dict, model: str) -> tuple[float, int, int]:
    shape, setup, _ = _memory(options, 2, model)
    kind = layer_kinds(shape, setup, count_params(shape, setup))[-1]
    return layer_saved_per_token(shape.layer_at(shape.layers - 1), setup, kind), shape.q_dim, shape.kv_dim


def test_per_token_the_layer_keeps_what_the_exchange_changes(tmp_path):
    """Per token of the process, a layer keeps what it keeps without context parallelism, except: full fine-tuning's
    o_proj keeps the exchanged output, a tensor apart from the one SDPA kept (c q more); SDPA runs without a mask, so
    a GQA model's k and v are kept unrepeated (Qwen2.5-0.5B: 2 c (q - kv) less)."""
    full = {**QWEN, "finetuning_type": "full", "gradient_checkpointing": False}
    model = _mha(tmp_path)
    cp, q, _ = _layer({**full, "cp_size": 2}, model)
    one, _, _ = _layer(full, model)
    assert cp - one == 2 * q
    lora = {**QWEN, "gradient_checkpointing": False}
    cp, q, kv = _layer({**lora, "cp_size": 2}, "qwen2.5-0.5b")
    one, _, _ = _layer(lora, "qwen2.5-0.5b")
    assert (q, kv) == (896, 128) and one - cp == 2 * 2 * (q - kv)


def test_auto_fit_keeps_to_the_engines_cp_size_runs_under():
    """cp_size runs under DDP or FSDP2 (config: cp_deepspeed): where plain data parallelism gets a DeepSpeed rung,
    a cp_size run gets none, and no count of GPUs for ZeRO-3."""
    full = {**QWEN, "model_name_or_path": "Qwen/Qwen2.5-7B", "finetuning_type": "full", "cutoff_len": 8192}

    def fit(options: dict):
        cfg = load_config(None, options)
        return make_plan(cfg, gpus=2, gpu="H100", model_config="qwen2.5-7b", auto_fit=True, num_samples=100)

    plain, cp = fit(full), fit({**full, "cp_size": 2})
    assert plain.overrides["deepspeed"] == "z2_offload" and plain.fit["fits"]
    assert "deepspeed" not in cp.overrides and "DeepSpeed" not in cp.fit["choice"]
    assert (cp.fit["fits"], cp.fit["gpus_needed"]) == (False, None)
