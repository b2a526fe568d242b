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

from ..config.lists import split_list
from ..config.schema import Config
from ..env import env_flag
from ..errors import ConfigError, EnvironmentProblem, ModelError
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
        raise ConfigError(
            f"{attr} is not set: give a local model folder or a hub id (e.g. Qwen/Qwen2.5-0.5B-Instruct)."
        )
    if is_local_path(path):
        p = Path(path).expanduser()
        if not p.exists():
            raise ModelError(
                f"Model folder {path} does not exist ({attr}). Check the path, or use a hub id like Qwen/Qwen2.5-0.5B."
            )
        if p.is_file():
            raise ModelError(
                f"{attr} {path} is a file, not a model folder: give the folder that holds config.json and "
                f"the weights{' (the folder ' + str(p.parent) + ')' if (p.parent / 'config.json').is_file() else ''}."
            )
        if not (p / "config.json").is_file():
            adapter = p / "adapter_config.json"
            if adapter.is_file():
                try:
                    base = (
                        json.loads(adapter.read_text(encoding="utf-8")).get("base_model_name_or_path")
                        or "the base model"
                    )
                except (OSError, ValueError):
                    base = "the base model"
                raise ModelError(
                    f"{path} is a LoRA adapter folder (adapter_config.json), not a model: set {attr} to its "
                    f"base model ({base}) and adapter_name_or_path: {path}."
                )
            raise ModelError(f"{path} has no config.json: it is not a Hugging Face model folder.")
        _read_config_json(p)
        return str(p)
    return path


def _read_config_json(folder: Path) -> dict:
    """config.json parsed, or a ModelError naming the file and the position of the mistake."""
    file = folder / "config.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ModelError(
            f"{file} is not UTF-8 text (byte {exc.start}): it is not a model config; re-download or re-save the model."
        ) from None
    except json.JSONDecodeError as exc:
        raise ModelError(
            f"{file} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); re-download the "
            f"model or fix the file."
        ) from None
    if not isinstance(data, dict):
        raise ModelError(f"{file} must hold a JSON object, found {type(data).__name__}; re-download the model.")
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
        raise ModelError(
            f"{folder} has config.json but no weights (model.safetensors, model-*-of-*.safetensors or "
            f"pytorch_model.bin): copy the weight files into it, or point model_name_or_path at the full model."
        )
    for file in files:
        if file.suffix == ".safetensors":
            from safetensors import SafetensorError, safe_open

            try:
                with safe_open(str(file), framework="pt"):
                    pass
            except (SafetensorError, OSError) as exc:
                raise ModelError(
                    f"{file} is not a readable safetensors file ({str(exc).splitlines()[0][:200]}): it is "
                    f"truncated or corrupted; re-download or re-save the model."
                ) from None
        elif file.suffix in (".bin", ".pt", ".pth"):
            with open(file, "rb") as f:
                head = f.read(4)
            if head.startswith(b"PK\x03\x04"):
                if not zipfile.is_zipfile(file):
                    raise ModelError(
                        f"{file} is a truncated PyTorch checkpoint (its zip directory is missing); re-download "
                        f"or re-save the model."
                    )
            elif not head.startswith(b"\x80"):  # legacy torch.save: a pickle (protocol 2+)
                raise ModelError(
                    f"{file} is not a PyTorch checkpoint (it starts with {head!r}, neither zip nor pickle); "
                    f"re-download or re-save the model."
                )


def _hub_hint(path: str, exc: Exception) -> str:
    offline = env_flag("HF_HUB_OFFLINE", False)
    why = "HF_HUB_OFFLINE is set and it is not in the local cache" if offline else str(exc).splitlines()[0][:300]
    return (
        f"Could not load '{path}' ({why}). Download it while online (huggingface-cli download {path}) or point "
        f"model_name_or_path at a local folder."
    )


def invalid_config(path: str, exc: Exception) -> ModelError:
    """A config.json whose fields contradict each other (transformers' validation: layer_types vs num_hidden_layers,
    a negative size), named with the first line of what transformers found."""
    where = Path(path) / "config.json" if is_local_path(path) else f"the config.json of {path}"
    why = " ".join(str(exc).split())[:300]
    return ModelError(
        f"{where} is not a valid configuration ({why}); fix that field or re-download the model's config.json."
    )


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
            raise ModelError(
                f"{path} ships its own tokenizer code; set trust_remote_code: true if you trust it."
            ) from None
        if is_local_path(path):
            raise ModelError(
                f"Could not load the tokenizer of {path} ({str(exc).splitlines()[0][:300]}); copy the base "
                f"model's tokenizer files into it."
            ) from None
        raise ModelError(_hub_hint(path, exc)) from None
    _check_vocabulary(path, tokenizer)
    if cfg.add_special_tokens:
        new = split_list(cfg.add_special_tokens)
        tokenizer.add_special_tokens({"additional_special_tokens": new}, replace_additional_special_tokens=False)
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
        raise ModelError(
            f"{path} has no tokenizer files ({', '.join(_VOCAB_FILES[:4])}, ...): the tokenizer loaded from "
            f"it has {size} token{'s' if size != 1 else ''}, so nothing could be learned. Copy the tokenizer "
            f"files of the model it was made from into {path}."
        )


