"""``tunekit export``: base (+ adapters merged, or a full/freeze/ZeRO checkpoint) -> a standard HF folder.

The folder holds safetensors shards no larger than ``export_size`` GB and ``model.safetensors.index.json``,
config.json, generation_config.json (eos = the template's stop tokens, pad from the tokenizer), the
tokenizer with the template written into ``chat_template`` (so plain ``apply_chat_template`` renders what
tunekit renders), and ``tunekit_export.json`` (where it came from; ``tunekit verify`` reads it). A vision-language
or audio model is exported whole, with its processor files and its official chat template (``export/media.py``).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ..config.problems import Said, config_error
from ..config.schema import Config
from ..errors import EnvironmentProblem, ModelError
from ..model.finetuning import apply_finetuning
from ..model.loader import load_model, load_model_config, model_path
from ..model.stops import stop_token_ids
from .files import BIN_INDEX, SAFE_INDEX, ensure_index, shard_bytes, to_legacy_bin
from .gguf_export import check_gguf_export, export_gguf
from .gptq_export import export_gptq
from .media import check_multimodal_export, media_export, provenance_entry, write_processor
from .prompt_adapter import exports_prompt_adapter, write_prompt_adapter
from .provenance import recorded, sources, template_settings
from .quantize import check_available, merged_export_config, quantization_method, quantize_merged
from .template_choice import export_tokenizer_and_template
from .verify import print_report, verify_export
from .zero import consolidate_zero, zero_tag

PROVENANCE = "tunekit_export.json"
_WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.gguf", SAFE_INDEX, BIN_INDEX)


def adapters_of(cfg: Config) -> list[str]:
    return cfg.adapter_paths


def check_export_dir(cfg: Config) -> Path:
    if not cfg.export_dir:
        raise config_error("export_dir_unset", ("export_dir",))
    out = Path(cfg.export_dir).expanduser().resolve()
    sources = [cfg.model_name_or_path or "", *adapters_of(cfg)]
    if any(s and Path(s).expanduser().resolve() == out for s in sources):
        raise config_error("export_dir_is_source", ("export_dir",), path=str(cfg.export_dir))
    if out.exists() and not out.is_dir():
        raise config_error("export_dir_is_file", ("export_dir",), path=str(cfg.export_dir))
    weights = sorted(p.name for pattern in _WEIGHT_PATTERNS for p in out.glob(pattern)) if out.is_dir() else []
    if (
        weights and not (out / PROVENANCE).is_file()
    ):  # an export is re-exported in place; another model is not replaced
        files = ", ".join(weights[:3]) + (" ..." if len(weights) > 3 else "")
        raise config_error(
            "export_dir_foreign", ("export_dir",), path=str(cfg.export_dir), files=files, marker=PROVENANCE
        )
    return out


def export_model(cfg: Config, verify: bool | None = None) -> Path:
    out = check_export_dir(cfg)
    if cfg.export_format == "gguf":  # refused by name before anything is written (gguf_export.py)
        check_gguf_export(cfg)
    if exports_prompt_adapter(cfg):  # a prefix / prompt adapter has no weights to merge into (prompt_adapter.py)
        write_prompt_adapter(cfg, out, save_tokenizer, PROVENANCE)
        return _after_export(cfg, out, verify)
    source = model_path(cfg)
    check_multimodal_export(cfg)
    if (
        cfg.export_quantization_bit is not None
    ):  # a missing quantization package stops here, before anything is written
        check_available(cfg)
    with tempfile.TemporaryDirectory(prefix="tunekit-export-", dir=out.parent if out.parent.exists() else None) as tmp:
        if zero_tag(source):
            print(f"{source} is a DeepSpeed ZeRO checkpoint: consolidating it to fp32 first")
            cfg = cfg.model_copy(update={"model_name_or_path": str(consolidate_zero(source, Path(tmp) / "zero"))})
        if cfg.export_format == "gguf":  # llama.cpp's converter on the merged model, Modelfile beside it
            export_gguf(cfg, out, Path(tmp), write_merged, clear_weights)
        elif cfg.export_quantization_bit is not None:
            merged = write_merged(merged_export_config(cfg, Path(tmp)), Path(tmp) / "merged")
            if quantization_method(cfg) == "gptq":  # llm-compressor in its own environment (gptq_export.py)
                export_gptq(cfg, merged, out, PROVENANCE, check=cfg.export_verify if verify is None else verify)
            else:
                model, tokenizer, template, qcfg, quantization = quantize_merged(cfg, merged)
                save_folder(model, tokenizer, template, qcfg, out, quantization=quantization)
        else:
            write_merged(cfg, out)
    return _after_export(cfg, out, verify)


def _after_export(cfg: Config, out: Path, verify: bool | None) -> Path:
    """Verify (``export_verify``) and push (``export_hub_model_id``) the written folder."""
    print(f"exported to {out}")
    if verify if verify is not None else cfg.export_verify:
        report = verify_export(out, base_cfg=cfg if adapters_of(cfg) and cfg.export_quantization_bit is None else None)
        print_report(report)
        if not report["ok"]:
            raise ModelError(Said("export_verify_failed", path=str(out), problems=tuple(report["problems"])))
    if cfg.export_hub_model_id:
        push_to_hub(out, cfg.export_hub_model_id)
    return out


def target_dtype(cfg: Config):
    """infer_dtype, else dtype, else the dtype the base model was saved in."""
    import torch

    names = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    for choice in (cfg.infer_dtype, cfg.dtype):
        if choice != "auto":
            return names[choice]
    saved = getattr(load_model_config(cfg), "dtype", None)
    if isinstance(saved, str):
        saved = names.get(saved)
    return saved if saved in names.values() else torch.float32


def load_for_export(cfg: Config):
    """(model merged in fp32 on CPU, or in the target dtype on a GPU with export_device auto; tokenizer; template)."""
    import torch

    cfg, tokenizer, template = export_tokenizer_and_template(cfg)
    dtype = target_dtype(cfg)
    gpu = cfg.export_device == "auto" and torch.cuda.is_available()
    merge_dtype = (
        {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[dtype] if gpu else "float32"
    )
    base_cfg = cfg.model_copy(update={"adapter_name_or_path": None, "dtype": merge_dtype})
    model = load_model(base_cfg, tokenizer, is_trainable=False)
    if gpu:
        model.to("cuda")
    model = apply_finetuning(model, cfg, is_trainable=False)  # merges every adapter, in order
    model.to(device="cpu", dtype=dtype)
    return model, tokenizer, template, cfg


def clear_weights(out: Path) -> None:
    """Old shards would be mixed with new ones (different names or counts): remove weight files first."""
    if out.is_dir():
        for pattern in _WEIGHT_PATTERNS:
            for path in out.glob(pattern):
                path.unlink()


def write_merged(cfg: Config, out: Path) -> Path:
    model, tokenizer, template, cfg = load_for_export(cfg)
    save_folder(model, tokenizer, template, cfg, out, quantization=None, media=media_export(cfg, model, tokenizer))
    return out


def save_folder(
    model, tokenizer, template, cfg: Config, out: Path, quantization: dict | None, media: dict | None = None
) -> None:
    """``media``: a multimodal model's processor files and official chat template (``media.media_export``)."""
    out.mkdir(parents=True, exist_ok=True)
    clear_weights(out)
    stops = stop_token_ids(tokenizer, template, model.generation_config)  # what chat and predict stop on
    gen = model.generation_config
    gen.eos_token_id = stops[0] if len(stops) == 1 else stops
    gen.pad_token_id = tokenizer.pad_token_id
    model.config.use_cache = True
    model.save_pretrained(out, max_shard_size=shard_bytes(cfg.export_size))
    save_tokenizer(tokenizer, template, out, cfg.enable_thinking, official=media["chat_template"] if media else None)
    if media:
        write_processor(media, out)
    ensure_index(out)
    if cfg.export_legacy_format and quantization is None:
        to_legacy_bin(out)
    import torch

    base, adapters = recorded(cfg.model_name_or_path), [recorded(a) for a in adapters_of(cfg)]
    provenance = {
        **sources(base, adapters, out),
        **template_settings(cfg),
        "dtype": str(next(model.parameters()).dtype).replace("torch.", "") if quantization is None else None,
        "export_size_gb": cfg.export_size,
        "quantization": quantization,
        "stop_token_ids": stops,
        "torch": torch.__version__,
    }
    if media:
        provenance["multimodal"] = provenance_entry(media)
    (out / PROVENANCE).write_text(json.dumps(provenance, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def save_tokenizer(tokenizer, template, out: Path, enable_thinking: bool = True, official: str | None = None) -> None:
    """The tokenizer with the template as its ``chat_template``: plain ``apply_chat_template`` renders what tunekit
    renders.

    ``official``: a multimodal model's own chat template, kept instead (it renders image/audio content parts)."""
    jinja = official or template.chat_template_jinja(enable_thinking)
    if jinja:
        tokenizer.chat_template = jinja
    tokenizer.padding_side = "left"  # what batched generation with the exported model wants
    tokenizer.save_pretrained(out)


def push_to_hub(out: Path, repo_id: str) -> None:
    from huggingface_hub import HfApi

    try:
        api = HfApi()
        api.create_repo(repo_id, exist_ok=True)
        api.upload_folder(folder_path=str(out), repo_id=repo_id)
    except Exception as exc:  # network, auth
        error = str(exc).splitlines()[0][:200]
        raise EnvironmentProblem(Said("export_push_failed", path=str(out), repo=repo_id, error=error)) from None
    print(f"pushed to https://huggingface.co/{repo_id}")
