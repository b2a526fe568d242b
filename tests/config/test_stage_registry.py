"""One stage registry (config/stages.py) and one engine model (config/engines.py + train.distributed.engine_plan):
every other list is generated from them, and the planner decides engines exactly as the launcher does."""

from __future__ import annotations

import importlib
import json
import typing

import pytest

from tunekit.config import build_config
from tunekit.config.engines import DEEPSPEED_PRESETS, FSDP_UNSUPPORTED_STAGES
from tunekit.config.options.method import MethodOptions
from tunekit.config.stages import STAGE_NAMES, STAGES
from tunekit.errors import ConfigError


def _cfg(**values):
    return build_config({"model_name_or_path": "m", "output_dir": "o", **values})


def test_every_stage_list_is_the_registry():
    from tunekit.data.processors import PROCESSORS
    from tunekit.train.run import STAGES as TRAINERS

    assert STAGE_NAMES == ("pt", "sft", "rm", "ppo", "dpo", "kto", "grpo")
    assert typing.get_args(MethodOptions.model_fields["stage"].annotation) == STAGE_NAMES
    assert list(PROCESSORS) == list(TRAINERS) == list(STAGE_NAMES)
    assert PROCESSORS["dpo"] == PROCESSORS["rm"] == "tunekit.data.processors.pairwise"
    assert FSDP_UNSUPPORTED_STAGES == ("rm", "ppo", "grpo")


@pytest.mark.parametrize("name", STAGE_NAMES)
def test_each_trainer_module_follows_the_protocol(name):
    module = importlib.import_module(STAGES[name].trainer)
    assert callable(module.build_trainer)
    assert hasattr(module, "load_model") is STAGES[name].own_model  # run.py calls it only when the registry says so
    assert not hasattr(module, "DATA_STAGE") and not hasattr(module, "predict")  # no duck-typed extras left
    importlib.import_module(f"tunekit.data.processors.{STAGES[name].processor}").process  # noqa: B018 - exists


def test_engine_rules_refuse_when_the_config_is_built():
    """What the board's validation (which only builds the config) refuses is what training refuses, same words."""
    with pytest.raises(
        ConfigError,
        match=r"fsdp: full_shard is not supported for stage rm .*fsdp runs the stages "
        r"pt, sft, dpo and kto\. Remove fsdp\.",
    ):
        _cfg(fsdp="full_shard", stage="rm")
    with pytest.raises(ConfigError, match="fsdp with fp16 is not supported"):
        _cfg(fsdp="shard_grad_op", fp16=True)
    with pytest.raises(ConfigError, match="do_predict with fsdp is not supported"):
        _cfg(fsdp="full_shard", do_predict=True)
    with pytest.raises(ConfigError, match="has unknown word.*hybrid"):
        _cfg(fsdp="full_shard hybrid")
    with pytest.raises(
        ConfigError, match=r"packing is not supported for stage dpo: remove packing \(it is only for pt and sft\)"
    ):
        _cfg(stage="dpo", packing=True)
    assert _cfg(fsdp="no_shard", stage="rm").fsdp == "no_shard"  # no_shard is DDP: no restriction


def test_deepspeed_presets_are_declared_once():
    from tunekit.plan.training_setup import DS_PRESETS
    from tunekit.train.engines.deepspeed_config import PRESETS

    assert tuple(DS_PRESETS) == PRESETS == DEEPSPEED_PRESETS
    assert DS_PRESETS["z1"] == (1, False, False) and DS_PRESETS["z3_offload"] == (3, True, True)


def test_planner_decides_engines_as_the_launcher(tmp_path):
    from tunekit.plan.training_setup import resolve_setup
    from tunekit.train.engines.distributed import engine_plan

    keep = tmp_path / "fsdp.json"
    keep.write_text(json.dumps({"reshard_after_forward": False}))
    cases = [
        dict(deepspeed="z1"),
        dict(deepspeed="z3_offload"),
        dict(fsdp="full_shard"),
        dict(fsdp="shard_grad_op offload"),
        dict(fsdp="full_shard", fsdp_config=str(keep)),
        dict(fsdp="no_shard"),
        dict(),
    ]
    got = []
    for values in cases:
        cfg = _cfg(**values)
        launch, setup = engine_plan(cfg, 8), resolve_setup(cfg, world_size=8)
        got.append((launch.engine, setup.zero_stage, setup.fsdp, setup.offload_optimizer, setup.offload_params))
    assert got == [
        ("deepspeed", 1, None, False, False),
        ("deepspeed", 3, None, True, True),
        ("fsdp", None, "full_shard", False, False),
        ("fsdp", None, "shard_grad_op", True, True),
        ("fsdp", None, "shard_grad_op", False, False),  # fsdp_config.reshard_after_forward: false acts as ZeRO-2
        ("ddp", None, None, False, False),  # fsdp: no_shard is DDP for the launcher, and so for the planner
        ("ddp", None, None, False, False),
    ]
