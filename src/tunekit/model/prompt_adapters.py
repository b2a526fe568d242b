"""P-Tuning v2 (``finetuning_type: ptuning``) and prompt tuning (``finetuning_type: prompt``) through PEFT.

* ``ptuning``: PEFT's prefix tuning (deep prompt tuning, as ChatGLM's P-Tuning v2 scripts train it): ``pre_seq_len``
  trained key/value vectors in front of every layer's attention, given to the model as a KV cache it starts from. With
  ``prefix_projection`` they are computed by a two-layer MLP (hidden ``prefix_hidden_size``) from ``pre_seq_len``
  embeddings; PEFT then saves the MLP's output, the prefix itself, so the saved adapter is the same for both.
* ``prompt``: PEFT's prompt tuning: ``num_virtual_tokens`` trained embeddings in front of the input embeddings
  (initialised from randomly sampled vocabulary embeddings, PEFT's ``SAMPLE_VOCAB``).

Neither changes a weight of the model, so neither merges into it: the saved adapter (``adapter_config.json`` with
``peft_type`` ``PREFIX_TUNING`` / ``PROMPT_TUNING``) is loaded by ``PeftModel.from_pretrained`` for inference and
export writes it beside a reference to its base (``export/prompt_adapter.py``).

PEFT saves a ``prefix_projection`` adapter as the projected prefix only, which cannot train the MLP further: tunekit's
checkpoint code (``train/checkpoint_weights.py``, the Trainer's ``_save`` / ``_load_from_checkpoint``) also writes the
whole prefix encoder (embeddings + MLP) to ``prefix_encoder.safetensors`` beside the adapter and reads it back on
resume (:func:`save_prefix_encoder`, :func:`load_prefix_encoder`); continuing from ``adapter_name_or_path`` reads it
too. Plain PEFT ignores the extra file.

Gradient checkpointing: none with ``ptuning`` (peft refuses prefix tuning on a checkpointed model; the schema refuses
``gradient_checkpointing: true`` with it and ``auto`` is off for it: ``config/method_rules.py``).

Generation with peft 0.21.2: :func:`fixed_generation`, a version-pinned workaround (its docstring names the bug).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..config.problems import Said, config_error
from ..config.schema import Config
from ..errors import ModelError
from .multimodal import is_multimodal_config
from .pickles import check_adapter_folder

PROMPT_METHODS = {"ptuning": "PREFIX_TUNING", "prompt": "PROMPT_TUNING"}  # finetuning_type -> PEFT's peft_type
METHOD_OF = {peft_type: method for method, peft_type in PROMPT_METHODS.items()}
# PEFT's other prompt-learning adapters, which tunekit does not train but loads unmerged all the same
OTHER_PROMPT_TYPES = ("P_TUNING", "MULTITASK_PROMPT_TUNING", "ADAPTION_PROMPT", "CPT")


def adapter_peft_type(path: str | Path) -> str | None:
    """The ``peft_type`` in an adapter folder's ``adapter_config.json`` (None when it has none or cannot be read)."""
    try:
        return json.loads((Path(path) / "adapter_config.json").read_text(encoding="utf-8")).get("peft_type")
    except (OSError, ValueError, AttributeError):
        return None


def is_prompt_adapter(path: str | Path) -> bool:
    """A prompt-learning adapter (prefix / prompt tuning and PEFT's other kinds): it cannot be merged into weights."""
    kind = adapter_peft_type(path)
    return kind in METHOD_OF or kind in OTHER_PROMPT_TYPES


def check_prompt_adapters(adapters: list[str]) -> None:
    """A prompt-learning adapter works on the model as it is: it can only be the last one of ``adapter_name_or_path``
    (the ones before it are merged into the weights first)."""
    for path in adapters[:-1]:
        if is_prompt_adapter(path):
            raise config_error(
                "prompt_adapter_not_last", ("adapter_name_or_path",), path=str(path), kind=adapter_peft_type(path)
            )


def check_prefix_attention(finetuning_type: str, config) -> None:
    """``ptuning`` on multi-head latent attention (DeepSeek-V2/V3; ``config``: the model's config or config.json's
    dict) is refused before the model loads: transformers caches its compressed latent and shared rotary key, one head
    each, where PEFT's prefix brings per-head keys and values of one width (peft 0.21.2 fails in its first forward)."""
    get = config.get if isinstance(config, dict) else lambda key: getattr(config, key, None)
    rank = get("kv_lora_rank")
    if finetuning_type == "ptuning" and isinstance(rank, int) and rank > 0:
        raise config_error(
            "ptuning_latent_attention",
            ("finetuning_type",),
            model_type=str(get("model_type")),
            rank=rank,
            rope=str(get("qk_rope_head_dim")),
        )


