"""LLaMA-Factory v1 configs (``examples/v1/``) read unchanged: each maps onto the expected tunekit options, exactly,
or is refused with a message naming the key; the mapping is written to ``tunekit_config.yaml`` and shown by
``tunekit train CONFIG --print-config``; one v1 config trains a tiny model end to end
(src/tunekit/config/llamafactory_v1.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.helpers import REFERENCE_DATA, train_rows
from tunekit.config import load_config
from tunekit.errors import ConfigError

EXAMPLES = {  # LLaMA-Factory's examples/v1/ (hiyouga/LLaMA-Factory ff6d4d12), each file as written there
    "examples/v1/train_batching_strategy/train_full_fsdp2_batching_normal.yaml": """\
model: Qwen/Qwen3-0.6B
model_class: llm

kernel_config:
  name: auto

quant_config: null

dist_config:
  name: fsdp2
  dcp_path: null # /mnt/f/pretrain_models/Qwen3-0.6B-dcp

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: outputs/test_fsdp2
micro_batch_size: 2
batching_strategy: normal

cutoff_len: 2048
learning_rate: 1.0e-4
max_steps: 10

### sample
sample_backend: hf
max_new_tokens: 128
""",
    "examples/v1/train_batching_strategy/train_full_fsdp2_dynamic_batching.yaml": """\
model: Qwen/Qwen3-0.6B
model_class: llm

kernel_config:
  name: auto

quant_config: null

dist_config:
  name: fsdp2
  dcp_path: null # /mnt/f/pretrain_models/Qwen3-0.6B-dcp

### data
train_dataset: data/v1_sft_demo.yaml


### training
output_dir: outputs/test_fsdp2
micro_batch_size: 2
batching_strategy: dynamic_batching
cutoff_len: 2048
learning_rate: 1.0e-4
max_steps: 10

### sample
sample_backend: hf
max_new_tokens: 128
""",
    "examples/v1/train_batching_strategy/train_full_fsdp2_dynamic_padding_free.yaml": """\
model: Qwen/Qwen3-0.6B
model_class: llm

kernel_config:
  name: auto

quant_config: null

dist_config:
  name: fsdp2
  dcp_path: null # /mnt/f/pretrain_models/Qwen3-0.6B-dcp

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: outputs/test_fsdp2
micro_batch_size: 4
batching_strategy: dynamic_padding_free
flash_attn: flash_attention_2
cutoff_len: 2048
learning_rate: 1.0e-4
max_steps: 10

### sample
sample_backend: hf
max_new_tokens: 128
""",
    "examples/v1/train_batching_strategy/train_full_fsdp2_padding_free.yaml": """\
model: Qwen/Qwen3-0.6B
model_class: llm

kernel_config:
  name: auto

quant_config: null

dist_config:
  name: fsdp2
  dcp_path: null # /mnt/f/pretrain_models/Qwen3-0.6B-dcp

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: outputs/test_fsdp2
micro_batch_size: 4
batching_strategy: padding_free
flash_attn: flash_attention_2
cutoff_len: 2048
learning_rate: 1.0e-4
max_steps: 10

### sample
sample_backend: hf
max_new_tokens: 128
""",
    "examples/v1/train_freeze/train_freeze_sft.yaml": """\
model: Qwen/Qwen3-4B
model_class: llm

# Freeze Configuration
peft_config:
  name: freeze
  freeze_trainable_layers: 2      # Train the last 2 layers
  freeze_trainable_modules: all       # In these layers, train specific modules
  freeze_extra_modules: null      # Extra modules to train (e.g. embed_tokens, lm_head)

# Kernel Config
kernel_config:
  name: auto

# FSDP Config
dist_config:
  name: fsdp2
  dcp_path: null

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: ./outputs/test_freeze
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 2.0e-5
max_steps: 10

### sample
sample_backend: hf
max_new_tokens: 128
""",
    "examples/v1/train_full/train_full_deepspeed.yaml": """\
model: Qwen/Qwen3-0.6B
model_class: llm

kernel_config:
    name: auto

dist_config:
    name: deepspeed
    config_file: examples/deepspeed/ds_z3_config.json

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: outputs/Qwen3-0.6B-deepspeed
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-4
max_steps: 10
""",
    "examples/v1/train_full/train_full_fsdp2.yaml": """\
