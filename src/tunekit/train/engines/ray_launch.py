"""Ray Train as the launcher: LLaMA-Factory's ``USE_RAY=1`` with its ``ray_*`` options.

Where torchrun would start ``tunekit train`` once per device (:mod:`.launcher`), ``USE_RAY=1`` starts Ray Train's
``TorchTrainer`` with ``ray_num_workers`` workers instead. Each worker runs the very ``tunekit train ARGV`` a torchrun
rank runs (``tunekit.cli.train_cmd``, in the worker's process, from the driver's working directory), so checkpoints,
resume, logs and ``tunekit_config.yaml`` are tunekit's, written to ``output_dir``; Ray keeps only its own run records
in ``ray_storage_path/ray_run_name``. Ray Train has set RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in
each worker and started its process group (gloo on CPUs, nccl on GPUs, ``ddp_timeout``) before the worker runs:
tunekit sees a launcher (:func:`.launcher.under_launcher`) and uses that group, as it uses torchrun's. A rank's error
comes back as one ``error:`` line naming the rank, as torchrun's does (:func:`failure_summary`).

``import ray`` happens only on this path: a run without ``USE_RAY=1`` never loads it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Mapping

from ...config.llamafactory_options import RAY_ARGS
from ...config.problems import config_error
from ...config.schema import Config
from ...env import PLACEMENT_VARIABLES, env_flag
from .launcher import PEER_LOST, STOP_FILE_ENV, TIMEOUT_HINT, TIMEOUT_PATTERNS, StopSignals, strip_class

#: LLaMA-Factory's RayArguments that are tunekit's options (config/options/distributed.py)
RAY_OPTIONS = tuple(name for name in RAY_ARGS if name in Config.model_fields)
#: in output_dir (shared by the nodes, as the checkpoints): the driver's request to stop (:class:`StopByFile`)
STOP_FILE_NAME = ".tunekit-stop"
#: the verb each worker runs, by name as torchrun runs ``-m tunekit.cli.main train`` (it sits above this layer)
TRAIN_VERB = "tunekit.cli.train_cmd"


def use_ray(env: Mapping[str, str] | None = None) -> bool:
    """LLaMA-Factory's switch: ``USE_RAY=1`` in the environment."""
    return env_flag("USE_RAY", False, env)


def given_ray_options(cfg: Config) -> list[str]:
    """The Ray options ``cfg`` sets to something other than their defaults (an empty value, as a form sends it, is
    none)."""
    return [
        name
        for name in RAY_OPTIONS
        if getattr(cfg, name) != Config.model_fields[name].default and getattr(cfg, name) not in (None, {}, "")
    ]


def check_ray_env(cfg: Config, env: Mapping[str, str] | None = None) -> None:
    """Before anything starts: Ray options need ``USE_RAY=1`` (never ignored), and ``USE_RAY=1`` takes no torchrun
    switch (Ray places the processes)."""
    env = os.environ if env is None else env
    if not use_ray(env):
        given = given_ray_options(cfg)
        if given:
            raise config_error("launch_ray_options_alone", tuple(given), names=", ".join(given))
        return
    if env_flag("FORCE_TORCHRUN", False, env):
        raise config_error("launch_ray_with_torchrun", name="FORCE_TORCHRUN")
    for name in PLACEMENT_VARIABLES:
        if env.get(name, "").strip():
            raise config_error("launch_ray_with_torchrun", name=name)


def worker_resources(cfg: Config, cluster: Mapping[str, float]) -> tuple[dict[str, float], bool]:
    """Each worker's Ray resources and whether it trains on a GPU: ``resources_per_worker``, else one GPU where the
    cluster has GPUs (LLaMA-Factory's ``{"GPU": 1}``) and ``use_cpu`` is off, else one CPU."""
    if cfg.resources_per_worker:
        resources = dict(cfg.resources_per_worker)
    elif not cfg.use_cpu and cluster.get("GPU", 0) > 0:
        resources = {"GPU": 1.0}
    else:
        resources = {"CPU": 1.0}
    return resources, resources.get("GPU", 0) > 0


def check_cluster(workers: int, resources: Mapping[str, float], cluster: Mapping[str, float]) -> None:
    """Ray would wait forever for workers the cluster cannot hold: say so instead (LLaMA-Factory checks its
    devices the same way)."""
    for name, value in resources.items():
        need, have = workers * value, cluster.get(name, 0)
        if need > have:
            raise config_error(
                "launch_ray_resources",
                ("ray_num_workers", "resources_per_worker"),
                workers=workers,
                per_worker=_describe(resources),
                need=f"{need:g}",
                resource=name,
                have=f"{have:g}",
            )


def failure_summary(failures: Mapping[int, BaseException]) -> str:
    """One ``error:`` paragraph from Ray Train's ``{rank: exception}``: the first rank whose error is not a lost peer
    (as :func:`.launcher.cause_of` picks torchrun's), the ranks that failed the same way, the ones it stopped."""
    ordered = sorted(failures.items())
    rank, exc = next(((r, e) for r, e in ordered if not PEER_LOST.search(str(e))), ordered[0])
    text = f"error: distributed training failed: rank {rank} stopped first with: "
    text += strip_class(f"{type(exc).__name__}: {exc}")
    same = [str(r) for r, e in ordered if r != rank and str(e) == str(exc)]
    others = [str(r) for r, e in ordered if r != rank and str(e) != str(exc)]
    if same:
        text += f" Rank(s) {', '.join(same)} failed the same way."
    if others:
        text += f" The other ranks stopped because of it (rank(s) {', '.join(others)})."
    if any(TIMEOUT_PATTERNS.search(str(e)) for e in failures.values()):
        text += "\n" + TIMEOUT_HINT
    return text


