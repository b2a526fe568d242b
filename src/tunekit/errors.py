"""User-facing errors.

A :class:`TunekitError` is a mistake in what the user gave us (config, data, paths, environment).
The CLI prints its message on stderr and exits non-zero without a traceback (``TUNEKIT_DEBUG=1``
shows one). Everything else is a bug in tunekit or a library and keeps its traceback.
"""

from __future__ import annotations


class TunekitError(Exception):
    """An error the user can fix; the message says what and how."""

    exit_code = 2


class ConfigError(TunekitError):
    """Invalid option, value or combination of options.

    ``problems``: the :class:`tunekit.config.problems.Problem` s behind the message (each names the options it
    concerns, so the web board shows it next to them); empty when the error is about no option in particular.
    The message is what users read and stays the same with or without them."""

    def __init__(self, message: str = "", problems=()):
        super().__init__(message)
        self.problems = tuple(problems)


class DataError(TunekitError):
    """A dataset file or record that cannot be used."""


class RecordError(DataError):
    """One record is unusable; the pipeline raises it or skips and counts it (``bad_records``)."""


class ModelError(TunekitError):
    """A model path, weight file or architecture problem."""


class EnvironmentProblem(TunekitError):
    """A missing package, device or service (tracker, network, GPU)."""


class TrainingDiverged(TunekitError):
    """The loss, a gradient or a weight became inf/NaN: training stopped without saving that step."""

    exit_code = 3