def refuse_under(method: str, adapters: list[str]) -> None:
    """Training ``method`` (lora, oft, freeze, full) starts from the adapters merged: a prefix/prompt one cannot be."""
    for path in adapters:
        if is_prompt_adapter(path):
            kind = adapter_peft_type(path)
            fix = Said("part_prompt_continue", method=METHOD_OF[kind]) if kind in METHOD_OF else Said("part_remove_it")
            raise config_error(
                "prompt_adapter_under",
                ("adapter_name_or_path", "finetuning_type"),
                path=str(path),
                kind=kind,
                method=method,
                fix=fix,
            )


def prompt_learning_config(cfg: Config):
    """PEFT's config for ``cfg.finetuning_type`` (``ptuning`` / ``prompt``)."""
    from peft import PrefixTuningConfig, PromptTuningConfig, PromptTuningInit, TaskType

    if cfg.finetuning_type == "ptuning":
        return PrefixTuningConfig(
            task_type=TaskType.CAUSAL_LM,
            num_virtual_tokens=cfg.pre_seq_len,
            prefix_projection=cfg.prefix_projection,
            encoder_hidden_size=cfg.prefix_hidden_size,
        )
    return PromptTuningConfig(
        task_type=TaskType.CAUSAL_LM,
        num_virtual_tokens=cfg.num_virtual_tokens,
        prompt_tuning_init=PromptTuningInit.SAMPLE_VOCAB,
    )


def apply_prompt_learning(model, cfg: Config, adapters: list[str], merge):
    """The model with a trainable prefix / prompt (``merge(model, path)`` merges a weight adapter listed before it).

    A last adapter of the same kind is trained further; a ``prefix_projection`` adapter continues its MLP from
    ``prefix_encoder.safetensors``, or without that file (PEFT saves only the MLP's output) as a plain prefix."""

    if is_multimodal_config(model.config):
        raise config_error(
            "plan_vlm_prompt", ("finetuning_type",), method=cfg.finetuning_type, name=type(model).__name__
        )
    check_prompt_adapters(adapters)
    resume = (
        adapters[-1] if adapters and adapter_peft_type(adapters[-1]) == PROMPT_METHODS[cfg.finetuning_type] else None
    )
    if adapters and resume is None and is_prompt_adapter(adapters[-1]):
        kind = adapter_peft_type(adapters[-1])
        raise config_error(
            "prompt_adapter_other_kind",
            ("adapter_name_or_path", "finetuning_type"),
            path=str(adapters[-1]),
            kind=kind,
            method=cfg.finetuning_type,
            peft_type=PROMPT_METHODS[cfg.finetuning_type],
            target=METHOD_OF.get(kind) or Said("part_to_its_kind"),
        )
    for path in adapters[:-1] if resume else adapters:
        model = merge(model, path)
    for p in model.parameters():
        p.requires_grad_(False)
    return fixed_generation(_attach(model, cfg, resume))


def _attach(model, cfg: Config, resume: str | None):
    """PEFT's prefix / prompt on ``model``: new, or ``resume`` (an adapter of the same kind) trained further."""
    from peft import PeftConfig, get_peft_model

    if resume and cfg.finetuning_type == "ptuning" and cfg.prefix_projection and encoder_file(resume).is_file():
        model = get_peft_model(model, prompt_learning_config(cfg))  # the MLP continues from its saved state
        load_prefix_encoder(model, resume)
    elif resume:
        check_adapter_folder(resume)
        config = PeftConfig.from_pretrained(resume)
        _check_same_length(cfg, config, resume)
        config.inference_mode = False  # PEFT refuses to load a prompt-learning adapter as trainable: build, then load
        if getattr(config, "prefix_projection", False):
            config.prefix_projection = False  # the saved prefix is the MLP's output: it trains as a plain prefix
            print(
                f"{resume} holds the projected prefix only (no {ENCODER_FILE}): it continues training as a plain "
                "prefix, without the prefix MLP."
            )
        try:
            model = get_peft_model(model, config)
            model.load_adapter(resume, "default", is_trainable=True)
        except (OSError, ValueError, RuntimeError) as exc:
            raise ModelError(
                Said("adapter_resume_unloadable", path=str(resume), error=str(exc).splitlines()[0])
            ) from None
    else:
        model = get_peft_model(model, prompt_learning_config(cfg))
    return model


