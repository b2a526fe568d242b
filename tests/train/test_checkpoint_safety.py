"""Checkpoints and resume that cannot lose a run, and resuming exactly where it stopped.

Kills are real SIGKILLs of a ``tunekit train`` subprocess. To kill inside a precise window (after the checkpoint's
files are written but before its marker; in the middle of deleting an old checkpoint) the subprocess installs a
Python audit hook (``sys.addaudithook``, a documented interpreter API) that SIGKILLs the process at the chosen
file event; nothing in tunekit or its libraries is replaced. Every resume must end with final weights bit-identical
to an uninterrupted run (same process count and threads: the computation is the same, so no tolerance).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from tests.helpers import alpaca_records, base_config, log_rows, write_dataset
from tunekit.config import load_config
from tunekit.errors import ConfigError, DataError
from tunekit.flow import run_train
from tunekit.train.checkpoints import MARKER, checkpoint_problem, list_checkpoints
from tunekit.train.resume import training_differences

# A LoRA run with a checkpoint every 2 steps and only one kept: the shape that lost runs.
RUN = dict(
    max_steps=6,
    save_strategy="steps",
    save_steps=2,
    save_total_limit=1,
    learning_rate=5e-3,
    lr_scheduler_type="cosine",
    warmup_steps=1,
)

DRIVER = r"""
import os, signal, sys
event, match, nth = os.environ["KILL_EVENT"], os.environ["KILL_MATCH"], int(os.environ["KILL_NTH"])
arm_event, _, arm_match = os.environ.get("KILL_ARM", "").partition("|")
state = {"armed": not arm_event, "seen": 0}

def hook(name, args):
    if not state["armed"]:
        if name == arm_event and any(arm_match in str(a) for a in args[:2]):
            state["armed"] = True
        return
    if name == event and any(match in str(a) for a in args[:1]):
        state["seen"] += 1
        if state["seen"] == nth:
            os.kill(os.getpid(), signal.SIGKILL)

sys.addaudithook(hook)
from tunekit.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckptdata")
    write_dataset(folder, "toy", alpaca_records(16, seed=1))
    return folder


def _cfg(model, data_dir, out, **overrides):
    return load_config(None, base_config(model, data_dir, out, **{**RUN, **overrides}))


def _train(model, data_dir, out, **overrides) -> dict:
    return run_train(_cfg(model, data_dir, out, **overrides))


def _args(model, data_dir, out, **overrides) -> list[str]:
    return [f"{k}={v}" for k, v in base_config(model, data_dir, out, **{**RUN, **overrides}).items()]


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "adapter_model.safetensors")


def _assert_bit_identical(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa), [k for k in wa if not torch.equal(wa[k], wb[k])]


