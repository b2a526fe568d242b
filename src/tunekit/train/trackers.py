"""Experiment trackers (report_to / use_swanlab): checked before training so a missing package or an
unreachable service fails in seconds with what to do, not after the model has loaded."""

from __future__ import annotations

import importlib.util
import os
import socket

from ..errors import EnvironmentProblem

PACKAGES = {"tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",), "swanlab": ("swanlab",), "mlflow": ("mlflow",)}
SWANLAB_HOST = ("api.swanlab.cn", 443)


def _reachable(host: tuple[str, int], timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection(host, timeout=timeout):
            return True
    except OSError:
        return False


def check_trackers(cfg) -> list[str]:
    """Validate every tracker, set its environment, and return the names for TrainingArguments.report_to."""
    names = cfg.trackers
    for name in names:
        if not any(importlib.util.find_spec(pkg) for pkg in PACKAGES[name]):
            raise EnvironmentProblem(f"report_to includes {name} but the {PACKAGES[name][0]} package is not installed: "
                                     f"pip install {PACKAGES[name][0]}, or remove {name} from report_to"
                                     + (" / set use_swanlab: false" if name == "swanlab" else "") + ".")
    if "wandb" in names and os.environ.get("WANDB_MODE") not in ("offline", "disabled") and not os.environ.get("WANDB_API_KEY"):
        netrc = os.path.expanduser("~/.netrc")
        if not (os.path.isfile(netrc) and "api.wandb.ai" in open(netrc, encoding="utf-8", errors="ignore").read()):
            raise EnvironmentProblem("wandb needs a login: set WANDB_API_KEY (or run `wandb login`), or WANDB_MODE=offline to log locally.")
    if "swanlab" in names:
        _setup_swanlab(cfg)
    return names


def _setup_swanlab(cfg) -> None:
    mode = cfg.swanlab_mode
    if mode == "cloud":
        key = cfg.swanlab_api_key or os.environ.get("SWANLAB_API_KEY")
        if not _reachable(SWANLAB_HOST):
            raise EnvironmentProblem(f"swanlab_mode: cloud needs network access to {SWANLAB_HOST[0]}, which is not reachable "
                                     f"from this machine. Use swanlab_mode: local (logs to disk, view with `swanlab watch`) "
                                     f"or remove use_swanlab.")
        if not key and not os.path.isfile(os.path.expanduser("~/.swanlab/.netrc")):
            raise EnvironmentProblem("swanlab_mode: cloud needs an API key: set swanlab_api_key or SWANLAB_API_KEY "
                                     "(or run `swanlab login`), or use swanlab_mode: local.")
        if key:
            os.environ["SWANLAB_API_KEY"] = key
    os.environ["SWANLAB_MODE"] = mode
    if cfg.swanlab_project:
        os.environ["SWANLAB_PROJECT"] = cfg.swanlab_project
    if cfg.swanlab_workspace:
        os.environ["SWANLAB_WORKSPACE"] = cfg.swanlab_workspace
    if cfg.swanlab_run_name:
        os.environ["SWANLAB_EXP_NAME"] = cfg.swanlab_run_name
    os.environ["SWANLAB_LOG_DIR"] = cfg.swanlab_logdir or os.path.join(cfg.output_dir, "swanlog")
