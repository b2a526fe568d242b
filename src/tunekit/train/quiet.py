"""Start-up notices of libraries that are not the user's business, silenced where tunekit imports them.

Each filter names the library's logger or warning category *and* the message, so a notice that matters
(a new warning, the same library's other messages) still reaches the user. Nothing is blanket-ignored.

- DeepSpeed, imported by transformers/accelerate when installed, logs "Setting accelerator to CPU. If you have
  GPU or other accelerator, we were unable to detect it." on every CPU run (``deepspeed/accelerator/
  real_accelerator.py``, logger ``DeepSpeed``): on a CPU run without ``deepspeed:`` it says nothing the user
  asked about. With ``deepspeed`` set it stays (then it explains why ZeRO runs on the CPU).
- bitsandbytes, imported by peft when installed, logs "Failed to load CPU gemm_4bit_forward from
  kernels-community ..." on CPUs with AVX512-BF16 when the ``kernels`` package is missing
  (``bitsandbytes/backends/cpu/ops.py``): a speed notice about 4-bit kernels, kept when ``quantization_bit`` is set.
- peft still calls transformers' ``is_gradient_checkpointing``, which transformers 5 renamed and warns about
  with a FutureWarning on every run (filtered by message and category).
- peft's prefix tuning (``finetuning_type: ptuning``) hands the model its prefix as ``past_key_values``, which
  transformers 5 renamed ``cache``: a FutureWarning on every step of such a run (filtered by message and category).
"""

from __future__ import annotations

import logging
import warnings

from ..config.schema import Config

DEEPSPEED_LOGGER = "DeepSpeed"
DEEPSPEED_CPU_NOTICE = "Setting accelerator to CPU."
BNB_CPU_LOGGER = "bitsandbytes.backends.cpu.ops"
BNB_KERNELS_NOTICE = "Failed to load CPU gemm_4bit_forward from kernels-community"
GRADIENT_CHECKPOINTING_RENAME = r".*is_gradient_checkpointing.* is deprecated"
PAST_KEY_VALUES_RENAME = r"`past_key_values` is deprecated and will be removed"


class DropMessage(logging.Filter):
    """Drops the records of one logger whose message starts with ``prefix`` (all others pass)."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)

    def __eq__(self, other) -> bool:  # one filter per logger however often a process builds a run
        return isinstance(other, DropMessage) and other.prefix == self.prefix

    def __hash__(self) -> int:
        return hash(self.prefix)


def _drop(logger_name: str, prefix: str) -> None:
    logger = logging.getLogger(logger_name)  # the same object the library gets, before or after it imports
    if DropMessage(prefix) not in logger.filters:
        logger.addFilter(DropMessage(prefix))


def quiet_library_notices(cfg: Config) -> None:
    """Install the filters this run's options allow (see the module docstring); call before the libraries load."""
    warnings.filterwarnings("ignore", message=GRADIENT_CHECKPOINTING_RENAME, category=FutureWarning)
    if cfg.finetuning_type == "ptuning":
        warnings.filterwarnings("ignore", message=PAST_KEY_VALUES_RENAME, category=FutureWarning)
    if not cfg.deepspeed:
        _drop(DEEPSPEED_LOGGER, DEEPSPEED_CPU_NOTICE)
    if cfg.quantization_bit is None:
        _drop(BNB_CPU_LOGGER, BNB_KERNELS_NOTICE)
