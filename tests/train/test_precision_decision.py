"""The default precision is decided from the device the run trains on (train/precision.py), by one rule the loader,
TrainingArguments and the planner read; options written in the config always win."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from tests.helpers import alpaca_records, base_config, logged_losses, write_dataset
from tunekit.config import load_config
from tunekit.train.machine import Machine
from tunekit.train.precision import apply_precision, decide_precision, precision_notes, stated_precision

CPU = Machine.cpu(cpu_bf16=False)
AMX = Machine.cpu(cpu_bf16=True)
A100 = Machine.cuda(capability=(8, 0), name="NVIDIA A100-SXM4-80GB")
V100 = Machine.cuda(capability=(7, 0), name="Tesla V100-SXM2-32GB")


def _cfg(**options):
    return load_config(None, {"model_name_or_path": "m", "finetuning_type": "lora", **options})


def _facts(decision) -> tuple:
    return decision.weights, decision.trainable, decision.autocast, decision.explicit


@pytest.mark.parametrize(
    "machine, method, expected",
    [
        (CPU, "lora", ("float32", "float32", None, False)),
        (CPU, "full", ("float32", "float32", None, False)),
        (AMX, "lora", ("bfloat16", "float32", "bf16", False)),
        (AMX, "oft", ("bfloat16", "float32", "bf16", False)),
        (AMX, "freeze", ("bfloat16", "float32", "bf16", False)),
        (AMX, "full", ("bfloat16", "float32", "bf16", False)),  # fp32 weights (all train) under bf16 autocast
        (A100, "lora", ("bfloat16", "float32", "bf16", False)),
        (A100, "full", ("bfloat16", "float32", "bf16", False)),
        (V100, "lora", ("float16", "float32", "fp16", False)),
        (Machine(other_accelerator=True), "lora", ("float32", "float32", None, False)),
    ],
)
def test_the_default_for_each_device(machine, method, expected):
    decision = decide_precision(_cfg(finetuning_type=method), machine)
    assert _facts(decision) == expected
    assert decision.reason and "\n" not in decision.reason


def test_the_reasons_name_the_device_facts():
    assert "no native bf16 (no AVX512_BF16 or AMX)" in decide_precision(_cfg(), CPU).reason
    assert "computes bf16 natively (AVX512_BF16 / AMX)" in decide_precision(_cfg(), AMX).reason
    assert "compute capability 8.0 or newer" in decide_precision(_cfg(), A100).reason
    assert "Tesla V100-SXM2-32GB (compute capability 7.0) has no bf16" in decide_precision(_cfg(), V100).reason
    # one GPU without bf16 among several decides for all of them (the ranks must agree)
    mixed = Machine(gpus=((8, 0), (7, 5)), names=("A100", "T4"), processes=2)
    assert decide_precision(_cfg(), mixed).autocast == "fp16"


def test_fsdp_on_a_gpu_without_bf16_stays_fp32():
    """FSDP2 refuses fp16 (config/engines.py), so the default there cannot be fp16."""
    decision = decide_precision(_cfg(fsdp="full_shard"), Machine.cuda(processes=2, capability=(7, 0)))
    assert _facts(decision) == ("float32", "float32", None, False) and "fsdp refuses fp16" in decision.reason


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"dtype": "float32"}, ("float32", "float32", None, True)),  # today's exact fp32 path, on every device
        ({"bf16": False}, ("float32", "float32", None, True)),  # written false is a choice too (a saved config's)
        ({"bf16": False, "fp16": True}, ("float16", "float32", "fp16", True)),
        ({"bf16": True}, ("bfloat16", "float32", "bf16", True)),
        ({"fp16": True}, ("float16", "float32", "fp16", True)),
        ({"pure_bf16": True}, ("bfloat16", "bfloat16", None, True)),
        (
            {"dtype": "bfloat16"},
            ("bfloat16", "float32", None, True),
        ),  # LLaMA-Factory's default: bf16 base, no autocast
        ({"dtype": "float32", "bf16": True}, ("float32", "float32", "bf16", True)),
        ({"dtype": "float64"}, ("float64", "float64", None, True)),
    ],
)
@pytest.mark.parametrize("machine", [CPU, AMX, A100, V100])
def test_options_written_in_the_config_win(options, expected, machine):
    decision = decide_precision(_cfg(**options), machine)
    assert _facts(decision) == expected
    assert decision.options == {}  # nothing is written over them
    assert decision.reason.startswith("set by ")


def test_a_deepspeed_file_that_sets_its_precision_wins(tmp_path):
    path = tmp_path / "ds.json"
    off = {"enabled": False}
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}, "bf16": off, "fp16": off}))
    decision = decide_precision(_cfg(deepspeed=str(path)), A100)
    assert _facts(decision) == ("float32", "float32", None, True) and "DeepSpeed file's fp32" in decision.reason
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}))
    assert decide_precision(_cfg(deepspeed=str(path)), A100).autocast == "bf16"  # "auto": the device decides


def test_the_decision_is_applied_as_options_that_decide_the_same_again():
    """The run's options carry the decision: the loader (``load_dtype_name``), TrainingArguments
    (``stated_precision``), the planner and the saved config read them, and deciding again changes nothing."""
    from tunekit.model.loader import load_dtype_name

    cfg = _cfg()
    decision = decide_precision(cfg, AMX)
    applied = apply_precision(cfg, decision)
    assert applied.bf16 and not applied.fp16 and applied.dtype == "auto" and "bf16" in applied.model_fields_set
    assert load_dtype_name(applied) == decision.weights == "bfloat16"
    assert _facts(stated_precision(applied))[:3] == _facts(decision)[:3]
    assert _facts(decide_precision(applied, CPU))[:3] == _facts(decision)[:3]  # explicit now: the same on any machine
    assert apply_precision(cfg, decide_precision(cfg, CPU)) is cfg  # fp32: nothing to write
    summary = "frozen weights bfloat16, trainable float32, bf16 autocast"
    assert precision_notes(decision) == {"bf16": f"precision: {summary} ({decision.reason})"}


def test_the_summary_names_frozen_weights_only_where_some_stay_frozen():
    """Full fine-tuning trains every weight (loaded in bf16, upcast to fp32); freeze and LoRA keep a frozen base."""
    for method, summary in (
        ("full", "weights loaded in bfloat16, trained in float32, bf16 autocast"),
        ("freeze", "frozen weights bfloat16, trainable float32, bf16 autocast"),
        ("lora", "frozen weights bfloat16, trainable float32, bf16 autocast"),
    ):
        cfg = _cfg(finetuning_type=method)
        assert decide_precision(cfg, A100).summary() == summary, method
        assert decide_precision(apply_precision(cfg, decide_precision(cfg, AMX)), CPU).summary() == summary, method
    assert decide_precision(_cfg(finetuning_type="full"), CPU).summary() == "float32 throughout"


def test_the_planner_bytes_follow_the_decision():
    from tunekit.plan.training_setup import resolve_setup
    from tunekit.train.decisions import decide_features

    for machine in (CPU, AMX, V100):
        decision = decide_precision(_cfg(), machine)
        setup = resolve_setup(_cfg(), decisions=decide_features(_cfg(), machine))
        assert (setup.base_bytes, setup.compute_bytes, setup.autocast, setup.trainable_bytes) == (
            decision.weight_bytes,
            decision.compute_bytes,
            decision.autocast is not None,
            decision.trainable_bytes,
        )


def test_a_run_prints_and_records_its_precision(tiny_qwen, tmp_path, capsys):
    """A LoRA run on a CPU with native bf16 (described, so this runs on any host): the line at the start, frozen
    weights loaded in bf16 and LoRA weights in fp32, bf16 autocast, and tunekit_config.yaml saying so."""
    from tunekit.flow import run_train

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(4))
    out = tmp_path / "out"
    cfg = load_config(None, base_config(tiny_qwen, data, out, max_steps=1, print_param_status=True))
    run_train(cfg, machine=AMX)
    printed = capsys.readouterr().out
    summary = "frozen weights bfloat16, trainable float32, bf16 autocast"
    assert f"precision: {summary} (this CPU computes bf16 natively" in printed
    params = [line.split() for line in printed.splitlines() if "trainable=" in line]
    frozen = {p[-2] for p in params if p[-1] == "trainable=False"}
    trained = {p[-2] for p in params if p[-1] == "trainable=True"}
    assert frozen == {"torch.bfloat16"} and trained == {"torch.float32"}
    saved = (out / "tunekit_config.yaml").read_text()
    assert yaml.safe_load(saved)["bf16"] is True
    note = [line for line in saved.splitlines() if line.startswith("# precision: ")]
    assert len(note) == 1 and "frozen weights bfloat16, trainable float32, bf16 autocast" in note[0]
    assert "this CPU computes bf16 natively" in note[0]


def test_bf16_losses_match_fp32_within_the_bf16_rounding_bound(tiny_qwen, tmp_path):
    """The precision the rule picks on a bf16 device (bf16 autocast, frozen weights bf16, LoRA fp32), forced by its
    options so this runs on any CPU, against fp32, step by step.

    The bound, from bf16's unit roundoff u = 2^-8: each matmul rounds its two operands to bf16 (2u relative each), and
    the longest chain of matmuls is the embedding and the LM head plus, per decoder layer, the q/k/v projection, the
    scores, the weighted values, the output projection, gate/up and down: k = 2 + 12 L roundings, so a logit is off
    by at most k u Z, Z the largest logit the frozen head and final norm allow (|z_j| <= ||w_j|| max|gamma| sqrt(d),
    the normed hidden state having RMS max|gamma|). The loss moves by at most ||softmax - onehot||_1 = 2 times the
    largest logit error; after t steps the updates, computed from gradients off by the same k u, add at most k u times
    how far the fp32 loss has moved."""
    from safetensors.torch import load_file

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(16))
    from tunekit.flow import run_train

    runs = {}
    for name, options in (("fp32", {"dtype": "float32"}), ("bf16", {"bf16": True}), ("default", {})):
        out = tmp_path / name
        run_train(load_config(None, base_config(tiny_qwen, data, out, max_steps=4, **options)), machine=CPU)
        runs[name] = logged_losses(out)
    assert runs["default"] == runs["fp32"]  # no native bf16: the default is the fp32 path exactly
    config = json.loads((tiny_qwen / "config.json").read_text())
    weights = load_file(tiny_qwen / "model.safetensors")
    head = weights.get("lm_head.weight", weights["model.embed_tokens.weight"]).double()
    gamma = weights["model.norm.weight"].double().abs().max().item()
    z = head.norm(dim=1).max().item() * gamma * math.sqrt(config["hidden_size"])
    u, k = 2.0**-8, 2 + 12 * config["num_hidden_layers"]
    fp32, bf16 = runs["fp32"], runs["bf16"]
    assert len(fp32) == len(bf16) == 4 and fp32 != bf16  # the bf16 run did compute in bf16
    for t, (a, b) in enumerate(zip(fp32, bf16)):
        bound = 2 * k * u * z + k * u * abs(a - fp32[0])
        assert abs(a - b) <= bound, (t, a, b, bound)


def test_the_cpu_description_can_be_set_for_a_whole_suite(monkeypatch):
    """``TUNEKIT_CPU_BF16`` describes the CPU (tests/conftest.py sets 0, so default runs
    compute alike on every host)."""
    from tunekit.train.machine import cpu_has_native_bf16, run_machine

    for value, expected in (("1", True), ("0", False)):
        monkeypatch.setenv("TUNEKIT_CPU_BF16", value)
        assert cpu_has_native_bf16() is expected
        assert run_machine(_cfg(use_cpu=True)).cpu_bf16 is expected
