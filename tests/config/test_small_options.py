"""LLaMA-Factory options users expect: neftune_noise_alpha, use_v1_kernels, fsdp_transformer_layer_cls_to_wrap
(accepted where tunekit runs them, refused by name with the reason and what to use instead), mixture_of_depths
(refused by name)."""

from __future__ import annotations

import pytest
import yaml

from tunekit.config import build_config, load_config
from tunekit.config.llamafactory_options import unsupported
from tunekit.config.schema import Config
from tunekit.errors import ConfigError

BASE = {"model_name_or_path": "m", "output_dir": "o"}


def _refusal(values: dict) -> str:
    with pytest.raises(ConfigError) as err:
        build_config({**BASE, **values})
    return str(err.value)


@pytest.mark.parametrize(
    "values",
    [
        {"stage": "sft"},
        {"stage": "pt"},
        {"stage": "dpo", "precompute_ref_log_probs": True},
        {"stage": "dpo", "ref_model": "ref"},
        {"stage": "dpo", "pref_loss": "simpo"},  # no reference at all
        {"stage": "kto", "finetuning_type": "full"},  # the frozen copy, loaded in eval mode
        {"stage": "kto", "precompute_ref_log_probs": True},
    ],
)
def test_neftune_is_accepted_where_only_the_policy_sees_the_noise(values):
    assert build_config({**BASE, **values, "neftune_noise_alpha": 5}).neftune_noise_alpha == 5.0
    assert build_config({**BASE, **values, "neftune_noise_alpha": 0}).neftune_noise_alpha == 0.0  # off


@pytest.mark.parametrize(
    "stage, why",
    [
        ("rm", "the reward model's value-head wrapper has no input embeddings for transformers' hook"),
        (
            "ppo",
            "the value-head wrapper has no input embeddings for transformers' hook, and the rollouts' log-probs are "
            "taken without noise, so the policy ratio would compare noised with clean log-probs",
        ),
        (
            "grpo",
            "the rollouts' log-probs are taken without noise, so the policy ratio would compare noised with clean "
            "log-probs",
        ),
    ],
)
def test_neftune_is_refused_by_name_in_rm_ppo_and_grpo(stage, why):
    assert _refusal({"stage": stage, "neftune_noise_alpha": 5}) == (
        f"neftune_noise_alpha (NEFTune) does not work in stage {stage}: {why}. Remove neftune_noise_alpha."
    )
    assert build_config({**BASE, "stage": stage, "neftune_noise_alpha": 0}).neftune_noise_alpha == 0  # off: fine


@pytest.mark.parametrize("stage", ["dpo", "kto"])
def test_neftune_is_refused_where_the_policy_is_its_own_reference(stage):
    assert _refusal({"stage": stage, "neftune_noise_alpha": 5}) == (
        f"neftune_noise_alpha (NEFTune) in stage {stage} with finetuning_type lora: the reference is the policy with "
        "its adapter disabled, so its log-probs would be noised too. Set ref_model or precompute_ref_log_probs: true "
        "(that reference sees no noise), or remove neftune_noise_alpha."
    )


def test_neftune_must_not_be_negative():
    assert "neftune_noise_alpha" in _refusal({"neftune_noise_alpha": -1})


def test_use_v1_kernels_false_loads_and_true_is_refused_with_what_to_use(tmp_path):
    # LLaMA-Factory's examples/ascend/qwen3_full_sft_fsdp2.yaml, with use_v1_kernels as LLaMA-Factory's default
    path = tmp_path / "ascend.yaml"
    example = dict(
        model_name_or_path="m",
        trust_remote_code=True,
        use_v1_kernels=False,
        flash_attn="fa2",
        stage="sft",
        do_train=True,
        finetuning_type="full",
        output_dir=str(tmp_path / "out"),
    )
    path.write_text(yaml.safe_dump(example))
    assert load_config(path).use_v1_kernels is False
    path.write_text(yaml.safe_dump({**example, "use_v1_kernels": True}))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        "use_v1_kernels: true asks for LLaMA-Factory's v1 fused kernels (RMSNorm, RoPE, SwiGLU and MoE on Ascend "
        "NPUs), which tunekit does not have: remove it (or set false); for fused kernels on GPUs use "
        "enable_liger_kernel: true, and flash_attn: fa2 for FlashAttention-2."
    )


@pytest.mark.parametrize("value", ["LlamaDecoderLayer", ["LlamaDecoderLayer", "LlamaMLP"], "A, B"])
def test_fsdp_layer_classes_are_accepted_with_fsdp(value):
    cfg = load_config(None, {**BASE, "fsdp": "full_shard auto_wrap", "fsdp_transformer_layer_cls_to_wrap": value})
    expected = value if isinstance(value, str) else ",".join(value)
    assert cfg.fsdp_transformer_layer_cls_to_wrap == expected


@pytest.mark.parametrize("engine", [{}, {"fsdp": "no_shard"}, {"deepspeed": "z3"}])
def test_fsdp_layer_classes_without_fsdp_units_are_refused(engine):
    assert _refusal({**engine, "fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer"}) == (
        "fsdp_transformer_layer_cls_to_wrap names the classes FSDP shards as units, so it needs fsdp: full_shard or "
        "shard_grad_op; set fsdp or remove fsdp_transformer_layer_cls_to_wrap."
    )


def test_mixture_of_depths_stays_refused_by_name(tmp_path):
    """Mixture-of-Depths needs the `mixture-of-depth` package: its wheel installs (it requires only torch), but
    importing it fails under transformers 5 (checked with 1.2.0, the latest), so the option is refused by its name
    with that reason, never dropped."""
    assert "mixture_of_depths" in unsupported(Config.model_fields)
    path = tmp_path / "mod.yaml"
    path.write_text(yaml.safe_dump({**BASE, "finetuning_type": "full", "mixture_of_depths": "convert"}))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"`mixture_of_depths` is a LLaMA-Factory option that tunekit does not support (yet) (in {path}): remove it; "
        "`tunekit train --help` lists what tunekit supports. (Mixture-of-Depths needs the mixture-of-depth package "
        "(LLaMA-Factory requires >=1.1.6), whose latest release, 1.2.0, imports what transformers 5 removed "
        "(TRANSFORMERS_CACHE, transformers.modeling_attn_mask_utils).)"
    )


def test_the_three_options_are_no_longer_unsupported_llamafactory_options():
    assert not {"neftune_noise_alpha", "use_v1_kernels", "fsdp_transformer_layer_cls_to_wrap"} & unsupported(
        Config.model_fields
    )


def test_ray_options_are_refused_with_what_to_use_instead(tmp_path):
    """LLaMA-Factory's RayArguments name Ray Train, which tunekit does not run: each is refused by its name, with
    how tunekit starts several processes instead."""
    path = tmp_path / "ray.yaml"
    path.write_text(yaml.safe_dump({**BASE, "ray_num_workers": 4, "resources_per_worker": {"GPU": 1}}))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    lines = str(err.value).splitlines()
    assert [line.split("`")[1] for line in lines] == ["ray_num_workers", "resources_per_worker"]
    assert lines[0].endswith(
        "(Ray Train (LLaMA-Factory's USE_RAY=1) is not built in: tunekit train starts one process per visible GPU "
        "itself, NPROC_PER_NODE and NNODES/NODE_RANK/MASTER_ADDR for several machines (docs/workflows/multi-gpu.md).)"
    )
