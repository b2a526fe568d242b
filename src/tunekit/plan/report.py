"""Human-readable output of ``tunekit plan`` and ``tunekit data stats`` (rich tables)."""

from __future__ import annotations

from typing import Any

from .moe import moe_line
from .result import Plan

LABELS = {
    "base_weights": ("Base weights", "frozen weights in the load dtype (quantized under QLoRA)"),
    "trainable_params": ("Trainable parameters", "fp32 (LoRA adapters / upcast full-freeze), 16-bit under DeepSpeed"),
    "gradients": ("Gradients", "one per trainable parameter"),
    "optimizer_states": ("Optimizer states", "e.g. AdamW: 2 moments per trainable parameter"),
    "master_weights": ("Master weights", "fp32 copy kept by DeepSpeed mixed precision"),
    "activations": ("Activations", "saved for backward (checkpointed layer inputs or every layer)"),
    "logits": ("LM head + loss", "fp32 logits, log-softmax and its gradient over the vocabulary"),
    "optimizer_step": ("Optimizer step (transient)", "foreach AdamW temporaries beyond the freed activations"),
    "distributed_buffers": (
        "Distributed buffers",
        "DDP buckets / ZeRO buckets and gathered params / FSDP units / cp_size all-to-all",
    ),
    "fragmentation": (
        "Allocator fragmentation",
        "of the token-dependent memory: 10 % on a GPU, 45 % on the CPU (glibc heap)",
    ),
    "overhead": ("CUDA context + runtime", "context, workspaces, NCCL"),
}
HOST_LABELS = {  # the two rows whose meaning differs on the CPU (use_cpu)
    "fragmentation": ("Heap fragmentation", "freed tensors glibc keeps resident (the note says how much)"),
    "overhead": ("Runtime", "interpreter, libraries, their heaps"),
}


def _fmt_int(v: Any) -> str:
    return "-" if v is None else f"{v:,}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def print_plan(plan: Plan, console=None) -> None:
    from rich.console import Console

    console = console or Console()
    m, s = plan.model, plan.setup
    n = m["total_params"]
    size = f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"
    console.print(
        f"[bold]{m['name']}[/] ({m['model_type']}, {size} params, {m['num_layers']} layers, "
        f"hidden {m['hidden_size']}, vocab {m['vocab_size']:,})  ·  {s['method']}, {s['engine']}, {s['precision']}, "
        f"attention {s['attention']}, checkpointing {'on' if s['gradient_checkpointing'] else 'off'}"
        f"{', Liger' if s['liger'] else ''}"
    )
    p = plan.params
    console.print(f"trainable parameters: {p['trainable']:,} ({100 * p['trainable_share']:.3f} %)")
    if m.get("moe"):  # total vs active parameters (plan/moe.py)
        console.print(moe_line(m["moe"]))
    if plan.media:
        print_vision(m, plan.media, console)
    budget = (plan.batching or {}).get("max_tokens_per_batch")
    _print_steps(plan, console)
    if plan.batching:
        print_batching(plan.batching, console)
    _print_memory(plan, budget, console)
    if plan.cpu_memory_gib:
        console.print(f"CPU RAM for offloaded states: {plan.cpu_memory_gib:.1f} GiB per node")
    print_decisions(plan.decisions or {}, console)
    _print_fit_and_time(plan, console)
    for note in plan.notes:
        console.print(f"[yellow]note:[/] {note}")


