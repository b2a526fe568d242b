"""Wrong values that used to run "successfully" or end in a traceback: each is a named TunekitError
whose message names the option, file or step, and a run that diverges stops without saving the bad step."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import alpaca_records, base_config, log_rows, write_dataset
from tunekit.config import load_config
from tunekit.errors import ConfigError, ModelError, TrainingDiverged

# The classic "billion laughs": 9 levels of 9 aliases = 9**9 (387 million) strings from under 500 bytes.
BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
)


def _config_error(path=None, overrides=()) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides)
    return str(err.value)


def _yaml(tmp_path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------ numbers
@pytest.mark.parametrize("text, shown", [(".inf", "inf"), ("-.inf", "-inf"), (".nan", "nan")])
def test_non_finite_float_is_refused(tmp_path, text, shown):
    path = _yaml(tmp_path, f"learning_rate: {text}\n")
    assert _config_error(path) == (
        f"Option 'learning_rate' (in {path}) got {shown} (float), expected a number (float): "
        f"Input should be a finite number (inf or nan makes the loss and every weight NaN)."
    )


def test_non_finite_is_refused_for_every_float_option_and_inside_mappings():
    from tunekit.config import Config

    floats = [name for name, f in Config.model_fields.items() if f.annotation in (float,)]
    assert len(floats) > 20
    for name in floats:  # one mechanism (config/options/base.py), so options added later get it too
        assert "Input should be a finite number" in _config_error(overrides={name: float("nan")}), name
    assert "nan" in _config_error(overrides=["learning_rate=nan"])  # the CLI's text form too
    assert _config_error(
        overrides={"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": float("inf")}}
    ) == (
        "Option 'lr_scheduler_kwargs' (on the command line) got {'min_lr_rate': inf} (dict), expected Dict[str, Any]: "
        "min_lr_rate: inf is not a finite number: a learning rate, coefficient or size of inf or nan makes the loss "
        "and "
        "every weight NaN; give a finite value."
    )


def test_counts_must_fit_int64_and_a_micro_batch_must_fit_memory():
    assert _config_error(overrides={"per_device_train_batch_size": 10**30}) == (
        "Option 'per_device_train_batch_size' (on the command line) got 1000000000000000000000000000000 (int), "
        "expected "
        "a whole number (int): 1000000000000000000000000000000 does not fit a 64-bit integer (at most "
        "9223372036854775807), "
        "which torch and the data loader count with; give a realistic value."
    )
    assert _config_error(overrides={"per_device_train_batch_size": 2**21, "cutoff_len": 1024}) == (
        "per_device_train_batch_size 2097152 x cutoff_len 1024 = 2,147,483,648 tokens in one micro-batch, more than "
        "2,147,483,647 (2**31 - 1): kernels index a batch's elements with 32-bit integers and no device holds its "
        "activations; use a smaller per_device_train_batch_size (and gradient_accumulation_steps for a larger "
        "effective batch)."
    )
    assert (
        load_config(None, {"per_device_train_batch_size": 2**21 - 1, "cutoff_len": 1024}).per_device_train_batch_size
        == 2**21 - 1
    )


def test_scheduler_kwargs_are_checked_against_the_scheduler():
    assert _config_error(overrides=["lr_scheduler_kwargs={bogus: 1}"]) == (
        "lr_scheduler_kwargs has bogus, which lr_scheduler_type linear does not take; it takes none: remove "
        "lr_scheduler_kwargs."
    )
    assert _config_error(
        overrides=["lr_scheduler_type=cosine_with_min_lr", "lr_scheduler_kwargs={min_lr: 0, bogus: 1}"]
    ) == (
        "lr_scheduler_kwargs has bogus, which lr_scheduler_type cosine_with_min_lr does not take; it takes: "
        "num_cycles, "
        "min_lr, min_lr_rate."
    )
    assert _config_error(overrides=["lr_scheduler_type=constant", "lr_scheduler_kwargs={num_cycles: 1}"]) == (
        "lr_scheduler_type constant takes no lr_scheduler_kwargs (Hugging Face ignores them): remove "
        "lr_scheduler_kwargs (num_cycles)."
    )
    cfg = load_config(None, ["lr_scheduler_type=cosine_with_min_lr", "lr_scheduler_kwargs={min_lr_rate: 0.1}"])
    assert cfg.lr_scheduler_kwargs == {"min_lr_rate": 0.1}


@pytest.mark.parametrize("args", [["--seed"], ["--seed", "--max_steps", "3"], ["seed=true"]])
def test_number_option_without_value_is_an_error_not_1(args):
    assert _config_error(overrides=args) == (
        "Option 'seed' (on the command line) got true, expected a whole number (int): `--seed` needs a value "
        "(`--seed VALUE` or seed=VALUE); a flag without one means true, which only true/false options take."
    )
    assert load_config(None, ["--do_train"]).do_train is True  # true/false options keep the bare flag


def test_true_for_a_number_in_a_file_is_an_error(tmp_path):
    path = _yaml(tmp_path, "learning_rate: 1.0e-4\nlora_rank: yes\n")
    assert _config_error(path) == f"Option 'lora_rank' (in {path}) got true, expected a whole number (int)."


# ------------------------------------------------------------------ YAML
def test_key_given_twice_names_the_key_and_both_lines(tmp_path):
    path = _yaml(tmp_path, "learning_rate: 1.0e-4\nlora_rank: 4\n\nlearning_rate: 2.0e-4\n")
    assert _config_error(path) == f"{path}: key 'learning_rate' is given twice (lines 1 and 4); keep one of them."
    nested = _yaml(tmp_path, "lr_scheduler_kwargs:\n  min_lr: 0\n  min_lr: 1\n")
    assert _config_error(nested) == f"{nested}: key 'min_lr' is given twice (lines 2 and 3); keep one of them."
    merged = _yaml(
        tmp_path, "base: &b {lora_rank: 4}\n"
    )  # anchors and merge keys stay valid YAML (refused as an option)
    assert "Unknown option 'base'" in _config_error(merged)
    as_json = tmp_path / "c.json"
    as_json.write_text('{"lora_rank": 4, "lora_rank": 8}')
    assert _config_error(as_json) == f"{as_json}: key 'lora_rank' is given twice; keep one of them."


def test_alias_bomb_is_refused_quickly_with_a_short_message(tmp_path):
    path = _yaml(tmp_path, BOMB)
    assert len(BOMB.encode()) < 500
    start = time.perf_counter()
    message = _config_error(path)
    assert time.perf_counter() - start < 1.0  # CPU: the check is linear in the file (memoized node sizes)
    assert message == (
        f"{path} expands to more than 100,000 YAML nodes through its aliases (*name) (line 6); a config "
        f"needs only a few dozen: write the values out."
    )
    recursive = _yaml(tmp_path, "x: &x [1, *x]\n")
    assert _config_error(recursive) == f"{recursive}: a YAML alias refers to itself (line 1); remove the recursion."


def test_messages_quote_a_short_escaped_excerpt():
    huge = "x" * 1_000_000 + "\x1b[2J"
    message = _config_error(overrides={"learning_rate": huge})
    assert len(message) < 300 and "\x1b" not in message and "xxx...xxx" in message
    message = _config_error(overrides={"lr_scheduler_kwargs": [list(range(1000))] * 1000})
    assert len(message) < 400


# ------------------------------------------------------------------ output_dir
@pytest.mark.parametrize("folder, why", [("/proc/tunekit-x", "No such file or directory in /proc")])
def test_output_dir_that_cannot_be_written_is_refused_before_training(tmp_path, folder, why):
    from tunekit.train.run import check_output_dir

    if not Path("/proc").is_dir():
        pytest.skip("no /proc on this system")
    with pytest.raises(ConfigError) as err:
        check_output_dir(load_config(None, {"output_dir": folder}))
    assert str(err.value) == f"output_dir {folder} cannot be written ({why}); choose a folder you can write to."
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError) as err:
        check_output_dir(load_config(None, {"output_dir": str(blocker / "run")}))
    assert (
        str(err.value)
        == f"output_dir {blocker / 'run'}: {blocker} is a file, not a folder; choose another output_dir."
    )
    check_output_dir(load_config(None, {"output_dir": str(tmp_path / "a" / "b")}))
    assert not (tmp_path / "a").exists() and list(tmp_path.iterdir()) == [blocker]  # the check leaves nothing behind


def test_cli_prints_the_error_without_traceback(tmp_path):
    path = _yaml(tmp_path, BOMB)
    proc = subprocess.run(
        [sys.executable, "-m", "tunekit.cli.main", "train", str(path), "--seed"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"TUNEKIT_WARM": "0", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr) < 400
    assert "expands to more than 100,000 YAML nodes" in proc.stderr


# ------------------------------------------------------------------ model folders
def _load(path):
    from tunekit.model.loader import load_model, load_tokenizer

    cfg = load_config(None, {"model_name_or_path": str(path), "template": "qwen", "finetuning_type": "full"})
    return load_model(cfg, load_tokenizer(cfg))


def _model_copy(tiny_qwen, tmp_path, drop=(), name="m") -> Path:
    folder = tmp_path / name
    shutil.copytree(tiny_qwen, folder)
    for pattern in drop:
        for f in folder.glob(pattern):
            f.unlink()
    return folder


def test_model_folder_without_tokenizer_files_is_refused(tiny_qwen, tmp_path):
    folder = _model_copy(
        tiny_qwen, tmp_path, drop=("tokenizer*", "vocab*", "merges*", "special_tokens*", "chat_template*")
    )
    with pytest.raises(ModelError) as err:
        _load(folder)
    assert str(err.value) == (
        f"{folder} has no tokenizer files (tokenizer.json, tokenizer.model, vocab.json, vocab.txt, ...): the "
        "tokenizer "
        f"loaded from it has 1 token, so nothing could be learned. Copy the tokenizer files of the model it was made "
        f"from into {folder}."
    )


def test_truncated_or_garbage_weights_name_the_file(tiny_qwen, tmp_path):
    truncated = _model_copy(tiny_qwen, tmp_path, name="truncated")
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelError) as err:
        _load(truncated)
    assert str(err.value) == (
        f"{weights} is not a readable safetensors file (Error while deserializing header: "
        f"incomplete metadata, file not fully covered): it is truncated or corrupted; re-download "
        f"or re-save the model."
    )
    garbage = _model_copy(tiny_qwen, tmp_path, drop=("model.safetensors",), name="garbage")
    (garbage / "pytorch_model.bin").write_bytes(b"GARBAGE!" * 100)
    with pytest.raises(ModelError) as err:
        _load(garbage)
    assert str(err.value) == (
        f"{garbage / 'pytorch_model.bin'} is not a PyTorch checkpoint (it starts with b'GARB', "
        f"neither zip nor pickle); re-download or re-save the model."
    )
    pickled = _model_copy(tiny_qwen, tmp_path, drop=("model.safetensors",), name="pickled")
    import pickle

    (pickled / "pytorch_model.bin").write_bytes(pickle.dumps({"w": print}, protocol=2))  # needs code to unpickle
    with pytest.raises(ModelError) as err:
        _load(pickled)
    assert str(err.value).startswith(f"pytorch_model.bin in {pickled} cannot be read as weights (UnpicklingError): ")
    assert "weights_only=False" not in str(err.value)


def test_local_model_problems_are_not_hub_downloads(tiny_qwen, tmp_path):
    file = tiny_qwen / "model.safetensors"
    with pytest.raises(ModelError) as err:
        _load(file)
    assert str(err.value) == (
        f"model_name_or_path {file} is a file, not a model folder: give the folder that holds "
        f"config.json and the weights (the folder {tiny_qwen})."
    )
    bad_config = _model_copy(tiny_qwen, tmp_path, name="badcfg")
    (bad_config / "config.json").write_text('{"model_type": "qwen2",\n  hidden_size: 64}')
    with pytest.raises(ModelError) as err:
        _load(bad_config)
    assert str(err.value) == (
        f"{bad_config / 'config.json'} is not valid JSON (line 2, column 3: Expecting property "
        f"name enclosed in double quotes); re-download the model or fix the file."
    )
    no_weights = _model_copy(tiny_qwen, tmp_path, drop=("model.safetensors",), name="noweights")
    with pytest.raises(ModelError) as err:
        _load(no_weights)
    assert str(err.value) == (
        f"{no_weights} has config.json but no weights (model.safetensors, model-*-of-*.safetensors "
        f"or pytorch_model.bin): copy the weight files into it, or point model_name_or_path at the "
        f"full model."
    )


# ------------------------------------------------------------------ diverging training
def test_non_finite_training_stops_at_the_step_and_keeps_the_last_good_checkpoint(tiny_qwen, tmp_path):
    from tunekit.flow import run_train

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(16))
    out = tmp_path / "out"
    # learning_rate 1e30 is finite (the schema takes it): Adam's first update moves every weight by ~1e30, so the
    # second forward pass overflows fp32 (max 3.4e38) and the loss and gradients of step 2 are nan.
    cfg = load_config(
        None,
        base_config(
            tiny_qwen,
            data,
            out,
            learning_rate=1e30,
            finetuning_type="full",
            optim="adamw_torch",
            save_strategy="steps",
            save_steps=1,
            max_steps=4,
            warmup_steps=0,
        ),
    )
    with pytest.raises(TrainingDiverged) as err:
        run_train(cfg)
    assert str(err.value) == (
        "Training stopped at step 2 of 4: the gradient is not finite (inf or nan; the loss was inf/nan or overflowed "
        "in "
        f"the backward pass). Nothing from this step was saved; the last good checkpoint is {out / 'checkpoint-1'} "
        f"(resume_from_checkpoint: {out / 'checkpoint-1'}). Lower learning_rate, keep max_grad_norm > 0 (gradient "
        f"clipping), check the data for extreme samples, or use bf16 instead of fp16."
    )
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]
    assert not (out / "model.safetensors").exists()  # no final save of broken weights
    rows = log_rows(out)
    assert [r["step"] for r in rows] == [1]


def test_trainer_log_is_strict_json_with_null_for_non_finite(tmp_path):
    from transformers import TrainerControl, TrainerState

    from tunekit.train.callbacks import JsonlLogCallback

    log = JsonlLogCallback(str(tmp_path))
    state = TrainerState(global_step=3, max_steps=10, epoch=0.5)
    log.on_train_begin(None, state, TrainerControl())
    log.on_log(
        None, state, TrainerControl(), logs={"loss": float("nan"), "grad_norm": float("inf"), "learning_rate": 1e-3}
    )
    (row,) = log_rows(tmp_path)
    assert (row["step"], row["loss"], row["grad_norm"], row["lr"]) == (3, None, None, 1e-3)


def test_guard_checks_logged_values_and_names_the_last_complete_checkpoint(tmp_path):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from tunekit.train.checkpoints import write_complete_marker
    from tunekit.train.finite_guard import FiniteGuardCallback

    guard = FiniteGuardCallback(str(tmp_path))
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    state = TrainerState(global_step=7, max_steps=10)
    with pytest.raises(TrainingDiverged) as err:
        guard.on_log(args, state, TrainerControl(), logs={"loss": float("nan"), "learning_rate": 1e-3})
    assert str(err.value).startswith(
        f"Training stopped at step 7 of 10: the logged loss is nan. Nothing from this step "
        f"was saved; no checkpoint was saved before it in {tmp_path}. "
    )
    for step in (5, 6):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"x" * 16)
        if step == 5:
            write_complete_marker(folder, step)  # checkpoint-6 has no marker: torn, not "good"
    with pytest.raises(TrainingDiverged) as err:
        guard.on_log(args, state, TrainerControl(), logs={"eval_loss": float("inf")})
    assert (
        f"the logged eval_loss is inf. Nothing from this step was saved; the last good checkpoint is "
        f"{tmp_path / 'checkpoint-5'} (resume_from_checkpoint: {tmp_path / 'checkpoint-5'})"
    ) in str(err.value)
    guard.on_log(args, state, TrainerControl(), logs={"loss": 2.5, "grad_norm": 0.7})  # finite: nothing happens


def test_command_line_values_get_the_same_yaml_checks():
    from tunekit.config import parse_overrides

    levels = ["&l0 [" + ",".join(["1"] * 9) + "]"] + [f"&l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    message = _config_error(overrides=[f"lr_scheduler_kwargs={{x: [{','.join(levels)}]}}"])
    assert message.startswith("the command-line value '{x: [&l0 [1,1,1,1,1,1,1,1,1...") and len(message) < 300
    assert message.endswith(
        "expands to more than 100,000 YAML nodes through its aliases (*name) (line 1); a config "
        "needs only a few dozen: write the values out."
    )
    assert _config_error(overrides=["lr_scheduler_kwargs={a: 1, a: 2}"]) == (
        "the command-line value '{a: 1, a: 2}': key 'a' is given twice (line 1, columns 2 and 8); keep one of them."
    )
    assert parse_overrides(["e=5e-05", "f={x: 1}", "h=yes", "i="]) == {"e": 5e-05, "f": {"x": 1}, "h": True, "i": ""}


def test_web_board_refuses_an_alias_bomb_inside_a_known_option(tmp_path):
    from tunekit.webui.board import Board

    # every anchor inside one known option, so no "unknown option" check stops it before the values are used
    (tmp_path / "bomb.yaml").write_text(
        "lr_scheduler_kwargs:\n" + "".join(f"  {line}\n" for line in BOMB.splitlines())
    )
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        Board(cwd=tmp_path).load_yaml("bomb.yaml")
    assert time.perf_counter() - start < 1.0 and len(str(err.value)) < 300
    assert "expands to more than 100,000 YAML nodes through its aliases" in str(err.value)
