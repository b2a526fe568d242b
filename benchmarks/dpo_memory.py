#!/usr/bin/env python3
"""Where the memory of one LoRA DPO step goes, phase by phase, against the planner (issue 17).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dpo_memory.py --layers 4 --pairs 2 --answer-tokens 900 [--stage sft]

Builds Qwen2.5-0.5B's architecture with random weights and ``--layers`` decoder layers (benchmarks/_shapes.py), a
dataset of ``--pairs`` pairs whose answers are ``--answer-tokens`` long, and runs one training step of tunekit's
trainer (the pieces of ``tunekit train``, as benchmarks/_profile_run.py) on CPU in fp32 under ``torch.profiler``
with ``profile_memory``: every allocation and free of PyTorch's CPU allocator, so the live tensor bytes at every
moment (no glibc retention, no Python heap). Reported, relative to the live bytes when the step starts:

* the peak of each phase (policy forward, reference forward, the rest of ``compute_loss``, backward);
* the bytes autograd saves for backward (unique non-parameter storages seen by ``saved_tensors_hooks``);
* the planner's figures for the same set-up (``estimate_memory``: activations + logits + fragmentation, and the
  saved bytes of ``plan.activations.saved_bytes`` times two for the two sequence sets).

``--stage sft`` trains on the same tokens as SFT (every answer a sample: 2 x pairs sequences), to see what is
DPO-specific. The static part (weights) is not measured here: the plan counts it exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT.parent / "shared" / "reference-data" / "llamafactory"
MiB = 1024**2


def text_of(tokenizer, source: str, n: int, offset: int) -> str:
    ids = tokenizer(source, add_special_tokens=False)["input_ids"]
    ids = (ids * (1 + (n + offset) // max(1, len(ids))))[offset : offset + n]
    return tokenizer.decode(ids)


def write_data(folder: Path, tokenizer, stage: str, pairs: int, answer_tokens: int) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers import write_dataset

    source = " ".join(
        json.dumps(r, ensure_ascii=False) for r in json.loads((DEMO / "alpaca_en_demo.json").read_text())[:300]
    )
    prompts = [text_of(tokenizer, source, 24, 1000 * i) for i in range(pairs)]
    chosen = [text_of(tokenizer, source, answer_tokens, 50_000 + 3000 * i) for i in range(pairs)]
    rejected = [text_of(tokenizer, source, answer_tokens, 90_000 + 3000 * i) for i in range(pairs)]
    if stage == "dpo":
        recs = [
            {
                "conversations": [{"from": "human", "value": p}],
                "chosen": {"from": "gpt", "value": c},
                "rejected": {"from": "gpt", "value": r},
            }
            for p, c, r in zip(prompts, chosen, rejected)
        ]
        entry = {
            "ranking": True,
            "formatting": "sharegpt",
            "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected"},
        }
    else:
        recs = [{"instruction": p, "input": "", "output": a} for p, a in zip(prompts + prompts, chosen + rejected)]
        entry = None
    write_dataset(folder, "pairs", recs, entry)


def live_curve(prof):
    """``[(t_us, live bytes)]`` of the CPU allocator over the profiled region, and the marked ranges."""
    events = prof.profiler.kineto_results.events()
    mem = sorted(
        (e.start_ns() / 1000, e.nbytes()) for e in events if e.name() == "[memory]" and e.device_type().name == "CPU"
    )
    marks = [(e.name(), e.start_ns() / 1000, e.end_ns() / 1000) for e in events if e.name().startswith("phase:")]
    curve, live = [], 0
    for t, b in mem:
        live += b
        curve.append((t, live))
    return curve, marks


def run(args) -> dict:
    import torch
    from _shapes import build_random_model
    from torch.profiler import ProfilerActivity, profile, record_function

    from tunekit.host import malloc as host_malloc

    host_malloc.tune()  # as tunekit train (TUNEKIT_MALLOC_TUNE=0: glibc's defaults)
    import tunekit.train.stages.dpo as dpo_mod
    from tunekit.config import load_config
    from tunekit.config.stages import STAGES
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.flow import decide
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.plan.activations import saved_bytes
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.memory import estimate_memory
    from tunekit.plan.params import count_params
    from tunekit.plan.training_setup import resolve_setup
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.run import get_stage

    model_dir = build_random_model(
        Path(args.work) / f"qwen05-L{args.layers}", "qwen2.5-0.5b", data_dir=DEMO, layers=args.layers
    )
    data_dir = Path(args.work) / f"data-{args.stage}-{args.pairs}x{args.answer_tokens}"
    from transformers import AutoTokenizer

    write_data(data_dir, AutoTokenizer.from_pretrained(model_dir), args.stage, args.pairs, args.answer_tokens)
    opts = dict(
        model_name_or_path=str(model_dir),
        template="qwen",
        dataset="pairs",
        dataset_dir=str(data_dir),
        output_dir=str(Path(args.work) / "out"),
        stage=args.stage,
        finetuning_type="lora",
        lora_rank=8,
        lora_target="all",
        cutoff_len=args.cutoff,
        per_device_train_batch_size=args.pairs if args.stage == "dpo" else 2 * args.pairs,
        gradient_accumulation_steps=1,
        learning_rate=1e-4,
        max_steps=1,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
        use_cpu=True,
        dtype="float32",
        preprocessing_num_workers=1,
        gradient_checkpointing=args.ckpt is not None,
        **({"gradient_checkpointing_layers": args.ckpt} if args.ckpt else {}),
    )
    opts.update(dict(kv.split("=", 1) for kv in args.set))
    cfg_path = Path(args.work) / f"{args.stage}.json"
    cfg_path.write_text(json.dumps(opts))
    cfg = decide(load_config(str(cfg_path), []))
    stage = get_stage(cfg.stage)
    targs = build_training_arguments(cfg, [], save_total_limit=None)
    tokenizer = load_tokenizer(cfg)
    data = prepare_datasets(cfg, tokenizer, cfg.stage)
    model = (
        stage.load_model(cfg, tokenizer)
        if STAGES[cfg.stage].own_model
        else load_model(cfg, tokenizer, is_trainable=True)
    )
    trainer = stage.build_trainer(cfg, targs, model, tokenizer, data, [])
    batch = next(iter(trainer.get_train_dataloader()))
    seq = batch["input_ids"].shape

    plain = dpo_mod.forward_logps

    def labelled(*a, **k):
        with record_function("phase:policy_forward" if torch.is_grad_enabled() else "phase:reference_forward"):
            return plain(*a, **k)

    dpo_mod.forward_logps = labelled
    compute = trainer.compute_loss

    def timed_loss(*a, **k):
        with record_function("phase:compute_loss"):
            return compute(*a, **k)

    trainer.compute_loss = timed_loss
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params and st.device.type == "cpu":
            saved.setdefault(st.data_ptr(), st.nbytes())
        return t

    if args.rss:
        return rss_run(trainer, args, list(seq))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train's loop
    t0 = time.time()
    with (
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
        record_function("phase:step"),
        torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
    ):
        trainer.training_step(trainer.model, batch)
    wall = time.time() - t0
    dpo_mod.forward_logps = plain
    curve, marks = live_curve(prof)
    phases = {}
    base = 0  # live bytes relative to the step's start
    for name, s, e in marks:
        inside = [b for t, b in curve if s <= t <= e]
        before = [b for t, b in curve if t < s]
        phases.setdefault(name[6:], []).append(
            {
                "peak_mib": round((max(inside) if inside else 0) / MiB, 1),
                "start_mib": round((before[-1] if before else base) / MiB, 1),
            }
        )
    cl_end = max(e for n, s, e in marks if n == "phase:compute_loss")
    after = [b for t, b in curve if t > cl_end]
    phases["backward"] = [
        {
            "peak_mib": round(max(after) / MiB, 1) if after else 0.0,
            "start_mib": round(next((b for t, b in reversed(curve) if t <= cl_end), 0) / MiB, 1),
        }
    ]
    shape = load_shape(str(model_dir), None)
    setup = resolve_setup(cfg, seq_len=int(seq[1]))
    if cfg.stage == "dpo":  # micro_batch pairs; the planner doubles for chosen + rejected
        setup = setup.with_(micro_batch=args.pairs)
    est = estimate_memory(shape, setup)
    counts = count_params(shape, setup)
    sv = saved_bytes(shape, setup, counts)["total"] * (2 if cfg.stage == "dpo" else 1)
    c = est.components
    return {
        "stage": cfg.stage,
        "layers": args.layers,
        "pairs": args.pairs,
        "batch_shape": list(seq),
        "ckpt": args.ckpt,
        "step_seconds": round(wall, 1),
        "measured_peak_mib": round(max(b for _, b in curve) / MiB, 1),
        "measured_saved_mib": round(sum(saved.values()) / MiB, 1),
        "phases": phases,
        "plan_dynamic_mib": round((c["activations"] + c["logits"] + c["fragmentation"]) / MiB, 1),
        "plan_activations_mib": round(c["activations"] / MiB, 1),
        "plan_logits_mib": round(c["logits"] / MiB, 1),
        "plan_saved_mib": round(sv / MiB, 1),
        "plan_tokens": setup.tokens,
        "maxrss_mib": _maxrss_mib(),
    }


class _Mallinfo2(__import__("ctypes").Structure):
    _fields_ = [
        (n, __import__("ctypes").c_size_t)
        for n in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def rss_run(trainer, args, seq) -> dict:
    """``trainer.train()`` (one real step, optimizer included) with RSS and glibc's in-use bytes sampled every 20 ms:
    RSS - in-use is what the C heap keeps resident after ``free`` (``host_malloc``'s retention and fragmentation)."""
    import ctypes
    import threading

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    page = os.sysconf("SC_PAGE_SIZE")
    peak = {"rss": 0, "inuse": 0, "rss_at_inuse_peak": 0, "free_at_rss_peak": 0, "mmap_at_rss_peak": 0}
    stop = threading.Event()
    series: list[tuple] = []
    marks: list[tuple] = []
    import tunekit.train.stages.dpo as dpo_mod

    plain = dpo_mod.forward_logps

    def marked(*a, **k):
        name = "policy" if __import__("torch").is_grad_enabled() else "reference"
        marks.append((name + "_start", round(time.time() - t0, 3)))
        out = plain(*a, **k)
        marks.append((name + "_end", round(time.time() - t0, 3)))
        return out

    dpo_mod.forward_logps = marked

    def sample():
        while not stop.is_set():
            with open("/proc/self/statm") as f:
                rss = int(f.read().split()[1]) * page
            m = libc.mallinfo2()
            inuse = m.uordblks + m.hblkhd
            series.append(
                (
                    round(time.time() - t0, 3),
                    round(rss / MiB),
                    round(inuse / MiB),
                    round(m.fordblks / MiB),
                    round(m.hblkhd / MiB),
                )
            )
            if rss > peak["rss"]:
                peak["rss"], peak["free_at_rss_peak"], peak["mmap_at_rss_peak"] = rss, m.fordblks, m.hblkhd
            if inuse > peak["inuse"]:
                peak["inuse"], peak["rss_at_inuse_peak"] = inuse, rss
            time.sleep(0.02)

    m0 = libc.mallinfo2()
    before = {"inuse_mib": round((m0.uordblks + m0.hblkhd) / MiB, 1), "rss_mib": _rss_now(page)}
    t0 = time.time()
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    trainer.train()
    stop.set()
    th.join()
    dpo_mod.forward_logps = plain
    if args.series:
        Path(args.series).write_text(
            json.dumps({"columns": ["t", "rss", "inuse", "heap_free", "mmapped"], "series": series, "marks": marks})
        )
    return {
        "mode": "rss",
        "stage": args.stage,
        "layers": args.layers,
        "pairs": args.pairs,
        "batch_shape": seq,
        "ckpt": args.ckpt,
        "malloc_tune": os.environ.get("TUNEKIT_MALLOC_TUNE", "1"),
        "train_seconds": round(time.time() - t0, 1),
        "before_train": before,
        "peak_rss_mib": round(peak["rss"] / MiB, 1),
        "peak_inuse_mib": round(peak["inuse"] / MiB, 1),
        "rss_at_inuse_peak_mib": round(peak["rss_at_inuse_peak"] / MiB, 1),
        "heap_free_at_rss_peak_mib": round(peak["free_at_rss_peak"] / MiB, 1),
        "mmapped_at_rss_peak_mib": round(peak["mmap_at_rss_peak"] / MiB, 1),
        "maxrss_mib": _maxrss_mib(),
    }


def _rss_now(page: int) -> float:
    with open("/proc/self/statm") as f:
        return round(int(f.read().split()[1]) * page / MiB, 1)


def _maxrss_mib() -> float:
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--answer-tokens", type=int, default=900)
    ap.add_argument("--cutoff", type=int, default=1024)
    ap.add_argument("--stage", choices=["dpo", "sft"], default="dpo")
    ap.add_argument("--ckpt", type=int, default=None, help="gradient_checkpointing_layers (default: no checkpointing)")
    ap.add_argument(
        "--rss", action="store_true", help="run trainer.train() and sample RSS / malloc in-use bytes instead"
    )
    ap.add_argument("--series", default=None, help="with --rss: write the sampled series (MiB) and phase marks here")
    ap.add_argument("--set", nargs="*", default=[], help="extra options key=value")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "dpo_memory"))
    args = ap.parse_args(argv)
    print(json.dumps(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
