"""Ulysses context parallelism (``cp_size: 2``) on 2 CPU processes equals one process.

Two levels:

* **The exchange** (``train/engines/ulysses.py``), in float64 on 2 gloo processes: a tiny Qwen2 (4 query and 2
  key/value heads) runs two right-padded rows of 13 and 9 tokens split over the 2 processes (13 is odd: the rows are
  padded to 14 and each process holds 7 positions). The sum of the 2 processes' losses equals one process's loss on
  the whole rows, and the sum of their gradients equals its gradients, within float64's rounding (each value is a
  sum of at most a few thousand products of magnitude < 10: ``sum_order_bound`` gives < 1e-11; asserted 1e-9). The
  same shards with the model's plain attention (no exchange: the second half loses the first as context) are far
  off, so the check can fail.
* **A whole run** (``tunekit train``, LoRA, per-device batch 2, accumulation 2, 4 steps) with ``cp_size: 2`` on 2
  processes under DDP and under FSDP2, against one process with the same batch and accumulation (one sequence group:
  the same global batch); and the DDP run resumed from its checkpoint-2. The cross-entropy is computed in float32
  on both paths (``train/token_loss.py`` upcasts the logits as transformers does), over another split of the sum,
  so the losses are compared with ``loss_tolerance`` in float32 and the adapters with ``assert_trained_alike``
  (Adam's bound and a small share of the training update). A run whose processes drew different rows, or that lost
  the prediction of the token after a cut, is off by ~1e-2 in the loss.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from tests.distributed_helpers import assert_close, assert_trained_alike, copied_checkpoint, launch, series
from tests.helpers import alpaca_records, base_config, write_dataset
from tests.tolerances import loss_tolerance
from tunekit.config import load_config
from tunekit.flow import run_train
from tunekit.tiny.text import build_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

EXCHANGE_TOL = 1e-9
LENGTHS = (13, 9)
COMMON = dict(
    finetuning_type="lora",
    lora_target="all",
    lora_rank=4,
    max_steps=4,
    learning_rate=1e-2,
    per_device_train_batch_size=2,
    gradient_accumulation_steps=2,
    dtype="float64",
    overwrite_output_dir=True,
)
LOSS_TOL = loss_tolerance(2 * 2 * 64, 12.0)  # a step's mean over <= 4 rows of cutoff 64, <= 12 nats a token


def _rows():
    """Two right-padded rows of LENGTHS tokens, every token trained but the first."""
    ids = torch.zeros(2, max(LENGTHS), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(LENGTHS):
        ids[row, :n] = torch.arange(3, 3 + 7 * n, 7)[:n] % 500 + row
        mask[row, :n] = 1
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, 0] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _loss_and_grads(model, inputs, labels):
    logits = model(**inputs).logits
    keep = labels.ne(-100)
    loss = torch.nn.functional.cross_entropy(logits[keep], labels[keep], reduction="sum")
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad()
    return loss.detach(), grads


def _exchange_worker(rank: int, folder: str) -> None:
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from tunekit.train.engines import ulysses

    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=2)
    load = lambda: AutoModelForCausalLM.from_pretrained(  # noqa: E731
        f"{folder}/model", dtype=torch.float64, attn_implementation="sdpa"
    ).train()
    whole, split = load(), load()
    batch = _rows()
    shifted = torch.nn.functional.pad(batch["labels"][:, 1:], (0, 1), value=-100)
    ref_loss, ref_grads = _loss_and_grads(whole, {k: batch[k] for k in ("input_ids", "attention_mask")}, shifted)
    seq = ulysses.apply(split, 2)
    part, labels = ulysses.shard_batch(batch, seq, pad_id=0)
    loss, grads = _loss_and_grads(split, part, labels)
    dist.all_reduce(loss)
    for grad in grads.values():
        dist.all_reduce(grad)
    split.set_attn_implementation("sdpa")  # the same shards without the exchange
    plain, _ = _loss_and_grads(split, part, labels)
    dist.all_reduce(plain)
    if rank == 0:
        result = {
            "positions": part["input_ids"].shape[1],
            "loss": abs(loss - ref_loss).item(),
            "grad": max((grads[n] - ref_grads[n]).abs().max().item() for n in grads),
            "moved": max(g.abs().max().item() for g in ref_grads.values()),
            "plain": abs(plain - ref_loss).item(),
        }
        Path(folder, "result.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def test_exchange_on_two_processes_equals_one_process(tmp_path):
    build_tiny_model(tmp_path / "model", like="qwen2", seed=0)
    mp.spawn(_exchange_worker, args=(str(tmp_path),), nprocs=2, join=True)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["positions"] == 7  # 13 positions padded to 14, split in two
    assert result["loss"] <= EXCHANGE_TOL and result["grad"] <= EXCHANGE_TOL, result
    assert result["moved"] > 1e-3  # gradients that are not all zero
    assert result["plain"] > 0.1, result  # without the exchange the second halves lose their context (0.49)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(one process, cp_size 2 under DDP, cp_size 2 under FSDP2): each (output folder, completed process)."""
    root = tmp_path_factory.mktemp("cp")
    model = build_tiny_model(root / "model", like="qwen2", seed=0)
    write_dataset(root / "data", "toy", alpaca_records(16, seed=1))

    def config(name, **extra):
        return base_config(model, root / "data", root / name, **COMMON, **extra)

    run_train(load_config(None, config("single")))
    ddp = launch("reexec", config("ddp", cp_size=2, save_strategy="steps", save_steps=2), root / "ddp.yaml")
    fsdp = launch("reexec", config("fsdp", cp_size=2, fsdp="full_shard"), root / "fsdp.yaml")
    checkpoint = copied_checkpoint(root / "ddp", 2, root / "resume_from")
    resumed = config("resumed", cp_size=2, resume_from_checkpoint=str(checkpoint))
    return root, {"ddp": ddp, "fsdp": fsdp, "resumed": launch("reexec", resumed, root / "resumed.yaml")}


