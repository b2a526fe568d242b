"""Logging, progress, plots and experiment trackers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from ..lists import split_list
from ..problems import Problem, problem
from .base import OptionGroup

if TYPE_CHECKING:  # annotations only: the schema combines this group
    from ..schema import Config

KNOWN_TRACKERS = ("none", "tensorboard", "wandb", "swanlab", "mlflow")


class LoggingOptions(OptionGroup):
    GROUP = "logging"
    TITLE = "Logging and output"

    logging_steps: float = Field(
        10, gt=0, description="Log loss, learning rate and grad norm every N optimizer steps."
    )
    logging_first_step: bool = Field(False, description="Also log the first step.")
    plot_loss: bool = Field(False, description="Write training_loss.png (and training_eval_loss.png) to output_dir.")
    report_to: str = Field(
        "none",
        description="Trackers, comma-separated: none, tensorboard, wandb, swanlab, mlflow (each needs its package).",
    )
    run_name: str | None = Field(None, description="Run name shown in trackers.")
    disable_tqdm: bool = Field(False, description="Hide the progress bar.")
    use_swanlab: bool = Field(
        False, description="Log to SwanLab (LLaMA-Factory's option; same as adding swanlab to report_to)."
    )
    swanlab_project: str | None = Field("tunekit", description="SwanLab project name.")
    swanlab_workspace: str | None = Field(None, description="SwanLab workspace.")
    swanlab_run_name: str | None = Field(None, description="SwanLab experiment name.")
    swanlab_mode: Literal["cloud", "local", "offline", "disabled"] = Field(
        "cloud", description="SwanLab mode: cloud needs network and an API key; local/offline write to disk."
    )
    swanlab_api_key: str | None = Field(None, description="SwanLab API key (or set SWANLAB_API_KEY).")
    swanlab_logdir: str | None = Field(None, description="SwanLab local log folder (default: output_dir/swanlog).")


def tracker_problems(cfg: Config) -> Iterator[Problem]:
    """``report_to`` names only trackers tunekit knows."""
    unknown_trackers = [t for t in split_list(cfg.report_to) if t not in KNOWN_TRACKERS]
    if unknown_trackers:
        yield problem(
            "trackers_unknown", ("report_to",), trackers=tuple(unknown_trackers), known=tuple(KNOWN_TRACKERS)
        )
