"""Where a model's decoder layers are: partial checkpointing (``loader.limit_checkpointed_layers``) and
``elementwise_recompute`` act on the same list."""

from __future__ import annotations


def decoder_layers(model) -> list:
    """The language model's decoder layers, in order: the ``GradientCheckpointingLayer`` modules under
    ``get_decoder()`` (a vision-language model's vision blocks are not among them), else under the model."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    return [m for m in (decoder or model).modules() if isinstance(m, GradientCheckpointingLayer)]
