"""The run's precision, decided once from the device the run trains on; the trainer and the planner read the answer.

One rule (:func:`decide_precision`, pure: a config and a :class:`~tunekit.train.machine.Machine` in, a
:class:`PrecisionDecision` out):

* Precision options written in the config always win: ``bf16`` or ``fp16`` (``false`` included: ``bf16: false``
  alone is fp32), ``pure_bf16``, ``fp8``, ``dtype`` other than ``auto``, or a DeepSpeed file whose ``fp16``/``bf16``
  block is not ``"auto"``. ``dtype: float32`` is the fp32 path exactly as before. A saved ``tunekit_config.yaml``
  writes ``bf16``/``fp16``, so it reproduces the run's precision on any machine.
* NVIDIA GPUs of compute capability 8.0 or newer: bf16 mixed precision (``bf16: true``: frozen weights loaded in bf16,
  trainable ones in fp32, autocast), what Axolotl's ``bf16: auto`` runs and LLaMA-Factory's examples set
  (LLaMA-Factory without ``bf16`` loads the checkpoint's dtype, bf16 for nearly every model, with no autocast).
* Older NVIDIA GPUs (V100, T4): fp16 mixed precision with loss scaling (``fp16: true``), the fallback LLaMA-Factory's
  ``infer_optim_dtype`` and Axolotl's ``bf16: auto`` choose there; fp32 with ``fsdp``, which refuses fp16.
* A CPU that computes bf16 natively (AVX512_BF16 or AMX): bf16 mixed precision too, whatever the method. LoRA /
  OFT / freeze (frozen weights in bf16, trainable ones in fp32): measured 2.3x faster than fp32 and 1.2x faster than
  LLaMA-Factory's default layout (frozen weights in the checkpoint's dtype, trainable ones upcast to fp32, no
  autocast) at the same loss (benchmarks/README.md, "Precision"). Full fine-tuning (every weight trains, so fp32
  weights that autocast casts at every step): measured 1.8-2.7x faster than fp32 at the same loss, for ~22 % more
  peak memory (the bf16 copies, which the planner counts); ``dtype: float32`` is LLaMA-Factory's fp32 there.
* Any other CPU, Apple MPS / Intel XPU, quantized weights on the CPU: fp32 (bf16 without native support is emulated,
  several times slower; the others are unmeasured).

The decision is applied as the options that express it (:func:`apply_precision`: ``bf16: true`` or ``fp16: true``),
so the model loader (``model.loader.load_dtype_name``), ``TrainingArguments``, a reference or value model, the
planner's ``resolve_setup`` and the written ``tunekit_config.yaml`` all read the same values, and the saved file
reproduces the run on any machine. ``tunekit/flow.py`` applies it before the resume check, which compares options.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..config import build_config
from ..config.schema import Config
from ..model.loader import load_dtype_name
from .engines.deepspeed_config import field, read_deepspeed
from .engines.distributed import is_main_process
from .machine import BF16_CAPABILITY, Machine, run_machine

_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}


@dataclass(frozen=True)
class PrecisionDecision:
    """What a run computes in: ``weights`` the dtype the (frozen) base weights load in, ``trainable`` the dtype of the
    trained parameters, ``autocast`` ``"bf16"``/``"fp16"`` (TrainingArguments' bf16/fp16) or None, ``reason`` one
    line, ``explicit`` whether the config's options chose it, ``every_weight_trains`` full fine-tuning (no frozen base:
    the weights load in ``weights`` and train in ``trainable``)."""

    weights: str
    trainable: str
    autocast: str | None
    reason: str
    explicit: bool
    every_weight_trains: bool = False

    @property
    def options(self) -> dict[str, bool]:
        """The options that express a decision the config did not make (empty for an explicit or an fp32 one)."""
        if self.explicit or self.autocast is None:
            return {}
        return {self.autocast: True}

    @property
    def weight_bytes(self) -> int:
        """Bytes per frozen weight (the planner's ``base_bytes``)."""
        return _BYTES[self.weights]

    @property
    def compute_bytes(self) -> int:
        """Bytes per activation element: 2 under autocast, else the weights' dtype."""
        return 2 if self.autocast else self.weight_bytes

    @property
    def trainable_bytes(self) -> int:
        return _BYTES[self.trainable]

    def summary(self) -> str:
        mixed = f", {self.autocast} autocast" if self.autocast else ""
        if self.weights == self.trainable and not self.autocast:
            return f"{self.weights} throughout"
        if self.every_weight_trains:
            return f"weights loaded in {self.weights}, trained in {self.trainable}{mixed}"
        return f"frozen weights {self.weights}, trainable {self.trainable}{mixed}"

    def message(self) -> str:
        """The line a run prints at its start."""
        return f"precision: {self.summary()} ({self.reason})"


def _deepspeed_precision(cfg: Config) -> str | None:
    """``"bf16"``, ``"fp16"`` or ``"fp32"`` when the DeepSpeed file sets its fp16/bf16 blocks (not ``"auto"``),
    else None."""
    if not cfg.deepspeed:
        return None

    config = read_deepspeed(cfg.deepspeed).config
    given = {key: field(config, f"{key}.enabled") for key in ("bf16", "fp16")}
    if not any(isinstance(value, bool) for value in given.values()):
        return None
    return next((key for key, value in given.items() if value is True), "fp32")


def _explicit(cfg: Config) -> list[str]:
    """The precision options the config sets, as written (``bf16: true``, ``bf16: false``, ``dtype: float32``, ...)."""
    written = cfg.model_fields_set
    names = [
        f"{key}: {str(bool(getattr(cfg, key))).lower()}"
        for key in ("bf16", "fp16", "pure_bf16", "fp8")
        if getattr(cfg, key, False) or (key in ("bf16", "fp16") and key in written)
    ]
    if cfg.dtype != "auto":
        names.append(f"dtype: {cfg.dtype}")
    deepspeed = _deepspeed_precision(cfg)
    if deepspeed is not None:
        names.append(f"the DeepSpeed file's {deepspeed} setting")
    return names


def _decided(autocast: str | None, reason: str) -> PrecisionDecision:
    """A device default: frozen weights in the autocast dtype (fp32 without), trainable weights in fp32."""
    weights = {"bf16": "bfloat16", "fp16": "float16", None: "float32"}[autocast]
    return PrecisionDecision(weights=weights, trainable="float32", autocast=autocast, reason=reason, explicit=False)


def stated_precision(cfg: Config) -> PrecisionDecision:
    """The precision the options state as they are, with no machine: what the loader and TrainingArguments run for
    ``cfg``. A run's options carry its decision (:func:`resolve_precision`), so for a run this is the decision."""
    given = _explicit(cfg)
    weights = load_dtype_name(cfg)
    autocast = "bf16" if cfg.bf16 else "fp16" if cfg.fp16 else None
    trainable = "bfloat16" if cfg.pure_bf16 else "float64" if weights == "float64" else "float32"
    reason = f"set by {', '.join(given)}" if given else "no precision option set"
    return PrecisionDecision(
        weights=weights,
        trainable=trainable,
        autocast=autocast,
        reason=reason,
        explicit=bool(given),
        every_weight_trains=cfg.finetuning_type == "full",
    )


def decide_precision(cfg: Config, machine: Machine) -> PrecisionDecision:
    """The precision of a run of ``cfg`` on ``machine`` (the device the run trains on, not the one the command
    starts on): the options when they choose one, else the rule of this module's docstring."""
    stated = stated_precision(cfg)
    device = replace(_device_default(cfg, machine), every_weight_trains=stated.every_weight_trains)
    if not stated.explicit:
        return device
    if device.autocast is not None and _same(stated, device):  # a run's applied decision, or the user's equal choice
        return PrecisionDecision(
            stated.weights,
            stated.trainable,
            stated.autocast,
            explicit=True,
            reason=f"{stated.reason}, this device's default: {device.reason}",
            every_weight_trains=stated.every_weight_trains,
        )
    return stated


def _same(a: PrecisionDecision, b: PrecisionDecision) -> bool:
    return (a.weights, a.trainable, a.autocast) == (b.weights, b.trainable, b.autocast)


def _device_default(cfg: Config, machine: Machine) -> PrecisionDecision:
    """The rule for a config that states no precision (it reads the method, fsdp and quantization, not the options)."""
    if machine.gpus:
        return _cuda(cfg, machine)
    if machine.other_accelerator:
        return _decided(None, "Apple MPS / Intel XPU: fp32, bf16 there is unmeasured (set bf16: true to use it)")
    if not machine.cpu_bf16:
        return _decided(
            None,
            "this CPU has no native bf16 (no AVX512_BF16 or AMX), where bf16 is emulated and "
            "several times slower; bf16: true asks for it",
        )
    if cfg.quantization_bit is not None:
        return _decided(None, "quantized weights on the CPU: fp32, bf16 there is unmeasured (set bf16: true)")
    return _decided(
        "bf16",
        "this CPU computes bf16 natively (AVX512_BF16 / AMX): bf16 mixed precision, measured "
        "2x faster than fp32 at equal loss; dtype: float32 for fp32",
    )


def _cuda(cfg: Config, machine: Machine) -> PrecisionDecision:
    older = [i for i, capability in enumerate(machine.gpus) if tuple(capability) < BF16_CAPABILITY]
    if not older:
        return _decided(
            "bf16",
            "the GPU computes bf16 natively (compute capability 8.0 or newer): bf16 mixed "
            "precision, as Axolotl's bf16: auto and LLaMA-Factory's examples run it; "
            "dtype: float32 for fp32",
        )
    i = older[0]
    name = machine.names[i] if i < len(machine.names) else f"GPU {i}"
    capability = "{}.{}".format(*machine.gpus[i])
    if cfg.fsdp:
        return _decided(None, f"{name} (compute capability {capability}) has no bf16 and fsdp refuses fp16: fp32")
    return _decided(
        "fp16",
        f"{name} (compute capability {capability}) has no bf16: fp16 mixed precision with loss "
        "scaling, LLaMA-Factory's and Axolotl's fallback there; dtype: float32 for fp32",
    )


def apply_precision(cfg: Config, decision: PrecisionDecision):
    """``cfg`` with the options that express ``decision`` set (as ``gradient_checkpointing: auto`` writes its
    decision): the loader, TrainingArguments, the planner and ``tunekit_config.yaml`` read them."""
    if not decision.options:
        return cfg

    values = {key: getattr(cfg, key) for key in cfg.model_fields_set}
    values.update(decision.options)
    return build_config(values)


def resolve_precision(cfg: Config, machine: Machine | None = None):
    """``(cfg with the decision applied, the decision)`` for the run of ``cfg`` (``machine``: the device it trains on,
    by default this machine's as the run will use it, ``train.machine.run_machine``)."""
    if machine is None:
        machine = run_machine(cfg)
    decision = decide_precision(cfg, machine)
    return apply_precision(cfg, decision), decision


def run_precision(cfg: Config, machine: Machine | None = None):
    """``(cfg with the run's precision applied, the decision)``, the decision printed on the main process
    (``tunekit/flow.py``)."""
    cfg, decision = resolve_precision(cfg, machine)
    if is_main_process():
        print(decision.message(), flush=True)
    return cfg, decision


def precision_notes(decision: PrecisionDecision) -> dict[str, str]:
    """``{option: comment}`` for ``save_config``: what ran and why, above the option that says it."""
    key = {"bf16": "bf16", "fp16": "fp16"}.get(decision.autocast, "dtype")
    return {key: f"precision: {decision.summary()} ({decision.reason})"}
