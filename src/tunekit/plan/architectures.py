"""Model shapes for the planner, from config.json only (never weights).

A :class:`ModelShape` is read off the real transformers module tree built on the ``meta`` device
(no memory, exact parameter counts, tied embeddings, biases, extra norms), so the planner counts
exactly what a training run would hold. ``plan/builtin_shapes.py`` holds the config.json fields of common models
so ``--model-config qwen2.5-7b`` works without a download.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config.problems import Said
from ..config.schema import Config
from ..errors import ModelError
from ..model.loader import is_local_path, load_model_config
from ..model.moe import MoeLayout, moe_layout
from ..model.multimodal import is_multimodal_config, model_class
from .builtin_shapes import builtin_key, builtin_names, find_builtin
from .latent_attention import latent_dims
from .moe import moe_counts
from .vision import plugin_for, vision_shape_from_model


@dataclass(frozen=True)
class Linear:
    """One ``nn.Linear`` inside a decoder layer (``name`` is the last path component)."""

    name: str
    path: str  # inside the decoder layer, e.g. "self_attn.q_proj"
    in_features: int
    out_features: int
    bias: bool

    @property
    def params(self) -> int:
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)


@dataclass(frozen=True)
class ModelShape:
    """Everything the estimators need about an architecture."""

    name: str
    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    total_params: int
    embed_params: int
    lm_head_params: int  # 0 when tied to the embeddings
    layer_params: int  # one decoder layer, all of it
    linears: tuple[Linear, ...] = field(default_factory=tuple)  # of one decoder layer
    largest_module_params: int = 0  # for ZeRO-3 gathering
    num_param_tensors: int = 0
    layer_param_tensors: int = 0
    num_experts: int = 0
    layer_param_names: tuple[tuple[str, int], ...] = ()  # inside one decoder layer ("self_attn.q_proj.weight", numel)
    other_param_names: tuple[tuple[str, int], ...] = ()  # outside the layers (embed_tokens, norm, lm_head)
    logit_softcap: bool = False
    attn_softcap: bool = False
    layers_path: str = "model.layers"
    vision: Any = None  # plan.vision.VisionShape of a vision-language model (its tower and projector), else None
    moe: Any = None  # plan.moe.MoeCounts of a mixture-of-experts model (total vs active parameters), else None
    default_attn: str = "sdpa"  # what transformers runs unless told (flash_attn: auto): eager where it has no sdpa
    # A mixture of experts with dense layers (DeepSeek's first_k_dense_replace, Qwen-MoE's mlp_only_layers /
    # decoder_sparse_step): linears / layer_param_names above are a sparse layer's, these the dense layers'.
    dense_layers: tuple[int, ...] = ()
    dense_linears: tuple[Linear, ...] = ()
    dense_param_names: tuple[tuple[str, int], ...] = ()
    latent: Any = None  # plan.latent_attention.Latent of multi-head latent attention (DeepSeek-V2/V3), else None

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def linear_params_per_layer(self) -> int:
        return sum(lin.in_features * lin.out_features for lin in self.linears)

    def linear(self, name: str) -> Linear | None:
        return next((lin for lin in self.linears if lin.name == name), None)

    def dense_view(self) -> ModelShape:
        """The shape of this model's dense decoder layers (an MoE model with dense layers), ``moe`` None."""
        return replace(
            self,
            linears=self.dense_linears,
            layer_param_names=self.dense_param_names,
            layer_params=sum(k for _, k in self.dense_param_names),
            layer_param_tensors=len(self.dense_param_names),
            moe=None,
            dense_layers=(),
            dense_linears=(),
            dense_param_names=(),
        )

    def layer_at(self, i: int) -> ModelShape:
        """The shape with decoder layer ``i``'s own structure (a dense layer of an MoE model: :meth:`dense_view`)."""
        return self.dense_view() if i in self.dense_layers else self

    def variants(self) -> list[tuple[ModelShape, int]]:
        """``(structure, how many decoder layers have it)``: one entry for a model whose layers are all alike."""
        dense = len(self.dense_layers)
        return [(self, self.layers - dense)] + ([(self.dense_view(), dense)] if dense else [])

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "model_type": self.model_type,
            "hidden_size": self.hidden,
            "num_layers": self.layers,
            "num_heads": self.heads,
            "num_kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate,
            "vocab_size": self.vocab,
            "tied_embeddings": self.tied,
            "total_params": self.total_params + (self.vision.total_params if self.vision else 0),
            **({"language_model_params": self.total_params, "vision": self.vision.to_dict()} if self.vision else {}),
            **({"moe": self.moe.to_dict()} if self.moe else {}),
        }


