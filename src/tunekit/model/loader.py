"""Load the tokenizer and the model exactly as a real run does: ``from_pretrained`` on a folder or hub id.

Every failure a user can cause (missing folder, offline hub id, missing GPU package) becomes a
:class:`~tunekit.errors.TunekitError` that says what to do.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import pickle
import re
from pathlib import Path
from typing import Any

from ..config.problems import Said, config_error
from ..config.schema import Config
from ..env import env_flag
from ..errors import EnvironmentProblem, ModelError
from .finetuning import apply_finetuning
from .layers import decoder_layers
from .moe import configure_moe, watch_router_aux
from .multimodal import model_class
from .prompt_adapters import check_prefix_attention
from .quantization import check_prequantized, dequantize_on_load, quantization_config

# Files a tokenizer's vocabulary can come from (fast, sentencepiece, BPE, WordPiece, tiktoken); see _check_vocabulary.
_VOCAB_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.model",
    "tiktoken.model",
)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def is_local_path(path: str) -> bool:
    """A path (not a hub id): absolute or ./-relative, existing, not of the form org/name, or org/name whose
    ``org`` folder exists here (``saves/run1`` when ``saves/`` exists is a wrong local path, not a hub id)."""
    return (
        path.startswith(("/", "./", "../", "~", ".\\"))
        or os.path.exists(path)
        or path.count("/") != 1
        or Path(path).parent.is_dir()
    )


def model_path(cfg: Config, attr: str = "model_name_or_path") -> str:
    path = getattr(cfg, attr)
    if not path:
        raise config_error("model_path_unset", (attr,), option=attr)
    if is_local_path(path):
        p = Path(path).expanduser()
        if not p.exists():
            raise ModelError(Said("model_folder_missing", path=str(path), option=attr))
        if p.is_file():
            parent = Said("part_model_parent", path=str(p.parent)) if (p.parent / "config.json").is_file() else None
            raise ModelError(Said("model_path_is_file", option=attr, path=str(path), parent=parent))
        if not (p / "config.json").is_file():
            adapter = p / "adapter_config.json"
            if adapter.is_file():
                try:
                    base = json.loads(adapter.read_text(encoding="utf-8")).get("base_model_name_or_path") or None
                except (OSError, ValueError):
                    base = None
                base = str(base) if base else Said("part_the_base_model")
                raise ModelError(Said("model_is_adapter", path=str(path), option=attr, base=base))
            raise ModelError(Said("model_no_config", path=str(path)))
        _read_config_json(p)
        return str(p)
    return path


def _read_config_json(folder: Path) -> dict:
    """config.json parsed, or a ModelError naming the file and the position of the mistake."""
    file = folder / "config.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ModelError(Said("model_config_not_utf8", file=str(file), byte=exc.start)) from None
    except json.JSONDecodeError as exc:
        raise ModelError(
            Said("model_config_bad_json", file=str(file), line=exc.lineno, column=exc.colno, error=exc.msg)
        ) from None
    if not isinstance(data, dict):
        raise ModelError(Said("model_config_not_object", file=str(file), kind=type(data).__name__))
    return data


def check_weight_files(folder: Path) -> None:
    """Fail with the file's name, before transformers reads them, if the folder has no weights or a weight file is
    truncated (safetensors header vs. size) or is not a PyTorch checkpoint (a .bin that is neither zip nor pickle)."""
    import zipfile

    files = sorted(
        f
        for f in folder.iterdir()
        if f.is_file()
        and f.name.endswith(_WEIGHT_SUFFIXES)
        and not f.name.startswith(("adapter_model", "optimizer", "scheduler", "rng_state", "training_args"))
    )
    if not files:
        raise ModelError(Said("model_no_weights", path=str(folder)))
    for file in files:
        if file.suffix == ".safetensors":
            from safetensors import SafetensorError, safe_open

            try:
                with safe_open(str(file), framework="pt"):
                    pass
            except (SafetensorError, OSError) as exc:
                error = str(exc).splitlines()[0][:200]
                raise ModelError(Said("model_bad_safetensors", file=str(file), error=error)) from None
        elif file.suffix in (".bin", ".pt", ".pth"):
            with open(file, "rb") as f:
                head = f.read(4)
            if head.startswith(b"PK\x03\x04"):
                if not zipfile.is_zipfile(file):
                    raise ModelError(Said("model_truncated_zip", file=str(file)))
            elif not head.startswith(b"\x80"):  # legacy torch.save: a pickle (protocol 2+)
                raise ModelError(Said("model_not_checkpoint", file=str(file), head=repr(head)))


def _hub_hint(path: str, exc: Exception) -> Said:
    offline = env_flag("HF_HUB_OFFLINE", False)
    why = Said("part_hub_offline_uncached") if offline else str(exc).splitlines()[0][:300]
    return Said("model_hub_unloadable", path=str(path), why=why)


def invalid_config(path: str, exc: Exception) -> ModelError:
    """A config.json whose fields contradict each other (transformers' validation: layer_types vs num_hidden_layers,
    a negative size), named with the first line of what transformers found."""
    where = str(Path(path) / "config.json") if is_local_path(path) else Said("part_config_of", path=str(path))
    why = " ".join(str(exc).split())[:300]
    return ModelError(Said("model_config_invalid", where=where, why=why))


def load_tokenizer(cfg: Config, padding_side: str = "right"):
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoTokenizer

    path = model_path(cfg)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            path,
            trust_remote_code=cfg.trust_remote_code,
            use_fast=cfg.use_fast_tokenizer,
            revision=cfg.model_revision,
            cache_dir=cfg.cache_dir,
            split_special_tokens=cfg.split_special_tokens,
            padding_side=padding_side,
        )
    except StrictDataclassError as exc:  # transformers validates config.json's fields while it reads the tokenizer
        raise invalid_config(path, exc) from None
    except (OSError, ValueError) as exc:
        if "trust_remote_code" in str(exc):
            raise ModelError(Said("model_tokenizer_code", path=str(path))) from None
        if is_local_path(path):
            error = str(exc).splitlines()[0][:300]
            raise ModelError(Said("model_tokenizer_unloadable", path=str(path), error=error)) from None
        raise ModelError(_hub_hint(path, exc)) from None
    _check_vocabulary(path, tokenizer)
    from .new_tokens import add_new_tokens  # torch-free start-up: imported when a tokenizer loads

    add_new_tokens(cfg, tokenizer)  # add_tokens, add_special_tokens / new_special_tokens_config
    return tokenizer


def _check_vocabulary(path: str, tokenizer) -> None:
    """A folder without tokenizer files still "loads" (transformers builds an empty tokenizer of the model's class),
    and training then runs on a vocabulary of one token; refuse it."""
    size = len(tokenizer)
    if size >= 256 and not is_local_path(path):
        return
    folder = Path(path)
    has_vocab = (
        not folder.is_dir()
        or any((folder / name).is_file() for name in _VOCAB_FILES)
        or any(folder.glob("*.tiktoken"))
    )
    if size < 2 or (not has_vocab and size < 256):
        count = Said("part_one_token" if size == 1 else "part_tokens", size=size)
        files = tuple(_VOCAB_FILES[:4])
        raise ModelError(Said("model_no_tokenizer_files", path=str(path), files=", ".join(files), count=count))


def load_model_config(cfg: Config):
    from transformers import AutoConfig

    path = model_path(cfg)
    local = is_local_path(path)
    if local:
        data = _read_config_json(Path(path))
        if "model_type" not in data and not cfg.trust_remote_code:
            raise ModelError(Said("model_no_model_type", file=str(Path(path) / "config.json")))
    from huggingface_hub.errors import StrictDataclassError

    try:
        return AutoConfig.from_pretrained(
            path, trust_remote_code=cfg.trust_remote_code, revision=cfg.model_revision, cache_dir=cfg.cache_dir
        )
    except StrictDataclassError as exc:
        raise invalid_config(path, exc) from None
    except (OSError, ValueError, KeyError) as exc:
        if "trust_remote_code" in str(exc):
            raise ModelError(Said("model_code", path=str(path))) from None
        if local:
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            raise ModelError(
                Said("model_config_unusable", file=str(Path(path) / "config.json"), error=error)
            ) from None
        raise ModelError(_hub_hint(path, exc)) from None


def load_dtype_name(cfg: Config) -> str:
    """The dtype the weights load in for the precision options: ``dtype`` when set, else bfloat16 with ``bf16`` or
    ``pure_bf16`` (the weights themselves train in bf16), float16 with ``fp16``, else float32. A training run's options
    carry its precision decision (``train/precision.py`` writes ``bf16``/``fp16`` where the config chose nothing), so
    this mapping is all the loader decides; the decision reads it too for options written by hand."""
    if cfg.dtype != "auto":
        return cfg.dtype
    if cfg.bf16 or getattr(cfg, "pure_bf16", False):
        return "bfloat16"
    return "float16" if cfg.fp16 else "float32"


def compute_dtype(cfg: Config):
    import torch

    return getattr(torch, load_dtype_name(cfg))


def attention_implementation(cfg: Config) -> str | None:
    if cfg.flash_attn == "auto":  # transformers' default: sdpa, else eager (gpt-oss: attention sinks)
        return None
    if cfg.flash_attn == "sdpa":
        return "sdpa"
    if cfg.flash_attn in ("disabled", "eager"):
        return "eager"
    # fa2
    if importlib.util.find_spec("flash_attn") is None:
        raise EnvironmentProblem(Said("model_fa2_package"))
    import torch

    if not torch.cuda.is_available():
        raise EnvironmentProblem(Said("model_fa2_no_gpu"))
    return "flash_attention_2"


def apply_rope_scaling(config, cfg: Config) -> None:
    if not cfg.rope_scaling:
        return
    current = getattr(config, "max_position_embeddings", None)
    if not current:
        raise ModelError(Said("model_rope_no_positions"))
    target = cfg.rope_scaling_target_len or cfg.cutoff_len
    if target <= current:
        print(f"rope_scaling: target length {target} fits the model's {current} positions; no scaling applied.")
        return
    factor = float(math.ceil(target / current))
    params = dict(getattr(config, "rope_parameters", None) or {})
    params.update({"rope_type": cfg.rope_scaling, "factor": factor})
    if cfg.rope_scaling == "yarn":
        params["original_max_position_embeddings"] = current
    if cfg.rope_scaling == "llama3":
        params.setdefault("original_max_position_embeddings", current)
        params.setdefault("low_freq_factor", 1.0)
        params.setdefault("high_freq_factor", 4.0)
    config.rope_parameters = params
    config.max_position_embeddings = int(current * factor)


def check_accelerators(cfg: Config) -> None:
    """GPU-only kernels fail here, before any weight is loaded, with what to do instead."""
    import torch

    if cfg.enable_liger_kernel:
        if importlib.util.find_spec("liger_kernel") is None:
            raise EnvironmentProblem(Said("model_liger_package"))
        if not torch.cuda.is_available():
            raise EnvironmentProblem(Said("model_liger_no_gpu"))
    if cfg.use_unsloth:
        if importlib.util.find_spec("unsloth") is None or not torch.cuda.is_available():
            raise EnvironmentProblem(Said("model_unsloth_missing"))
        raise EnvironmentProblem(Said("model_unsloth_unwired"))


def limit_checkpointed_layers(model, count: int) -> int:
    """Keep gradient checkpointing on the lowest ``count`` decoder layers only; the layers above keep their
    activations.

    Each decoder layer is a ``GradientCheckpointingLayer`` whose ``gradient_checkpointing`` flag says whether its call
    goes through ``torch.utils.checkpoint`` (the flag ``activation_checkpointing_enable(every_n_layers=...)`` sets
    too); other checkpointed towers (a vision encoder) stay as they are. Returns how many layers stay checkpointed."""

    layers = decoder_layers(model)
    for index, layer in enumerate(layers):
        layer.gradient_checkpointing = index < count
    return min(count, len(layers))


def check_loaded_weights(info: dict, path: str, architecture: str, allowed: bool) -> None:
    """The weights in ``path`` must be those of its config's architecture: weights the architecture has and the folder
    lacks would start random (``missing_keys``), the folder's weights it has no place for would be dropped
    (``unexpected_keys``), both with only transformers' load report as a notice. Refused, naming the counts and a few
    keys, unless ``allow_new_weights`` says the difference is intended (a model extended by a new part, on purpose)."""
    missing, unexpected = (
        sorted(map(str, info.get("missing_keys") or ())),
        sorted(map(str, info.get("unexpected_keys") or ())),
    )
    if allowed or not (missing or unexpected):
        return
    lacking = Said("part_weights_missing", count=len(missing), names=tuple(missing[:3])) if missing else None
    extra = Said("part_weights_unexpected", count=len(unexpected), names=tuple(unexpected[:3])) if unexpected else None
    parts = Said("part_weights_both", missing=lacking, unexpected=extra) if lacking and extra else lacking or extra
    raise ModelError(Said("model_weights_mismatch", path=str(path), architecture=architecture, parts=parts))


def _from_pretrained(cfg: Config, config, path: str) -> tuple[Any, dict]:
    """``from_pretrained`` with the configured dtype/attention/quantization; its failures said as tunekit's."""
    dtype = compute_dtype(cfg)
    try:
        # AutoModelForImageTextToText for vision-language models
        model, info = model_class(config).from_pretrained(
            path,
            config=config,
            dtype=dtype,
            attn_implementation=attention_implementation(cfg),
            quantization_config=quantization_config(cfg, dtype),
            trust_remote_code=cfg.trust_remote_code,
            revision=cfg.model_revision,
            cache_dir=cfg.cache_dir,
            low_cpu_mem_usage=cfg.low_cpu_mem_usage,
            output_loading_info=True,
        )
        return model, info
    except OSError as exc:
        if is_local_path(path):
            error = str(exc).splitlines()[0][:300]
            raise ModelError(Said("model_weights_unloadable", path=str(path), error=error)) from None
        raise ModelError(_hub_hint(path, exc)) from None
    except (pickle.UnpicklingError, EOFError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "ignore_mismatched_sizes" in str(exc):  # shapes other than config.json's
            architecture = ", ".join(config.architectures or [config.model_type])
            raise ModelError(Said("model_weights_shapes", path=str(path), architecture=architecture)) from None
        pickles = sorted(f.name for f in Path(path).glob("*.bin")) if is_local_path(path) else []
        if not pickles or (
            isinstance(exc, RuntimeError)
            and not re.search(r"PytorchStreamReader|torch\.load|pickle|zip archive", str(exc))
        ):
            raise
        files, kind = ", ".join(pickles), type(exc).__name__
        raise ModelError(Said("model_pickles_unreadable", files=files, path=str(path), kind=kind)) from None
    except ValueError as exc:  # an attention implementation the model's class does not offer
        if cfg.flash_attn not in ("sdpa", "fa2") or "attention implementation" not in str(exc):
            raise
        said = str(exc).split(". ")[0]
        raise ModelError(Said("model_attention_refused", value=cfg.flash_attn, path=str(path), said=said)) from None


def load_model(cfg: Config, tokenizer, is_trainable: bool = True) -> Any:
    """Load weights with the configured dtype/attention/RoPE/quantization and apply the fine-tuning method."""

    check_accelerators(cfg)
    path = model_path(cfg)
    config = load_model_config(cfg)
    check_prefix_attention(cfg.finetuning_type, config.get_text_config())  # ptuning on latent attention
    check_prequantized(config, cfg, path, is_trainable)
    config = dequantize_on_load(config)  # compressed-tensors: decompressed at load, as peft needs it
    if is_local_path(path):
        check_weight_files(Path(path))
    apply_rope_scaling(config, cfg)
    configure_moe(config, cfg, path, is_trainable)  # experts in float64, moe_aux_loss_coef (model/moe.py)
    model, info = _from_pretrained(cfg, config, path)
    check_loaded_weights(info, path, type(model).__name__, getattr(cfg, "allow_new_weights", False))
    embeddings = model.get_input_embeddings().num_embeddings  # not weight.shape: 0 under ZeRO-3 (partitioned)
    if len(tokenizer) > embeddings or cfg.resize_vocab:
        model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64 if len(tokenizer) > embeddings else None)
    from .new_tokens import check_new_rows_train, init_new_rows

    new_rows = init_new_rows(model, tokenizer, cfg.init_special_tokens)  # by id: a padded embedding needs no resize
    if is_trainable:
        model.config.use_cache = False
        # a vision-language model's language model reads its own config; with a KV cache it would build no mask from
        # packed position ids (padding_free / neat_packing rows would attend across samples)
        model.config.get_text_config().use_cache = False
        if cfg.use_gradient_checkpointing:
            model.activation_checkpointing_enable(
                activation_checkpointing_kwargs={"use_reentrant": cfg.use_reentrant_gc}
            )
            if cfg.gradient_checkpointing_layers is not None:
                limit_checkpointed_layers(model, cfg.gradient_checkpointing_layers)
    else:
        model.eval()
    model = apply_finetuning(model, cfg, is_trainable=is_trainable)
    if is_trainable and new_rows:
        check_new_rows_train(model, cfg, new_rows)
    if is_trainable:
        watch_router_aux(model, cfg)  # each forward's router auxiliary loss, for trainer_log.jsonl
    # elementwise_recompute is attached by train/run.build_model, as the run decided it (train/decisions)
    if cfg.print_param_status and is_trainable:
        for name, p in model.named_parameters():
            print(f"{name:<80} {str(tuple(p.shape)):<20} {str(p.dtype):<16} trainable={p.requires_grad}")
    return model
