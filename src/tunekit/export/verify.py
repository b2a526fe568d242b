"""``tunekit verify EXPORT_DIR``: check an exported folder the way a user of it will load it — plain transformers.

Checks: the weight index matches the shard files (every key once, every file present, shard sizes within
``export_size``), transformers loads it without missing/unexpected/mismatched keys, saved shapes equal
the model's and every floating tensor has the config's dtype, the saved ``chat_template`` renders what
tunekit's template renders, a few tokens generate, and for a merged LoRA the logits equal base + adapter
(unmerged, in tunekit) within 1e-4 in fp32. A prefix / prompt adapter export (an adapter folder with its base recorded,
``export/prompt_adapter.py``) is checked as plain peft loads it: base + adapter (:func:`verify_prompt_export`). A
vision-language or audio export is loaded as its whole class and checked with its processor on an image (or audio)
prompt instead of the text checks (``verify_media``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..config import load_config
from ..config.problems import Said
from ..config.schema import Config
from ..data.templates import get_template
from ..errors import ModelError
from ..model.multimodal import is_multimodal_config, model_class
from ..model.prompt_adapters import fixed_generation
from .checks import LOGIT_TOLERANCE, reference_model
from .checks import problem as _problem
from .checks import skip as _skip
from .files import BIN_INDEX, SAFE_INDEX
from .gguf_export import GGUF_FORMAT
from .gguf_verify import verify_gguf_export
from .verify_media import verify_media

PROMPT = "Hello! What can you do?"
_FLOAT_CODES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}


def _conversations() -> list[list[dict]]:
    return [
        [{"role": "user", "content": PROMPT}],
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello, how can I help?"},
            {"role": "user", "content": "Tell me a joke."},
        ],
    ]


def verify_export(path: str | Path, base_cfg: Config | None = None, max_new_tokens: int = 8) -> dict:
    """A report dict: ``ok``, ``problems`` (list of text), ``checks`` (name -> detail) and measured figures."""
    path = Path(path)
    report: dict[str, Any] = {"path": str(path), "ok": True, "problems": [], "checks": {}}
    provenance = _read_json(path / "tunekit_export.json") or {}
    if provenance.get("format") == GGUF_FORMAT:  # checked in llama.cpp itself (gguf_verify.py)
        reference, why_not = (base_cfg, None) if base_cfg is not None else _base_cfg_from(provenance, path)
        return verify_gguf_export(path, {**report, "provenance": provenance}, reference, why_not)
    if not (path / "config.json").is_file() and (path / "adapter_config.json").is_file():
        return verify_prompt_export(path, report, base_cfg, max_new_tokens)
    if not (path / "config.json").is_file():
        raise ModelError(Said("verify_no_config", path=str(path)))
    report["provenance"] = provenance
    quantized = bool(provenance.get("quantization")) or "quantization_config" in (
        _read_json(path / "config.json") or {}
    )
    _check_index(path, provenance, report)
    if not report["ok"]:  # missing or inconsistent weight files: loading would only fail less clearly
        return report

    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(path)
        model, info = model_class(config).from_pretrained(path, dtype="auto", output_loading_info=True)
    except (OSError, ValueError, RuntimeError) as exc:
        _problem(report, Said("verify_load_failed", path=str(path), error=str(exc).splitlines()[0][:300]))
        return report
    model.eval()
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        reported = tuple(f"{k}: {sorted(map(str, v))[:5]}" for k, v in bad.items())  # transformers' own names: values
        _problem(report, Said("verify_load_keys", reported=reported))
    report["checks"]["load"] = f"{type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} parameters"
    if not quantized:
        _check_shapes(path, model, report)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if is_multimodal_config(config):
        verify_media(
            path,
            model,
            tokenizer,
            provenance,
            _adapters_cfg(provenance, base_cfg, path, quantized, report),
            report,
            max_new_tokens,
        )
        return report
    _check_template(tokenizer, provenance, report)
    _generate(model, tokenizer, report, max_new_tokens)
    adapters_cfg = _adapters_cfg(provenance, base_cfg, path, quantized, report)
    if adapters_cfg is not None:
        _compare_logits(path, model, tokenizer, adapters_cfg, report)
    del model
    return report


def _adapters_cfg(provenance: dict, base_cfg: Config | None, path: Path, quantized: bool, report: dict):
    """The config of base + adapters a merged export must equal, or None (not merged, or the check is skipped)."""
    if not provenance.get("adapters") and base_cfg is None:
        return None
    adapters_cfg, reason = (base_cfg, None) if base_cfg is not None else _base_cfg_from(provenance, path)
    if quantized:
        _skip(
            report,
            "merged_logits",
            "a quantized export differs from base + adapter by its quantization error by "
            "design; verify the export without export_quantization_bit for this check",
        )
        return None
    if adapters_cfg is None:
        _skip(report, "merged_logits", reason)
    return adapters_cfg


# ---------------------------------------------------------------------------------------------- checks
def _read_json(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _check_index(path: Path, provenance: dict, report: dict) -> None:
    index = _read_json(path / SAFE_INDEX) or _read_json(path / BIN_INDEX)
    if index is None:
        if (path / "model.safetensors").is_file() or (path / "pytorch_model.bin").is_file():
            report["checks"]["index"] = "single weight file, no index"
        else:
            _problem(report, Said("verify_no_weights", path=str(path), index=SAFE_INDEX))
        return
    weight_map: dict[str, str] = index.get("weight_map", {})
    files = sorted(set(weight_map.values()))
    missing = [f for f in files if not (path / f).is_file()]
    if missing:
        _problem(report, Said("verify_missing_shards", shards=tuple(missing)))
        return
    limit = provenance.get("export_size_gb")
    sizes = {f: (path / f).stat().st_size for f in files}
    if all(f.endswith(".safetensors") for f in files):
        from safetensors import safe_open

        seen: dict[str, str] = {}
        for f in files:
            with safe_open(str(path / f), framework="pt") as handle:
                keys = list(handle.keys())
            for k in keys:
                if k in seen:
                    _problem(report, Said("verify_tensor_twice", tensor=k, first=seen[k], second=f))
                seen[k] = f
            if limit and sizes[f] > limit * 10**9 and len(keys) > 1:
                _problem(report, Said("verify_shard_too_big", shard=f, size=sizes[f], limit=limit))
        if set(seen) != set(weight_map) or any(weight_map[k] != v for k, v in seen.items()):
            extra = sorted(set(seen) - set(weight_map))[:5]
            absent = sorted(set(weight_map) - set(seen))[:5]
            _problem(report, Said("verify_index_mismatch", extra=str(extra), absent=str(absent)))
    report["checks"]["index"] = (
        f"{len(weight_map)} tensors in {len(files)} shard(s), largest {max(sizes.values()):,} bytes"
    )
    report["shards"] = sizes


def _check_shapes(path: Path, model, report: dict) -> None:
    from safetensors import safe_open

    declared = str(getattr(model.config, "dtype", "") or "").replace("torch.", "")
    state = model.state_dict()
    saved, dtypes = {}, set()
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as handle:
            for k in list(handle.keys()):  # a safetensors handle, not a dict: it has keys() only
                sl = handle.get_slice(k)
                if sl.get_dtype() in _FLOAT_CODES:
                    dtypes.add(_FLOAT_CODES[sl.get_dtype()])
                saved[k] = tuple(sl.get_shape())
    wrong = [
        Said("part_verify_shape", tensor=k, saved=str(shape), model=str(tuple(state[k].shape)))
        for k, shape in saved.items()
        if k in state and shape != tuple(state[k].shape)
    ]
    renamed = sorted(shape for k, shape in saved.items() if k not in state)
    if renamed and renamed != _other_shapes(state, set(saved)):
        wrong.append(Said("part_verify_renamed", count=len(renamed)))
    if wrong:
        _problem(report, Said("verify_shape_mismatch", shapes=tuple(wrong[:5])))
    if declared and dtypes and dtypes != {declared}:
        _problem(report, Said("verify_dtype_mismatch", declared=declared, held=str(sorted(dtypes))))
    # transformers saves some classes (Qwen2-VL ...) in their original checkpoint layout, under other names than the
    # model's: those are compared by shape as a whole (loading already reported no missing/unexpected/mismatched key)
    note = f" ({len(renamed)} under the checkpoint layout's names, compared by shape)" if renamed else ""
    report["checks"]["shapes"] = (
        f"{len(saved)} tensors match the model's shapes{note}; dtype {', '.join(sorted(dtypes)) or '?'}"
    )


def _other_shapes(state: dict, saved: set[str]) -> list[tuple]:
    """Sorted shapes of the model's tensors not saved under their own name, each storage once (tied weights)."""
    taken = {state[k].data_ptr() for k in saved if k in state}
    out = []
    for k, v in state.items():
        if k not in saved and v.data_ptr() not in taken:
            taken.add(v.data_ptr())
            out.append(tuple(v.shape))
    return sorted(out)