def read_config_json(model_config: str | None, model_name_or_path: str | None) -> tuple[str, dict[str, Any]]:
    """``(name, config dict)`` from ``--model-config`` (builtin name, config.json or folder) or the model path."""
    for candidate in (model_config, model_name_or_path):
        if not candidate:
            continue
        path = Path(candidate).expanduser()
        if path.is_dir():
            cfg_file = path / "config.json"
            if not cfg_file.is_file():
                raise ModelError(Said("plan_no_config_json", path=str(path), names=tuple(builtin_names())))
            return path.name, _load_json(cfg_file)
        if path.is_file():
            return path.parent.name if path.name == "config.json" else path.stem, _load_json(path)
        builtin = find_builtin(candidate)
        if builtin is not None:
            return builtin_key(candidate), builtin
        if candidate is model_config:
            raise ModelError(Said("plan_model_config_unknown", name=repr(candidate), names=tuple(builtin_names())))
        raise ModelError(Said("plan_model_unknown", name=repr(candidate), names=tuple(builtin_names())))
    raise ModelError(Said("plan_no_model"))


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(Said("plan_config_unreadable", path=str(path), error=str(exc))) from None
    return text_only(data)


def text_only(data: dict[str, Any]) -> dict[str, Any]:
    """The language model's fields of a multimodal config.json that tunekit has no family for (planned as text only);
    a VLM tunekit trains keeps its vision_config (``plan/vision.py``)."""
    if (
        any(k in data for k in ("vision_config", "audio_config"))
        and plugin_for(str(data.get("model_type"))) is not None
    ):
        return data
    if "text_config" in data and "hidden_size" not in data:  # multimodal wrapper: plan the language model
        data = {
            **data["text_config"],
            "tie_word_embeddings": data.get(
                "tie_word_embeddings", data["text_config"].get("tie_word_embeddings", False)
            ),
        }
    return data


def shape_from_config(name: str, config: dict[str, Any]) -> ModelShape:
    """Build the model on the meta device and read its exact parameter layout."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = dict(config)
    model_type = data.pop("model_type", None)
    if not model_type:
        raise ModelError(Said("plan_no_model_type", name=name))
    for key in ("architectures", "auto_map", "transformers_version", "torch_dtype", "dtype", "quantization_config"):
        data.pop(key, None)
    from huggingface_hub.errors import StrictDataclassError

    try:
        hf_cfg = AutoConfig.for_model(model_type, **data)
    except StrictDataclassError as exc:  # transformers' own validation of the fields
        error = " ".join(str(exc).split())[:300]
        raise ModelError(Said("plan_config_invalid", name=name, model_type=model_type, error=error)) from None
    except (ValueError, KeyError) as exc:
        raise ModelError(
            Said("plan_model_type_unknown", model_type=repr(model_type), name=name, error=str(exc))
        ) from None
    _check_head_split(name, hf_cfg)
    hf_cfg.use_cache = False
    plugin = plugin_for(model_type) if is_multimodal_config(hf_cfg) else None
    auto = model_class(hf_cfg) if plugin is not None else AutoModelForCausalLM
    try:
        with torch.device("meta"), outside_zero3_init():
            model = auto.from_config(hf_cfg, dtype=torch.bfloat16)
    except Exception as exc:  # an architecture without a causal-LM head, remote code, ...
        raise ModelError(Said("plan_cannot_build", name=name, model_type=model_type, error=str(exc))) from None
    attn = str(getattr(model.config, "_attn_implementation", None) or "sdpa")  # transformers' own choice
    if plugin is None:
        return replace(shape_from_model(name, model), default_attn=attn)
    lm = shape_from_model(name, model, within=plugin.LANGUAGE_MODEL + ("lm_head",))
    return replace(lm, model_type=model_type, vision=vision_shape_from_model(model, plugin), default_attn=attn)


def _check_head_split(name: str, hf_cfg) -> None:
    """``hidden_size`` must split into ``num_attention_heads`` heads when no ``head_dim`` says otherwise: the meta
    build rounds the head size down and would plan a model that cannot run."""
    text = getattr(hf_cfg, "text_config", None) or hf_cfg
    hidden, heads = getattr(text, "hidden_size", None), getattr(text, "num_attention_heads", None)
    if (
        isinstance(hidden, int)
        and isinstance(heads, int)
        and heads > 0
        and getattr(text, "head_dim", None) is None
        and hidden % heads
    ):
        raise ModelError(Said("plan_head_split", name=name, hidden=hidden, heads=heads))


def outside_zero3_init():
    """A context in which ``from_config`` builds the model as it is: not under ``deepspeed.zero.Init``. Once a ZeRO-3
    config is live in the process (``TrainingArguments`` with ``deepspeed``, as when ``tunekit train`` decides
    ``gradient_checkpointing: auto``), transformers builds every model under it, and partitioning meta tensors fails
    ("Cannot copy out of meta tensor"). The planner's model is a meta-device layout that never trains: it is built with
    transformers' own switch (``modeling_utils.set_zero3_state``, which marks zero.Init as already entered)."""
    import contextlib

    from transformers.integrations import is_deepspeed_zero3_enabled

    if not is_deepspeed_zero3_enabled():
        return contextlib.nullcontext()
    from transformers.modeling_utils import set_zero3_state

    return set_zero3_state()


