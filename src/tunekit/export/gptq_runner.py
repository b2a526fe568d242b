"""GPTQ with llm-compressor, run by the isolated interpreter of ``gptq_env`` (never imported by tunekit).

``python gptq_runner.py REQUEST.json``: REQUEST names the merged model folder (``model``), the folder to write
(``out``), the weight bits, the group size, the calibration texts (already rendered by tunekit's template) and their
length cut. The texts are tokenized without special tokens (the template writes BOS/EOS as text), llm-compressor's
``GPTQModifier`` quantizes every Linear layer but the LM head to symmetric int ``bits`` weights in groups of
``group_size`` input columns (halved until it divides every layer's columns: a tiny model's 64; activations stay in
the model's dtype: W4A16 / W8A16), and the model is saved in the compressed-tensors format (``quantization_config``
in config.json) that transformers and vLLM load, in shards of at most ``max_shard_bytes``.

It imports only what the isolated environment holds (torch, transformers, datasets, llmcompressor) and prints one
JSON line ``{"gptq": {...}}`` with what it did, which tunekit reads.
"""

from __future__ import annotations

import json
import sys
import time


def weight_scheme(bits: int, group_size: int) -> dict:
    """compressed-tensors' weight quantization arguments: symmetric int, one scale per group of input columns."""
    return {"num_bits": bits, "type": "int", "symmetric": True, "strategy": "group", "group_size": group_size}


def fitting_group_size(model, wanted: int) -> int:
    """``wanted`` (128, what GPTQ exports use) when it divides every quantized layer's input columns, else the
    largest power of two below it that does (a tiny model's 64 columns)."""
    import torch

    columns = [m.in_features for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    size = wanted
    while size > 1 and any(c % size for c in columns):
        size //= 2
    return size


def calibration_set(tokenizer, texts: list[str], max_length: int):
    from datasets import Dataset

    rows = [tokenizer(t, add_special_tokens=False, truncation=True, max_length=max_length) for t in texts]
    return Dataset.from_dict(
        {"input_ids": [r["input_ids"] for r in rows], "attention_mask": [r["attention_mask"] for r in rows]}
    )


def run(request: dict) -> dict:
    import torch
    from llmcompressor import oneshot
    from llmcompressor.modifiers.gptq import GPTQModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(request.get("seed", 0))
    tokenizer = AutoTokenizer.from_pretrained(request["model"])
    model = AutoModelForCausalLM.from_pretrained(request["model"], dtype="auto")
    data = calibration_set(tokenizer, request["texts"], request["max_length"])
    group_size = fitting_group_size(model, request["group_size"])
    recipe = GPTQModifier(
        ignore=["lm_head"],
        config_groups={"group_0": {"targets": ["Linear"], "weights": weight_scheme(request["bits"], group_size)}},
    )
    start = time.monotonic()
    oneshot(
        model=model,
        dataset=data,
        recipe=recipe,
        max_seq_length=request["max_length"],
        num_calibration_samples=len(data),
        shuffle_calibration_samples=False,
    )
    seconds = time.monotonic() - start
    model.save_pretrained(request["out"], save_compressed=True, max_shard_size=request["max_shard_bytes"])
    import llmcompressor

    return {
        "group_size": group_size,
        "llmcompressor": llmcompressor.__version__,
        "transformers": __import__("transformers").__version__,
        "torch": torch.__version__,
        "samples": len(data),
        "tokens": sum(len(ids) for ids in data["input_ids"]),
        "seconds": round(seconds, 1),
    }


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        request = json.load(fh)
    print(json.dumps({"gptq": run(request)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