def load_model_config(cfg: Config):
    from transformers import AutoConfig

    path = model_path(cfg)
    local = is_local_path(path)
    if local:
        data = _read_config_json(Path(path))
        if "model_type" not in data and not cfg.trust_remote_code:
            raise ModelError(
                f"{Path(path) / 'config.json'} has no model_type: transformers cannot tell the architecture; "
                f"re-download the model's config.json."
            )
    from huggingface_hub.errors import StrictDataclassError

    try:
        return AutoConfig.from_pretrained(
            path, trust_remote_code=cfg.trust_remote_code, revision=cfg.model_revision, cache_dir=cfg.cache_dir
        )
    except StrictDataclassError as exc:
        raise invalid_config(path, exc) from None
    except (OSError, ValueError, KeyError) as exc:
        if "trust_remote_code" in str(exc):
            raise ModelError(
                f"{path} needs its own modelling code; set trust_remote_code: true if you trust it."
            ) from None
        if local:
            raise ModelError(
                f"{Path(path) / 'config.json'} cannot be used "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:300]}); "
                f"check that it is this model's config (model_type, architecture fields)."
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
        raise EnvironmentProblem(
            "flash_attn: fa2 needs the flash-attn package (pip install flash-attn --no-build-isolation) "
            "and an NVIDIA GPU; or use flash_attn: sdpa."
        )
    import torch

    if not torch.cuda.is_available():
        raise EnvironmentProblem(
            "flash_attn: fa2 needs an NVIDIA GPU and none is visible; use flash_attn: sdpa on this machine."
        )
    return "flash_attention_2"


def apply_rope_scaling(config, cfg: Config) -> None:
    if not cfg.rope_scaling:
        return
    current = getattr(config, "max_position_embeddings", None)
    if not current:
        raise ModelError("rope_scaling: this model's config has no max_position_embeddings to scale from.")
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
            raise EnvironmentProblem(
                "enable_liger_kernel needs the liger-kernel package (pip install liger-kernel) and a GPU."
            )
        if not torch.cuda.is_available():
            raise EnvironmentProblem(
                "enable_liger_kernel needs a GPU (Liger's kernels are Triton GPU kernels); none is visible. "
                "Remove the option on CPU."
            )
    if cfg.use_unsloth:
        if importlib.util.find_spec("unsloth") is None or not torch.cuda.is_available():
            raise EnvironmentProblem(
                "use_unsloth needs the unsloth package and an NVIDIA GPU; remove it on this machine."
            )
        raise EnvironmentProblem(
            "use_unsloth is not wired into tunekit yet; remove it (enable_liger_kernel gives fused kernels on GPUs)."
        )


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
    parts = [
        f"{len(keys)} {what} (e.g. {', '.join(keys[:3])})"
        for keys, what in (
            (missing, "weights it needs are missing and would start random"),
            (unexpected, "weights in the folder have no place in it and would be dropped"),
        )
        if keys
    ]
    raise ModelError(
        f"the weights in {path} do not belong to its config.json's architecture ({architecture}): "
        f"{'; '.join(parts)}. Check that config.json and the weight files come from the same model, or set "
        f"allow_new_weights: true if the difference is intended."
    )


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
            raise ModelError(f"Could not load the weights in {path} ({str(exc).splitlines()[0][:300]}).") from None
        raise ModelError(_hub_hint(path, exc)) from None
    except (pickle.UnpicklingError, EOFError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "ignore_mismatched_sizes" in str(exc):  # shapes other than config.json's
            raise ModelError(
                f"the weights in {path} do not belong to its config.json's architecture "
                f"({', '.join(config.architectures or [config.model_type])}): some have other shapes than "
                f"the config gives them (transformers' load report above lists them). Check that config.json "
                f"and the weight files come from the same model."
            ) from None
        pickles = sorted(f.name for f in Path(path).glob("*.bin")) if is_local_path(path) else []
        if not pickles or (
            isinstance(exc, RuntimeError)
            and not re.search(r"PytorchStreamReader|torch\.load|pickle|zip archive", str(exc))
        ):
            raise
        raise ModelError(
            f"{', '.join(pickles)} in {path} cannot be read as weights ({type(exc).__name__}): truncated, "
            f"corrupted, or a pickle that needs code to run, which tunekit never does (weights-only loading). "
            f"Re-download it, or re-save the model as safetensors where it was made."
        ) from None
    except ValueError as exc:  # an attention implementation the model's class does not offer
        if cfg.flash_attn not in ("sdpa", "fa2") or "attention implementation" not in str(exc):
            raise
        said = str(exc).split(". ")[0]
        raise ModelError(
            f"flash_attn: {cfg.flash_attn} cannot load {path}: transformers says '{said}'. Use flash_attn: auto "
            f"(transformers' own choice for this model) or eager."
        ) from None


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
    if is_trainable:
        model.config.use_cache = False
        # a vision-language model's language model reads its own config; with a KV cache it would build no mask from
        # packed position ids (padding_free / neat_packing rows would attend across samples)
        model.config.get_text_config().use_cache = False
        if cfg.use_gradient_checkpointing:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            if cfg.gradient_checkpointing_layers is not None:
                limit_checkpointed_layers(model, cfg.gradient_checkpointing_layers)
    else:
        model.eval()
    model = apply_finetuning(model, cfg, is_trainable=is_trainable)
    if is_trainable:
        watch_router_aux(model, cfg)  # each forward's router auxiliary loss, for trainer_log.jsonl
    # elementwise_recompute is attached by train/run.build_model, as the run decided it (train/decisions)
    if cfg.print_param_status and is_trainable:
        for name, p in model.named_parameters():
            print(f"{name:<80} {str(tuple(p.shape)):<20} {str(p.dtype):<16} trainable={p.requires_grad}")
    return model
