"""One rank of :func:`tests.distributed_helpers.launch_batch`: several ``tunekit train`` runs on the ranks of ONE
torchrun job, each run in a fresh process.

A 2-rank launch on the test machine costs ~20 CPU seconds, ~90 % of them the imports of torch, transformers, peft,
datasets and deepspeed in each rank (a tiny model's run itself takes ~1 s). Here each rank imports them once and
then, for each run, forks a child that is a fresh ``tunekit train`` rank: nothing of an earlier run is in it (each
child starts from the state after the imports, before any run), it meets the other rank's child in its own process
group (its own rendezvous port; the runs' ports are chosen by the test) and its stdout and stderr go to files that
the test reads as the run's output. The parent waits for the child and records its exit code, then forks the next.

Usage (under ``torch.distributed.run``): ``python -m tests.distributed_batch PLAN.json``, PLAN a list of
``{"config": ..., "port": ..., "output": ..., "record": folder or null}``; rank ``r`` writes ``{output}.rank{r}.out`` /
``.err`` / ``.rc`` (a record folder gets what :func:`tests.distributed_helpers.record_pair_batches` writes).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

# What every ``tunekit train`` rank imports before it trains (train_cmd -> flow -> train.run, which load these);
# importing them here is what the runs share. Nothing else runs before the fork.
import accelerate  # noqa: F401 - imported once for every run (module doc)
import datasets  # noqa: F401 - as above
import deepspeed  # noqa: F401 - as above
import peft  # noqa: F401 - as above
import torch.distributed  # noqa: F401 - as above
import transformers.trainer  # noqa: F401 - as above

import tunekit.flow  # noqa: F401 - as above
import tunekit.train.run  # noqa: F401 - as above
from tests.distributed_helpers import record_pair_batches
from tunekit.cli.main import main as tunekit_main
from tunekit.train.stages.stage_trainer import StageTrainer


def _child(config: str, port: int, output: str, rank: int, record: str | None) -> None:
    """The forked run: a ``tunekit train`` rank of its own process group; never returns."""
    code = 1
    try:
        if record:  # the pair-weighting tests' view of each micro-batch
            StageTrainer.get_batch_samples = record_pair_batches(Path(record))
        os.environ["MASTER_PORT"] = str(port)
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"  # rank 0 hosts this run's own rendezvous store
        for fd, suffix in ((1, "out"), (2, "err")):
            target = os.open(f"{output}.rank{rank}.{suffix}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        code = int(tunekit_main(["train", config]) or 0)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _wait(pid: int, peer_rc: str) -> int:
    """The child's exit code; a child whose run failed on the other rank is killed (it would wait in a collective
    until the process group's timeout), as torchrun ends the other ranks of a failed launch."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if os.path.exists(peer_rc) and Path(peer_rc).read_text() != "0":
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def run_plan(plan: list[dict]) -> None:
    rank = int(os.environ["RANK"])
    for run in plan:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(run["config"], run["port"], run["output"], rank, run["record"])
        code = _wait(pid, f"{run['output']}.rank{1 - rank}.rc")
        with open(f"{run['output']}.rank{rank}.rc.tmp", "w") as f:
            f.write(str(code))
        os.replace(f"{run['output']}.rank{rank}.rc.tmp", f"{run['output']}.rank{rank}.rc")


if __name__ == "__main__":
    with open(sys.argv[1]) as plan_file:
        run_plan(json.load(plan_file))