@pytest.mark.parametrize("engine", ["ddp", "fsdp"])
def test_training_with_cp_size_2_equals_one_process(runs, engine):
    root, procs = runs
    assert "context parallelism: each sequence split over 2 processes (Ulysses, ulysses)" in procs[engine].stdout
    assert_close(series(root / "single"), series(root / engine), LOSS_TOL, f"cp_size 2 {engine} losses")
    assert len(series(root / engine)) == COMMON["max_steps"]
    seen = [
        json.loads((root / run / "all_results.json").read_text())["num_input_tokens_seen"]
        for run in ("single", engine)
    ]
    assert seen[0] == seen[1] > 0  # each group's rows counted once, not once per process of the group
    init = {  # LoRA's B starts at zero: the distance moved is the trained adapter's own size
        k: torch.zeros_like(v) for k, v in load_file(root / "single" / "adapter_model.safetensors").items()
    }
    assert_trained_alike(
        load_file(root / "single" / "adapter_model.safetensors"),
        load_file(root / engine / "adapter_model.safetensors"),
        COMMON["learning_rate"],
        COMMON["max_steps"],
        init={k: v for k, v in init.items() if "lora_B" in k},
        what=f"cp_size 2 {engine} adapter",
    )


def test_a_resumed_cp_run_continues_where_it_stopped(runs):
    """The sequence groups' sampler is the seed and the epoch alone: a run resumed from checkpoint-2 draws steps 3
    and 4 as the uninterrupted run did."""
    root, procs = runs
    losses = series(root / "resumed")
    assert min(losses) == 3, losses  # continues at step 3, not from the start
    reference = {step: loss for step, loss in series(root / "ddp").items() if step >= 3}
    assert_close(reference, losses, LOSS_TOL, "cp_size 2 resumed losses")
    assert_trained_alike(
        load_file(root / "ddp" / "adapter_model.safetensors"),
        load_file(root / "resumed" / "adapter_model.safetensors"),
        COMMON["learning_rate"],
        COMMON["max_steps"],
        what="cp_size 2 resumed adapter",
    )
