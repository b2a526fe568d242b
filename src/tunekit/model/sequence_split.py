"""Which models context parallelism (``cp_size`` > 1, ``train/engines/ulysses.py``) can split, read from the model's
config (``config.json``'s dict before the model loads, the loaded config after): attention is the only place its
tokens meet, its heads divide among the processes, and no media is placed by token position."""

from __future__ import annotations

from ..config.problems import config_error


def _fields(config) -> tuple[dict, str | None]:
    """(the text model's fields, the model type when the model takes media) of a config or config.json's dict."""
    data = config if isinstance(config, dict) else config.to_dict()
    media = any(data.get(key) is not None for key in ("vision_config", "audio_config"))
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    return text, str(data.get("model_type") or "the model") if media else None


def check_sequence_split(cp_size: int, config) -> None:
    """Refuse, naming the fact, a model whose sequences ``cp_size`` processes cannot split."""
    if cp_size == 1:
        return
    text, media = _fields(config)
    if media:
        raise config_error("cp_media", ("cp_size",), cp=cp_size, model=media)
    heads = int(text.get("num_attention_heads") or 0)
    kv = int(text.get("num_key_value_heads") or heads)
    if heads % cp_size or kv % cp_size:
        fits = [n for n in range(2, kv + 1) if heads % n == 0 and kv % n == 0]
        raise config_error(
            "cp_heads", ("cp_size",), cp=cp_size, heads=heads, kv=kv, fits=", ".join(map(str, fits)) or "none"
        )
    mixing = sorted({str(t) for t in text.get("layer_types") or () if t != "full_attention"})
    if mixing:
        raise config_error("cp_layer_types", ("cp_size",), cp=cp_size, types=", ".join(mixing))
