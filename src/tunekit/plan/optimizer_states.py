"""Optimizer-state bytes of GaLore, APOLLO, BAdam, Adam-mini and Muon, tensor by tensor, from the shape alone.

Each formula is what the implementation that ``tunekit.train.optimizers`` builds allocates in its first
``step()`` (``tests/train/test_optimizers.py`` counts the real tensors and holds them equal). ``b`` is the bytes of a
trainable weight (4 in fp32, 2 under ``pure_bf16``); a weight matrix is ``m x n`` (out x in), ``r`` the rank.

* **GaLore** (galore-torch ``GaLoreAdamW``): each projected matrix keeps its projector and both Adam moments in
  the projected space. ``std``: ``m >= n`` → projector ``r x n`` and moments ``m x r``; else projector ``m x r``
  and moments ``r x n`` (``left``/``right``/``reverse_std`` fix the side). For fp32 weights the projector is a
  view that keeps the SVD factor alive: ``min(m, n) x n`` or ``m x min(m, n)`` bytes are held (:func:`_projected`).
  Every other parameter: 2 moments like the parameter. The step counter is a Python int (0 bytes).
* **APOLLO** (apollo-torch ``APOLLOAdamW``): the same projected moments and projector, plus the norm-growth
  limiter's last norm (one 0-d tensor) per projected matrix.
* **BAdam**, layer mode (badam ``BlockOptimizer``): only the active block (one decoder layer) has state:
  torch AdamW's two fp32 moments and its fp32 step tensor per parameter, plus BAdam's fp32 copy of the
  block's weights (``param_idx2hp``), counted here because it exists only for the optimizer. The planner
  takes the largest block.
* **Adam-mini** (adam-mini ``Adam_mini``): the first moment like every parameter; the second moment is one
  value per head for ``q_proj``/``k_proj`` (``numel / (hidden² / heads)``), one per output row for embeddings,
  LM head, ``v_proj``, ``o_proj`` and MLP weights, one value per tensor for norms, and a full one for biases.
* **Muon** (``torch.optim.Muon`` + ``torch.optim.AdamW``): one momentum buffer like each 2-D weight inside
  the decoder layers; AdamW's two moments and fp32 step tensor for embeddings, LM head, norms and biases.
"""

from __future__ import annotations

from ..config.lists import split_list
from ..config.schema import Config
from .architectures import ModelShape


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(split_list(value))


def optimizer_method(cfg: Config) -> tuple[str | None, tuple]:
    """``(name, settings)`` of the custom optimizer a config uses, as the planner's ``Setup`` carries it (hashable)."""
    if getattr(cfg, "use_galore", False):
        return "galore", (
            ("rank", cfg.galore_rank),
            ("proj_type", cfg.galore_proj_type),
            ("target", _split(cfg.galore_target)),
            ("layerwise", cfg.galore_layerwise),
        )
    if getattr(cfg, "use_apollo", False):
        return "apollo", (
            ("rank", cfg.apollo_rank),
            ("proj_type", cfg.apollo_proj_type),
            ("target", _split(cfg.apollo_target)),
            ("proj", cfg.apollo_proj),
            ("layerwise", cfg.apollo_layerwise),
        )
    if getattr(cfg, "use_badam", False):
        return "badam", (("mode", cfg.badam_mode), ("ratio", cfg.badam_update_ratio))
    if getattr(cfg, "use_adam_mini", False):
        return "adam_mini", ()
    if getattr(cfg, "use_muon", False):
        return "muon", ()
    return None, ()


def _tensors(shape: ModelShape):
    """Every parameter of the model as ``(where, name, rows, cols)``: where is 'layer' or 'other'; cols 0 for 1-D."""
    for i in range(shape.layers):
        layer = shape.layer_at(i)  # an MoE model's dense layers have their own structure
        linear = {f"{lin.path}.weight": lin for lin in layer.linears}
        for name, numel in layer.layer_param_names:
            lin = linear.get(name)
            yield ("layer", name, lin.out_features, lin.in_features) if lin else ("layer", name, numel, 0)
    for name, numel in shape.other_param_names:
        if name.endswith("weight") and ("embed" in name or "lm_head" in name):
            yield "other", name, shape.vocab, numel // shape.vocab
        else:
            yield "other", name, numel, 0


