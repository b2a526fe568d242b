"""Mixture-of-experts models under DeepSpeed ZeRO-3 and FSDP2 on 2 CPU processes equal one process.

Two families of transformers' fused-expert layout (4 experts of fused 3-D weights per layer, top-2 routing, 2 sparse
layers), each with its own chat template: the tiny Qwen3-MoE (``qwen3-30b-a3b``) and the tiny Mixtral
(``mixtral-8x7b``). Each trains LoRA on attention and on the experts' fused weights (PEFT ``target_parameters``) with
the router's auxiliary loss on (``moe_aux_loss_coef``) for 4 steps, per-device batch 1 on 2 ranks. Both families' runs
of ZeRO-3 share ONE torchrun job (``launch_batch``: each run a fresh pair of ranks forked after the imports), so
Mixtral adds a run but no launch (``RUNS`` says which engine trains which family, and why). The reference is one
process with batch 1 and 2 accumulation steps, not batch 2: the load-balancing loss is a product of means over a
forward's tokens (transformers' ``load_balancing_loss_func``), so it is not additive over samples, and each rank's
forward equals one micro-batch of the reference (the cross-entropy is divided over the step's trained tokens, and each
micro-batch or rank adds its own coef x aux, on both paths: ``model/moe.py``).

Under ZeRO-3 every rank loads the model partitioned (each parameter's shape is ``(0,)``, the full one in ``ds_shape``):
tunekit used to find no fused expert weight there and trained LoRA on attention only, without a word
(``model/moe.py`` reads ``ds_shape`` now). FSDP2 shards the fused 3-D weights and their LoRA pairs like any parameter.

Tolerances (float32, two summation orders): losses within ``loss_tolerance`` of a mean of <= 2 x cutoff 64 terms of
at most 12 nats of cross-entropy + coef x the largest load-balancing loss (experts x top-k = 8 per layer, 2
layers); the adapters as ``assert_trained_alike`` (Adam's per-element step bound, and a small share of the training
update); the logits of the adapters reloaded by plain peft within 1e-3 (see test_distributed_engines.py).
"""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

from tests.distributed_helpers import assert_close, assert_trained_alike, launch, launch_batch, logits, series
from tests.helpers import alpaca_records, base_config, write_dataset
from tests.tolerances import loss_tolerance
from tunekit.config import load_config
from tunekit.flow import run_train
from tunekit.tiny.text import build_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

COEF = 0.1
EXPERTS, TOP_K, LAYERS = 4, 2, 2  # both tiny families' experts per layer, routing and sparse layers
LOSS_TOL = loss_tolerance(128, 12.0 + COEF * EXPERTS * TOP_K * LAYERS)
LOGIT_TOL = 1e-3
COMMON = dict(
    finetuning_type="lora",
    lora_target="all",
    lora_rank=4,
    moe_aux_loss_coef=COEF,
    max_steps=4,
    learning_rate=1e-2,
    cutoff_len=64,
    per_device_train_batch_size=1,
    overwrite_output_dir=True,
)
ENGINES = {"zero3": {"deepspeed": "z3"}, "fsdp2": {"fsdp": "full_shard"}}
#: family -> (--like name, template)
FAMILIES = {"qwen3_moe": ("qwen3-30b-a3b", "qwen3"), "mixtral": ("mixtral-8x7b", "mistral")}
#: engine -> the families it trains. ZeRO-3's runs share ONE torchrun job (launch_batch); Mixtral there adds a run of a
#: few CPU seconds, where an FSDP2 run of it would add another (the suite's time budget): the fused-expert code is the
#: same for both families, and ZeRO-3's partitioned loading (ds_shape) is the engine-specific path. FSDP2's run goes
#: through tunekit's own torchrun relaunch (reexec), whose start is checked too.
RUNS = {"zero3": ("qwen3_moe", "mixtral"), "fsdp2": ("qwen3_moe",)}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return {
        fam: build_tiny_model(tmp_path_factory.mktemp(fam) / "model", like=like, seed=0)
        for fam, (like, _) in FAMILIES.items()
    }


@pytest.fixture(scope="module")
def runs(models, tmp_path_factory):
    """``get(family, engine)`` -> (one-process output, 2-rank output, the 2-rank run's process), each run once."""
    data = tmp_path_factory.mktemp("moedata")
    write_dataset(data, "toy", alpaca_records(16, seed=1))
    root = tmp_path_factory.mktemp("moedist")

    def config(family, name, **options):
        return base_config(models[family], data, root / name, **COMMON, template=FAMILIES[family][1], **options)

    singles, sharded = {}, {}

    def get(family, engine):
        if family not in singles:
            singles[family] = root / f"{family}-single"
            run_train(load_config(None, config(family, f"{family}-single", gradient_accumulation_steps=2)))
        if engine not in sharded:
            jobs = [(config(f, f"{f}-{engine}", **ENGINES[engine]), root / f"{f}-{engine}.yaml") for f in RUNS[engine]]
            if len(jobs) == 1:
                sharded[engine] = {family: launch("reexec", *jobs[0])}
            else:
                sharded[engine] = dict(zip(RUNS[engine], launch_batch([(*job, None) for job in jobs])))
        proc = sharded[engine][family]
        assert proc.returncode == 0, proc.stderr[-6000:]
        return singles[family], root / f"{family}-{engine}", proc

    return get


@pytest.mark.parametrize(("engine", "family"), [(e, f) for e in sorted(RUNS) for f in RUNS[e]])
def test_moe_lora_with_router_loss_on_two_ranks_equals_one_process(runs, models, engine, family):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    single, sharded, proc = runs(family, engine)
    if len(RUNS[engine]) == 1:  # tunekit's own relaunch (a batch's runs are started by the test's torchrun)
        assert "tunekit: starting 2 processes with torchrun" in proc.stderr
    assert "the routers (mlp.gate) stay frozen" in proc.stdout
    assert_close(series(single), series(sharded), LOSS_TOL, f"{family} {engine} losses")
    aux = series(sharded, "moe/aux_loss")
    assert len(aux) == 4 and all(v > 0 for v in aux.values()), aux  # the router loss ran on every step
    a, b = load_file(single / "adapter_model.safetensors"), load_file(sharded / "adapter_model.safetensors")
    assert a.keys() == b.keys()
    experts = [k for k in b if ".mlp.experts." in k]
    assert len(experts) == LAYERS * 2 * 2, sorted(b)  # gate_up_proj / down_proj x lora_A / lora_B, full size
    assert all(b[k].shape == a[k].shape for k in b) and not any(".mlp.gate." in k for k in b)
    assert f"trainable params: {sum(t.numel() for t in b.values()):,} / " in proc.stdout  # experts' LoRA included
    assert_trained_alike(a, b, COMMON["learning_rate"], COMMON["max_steps"], what=f"{family} {engine} MoE adapter")
    model = models[family]
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model), sharded)
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model), single)
    base = AutoModelForCausalLM.from_pretrained(model)
    assert (logits(loaded) - logits(reference)).abs().max().item() <= LOGIT_TOL
    assert (logits(loaded) - logits(base)).abs().max().item() > 10 * LOGIT_TOL  # the adapter changed the model