def _under(name: str, within) -> bool:
    return within is None or any(name == p or name.startswith(p + ".") for p in within)


def _decoder_layers(model, within=None):
    import torch

    best = None
    for n, module in model.named_modules():
        is_layers = isinstance(module, torch.nn.ModuleList) and len(module) > 0 and _under(n, within)
        if is_layers and (best is None or len(module) > len(best)):
            best = module
    return best


def _outside_layers(base, layers_path: str, within) -> tuple[list[tuple[str, int]], int]:
    """``(parameters outside the decoder layers, the largest module's direct parameter count)`` of the LM."""
    others = []
    for n, p in base.named_parameters(remove_duplicate=True):
        if "lora_" in n or n.startswith(layers_path + ".") or not _under(n.replace(".base_layer", ""), within):
            continue
        others.append((n, p.numel()))
    largest = 0
    for mod_name, module in base.named_modules():
        if _under(mod_name, within):
            largest = max(
                largest, sum(p.numel() for n, p in module.named_parameters(recurse=False) if "lora_" not in n)
            )
    return others, largest


def _layer_linears(layer) -> list[Linear]:
    """The ``nn.Linear`` modules of one decoder layer, LoRA wrappers looked through."""
    import torch

    linears = []
    for mod_name, module in layer.named_modules():
        if not isinstance(module, torch.nn.Linear) or "lora_" in mod_name:
            continue
        path = mod_name[: -len(".base_layer")] if mod_name.endswith(".base_layer") else mod_name
        linears.append(
            Linear(path.split(".")[-1], path, module.in_features, module.out_features, module.bias is not None)
        )
    return linears


def _count_unique(base, within) -> tuple[int, int]:
    """``(parameters, tensors)`` of the language model, each shared (tied) tensor counted once, LoRA's left out."""
    seen: set[int] = set()
    total = tensors = 0
    for n, p in base.named_parameters(remove_duplicate=True):
        if "lora_" in n or id(p) in seen or not _under(n.replace(".base_layer", ""), within):
            continue
        seen.add(id(p))
        total += p.numel()
        tensors += 1
    return total, tensors


