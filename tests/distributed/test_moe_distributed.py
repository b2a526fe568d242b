"""A mixture-of-experts model under DeepSpeed ZeRO-3 and FSDP2 on 2 CPU processes equals one process.

The tiny Qwen3-MoE (4 experts of fused 3-D weights per layer, top-2 routing) trains LoRA on attention and on the
experts' fused weights (PEFT ``target_parameters``) with the router's auxiliary loss on (``moe_aux_loss_coef``) for
4 steps, per-device batch 1 on 2 ranks. The reference is one process with batch 1 and 2 accumulation steps, not
batch 2: the load-balancing loss is a product of means over a forward's tokens (transformers'
``load_balancing_loss_func``), so it is not additive over samples, and each rank's forward equals one
micro-batch of the reference (the cross-entropy is divided over the step's trained tokens, and each micro-batch or
rank adds its own coef x aux, on both paths: ``model/moe.py``).

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

from tests.distributed_helpers import assert_close, assert_trained_alike, logits, run_cache, series
from tests.helpers import alpaca_records, write_dataset
from tests.tolerances import loss_tolerance
from tunekit.tiny.text import build_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

COEF = 0.1
EXPERTS, TOP_K, LAYERS = 4, 2, 2  # the tiny Qwen3-MoE's experts per layer, routing and sparse layers
LOSS_TOL = loss_tolerance(128, 12.0 + COEF * EXPERTS * TOP_K * LAYERS)
LOGIT_TOL = 1e-3
COMMON = dict(
    template="qwen3",
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


@pytest.fixture(scope="module")
def qwen3_moe(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("q3moe") / "model", like="qwen3-30b-a3b", seed=0)


@pytest.fixture(scope="module")
def runs(qwen3_moe, tmp_path_factory):
    data = tmp_path_factory.mktemp("moedata")
    write_dataset(data, "toy", alpaca_records(16, seed=1))
    return run_cache(qwen3_moe, data, tmp_path_factory.mktemp("moedist"), COMMON)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_moe_lora_with_router_loss_on_two_ranks_equals_one_process(runs, qwen3_moe, engine):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    single, _ = runs("single", "inprocess", gradient_accumulation_steps=2)
    sharded, proc = runs(engine, "reexec", **ENGINES[engine])
    assert "tunekit: starting 2 processes with torchrun" in proc.stderr
    assert "the routers (mlp.gate) stay frozen" in proc.stdout
    assert_close(series(single), series(sharded), LOSS_TOL, f"{engine} losses")
    aux = series(sharded, "moe/aux_loss")
    assert len(aux) == 4 and all(v > 0 for v in aux.values()), aux  # the router loss ran on every step
    a, b = load_file(single / "adapter_model.safetensors"), load_file(sharded / "adapter_model.safetensors")
    assert a.keys() == b.keys()
    experts = [k for k in b if ".mlp.experts." in k]
    assert len(experts) == LAYERS * 2 * 2, sorted(b)  # gate_up_proj / down_proj x lora_A / lora_B, full size
    assert all(b[k].shape == a[k].shape for k in b) and not any(".mlp.gate." in k for k in b)
    assert f"trainable params: {sum(t.numel() for t in b.values()):,} / " in proc.stdout  # experts' LoRA included
    assert_trained_alike(a, b, COMMON["learning_rate"], COMMON["max_steps"], what=f"{engine} MoE adapter")
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(qwen3_moe), sharded)
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(qwen3_moe), single)
    base = AutoModelForCausalLM.from_pretrained(qwen3_moe)
    assert (logits(loaded) - logits(reference)).abs().max().item() <= LOGIT_TOL
    assert (logits(loaded) - logits(base)).abs().max().item() > 10 * LOGIT_TOL  # the adapter changed the model
