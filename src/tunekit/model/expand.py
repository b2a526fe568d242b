"""LLaMA Pro block expansion (Wu et al. 2024): interleave copies of decoder blocks whose output projections are zero.

``expand_blocks(src, out, num_expand)`` does what LLaMA-Factory's ``scripts/llama_pro.py`` does: the ``L`` blocks are
split into ``num_expand`` groups of ``L / num_expand``; after the last block of each group a copy of that block is
inserted with its attention output (``o_proj``) and MLP output (``down_proj``) weights and biases set to zero. A
decoder block computes ``h + attn(norm(h))`` then ``h + mlp(norm(h))``, so a copy with zero output projections adds
exactly 0: the expanded model computes the same function as the original until training changes the copies.
``use_llama_pro: true`` with ``finetuning_type: freeze`` and ``freeze_trainable_layers: N`` (N = num_expand) then
trains only the inserted blocks (``llama_pro_layer_ids``).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from ..config.problems import Said, config_error
from ..errors import ModelError

_LAYER = re.compile(r"^(.*\.layers\.)(\d+)\.(.+)$")
ZEROED = ("o_proj", "down_proj")


def llama_pro_layer_ids(n_layers: int, num_expand: int) -> list[int]:
    """Indices of the inserted blocks in a model expanded by :func:`expand_blocks` (every ``n / num_expand``-th)."""
    if num_expand < 1 or n_layers % num_expand:
        raise config_error(
            "expand_layers_divide", ("use_llama_pro", "freeze_trainable_layers"), count=num_expand, layers=n_layers
        )
    stride = n_layers // num_expand
    return list(range(stride - 1, n_layers, stride))


def expand_blocks(src: str | Path, out: str | Path, num_expand: int) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    src, out = Path(src), Path(out)
    if out.exists() and any(out.iterdir()):
        raise config_error("expand_out_not_empty", path=str(out))
    config = AutoConfig.from_pretrained(src)
    n = getattr(config, "num_hidden_layers", None)
    if not isinstance(n, int):
        raise ModelError(Said("expand_no_layers", path=str(src)))
    if num_expand < 1 or n % num_expand:
        divisors = ", ".join(str(k) for k in range(1, n + 1) if n % k == 0)
        raise config_error("expand_num_divide", count=num_expand, layers=n, path=str(src), divisors=divisors)
    model = AutoModelForCausalLM.from_pretrained(src, dtype="auto")
    split = n // num_expand
    state, new_state, new_index = model.state_dict(), {}, {}
    for i in range(n):
        new_index[i] = i + i // split
    for name, tensor in state.items():
        m = _LAYER.match(name)
        if not m:
            new_state[name] = tensor
            continue
        prefix, i, rest = m.group(1), int(m.group(2)), m.group(3)
        new_state[f"{prefix}{new_index[i]}.{rest}"] = tensor
        if (i + 1) % split == 0:  # the copy after the last block of each group
            copy = torch.zeros_like(tensor) if any(z in rest.split(".") for z in ZEROED) else tensor.clone()
            new_state[f"{prefix}{new_index[i] + 1}.{rest}"] = copy
    config.num_hidden_layers = n + num_expand
    layer_types = getattr(config, "layer_types", None)
    if isinstance(layer_types, list) and len(layer_types) == n:  # per-layer attention kinds follow their block
        config.layer_types = [layer_types[i] for i in range(n) for _ in range(2 if (i + 1) % split == 0 else 1)]
    expanded = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    missing, unexpected = expanded.load_state_dict(new_state, strict=False)
    missing = [
        k for k in missing if not k.endswith("lm_head.weight") or not getattr(config, "tie_word_embeddings", False)
    ]
    if missing or unexpected:
        raise ModelError(
            Said("expand_unmapped", path=str(src), missing=repr(missing[:3]), unexpected=repr(unexpected[:3]))
        )
    expanded.save_pretrained(out)
    for f in src.iterdir():  # tokenizer, chat template, generation config
        if (
            f.is_file()
            and not (out / f.name).exists()
            and not f.name.endswith((".safetensors", ".bin"))
            and "index" not in f.name
        ):
            shutil.copy2(f, out / f.name)
    return out