def _projected(rank: int, proj_type: str, m: int, n: int, svd_view: bool) -> tuple[int, int]:
    """(projector elements held, elements of one projected moment).

    An SVD projector of an fp32 weight is a slice (``Vh[:r]`` / ``U[:, :r]``) of the reduced SVD's factor and keeps
    that whole factor alive: ``min(m, n) x n`` (right) or ``m x min(m, n)`` (left), not ``r x n``. For 16-bit
    weights the package converts the slice, a copy of ``r`` rows/columns; a random projector is generated at size.
    """
    r, k = rank, (min(m, n) if svd_view else rank)
    side = {"std": "right" if m >= n else "left", "reverse_std": "left" if m >= n else "right"}.get(
        proj_type, proj_type
    )
    if side == "right":
        return k * n, m * r
    if side == "left":
        return m * k, r * n
    return m * k + k * n, r * r  # full: both sides


def custom_state_bytes(method: str, settings: tuple, shape: ModelShape, b: float) -> float:
    """Optimizer-state bytes for full fine-tuning with ``method`` (see the module docstring)."""
    opts = dict(settings)
    total = 0.0
    if method in ("galore", "apollo"):
        targets = opts["target"]
        views = [view for view, _ in shape.variants()]
        linear_paths = {f"{lin.path}.weight": lin.path.split(".") for view in views for lin in view.linears}
        for where, name, m, n in _tensors(shape):
            path = linear_paths.get(name) if where == "layer" else None
            if path is not None and (targets == ("all",) or any(t in path for t in targets)):
                svd_view = b == 4 and (method == "galore" or opts.get("proj") == "svd")
                proj, moment = _projected(opts["rank"], opts["proj_type"], m, n, svd_view)
                total += b * (proj + 2 * moment) + (b if method == "apollo" else 0)
            else:
                total += 2 * b * m * max(n, 1)
        return total
    if method == "badam":
        if opts["mode"] == "ratio":  # sparse Adam states on the updated share of each matrix (values + indices)
            return 0.0
        return 12.0 * shape.layer_params + 4.0 * shape.layer_param_tensors
    if method == "adam_mini":
        head_numel = shape.hidden * shape.hidden // max(shape.heads, 1)
        for _, name, m, n in _tensors(shape):
            numel = m * max(n, 1)
            low = name.lower()
            if "bias" in low:
                total += 2 * b * numel
            elif any(k in low for k in ("k_proj", "q_proj")):
                total += b * (numel + numel // head_numel)
            elif any(k in low for k in ("embed", "lm_head", "v_proj", "mlp", "o_proj")):
                total += b * (numel + m)
            else:
                total += b * (numel + 1)
        return total
    if method == "muon":
        for where, _name, m, n in _tensors(shape):
            if where == "layer" and n:
                total += b * m * n
            else:
                total += 2 * b * m * max(n, 1) + 4
        return total
    raise ValueError(f"unknown optimizer method {method}")


def custom_gradient_bytes(method: str, settings: tuple, shape: ModelShape, b: float) -> float | None:
    """Gradient bytes alive after backward for full fine-tuning with ``method``; ``None``: every weight holds one.

    * BAdam, layer mode: only the active block requires a gradient: ``b`` x the largest decoder layer (its
      ``param_idx2hp`` copy takes the fp32 gradient without a copy for fp32 weights; counted under the states).
    * layer-wise GaLore / APOLLO: each gradient is stepped and freed by its hook as soon as it is accumulated, so at
      most about one parameter's gradient is alive: ``b`` x the largest tensor (the embedding / LM head).
    BAdam's ratio mode keeps a sparse gradient per matrix (not modelled: the dense count is an upper bound).
    """
    opts = dict(settings)
    if method == "badam" and opts.get("mode") == "layer":
        return b * shape.layer_params
    if method in ("galore", "apollo") and opts.get("layerwise"):
        return b * max(m * max(n, 1) for _, _, m, n in _tensors(shape))
    return None
