"""Crafted pickles in files others may hand us: a resumed checkpoint's optimizer.pt, scheduler.pt,
rng_state.pth and a ``.bin`` adapter never run code, and each is a one-line tunekit error naming the file (not
torch's traceback advising ``weights_only=False``, which would run the code).

The crafted object unpickles as ``open(marker, "w")``: the marker file would be the proof that code ran.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers import alpaca_records, base_config, write_dataset
from tunekit.config import load_config
from tunekit.errors import ModelError

RESUME_FIX = (
    "Resume from another checkpoint (resume_from_checkpoint: PATH), or train afresh without resume_from_checkpoint."
)


class _OpensAFile:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture(scope="module")
def trained(tiny_qwen, tmp_path_factory):
    """A LoRA run with one complete checkpoint (checkpoint-2) and its config."""
    from tunekit.flow import run_train

    root = tmp_path_factory.mktemp("pickles")
    write_dataset(root / "data", "toy", alpaca_records(8, seed=1))
    cfg = base_config(tiny_qwen, root / "data", root / "out", max_steps=2, save_strategy="steps", save_steps=2)
    run_train(load_config(None, cfg))
    return root / "out", cfg


def _crafted_run(trained, tmp_path: Path, name: str, plain: bool = False) -> tuple[Path, Path, Path, dict]:
    """A copy of the run whose checkpoint holds a crafted ``name`` (its completion marker rewritten to match, as
    whoever crafted it would), unfinished, so that resuming it loads that file."""
    from tunekit.train.checkpoints import write_complete_marker

    src, cfg = trained
    out, marker = tmp_path / "out", tmp_path / "pwned"
    shutil.copytree(src, out)
    (out / "all_results.json").unlink()
    ckpt = out / "checkpoint-2"
    target = ckpt / name
    assert target.is_file()
    if plain:  # a plain pickle, not a torch zip file
        target.write_bytes(pickle.dumps({"state": _OpensAFile(marker)}))
    else:
        torch.save({"state": {}, "param_groups": [], "payload": _OpensAFile(marker)}, target)
    write_complete_marker(ckpt, 2)
    return ckpt, target, marker, {**cfg, "output_dir": str(out), "resume_from_checkpoint": str(ckpt)}


@pytest.mark.parametrize(
    "name,plain", [("optimizer.pt", False), ("scheduler.pt", False), ("rng_state.pth", False), ("optimizer.pt", True)]
)
def test_resuming_a_checkpoint_with_a_crafted_pickle_is_one_named_error(trained, tmp_path, capsys, name, plain):
    from tunekit.cli.main import main

    ckpt, target, marker, cfg = _crafted_run(trained, tmp_path, name, plain)
    code = main(["train", *[f"{k}={v}" for k, v in cfg.items()]])
    err = capsys.readouterr().err.strip()
    assert code != 0 and not marker.exists()
    if plain:
        expected = (
            f"{target} could not be loaded safely (its pickle holds more than tensors and plain data); tunekit "
            f"never runs code from a pickle. {RESUME_FIX}"
        )
    else:
        expected = (
            f"{target} could not be loaded safely: its pickle names io.open, which a training checkpoint never "
            f"holds (loading it would run code from the file). {RESUME_FIX}"
        )
    assert err.splitlines()[-1].endswith(expected), err[-2000:]
    assert "Traceback" not in err and "weights_only" not in err


def test_a_genuine_checkpoint_passes(trained):
    from tunekit.model.pickles import check_resume_pickles, unsafe_globals

    ckpt = trained[0] / "checkpoint-2"
    names = sorted(p.name for p in ckpt.iterdir())
    assert {"optimizer.pt", "scheduler.pt", "rng_state.pth"} <= set(names)
    assert (
        unsafe_globals(ckpt / "rng_state.pth") != [] and unsafe_globals(ckpt / "rng_state.pth", allow_numpy=True) == []
    )
    check_resume_pickles(ckpt)  # numpy's random state in rng_state.pth is allowed, as transformers allows it


def test_a_crafted_bin_adapter_is_one_named_error(trained, tiny_qwen, tmp_path):
    from tunekit.infer.engine import ChatEngine

    adapter, marker = tmp_path / "adapter", tmp_path / "pwned"
    adapter.mkdir()
    shutil.copy(trained[0] / "checkpoint-2" / "adapter_config.json", adapter)
    torch.save({"base_model.model.lm_head.weight": _OpensAFile(marker)}, adapter / "adapter_model.bin")
    cfg = load_config(
        None, dict(model_name_or_path=str(tiny_qwen), adapter_name_or_path=str(adapter), template="qwen")
    )
    with pytest.raises(ModelError) as err:
        ChatEngine(cfg)
    assert not marker.exists()
    assert str(err.value) == (
        f"{adapter / 'adapter_model.bin'} could not be loaded safely: its pickle names io.open, which a PEFT adapter "
        f"never holds (loading it would run code from the file). Use a copy of the adapter saved as "
        f"adapter_model.safetensors (PEFT's default), or convert this one only where you trust its source."
    )


class _RunsACommand:
    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        import os

        return (os.system, (self.command,))


def _crafted_zero_checkpoint(trained, tmp_path: Path, protocol: int) -> tuple[Path, Path, Path, dict]:
    """The run's checkpoint turned into a ZeRO one of 1 process whose ``mp_rank_00_model_states.pt`` runs a
    command when DeepSpeed loads it (``weights_only=False``); the other DeepSpeed file is plain data."""
    from tunekit.train.checkpoints import write_complete_marker

    ckpt, _, marker, cfg = _crafted_run(trained, tmp_path, "optimizer.pt")
    torch.save(
        {"state": {}, "param_groups": []}, ckpt / "optimizer.pt"
    )  # genuine again: only DeepSpeed's file is crafted
    step = ckpt / "global_step2"
    step.mkdir()
    (ckpt / "latest").write_text("global_step2")
    target = step / "mp_rank_00_model_states.pt"
    torch.save(
        {"module": {}, "buffer_names": [], "ds_version": "0.19.8", "lr_scheduler": _RunsACommand(f"touch {marker}")},
        target,
        pickle_protocol=protocol,
    )
    torch.save(
        {"optimizer_state_dict": {"zero_stage": 2, "partition_count": 1}},
        step / "zero_pp_rank_0_mp_rank_00_optim_states.pt",
    )
    write_complete_marker(ckpt, 2)  # as whoever crafted it would
    return ckpt, target, marker, cfg


@pytest.mark.parametrize("protocol", [2, 4])
def test_resuming_a_zero_checkpoint_with_a_crafted_model_states_file_is_one_named_error(trained, tmp_path, protocol):
    """DeepSpeed loads ``global_step*/*.pt`` with ``weights_only=False``: resume reads them first with its
    allow-list. Protocol 4 names ``os.system`` on the pickle's stack (STACK_GLOBAL), which the scan of named
    globals does not see: the full restricted load refuses it."""
    import os

    from tunekit.train.resume import plan_resume

    ckpt, target, marker, cfg = _crafted_zero_checkpoint(trained, tmp_path, protocol)
    with pytest.raises(ModelError) as err:
        plan_resume(cfg["output_dir"], str(ckpt), True, check_finished=False)
    assert not marker.exists()
    if protocol == 2:
        expected = (
            f"{target} could not be loaded safely: its pickle names {os.system.__module__}.system, which a "
            f"DeepSpeed checkpoint never holds (loading it would run code from the file). {RESUME_FIX}"
        )
    else:
        expected = (
            f"{target} could not be loaded safely (its pickle holds more than tensors and plain data); tunekit "
            f"never runs code from a pickle. {RESUME_FIX}"
        )
    assert str(err.value) == expected
    assert "\n" not in str(err.value) and "weights_only" not in str(err.value)
    torch.load(target, weights_only=False)  # what DeepSpeed's loader does with it: the command runs
    assert marker.exists()


def _crafted_adapter_folder(tiny_qwen: Path, folder: Path, marker: Path) -> Path:
    """A LoRA adapter folder for the tiny model whose ``adapter_model.bin`` opens ``marker`` when unpickled."""
    from peft import LoraConfig

    LoraConfig(r=2, target_modules=["q_proj"], base_model_name_or_path=str(tiny_qwen)).save_pretrained(folder)
    torch.save({"base_model.model.lm_head.weight": _OpensAFile(marker)}, folder / "adapter_model.bin")
    return folder / "adapter_model.bin"


ADAPTER_FIX = (
    "Use a copy of the adapter saved as adapter_model.safetensors (PEFT's default), or convert this one only "
    "where you trust its source."
)


def test_a_reward_model_adapter_with_a_crafted_bin_is_one_named_error(tiny_qwen, tmp_path):
    """Reloading a reward model / critic saved as a LoRA adapter (ppo's reward_model) goes through the same check."""
    from safetensors.torch import save_file

    from tunekit.train.stages.value_head import VALUE_HEAD_FILE, load_value_head_model

    marker = tmp_path / "pwned"
    bad = _crafted_adapter_folder(tiny_qwen, tmp_path / "rm", marker)
    save_file(
        {"v_head.summary.weight": torch.zeros(1, 64), "v_head.summary.bias": torch.zeros(1)},
        str(tmp_path / "rm" / VALUE_HEAD_FILE),
    )
    with pytest.raises(ModelError) as err:
        load_value_head_model(tmp_path / "rm")
    assert not marker.exists()
    assert str(err.value) == (
        f"{bad} could not be loaded safely: its pickle names io.open, which a PEFT adapter never "
        f"holds (loading it would run code from the file). {ADAPTER_FIX}"
    )


def test_the_export_checks_reference_model_refuses_a_crafted_bin_adapter(tiny_qwen, tmp_path):
    """export's verification builds its own base + adapter reference (export/checks.reference_model)."""
    from tunekit.export.checks import reference_model

    marker = tmp_path / "pwned"
    bad = _crafted_adapter_folder(tiny_qwen, tmp_path / "adapter", marker)
    cfg = load_config(
        None, dict(model_name_or_path=str(tiny_qwen), adapter_name_or_path=str(bad.parent), template="qwen")
    )
    with pytest.raises(ModelError) as err:
        reference_model(cfg)
    assert not marker.exists()
    assert str(err.value).startswith(
        f"{bad} could not be loaded safely: its pickle names io.open, which a PEFT adapter"
    )
