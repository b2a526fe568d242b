"""ZeRO checkpoints are read without running their pickles.

DeepSpeed's own loaders call ``torch.load(weights_only=False)``; a crafted ``mp_rank_00_model_states.pt`` then
runs code (here: ``open(marker, "w")`` creates a marker file). tunekit reads the files with ``weights_only=True``
and an allow-list of the DeepSpeed types real checkpoints hold, and refuses anything else by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("deepspeed")


class _OpensAFile:
    """Unpickles as ``open(marker, "w")``: creates the marker file, the proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _crafted_checkpoint(folder: Path, marker: Path) -> Path:
    """A folder that looks like a ZeRO-2 checkpoint to every detector; its model-states pickle runs code."""
    (folder / "global_step1").mkdir(parents=True)
    (folder / "latest").write_text("global_step1")
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    torch.save(
        {"module": {}, "buffer_names": [], "param_shapes": [], "shared_params": {}, "payload": _OpensAFile(marker)},
        folder / "global_step1" / "mp_rank_00_model_states.pt",
    )
    torch.save(
        {"optimizer_state_dict": {"zero_stage": 2, "partition_count": 1}},
        folder / "global_step1" / "zero_pp_rank_0_mp_rank_00_optim_states.pt",
    )
    return folder


def test_a_crafted_model_states_pickle_never_runs(tmp_path, capsys):
    from tunekit.cli.main import main
    from tunekit.errors import ModelError
    from tunekit.export.zero import consolidate_zero, zero_tag

    marker = tmp_path / "pwned"
    ckpt = _crafted_checkpoint(tmp_path / "ckpt", marker)
    assert zero_tag(ckpt) == "global_step1"  # export would route it here
    bad = ckpt / "global_step1" / "mp_rank_00_model_states.pt"
    with pytest.raises(ModelError) as err:
        consolidate_zero(ckpt, tmp_path / "out")
    assert not marker.exists()
    msg = str(err.value)
    assert msg.startswith(f"{bad} refused: loading it would run code from the file. Its pickle names io.open, ")
    assert f"`tunekit zero-to-fp32 {ckpt} OUT_DIR --trust-pickle`" in msg
    assert not (tmp_path / "out").exists()

    assert (
        main(["zero-to-fp32", str(ckpt), str(tmp_path / "out")]) == ModelError.exit_code
    )  # CLI: named error, no traceback
    assert capsys.readouterr().err == f"error: {msg}\n" and not marker.exists()
    assert main(["export", f"model_name_or_path={ckpt}", "template=qwen", f"export_dir={tmp_path / 'export'}"]) != 0
    assert "refused: loading it would run code" in capsys.readouterr().err and not marker.exists()

    # the file really runs code under DeepSpeed's loader (weights_only=False): the switch that trusts it does too
    with pytest.raises(ModelError):  # it is no real checkpoint, so it fails after unpickling
        consolidate_zero(ckpt, tmp_path / "out", trust_pickle=True)
    assert marker.exists()


def test_a_damaged_states_file_is_a_named_error(tmp_path):
    from tunekit.errors import ModelError
    from tunekit.export.zero import consolidate_zero

    ckpt = _crafted_checkpoint(tmp_path / "ckpt", tmp_path / "marker")
    bad = ckpt / "global_step1" / "mp_rank_00_model_states.pt"
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(ModelError, match=rf"^{bad} is not a readable torch checkpoint file \("):
        consolidate_zero(ckpt, tmp_path / "out")


@pytest.mark.slow
@pytest.mark.distributed
def test_real_zero2_checkpoint_reads_safely_and_equals_deepspeeds_merge(tiny_qwen, tmp_path):
    """A ZeRO-2 checkpoint of tunekit train (torchrun, 2 CPU processes) holds only allow-listed types, and the safe
    reader gives DeepSpeed's own consolidation bit for bit (ZeRO-3 goes through it in test_export_zero.py)."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    from tests.distributed_helpers import zero_checkpoint_run
    from tunekit.export.zero import read_zero_state
    from tunekit.model.pickles import DEEPSPEED_SAFE_GLOBALS

    out = zero_checkpoint_run(tiny_qwen, tmp_path, "z2")
    step = out / "checkpoint-2" / "global_step2"
    found = set()
    for f in step.glob("*.pt"):
        found.update(torch.serialization.get_unsafe_globals_in_checkpoint(f))
    assert found and found <= set(DEEPSPEED_SAFE_GLOBALS), found
    ours = read_zero_state(step)
    theirs = get_fp32_state_dict_from_zero_checkpoint(str(out / "checkpoint-2"), tag="global_step2")
    assert list(ours) == list(theirs)
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