def _print_steps(plan: Plan, console) -> None:
    """The samples, the world size and the steps they make, then the global batch (tokens per step under
    ``max_tokens_per_batch``) and its learning-rate advice."""
    from rich.table import Table

    steps = Table(title="Steps", show_header=False, title_justify="left")
    steps.add_column(style="bold")
    steps.add_column(justify="right")
    steps.add_row("train / eval samples", f"{_fmt_int(plan.train_samples)} / {_fmt_int(plan.eval_samples)}")
    cp = plan.context_parallel
    if cp:
        split = f", {cp['data_parallel']} data parallel x context parallel {cp['cp_size']}"
        steps.add_row("world size (processes)", f"{plan.world_size} ({plan.nodes} node(s)){split}")
    else:
        steps.add_row("world size (data parallel)", f"{plan.world_size} ({plan.nodes} node(s))")
    steps.add_row("steps per epoch", _fmt_int(plan.steps_per_epoch))
    steps.add_row("total steps", _fmt_int(plan.total_steps))
    steps.add_row("warmup steps", _fmt_int(plan.warmup_steps))
    steps.add_row("checkpoints", _fmt_int(plan.num_checkpoints))
    console.print(steps)
    for line in global_batch_lines(plan.global_batch) if plan.global_batch else ():
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def global_batch_lines(g: dict[str, Any]) -> list[str]:
    """The global batch (devices x per-device batch x accumulation) and, with several devices, the learning-rate
    advice (``plan/global_batch.py``), one printed line each."""
    devices = f"{g['devices']} device{'' if g['devices'] == 1 else 's'}"
    if g.get("cp_size", 1) > 1:  # context parallelism: each data-parallel rank is a sequence group of processes
        devices = f"{g['devices']} sequence group{'' if g['devices'] == 1 else 's'}"
    if g["unit"] == "tokens":  # token-budget batches: the sample count per step varies
        head = f"global batch: at most {g['size']:,} tokens per optimizer step"
        per_device = f"max_tokens_per_batch {g['per_device_batch']:,}"
    else:
        head = f"global batch: {g['size']:,} samples per optimizer step"
        per_device = f"per-device batch {g['per_device_batch']:,}"
    return [
        f"{head} (= {devices} x {per_device} x gradient accumulation {g['gradient_accumulation_steps']})",
        *context_parallel_lines(g),
        *g["advice"],
    ]


def context_parallel_lines(g: dict[str, Any]) -> list[str]:
    """With ``cp_size`` > 1, how the processes split each sequence and what that makes of the global batch."""
    cp = g.get("cp_size", 1)
    if cp == 1:
        return []
    return [  # samples: max_tokens_per_batch is refused with cp_size
        f"context parallelism: each sequence split over {cp} processes (global batch {g['size']:,} = "
        f"{g['per_device_batch']:,} per device x {g['gradient_accumulation_steps']} accumulation x {g['processes']} "
        f"processes / {cp})"
    ]


def _print_memory(plan: Plan, budget: int | None, console) -> None:
    """The peak memory per device by component (the rows that are zero and usually so left out)."""
    from rich.table import Table

    s = plan.setup
    shape = (
        f"{plan.tokens_per_micro_batch:,} tokens per micro-batch (max_tokens_per_batch)"
        if budget
        else f"{plan.seq_len} tokens x micro-batch {s['micro_batch']}"
    )
    if plan.context_parallel:
        shape += f", 1/{plan.context_parallel['cp_size']} of each sequence per process"
    mem = Table(title=f"Memory per device (peak, {shape}; seq from {plan.seq_len_source})", title_justify="left")
    mem.add_column("component")
    mem.add_column("GiB", justify="right")
    mem.add_column("what", style="dim")
    for key, value in plan.memory.items():
        if key == "total_gib" or (value == 0 and key in ("master_weights", "distributed_buffers", "optimizer_step")):
            continue
        label, what = (s.get("host") and HOST_LABELS.get(key)) or LABELS.get(key, (key, ""))
        mem.add_row(label, f"{value:.2f}", what)
    mem.add_row("[bold]total (predicted peak)[/]", f"[bold]{plan.memory['total_gib']:.2f}[/]", "")
    console.print(mem)


