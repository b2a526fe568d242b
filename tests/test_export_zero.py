"""A real DeepSpeed ZeRO-3 checkpoint (tunekit train under torchrun, CPU/gloo) -> zero-to-fp32 / export."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from helpers import alpaca_records, base_config, write_dataset

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def test_zero3_checkpoint_consolidates_to_the_trained_weights(tiny_qwen, tmp_path):
    from safetensors.torch import load_file

    from tunekit.cli.main import main
    from tunekit.export.zero import zero_tag

    write_dataset(tmp_path / "data", "toy", alpaca_records(8))
    out = tmp_path / "run"
    cfg = base_config(tiny_qwen, tmp_path / "data", out, finetuning_type="full", deepspeed="z3", max_steps=2,
                      per_device_train_batch_size=1, save_strategy="steps", save_steps=2)
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    env.update(CUDA_VISIBLE_DEVICES="", FORCE_TORCHRUN="1", NPROC_PER_NODE="2")
    proc = subprocess.run([sys.executable, "-m", "tunekit.cli.main", "train", str(tmp_path / "cfg.yaml")], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    checkpoint = out / "checkpoint-2"
    assert zero_tag(checkpoint) == "global_step2"

    assert main(["zero-to-fp32", str(checkpoint), str(tmp_path / "fp32")]) == 0
    consolidated, final = load_file(tmp_path / "fp32" / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(consolidated) == set(final)  # tied lm_head saved once, like transformers does
    assert max((consolidated[k] - final[k]).abs().max().item() for k in final) == 0.0

    export = tmp_path / "export"  # export detects the ZeRO folder by itself and verifies the result
    assert main(["export", f"model_name_or_path={checkpoint}", "template=qwen", f"export_dir={export}"]) == 0
    assert (export / "model.safetensors.index.json").is_file() and (export / "tunekit_export.json").is_file()