model: Qwen/Qwen3-0.6B
model_class: llm

kernel_config:
  name: auto

quant_config: null

dist_config:
  name: fsdp2
  dcp_path: null # /mnt/f/pretrain_models/Qwen3-0.6B-dcp

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: outputs/test_fsdp2
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-4
max_steps: 10

### sample
sample_backend: hf
max_new_tokens: 128
""",
    "examples/v1/train_full/train_full_liger_kernel.yaml": """\
model: Qwen/Qwen3-0.6B
model_class: llm

kernel_config:
  name: liger_kernel

quant_config: null

dist_config:
  name: fsdp2
  dcp_path: null # /mnt/f/pretrain_models/Qwen3-0.6B-dcp

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: outputs/test_fsdp2
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-4
max_steps: 10

### sample
sample_backend: hf
max_new_tokens: 128
""",
    "examples/v1/train_full/train_full_muon.yaml": """\
model: Qwen/Qwen3-0.6B
model_class: llm


dist_config:
  name: fsdp2

optim_config:
  name: muon
  wd: 0.1
  momentum: 0.95
  nesterov: true
  ns_steps: 5
  adamw_betas: [0.9, 0.95]
  adamw_eps: 1.0e-8

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: outputs/test_muon
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-5
max_steps: 10

### sample
sample_backend: hf
max_new_tokens: 128
""",
    "examples/v1/train_full/train_full_qwen3_moe_fsdpturbo_ep_fsdp.yaml": """\
model: Qwen/Qwen3.5-35B-A3B
model_class: llm

kernel_config:
  name: auto, flash-linear-attention
  include_kernels: chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
  chunk_size: 64

dist_config:
  name: fsdpturbo
  ep_size: 16
  ep_dispatcher: eager

cp_size: 1

init_config:
  name: init_on_meta

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: outputs/Qwen3.5-35B-A3B/full/sft
micro_batch_size: 1
cutoff_len: 256
learning_rate: 1.0e-4
bf16: true
max_steps: 5

### sample
sample_backend: hf
max_new_tokens: 128
""",
    "examples/v1/train_full/train_full_ulysses_cp.yaml": """\
model: Qwen/Qwen3-0.6B
trust_remote_code: true
model_class: llm

flash_attn: flash_attention_2

# FSDP Config
dist_config:
  name: fsdp2
  dcp_path: null

cp_mode: ulysses
cp_size: 2

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: outputs/test_ulysses_cp
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-4
bf16: false
max_steps: 10
""",
    "examples/v1/train_full/train_multimodal.yaml": """\
model: Qwen/Qwen3.5-0.8B
model_class: llm


kernel_config:
  name: auto

quant_config: null

dist_config:
  name: fsdp2
  dcp_path: null

### data
train_dataset: data/v1_multimodal_demo.yaml

### training
output_dir: outputs/test_multimodal
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-4
max_steps: 5

### sample
sample_backend: hf
max_new_tokens: 128
""",
    "examples/v1/train_lora/export_lora.yaml": """\
model: Qwen/Qwen3-4B
peft_config:
  name: lora
  adapter_name_or_path: ./outputs/test_lora
  export_dir: ./merge_lora_model
  export_size: 5
  infer_dtype: auto
""",
    "examples/v1/train_lora/train_lora_dpo.yaml": """\
model: Qwen/Qwen3-4B
model_class: llm

# PEFT Configuration
peft_config:
  name: lora
  r: 16
  lora_alpha: 32
  lora_dropout: 0.05
  target_modules: all

# Kernel Config
kernel_config:
  name: auto

# FSDP Config
dist_config:
  name: fsdp2
  dcp_path: null

### data
train_dataset: data/v1_dpo_demo.yaml

### training
output_dir: ./outputs/test_lora
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-5
max_steps: 10

### sample
sample_backend: hf
max_new_tokens: 128
""",
    "examples/v1/train_lora/train_lora_sft.yaml": """\
model: Qwen/Qwen3-4B
model_class: llm

# PEFT Configuration
peft_config:
  name: lora
  r: 16
  lora_alpha: 32
  lora_dropout: 0.05
  target_modules: all

# Kernel Config
kernel_config:
  name: auto

