"""The GPU check kit's A/B matrix: each tunekit trick against plain transformers on one job, and the table that
settles tunekit's CUDA defaults (benchmarks/README.md, "GPU check kit").

The job (same model, data, seed, steps, precision and optimizer in every cell): LoRA (r8, all linear) SFT of the
kit's first model, fixed-length rows of ``cutoff`` tokens, micro-batch ``MICRO`` x accumulation ``ACCUM`` (so that
group_within_step has a step to regroup), ``steps`` optimizer steps, SDPA.

Cells (``tag`` ``ab-NAME``):
  hf            plain transformers: every tunekit trick off (trained_tokens_loss / chunked_lm_loss /
                elementwise_recompute / group_within_step false, gradient checkpointing off as in
                ``TrainingArguments``, TUNEKIT_MALLOC_TUNE=0 TUNEKIT_GC_PAUSE=0), HF's default optim
  hf-repeat     the same cell again: the run-to-run noise floor that checks the derived loss bound
  TRICK         ``hf`` with that one trick switched on (chunked_lm_head needs trained_tokens_loss: both on)
  defaults      tunekit as it runs with its defaults on this device (precision, optimizer and the job held equal)
  lf            LLaMA-Factory on the same job with its own defaults (gradient checkpointing on), when installed

Loss equality bound (derived, stated): both cells compute the same function of the same weights and batches; only
the order or fusion of floating-point operations differs. A logit then carries a relative error of at most
``u_out + sqrt(K) u_acc`` (one rounding of the output in the compute dtype, ``u_out`` = 2^-8 for bf16, 2^-24 for
fp32, plus fp32 accumulation over the longest reduction, ``K`` = intermediate size, with the probabilistic sqrt(K)
growth); the cross-entropy ``logsumexp(z) - z_y`` has two such terms, so the first step's losses agree within
``2 (u_out + sqrt(K) u_acc) |L|``. Each optimizer step can at most add that difference again (growth factor
``steps`` at the last step: stated, not proven; the ``hf-repeat`` cell shows the measured floor next to it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

MICRO, ACCUM = 4, 2
HOST_OFF = {"TUNEKIT_MALLOC_TUNE": "0", "TUNEKIT_GC_PAUSE": "0"}
PLAIN = {
    "trained_tokens_loss": False,
    "chunked_lm_loss": False,
    "elementwise_recompute": False,
    "group_within_step": False,
    "gradient_checkpointing": False,
    "optim": "adamw_torch_fused",
    "enable_liger_kernel": False,
    "padding_free": False,
}
# name: (config overrides on top of PLAIN, environment on top of HOST_OFF, where to flip its CUDA default)
F = "train/decisions/features.py"
TRICKS: dict[str, tuple[dict, dict, str]] = {
    "trained_tokens_loss": (
        {"trained_tokens_loss": True},
        {},
        f"config/options/training.py trained_tokens_loss; {F} trained_tokens_loss",
    ),
    "chunked_lm_head": (
        {"trained_tokens_loss": True, "chunked_lm_loss": True},
        {},
        f"config/options/training.py chunked_lm_loss; {F} chunked_lm_head",
    ),
    "elementwise_recompute": (
        {"elementwise_recompute": True},
        {},
        f"{F} elementwise_recompute (its `machine.kind != 'cpu'` opt-in guard)",
    ),
    "gradient_checkpointing": (
        {"gradient_checkpointing": True},
        {},
        f"{F} gradient_checkpointing; plan/decide.py (auto)",
    ),
    "group_within_step": ({"group_within_step": True}, {}, f"{F} group_within_step (option: config/options/data.py)"),
    "padding_free": ({"padding_free": True}, {}, f"{F} padding_free (option: config/options/data.py)"),
    "token_budget": ({"max_tokens_per_batch": None}, {}, f"{F} token_budget (max_tokens_per_batch)"),
    "liger": ({"enable_liger_kernel": True}, {}, f"{F} liger, liger_fused_loss (option: config/options/model.py)"),
    "unfused_optimizer": ({"optim": "adamw_torch"}, {}, f"{F} fused_optimizer (optim: config/options/training.py)"),
    "malloc_tune+heap_guard": (
        {},
        {"TUNEKIT_MALLOC_TUNE": "1"},
        "train/decisions/cpu_host.py malloc_tune, heap_guard",
    ),
    "gc_pause": ({}, {"TUNEKIT_GC_PAUSE": "1"}, "train/decisions/cpu_host.py gc_pause"),
}
# tricks that put other samples into a step by design: their losses are not comparable step by step with hf's
OTHER_BATCHES = {
    "token_budget": "loss not compared: batches formed by token count hold other samples per step "
    "(train/token_budget.py)"
}


def cells(model: str, cutoff: int, precision: str) -> list[dict]:
    """The A/B cells, in the order they run (the reference first, LLaMA-Factory last)."""
    base = dict(model=model, method="lora", cutoff=cutoff, gc=False, liger=False, attn="sdpa", precision=precision)
    out = [dict(base, tag="ab-hf", ab="hf"), dict(base, tag="ab-hf-repeat", ab="hf-repeat")]
    for name, (over, _env, _where) in TRICKS.items():
        out.append(
            dict(
                base,
                tag=f"ab-{name}",
                ab=name,
                gc=bool(over.get("gradient_checkpointing")),
                liger=bool(over.get("enable_liger_kernel")),
            )
        )
    out.append(dict(base, tag="ab-defaults", ab="defaults"))
    out.append(dict(base, tag="ab-lf", ab="lf", tool="lf", gc=True))
    return out


def chosen(spec: str) -> list[str]:
    """The A/B cells ``--ab`` names (``all``, ``none`` or a comma-separated list), in run order; ``hf`` is the
    reference every other cell is compared with, so it runs whenever another one does."""
    names = [c["ab"] for c in cells("tiny", 0, "fp32")]
    if spec in ("all", "none"):
        return names if spec == "all" else []
    wanted = {n.strip() for n in spec.split(",") if n.strip()}
    if unknown := sorted(wanted - set(names)):
        raise ValueError(f"--ab: no A/B cell named {', '.join(unknown)}; the cells: {', '.join(names)}")
    return [n for n in names if n in wanted | {"hf"}]


def apply(c: dict, cfg: dict) -> tuple[dict, dict]:
    """(config, environment changes) of A/B cell ``c`` from the kit's cell config ``cfg``; an environment value of
    None means unset (the device's default)."""
    name = c["ab"]
    cfg = dict(cfg, per_device_train_batch_size=MICRO, gradient_accumulation_steps=ACCUM)
    if name == "defaults":  # tunekit's defaults: drop every switch the kit sets (precision and the job stay)
        for key in ("gradient_checkpointing", "enable_liger_kernel", "flash_attn"):
            cfg.pop(key, None)
        return cfg, dict.fromkeys(HOST_OFF)
    if name == "lf":  # LLaMA-Factory's own defaults on the same job (kit.lf_config spells the switches)
        return dict(cfg, gradient_checkpointing=True, optim=PLAIN["optim"]), {}
    over, env = TRICKS.get(name, ({}, {}, ""))[:2]
    cfg.update(PLAIN)
    cfg.update(over)
    if "max_tokens_per_batch" in over:
        cfg["max_tokens_per_batch"] = cfg["cutoff_len"] * MICRO
    return cfg, dict(HOST_OFF, **env)


def step_losses(run_dir: Path) -> list[float]:
    """The training loss of each logged step (trainer_log.jsonl: tunekit's and LLaMA-Factory's)."""
    path = run_dir / "trainer_log.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("loss") is not None:  # tunekit: step, loss; LF: current_steps, loss
            rows.append(float(row["loss"]))
    return rows


def unit_roundoff(precision: str) -> float:
    return 2.0**-8 if precision == "bf16" else 2.0**-24


def loss_bound(precision: str, reduction: int, loss: float, step: int) -> float:
    """The derived bound on |loss_a - loss_b| at optimizer step ``step`` (1-based): module docstring."""
    per_logit = unit_roundoff(precision) + math.sqrt(reduction) * 2.0**-24
    return 2.0 * per_logit * abs(loss) * max(1, step)


def measured(r: dict) -> float | None:
    if r.get("max_memory_allocated") is not None:
        return r["max_memory_allocated"]
    return r.get("peak_rss_mb")


def speed(r: dict, lf: bool) -> float | None:
    return r.get("runtime_tokens_per_s") if lf else r.get("tokens_per_s")


def verdict(name: str, equal: bool | None, mem: float | None, spd: float | None, device: str) -> str:
    """The suggested CUDA default from one row: on where it saves memory or time at equal loss."""
    if name in ("hf", "hf-repeat", "defaults", "lf"):
        return ""
    if device != "cuda":
        return "(CPU dry run: no CUDA verdict)"
    if mem is None and spd is None and equal is None:
        return "unsettled (did not run)"
    if equal is False:
        return "off (loss differs: investigate)"
    if mem is None or spd is None:
        return "unsettled (no measurement)"
    if name == "unfused_optimizer":
        return "keep fused (HF default)" if spd <= 1.02 else "unfused is faster: revisit optim default"
    if mem <= 0.97 and spd >= 0.95:
        return "on (saves memory)"
    if spd >= 1.03 and mem <= 1.02:
        return "on (faster)"
    if mem <= 0.97:
        return "opt-in (saves memory, slower)"
    return "off (no saving)"


def summary(records: list[dict], env: dict, steps: int, reduction: int) -> tuple[list[dict], str]:
    """Per A/B cell, against ``ab-hf``: first/final loss, |diff| and the derived bound, memory and speed ratios, the
    suggested CUDA default and where to flip it. Returns (rows, Markdown)."""
    ab = {r["spec"]["ab"]: r for r in records if r["spec"].get("ab")}
    ref = (ab.get("hf") or {}).get("result") or {}
    ref_losses = ref.get("losses") or []
    rows = []
    for name, rec in ab.items():
        r, lf = rec.get("result") or {}, name == "lf"
        losses, precision = r.get("losses") or [], rec["spec"]["precision"]
        row = {
            "cell": name,
            "status": rec.get("status"),
            "note": rec.get("reason") or (r.get("error") or "")[:100],
            "first_loss": losses[0] if losses else None,
            "final_loss": losses[-1] if losses else None,
        }
        if name in OTHER_BATCHES:
            row["note"] = row["note"] or OTHER_BATCHES[name]
        elif losses and ref_losses and len(losses) == len(ref_losses):
            diff_first, diff_final = abs(losses[0] - ref_losses[0]), abs(losses[-1] - ref_losses[-1])
            bound_first = loss_bound(precision, reduction, ref_losses[0], 1)
            bound_final = loss_bound(precision, reduction, ref_losses[-1], len(ref_losses))
            row.update(
                diff_first=diff_first,
                diff_final=diff_final,
                bound_first=bound_first,
                bound_final=bound_final,
                equal=diff_first <= bound_first and diff_final <= bound_final,
            )
        ran = rec.get("status") == "ok" and (ab.get("hf") or {}).get("status") == "ok"
        mem_a, mem_b = (measured(r), measured(ref)) if ran else (None, None)
        spd_a, spd_b = (speed(r, lf), speed(ref, lf)) if ran else (None, None)
        row["memory_ratio"] = mem_a / mem_b if mem_a and mem_b else None
        row["speed_ratio"] = spd_a / spd_b if spd_a and spd_b else None
        row["cuda_default"] = verdict(name, row.get("equal"), row["memory_ratio"], row["speed_ratio"], env["device"])
        row["flip_in"] = TRICKS[name][2] if name in TRICKS else ""
        rows.append(row)
    return rows, markdown(rows, env, steps, reduction)


def markdown(rows: list[dict], env: dict, steps: int, reduction: int) -> str:
    def f(v, fmt):
        return "" if v is None else format(v, fmt)

    precision = "bf16" if env["device"] == "cuda" and env.get("bf16") else "fp32"
    kind = "max_memory_allocated" if env["device"] == "cuda" else "peak RSS (CPU dry run)"
    lines = [
        "## A/B: each trick against plain transformers (same job)",
        "",
        f"Job: LoRA SFT, micro-batch {MICRO} x accumulation {ACCUM}, {steps} steps, {precision}. Loss bound = "
        f"2 (u + sqrt(K) 2^-24) |L| x step, u = 2^-{8 if precision == 'bf16' else 24} ({precision}), "
        f"K = {reduction} (benchmarks/gpu/ab.py). Memory: {kind}; ratios against `hf` "
        "(LLaMA-Factory: runtime tokens/s).",
        "",
        "| cell | status | first loss | final loss | diff first / bound | diff final / bound | loss equal | "
        "memory ratio | speed ratio | suggested CUDA default | where to flip it (src/tunekit/) | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        eq = r.get("equal")
        lines.append(
            f"| {r['cell']} | {r['status']} | {f(r['first_loss'], '.4f')} | {f(r['final_loss'], '.4f')} | "
            f"{f(r.get('diff_first'), '.2e')} / {f(r.get('bound_first'), '.2e')} | "
            f"{f(r.get('diff_final'), '.2e')} / {f(r.get('bound_final'), '.2e')} | "
            f"{'' if eq is None else ('yes' if eq else 'NO')} | {f(r['memory_ratio'], '.3f')} | "
            f"{f(r['speed_ratio'], '.3f')} | {r['cuda_default']} | {r['flip_in']} | "
            f"{(r['note'] or '').replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"