def _check_template(tokenizer, provenance: dict, report: dict) -> None:
    if not getattr(tokenizer, "chat_template", None):
        _problem(report, Said("verify_no_chat_template"))
        return
    convs = _conversations()
    rendered = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in convs]
    report["rendered_prompt"] = rendered[0]
    name = provenance.get("template")
    if not name or name == "jinja":
        report["checks"]["chat_template"] = "renders (no tunekit template recorded to compare with)"
        return

    tpl = get_template(
        name,
        tokenizer,
        tool_format=provenance.get("tool_format"),
        empty_eos=provenance.get("empty_template_eos", True),
    )
    thinking = provenance.get("enable_thinking", True)
    system = provenance.get("default_system")
    ours = [tpl.render_prompt(c, system or None, None, thinking) for c in convs]
    if ours != rendered:
        i = next(i for i in range(len(ours)) if ours[i] != rendered[i])
        said = Said("verify_template_differs", template=name, saved=repr(rendered[i]), ours=repr(ours[i]))
        _problem(report, said)
    else:
        report["checks"]["chat_template"] = f"apply_chat_template == tunekit '{name}' on {len(convs)} conversations"


def _generate(model, tokenizer, report: dict, max_new_tokens: int) -> None:
    import torch

    text = report.get("rendered_prompt") or PROMPT
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").to(model.device)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, min_new_tokens=1)
    seconds = time.perf_counter() - start
    new = out[0, ids["input_ids"].shape[1] :]
    report["generated"] = tokenizer.decode(new, skip_special_tokens=True)
    report["generated_tokens"] = int(new.numel())
    report["tokens_per_second"] = round(new.numel() / seconds, 1) if seconds > 0 else None
    if new.numel() == 0:
        _problem(report, Said("verify_no_tokens"))
    report["checks"]["generate"] = f"{new.numel()} tokens in {seconds:.2f} s"


