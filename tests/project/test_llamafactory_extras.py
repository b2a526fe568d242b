"""LLaMA-Factory's own example configs for the optimizers and methods it shows under examples/extras/ (GaLore, APOLLO,
BAdam, Muon, Adam-mini, OFT, DFT, EAFT; hiyouga/LLaMA-Factory, Apache-2.0, copied verbatim with the commit they were
read at) run through tunekit's train flow on a tiny model.

Only what points outside this machine is replaced (``model_name_or_path``, ``output_dir``, and a ``dataset_dir``
holding small ``identity`` and ``alpaca_en_demo`` datasets) plus ``max_steps: 2``: a tiny model and 2 optimizer steps
keep the file fast; every other line (pure_bf16, bf16, layer-wise, accumulation 8, val_size, workers ...) is read and
applied as written. What tunekit cannot run here fails with its message, pinned below (LLaMA Pro's example trains in
fp16, which needs a GPU). ASFT has no example in LLaMA-Factory's extras; tunekit's is
examples/optimizers/asft_full_sft.yaml.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import LLAMAFACTORY_INPUTS, alpaca_records, write_dataset
from tunekit.config import load_config

GALORE = (LLAMAFACTORY_INPUTS / "galore_llama3_full_sft.yaml").read_text(encoding="utf-8")  # @ 3075df1
APOLLO = """\
### model
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: full
use_apollo: true
apollo_layerwise: true  # choices: [true, false], use false for DDP training
apollo_target: all
apollo_rank: 128
apollo_scale: 32.0
apollo_scale_type: channel

### dataset
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 2048
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16

### output
output_dir: saves/llama3-8b/full/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 1  # use 1 for layerwise apollo
learning_rate: 1.0e-5
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
pure_bf16: true
ddp_timeout: 180000000

### eval
val_size: 0.1
per_device_eval_batch_size: 1
eval_strategy: steps
eval_steps: 500
"""

BADAM = """\
### model
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct

### method
stage: sft
do_train: true
finetuning_type: full
use_badam: true
badam_mode: layer
badam_switch_mode: ascending
badam_switch_interval: 50
badam_verbose: 2
# deepspeed: examples/deepspeed/ds_z3_config.json

### dataset
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 1024
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16

### output
output_dir: saves/llama3-8b/full/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-5
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1

### eval
val_size: 0.1
per_device_eval_batch_size: 1
eval_strategy: steps
eval_steps: 500
"""

MUON = """\
### model
model_name_or_path: Qwen/Qwen2-1.5B-Instruct
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: full
use_muon: true

### dataset
dataset: identity,alpaca_en_demo
template: qwen
cutoff_len: 2048
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16
dataloader_num_workers: 4

### output
output_dir: saves/qwen2-1_5b/full/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true
save_only_model: false
report_to: none  # choices: [none, wandb, tensorboard, swanlab, mlflow]

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-5
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000

### eval
# val_size: 0.1
# per_device_eval_batch_size: 1
# eval_strategy: steps
# eval_steps: 500
"""

ADAM_MINI = """\
### model
model_name_or_path: Qwen/Qwen2-1.5B-Instruct

### method
stage: sft
do_train: true
finetuning_type: full
use_adam_mini: true

### dataset
dataset: identity,alpaca_en_demo
template: qwen
cutoff_len: 1024
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16

### output
output_dir: saves/qwen2-1_5b/full/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-5
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000

### eval
val_size: 0.1
per_device_eval_batch_size: 1
eval_strategy: steps
eval_steps: 500
"""

OFT = """\
### model
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: oft
oft_block_size: 32
oft_target: all

### dataset
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 2048
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16
dataloader_num_workers: 4

### output
output_dir: saves/llama3-8b/oft/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true
save_only_model: false
report_to: none  # choices: [none, wandb, tensorboard, swanlab, mlflow]

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000
resume_from_checkpoint: null

### eval
# eval_dataset: alpaca_en_demo
# val_size: 0.1
# per_device_eval_batch_size: 1
# eval_strategy: steps
# eval_steps: 500
"""

LLAMA_PRO = """\
### model
model_name_or_path: models/llama3-8b-instruct-pro

### method
stage: sft
do_train: true
finetuning_type: freeze
freeze_trainable_layers: 8
freeze_trainable_modules: all
use_llama_pro: true

### dataset
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 1024
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16

### output
output_dir: saves/llama3-8b-instruct-pro/freeze/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
fp16: true
ddp_timeout: 180000000

### eval
val_size: 0.1
per_device_eval_batch_size: 1
eval_strategy: steps
eval_steps: 500
"""

DFT = """\
### model
model_name_or_path: Qwen/Qwen2-1.5B-Instruct
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: full
use_dft_loss: true

### dataset
dataset: identity,alpaca_en_demo
template: qwen
cutoff_len: 2048
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16
dataloader_num_workers: 4

