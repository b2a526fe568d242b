"""Every refusal of ``tunekit train`` that needs only the config and the machine, before any process starts.

:func:`preflight` runs first in ``tunekit train`` (``tunekit.flow.train_command``), in the parent before it
relaunches under torchrun and in a single process before anything loads, so a run that cannot work ends in
seconds with one ``error:`` line (exit 2) instead of after torchrun started its ranks, DeepSpeed built its ops or
the model loaded. Under a launcher the ranks run it too (it is cheap), which covers runs started by an external
``torchrun``/``deepspeed``. In order:

1. the config's rules of a training run (``config.schema.run_problems``), the DeepSpeed file against the options
   (every contradiction in one error: ``deepspeed_config.option_conflicts``), FSDP settings, the fp8 recipe;
2. the files the config names: model folder (``ptuning`` on its latent attention refused from its config.json),
   ``output_dir`` (never overwritten silently), every dataset name in ``dataset_info.json`` (or a file);
3. the machine (:func:`check_machine`): fp16 needs an accelerator, bf16 a GPU of compute capability 8.0 or newer
   (or the CPU), fp8 a GPU of 8.9 or newer; ``train/arguments.py`` applies the same function;
4. packages: DeepSpeed and the ops it builds, fp8's backend, the trackers, GPU-only kernels, the quantization
   library of ``quantization_bit``/``quantization_method`` and the one a pre-quantized (GPTQ/AWQ/AQLM) model
   folder loads through (``model/loader.py``'s checks, which the ranks run again before the weights load).

Nothing heavy is imported: torch only on a machine with NVIDIA devices (to read their compute capability) or
when a precision option needs to know about a non-CUDA accelerator; never transformers or the model.
"""

from __future__ import annotations

from ..config.problems import config_error
from ..config.schema import Config, run_problems
from ..data.dataset_info import resolve_datasets
from ..data.tokenized_cache import META
from ..errors import ConfigError
from ..model.loader import _read_config_json, attention_implementation, check_accelerators, is_local_path, model_path
from ..model.prompt_adapters import check_prefix_attention
from ..model.quantization import check_prequantized, check_quantization_packages
from ..model.sequence_split import check_sequence_split
from .engines import distributed
from .engines.deepspeed_config import read_deepspeed, require_deepspeed
from .engines.distributed import _has_gpu, check_deepspeed_machine
from .fp8 import fp8_recipe, require_backend
from .machine import Machine, check_machine, this_machine  # noqa: F401 - preflight's names too
from .run import check_output_dir
from .trackers import check_trackers


def preflight(cfg: Config, machine: Machine | None = None) -> None:
    """Raise the first :class:`~tunekit.errors.TunekitError` that ``cfg`` meets on this machine (see the module doc);
    ``machine`` defaults to :func:`this_machine`."""
    check_config(cfg)
    check_paths(cfg)
    check_machine(cfg, machine)
    check_packages(cfg)


def check_config(cfg: Config) -> None:
    """The rules of a training run, the DeepSpeed file against the options, FSDP settings, the fp8 recipe."""
    problems = list(run_problems(cfg))
    if problems:
        raise ConfigError("\n".join(p.message for p in problems), problems)
    distributed.check_divisibility(cfg, distributed.world_size(cfg))  # a DeepSpeed file's numbers, cp_size
    distributed.fsdp_settings(cfg)
    if cfg.fp8:
        fp8_recipe(cfg)


def check_paths(cfg: Config) -> None:
    """The model folder, ``output_dir`` and every dataset name the run reads."""
    from pathlib import Path

    path = model_path(cfg)
    if cfg.finetuning_type == "ptuning" and is_local_path(path):  # a prefix on latent attention: before data is read
        check_prefix_attention(cfg.finetuning_type, _read_config_json(Path(path)))
    if cfg.cp_size > 1 and is_local_path(path):  # heads, layer kinds, media: before any process starts
        check_sequence_split(cfg.cp_size, _read_config_json(Path(path)))
    check_output_dir(cfg)
    check_datasets(cfg)


def check_datasets(cfg: Config) -> None:
    """Each name of ``dataset`` and ``eval_dataset`` is in ``dataset_info.json`` or a file (records are read later);
    nothing to check when the tokenized data is reused from ``tokenized_path``."""
    from pathlib import Path

    if cfg.tokenized_path and Path(cfg.tokenized_path, META).is_file() and not cfg.overwrite_cache:
        return
    if not cfg.dataset_names and (cfg.do_train or not cfg.eval_dataset_names):
        raise config_error("run_dataset_unset", ("dataset",))
    for names in (cfg.dataset_names, cfg.eval_dataset_names):
        if names:
            resolve_datasets(names, cfg.dataset_dir)


def check_packages(cfg: Config) -> None:
    """DeepSpeed and the ops it builds, fp8's backend, the trackers, GPU-only kernels, quantization libraries."""
    if cfg.deepspeed:
        check_deepspeed_machine(cfg)
        require_deepspeed(read_deepspeed(cfg.deepspeed), on_gpu=_has_gpu(cfg))
    if cfg.fp8:
        require_backend(fp8_recipe(cfg))

    check_trackers(cfg)
    if cfg.enable_liger_kernel or cfg.use_unsloth:
        check_accelerators(cfg)
    if cfg.flash_attn == "fa2":  # the package, then a GPU (model/loader.py)
        attention_implementation(cfg)
    check_quantization(cfg)


def check_quantization(cfg: Config) -> None:
    """``quantization_bit``'s library, and a local model folder saved already quantized (its config.json's
    ``quantization_config``): the same decisions as ``model/loader.load_model``, before any process starts."""
    from pathlib import Path
    from types import SimpleNamespace

    check_quantization_packages(cfg)
    path = model_path(cfg)
    if is_local_path(path):
        quantized = _read_config_json(Path(path)).get("quantization_config")
        if quantized:
            check_prequantized(SimpleNamespace(quantization_config=quantized), cfg, path)