def resolve_recorded(recorded: dict, key: str, export_dir: Path) -> list[tuple[str, Path | None]]:
    """The paths tunekit_export.json recorded under ``key`` (``base``: one, ``adapters``: a list), each resolved.

    Returns ``(as recorded, local folder or None)``. An absolute path is used when it exists; otherwise the path
    relative to the export folder (``<key>_relative_to_export``, written since the export itself moved with its
    sources), then a relative path against the export folder, the folder the export was written from
    (``written_from``) and the current folder, in that order. None: not found locally (a hub id, or moved away).
    """
    value = recorded.get(key)
    values = [value] if isinstance(value, str) else list(value or [])
    relative = recorded.get(f"{key}_relative_to_export")
    relatives = [relative] if isinstance(relative, str) else list(relative or [None] * len(values))
    out = []
    for given, rel in zip(values, relatives + [None] * (len(values) - len(relatives))):
        p = Path(given).expanduser()
        candidates = [p] if p.is_absolute() else []
        if rel:
            candidates.append(export_dir / rel)
        if not p.is_absolute():
            candidates += (
                [export_dir / p]
                + ([Path(recorded["written_from"]) / p] if recorded.get("written_from") else [])
                + [Path.cwd() / p]
            )
        found = next((c.resolve() for c in candidates if c.exists()), None)
        out.append((given, found))
    return out