# FSDP Config
dist_config:
  name: fsdp2
  dcp_path: null

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: ./outputs/test_lora
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-4
max_steps: 10

### sample
sample_backend: hf
max_new_tokens: 128
""",
    "examples/v1/train_lora/train_lora_sft_rank0.yaml": """\
model: Qwen/Qwen3-4B
model_class: llm

# PEFT Configuration
peft_config:
  name: lora
  r: 16
  lora_alpha: 32
  lora_dropout: 0.05
  target_modules: all

# Kernel Config
kernel_config:
  name: auto

# FSDP Config
dist_config:
  name: fsdp2
  dcp_path: null

init_config:
  name: init_on_rank0

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: ./outputs/test_lora
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-4
bf16: true
max_steps: 10

### sample
sample_backend: hf
max_new_tokens: 128
""",
    "examples/v1/train_qlora/quantization.yaml": """\
model: Qwen/Qwen3-0.6B
model_class: llm

# PEFT Configuration
peft_config:
  name: lora
  r: 16
  lora_alpha: 32
  lora_dropout: 0.05
  target_modules: all

# Kernel Config
kernel_config:
  name: auto

# FSDP Config
dist_config:
  name: fsdp2
  dcp_path: null

# Quantization Config
quant_config:
  name: bnb # choice: auto/bnb if auto is selected, the quantization method will be automatically selected based on the model and environment.
  quantization_bit: 4 # choice: 8/4(bnb)

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: outputs/test_quantization
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-4
max_steps: 10

### sample
sample_backend: hf
max_new_tokens: 128
""",  # noqa: E501 - its comment line as written upstream (longer than 119)
}

#: LLaMA-Factory's data/v1_sft_demo.yaml as written there: its `size: 500` is dataset_sampling (test_dataset_size_read)
V1_SFT_DEMO = """\
identity:
  path: data/identity.json
  source: local
  converter: alpaca
alpaca_en_demo:
  path: data/alpaca_en_demo.json
  source: local
  converter: alpaca
  size: 500
"""
#: LLaMA-Factory's data/v1_dpo_demo.yaml and data/v1_multimodal_demo.yaml as written there
V1_DPO_DEMO = """\
dpo_zh_demo:
  path: HuggingFaceH4/orca_dpo_pairs
  split: train_prefs
  converter: pair
"""
V1_MULTIMODAL_DEMO = """\
multimodal_demo:
  path: data/v1_multimodal_demo.jsonl
  source: local