def _check_same_length(cfg: Config, config, resume: str) -> None:
    """A continued adapter keeps its own number of virtual tokens: a different one set in the config is refused."""
    option = "pre_seq_len" if cfg.finetuning_type == "ptuning" else "num_virtual_tokens"
    if option in cfg.model_fields_set and getattr(cfg, option) != config.num_virtual_tokens:
        raise config_error(
            "prompt_tokens_differ",
            (option, "adapter_name_or_path"),
            option=option,
            value=getattr(cfg, option),
            tokens=config.num_virtual_tokens,
            path=str(resume),
        )


def load_prompt_adapter(model, path: str):
    """A prompt-learning adapter for inference: loaded, not merged (there is no weight to merge it into)."""
    from peft import PeftModel

    check_adapter_folder(path)
    try:
        return fixed_generation(PeftModel.from_pretrained(model, path))
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelError(Said("adapter_unloadable", path=str(path), error=str(exc).splitlines()[0])) from None


ENCODER_FILE = "prefix_encoder.safetensors"  # a prefix_projection model's whole prefix encoder (module docstring)
_ENCODER_KEYS = "prompt_encoder.default."  # its tensors' names in the PeftModel's state dict


def encoder_file(folder) -> Path:
    return Path(folder) / ENCODER_FILE


def projected_prefix(model) -> bool:
    """``model`` is a PeftModel training a ``prefix_projection`` prefix (whose adapter file holds only the MLP's
    output)."""
    config = getattr(model, "peft_config", {}).get("default") if hasattr(model, "prompt_encoder") else None
    return getattr(config, "peft_type", None) == "PREFIX_TUNING" and bool(getattr(config, "prefix_projection", False))


def save_prefix_encoder(model, folder, state_dict: dict | None = None) -> None:
    """The prefix encoder of ``model`` (:func:`projected_prefix`) to ``folder/prefix_encoder.safetensors``; taken from
    ``state_dict`` when it holds it (the Trainer's gathered state under ZeRO-3), else from the model."""
    from safetensors.torch import save_file

    gathered = {k.split(_ENCODER_KEYS, 1)[1]: v for k, v in (state_dict or {}).items() if _ENCODER_KEYS in k}
    state = gathered or model.prompt_encoder["default"].state_dict()
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in state.items()}, str(encoder_file(folder)), {"format": "pt"}
    )


def load_prefix_encoder(model, folder) -> bool:
    """``folder/prefix_encoder.safetensors`` into ``model``'s prefix encoder, in place (an optimizer keeps the same
    parameters); False when ``folder`` has none."""
    from safetensors.torch import load_file

    if not encoder_file(folder).is_file():
        return False
    encoder = model.prompt_encoder["default"]
    encoder.load_state_dict(load_file(str(encoder_file(folder)), device=str(encoder.embedding.weight.device)))
    return True


# ---- workaround: peft 0.21.2 with transformers 5 (constraints.txt); delete once peft generates with the cache ----
# the peft release it was written for: tests/model/test_prompt_adapters_workaround.py fails on another one
FIXED_GENERATION_PEFT = "0.21.2"


def fixed_generation(model):
    """Workaround for peft 0.21.2: ``PeftModelForCausalLM.prepare_inputs_for_generation`` calls
    ``base_model_prepare_inputs_for_generation`` (the base model's) and then reads and writes the KV cache as
    ``past_key_values``, but transformers 5 hands it to the step and the model as ``cache``. peft's prompt-learning
    step then never sees a cache: a prefix is handed over as ``past_key_values`` beside ``cache`` and ignored (the
    base model's reply), a prompt is put in front of each new token again. This gives peft's step the cache under its
    name (greedy decoding then equals a full forward of the prompt + the tokens so far, step by step).

    It replaces the instance attribute peft sets in ``PeftModel.__init__``. ``tests/model/test_prompt_adapters_
    workaround.py`` checks that the attribute still exists and that the installed peft still has the bug, so it fails
    (delete this function and its calls) once peft is fixed."""
    prepare = model.base_model_prepare_inputs_for_generation

    def prepare_inputs(*args, **kwargs):
        inputs = prepare(*args, **kwargs)
        if "cache" in inputs and "past_key_values" not in inputs:
            inputs["past_key_values"] = inputs.pop("cache")
        return inputs

    model.base_model_prepare_inputs_for_generation = prepare_inputs
    return model


# ---- end of the workaround ----
