"""LLaMA-Factory options users expect: neftune_noise_alpha, use_v1_kernels, fsdp_transformer_layer_cls_to_wrap
(accepted where tunekit runs them, refused by name with the reason and what to use instead), mixture_of_depths
(refused by name), use_reentrant_gc and transformers' gradient_checkpointing_kwargs, and the engines tunekit lacks
(Ray, Megatron-Core, KTransformers: one refusal per engine, with what to use instead)."""

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


def test_ray_options_are_llamafactorys_with_its_types_and_defaults(tmp_path):
    """LLaMA-Factory's RayArguments (USE_RAY=1: train/engines/ray_launch.py), as its YAML and its command line
    (a JSON object in a string) write them; what tunekit cannot do is refused by name."""
    defaults = build_config(BASE)
    assert (defaults.ray_num_workers, defaults.resources_per_worker, defaults.placement_strategy) == (1, None, "PACK")
    assert (defaults.ray_run_name, defaults.ray_storage_path, defaults.ray_init_kwargs) == (None, "./saves", None)
    path = tmp_path / "ray.yaml"
    path.write_text(yaml.safe_dump({**BASE, "ray_num_workers": 4, "resources_per_worker": {"GPU": 1}}))
    cfg = load_config(path, ['ray_init_kwargs={"runtime_env": {"env_vars": {"A": "1"}}}', "placement_strategy=SPREAD"])
    assert (cfg.ray_num_workers, cfg.resources_per_worker) == (4, {"GPU": 1.0})
    assert (cfg.ray_init_kwargs, cfg.placement_strategy) == ({"runtime_env": {"env_vars": {"A": "1"}}}, "SPREAD")
    assert build_config({**BASE, "resources_per_worker": '{"CPU": 8, "GPU": 1}'}).resources_per_worker == {
        "CPU": 8.0,
        "GPU": 1.0,
    }
    assert _refusal({"ray_storage_filesystem": "s3"}) == (
        "`ray_storage_filesystem` is a LLaMA-Factory option that tunekit does not support (yet) (config): remove it; "
        "`tunekit train --help` lists what tunekit supports. (Ray's cloud storage: tunekit writes the checkpoints, "
        "logs and model to output_dir itself, and Ray keeps only its run records, in ray_storage_path (a local or "
        "shared folder).)"
    )
    assert _refusal({"use_cpu": True, "resources_per_worker": {"GPU": 1}}) == (
        "resources_per_worker asks Ray for GPUs but use_cpu is true: remove GPU from resources_per_worker, or set "
        "use_cpu to false."
    )
    for bad in ({"ray_num_workers": 0}, {"placement_strategy": "ANYWHERE"}):
        assert next(iter(bad)) in _refusal(bad)


def test_an_engines_keys_are_refused_in_one_line_with_what_to_use(tmp_path):
    """LLaMA-Factory's examples/megatron/qwen3_moe_full.yaml (its Megatron-Core keys) and the KTransformers
    examples' use_kt: GPU-only engines tunekit does not have, refused by name, each engine's keys in one line."""
    mca = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 4, "moe_grouped_gemm": True}
    path = tmp_path / "mca.yaml"
    path.write_text(yaml.safe_dump({**BASE, **mca, "use_kt": True, "kt_optimize_rule": "x.yaml"}, sort_keys=False))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    megatron, kt = str(err.value).splitlines()
    assert megatron == (
        "tensor_model_parallel_size, pipeline_model_parallel_size and moe_grouped_gemm are LLaMA-Factory options that "
        f"tunekit does not support (yet) (in {path}): remove them; `tunekit train --help` lists what tunekit "
        "supports. "
        "(Megatron-Core training (LLaMA-Factory's USE_MCA=1 with mcore_adapter, or Megatron-Bridge) is a GPU-only "
        "engine that tunekit does not have: for several GPUs use deepspeed (ZeRO 0-3) or fsdp "
        "(docs/workflows/multi-gpu.md).)"
    )
    assert kt.startswith("use_kt and kt_optimize_rule are LLaMA-Factory options") and "KTransformers" in kt


def test_gradient_checkpointing_kwargs_is_read_as_use_reentrant_gc():
    """LLaMA-Factory's examples/train_full/mossvl_full_sft.yaml writes both spellings; any other key is refused."""
    both = {"use_reentrant_gc": False, "gradient_checkpointing_kwargs": {"use_reentrant": False}}
    assert load_config(None, {**BASE, **both}).use_reentrant_gc is False
    assert load_config(None, {**BASE, "gradient_checkpointing_kwargs": {"use_reentrant": True}}).use_reentrant_gc
    with pytest.raises(ConfigError) as err:
        load_config(None, {**BASE, "gradient_checkpointing_kwargs": {"preserve_rng_state": False}})
    assert str(err.value) == (
        "gradient_checkpointing_kwargs {'preserve_rng_state': False} (on the command line): tunekit reads only"
        " use_reentrant: true or false from it (as use_reentrant_gc); remove the other keys."
    )
    with pytest.raises(ConfigError, match="disagree"):
        load_config(
            None, {**BASE, "use_reentrant_gc": True, "gradient_checkpointing_kwargs": {"use_reentrant": False}}
        )


@pytest.mark.parametrize(
    "off, shown",
    [
        ({"gradient_checkpointing": False}, "gradient_checkpointing: false"),
        ({"disable_gradient_checkpointing": True}, "disable_gradient_checkpointing: true"),
        ({"finetuning_type": "ptuning"}, "finetuning_type: ptuning"),
    ],
)
def test_use_reentrant_gc_without_checkpointing_is_refused(off, shown):
    assert _refusal({"use_reentrant_gc": True, **off}) == (
        f"use_reentrant_gc: true chooses how gradient checkpointing recomputes, but checkpointing is off ({shown}): "
        "remove use_reentrant_gc, or turn gradient checkpointing on."
    )
    assert build_config({**BASE, "use_reentrant_gc": False, **off}).use_reentrant_gc is False  # LF's false: nothing
