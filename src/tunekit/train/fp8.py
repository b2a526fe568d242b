"""FP8 mixed precision (``fp8``, ``fp8_backend``, ``fp8_enable_fsdp_float8_all_gather``) through accelerate.

As LLaMA-Factory's ``train/fp8_utils.py``: accelerate runs the step with ``mixed_precision="fp8"`` and one recipe
handler (``kwargs_handlers``):

* ``fp8_backend: auto`` / ``torchao`` — ``AORecipeKwargs(config, module_filter_func)``: torchao swaps the chosen
  ``nn.Linear`` layers for ``Float8Linear`` (dynamic scaling). The config is torchao's ``rowwise`` recipe
  (``Float8LinearConfig.from_recipe_name``), LLaMA-Factory's choice. With ``fp8_enable_fsdp_float8_all_gather`` it is
  the ``tensorwise`` recipe with ``enable_fsdp_float8_all_gather=True`` instead (torchao all-gathers FSDP2 weights in
  float8 only with tensor-wise scales; LLaMA-Factory only logs the option). Converted: the 2-D linear layers whose
  name contains none of ``embed``, ``lm_head``, ``output``, ``classifier`` and whose both sides are multiples of 16
  (:func:`fp8_module_filter`, LLaMA-Factory's filter).
* ``fp8_backend: te`` — ``TERecipeKwargs(fp8_format="HYBRID", amax_history_len=16, amax_compute_algo="max")``
  (Transformer Engine, delayed scaling: E4M3 forward, E5M2 gradients).
* ``msamp`` is refused (MS-AMP is unmaintained; LLaMA-Factory silently runs torchao's defaults for it).

:func:`fp8_recipe` is the pure decision (tested on CPU); :func:`accelerate_handlers` builds accelerate's objects from
it and names the extra to install when the backend's package is missing; :class:`Fp8AcceleratorMixin` hands them to
the Trainer's ``Accelerator``. GPU only: ``train/machine.py`` refuses fp8 without a CUDA device of compute
capability 8.9 or newer (Ada, Hopper), in ``tunekit train``'s preflight before any process starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.problems import Said, config_error
from ..config.schema import Config
from ..errors import EnvironmentProblem

SKIPPED_NAMES = ("embed", "lm_head", "output", "classifier")
MIN_CAPABILITY = (8, 9)  # float8 matmuls (torch._scaled_mm): Ada / Hopper and newer
INSTALL = 'pip install -c constraints.txt -e ".[fp8]"'


@dataclass(frozen=True)
class Fp8Recipe:
    """What accelerate is given: ``backend`` (``AO`` or ``TE``) and its settings."""

    backend: str
    recipe_name: str | None = None  # torchao: Float8LinearConfig.from_recipe_name
    enable_fsdp_float8_all_gather: bool = False  # torchao
    fp8_format: str | None = None  # TE
    amax_history_len: int | None = None  # TE
    amax_compute_algo: str | None = None  # TE


def fp8_recipe(cfg: Config) -> Fp8Recipe:
    """The recipe of ``cfg`` (``fp8_backend``, ``fp8_enable_fsdp_float8_all_gather``); see the module doc."""
    backend = cfg.fp8_backend
    if backend == "te":
        return Fp8Recipe("TE", fp8_format="HYBRID", amax_history_len=16, amax_compute_algo="max")
    if backend in ("auto", "torchao"):
        if cfg.fp8_enable_fsdp_float8_all_gather:
            return Fp8Recipe("AO", recipe_name="tensorwise", enable_fsdp_float8_all_gather=True)
        return Fp8Recipe("AO", recipe_name="rowwise")
    raise config_error("fp8_backend_unknown", ("fp8_backend",), backend=backend)


def fp8_module_filter(module, name: str) -> bool:
    """Whether torchao converts ``module`` (called ``name``) to float8: LLaMA-Factory's ``module_filter_func``."""
    if any(skip in name.lower() for skip in SKIPPED_NAMES):
        return False
    weight = getattr(module, "weight", None)
    if weight is None or weight.dim() != 2:
        return False
    out_features, in_features = weight.shape
    return in_features % 16 == 0 and out_features % 16 == 0


def require_backend(recipe: Fp8Recipe, installed=None) -> None:
    """A clear error naming what to install when the backend's package is missing (no import: tunekit train's preflight
    calls it before any process starts); ``installed(module) -> bool`` defaults to "importable"."""
    if installed is None:
        from importlib.util import find_spec

        installed = lambda module: find_spec(module) is not None  # noqa: E731
    if recipe.backend == "TE" and not installed("transformer_engine"):
        raise EnvironmentProblem(Said("fp8_no_te"))
    if recipe.backend == "AO" and not installed("torchao"):
        raise EnvironmentProblem(Said("fp8_no_torchao", install=INSTALL))


def accelerate_handlers(recipe: Fp8Recipe) -> list:
    """accelerate's recipe handler for ``recipe``; a clear error naming what to install when its package is missing."""
    if recipe.backend == "TE":
        from accelerate.utils import TERecipeKwargs, is_transformer_engine_available

        require_backend(recipe, lambda module: is_transformer_engine_available())
        return [
            TERecipeKwargs(
                fp8_format=recipe.fp8_format,
                amax_history_len=recipe.amax_history_len,
                amax_compute_algo=recipe.amax_compute_algo,
            )
        ]
    try:
        from torchao.float8 import Float8LinearConfig
    except ImportError:
        Float8LinearConfig = None
    if Float8LinearConfig is None:
        require_backend(recipe, lambda module: False)
    import dataclasses

    from accelerate.utils import AORecipeKwargs

    config = Float8LinearConfig.from_recipe_name(recipe.recipe_name)
    if recipe.enable_fsdp_float8_all_gather:
        config = dataclasses.replace(config, enable_fsdp_float8_all_gather=True)
    return [AORecipeKwargs(config=config, module_filter_func=fp8_module_filter)]


class Fp8AcceleratorMixin:
    """``Trainer._build_accelerator_args`` with ``mixed_precision="fp8"`` and the recipe handler when ``fp8`` is on."""

    def _build_accelerator_args(self, **kwargs):
        args = super()._build_accelerator_args(**kwargs)
        cfg = getattr(self, "tunekit_config", None)
        if cfg is not None and getattr(cfg, "fp8", False):
            args["mixed_precision"] = "fp8"
            args["kwargs_handlers"] = [*args.get("kwargs_handlers", []), *accelerate_handlers(fp8_recipe(cfg))]
        return args