def _print_fit_and_time(plan: Plan, console) -> None:
    """Whether the plan fits the GPU, its compute and time, and ``--auto-fit``'s choice."""
    if plan.gpu:
        g = plan.gpu
        verdict = "[green]fits[/]" if plan.fits else "[red]does not fit[/]"
        console.print(
            f"{g['name']} ({g['memory_gib']:g} GiB): {verdict}, headroom {plan.headroom_gib:.2f} GiB "
            f"(keeping {100 * plan.safety_margin:.0f} % free)"
        )
    t = plan.time
    if t:
        line = (
            f"compute: {t['flops_per_token'] / 1e9:.1f} GFLOP per token x {t['tokens'] / 1e6:.2f}M tokens = "
            f"{t['total_flops']:.3g} FLOP"
        )
        if "seconds" in t:
            line += f" → about {_duration(t['seconds'])} ({t['seconds_per_step']:.2f} s/step)"
        console.print(line)
        console.print(f"[dim]assumes {t['assumptions']}[/]")
    if plan.fit is not None:
        f = plan.fit
        head = "[green]auto-fit[/]" if f["fits"] else "[red]auto-fit: nothing fits[/]"
        console.print(f"{head}: {f['choice']} → {f['total_gib']:.2f} GiB")
        console.print("pass to tunekit train: " + " ".join(f"{k}={_yaml(v)}" for k, v in plan.overrides.items()))


def print_decisions(decisions: dict, console) -> None:
    """Each feature as the run decides it on the planned device (``train/decisions``: the answer training reads)."""
    if decisions:
        console.print(
            "run decisions (the planned device): "
            + "; ".join(
                f"{name} {'[green]on[/]' if d['on'] else '[dim]off[/]'}"
                + ("" if d["on"] else f" [dim]({d['why']})[/]")
                for name, d in decisions.items()
            )
        )


