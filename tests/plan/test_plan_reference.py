"""The planner counts a frozen reference model exactly when training holds one
(stages/reference_policy.load_reference)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tunekit.config import load_config


@pytest.mark.parametrize(
    "stage, options, held",
    [
        ("dpo", {"finetuning_type": "full"}, True),
        ("dpo", {"finetuning_type": "lora"}, False),  # the policy without its adapter is the reference
        ("dpo", {"finetuning_type": "full", "precompute_ref_log_probs": True}, False),  # freed before training
        ("dpo", {"finetuning_type": "full", "pref_loss": "simpo"}, False),  # reference-free losses
        ("dpo", {"finetuning_type": "full", "pref_loss": "orpo"}, False),
        ("kto", {"finetuning_type": "full"}, True),
        ("kto", {"finetuning_type": "lora", "ref_model": "REF"}, True),
        ("sft", {"finetuning_type": "full"}, False),
        ("sft", {"finetuning_type": "full", "use_asft_loss": True}, True),
    ],
)
def test_reference_weights_are_counted_when_a_reference_is_held(tiny_qwen, stage, options, held):
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.memory import estimate_memory
    from tunekit.plan.training_setup import holds_reference_copy, resolve_setup
    from tunekit.train.stages.dpo import REFERENCE_FREE

    assert REFERENCE_FREE == ("orpo", "simpo")  # the stage's own list, mirrored by holds_reference_copy
    shape = load_shape(str(tiny_qwen), None)
    opts = {k: (str(tiny_qwen) if v == "REF" else v) for k, v in options.items()}
    cfg = load_config(None, {"model_name_or_path": str(tiny_qwen), "stage": stage, **opts})
    setup = resolve_setup(cfg)
    assert holds_reference_copy(cfg) is held and setup.reference_copy is held
    counted = estimate_memory(shape, setup).components["base_weights"]
    alone = estimate_memory(shape, replace(setup, reference_copy=False)).components["base_weights"]
    assert counted - alone == (setup.base_bytes * shape.total_params if held else 0)  # one more copy of the weights