class RankFailed(RuntimeError):
    """A worker's ``tunekit train`` ended with a non-zero exit code (its own output says why)."""


class StopByFile(StopSignals):
    """While Ray Train runs, the driver's SIGTERM and SIGINT. Ray's workers are not the driver's children and run
    tunekit outside their main thread, where no signal handler can be set: the first signal writes the stop file the
    ranks read after each step (``GracefulStopCallback``: each saves a checkpoint and ends, as under torchrun); a
    second one stops Ray Train at once (``KeyboardInterrupt``; ``ray.shutdown`` ends the workers)."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def __enter__(self) -> StopByFile:
        with contextlib.suppress(FileNotFoundError):  # a stop file left by an earlier driver that was killed
            os.remove(self.path)
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)

    def _handle(self, signum, frame) -> None:
        import signal

        self.received.append(signal.Signals(signum))
        if len(self.received) > 1:
            _say(f"tunekit: {self.received[-1].name} again: stopping the Ray workers now")
            raise KeyboardInterrupt
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "w", encoding="utf-8") as f:
            f.write(f"{self.received[0].name}\n")
        _say(
            f"tunekit: {self.received[0].name}: the Ray workers save a checkpoint after their current step and stop; "
            "send SIGTERM or press Ctrl+C again to stop them now"
        )


def train_worker(config: dict) -> None:
    """Ray Train's per-worker function: ``tunekit train ARGV`` for this rank, from the driver's directory (relative
    paths in the config mean the same there; Ray starts workers elsewhere)."""
    os.environ[STOP_FILE_ENV] = config["stop_file"]  # the driver's StopByFile
    if os.path.isdir(config["cwd"]):
        os.chdir(config["cwd"])
    code = importlib.import_module(TRAIN_VERB).main(list(config["argv"]))
    if code:
        raise RankFailed(f"tunekit train exited with code {code}; its output above shows why")


def launch(cfg: Config, argv: list[str]) -> int:
    """Run ``tunekit train argv`` on ``ray_num_workers`` Ray Train workers; the exit code (1 when a rank failed,
    with :func:`failure_summary` on stderr)."""
    try:
        import ray
    except ImportError:
        raise config_error("launch_ray_missing") from None
    os.environ["RAY_TRAIN_V2_ENABLED"] = "1"  # Ray Train's default API, the one with each rank's failure (read below)
    from ray.train import RunConfig, ScalingConfig, TrainingFailedError, WorkerGroupError
    from ray.train.torch import TorchConfig, TorchTrainer

    # tunekit's ranks print to their stdout as torchrun's do; Ray Train's print patch would copy every print into its
    # log as well, even one into a captured stream (dill's disassembly while datasets hashes a function)
    os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
    stop_path = os.path.join(os.path.abspath(cfg.output_dir), STOP_FILE_NAME)
    started = not ray.is_initialized()
    if started:
        ray.init(**(cfg.ray_init_kwargs or {}))
    try:
        cluster = ray.cluster_resources()
        resources, use_gpu = worker_resources(cfg, cluster)
        check_cluster(cfg.ray_num_workers, resources, cluster)
        trainer = TorchTrainer(
            train_worker,
            train_loop_config={"argv": list(argv), "cwd": os.getcwd(), "stop_file": stop_path},
            torch_config=TorchConfig(backend=cfg.ddp_backend, timeout_s=int(cfg.ddp_timeout)),
            scaling_config=ScalingConfig(
                num_workers=cfg.ray_num_workers,
                use_gpu=use_gpu,
                resources_per_worker=resources,
                placement_strategy=cfg.placement_strategy,
            ),
            run_config=RunConfig(name=cfg.ray_run_name, storage_path=os.path.abspath(cfg.ray_storage_path)),
        )
        _say(f"tunekit: starting {cfg.ray_num_workers} processes with Ray Train ({_describe(resources)} each)")
        failed = None
        with StopByFile(stop_path) as stops:
            try:
                trainer.fit()
            except WorkerGroupError as exc:
                failed = failure_summary(exc.worker_failures)
            except TrainingFailedError as exc:  # the controller's own failure (scheduling, Ray itself)
                failed = f"error: distributed training failed: Ray Train stopped: {exc}"
    finally:
        if started:
            ray.shutdown()  # flushes the workers' last lines: the summary comes after them
    if failed:
        _say(failed)
        return 1
    if stops.received:  # the ranks saved their checkpoint and ended: the run ends because of the signal
        _say(f"tunekit: the run was stopped by {stops.received[0].name}")
        return 128 + int(stops.received[0])
    return 0


def _describe(resources: Mapping[str, float]) -> str:
    return ", ".join(f"{value:g} {name}" for name, value in resources.items())


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