"""
SFT_FILES = "data/identity.json,data/alpaca_en_demo.json"
#: v1's defaults written out where tunekit's differ (llamafactory_v1.V1_DEFAULTS), for a config that sets none of them
DEFAULTS = {
    "learning_rate": 1e-4,
    "per_device_train_batch_size": 1,
    "finetuning_type": "full",
    "template": "jinja",
    "lr_scheduler_type": "constant",
    "weight_decay": 0.01,
    "logging_steps": 1,
    "save_strategy": "no",
    "max_new_tokens": 128,
}
FSDP2_FULL = {  # train_full_fsdp2.yaml and the batching examples' common part
    **DEFAULTS,
    "model_name_or_path": "Qwen/Qwen3-0.6B",
    "fsdp": "full_shard",
    "dataset": SFT_FILES,
    "output_dir": "outputs/test_fsdp2",
    "cutoff_len": 2048,
    "max_steps": 10,
    "infer_backend": "huggingface",
}
LORA_SFT = {
    **DEFAULTS,
    "model_name_or_path": "Qwen/Qwen3-4B",
    "finetuning_type": "lora",
    "lora_rank": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.05,
    "lora_target": "all",
    "fsdp": "full_shard",
    "dataset": SFT_FILES,
    "output_dir": "./outputs/test_lora",
    "cutoff_len": 2048,
    "max_steps": 10,
    "infer_backend": "huggingface",
}
EXPECTED = {
    "examples/v1/train_batching_strategy/train_full_fsdp2_batching_normal.yaml": {
        **FSDP2_FULL,
        "per_device_train_batch_size": 2,
        "batching_strategy": "normal",
    },
    "examples/v1/train_batching_strategy/train_full_fsdp2_dynamic_batching.yaml": {
        **FSDP2_FULL,
        "per_device_train_batch_size": 2,
        "batching_strategy": "dynamic_batching",
        "max_tokens_per_batch": 4096,  # tunekit's reading of the strategy: cutoff_len x micro-batch
    },
    "examples/v1/train_batching_strategy/train_full_fsdp2_dynamic_padding_free.yaml": {
        **FSDP2_FULL,
        "per_device_train_batch_size": 4,
        "batching_strategy": "dynamic_padding_free",
        "padding_free": True,
        "max_tokens_per_batch": 8192,
        "flash_attn": "fa2",
    },
    "examples/v1/train_batching_strategy/train_full_fsdp2_padding_free.yaml": {
        **FSDP2_FULL,
        "per_device_train_batch_size": 4,
        "batching_strategy": "padding_free",
        "padding_free": True,
        "flash_attn": "fa2",
    },
    "examples/v1/train_full/train_full_ulysses_cp.yaml": {  # no sample_backend in the file
        **{k: v for k, v in FSDP2_FULL.items() if k != "infer_backend"},
        "trust_remote_code": True,
        "flash_attn": "fa2",
        "cp_size": 2,
        "cp_mode": "ulysses",
        "output_dir": "outputs/test_ulysses_cp",
        "bf16": False,
    },
    "examples/v1/train_freeze/train_freeze_sft.yaml": {
        **DEFAULTS,
        "model_name_or_path": "Qwen/Qwen3-4B",
        "finetuning_type": "freeze",
        "freeze_trainable_layers": 2,
        "freeze_trainable_modules": "all",
        "fsdp": "full_shard",
        "dataset": SFT_FILES,
        "output_dir": "./outputs/test_freeze",
        "cutoff_len": 2048,
        "learning_rate": 2e-5,
        "max_steps": 10,
        "infer_backend": "huggingface",
    },
    "examples/v1/train_full/train_full_deepspeed.yaml": {
        **DEFAULTS,
        "model_name_or_path": "Qwen/Qwen3-0.6B",
        "deepspeed": "examples/deepspeed/ds_z3_config.json",
        "dataset": SFT_FILES,
        "output_dir": "outputs/Qwen3-0.6B-deepspeed",
        "cutoff_len": 2048,
        "max_steps": 10,
    },
    "examples/v1/train_full/train_full_fsdp2.yaml": FSDP2_FULL,
    "examples/v1/train_full/train_full_liger_kernel.yaml": {**FSDP2_FULL, "enable_liger_kernel": True},
    "examples/v1/train_full/train_full_muon.yaml": {
        **{k: v for k, v in FSDP2_FULL.items() if k != "weight_decay"},
        "use_muon": True,
        "weight_decay": 0.1,
        "adam_beta1": 0.9,
        "adam_beta2": 0.95,
        "adam_epsilon": 1e-8,
        "output_dir": "outputs/test_muon",
        "learning_rate": 1e-5,
    },
    "examples/v1/train_full/train_multimodal.yaml": {
        **FSDP2_FULL,
        "model_name_or_path": "Qwen/Qwen3.5-0.8B",
        "dataset": "data/v1_multimodal_demo.jsonl",
        "output_dir": "outputs/test_multimodal",
        "max_steps": 5,
    },
    "examples/v1/train_lora/export_lora.yaml": {
        **DEFAULTS,
        "model_name_or_path": "Qwen/Qwen3-4B",
        "finetuning_type": "lora",
        "lora_alpha": 16,
        "lora_dropout": 0.05,
        "adapter_name_or_path": "./outputs/test_lora",
        "export_dir": "./merge_lora_model",
        "export_size": 5,
        "infer_dtype": "auto",
    },
    "examples/v1/train_lora/train_lora_sft.yaml": LORA_SFT,
    "examples/v1/train_lora/train_lora_sft_rank0.yaml": {**LORA_SFT, "low_cpu_mem_usage": True, "bf16": True},
    "examples/v1/train_qlora/quantization.yaml": {
        **LORA_SFT,
        "model_name_or_path": "Qwen/Qwen3-0.6B",
        "quantization_method": "bnb",
        "quantization_bit": 4,
        "output_dir": "outputs/test_quantization",
    },
}
REFUSED = {
    "examples/v1/train_full/train_full_qwen3_moe_fsdpturbo_ep_fsdp.yaml": (
        "LLaMA-Factory v1 `kernel_config.name: flash-linear-attention` (in {path}): flash-linear-attention's kernels "
        "for linear-attention layers (Qwen3.5 / Qwen3-Next) are not in tunekit: remove it.\n"
        "LLaMA-Factory v1 `dist_config.name: fsdpturbo` (in {path}): FSDPTurbo expert parallelism (ep_size 16: each "
        "process holds a share of the experts) is not in tunekit; use dist_config name fsdp2 (FSDP2 shards the "
        "experts with the other weights) or deepspeed."
    ),
    "examples/v1/train_lora/train_lora_dpo.yaml": (
        "LLaMA-Factory v1 dataset list `train_dataset: data/v1_dpo_demo.yaml`, entry 'dpo_zh_demo' (in {path}): "
        "source hf_hub (HuggingFaceH4/orca_dpo_pairs) is a hub dataset; tunekit reads hub datasets registered in "
        "dataset_info.json (hf_hub_url): register it and give dataset=NAME on the command line, or download it."
    ),
}


@pytest.fixture
def lf_root(tmp_path, monkeypatch):
    """A LLaMA-Factory checkout's layout as the current folder (v1 reads every path from it): data/ with the demo
    files (LLaMA-Factory's, from ../shared), the dataset lists, and each example config at its own path. The sft list
    is LLaMA-Factory's without `size: 500`, so the examples' options are those of their other keys (size:
    test_dataset_size_read)."""
    if not (REFERENCE_DATA / "identity.json").is_file():
        pytest.skip(f"reference data not found at {REFERENCE_DATA}")
    for var in ("WORLD_SIZE", "NPROC_PER_NODE", "NNODES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    for name in ("identity.json", "alpaca_en_demo.json"):
        (data / name).symlink_to(REFERENCE_DATA / name)
    (data / "v1_sft_demo.yaml").write_text(V1_SFT_DEMO.replace("  size: 500\n", ""), encoding="utf-8")
    (data / "v1_dpo_demo.yaml").write_text(V1_DPO_DEMO, encoding="utf-8")
    (data / "v1_multimodal_demo.yaml").write_text(V1_MULTIMODAL_DEMO, encoding="utf-8")
    record = {"messages": [{"role": "user", "content": [{"type": "text", "value": "hi"}], "loss_weight": 0.0}]}
    (data / "v1_multimodal_demo.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    (tmp_path / "examples" / "deepspeed").mkdir(parents=True)
    (tmp_path / "examples" / "deepspeed" / "ds_z3_config.json").write_text(
        json.dumps({"zero_optimization": {"stage": 3}}), encoding="utf-8"
    )
    for path, text in EXAMPLES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    return tmp_path


def test_every_example_is_expected_or_refused():
    assert sorted([*EXPECTED, *REFUSED]) == sorted(EXAMPLES)  # all 17, each once


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_example_maps_to_expected_options(lf_root, path):
    cfg = load_config(path)
    expected = EXPECTED[path]
    assert {k: getattr(cfg, k) for k in expected} == expected
    assert cfg.model_fields_set == set(expected)  # nothing else was set


@pytest.mark.parametrize("path", sorted(REFUSED))
def test_example_refused_naming_the_key(lf_root, path):
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == REFUSED[path].format(path=path)


def test_dataset_size_read(lf_root):
    """LLaMA-Factory's own sft list, unchanged: `size: 500` draws 500 of alpaca_en_demo's records (with replacement,
    as v1 draws; tests/config/test_v1_dataset_sampling.py pins the draws)."""
    (lf_root / "data" / "v1_sft_demo.yaml").write_text(V1_SFT_DEMO, encoding="utf-8")
    path = "examples/v1/train_full/train_full_fsdp2.yaml"
    cfg = load_config(path)
    expected = {**EXPECTED[path], "dataset_sampling": {"data/alpaca_en_demo.json": {"size": 500}}}
    assert {k: getattr(cfg, k) for k in expected} == expected
    assert cfg.model_fields_set == set(expected)


def test_unknown_key_refused_naming_key_and_file(lf_root):
    path = lf_root / "v1.yaml"
    path.write_text("model: m\ntrain_dataset: data/v1_sft_demo.yaml\nmicro_batch_sise: 2\ntemplate: qwen\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    marks = "`model`, `train_dataset`"
    assert str(err.value) == (
        f"Unknown LLaMA-Factory v1 option 'micro_batch_sise' (in {path}, read as a v1 config because it has {marks})."
        " Did you mean: micro_batch_size?\n"
        f"Unknown LLaMA-Factory v1 option 'template' (in {path}, read as a v1 config because it has {marks}). A v1 "
        "config takes v1 option names only: give tunekit's template on the command line (template=VALUE)."
    )


def test_unknown_plugin_key_refused(lf_root):
    path = lf_root / "v1.yaml"
    path.write_text("model: m\npeft_config:\n  name: lora\n  rank: 8\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"Unknown key `peft_config.rank` (in {path}): LLaMA-Factory v1's lora takes name, r, lora_alpha, "
        "lora_dropout, target_modules, use_rslora, use_dora, modules_to_save, adapter_name_or_path, export_dir, "
        "export_size, export_hub_model_id, infer_dtype, export_legacy_format."
    )


def test_global_batch_size_divided_by_processes_and_micro_batch(lf_root, monkeypatch):
    path = lf_root / "v1.yaml"
    path.write_text("model: m\nmicro_batch_size: 2\nglobal_batch_size: 16\n")
    assert load_config(path).gradient_accumulation_steps == 8  # one process
    monkeypatch.setenv("NPROC_PER_NODE", "2")
    assert load_config(path).gradient_accumulation_steps == 4  # before torchrun starts the processes
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert load_config(path).gradient_accumulation_steps == 2  # in each training process
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"LLaMA-Factory v1 `global_batch_size: 16` (in {path}): it must be a multiple of micro_batch_size 2 x 3 "
        "data-parallel process(es) (WORLD_SIZE) = 6, as in v1."
    )


def test_context_parallel_groups_count_once_in_the_data_parallel_numbers(lf_root, monkeypatch):
    """v1's ``cp_size``: a sequence group of cp_size processes trains one micro-batch, so global_batch_size and
    dp_size count the groups (world / cp_size), as v1's device mesh does."""
    path = lf_root / "v1.yaml"
    path.write_text("model: m\ncp_size: 2\ncp_mode: ulysses\ndp_size: 2\nmicro_batch_size: 2\nglobal_batch_size: 16\n")
    monkeypatch.setenv("WORLD_SIZE", "4")
    cfg = load_config(path)
    assert (cfg.cp_size, cfg.cp_mode, cfg.gradient_accumulation_steps) == (2, "ulysses", 4)  # 16 / (2 x 4 / 2)
    path.write_text("model: m\ncp_size: 2\ndp_size: 4\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"LLaMA-Factory v1 `dp_size: 4` (in {path}): tunekit runs one data-parallel group of all 4 processes "
        "(WORLD_SIZE), each sequence group of cp_size 2 processes counting once, sharded over all of them: remove "
        "dp_size."
    )
    path.write_text("model: m\ncp_size: two\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"LLaMA-Factory v1 `cp_size: two` (in {path}): expected a whole number."


def test_command_line_v1_keys_read_with_the_file_and_tunekit_options_after(lf_root):
    cfg = load_config("examples/v1/train_full/train_full_fsdp2.yaml", ["micro_batch_size=4", "stage=sft", "seed=7"])
    assert (cfg.per_device_train_batch_size, cfg.stage, cfg.seed) == (4, "sft", 7)


def test_plain_config_is_not_read_as_v1(lf_root):
    path = lf_root / "v0.yaml"
    path.write_text("model_name_or_path: m\nlearning_rate: 1.0e-3\n")
    cfg = load_config(path)
    assert (cfg.learning_rate, cfg.finetuning_type, cfg.template) == (1e-3, "lora", None)  # no v1 defaults


def test_print_config_shows_the_mapping(lf_root, capsys):
    from tunekit.cli.train_cmd import main

    assert main(["examples/v1/train_lora/train_lora_sft.yaml", "--print-config"]) == 0
    shown = capsys.readouterr().out
    options = yaml.safe_load(shown)
    assert options == LORA_SFT
    assert "# from LLaMA-Factory v1 `peft_config.r: 16`\nlora_rank: 16\n" in shown
    assert "# from LLaMA-Factory v1 (peft_config without lora_alpha: v1's default 16)" not in shown
    assert "# from LLaMA-Factory v1 `peft_config.lora_alpha: 32`\nlora_alpha: 32\n" in shown
    assert (
        "# read from LLaMA-Factory v1 config examples/v1/train_lora/train_lora_sft.yaml; needing no tunekit option: "
        "model_class: llm (a causal language model, as tunekit trains); kernel_config.name: auto (v1 applies Ascend "
        "NPU kernels only: none on GPUs and CPUs)\n# from LLaMA-Factory v1 `model: Qwen/Qwen3-4B`\n"
        "model_name_or_path: Qwen/Qwen3-4B\n"
    ) in shown


def test_v1_config_trains_end_to_end(lf_root, tiny_qwen):
    """`tunekit train v1.yaml`: a v1 LoRA config as the examples write it (FSDP2, kernel auto, a dataset list with
    size / weight) trains 2 steps of global batch 4 (one CPU process); the adapter reloads with plain peft,
    tunekit_config.yaml records the mapping and preprocessing_report.json the draw."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    (lf_root / "data" / "v1_identity.yaml").write_text(
        "identity:\n  path: data/identity.json\n  source: local\n  converter: alpaca\n  size: 6\n  weight: 2\n",
        encoding="utf-8",
    )
    path = lf_root / "v1_lora.yaml"
    path.write_text(
        f"model: {tiny_qwen}\nmodel_class: llm\npeft_config:\n  name: lora\n  r: 4\n  target_modules: all\n"
        "kernel_config:\n  name: auto\ndist_config:\n  name: fsdp2\n  dcp_path: null\n"
        "train_dataset: data/v1_identity.yaml\noutput_dir: out\nmicro_batch_size: 2\nglobal_batch_size: 4\n"
        "cutoff_len: 64\nlearning_rate: 1.0e-3\nmax_steps: 2\nsample_backend: hf\n",
        encoding="utf-8",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tunekit.cli.main", "train", path.name, "report_to=none", "disable_tqdm=true"],
        cwd=lf_root,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = lf_root / "out"
    assert [(row["step"], row["total_steps"]) for row in train_rows(out)] == [(1, 2), (2, 2)]  # logging_steps 1
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"], adapter["lora_dropout"]) == (4, 16, 0.05)  # v1's LoRA defaults
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_qwen), out)
    lora_a = [p for n, p in model.named_parameters() if "lora_A" in n]
    assert lora_a and all(p.shape[0] == 4 for p in lora_a)
    written = (out / "tunekit_config.yaml").read_text()
    options = yaml.safe_load(written)
    assert (options["per_device_train_batch_size"], options["gradient_accumulation_steps"]) == (2, 2)
    assert (options["template"], options["lr_scheduler_type"], options["finetuning_type"], options["fsdp"]) == (
        "jinja",
        "constant",
        "lora",
        "full_shard",
    )
    assert (
        "# from LLaMA-Factory v1 `global_batch_size: 4` / (micro_batch_size 2 x 1 data-parallel process(es) "
        "(WORLD_SIZE))\ngradient_accumulation_steps: 2\n"  # read in the training process torchrun started
    ) in written
    assert (
        "# from LLaMA-Factory v1 `dist_config: {name: fsdp2, dcp_path: null}` (FSDP2)\nfsdp: full_shard\n" in written
    )
    assert "# read from LLaMA-Factory v1 config v1_lora.yaml; needing no tunekit option: model_class: llm" in written
    assert (
        "# from LLaMA-Factory v1 `train_dataset: data/v1_identity.yaml` (data/identity.json: size 6, weight 2)\n"
        "dataset_sampling:\n  data/identity.json:\n    size: 6\n    weight: 2\n"
    ) in written
    (report,) = json.loads((out / "preprocessing_report.json").read_text())
    records = len(json.loads((lf_root / "data" / "identity.json").read_text()))
    assert report["records"] == 12  # int(6 x 2)
    assert report["sampled"].startswith(
        f"dataset data/identity.json: drew 12 samples from {records} records at random with replacement "
        "(dataset_sampling size 6, weight 2): "
    )
