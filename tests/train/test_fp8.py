"""FP8 (train/fp8.py) up to the GPU: the recipe chosen from the options, the layers torchao would convert, the errors
when the backend's package is missing, and the Trainer's accelerator arguments. The float8 matmuls themselves need a
GPU of compute capability 8.9+ (not on this machine); on CPU the refusal before the model loads is
tests/train/test_precision_modes.py::test_fp8_is_refused_on_cpu_before_the_model_loads."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch import nn

from tunekit.config import load_config
from tunekit.errors import ConfigError, EnvironmentProblem
from tunekit.train.fp8 import Fp8AcceleratorMixin, Fp8Recipe, accelerate_handlers, fp8_module_filter, fp8_recipe

HAS_TORCHAO = importlib.util.find_spec("torchao") is not None
HAS_TE = importlib.util.find_spec("transformer_engine") is not None


def _cfg(**options):
    return load_config(None, {"fp8": True, **options})


@pytest.mark.parametrize(
    "options, expected",
    [
        ({}, Fp8Recipe("AO", recipe_name="rowwise")),
        ({"fp8_backend": "torchao"}, Fp8Recipe("AO", recipe_name="rowwise")),
        (
            {"fp8_backend": "torchao", "fp8_enable_fsdp_float8_all_gather": True, "fsdp": "full_shard"},
            Fp8Recipe("AO", recipe_name="tensorwise", enable_fsdp_float8_all_gather=True),
        ),
        ({"fp8_backend": "te"}, Fp8Recipe("TE", fp8_format="HYBRID", amax_history_len=16, amax_compute_algo="max")),
    ],
)
def test_recipe_from_the_options(options, expected):
    assert fp8_recipe(_cfg(**options)) == expected


def test_msamp_is_refused():
    with pytest.raises(
        ConfigError, match=r"^fp8_backend msamp is not supported: use fp8_backend: torchao \(or auto\) or te\.$"
    ):
        fp8_recipe(_cfg(fp8_backend="msamp"))


def test_unknown_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="fp8_backend"):
        load_config(None, {"fp8": True, "fp8_backend": "mxfp8"})


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(64, 32)
        self.q_proj = nn.Linear(32, 48, bias=False)
        self.odd_proj = nn.Linear(32, 30)  # 30 is not a multiple of 16
        self.norm = nn.LayerNorm(32)  # 1-D weight
        self.output_dense = nn.Linear(32, 32)  # "output" in the name
        self.lm_head = nn.Linear(32, 64, bias=False)


def test_module_filter_converts_aligned_inner_linears_only():
    block = _Block()
    assert [name for name, m in block.named_modules() if name and fp8_module_filter(m, name)] == ["q_proj"]


@pytest.mark.skipif(HAS_TORCHAO, reason="torchao is installed")
def test_missing_torchao_names_the_extra():
    with pytest.raises(
        EnvironmentProblem,
        match=r"^fp8 with fp8_backend torchao \(or auto\) needs torchao, which is not installed: "
        r'pip install -c constraints\.txt -e "\.\[fp8\]" \(the fp8 extra\), or use fp8_backend: te, or remove fp8\.$',
    ):
        accelerate_handlers(fp8_recipe(_cfg()))


@pytest.mark.skipif(HAS_TE, reason="Transformer Engine is installed")
def test_missing_transformer_engine_is_named():
    with pytest.raises(
        EnvironmentProblem,
        match=r"^fp8_backend te needs NVIDIA Transformer Engine \(pip install transformer-engine\[pytorch\]",
    ):
        accelerate_handlers(fp8_recipe(_cfg(fp8_backend="te")))


@pytest.mark.skipif(not HAS_TORCHAO, reason="needs the fp8 extra (torchao)")
@pytest.mark.parametrize("all_gather", [False, True])
def test_torchao_handler_fields(all_gather):
    from accelerate.utils import AORecipeKwargs
    from torchao.float8 import Float8LinearConfig
    from torchao.float8.config import ScalingGranularity

    options = {"fp8_enable_fsdp_float8_all_gather": True, "fsdp": "full_shard"} if all_gather else {}
    (handler,) = accelerate_handlers(fp8_recipe(_cfg(**options)))
    assert isinstance(handler, AORecipeKwargs) and handler.module_filter_func is fp8_module_filter
    assert isinstance(handler.config, Float8LinearConfig)
    granularity = ScalingGranularity.TENSORWISE if all_gather else ScalingGranularity.AXISWISE
    assert handler.config.cast_config_weight.scaling_granularity == granularity
    assert handler.config.enable_fsdp_float8_all_gather is all_gather


class _Base:
    def _build_accelerator_args(self, **kwargs):
        return {"mixed_precision": "bf16", "kwargs_handlers": ["ddp"], **kwargs}


class _Trainer(Fp8AcceleratorMixin, _Base):
    def __init__(self, cfg):
        self.tunekit_config = cfg


def test_accelerator_arguments_unchanged_without_fp8():
    assert _Trainer(load_config(None, {}))._build_accelerator_args(x=1) == {
        "mixed_precision": "bf16",
        "kwargs_handlers": ["ddp"],
        "x": 1,
    }


def test_accelerator_arguments_with_fp8():
    trainer = _Trainer(_cfg())
    if not HAS_TORCHAO:  # the recipe is built when the accelerator is: the same error as before the model loads
        with pytest.raises(EnvironmentProblem, match="needs torchao"):
            trainer._build_accelerator_args()
        return
    args = trainer._build_accelerator_args()
    assert args["mixed_precision"] == "fp8" and args["kwargs_handlers"][0] == "ddp"
    assert type(args["kwargs_handlers"][1]).__name__ == "AORecipeKwargs"


@pytest.mark.skipif(not HAS_TORCHAO, reason="needs the fp8 extra (torchao)")
def test_torchao_emulated_conversion_runs_on_cpu():
    """accelerate's own conversion with our filter, with torchao's emulation (float8 casts without _scaled_mm), forward
    and backward on CPU: what the GPU path converts, minus the fast kernels."""
    import dataclasses

    from accelerate.utils.ao import convert_model_to_fp8_ao
    from torchao.float8 import Float8LinearConfig
    from torchao.float8.float8_linear import Float8Linear

    block = _Block()
    config = dataclasses.replace(Float8LinearConfig.from_recipe_name("tensorwise"), emulate=True)
    convert_model_to_fp8_ao(block, config=config, module_filter_func=fp8_module_filter)
    assert [n for n, m in block.named_modules() if isinstance(m, Float8Linear)] == ["q_proj"]
    x = torch.randn(4, 32, requires_grad=True)
    ref = x @ block.q_proj.weight.detach().T
    out = block.q_proj(x)
    out.sum().backward()
    # e4m3 keeps 3 mantissa bits: per-element relative error up to 2^-4 on both operands, so ~1e-1 on the sums
    assert torch.allclose(out.detach(), ref, rtol=0.15, atol=0.15) and x.grad is not None
