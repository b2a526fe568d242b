"""Every memory and speed feature is decided once (``train/decisions``): the trainer and the planner read the same
``RunDecisions``, for every feature x stage x device kind; a GPU run has no CPU-host feature and no unmeasured trick
on by default, and never imports ``tunekit.host``. The device kinds are ``Machine`` values: no GPU is needed."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.helpers import alpaca_records, base_config, write_dataset
from tunekit.config import load_config
from tunekit.config.stages import STAGES as STAGE_REGISTRY
from tunekit.errors import TunekitError
from tunekit.plan.activations import chunked_head
from tunekit.plan.architectures import load_shape
from tunekit.plan.decide import decide_run
from tunekit.plan.memory import estimate_memory
from tunekit.plan.training_setup import planned_machine, resolve_setup
from tunekit.train.decisions import FEATURES, HOST_FEATURES, Decision, RunDecisions, building_with, decide_features
from tunekit.train.machine import Machine, cpu_has_native_bf16

STAGES = ("pt", "sft", "rm", "dpo", "kto", "ppo", "grpo")
# device kind -> (the machine, the options that pick its engine)
KINDS = {
    "cpu": (Machine.cpu(1, cpu_has_native_bf16()), {"use_cpu": True}),
    "cuda": (Machine.cuda(1), {}),
    "ddp": (Machine.cuda(2), {}),
    "deepspeed-z2": (Machine.cuda(2), {"deepspeed": "z2"}),
    "deepspeed-z3": (Machine.cuda(2), {"deepspeed": "z3"}),
    "fsdp": (Machine.cuda(2), {"fsdp": "full_shard"}),
}
ENGINES = {
    "cpu": "single",
    "cuda": "single",
    "ddp": "ddp",
    "deepspeed-z2": "deepspeed z2",
    "deepspeed-z3": "deepspeed z3",
    "fsdp": "fsdp z3",
}
VARIANTS = (
    {},
    {"enable_liger_kernel": True},
    {"chunked_lm_loss": False},
    {"torch_compile": True},
    {"elementwise_recompute": True},
    {"trained_tokens_loss": False},
    {"padding_free": True},
    {"max_tokens_per_batch": 4096},
)


def _cases():
    """``(kind, stage, variant, cfg, machine)`` for every combination the schema accepts."""
    for kind, (machine, engine) in KINDS.items():
        for stage in STAGES:
            for variant in VARIANTS:
                options = dict(model_name_or_path="x", stage=stage, gradient_checkpointing=True, **engine, **variant)
                try:
                    cfg = load_config(None, options)
                except TunekitError:
                    continue  # a combination the schema refuses (kto with a token budget, ...)
                yield kind, stage, variant, cfg, machine


@pytest.fixture(autouse=True)
def _no_host_switches(monkeypatch):
    monkeypatch.delenv("TUNEKIT_MALLOC_TUNE", raising=False)
    monkeypatch.delenv("TUNEKIT_GC_PAUSE", raising=False)


def test_every_feature_stage_and_device_kind_is_decided_once_for_trainer_and_planner():
    from tunekit.train.stages.stage_trainer import StageTrainer

    seen = set()
    for kind, stage, variant, cfg, machine in _cases():
        seen.add((kind, stage))
        trained = decide_run(cfg, machine)  # what the recipe passes to the trainer (tunekit/flow.py)
        planned = decide_features(cfg, planned_machine(cfg, machine.processes))  # what tunekit plan uses
        assert planned == trained, (kind, stage, variant)
        assert set(trained.features()) == {feature.name for feature in FEATURES}
        assert trained.engine == ENGINES[kind], (kind, trained.engine)
        # the planner's set-up reads its features from the decisions it is given, and by default from the same ones
        setup = resolve_setup(cfg, machine.processes, 1, 64, trained)
        assert resolve_setup(cfg, machine.processes, 1, 64) == setup
        assert setup.chunked_loss == trained.chunked_lm_head.on
        assert setup.recompute == trained.elementwise_recompute.detail
        assert (setup.liger, setup.liger_loss) == (trained.liger.on, trained.liger_fused_loss.on)
        assert (setup.host, setup.heap_guard) == (kind == "cpu", trained.heap_guard.on)
        assert (setup.padding_free, setup.token_budget) == (cfg.padding_free, cfg.max_tokens_per_batch)
        # the trainer's dpo/kto log-probs read the same decision
        assert StageTrainer.chunked_logps.fget(SimpleNamespace(run_decisions=trained)) == trained.chunked_lm_head.on
    no_fsdp = {("fsdp", name) for name, stage in STAGE_REGISTRY.items() if not stage.fsdp}  # refused by the schema
    assert {(kind, stage) for kind in KINDS for stage in STAGES} - seen == no_fsdp


def test_the_planner_and_the_trainer_follow_the_decision_not_the_config():
    cfg = load_config(None, dict(model_name_or_path="x", stage="sft", use_cpu=True, gradient_checkpointing=True))
    decided = decide_features(cfg, planned_machine(cfg))
    flipped = dataclasses.replace(
        decided,
        **{
            name: Decision(not getattr(decided, name).on, "flipped", getattr(decided, name).detail)
            for name in ("chunked_lm_head", "liger_fused_loss", "heap_guard")
        },
        elementwise_recompute=Decision(False, "flipped", (False, False)),
    )
    setup = resolve_setup(cfg, 1, 1, 64, flipped)
    assert (setup.chunked_loss, setup.liger_loss, setup.heap_guard) == (
        not decided.chunked_lm_head.on,
        not decided.liger_fused_loss.on,
        not decided.heap_guard.on,
    )
    assert setup.recompute == (False, False) != decided.elementwise_recompute.detail


def test_dpo_and_kto_with_liger_plan_the_chunked_head_they_run():
    """tunekit computes dpo/kto log-probs itself: with Liger's kernels the LM head still runs in chunks, so the planner
    counts the chunked head (not Liger's fused loss, not whole logits); sft with Liger runs Liger's fused loss."""
    shape = load_shape("qwen2.5-0.5b", None)
    for stage in ("dpo", "kto"):
        plain, liger = (
            load_config(None, dict(model_name_or_path="x", stage=stage, gradient_checkpointing=True, **extra))
            for extra in ({}, {"enable_liger_kernel": True})
        )
        decided = decide_run(liger, Machine.cuda())
        assert decided.chunked_lm_head.on and not decided.liger_fused_loss.on and decided.liger.on
        setups = [resolve_setup(c, 1, 1, 512, decide_run(c, Machine.cuda())) for c in (plain, liger)]
        assert chunked_head(shape, setups[1])
        assert (
            estimate_memory(shape, setups[0]).components["logits"]
            == estimate_memory(shape, setups[1]).components["logits"]
        )
    sft = decide_run(
        load_config(
            None, dict(model_name_or_path="x", stage="sft", enable_liger_kernel=True, gradient_checkpointing=True)
        ),
        Machine.cuda(),
    )
    assert sft.liger_fused_loss.on and not sft.chunked_lm_head.on and not sft.trained_tokens_loss.on


def test_a_gpu_run_has_no_cpu_host_feature_and_no_unmeasured_trick_by_default(monkeypatch):
    for kind, stage, variant, cfg, machine in _cases():
        decided = decide_run(cfg, machine)
        host = [name for name in HOST_FEATURES if getattr(decided, name).on]
        if kind == "cpu":
            assert {"malloc_tune", "gc_pause"} <= set(host), (stage, variant)  # the CPU keeps its measured defaults
            continue
        assert host == [], (kind, stage, variant, host)
        asked = variant.get("elementwise_recompute", False) and not variant.get("enable_liger_kernel")
        assert decided.elementwise_recompute.on == bool(asked and not cfg.torch_compile), (kind, stage, variant)
    cfg = load_config(None, dict(model_name_or_path="x", stage="sft", gradient_checkpointing=True))
    gpu = decide_run(cfg, Machine.cuda())  # the option's default did not run: tunekit_config.yaml says so, and why
    assert gpu.option_notes() == {
        "elementwise_recompute": "elementwise_recompute: off for this run (not measured on a "
        "CUDA device yet: opt in with elementwise_recompute: true)"
    }
    assert not gpu.elementwise_recompute.on and gpu.elementwise_recompute.why.startswith(
        "not measured on a CUDA device"
    )
    assert decide_run(cfg, Machine.cpu()).option_notes() == {}
    monkeypatch.setenv("TUNEKIT_MALLOC_TUNE", "1")  # an explicit opt-in on the GPU; the heap guard stays CPU-only
    decided = decide_run(cfg, Machine.cuda())
    assert decided.malloc_tune.on and not decided.heap_guard.on and not decided.gc_pause.on


RECIPE = """
import json, sys
from tunekit.config import load_config
from tunekit.config.stages import STAGES as STAGE_REGISTRY
from tunekit.flow import run_train, start_host
from tunekit.train.machine import Machine

cfg = load_config(None, json.loads(sys.argv[1]))
machine = Machine.cuda() if sys.argv[2] == "cuda" else Machine.cpu()
start_host(cfg, machine)
run_train(cfg, machine=machine)
print(json.dumps(sorted(m for m in sys.modules if m == "tunekit.host" or m.startswith("tunekit.host."))))
"""


@pytest.mark.parametrize("kind", ["cuda", "cpu"])
def test_a_gpu_run_never_imports_the_cpu_host_package(tiny_qwen, tmp_path, kind):
    """The whole recipe (start_host, data, decisions, model, trainer, one step) under a CUDA-kind decision, in a fresh
    process: ``tunekit.host`` is never imported. The model trains here on the CPU; only the decisions are the GPU's.
    The CPU-kind run of the same job imports it (malloc tuning, the collector pause, the heap guard)."""
    write_dataset(tmp_path / "data", "toy", alpaca_records(4))
    options = base_config(
        tiny_qwen,
        tmp_path / "data",
        tmp_path / "out",
        max_steps=1,
        gradient_checkpointing=False,
        per_device_train_batch_size=2,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TUNEKIT_MALLOC_TUNE", "TUNEKIT_GC_PAUSE")}
    proc = subprocess.run(
        [sys.executable, "-c", RECIPE, json.dumps(options), kind], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = json.loads(proc.stdout.strip().splitlines()[-1])
    if kind == "cuda":
        assert imported == [], imported
    else:
        assert {"tunekit.host.malloc", "tunekit.host.gc_pause", "tunekit.host.heap"} <= set(imported), imported


def test_the_trainer_is_built_with_the_recipe_s_decisions_and_the_plan_shows_them(tiny_qwen, tmp_path):
    """``train/run.build_trainer`` hands the trainer the very RunDecisions the recipe decided; a trainer built without
    them (a hand-built one) decides the same for its config and this machine; ``tunekit plan`` lists the same ones;
    ``elementwise_recompute`` is attached as decided (on for the CPU, off for a CUDA-kind decision)."""
    from tunekit.model.elementwise_recompute import state_of
    from tunekit.plan.planner import make_plan
    from tunekit.train import run as steps
    from tunekit.train.decisions import decisions_for
    from tunekit.train.machine import run_machine

    write_dataset(tmp_path / "data", "toy", alpaca_records(4))
    cfg = load_config(
        None, base_config(tiny_qwen, tmp_path / "data", tmp_path / "out", use_cpu=True, gradient_checkpointing=False)
    )
    machine = run_machine(cfg)
    prepared = steps.prepare_data(cfg)
    decided = decide_run(cfg, machine, prepared.longest_row)
    assert isinstance(decided, RunDecisions) and decided.machine.kind == "cpu"
    built = steps.build_trainer(cfg, decided, prepared, steps.build_model(cfg, decided, prepared))
    assert built.trainer.run_decisions is decided
    assert (built.trainer.heap_guard is not None) == decided.heap_guard.on
    assert (state_of(built.trainer.model) is not None) == decided.elementwise_recompute.on is True
    assert decisions_for(cfg) == decided
    plan = make_plan(cfg, num_samples=4)
    assert plan.decisions == {name: {"on": d.on, "why": d.why} for name, d in decided.features().items()}

    gpu_kind = decide_run(cfg, Machine.cuda())
    with building_with(gpu_kind):
        model = steps.build_model(cfg, gpu_kind, prepared)
        assert state_of(model) is None and not gpu_kind.elementwise_recompute.on
