"""``export_format: gguf``: the merged model converted by llama.cpp's own converter, quantized by llama.cpp, with an
Ollama Modelfile beside it.

Steps: refuse by name what cannot convert, before anything is written (:func:`check_gguf_export`: llama-cpp-python
missing, a vision-language / audio model, a prefix / prompt adapter, an architecture the converter lacks); merge the
adapters as a safetensors export does (``exporter.write_merged``, into a temporary folder, in float32 for ``f32`` and
else in the dtype a safetensors export would have); run ``convert_hf_to_gguf.py`` from the installed llama-cpp-python's
sdist (``gguf_source``) in a child process (``gguf_runner``); for ``q8_0`` / ``q4_k_m`` convert losslessly to the
merged dtype first and quantize that file with ``llama_cpp.llama_model_quantize`` (what ``llama-quantize`` runs).
The export folder holds ``model-<type>.gguf``, ``Modelfile`` (``ollama.py``), the tokenizer files with the template as
``chat_template`` (what verify tokenizes with) and ``tunekit_export.json`` (``"format": "gguf"``).
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

from ..config.problems import Said, config_error
from ..config.schema import Config
from ..data.templates import get_template
from ..errors import EnvironmentProblem, ModelError
from ..model.loader import load_model_config
from ..model.multimodal import is_multimodal_config
from ..model.stops import stop_token_ids
from .gguf_source import converter_dir, installed_version
from .ollama import write_modelfile
from .prompt_adapter import exports_prompt_adapter
from .provenance import recorded, sources, template_settings

GGUF_FORMAT = "gguf"
#: llama.cpp's llama_ftype of each quantized type (include/llama.h: LLAMA_FTYPE_MOSTLY_Q8_0, _Q4_K_M)
QUANTIZED = {"q8_0": 7, "q4_k_m": 15}
_FLOAT_TYPE = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def gguf_type(cfg: Config) -> str:
    return cfg.export_gguf_type or "f16"


def gguf_name(kind: str) -> str:
    return f"model-{kind}.gguf"


def supported_architectures(folder: Path) -> set[str]:
    """The text architectures the converter registers (its ``TEXT_MODEL_MAP``, read without importing it)."""
    tree = ast.parse((folder / "conversion" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        if getattr(target, "id", None) == "TEXT_MODEL_MAP":
            return set(ast.literal_eval(node.value))
    return set()


def check_gguf_export(cfg: Config) -> Path:
    """Every refusal that needs no weights, before anything is written; returns the converter's folder."""
    if exports_prompt_adapter(cfg):
        raise config_error("gguf_prompt_adapter", ("export_format",), path=str(cfg.adapter_paths[-1]))
    config = load_model_config(cfg)
    arch = (getattr(config, "architectures", None) or ["?"])[0]
    if is_multimodal_config(config):
        raise config_error("gguf_multimodal", ("export_format",), model=str(cfg.model_name_or_path), arch=str(arch))
    installed_version()
    try:
        import gguf  # noqa: F401  (the reader verify uses; a missing package is named here, before any work)
        import llama_cpp  # noqa: F401  (quantizes and loads the file)
    except ImportError as exc:
        raise EnvironmentProblem(Said("gguf_packages", error=str(exc))) from None
    folder = converter_dir()
    if arch not in supported_architectures(folder):
        raise config_error(
            "gguf_arch_unsupported",
            ("export_format",),
            version=str(installed_version()),
            arch=str(arch),
            model=str(cfg.model_name_or_path),
        )
    return folder


def export_gguf(cfg: Config, out: Path, tmp: Path, write_merged, clear_weights) -> Path:
    """Write the GGUF export to ``out`` (``write_merged``/``clear_weights``: the exporter's, see the docstring)."""
    folder = converter_dir()  # check_gguf_export ran before anything was written (exporter.export_model)
    kind = gguf_type(cfg)
    if kind == "f32":
        cfg = cfg.model_copy(update={"infer_dtype": "float32"})
    merged = write_merged(cfg, tmp / "merged")
    provenance = json.loads((merged / "tunekit_export.json").read_text(encoding="utf-8"))
    first = _FLOAT_TYPE[provenance["dtype"]] if kind in QUANTIZED else kind
    converted = convert(folder, merged, tmp / gguf_name(first), first)
    if kind in QUANTIZED:
        converted = quantize(converted, tmp / gguf_name(kind), kind)
    out.mkdir(parents=True, exist_ok=True)
    clear_weights(out)  # earlier shards or .gguf files of this export
    shutil.move(str(converted), out / gguf_name(kind))
    for name in _TOKENIZER_FILES:
        if (merged / name).is_file():
            shutil.copy2(merged / name, out / name)
    _write_modelfile_and_provenance(cfg, out, kind, provenance)
    return out / gguf_name(kind)


def _write_modelfile_and_provenance(cfg: Config, out: Path, kind: str, merged: dict) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    template = get_template(
        merged["template"], tokenizer, tool_format=merged.get("tool_format"), empty_eos=merged["empty_template_eos"]
    )
    write_modelfile(out, gguf_name(kind), template, tokenizer, cfg.default_system, cfg.enable_thinking)
    provenance = {
        "format": GGUF_FORMAT,
        "gguf_file": gguf_name(kind),
        "gguf_type": kind,
        **sources(recorded(cfg.model_name_or_path), [recorded(a) for a in cfg.adapter_paths], out),
        **template_settings(cfg),
        "template": merged["template"],
        "merged_dtype": merged["dtype"],
        "stop_token_ids": stop_token_ids(tokenizer, template),
        "llama_cpp_python": installed_version(),
        "torch": merged.get("torch"),
    }
    (out / "tunekit_export.json").write_text(json.dumps(provenance, indent=2, ensure_ascii=False) + "\n", "utf-8")


def convert(folder: Path, merged: Path, target: Path, kind: str) -> Path:
    """``convert_hf_to_gguf.py MERGED --outfile TARGET --outtype KIND`` in a child process (``gguf_runner``)."""
    print(f"converting to GGUF ({kind}) with llama.cpp's convert_hf_to_gguf.py")
    args = [str(folder), str(merged), "--outfile", str(target), "--outtype", kind]
    return _run_runner(args, target, Said("gguf_convert_failed"))


def quantize(source: Path, target: Path, kind: str) -> Path:
    """``llama_model_quantize`` (llama.cpp's ``llama-quantize``) from the float GGUF ``source`` to ``kind``, in a child
    process whose log is shown only when it fails (``gguf_runner quantize``)."""
    print(f"quantizing to {kind} with llama.cpp")
    args = ["quantize", str(source), str(target), str(QUANTIZED[kind])]
    _run_runner(args, target, Said("gguf_quantize_failed", name=source.name, kind=kind))
    source.unlink()
    return target


def _run_runner(args: list[str], target: Path, failure: Said) -> Path:
    """``python -m tunekit.export.gguf_runner ARGS``; its log's tail in the error when ``target`` is not written."""
    done = subprocess.run(
        [sys.executable, "-m", "tunekit.export.gguf_runner", *args], check=False, capture_output=True, text=True
    )
    if done.returncode != 0 or not target.is_file():
        tail = "\n".join((done.stderr + done.stdout).strip().splitlines()[-12:])
        raise ModelError(Said("gguf_runner_failed", failure=failure, tail=tail))
    return target
