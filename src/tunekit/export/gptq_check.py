"""The check a GPTQ export ends with, in tunekit's own environment with plain transformers (+ compressed-tensors).

1. **The folder reloads to exactly its b-bit weights.** Every quantized layer's weight is read from the safetensors
   files independently of compressed-tensors (``weight_packed``: ``32 / bits`` unsigned codes per int32, lowest bits
   first, stored with an offset of ``2**(bits - 1)``; ``weight_scale``: one scale per group of input columns) and
   dequantized as ``code * scale``; the unquantized architecture holding exactly these weights must give the same
   logits, bit for bit, as the folder loaded by plain ``from_pretrained`` (the same fp32 weights and operations on
   the CPU). So the weights it computes with are on the symmetric b-bit grid, and nothing was lost or re-rounded.
2. **The logits are at least as close to the unquantized model's as round-to-nearest gets them.** On the
   calibration texts, the relative RMS error of the next-token logits, ``||z_q - z|| / ||z - mean_vocab(z)||``
   (fp32 models, float64 sums), is compared with the same measure for round-to-nearest (RTN) quantization of the
   unquantized weights on the same grid (same bits and groups, scale = group absmax / (2**bits - 1) * 2, codes
   clamped to the b-bit range), computed here from the unquantized model alone. That is the bound: GPTQ rounds
   each column to the same grid as RTN and updates the columns not yet rounded to cancel the error on these very
   texts' activations (its objective is each layer's output error on the calibration data, where RTN is the
   solution without updates), so on the calibration texts its error must not exceed RTN's. A broken export
   (lost or wrong scales, codes misread, a layer's weights in another layer) exceeds it by far; a tiny random
   Qwen2 at 4 bits gives about 0.05 against RTN's 0.19. The top-1 agreement of the next token is reported too.

Memory: the quantized model plus three fp32 copies of the unquantized one (reference, stored weights, RTN) on the
CPU; ``export_verify: false`` skips the check.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

from ..config.problems import Said
from ..errors import ModelError

CHECKED_TEXTS = 8


def unpack_codes(packed, columns: int, bits: int):
    """compressed-tensors' ``pack-quantized`` int32 words -> signed integer codes, ``columns`` per row."""
    import torch

    per_word = 32 // bits
    shifts = torch.arange(per_word, dtype=torch.int32) * bits
    codes = (packed.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
    return codes.reshape(packed.shape[0], -1)[:, :columns].to(torch.float32) - (1 << (bits - 1))


def dequantized_weights(folder: Path):
    """``(layer name, fp32 weight)`` for every quantized layer of the export, read from its safetensors files."""
    from safetensors.torch import load_file

    width = quantization_settings(folder)["num_bits"]
    tensors: dict = {}
    for file in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(str(file)))
    for key, packed in tensors.items():
        if key.endswith(".weight_packed"):
            name = key.removesuffix(".weight_packed")
            scale = tensors[f"{name}.weight_scale"]
            _rows, columns = (int(v) for v in tensors[f"{name}.weight_shape"].tolist())
            codes = unpack_codes(packed, columns, width)
            yield name, codes * scale.to(codes.dtype).repeat_interleave(columns // scale.shape[1], dim=1)


def quantization_settings(folder: Path) -> dict:
    """The weight arguments of the export's one quantization group (bits, group size)."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    groups = list(config["quantization_config"]["config_groups"].values())
    if len(groups) != 1:
        raise ModelError(Said("gptq_groups", path=str(folder), count=len(groups)))
    return groups[0]["weights"]


def round_to_nearest(weight, bits: int, group_size: int):
    """Symmetric RTN on the grid GPTQ uses: one scale per group of input columns, codes in the b-bit range."""
    import torch

    top = 2 ** (bits - 1)
    groups = weight.reshape(weight.shape[0], -1, group_size)
    scale = groups.abs().amax(-1, keepdim=True) / ((2 * top - 1) / 2)
    codes = torch.clamp(torch.round(groups / scale.clamp_min(torch.finfo(weight.dtype).tiny)), -top, top - 1)
    return (codes * scale).reshape(weight.shape)


def check_gptq_export(folder: Path, merged: Path, texts: list[str], max_length: int) -> dict:
    """Both checks of the module docstring; a report dict. Raises ModelError when either fails."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quantized = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    reference = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()
    stored, rtn = copy.deepcopy(reference), copy.deepcopy(reference)  # the merged folder is read once
    settings, layers = quantization_settings(folder), 0
    with torch.no_grad():
        for name, weight in dequantized_weights(folder):
            stored.get_submodule(name).weight.copy_(weight)
            original = rtn.get_submodule(name).weight
            original.copy_(round_to_nearest(original, settings["num_bits"], settings["group_size"]))
            layers += 1
    models = {"quantized": quantized, "stored": stored, "rtn": rtn}
    logits = _compare(reference, models, AutoTokenizer.from_pretrained(folder), texts, max_length)
    problems = [] if layers else [Said("gptq_check_no_layers")]
    if logits["stored_mismatch"]:
        problems.append(Said("gptq_check_reload_differs", mismatch=logits["stored_mismatch"]))
    if logits["logit_error"] > logits["rtn_error"]:
        problems.append(Said("gptq_check_above_rtn", error=logits["logit_error"], rtn=logits["rtn_error"]))
    report = {"layers": layers, "bits": settings["num_bits"], "group_size": settings["group_size"], **logits}
    if problems:
        raise ModelError(Said("gptq_check_failed", path=str(folder), problems=tuple(problems)))
    return report


def _compare(reference, models: dict, tokenizer, texts: list[str], max_length: int) -> dict:
    """Next-token logits on the first texts: the reloaded model vs its stored weights (exact), and the relative
    RMS error against the unquantized model of the reloaded model and of RTN."""
    import torch

    sums = {"quantized": 0.0, "rtn": 0.0, "scale": 0.0}
    agree, positions, mismatch = 0, 0, 0.0
    with torch.inference_mode():
        for text in texts[:CHECKED_TEXTS]:
            ids = tokenizer(
                text, return_tensors="pt", add_special_tokens=False, truncation=True, max_length=max_length
            )
            z = reference(**ids).logits[0].double()
            out = {key: model(**ids).logits[0].double() for key, model in models.items()}
            mismatch = max(mismatch, (out["quantized"] - out["stored"]).abs().max().item())
            for key in ("quantized", "rtn"):
                sums[key] += ((out[key] - z) ** 2).sum().item()
            sums["scale"] += ((z - z.mean(-1, keepdim=True)) ** 2).sum().item()
            agree += int((out["quantized"].argmax(-1) == z.argmax(-1)).sum())
            positions += z.shape[0]
    scale = sums["scale"] or 1.0
    return {
        "logit_error": math.sqrt(sums["quantized"] / scale),
        "rtn_error": math.sqrt(sums["rtn"] / scale),
        "top1_agreement": agree / positions if positions else 0.0,
        "positions": positions,
        "stored_mismatch": mismatch,
    }
