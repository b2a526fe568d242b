"""Refusals that need only the config and the machine end ``tunekit train`` before any process
starts (train/preflight.py).

Each case runs a real ``tunekit train`` as torchrun would be asked to (``FORCE_TORCHRUN=1 NPROC_PER_NODE=2``) and
checks: one ``error:`` line, exit 2, and that the parent never launched torchrun (its "starting 2 processes" line is
absent and no rank wrote anything). The time bound is loose (tens of seconds on a loaded 2-core host; the launch alone
took minutes before): the assertion that matters is that no rank started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, alpaca_records, base_config, write_dataset
from tunekit.config import load_config
from tunekit.errors import ConfigError
from tunekit.train.machine import Machine, check_machine
from tunekit.train.preflight import preflight

LAUNCH_LINE = "with torchrun"  # launcher.relaunch: "tunekit: starting 2 processes with torchrun (rendezvous ...)"
AUTO_Z3 = {  # LLaMA-Factory's examples/deepspeed/ds_z3_config.json, the tutorial's recipe
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "zero_allow_untested_optimizer": True,
    "fp16": {
        "enabled": "auto",
        "loss_scale": 0,
        "loss_scale_window": 1000,
        "initial_scale_power": 16,
        "hysteresis": 2,
        "min_loss_scale": 1,
    },
    "bf16": {"enabled": "auto"},
    "zero_optimization": {
        "stage": 3,
        "overlap_comm": False,
        "contiguous_gradients": True,
        "stage3_gather_16bit_weights_on_model_save": True,
    },
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("preflight_data")
    write_dataset(folder, "toy", alpaca_records(8, seed=1))
    return folder


def _env(**extra) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT", "FORCE_TORCHRUN")
    }
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT / "src"), **extra)
    return env


def _train_refused(cfg: dict, tmp_path: Path) -> str:
    """Run ``tunekit train`` on ``cfg`` as a 2-process torchrun job; the one error line (exit 2, nothing launched)."""
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = _env(FORCE_TORCHRUN="1", NPROC_PER_NODE="2")
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tunekit.cli.main", "train", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert LAUNCH_LINE not in proc.stderr, proc.stderr[-3000:]  # refused in the parent: torchrun never started
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    assert not (Path(cfg["output_dir"]) / "ds_config.json").exists()  # no rank got as far as TrainingArguments
    assert elapsed < 60, elapsed  # loose: the refusal needs no launch, no torch, no model (minutes before)
    return lines[0]


def _ds_file(tmp_path: Path, **changes) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**AUTO_Z3, **changes}))
    return str(path)


def test_fp16_with_a_deepspeed_file_on_cpu_is_refused_before_launch(tiny_qwen, data_dir, tmp_path):
    cfg = base_config(tiny_qwen, data_dir, tmp_path / "out", fp16=True, deepspeed=_ds_file(tmp_path))
    assert _train_refused(cfg, tmp_path) == (
        "error: fp16 mixed precision needs a GPU and none is visible; on CPU use fp32 (the default) or bf16."
    )


def test_fp8_without_a_capable_gpu_is_refused_before_launch(tiny_qwen, data_dir, tmp_path):
    cfg = base_config(tiny_qwen, data_dir, tmp_path / "out", fp8=True)
    assert _train_refused(cfg, tmp_path).startswith("error: fp8 training needs an NVIDIA GPU with FP8 support")


def test_unknown_dataset_is_refused_before_launch(tiny_qwen, data_dir, tmp_path):
    cfg = base_config(tiny_qwen, data_dir, tmp_path / "out", dataset="toy,tyo")
    line = _train_refused(cfg, tmp_path)
    assert line.startswith(
        f"error: Dataset 'tyo' is not in {data_dir / 'dataset_info.json'} and is not a file. Did you mean: toy?"
    ), line


def test_deepspeed_file_contradicting_the_options_lists_every_conflict(tiny_qwen, data_dir, tmp_path):
    ds = _ds_file(tmp_path, fp16={"enabled": True}, train_micro_batch_size_per_gpu=2, gradient_clipping=0.5)
    cfg = base_config(tiny_qwen, data_dir, tmp_path / "out", deepspeed=ds, per_device_train_batch_size=1)
    assert _train_refused(cfg, tmp_path) == (
        f"error: deepspeed: {ds} contradicts tunekit's options in 3 place(s): (1) train_micro_batch_size_per_gpu is 2 "
        "but "
        "per_device_train_batch_size is 1; (2) gradient_clipping is 0.5 but max_grad_norm is 1.0; (3) fp16.enabled is "
        'true but fp16 is false. Set each of these fields to "auto" (recommended: tunekit\'s options fill them) or '
        "make "
        "both agree."
    )


# ------------------------------------------------------------------ the machine, described (no GPU needed)
def _cfg(tmp_path, **values):
    return load_config(None, {"model_name_or_path": "m", "output_dir": str(tmp_path / "o"), **values})


def test_bf16_block_on_a_gpu_without_bf16_is_refused(tmp_path):
    v100 = Machine(gpus=((7, 0),), names=("Tesla V100",))
    ds = _ds_file(tmp_path, bf16={"enabled": True})
    with pytest.raises(
        ConfigError,
        match=r"^bf16 needs a GPU of compute capability 8\.0 or newer \(Ampere or newer\); "
        r"Tesla V100 is 7\.0: use fp16: true instead",
    ):
        check_machine(_cfg(tmp_path, deepspeed=ds), v100)
    with pytest.raises(ConfigError, match="Tesla V100 is 7.0"):
        check_machine(_cfg(tmp_path, bf16=True), v100)
    check_machine(_cfg(tmp_path, bf16=True), Machine(gpus=((8, 0),)))  # A100
    check_machine(_cfg(tmp_path, bf16=True), Machine())  # the CPU computes in bf16 (slowly)
    check_machine(_cfg(tmp_path, fp16=True), Machine(other_accelerator=True))  # MPS / XPU
    with pytest.raises(
        ConfigError, match=r"fp8 training needs a GPU of compute capability 8\.9 or newer .* GPU 0 is 8\.0"
    ):
        check_machine(_cfg(tmp_path, fp8=True), Machine(gpus=((8, 0),)))
    check_machine(_cfg(tmp_path, fp8=True), Machine(gpus=((9, 0),)))


def test_preflight_passes_a_good_config_without_importing_torch(tiny_qwen, data_dir, tmp_path):
    cfg = base_config(tiny_qwen, data_dir, tmp_path / "out", deepspeed=_ds_file(tmp_path), bf16=True)
    code = (
        "import sys, yaml\nfrom tunekit.config import load_config\nfrom tunekit.train.preflight import preflight\n"
        f"preflight(load_config(None, yaml.safe_load(open({str(tmp_path / 'c.yaml')!r}))))\n"
        "print('torch' in sys.modules)\n"
    )
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    env = _env()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-3000:]
    preflight(load_config(None, cfg), Machine())  # in-process too


def test_flash_attention_2_without_its_package_is_refused(tiny_qwen, data_dir, tmp_path):
    import importlib.util

    from tunekit.errors import EnvironmentProblem

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed here")
    cfg = load_config(None, base_config(tiny_qwen, data_dir, tmp_path / "out", flash_attn="fa2"))
    with pytest.raises(EnvironmentProblem, match=r"^flash_attn: fa2 needs the flash-attn package"):
        preflight(cfg, Machine())


# ------------------------------------------------------------------ quantization libraries (model/loader.py's checks)
def test_a_missing_quantization_library_is_refused_before_launch(tiny_qwen, data_dir, tmp_path):
    import importlib.util

    if importlib.util.find_spec("hqq") is not None:
        pytest.skip("hqq is installed here")
    cfg = base_config(
        tiny_qwen, data_dir, tmp_path / "out", finetuning_type="lora", quantization_bit=4, quantization_method="hqq"
    )
    assert _train_refused(cfg, tmp_path) == "error: quantization_method: hqq needs the hqq package (pip install hqq)."


def test_quantization_decisions_are_the_loaders_before_any_process(tiny_qwen, data_dir, tmp_path):
    """eetq needs its package and a GPU; bitsandbytes, where installed, runs on CPU (the loader's decision, unchanged);
    a model folder saved as GPTQ needs gptqmodel and optimum, and is refused with quantization_bit on top."""
    import importlib.util
    import shutil

    from tunekit.errors import EnvironmentProblem

    def cfg(model=tiny_qwen, **values):
        return load_config(None, base_config(model, data_dir, tmp_path / "out", finetuning_type="lora", **values))

    with pytest.raises(
        EnvironmentProblem, match=r"^quantization_method: eetq needs the eetq package and an NVIDIA GPU"
    ):
        preflight(cfg(quantization_bit=8, quantization_method="eetq"), Machine())
    if importlib.util.find_spec("bitsandbytes") is not None:
        preflight(cfg(quantization_bit=4), Machine())
    gptq = tmp_path / "gptq"
    shutil.copytree(tiny_qwen, gptq)
    config = json.loads((gptq / "config.json").read_text())
    (gptq / "config.json").write_text(
        json.dumps({**config, "quantization_config": {"quant_method": "gptq", "bits": 4}})
    )
    with pytest.raises(ConfigError, match=rf"^{gptq} is already quantized \(gptq\): remove quantization_bit"):
        preflight(cfg(gptq, quantization_bit=4), Machine())
    if importlib.util.find_spec("gptqmodel") is None:
        with pytest.raises(
            EnvironmentProblem,
            match=rf"^{gptq} is a pre-quantized GPTQ model \(quantization_config in "
            rf"config\.json\); loading it needs gptqmodel and optimum",
        ):
            preflight(cfg(gptq), Machine())