def _hub_cached(repo_id: str) -> str | None:
    """The local snapshot folder of a hub model already in the cache (verify downloads nothing), else None."""
    if repo_id.count("/") != 1 or repo_id.startswith((".", "/", "~")):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # a name the hub would reject
        return None
    return str(Path(hit).parent) if isinstance(hit, str) else None


def _base_cfg_from(provenance: dict, export_dir: Path):
    """(config of base + adapters as recorded, None) or (None, why the merged-vs-adapter check cannot run)."""
    if not provenance.get("base"):
        return None, "tunekit_export.json records adapters but no base model"
    ((base_given, base),) = resolve_recorded(provenance, "base", export_dir)
    if base is None:
        cached = _hub_cached(base_given)
        if cached is None:
            return None, (
                f"the base model {base_given} recorded in tunekit_export.json is not a local folder here "
                f"(looked next to {export_dir} and in {Path.cwd()}) nor a hub model in the local cache"
            )
        base = Path(cached)
    adapters = resolve_recorded(provenance, "adapters", export_dir)
    gone = [given for given, found in adapters if found is None]
    if gone:
        return None, (
            f"adapter folder(s) {', '.join(gone)} recorded in tunekit_export.json not found here "
            f"(looked next to {export_dir} and in {Path.cwd()})"
        )

    return load_config(
        None,
        {
            "model_name_or_path": str(base),
            "adapter_name_or_path": ",".join(str(f) for _, f in adapters),
            "template": provenance.get("template"),
        },
    ), None


def _compare_logits(path: Path, model, tokenizer, base_cfg: Config, report: dict) -> None:
    import torch

    exported_dtype = str(model.dtype).replace("torch.", "")
    reference = reference_model(base_cfg)
    text = report.get("rendered_prompt") or PROMPT
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        merged = model.float()(input_ids=ids).logits
        ref = reference(input_ids=ids).logits
        with reference.disable_adapter():  # the base alone: an export that silently equals the base is caught
            base = reference(input_ids=ids).logits
    diff = float((merged - ref).abs().max())
    effect = float((ref - base).abs().max())
    report["max_abs_logit_diff"] = diff
    report["adapter_effect"] = effect
    if effect > 0 and float((merged - base).abs().max()) == 0:
        _problem(report, Said("verify_not_merged"))
    bound = LOGIT_TOLERANCE.get(exported_dtype)
    positions = int(ids.shape[1])
    detail = Said("part_verify_merged_logits", diff=diff, positions=positions, dtype=exported_dtype, effect=effect)
    if bound is not None and diff >= bound:
        _problem(report, Said("verify_merged_logits_above", detail=detail, bound=bound))
    report["checks"]["merged_logits"] = detail + (f" < {bound:g}" if bound is not None and diff < bound else "")


