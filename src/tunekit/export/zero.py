"""DeepSpeed ZeRO checkpoints (``global_step*/`` with sharded model/optimizer states) -> a normal model folder.

The merge of the shards is DeepSpeed's own (``deepspeed.utils.zero_to_fp32``, the script every ZeRO checkpoint
ships); tunekit adds detection, the config/tokenizer files next to the weights, errors that say what is missing,
and **reads the files without running their pickles**. DeepSpeed's loaders call ``torch.load(weights_only=False)``,
which runs whatever code a crafted ``*_model_states.pt`` names. tunekit reads every file itself with
``torch.load(weights_only=True)`` and an allow-list of the few DeepSpeed types a real ZeRO-1/2/3 checkpoint holds
(:data:`tunekit.model.pickles.DEEPSPEED_SAFE_GLOBALS`, which resume checks too), then hands the parsed states
to DeepSpeed's merge functions (which do no I/O). A file that names any other type is refused before it is
unpickled, naming the file and the types; ``trust_pickle=True`` (``tunekit zero-to-fp32 --trust-pickle``) reads
such a file with a full unpickler, for checkpoints whose source you trust.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

from ..config.problems import Said
from ..data.media_columns import PROCESSOR_FILES
from ..errors import EnvironmentProblem, ModelError
from ..model.multimodal import model_class
from ..model.pickles import DEEPSPEED_SAFE_GLOBALS, deepspeed_safe_classes

#: files copied next to the consolidated weights (whatever the checkpoint has of them)
SIDE_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
) + PROCESSOR_FILES  # a vision-language / audio model's processor files, where the checkpoint has them


def zero_tag(folder: str | Path) -> str | None:
    """The ``global_step*`` tag of a ZeRO checkpoint folder, or None if ``folder`` is not one."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    latest = folder / "latest"
    tags = (
        [latest.read_text().strip()]
        if latest.is_file()
        else sorted(p.name for p in folder.glob("global_step*") if p.is_dir())
    )
    for tag in reversed(tags):
        if any((folder / tag).glob("*model_states.pt")):
            return tag
    return None