def _killed_run(model, data_dir, out, event: str, match: str, nth: int = 1, arm: str = "") -> str:
    env = {
        **os.environ,
        "KILL_EVENT": event,
        "KILL_MATCH": match,
        "KILL_NTH": str(nth),
        "KILL_ARM": arm,
        "TUNEKIT_WARM": "0",
    }
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, "train", *_args(model, data_dir, out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def reference(tiny_qwen, data_dir, tmp_path_factory) -> Path:
    """The uninterrupted run every killed-and-resumed run must equal bit for bit."""
    out = tmp_path_factory.mktemp("reference") / "out"
    _train(tiny_qwen, data_dir, out)
    return out


def _names(out: Path) -> list[str]:
    return [p.name for p in list_checkpoints(out)]


# ------------------------------------------------------------------ 1. rotation only after the marker
@pytest.mark.slow
def test_a_kill_between_save_and_marker_leaves_the_previous_checkpoint(
    tiny_qwen, data_dir, tmp_path, reference, capsys
):
    """Hugging Face's save_total_limit deleted checkpoint-2 inside the save of checkpoint-4, before the marker:
    a kill there left no resumable checkpoint. Now the older one goes only after the new one is marked."""
    out = tmp_path / "out"
    _killed_run(tiny_qwen, data_dir, out, "open", f"checkpoint-4{os.sep}{MARKER}.tmp")
    assert _names(out) == ["checkpoint-2", "checkpoint-4"]
    assert checkpoint_problem(out / "checkpoint-2") is None
    assert (
        checkpoint_problem(out / "checkpoint-4") == f"it has no {MARKER} (the run was probably killed while saving it)"
    )
    _train(tiny_qwen, data_dir, out, resume_from_checkpoint="auto")
    printed = capsys.readouterr().out
    assert (
        f"resume: not using checkpoint-4 (it has no {MARKER} (the run was probably killed while saving it)); "
        f"using checkpoint-2, the newest good checkpoint"
    ) in printed
    assert "resuming from checkpoint-2 at step 2" in printed
    _assert_bit_identical(reference, out)
    assert _names(out) == ["checkpoint-6"]  # save_total_limit 1 still holds


@pytest.mark.slow
def test_a_kill_during_rotation_leaves_a_complete_checkpoint(tiny_qwen, data_dir, tmp_path, reference):
    """Killed after the first file of the old checkpoint-2 is deleted: it was renamed first, so no half-deleted
    checkpoint-2 is ever seen, and checkpoint-4 (marked before rotation began) resumes."""
    out = tmp_path / "out"
    _killed_run(tiny_qwen, data_dir, out, "os.remove", "", nth=2, arm="os.rename|.deleting-checkpoint-2")
    assert _names(out) == ["checkpoint-4"] and checkpoint_problem(out / "checkpoint-4") is None
    assert (out / ".deleting-checkpoint-2").is_dir()  # the interrupted deletion
    _train(tiny_qwen, data_dir, out, resume_from_checkpoint="auto")
    _assert_bit_identical(reference, out)
    assert not (out / ".deleting-checkpoint-2").exists() and _names(out) == ["checkpoint-6"]


def test_rotation_keeps_the_newest_complete_and_the_best_and_skips_newer_unmarked_ones(tmp_path):
    from tunekit.train.checkpoints import rotate_checkpoints, write_complete_marker

    def make(step: int, marked: bool) -> None:
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "optimizer.pt").write_bytes(bytes([step]) * 100)
        if marked:
            write_complete_marker(folder, step)

    for step in (1, 2, 3):
        make(step, marked=True)
    make(4, marked=False)  # being written (or torn): newer than the newest complete one, never touched
    assert rotate_checkpoints(tmp_path, 1, best=str(tmp_path / "checkpoint-1")) == ["checkpoint-2"]
    assert _names(tmp_path) == ["checkpoint-1", "checkpoint-3", "checkpoint-4"]
    assert rotate_checkpoints(tmp_path, 1) == ["checkpoint-1"]
    assert _names(tmp_path) == ["checkpoint-3", "checkpoint-4"] and not list(tmp_path.glob(".deleting-*"))
    # the end of a finished run with save_total_limit 1 and a best checkpoint: only the best one stays
    write_complete_marker(tmp_path / "checkpoint-4", 4)
    assert rotate_checkpoints(tmp_path, 1, best=str(tmp_path / "checkpoint-3"), keep_newest=False) == ["checkpoint-4"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_sigkill_at_a_random_moment_then_auto_resume_is_bit_identical(tiny_qwen, data_dir, tmp_path, reference, seed):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tunekit.cli.main", "train", *_args(tiny_qwen, data_dir, out)],
        env={**os.environ, "TUNEKIT_WARM": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not (out / "checkpoint-2" / MARKER).is_file() and proc.poll() is None:
            time.sleep(0.05)
        time.sleep(
            random.Random(seed).uniform(0.0, 2.0)
        )  # anywhere in the rest of the run, saves and rotations included
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    _train(tiny_qwen, data_dir, out, resume_from_checkpoint="auto")
    _assert_bit_identical(reference, out)
    assert all(checkpoint_problem(p) is None for p in list_checkpoints(out))


# ------------------------------------------------------------------ 2. overwrite_output_dir, other options
def test_overwrite_output_dir_deletes_the_old_runs_checkpoints(tiny_qwen, data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    _train(tiny_qwen, data_dir, out, max_steps=4, save_total_limit=None)
    assert _names(out) == ["checkpoint-2", "checkpoint-4"]
    _train(tiny_qwen, data_dir, out, max_steps=3, learning_rate=1e-3, save_strategy="no", overwrite_output_dir=True)
    assert (
        f"overwrite_output_dir: deleting the previous run's checkpoint-2, checkpoint-4, all_results.json, "
        f"train_results.json, trainer_state.json in {out}"
    ) in capsys.readouterr().out
    assert _names(out) == []
    assert json.loads((out / "all_results.json").read_text())["total_steps"] == 3
    # a later resume finds the new run (finished at step 3), never the old run's checkpoint-4
    _train(tiny_qwen, data_dir, out, max_steps=3, learning_rate=1e-3, save_strategy="no", resume_from_checkpoint=True)
    assert f"resume: the run in {out} already finished (step 3, " in capsys.readouterr().out
    (out / "all_results.json").unlink()  # had it died before its results: nothing of the old run to resume either
    with pytest.raises(ConfigError, match=r"resume_from_checkpoint: true found no complete checkpoint in "):
        _train(tiny_qwen, data_dir, out, max_steps=3, learning_rate=1e-3, resume_from_checkpoint=True)


def test_resume_refuses_a_checkpoint_of_a_run_with_other_training_options(
    tiny_qwen, data_dir, tmp_path, reference, capsys
):
    died = tmp_path / "died"
    died.mkdir()
    shutil.copytree(reference / "checkpoint-6", died / "checkpoint-6")  # carries the run's tunekit_config.yaml
    config = died / "checkpoint-6" / "tunekit_config.yaml"
    assert config.is_file()
    with pytest.raises(ConfigError) as err:
        _train(
            tiny_qwen,
            data_dir,
            died,
            max_steps=8,
            learning_rate=1e-3,
            cutoff_len=32,
            logging_steps=2,
            save_steps=3,
            resume_from_checkpoint=True,
        )
    assert str(err.value) == (
        f"checkpoint {died / 'checkpoint-6'} belongs to a run with other training options ({config}): "
        f"learning_rate: 0.005 there, 0.001 here; max_steps: 6 there, 8 here; cutoff_len: 64 there, 32 here. "
        f"Continuing it with this config would mix two runs. Use that run's values, or start a new run "
        f"(another output_dir, or overwrite_output_dir: true without resume_from_checkpoint)."
    )
    assert sorted(p.name for p in died.iterdir()) == ["checkpoint-6"]  # nothing written


def test_only_the_global_batch_counts_across_process_counts():
    saved = {
        "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": 2,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "output_dir": "a",
        "temperature": 0.9,
    }
    same = {
        **saved,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 2,
        "logging_steps": 5,
        "output_dir": "b",
        "temperature": 0.1,
    }
    assert training_differences(saved, same, saved_world=2, current_world=1) == []
    assert training_differences(saved, {**same, "per_device_train_batch_size": 4}, saved_world=2, current_world=1) == [
        "global batch (per_device_train_batch_size x gradient_accumulation_steps x processes): "
        "1 x 2 x 2 = 4 there, 4 x 2 x 1 = 8 here"
    ]
    assert training_differences(saved, same) == [
        "per_device_train_batch_size: 1 there, 2 here"
    ]  # process count unknown


# ------------------------------------------------------------------ 3. run files after validation; finished runs
def test_a_run_that_fails_its_data_checks_leaves_the_finished_run_untouched(tiny_qwen, data_dir, tmp_path, reference):
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    data = tmp_path / "data"
    shutil.copytree(data_dir, data)
    write_dataset(data, "broken", "{not json")
    with pytest.raises(DataError) as err:
        _train(tiny_qwen, data, out, dataset="broken", overwrite_output_dir=True)
    assert "broken" in str(err.value)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert _names(out) == ["checkpoint-6"]


@pytest.mark.parametrize("resume", [True, "auto"])
def test_resuming_a_finished_run_is_a_no_op_that_says_so(tiny_qwen, data_dir, tmp_path, reference, capsys, resume):
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    before = (out / "all_results.json").read_bytes()
    results = _train(tiny_qwen, data_dir, out, resume_from_checkpoint=resume, logging_steps=3)
    loss = json.loads(before)["train_loss"]
    assert (
        f"resume: the run in {out} already finished (step 6, train_loss {loss:.4f}); nothing to train, its results "
        f"are kept. To train again, use another output_dir or overwrite_output_dir: true without "
        f"resume_from_checkpoint."
    ) in capsys.readouterr().out
    assert results == json.loads(before) and loss > 0
    assert (out / "all_results.json").read_bytes() == before
    with pytest.raises(
        ConfigError,
        match=r"the finished run in .* belongs to a run with other training options .*: "
        r"learning_rate: 0.005 there, 0.001 here\.",
    ):
        _train(tiny_qwen, data_dir, out, resume_from_checkpoint=resume, learning_rate=1e-3)


# ------------------------------------------------------------------ 4. checksums
def test_a_zeroed_optimizer_state_is_found_and_resume_falls_back(tiny_qwen, data_dir, tmp_path, reference, capsys):
    out = tmp_path / "out"
    _train(tiny_qwen, data_dir, out, max_steps=4, save_total_limit=None, logging_steps=1)
    (out / "all_results.json").unlink()  # as if the run died after its last checkpoint
    optimizer = out / "checkpoint-4" / "optimizer.pt"
    optimizer.write_bytes(bytes(optimizer.stat().st_size))  # same size: a size check passes it
    with pytest.raises(ConfigError) as err:
        _train(
            tiny_qwen,
            data_dir,
            out,
            max_steps=4,
            save_total_limit=None,
            resume_from_checkpoint=str(out / "checkpoint-4"),
        )
    assert str(err.value) == (
        f"checkpoint {out / 'checkpoint-4'} is incomplete or damaged: optimizer.pt does not match "
        f"its checksum in {MARKER} (its content changed after the save). The newest good one is "
        f"{out / 'checkpoint-2'}."
    )
    capsys.readouterr()
    _train(tiny_qwen, data_dir, out, max_steps=4, save_total_limit=None, resume_from_checkpoint=True)
    printed = capsys.readouterr().out
    assert (
        f"resume: not using checkpoint-4 (optimizer.pt does not match its checksum in {MARKER} (its content changed "
        f"after the save)); using checkpoint-2, the newest good checkpoint"
    ) in printed
    assert "resuming from checkpoint-2 at step 2" in printed
    steps = [row["step"] for row in log_rows(out)]
    assert steps == [1, 2, 3, 4]
    assert checkpoint_problem(out / "checkpoint-4") is None  # saved again


def test_checksum_cost_is_small_next_to_the_save(tmp_path):
    """The marker reads every file once more (from the page cache right after the save): on 64 MiB it must cost
    well under the torch.save that wrote it (measured here: about 1/10; asserted: under a half,
    for loaded machines)."""
    from tunekit.train.checkpoints import write_complete_marker

    folder = tmp_path / "checkpoint-1"
    folder.mkdir()
    start = time.perf_counter()
    torch.save({"state": torch.arange(16 << 20, dtype=torch.float32)}, folder / "optimizer.pt")
    save = time.perf_counter() - start
    start = time.perf_counter()
    write_complete_marker(folder, 1)
    mark = time.perf_counter() - start
    assert mark < save / 2, (mark, save)
    assert checkpoint_problem(folder) is None


# ------------------------------------------------------------------ 5. disk full
def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k none /mnt"], capture_output=True)
    return probe.returncode == 0


CHECK = r"""
import json, sys
from pathlib import Path
from tunekit.train.checkpoints import checkpoint_problem, list_checkpoints
out = Path(sys.argv[1])
print("CHECK " + json.dumps({p.name: checkpoint_problem(p) for p in list_checkpoints(out)} |
                            {"trash": [p.name for p in out.iterdir() if p.name.startswith(".deleting")]}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs unshare -rm and tmpfs (a mount namespace) for a small disk")
def test_disk_full_while_saving_names_the_intact_checkpoint(tiny_qwen, data_dir, tmp_path, reference):
    """A real full disk: a tmpfs sized from the reference run so checkpoint-2 fits and checkpoint-4 does not."""
    page = 4096
    pages = lambda p: -(-p.stat().st_size // page) * page  # noqa: E731
    ckpt = list((reference / "checkpoint-6").iterdir())
    state = {"optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", MARKER}
    size = (
        sum(pages(p) for p in ckpt)
        + sum(pages(p) for p in ckpt if p.name not in state)
        + pages(reference / "checkpoint-6" / "optimizer.pt") // 2
        + 16 * page
    )
    disk = tmp_path / "disk"
    disk.mkdir()
    out = disk / "out"
    args = " ".join(f"'{a}'" for a in _args(tiny_qwen, data_dir, out, max_steps=4, save_total_limit=None))
    script = (
        f"mount -t tmpfs -o size={size} none {disk} && {sys.executable} -m tunekit.cli.main train {args}; "
        f"echo rc=$?; {sys.executable} -c '{CHECK}' {out}"
    )
    proc = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TUNEKIT_WARM": "0"},
    )
    assert "rc=2" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: no space left on device while saving checkpoint-4 to {out / 'checkpoint-4'}; checkpoint-2 is intact. "
        f"Free some space (or set save_total_limit), then continue with resume_from_checkpoint: auto."
    ), proc.stderr[-3000:]
    check = json.loads(proc.stdout.split("CHECK ", 1)[1])
    assert check == {"checkpoint-2": None, "trash": []}


# ------------------------------------------------------------------ 6. resume_from_checkpoint: auto
def test_auto_starts_fresh_over_a_first_attempt_killed_before_any_checkpoint(
    tiny_qwen, data_dir, tmp_path, reference, capsys
):
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(reference / "tunekit_config.yaml", out)  # what a first attempt leaves once its data checks passed
    (out / "trainer_log.jsonl").write_text(json.dumps({"step": 1, "loss": 9.0}) + "\n")
    (out / "checkpoint-2").mkdir()  # torn: killed while writing it
    (out / "checkpoint-2" / "optimizer.pt").write_bytes(b"\0" * 10)
    with pytest.raises(ConfigError, match=r"output_dir .* is not empty"):
        _train(tiny_qwen, data_dir, out)  # a plain fresh start refuses the folder, as before
    _train(tiny_qwen, data_dir, out, resume_from_checkpoint="auto")
    printed = capsys.readouterr().out
    assert (
        f"resume_from_checkpoint: auto: no complete checkpoint in {out} (checkpoint-2 (it has no {MARKER} (the run "
        f"was probably killed while saving it))): starting from scratch"
    ) in printed
    assert "deleting the incomplete checkpoint-2" in printed
    _assert_bit_identical(reference, out)


def test_auto_refuses_a_folder_that_is_not_a_tunekit_run(tiny_qwen, data_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(
        ConfigError,
        match=r"resume_from_checkpoint: auto found no checkpoint and no tunekit_config.yaml "
        r"in output_dir .*, which is not empty \(precious.txt\)",
    ):
        _train(tiny_qwen, data_dir, out, resume_from_checkpoint="auto")
    assert sorted(p.name for p in out.iterdir()) == ["precious.txt"]


# ------------------------------------------------------------------ 7. a resumed run that completes
def test_a_stopped_run_resumed_to_the_end_says_stopped_early_false(tiny_qwen, data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    log = out / "trainer_log.jsonl"

    def stop_after_first_step():
        deadline = time.time() + 300
        while time.time() < deadline and not (log.is_file() and log.read_text().count("\n") >= 1):
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)  # what a scheduler's preemption sends: GracefulStopCallback saves, stops

    options = dict(max_steps=40, save_steps=100, save_total_limit=None)
    thread = threading.Thread(target=stop_after_first_step)
    thread.start()
    with pytest.raises(SystemExit) as stopped:
        _train(tiny_qwen, data_dir, out, **options)
    thread.join()
    assert stopped.value.code == 128 + signal.SIGTERM
    assert json.loads((out / "all_results.json").read_text())["stopped_early"] is True
    (step,) = [int(p.name.split("-")[1]) for p in list_checkpoints(out)]
    capsys.readouterr()
    _train(tiny_qwen, data_dir, out, resume_from_checkpoint=True, **options)
    assert f"resuming from checkpoint-{step} at step {step}" in capsys.readouterr().out
    results = json.loads((out / "all_results.json").read_text())
    assert results["stopped_early"] is False and results["total_steps"] == 40