def verify_prompt_export(path: Path, report: dict, base_cfg: Config | None, max_new_tokens: int) -> dict:
    """A prefix / prompt adapter export: plain transformers loads the base its ``adapter_config.json`` names (found as
    ``tunekit_export.json`` recorded it), plain ``PeftModel.from_pretrained`` the adapter; the template renders like
    tunekit's, it generates, and its logits equal base + the trained adapter loaded by tunekit (and differ from the
    base's: the prefix / prompt is applied)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    provenance = _read_json(path / "tunekit_export.json") or {}
    report["provenance"] = provenance
    adapter = _read_json(path / "adapter_config.json") or {}
    recorded = {**provenance, "base": provenance.get("base") or adapter.get("base_model_name_or_path")}
    if not recorded["base"]:
        _problem(report, Said("verify_adapter_no_base"))
        return report
    ((given, base),) = resolve_recorded(recorded, "base", path)
    base = base or _hub_cached(given)
    if base is None:
        _problem(report, Said("verify_adapter_base_missing", base=given))
        return report
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32).eval()
    model = PeftModel.from_pretrained(model, str(path)).eval()
    trained = sum(p.numel() for p in model.prompt_encoder.parameters())
    report["checks"]["load"] = (
        f"{adapter.get('peft_type')} adapter ({trained:,} parameters) on {base} with plain peft; not merged"
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    _check_template(tokenizer, provenance, report)
    _plain_generate_note(model, tokenizer, report)
    _generate(fixed_generation(model), tokenizer, report, max_new_tokens)  # as tunekit's chat / api / predict do
    trained_cfg = base_cfg if base_cfg is not None else _base_cfg_from(provenance, path)[0]
    if trained_cfg is None:
        _skip(report, "adapter_logits", "the trained adapter recorded in tunekit_export.json is not found here")
        return report
    ids = tokenizer(report.get("rendered_prompt") or PROMPT, add_special_tokens=False, return_tensors="pt")
    reference = reference_model(trained_cfg.model_copy(update={"adapter_name_or_path": trained_cfg.adapter_paths[-1]}))
    n = ids["input_ids"].shape[1]  # prompt tuning's logits start with its virtual tokens': compare the input's
    with torch.inference_mode():
        exported, ref = model(**ids).logits[:, -n:], reference(**ids).logits[:, -n:]
        with model.disable_adapter():
            plain = model(**ids).logits
    diff, effect = float((exported - ref).abs().max()), float((ref - plain).abs().max())
    report["max_abs_logit_diff"], report["adapter_effect"] = diff, effect
    detail = Said("part_verify_adapter_logits", diff=diff, effect=effect)
    if effect == 0:
        _problem(report, Said("verify_adapter_no_effect", detail=detail))
    elif diff >= LOGIT_TOLERANCE["float32"]:
        _problem(report, Said("verify_adapter_logits_above", detail=detail, bound=LOGIT_TOLERANCE["float32"]))
    report["checks"]["adapter_logits"] = str(detail)
    return report


def _plain_generate_note(model, tokenizer, report: dict) -> None:
    """Whether plain peft's ``generate`` applies the adapter at its first step (its logits equal the forward's): with
    transformers 5 it does not for prefix / prompt tuning (``model/prompt_adapters.fixed_generation``), and a user of
    the folder needs to know. A note, not a problem: the folder itself is right."""
    import torch

    ids = tokenizer(report.get("rendered_prompt") or PROMPT, add_special_tokens=False, return_tensors="pt")
    with torch.inference_mode():
        step = model.generate(
            **ids, max_new_tokens=1, do_sample=False, output_logits=True, return_dict_in_generate=True
        ).logits[0][0]
        diff = float((step - model(**ids).logits[0, -1]).abs().max())
    if diff > LOGIT_TOLERANCE["float32"]:
        import transformers

        report["checks"]["peft_generate"] = (
            f"note: plain peft's generate does not apply this adapter with transformers {transformers.__version__} "
            f"(its first step differs from the adapter's forward by {diff:.3e}); tunekit chat, api and predict "
            "generate with it, as the check below does"
        )


def print_report(report: dict) -> None:
    skipped = report.get("skipped") or {}
    if not report["ok"]:
        headline = "FAILED"
    elif skipped:  # never "OK" for a check that did not run
        headline = (
            f"no problems found, but {len(skipped)} check{'s' if len(skipped) > 1 else ''} skipped "
            f"({', '.join(skipped)}): not verified"
        )
    else:
        headline = "OK"
    print(f"verify {report['path']}: {headline}")
    for name, detail in report["checks"].items():
        print(f"  {name:<14} {detail}")
    if "generated" in report:
        print(f"  {'sample':<14} {report['generated']!r} ({report.get('tokens_per_second')} tokens/s)")
    for problem in report["problems"]:
        print(f"  problem: {problem}")
