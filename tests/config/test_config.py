"""The config schema: merging, CLI parsing, and the exact text of every kind of config error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT, TUTORIAL_FLAGS
from tunekit.config import Config, load_config, parse_overrides, save_config
from tunekit.errors import ConfigError


def test_tutorial_flags_parse_to_typed_values():
    cfg = load_config(None, TUTORIAL_FLAGS)
    assert cfg.learning_rate == 5e-05 and isinstance(cfg.learning_rate, float)
    assert cfg.bf16 is True and cfg.packing is False and cfg.trust_remote_code is True
    assert cfg.per_device_train_batch_size == 1 and cfg.gradient_accumulation_steps == 8
    assert cfg.val_size == 0.15 and cfg.eval_steps == 100 and cfg.ddp_timeout == 180000000
    assert cfg.trackers == ["swanlab"] and cfg.lora_alpha == 16 and cfg.dataset_names == ["security"]


def test_file_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("learning_rate: 1.0e-4\nlora_rank: 4\ndataset: a, b\n")
    cfg = load_config(path, ["lora_rank=16", "--max_steps", "7"])
    assert (cfg.learning_rate, cfg.lora_rank, cfg.max_steps, cfg.dataset_names) == (1e-4, 16, 7, ["a", "b"])
    assert cfg.resolved_lora_alpha == 32  # default 2 x rank


def test_json_config(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"finetuning_type": "full", "learning_rate": 2e-5}))
    assert load_config(path).finetuning_type == "full"


def test_unknown_key_names_it_and_suggests():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["lora_rnak=4"])
    assert (
        str(err.value) == "Unknown option 'lora_rnak' (on the command line). Did you mean: lora_rank?"
    )  # real typos only (tests/config/test_option_messages.py)


def test_unknown_key_in_file_names_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("learning_rat: 1e-4\n")
    with pytest.raises(
        ConfigError, match=r"Unknown option 'learning_rat' \(in .*c\.yaml\)\. Did you mean: learning_rate"
    ):
        load_config(path)


def test_wrong_type_names_key_value_and_type():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["learning_rate=fast"])
    assert str(err.value).startswith(
        "Option 'learning_rate' (on the command line) got 'fast' (str), expected a number (float)"
    )
    with pytest.raises(
        ConfigError, match=r"Option 'lora_rank' .* got 2\.5 \(float\), expected a whole number \(int\)"
    ):
        load_config(None, ["lora_rank=2.5"])
    with pytest.raises(
        ConfigError,
        match=r"Option 'finetuning_type' .* got 'lorra' .*'lora', 'oft', 'freeze', 'full', 'ptuning' or 'prompt'",
    ):
        load_config(None, ["finetuning_type=lorra"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["bf16=true", "fp16=true"], "bf16 and fp16 are both true: choose one mixed-precision mode"),
        (
            ["finetuning_type=freeze", "lora_rank=4"],
            "lora_rank is a LoRA option but finetuning_type is 'freeze': remove it or set finetuning_type: lora.",
        ),
        (
            ["finetuning_type=lora", "freeze_trainable_layers=3"],
            "freeze_trainable_layers is a freeze option but finetuning_type is 'lora'",
        ),
        (
            ["finetuning_type=full", "quantization_bit=4"],
            "quantization_bit 4 trains a quantized base, which only works with LoRA (QLoRA)",
        ),
        (
            ["eval_strategy=steps"],
            "eval_strategy 'steps' needs evaluation data: set val_size (e.g. 0.1) or eval_dataset",
        ),
        (["val_size=2.5"], "val_size 2.5 is neither a fraction below 1 nor a whole sample count"),
        (
            ["max_steps=0"],
            "max_steps 0 is not a step count: use a positive number of optimizer steps, or -1 (the default)",
        ),
        (["mask_history=true", "train_on_prompt=true"], "mask_history and train_on_prompt contradict each other"),
        (["report_to=tensorbord"], "report_to names unknown tracker(s) tensorbord"),
    ],
)
def test_incompatible_options(args, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, args)
    assert message in str(err.value)


def test_parse_overrides_forms():
    assert parse_overrides(["a=1", "--b", "x", "--c=2.5e-3", "--flag", "--d", "none"]) == {
        "a": 1,
        "b": "x",
        "c": 2.5e-3,
        "flag": True,
        "d": "none",
    }
    with pytest.raises(ConfigError, match="Unexpected argument 'oops'"):
        parse_overrides(["oops"])


def test_none_word_means_null_for_optional_options():
    cfg = load_config(None, ["--eval_dataset", "None", "--report_to", "none"])
    assert cfg.eval_dataset is None and cfg.report_to == "none"


def test_saved_config_reloads_identically(tmp_path):
    cfg = load_config(None, ["lora_rank=4", "dataset=x", "learning_rate=3e-4"])
    path = save_config(cfg, tmp_path)
    assert load_config(path) == cfg


def test_every_option_documented():
    for name, info in Config.model_fields.items():
        assert info.description, name


def _run_cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tunekit.cli.main", *args], capture_output=True, text=True, **kw)


def test_cli_error_is_one_line_without_traceback(tmp_path):
    proc = _run_cli("train", "lora_rnak=4", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: Unknown option 'lora_rnak'") and "Traceback" not in proc.stderr


def test_help_does_not_import_torch():
    code = (
        "import sys; from tunekit.cli.main import main; main(['--help']); main(['train', '--help']); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'help imported torch'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "--lora_rank" in proc.stdout and "LoRA rank r." in proc.stdout


def test_options_reference_is_generated_from_the_schema():
    from tunekit.config.options_doc import render_options_markdown

    doc = ROOT / "docs" / "options.md"
    assert doc.read_text(encoding="utf-8") == render_options_markdown() + "\n", (
        "run: python scripts/gen_options_doc.py"
    )


def test_yaml_no_is_the_choice_no_not_false(tmp_path):
    """YAML 1.1 reads ``no`` as false; LLaMA-Factory users write ``--eval_strategy no`` / ``save_strategy: no``."""
    cfg = load_config(None, ["eval_strategy=no", "--save_strategy", "no"])
    assert (cfg.eval_strategy, cfg.save_strategy) == ("no", "no")
    path = tmp_path / "c.yaml"
    path.write_text("eval_strategy: no\nsave_strategy: no\ngradient_checkpointing: no\n")
    cfg = load_config(path)
    assert (cfg.eval_strategy, cfg.save_strategy, cfg.gradient_checkpointing) == ("no", "no", False)
