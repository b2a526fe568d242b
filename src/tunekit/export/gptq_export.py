"""GPTQ export: the merged folder -> llm-compressor in its own environment -> the compressed-tensors folder, checked.

LLaMA-Factory's ``export_quantization_bit`` + ``export_quantization_dataset`` mean GPTQ. tunekit runs it with
llm-compressor (``GPTQModifier``: symmetric int weights in groups of 128 input columns, activations unquantized,
the LM head kept) in the isolated environment of ``gptq_env`` (its pins conflict with tunekit's), through the
runner script ``gptq_runner.py``, which tunekit never imports. The calibration texts are
``export_quantization_nsamples`` conversations of the dataset rendered by the training template, each cut at
``export_quantization_maxlen`` tokens. The written folder loads with plain ``from_pretrained`` where the
compressed-tensors package is installed (transformers' loader for the format; vLLM loads it too) and holds the
merged folder's tokenizer and chat template; ``gptq_check`` then compares it with the unquantized model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from ..config.problems import Said
from ..config.schema import Config
from ..data.pipeline import load_template
from ..errors import DataError, ModelError
from .files import ensure_index, shard_bytes
from .gptq_check import check_gptq_export
from .gptq_env import gptq_python
from .provenance import sources
from .quantize import calibration_texts

RUNNER = Path(__file__).with_name("gptq_runner.py")
GROUP_SIZE = 128
_WEIGHT_FILES = ("*.safetensors", "model.safetensors.index.json")


def export_gptq(cfg: Config, merged: Path, out: Path, provenance_file: str, check: bool = True) -> dict | None:
    """Quantize ``merged`` (a tunekit export folder) into ``out``; returns the check's report (``gptq_check``;
    None when ``check`` is off: ``export_verify: false``)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(merged)
    template = load_template(cfg if cfg.template else cfg.model_copy(update={"template": "jinja"}), tokenizer)
    texts = calibration_texts(cfg, template)
    if not texts:
        raise DataError(Said("gptq_no_calibration", value=str(cfg.export_quantization_dataset)))
    python = gptq_python()
    work = merged.parent / "gptq"
    request = {
        "model": str(merged),
        "out": str(work / "model"),
        "bits": cfg.export_quantization_bit,
        "group_size": GROUP_SIZE,
        "texts": texts,
        "max_length": cfg.export_quantization_maxlen,
        "max_shard_bytes": shard_bytes(cfg.export_size),
    }
    print(
        f"quantizing to {cfg.export_quantization_bit} bits with GPTQ (llm-compressor, {len(texts)} calibration "
        f"texts of {cfg.export_quantization_dataset}, at most {cfg.export_quantization_maxlen} tokens each)"
    )
    result = run_runner(python, request, work)
    assemble(work / "model", merged, out)
    quantization = {"method": "gptq", "bits": cfg.export_quantization_bit, "format": "compressed-tensors", **result}
    _write_provenance(merged / provenance_file, out / provenance_file, out, quantization)
    if not check:
        return None
    report = check_gptq_export(out, merged, texts, cfg.export_quantization_maxlen)
    print(
        f"GPTQ check: {report['layers']} layers reload to exactly their {report['bits']}-bit weights (groups of "
        f"{report['group_size']}); next-token logits on {report['positions']} calibration positions: relative RMS "
        f"error {report['logit_error']:.4f} against the unquantized model (bound: round-to-nearest's "
        f"{report['rtn_error']:.4f}), top-1 agreement {report['top1_agreement']:.1%}"
    )
    return report


def run_runner(python: Path, request: dict, work: Path) -> dict:
    """``python gptq_runner.py request.json``; its output goes to ``work/gptq.log``, the tail shown on failure."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "request.json").write_text(json.dumps(request), encoding="utf-8")
    log = work / "gptq.log"
    with open(log, "w", encoding="utf-8") as fh:
        code = subprocess.run(
            [str(python), str(RUNNER), str(work / "request.json")],
            check=False,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_clean_env(),
        ).returncode
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    if code:
        tail = "\n".join(lines[-15:])
        raise ModelError(Said("gptq_runner_failed", command=f"{python} {RUNNER.name}", code=code, tail=tail))
    for line in reversed(lines):
        if line.startswith('{"gptq"'):
            return json.loads(line)["gptq"]
    raise ModelError(Said("gptq_runner_no_result", tail="\n".join(lines[-15:])))


def _clean_env() -> dict:
    """The isolated interpreter must not see tunekit's packages: no PYTHONPATH / PYTHONHOME from this process."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}


def assemble(quantized: Path, merged: Path, out: Path) -> None:
    """``out`` = the runner's weights, config and generation config + the merged folder's other files (tokenizer,
    chat template), with an index even for one shard (as every tunekit export)."""
    out.mkdir(parents=True, exist_ok=True)
    for pattern in (*_WEIGHT_FILES, "pytorch_model*.bin", "pytorch_model.bin.index.json"):
        for old in out.glob(pattern):
            old.unlink()
    for item in sorted(quantized.iterdir()):  # recipe.yaml too: llm-compressor's record of what it did
        if item.is_file():
            shutil.copy2(item, out / item.name)
    written = {p.name for p in quantized.iterdir()}
    for item in sorted(merged.iterdir()):
        weights = any(item.match(p) for p in _WEIGHT_FILES)
        if item.is_file() and item.name not in written and not weights:
            shutil.copy2(item, out / item.name)
    ensure_index(out)


def _write_provenance(merged_record: Path, target: Path, out: Path, quantization: dict) -> None:
    """The merged export's record, moved to ``out`` (paths relative to it again) and with the quantization."""
    record = json.loads(merged_record.read_text(encoding="utf-8"))
    record.update(sources(record["base"], record["adapters"], out))
    record.update(dtype=None, quantization=quantization)
    target.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