def _yaml(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def print_vision(model: dict, media: dict, console) -> None:
    """The vision side of a VLM plan: its parameters and the media tokens / patches the plan assumed or measured."""
    v = model["vision"]
    parts = [f"{media['images_per_sample']} image(s) x {media['tokens_per_image']:,}"]
    if media["videos_per_sample"]:
        parts.append(f"{media['videos_per_sample']} video(s) x {media['tokens_per_video']:,}")
    console.print(
        f"vision ({v['family']}): tower {v['tower_params']:,} + projector {v['projector_params']:,} parameters, "
        f"{v['depth']} blocks, patch {v['patch_size']}, merge {v['merge_size']}  ·  media per sample: "
        f"{media['media_tokens_per_sample']:,} tokens ({', '.join(parts)}), {media['patches_per_micro_batch']:,} "
        f"patches per micro-batch; {media['source']}",
        highlight=False,
    )


def print_media(media: dict, cutoff: int, console) -> None:
    """``data stats`` of multimodal data: media tokens per sample by kind, and the samples they alone push past
    cutoff_len."""
    for kind in ("image", "video", "audio"):
        if kind in media:
            d, t = media[kind], media[kind]["tokens"]
            console.print(
                f"{kind} tokens per sample ({d['samples']:,} samples with {d['media']:,} {kind}s): min {t['min']:,}, "
                f"mean {t['mean']:,.1f}, max {t['max']:,} (per {kind}: mean {d['tokens_per_item']['mean']:,.1f}, "
                f"max {d['tokens_per_item']['max']:,})"
            )
    over = media["over_cutoff"]
    if over["samples"]:
        console.print(
            f"[red]{over['samples']:,} sample(s) whose media tokens alone exceed cutoff_len {cutoff}[/] "
            f"(training drops them, an image is never cut; raise cutoff_len to at least "
            f"{media['recommended_cutoff_len']}, or lower image_max_pixels):",
            highlight=False,
        )
        for row in over["listed"]:
            console.print(
                f"  {row['dataset']}: {row['source']}: {row['media_tokens']:,} media tokens "
                f"({row['total_len']:,} in all)",
                highlight=False,
            )
    if media["dropped_in_training"]:
        console.print(
            f"multimodal samples longer than cutoff_len {cutoff}: {media['dropped_in_training']:,}; "
            f"training drops them whole (never truncated) and names them in its preprocessing report.",
            highlight=False,
        )


def print_stats(stats: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(
        title=f"Token lengths (tokens per sample, before cutoff_len {stats['cutoff_len']})", title_justify="left"
    )
    for col in ("dataset", "part", "samples", "min", "mean", "p50", "p90", "p95", "p99", "max"):
        table.add_column(col, justify="left" if col in ("dataset", "part") else "right")
    rows = list(stats["datasets"].items())
    if len(rows) > 1:
        rows.append(("all", stats["overall"]))
    for name, block in rows:
        for part, d in (("total", block), *((p, block[p]) for p in stats.get("parts", ("prompt", "response")))):
            table.add_row(
                name if part == "total" else "",
                part,
                f"{d['count']:,}",
                f"{d['min']:,}",
                f"{d['mean']:,.1f}",
                *[f"{d[k]:,}" for k in ("p50", "p90", "p95", "p99", "max")],
            )
    console.print(table)
    o = stats["overall"]
    tr = o["truncation"]
    console.print(
        f"cutoff_len {tr['cutoff_len']}: truncates {tr['samples_truncated']:,} samples "
        f"({100 * tr['samples_share']:.2f} %), "
        f"{100 * tr['tokens_share']:.2f} % of tokens"
    )
    p95 = o["p95_truncates"]
    console.print(
        f"recommended cutoff_len: [bold]{o['recommended_cutoff_len']}[/] (covers P99); {o['p95_cutoff_len']} (P95) "
        f"would cut the longest batch's activations by {100 * o['p95_saves_share']:.0f} % and truncate "
        f"{100 * p95['samples_share']:.2f} % of samples"
    )
    console.print(f"trainable tokens: {o['trainable_tokens']:,} of {o['total_tokens']:,}")
    pw = o["padding_waste"]
    console.print(
        f"padding waste at batch {stats['batch_size']}: random {100 * pw['random']:.1f} %, group_by_length "
        f"{100 * pw['group_by_length']:.1f} %, packing {100 * pw['packing']:.1f} %"
    )
    if "media" in stats:
        print_media(stats["media"], stats["cutoff_len"], console)
    if "labels" in o:  # kto
        console.print(f"labels: {o['labels']['desirable']:,} desirable, {o['labels']['undesirable']:,} undesirable")
    if "blocks" in o:  # pt
        b = o["blocks"]
        console.print(
            f"pt blocks of {b['block_len']} tokens: {b['blocks']:,}"
            + (
                f" ({b['full_blocks']:,} full, {b['tail_blocks']:,} shorter tail block(s) keeping "
                f"{b['tail_tokens']:,} tokens; none dropped)"
                if b["packing"]
                else f" (no packing: {b['documents_truncated']:,} document(s) cut, "
                f"{b['tokens_dropped']:,} tokens dropped)"
            )
        )
    if stats.get("batching"):
        print_batching(stats["batching"], console)
    if stats.get("plot"):
        console.print(f"CDF plot: {stats['plot']}")


def print_batching(batching: dict, console=None) -> None:
    """The modes' pad share and tokens per optimizer step (``batching.batching_stats``), the configured one marked."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    held = f", val_size {batching['val_size']:g} held out" if batching.get("val_size") else ""
    ranks = f", {batching['world_size']} ranks" if batching.get("world_size", 1) > 1 else ""
    table = Table(
        title=f"Batching (batch {batching['batch_size']} x accumulation {batching['gradient_accumulation_steps']}, "
        f"per device{ranks}, one epoch of the training split{held})",
        title_justify="left",
    )
    # micro-batches per epoch, optimizer steps, pad share, tokens through the model and real tokens per step,
    # largest micro-batch
    for col in ("mode", "batches", "steps", "pad", "tok/step", "real/step", "max batch"):
        table.add_column(col, justify="left" if col == "mode" else "right", no_wrap=col != "mode")
    for name, m in batching["modes"].items():
        mark = name == batching["configured"]
        table.add_row(
            ("[bold]* " if mark else "") + name + ("[/]" if mark else ""),
            f"{m['micro_batches']:,}",
            f"{m['steps_per_epoch']:,}",
            f"{100 * m['padding_share']:.1f} %",
            f"{m['model_tokens_per_step']:,.0f}",
            f"{m['real_tokens_per_step']:,.0f}",
            f"{m['largest_micro_batch_tokens']:,}",
        )
    console.print(table)
    console.print(
        "[dim]* = the configured mode; tok/step = tokens through the model per optimizer step (pads included), "
        "real/step = sample tokens per step; fixed-size batches simulated in a seeded random order[/]"
    )