def shape_from_model(name: str, model, within: tuple[str, ...] | None = None) -> ModelShape:
    """Read a (meta or real) causal LM's parameter layout; LoRA wrappers are looked through. ``within``: module-name
    prefixes of the language model inside a multimodal model (the rest is ``plan/vision.py``'s)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = base.config
    cfg = getattr(cfg, "text_config", None) or cfg
    layers = _decoder_layers(base, within)
    if layers is None:
        raise ModelError(Said("plan_no_layers", name=name))
    layers_path = next(n for n, m in base.named_modules() if m is layers)
    layout = moe_layout(base)
    sparse = _sparse_layer_ids(layout, layers_path)
    dense = tuple(i for i in range(len(layers)) if i not in sparse) if sparse else ()
    layer0 = layers[sparse[0]] if sparse else layers[0]  # a sparse layer stands for the rest; dense ones apart
    linears = _layer_linears(layer0)
    layer_named = _layer_named(layer0)
    layer_params = sum(p.numel() for _, p in layer_named)
    emb = base.get_input_embeddings()
    out = base.get_output_embeddings()
    tied = out is not None and out.weight is emb.weight
    embed_params = emb.weight.numel()
    lm_head_params = 0 if (tied or out is None) else sum(p.numel() for p in out.parameters())
    total, tensors = _count_unique(base, within)
    others, largest = _outside_layers(base, layers_path, within)
    heads = int(cfg.num_attention_heads)
    hidden = int(cfg.hidden_size)
    head_dim = int(getattr(cfg, "head_dim", None) or hidden // heads)
    experts = int(
        getattr(cfg, "num_experts", 0)
        or getattr(cfg, "num_local_experts", 0)
        or getattr(cfg, "n_routed_experts", 0)
        or 0
    )
    return ModelShape(
        name=name,
        model_type=str(cfg.model_type),
        hidden=hidden,
        layers=len(layers),
        heads=heads,
        kv_heads=int(getattr(cfg, "num_key_value_heads", None) or heads),
        head_dim=head_dim,
        intermediate=int(getattr(cfg, "intermediate_size", 4 * hidden)),
        vocab=int(cfg.vocab_size),
        tied=bool(tied),
        total_params=total,
        embed_params=embed_params,
        lm_head_params=lm_head_params,
        layer_params=layer_params,
        linears=tuple(linears),
        largest_module_params=largest,
        num_param_tensors=tensors,
        layer_param_tensors=len(layer_named),
        num_experts=experts,
        layer_param_names=tuple((n, p.numel()) for n, p in layer_named),
        other_param_names=tuple(others),
        logit_softcap=bool(getattr(cfg, "final_logit_softcapping", None)),
        attn_softcap=bool(getattr(cfg, "attn_logit_softcapping", None)),
        layers_path=layers_path,
        moe=moe_counts(base, layout, total, within),
        dense_layers=dense,
        dense_linears=tuple(_layer_linears(layers[dense[0]])) if dense else (),
        dense_param_names=tuple((n, p.numel()) for n, p in _layer_named(layers[dense[0]])) if dense else (),
        latent=latent_dims(cfg),
    )


def _sparse_layer_ids(layout: MoeLayout | None, layers_path: str) -> list[int]:
    """The decoder layers (by index) holding one of the sparse-MoE blocks ``model/moe.py`` finds, in order."""
    prefix = layers_path + "."
    blocks = layout.blocks if layout is not None else ()
    return sorted({int(b[len(prefix) :].split(".")[0]) for b in blocks if b.startswith(prefix)})


def _layer_named(layer) -> list:
    """``(name inside the layer, parameter)`` of one decoder layer, LoRA wrappers looked through."""
    return [(n.replace(".base_layer", ""), p) for n, p in layer.named_parameters() if "lora_" not in n]


def load_shape(model_config: str | None, model_name_or_path: str | None) -> ModelShape:
    name, config = read_config_json(model_config, model_name_or_path)
    return shape_from_config(name, config)


def training_shape(cfg: Config) -> ModelShape:
    """The shape of the model ``tunekit train`` is about to load: a folder or built-in name as :func:`load_shape` reads
    it, a hub id of another model from the config.json training fetches next (the hub or its cache, ``revision`` and
    ``cache_dir`` included: ``model.loader.load_model_config``)."""
    path = cfg.model_name_or_path
    if not path or is_local_path(path) or find_builtin(path) is not None:
        return load_shape(None, path)
    return shape_from_config(builtin_key(path), text_only(load_model_config(cfg).to_dict()))
