"""``tunekit export`` of a P-Tuning v2 (prefix) or prompt-tuning adapter: written as an adapter, never as a model.

A prefix (keys and values given to every layer's attention) or a prompt (virtual tokens before the input) is not a
change of any weight, so there is nothing to merge it into: a "merged" folder would be the base model again. The
export folder therefore holds the adapter as PEFT loads it — ``adapter_config.json`` whose ``base_model_name_or_path``
names the base model (its absolute path for a local folder), ``adapter_model.safetensors`` — the tokenizer with the
chat template, and ``tunekit_export.json`` with ``"kind": "prompt_adapter"`` and the base; no ``config.json``, no model
weights. ``PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), export_dir)`` loads it, and
``tunekit verify`` checks exactly that against base + the trained adapter (``verify.verify_prompt_export``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..config.schema import Config
from ..errors import ConfigError
from ..model.pickles import check_adapter_folder
from ..model.prompt_adapters import adapter_peft_type, is_prompt_adapter
from .provenance import recorded, sources, template_settings
from .template_choice import export_tokenizer_and_template

PROMPT_ADAPTER_KIND = "prompt_adapter"  # tunekit_export.json's "kind" for such an export
_ADAPTER_FILES = ("adapter_model.safetensors", "adapter_model.bin")


def exports_prompt_adapter(cfg: Config) -> bool:
    """Whether ``tunekit export`` writes an adapter, not merged weights (the last adapter is a prefix / prompt)."""
    return bool(cfg.adapter_paths) and is_prompt_adapter(cfg.adapter_paths[-1])


def not_mergeable_message(path: str, out: Path, base: str) -> str:
    kind = adapter_peft_type(path)
    return (
        f"{path} is a {kind} adapter: a prefix or prompt adapter adds trained keys/values or virtual tokens, it "
        "changes no weight, so it cannot be merged into the model's weights. Writing the adapter to "
        f"{out} with a reference to its base model {base} instead (no merged model); load it with "
        f"PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained('{base}'), '{out}')."
    )


def check_prompt_export(cfg: Config) -> None:
    """What a prefix/prompt adapter export cannot do, refused before anything is written."""
    path = cfg.adapter_paths[-1]
    if cfg.export_quantization_bit is not None:
        raise ConfigError(
            f"export_quantization_bit {cfg.export_quantization_bit} quantizes merged weights, and {path} is a "
            f"{adapter_peft_type(path)} adapter, which is not merged: remove export_quantization_bit (the adapter is "
            "exported with a reference to its base; quantize the base model on its own if needed)."
        )
    if len(cfg.adapter_paths) > 1:
        raise ConfigError(
            f"adapter_name_or_path lists {len(cfg.adapter_paths)} adapters and the last, {path}, is a "
            f"{adapter_peft_type(path)} adapter, which is exported unmerged with a reference to its base: export "
            f"the base with the adapters before it merged first ({', '.join(cfg.adapter_paths[:-1])}), then export "
            f"{path} with model_name_or_path set to that folder."
        )


def write_prompt_adapter(cfg: Config, out: Path, save_tokenizer, provenance_name: str) -> Path:
    """The adapter folder described in the module docstring (``save_tokenizer``: the exporter's, which writes the
    template as ``chat_template``)."""
    check_prompt_export(cfg)
    path = cfg.adapter_paths[-1]
    check_adapter_folder(path)
    base = recorded(cfg.model_name_or_path)
    print(not_mergeable_message(path, out, base))
    cfg, tokenizer, template = export_tokenizer_and_template(cfg, "adapter")
    out.mkdir(parents=True, exist_ok=True)
    for name in (*_ADAPTER_FILES, "config.json", "model.safetensors", "model.safetensors.index.json"):
        (out / name).unlink(missing_ok=True)  # a re-export in place: nothing of an earlier export is left
    config = json.loads((Path(path) / "adapter_config.json").read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base
    config["inference_mode"] = True
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    weights = next(Path(path) / name for name in _ADAPTER_FILES if (Path(path) / name).is_file())
    shutil.copyfile(weights, out / weights.name)
    save_tokenizer(tokenizer, template, out, cfg.enable_thinking)
    adapter = recorded(path)
    provenance = {
        "kind": PROMPT_ADAPTER_KIND,
        "peft_type": config.get("peft_type"),
        "merged": False,
        **sources(base, [adapter], out),
        **template_settings(cfg),
    }
    (out / provenance_name).write_text(json.dumps(provenance, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out
