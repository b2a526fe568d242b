"""Training options that change data flow: mixing, max_samples, workers, length grouping, continuing an adapter."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import alpaca_records, base_config, write_dataset
from tunekit.config import load_config
from tunekit.flow import run_train  # the one train flow (auto_fit, gradient_checkpointing: auto decided)


def test_two_datasets_max_samples_workers_and_grouping(tiny_qwen, tmp_path):
    data = tmp_path / "data"
    write_dataset(data, "a", alpaca_records(30, seed=1))
    write_dataset(
        data,
        "b",
        [
            {"conversations": [{"from": "human", "value": f"Echo {i}"}, {"from": "gpt", "value": f"{i}"}]}
            for i in range(30)
        ],
        {"formatting": "sharegpt"},
    )
    out = tmp_path / "out"
    cfg = load_config(
        None,
        base_config(
            tiny_qwen,
            data,
            out,
            dataset="a,b",
            max_samples=20,
            preprocessing_num_workers=2,
            preprocessing_batch_size=5,
            group_by_length=True,
            max_steps=2,
        ),
    )
    run_train(cfg)
    report = json.loads((out / "preprocessing_report.json").read_text())
    assert [(r["name"], r["records"], r["kept"]) for r in report] == [("a", 20, 20), ("b", 20, 20)]
    assert json.loads((out / "all_results.json").read_text())["total_steps"] == 2


def test_continue_training_an_existing_adapter(tiny_qwen, tmp_path):
    from safetensors.torch import load_file

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8))
    first, second = tmp_path / "first", tmp_path / "second"
    run_train(load_config(None, base_config(tiny_qwen, data, first, max_steps=2, learning_rate=1e-2)))
    run_train(
        load_config(
            None,
            base_config(tiny_qwen, data, second, max_steps=2, learning_rate=1e-2, adapter_name_or_path=str(first)),
        )
    )
    a, b = load_file(first / "adapter_model.safetensors"), load_file(second / "adapter_model.safetensors")
    assert a.keys() == b.keys() and any((a[k] - b[k]).abs().max() > 0 for k in a)
    cfg = json.loads((second / "adapter_config.json").read_text())
    assert cfg["r"] == 8


def test_pissa_initialisation_builds(tiny_qwen):
    from tunekit.model.loader import load_model, load_tokenizer

    cfg = load_config(
        None, {"model_name_or_path": str(tiny_qwen), "template": "qwen", "pissa_init": True, "pissa_iter": 4}
    )
    model = load_model(cfg, load_tokenizer(cfg))
    b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert b and all(p.abs().sum() > 0 for p in b)  # PiSSA starts from singular vectors, plain LoRA from B = 0


def test_env_prints_versions():
    proc = subprocess.run([sys.executable, "-m", "tunekit.cli.main", "env"], capture_output=True, text=True)
    assert proc.returncode == 0
    for name in ("python", "torch", "transformers", "peft", "trl", "datasets", "accelerate", "deepspeed", "cuda"):
        assert any(line.split()[0] == name for line in proc.stdout.splitlines() if line.strip()), name
