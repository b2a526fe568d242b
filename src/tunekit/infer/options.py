"""Per-call generation options (the config's values unless a call overrides them) and the seeds of sampled replies
(the randomness rules: :mod:`tunekit.infer.engine`'s docstring)."""

from __future__ import annotations

import secrets
from typing import Any

from ..config.problems import config_error
from ..config.schema import Config

#: per-call generation options (None = the config's value)
GEN_OPTIONS = (
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "do_sample",
    "num_beams",
    "length_penalty",
    "stop",
    "seed",
)


def generation_options(cfg: Config, gen: dict[str, Any]) -> tuple[dict[str, Any], list[str], int | None]:
    """``(generate kwargs, stop strings, seed)`` from the config and per-call overrides."""
    unknown = [k for k in gen if k not in GEN_OPTIONS]
    if unknown:
        raise config_error("infer_unknown_gen_options", unknown=tuple(unknown), known=GEN_OPTIONS)
    val = {k: (gen[k] if gen.get(k) is not None else getattr(cfg, k, None)) for k in GEN_OPTIONS if k != "seed"}
    val["seed"] = gen["seed"] if gen.get("seed") is not None else getattr(cfg, "generation_seed", None)
    if int(val["max_new_tokens"]) < 1:
        raise config_error("infer_max_new_tokens", ("max_new_tokens",), value=val["max_new_tokens"])
    sample = bool(val["do_sample"]) and float(val["temperature"]) > 0
    kwargs: dict[str, Any] = dict(
        max_new_tokens=int(val["max_new_tokens"]),
        do_sample=sample,
        repetition_penalty=float(val["repetition_penalty"]),
        num_beams=int(val["num_beams"]),
    )
    if sample:
        kwargs.update(temperature=float(val["temperature"]), top_p=float(val["top_p"]), top_k=int(val["top_k"]))
    else:  # greedy: neutral sampling values so the model's generation_config does not warn or interfere
        kwargs.update(temperature=None, top_p=None, top_k=None)
    if kwargs["num_beams"] > 1:
        kwargs["length_penalty"] = float(val["length_penalty"])
    stops = val["stop"] or []
    stops = [stops] if isinstance(stops, str) else list(stops)
    return kwargs, stops, (int(val["seed"]) if val["seed"] is not None else None)


def choice_seed(seed: int | None, index: int) -> int | None:
    """The seed of reply ``index`` of ``n`` for a call seeded with ``seed`` (None stays None: fresh randomness)."""
    return None if seed is None else (int(seed) + index) % 2**64


def apply_seed(seed: int | None) -> None:
    """Seed torch's generators with ``seed``, or with fresh OS randomness when None (torch's default seed is the
    same in every process, so unseeded sampling would repeat across runs)."""
    import torch

    torch.manual_seed(secrets.randbits(63) if seed is None else int(seed) % 2**64)
