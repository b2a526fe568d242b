"""``tunekit train`` as a user runs it (a subprocess, a YAML file): no library notices that are not the user's
business on its output (train/quiet.py), and the ``tunekit_config.yaml`` it writes lists the options set for the
run first, grouped as docs/options.md groups them, and reloads to the same Config (config/loader.py)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import yaml

from tests.helpers import alpaca_records, base_config, write_dataset

# The notices train/quiet.py silences, as the libraries word them (a line starting with one fails the test).
NOTICES = (
    "Setting accelerator to CPU",
    "Failed to load CPU gemm_4bit_forward",
    "is_gradient_checkpointing",
    "FutureWarning",
    "DeprecationWarning",
)


@pytest.fixture(scope="module")
def cli_run(tiny_qwen, tmp_path_factory):
    root = tmp_path_factory.mktemp("quiet")
    write_dataset(root / "data", "toy", alpaca_records(8))
    options = base_config(
        tiny_qwen, root / "data", root / "out", max_steps=1, finetuning_type="lora", lora_target="all"
    )
    config = root / "train.yaml"
    config.write_text(yaml.safe_dump(options, sort_keys=False), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONWARNINGS")}
    proc = subprocess.run(
        [sys.executable, "-m", "tunekit.cli.main", "train", str(config)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, options, root / "out"


def test_no_library_notices_on_a_plain_run(cli_run):
    proc, _, _ = cli_run
    lines = (proc.stdout + proc.stderr).splitlines()
    assert [line for line in lines if any(n in line for n in NOTICES)] == []
    assert "done: " in proc.stdout  # the run's own messages still show


def test_the_filters_drop_only_their_message():
    """Each filter sits on the library's own logger and drops only the notice's message, only when it
    does not concern the run."""
    from tunekit.config import load_config
    from tunekit.train.quiet import (
        BNB_CPU_LOGGER,
        BNB_KERNELS_NOTICE,
        DEEPSPEED_CPU_NOTICE,
        DEEPSPEED_LOGGER,
        DropMessage,
        quiet_library_notices,
    )

    for name in (DEEPSPEED_LOGGER, BNB_CPU_LOGGER):
        logging.getLogger(name).filters[:] = [
            f for f in logging.getLogger(name).filters if not isinstance(f, DropMessage)
        ]

    def passes(logger: str, msg: str) -> bool:
        return logging.getLogger(logger).filter(
            logging.LogRecord(logger, logging.WARNING, __file__, 1, msg, None, None)
        )

    bnb = BNB_KERNELS_NOTICE + ": %s. Please make sure you already `pip install kernels` and the kernels >= 0.11.1"
    ds = "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it."
    assert ds.startswith(DEEPSPEED_CPU_NOTICE)
    quantized = load_config(
        None,
        {
            "model_name_or_path": "m",
            "output_dir": "o",
            "quantization_bit": 4,
            "finetuning_type": "lora",
            "deepspeed": "z2",
        },
    )
    quiet_library_notices(quantized)
    assert passes(BNB_CPU_LOGGER, bnb) and passes(DEEPSPEED_LOGGER, ds)  # both concern this run: kept
    quiet_library_notices(load_config(None, {"model_name_or_path": "m", "output_dir": "o"}))
    quiet_library_notices(
        load_config(None, {"model_name_or_path": "m", "output_dir": "o"})
    )  # a second run adds no second filter
    assert (passes(BNB_CPU_LOGGER, bnb), passes(DEEPSPEED_LOGGER, ds)) == (False, False)
    assert passes(DEEPSPEED_LOGGER, "Setting zero stage 3") and passes(BNB_CPU_LOGGER, "Register cpu kernels")
    assert len(logging.getLogger(DEEPSPEED_LOGGER).filters) == 1


def test_written_config_lists_the_set_options_first_by_group(cli_run):
    _, options, out = cli_run
    text = (out / "tunekit_config.yaml").read_text(encoding="utf-8")
    head = text.split("\n# Model: defaults and resolved values\n")[0]
    assert head == (
        "# Model: set for this run\n"
        f"model_name_or_path: {options['model_name_or_path']}\n"
        "gradient_checkpointing: false\n"  # decided by gradient_checkpointing: auto (printed and saved)
        "\n# Data: set for this run\n"
        "template: qwen\ndataset: toy\n"
        f"dataset_dir: {options['dataset_dir']}\n"
        "cutoff_len: 64\n"
        "\n# Stage and method: set for this run\n"
        "finetuning_type: lora\nlora_target: all\n"
        "\n# Hyper-parameters: set for this run\n"
        "learning_rate: 0.001\nmax_steps: 1\nper_device_train_batch_size: 4\ngradient_accumulation_steps: 1\nseed: 0\n"
        f"output_dir: {out}\nsave_strategy: 'no'\n"
        "\n# Logging and output: set for this run\n"
        "logging_steps: 1.0\nreport_to: none\ndisable_tqdm: true\n"
    )
    comments = [line for line in text.splitlines() if line.startswith("# ")]
    headings = [line for line in comments if line.endswith((": set for this run", ": defaults and resolved values"))]
    notes = [line for line in comments if line not in headings]  # what ran where an option did not say (see below)
    assert notes == [
        "# precision: float32 throughout (this CPU has no native bf16 (no AVX512_BF16 or AMX), where bf16 is "
        "emulated and several times slower; bf16: true asks for it)"
    ]  # the suite describes such a CPU
    assert headings[:5] == [
        "# Model: set for this run",
        "# Data: set for this run",
        "# Stage and method: set for this run",
        "# Hyper-parameters: set for this run",
        "# Logging and output: set for this run",
    ]
    assert all(h.endswith(": defaults and resolved values") for h in headings[5:]) and len(headings) > 8


def test_written_config_reloads_to_the_same_config(cli_run):
    from tunekit.config import config_to_dict, load_config
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.flow import decide
    from tunekit.model.loader import load_tokenizer
    from tunekit.plan.decide import decide_run
    from tunekit.train.machine import run_machine

    _, options, out = cli_run
    written = load_config(str(out / "tunekit_config.yaml"))
    cfg = decide(load_config(None, options))
    data = prepare_datasets(cfg, load_tokenizer(cfg), cfg.stage)
    ran = decide_run(cfg, run_machine(cfg), max(data.train["length"])).cfg  # gradient_checkpointing decided
    assert config_to_dict(written) == config_to_dict(ran)
    assert written.gradient_checkpointing is False
