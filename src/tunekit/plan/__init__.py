"""Know before you train: steps, memory per device, time and a configuration that fits (``tunekit plan``)."""

from .planner import apply_auto_fit, make_plan

__all__ = ["apply_auto_fit", "make_plan"]