### output
output_dir: saves/qwen2-1_5b/full/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true
save_only_model: false
report_to: none  # choices: [none, wandb, tensorboard, swanlab, mlflow]

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-5
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000

### eval
# val_size: 0.1
# per_device_eval_batch_size: 1
# eval_strategy: steps
# eval_steps: 500
"""

EAFT = """\
### model
model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: full
use_eaft_loss: true

### dataset
dataset: identity,alpaca_en_demo
template: qwen
cutoff_len: 2048
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16
dataloader_num_workers: 4

### output
output_dir: qwen2.5-0_5b/full/sft_eaft
logging_steps: 1
save_steps: 500
plot_loss: true
overwrite_output_dir: true
save_only_model: false
report_to: none  # choices: [none, wandb, tensorboard, swanlab, mlflow]


### train
per_device_train_batch_size: 2
gradient_accumulation_steps: 8
learning_rate: 1.0e-5
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000
"""

# name: (text, LLaMA-Factory path @ commit, model fixture)
EXAMPLES = {
    "galore": (GALORE, "galore/llama3_full_sft.yaml @ 3075df1", "llama"),
    "apollo": (APOLLO, "apollo/llama3_full_sft.yaml @ 33d420b", "llama"),
    "badam": (BADAM, "badam/llama3_full_sft.yaml @ 48f0819", "llama"),
    "muon": (MUON, "muon/qwen2_full_sft.yaml @ 1765d0e", "qwen"),
    "adam_mini": (ADAM_MINI, "adam_mini/qwen2_full_sft.yaml @ 1773be0", "qwen"),
    "oft": (OFT, "oft/llama3_oft_sft.yaml @ 20a01d5", "llama"),
    "dft": (DFT, "dft/qwen2_full_sft.yaml @ a1eceaa", "qwen"),
    "eaft": (EAFT, "eaft/qwen25_05b_eaft_full.yaml @ 4c1eb92", "qwen"),
}


@pytest.fixture(scope="module")
def lf_data(tmp_path_factory):
    """LLaMA-Factory's dataset names, as small alpaca files."""
    data = tmp_path_factory.mktemp("lf-data")
    write_dataset(data, "identity", alpaca_records(12, seed=1))
    write_dataset(data, "alpaca_en_demo", alpaca_records(12, seed=2))
    return data


def localised(text: str, model, data, out) -> str:
    """The example with the model, output folder and data on this machine and 2 optimizer
    steps; nothing else changed."""
    text = re.sub(r"^model_name_or_path: .*$", f"model_name_or_path: {model}", text, count=1, flags=re.M)
    text = re.sub(r"^output_dir: .*$", f"output_dir: {out}", text, count=1, flags=re.M)
    text = re.sub(r"^(dataset: .*)$", rf"\1\ndataset_dir: {data}", text, count=1, flags=re.M)
    return text + "max_steps: 2\n"


def _train(text: str, tmp_path):
    from tunekit.flow import run_train

    path = tmp_path / "example.yaml"
    path.write_text(text, encoding="utf-8")
    return run_train(load_config(path), str(path))


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_llamafactory_example_runs(name, tiny_qwen, tiny_llama, lf_data, tmp_path):
    text, source, family = EXAMPLES[name]
    out = tmp_path / "out"
    _train(localised(text, tiny_llama if family == "llama" else tiny_qwen, lf_data, out), tmp_path)
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and state["max_steps"] == 2, source  # both optimizer steps ran
    assert (out / ("adapter_model.safetensors" if name == "oft" else "model.safetensors")).is_file(), source


def test_llama_pro_example_is_refused_on_cpu_with_the_fix(tmp_path, lf_data):
    """LLaMA Pro's example trains in fp16, which needs a GPU: tunekit says so before loading the model. The expanded
    model is real (8 blocks added to an 8-block tiny Llama, as llama_pro.py would for freeze_trainable_layers: 8)."""
    from tunekit.errors import ConfigError
    from tunekit.model.expand import expand_blocks
    from tunekit.tiny.text import build_tiny_model

    base = build_tiny_model(tmp_path / "base", like="llama", num_layers=8, hidden_size=32, num_heads=2, num_kv_heads=1)
    pro = expand_blocks(base, tmp_path / "pro", 8)
    with pytest.raises(
        ConfigError,
        match=r"^fp16 mixed precision needs a GPU and none is visible; on CPU use fp32 \(the "
        r"default\) or bf16\.$",
    ):
        _train(localised(LLAMA_PRO, pro, lf_data, tmp_path / "out"), tmp_path)
    # the same file with bf16 instead of fp16 (what the message says) trains the 8 added blocks only
    out = tmp_path / "bf16"
    _train(localised(LLAMA_PRO.replace("fp16: true", "bf16: true"), pro, lf_data, out), tmp_path)
    assert (out / "model.safetensors").is_file()
