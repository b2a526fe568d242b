"""The completion marker lists every rank's files at their final size.

CI once saw an FSDP resume refused because rank 0 wrote ``tunekit_complete.json`` while rank 1 was still writing
``rng_state_1.pth`` (4,096 of its 14,341 bytes recorded). Here rank 1 writes its file late on purpose; the marker
must still hold it whole, so ``CompleteCheckpointCallback.on_save`` has to wait for every rank.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import torch.distributed as dist
import torch.multiprocessing as mp

from tunekit.train.callbacks import CompleteCheckpointCallback
from tunekit.train.checkpoints import MARKER, checkpoint_problem

LATE_BYTES = 14341


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, port: int, output_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        folder = Path(output_dir) / "checkpoint-2"
        if rank == 0:
            folder.mkdir(parents=True)
            (folder / "rng_state_0.pth").write_bytes(b"0" * 100)
        dist.barrier()  # the folder exists (HF's save_model makes it before the ranks' own files)
        if rank == 1:
            time.sleep(1.5)  # still writing while rank 0 reaches on_save
            with open(folder / "rng_state_1.pth", "wb") as f:
                f.write(b"1" * 4096)
                f.flush()
                time.sleep(0.5)
                f.write(b"1" * (LATE_BYTES - 4096))
        args = SimpleNamespace(output_dir=output_dir, world_size=2)
        state = SimpleNamespace(global_step=2, is_world_process_zero=rank == 0, best_model_checkpoint=None)
        CompleteCheckpointCallback(None).on_save(args, state, None)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_marker_waits_for_the_files_other_ranks_are_still_writing(tmp_path):
    mp.spawn(_rank_main, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    folder = tmp_path / "checkpoint-2"
    files = json.loads((folder / MARKER).read_text())["files"]
    assert files["rng_state_1.pth"]["size"] == LATE_BYTES
    assert files["rng_state_0.pth"]["size"] == 100
    assert checkpoint_problem(folder) is None


def test_single_process_save_needs_no_process_group(tmp_path):
    folder = tmp_path / "checkpoint-1"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x" * 10)
    args = SimpleNamespace(output_dir=str(tmp_path), world_size=1)
    state = SimpleNamespace(global_step=1, is_world_process_zero=True, best_model_checkpoint=None)
    CompleteCheckpointCallback(None).on_save(args, state, None)
    files = json.loads((folder / MARKER).read_text())["files"]
    assert list(files) == ["model.safetensors"] and files["model.safetensors"]["size"] == 10
