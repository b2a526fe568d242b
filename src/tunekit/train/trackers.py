"""Experiment trackers (report_to / use_swanlab): checked before training so a missing package or an
unreachable service fails in seconds with what to do, not after the model has loaded."""

from __future__ import annotations

import importlib.util
import os
import socket
from pathlib import Path

from ..config.problems import Said
from ..config.schema import Config
from ..errors import EnvironmentProblem

PACKAGES = {
    "tensorboard": ("tensorboard", "tensorboardX"),
    "wandb": ("wandb",),
    "swanlab": ("swanlab",),
    "mlflow": ("mlflow",),
}
SWANLAB_HOST = ("api.swanlab.cn", 443)


def _reachable(host: tuple[str, int], timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection(host, timeout=timeout):
            return True
    except OSError:
        return False


def check_trackers(cfg: Config) -> list[str]:
    """Validate every tracker, set its environment, and return the names for TrainingArguments.report_to.

    SwanLab is left out of report_to: transformers' built-in SwanLab callback does not work with current
    swanlab releases, so :func:`tracker_callbacks` adds swanlab's own callback instead.
    """
    names = cfg.trackers
    for name in names:
        if not any(importlib.util.find_spec(pkg) for pkg in PACKAGES[name]):
            swanlab = Said("part_swanlab_off") if name == "swanlab" else None
            raise EnvironmentProblem(
                Said("tracker_not_installed", name=name, package=PACKAGES[name][0], swanlab=swanlab)
            )
    if (
        "wandb" in names
        and os.environ.get("WANDB_MODE") not in ("offline", "disabled")
        and not os.environ.get("WANDB_API_KEY")
    ):
        netrc = os.path.expanduser("~/.netrc")
        if not (os.path.isfile(netrc) and "api.wandb.ai" in Path(netrc).read_text(encoding="utf-8", errors="ignore")):
            raise EnvironmentProblem(Said("tracker_wandb_login"))
    if "swanlab" in names:
        _check_swanlab(cfg)
    return [n for n in names if n != "swanlab"]


def _check_swanlab(cfg: Config) -> None:
    if cfg.swanlab_mode != "cloud":
        return
    key = cfg.swanlab_api_key or os.environ.get("SWANLAB_API_KEY")
    if not _reachable(SWANLAB_HOST):
        raise EnvironmentProblem(Said("tracker_swanlab_offline", host=SWANLAB_HOST[0]))
    if not key and not os.path.isfile(os.path.expanduser("~/.swanlab/.netrc")):
        raise EnvironmentProblem(Said("tracker_swanlab_key"))
    if key:
        os.environ["SWANLAB_API_KEY"] = key


def tracker_callbacks(cfg: Config) -> list:
    """swanlab's own Trainer callback (local/offline modes write to output_dir/swanlog)."""
    if "swanlab" not in cfg.trackers:
        return []
    from swanlab.integration.transformers import SwanLabCallback

    mode = {"cloud": "online"}.get(cfg.swanlab_mode, cfg.swanlab_mode)
    if mode == "local" and importlib.util.find_spec("swanboard") is None:
        mode = "offline"  # same files on disk; 'local' adds swanlab's dashboard (pip install 'swanlab[dashboard]')
    return [
        SwanLabCallback(
            project=cfg.swanlab_project,
            workspace=cfg.swanlab_workspace,
            experiment_name=cfg.swanlab_run_name or cfg.run_name,
            mode=mode,
            log_dir=cfg.swanlab_logdir or os.path.join(cfg.output_dir, "swanlog"),
        )
    ]