def safe_load(path: Path, trust_pickle: bool = False, mmap: bool = False):
    """``torch.load`` of a ZeRO checkpoint file that never runs code from it (unless ``trust_pickle``)."""
    import pickle

    import torch

    if trust_pickle:
        return torch.load(path, map_location="cpu", mmap=mmap, weights_only=False)
    try:
        extra = [
            g for g in torch.serialization.get_unsafe_globals_in_checkpoint(path) if g not in DEEPSPEED_SAFE_GLOBALS
        ]
    except Exception as exc:  # not a torch zip file, truncated, ...
        raise ModelError(Said("zero_unreadable", path=str(path), kind=type(exc).__name__, error=str(exc))) from None
    if extra:
        raise ModelError(
            Said(
                "zero_pickle_code",
                path=str(path),
                names=tuple(sorted(extra)[:8]),
                allowed=tuple(DEEPSPEED_SAFE_GLOBALS),
                folder=str(path.parent.parent),
            )
        )
    try:
        with torch.serialization.safe_globals(deepspeed_safe_classes()):
            return torch.load(path, map_location="cpu", mmap=mmap, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        error = str(exc).splitlines()[0][:300]
        raise ModelError(Said("zero_unsafe", path=str(path), kind=type(exc).__name__, error=error)) from None


def read_zero_state(ds_dir: Path, trust_pickle: bool = False) -> dict:
    """The fp32 state dict of one ``global_step*`` folder: DeepSpeed's merge over files read by :func:`safe_load`.

    Mirrors ``deepspeed.utils.zero_to_fp32._get_fp32_state_dict_from_zero_checkpoint`` (0.19.8): the same files,
    the same keys, the same checks; only the loading differs.
    """
    from deepspeed.checkpoint import constants as C
    from deepspeed.utils import zero_to_fp32 as z

    model_files = z.get_model_state_files(str(ds_dir))
    states = []
    for file in model_files:
        sd = safe_load(Path(file), trust_pickle)
        if not isinstance(sd, dict) or C.BUFFER_NAMES not in sd or "module" not in sd:
            raise ModelError(Said("zero_not_model_states", path=str(file), buffers=str(C.BUFFER_NAMES)))
        z._raise_if_autoep_zero3_partitioned_state(sd)
        names = sd[C.BUFFER_NAMES]
        buffers = {k: v.float() if v.is_floating_point() else v for k, v in sd["module"].items() if k in names}
        states.append(
            z.zero_model_state(
                buffers=buffers,
                param_shapes=sd[C.PARAM_SHAPES],
                shared_params=[[k, v] for k, v in sd["shared_params"].items()],
                ds_version=sd.get(C.DS_VERSION),
                frozen_param_shapes=sd.get(C.FROZEN_PARAM_SHAPES),
                frozen_param_fragments=sd.get(C.FROZEN_PARAM_FRAGMENTS),
            )
        )
    optim_files = z.get_optim_files(str(ds_dir))
    optim = []
    for file in optim_files:
        sd = safe_load(Path(file), trust_pickle, mmap=True)
        if (
            not isinstance(sd, dict)
            or C.OPTIMIZER_STATE_DICT not in sd
            or C.ZERO_STAGE not in sd[C.OPTIMIZER_STATE_DICT]
        ):
            raise ModelError(Said("zero_not_optim_states", path=str(file), entry=str(C.ZERO_STAGE)))
        sd[C.OPTIMIZER_STATE_DICT].pop("optimizer_state_dict", None)  # Adam moments: not needed for the weights
        optim.append(sd[C.OPTIMIZER_STATE_DICT])
    stage, world = int(optim[0][C.ZERO_STAGE]), optim[0][C.PARTITION_COUNT]
    world = max(world) if isinstance(world, list) else world
    if world != len(optim_files):
        raise ModelError(Said("zero_partial", path=str(ds_dir), count=len(optim_files), world=world))
    if stage not in (1, 2, 3):
        raise ModelError(Said("zero_unknown_stage", path=str(ds_dir), stage=stage))
    try:
        if stage <= 2:
            groups = [o[C.SINGLE_PARTITION_OF_FP32_GROUPS] for o in optim]
            state = z._get_fp32_state_dict_from_zero2_checkpoint(
                world, groups, states, False, optim[0].get(C.PARAM_ALIGNMENT_PADDINGS)
            )
        else:
            state = z._get_fp32_state_dict_from_zero3_checkpoint(
                world, [o[C.FP32_FLAT_GROUPS] for o in optim], states, False
            )
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise ModelError(
            Said("zero_damaged", stage=stage, path=str(ds_dir), kind=type(exc).__name__, error=str(exc))
        ) from None
    return z.to_torch_tensor(state)


def consolidate_zero(
    checkpoint_dir: str | Path, out_dir: str | Path, max_shard_size: int | str = "5GB", trust_pickle: bool = False
) -> Path:
    """Write fp32 safetensors (+ index when sharded) and the checkpoint's config/tokenizer files to ``out_dir``.

    The ZeRO files are read without running their pickles (see the module docstring); ``trust_pickle`` lifts that.
    """
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    tag = zero_tag(checkpoint_dir)
    if tag is None:
        raise ModelError(Said("zero_not_checkpoint", path=str(checkpoint_dir)))
    if not (checkpoint_dir / "config.json").is_file():
        raise ModelError(Said("zero_no_config", path=str(checkpoint_dir)))
    try:
        importlib.import_module("deepspeed.utils.zero_to_fp32")
    except ImportError:
        raise EnvironmentProblem(Said("zero_needs_deepspeed")) from None
    import torch
    from transformers import AutoConfig

    state = read_zero_state(checkpoint_dir / tag, trust_pickle)
    # Through the model (not DeepSpeed's own safetensors writer, which refuses tied embeddings): transformers
    # saves tied weights once, shards, and writes the index.
    # the class training used (image-text-to-text for a VLM, whose states carry its in-memory names)
    config = AutoConfig.from_pretrained(checkpoint_dir)
    model = model_class(config).from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    model.tie_weights()
    params = dict(model.named_parameters(remove_duplicate=False))
    untied_missing = [k for k in missing if k in params and not _shared_with_loaded(params, k, state)]
    if unexpected or untied_missing:
        missing, unexpected = repr(untied_missing[:5]), repr(list(unexpected)[:5])
        raise ModelError(Said("zero_misfit", path=str(checkpoint_dir), missing=missing, unexpected=unexpected))
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, max_shard_size=max_shard_size)
    for name in SIDE_FILES:
        if name != "config.json" and (checkpoint_dir / name).is_file():
            shutil.copy2(checkpoint_dir / name, out_dir / name)
    return out_dir


def _shared_with_loaded(params: dict, key: str, state: dict) -> bool:
    """A tied parameter (lm_head = embed_tokens) counts as loaded when the one it shares storage with was."""
    ptr = params[key].data_ptr()
    return any(params[k].data_ptr() == ptr for k in state if k in params and k != key)
