#!/usr/bin/env python3
"""LM head + cross-entropy, plain (whole fp32 logits, autograd) vs chunked (train/chunked_head.py), forward + backward.

Qwen2.5-0.5B's head by default (hidden 896, 151,936 words, tied and frozen as under LoRA; ``--trainable`` for full
fine-tuning), ``--tokens`` trained tokens. Each variant runs in its own process, so that its peak is its own: CPU time
per pass (median of ``--repeat``) and the peak memory above the inputs (ru_maxrss delta on a CPU,
``torch.cuda.max_memory_allocated`` on a GPU).

    .venv/bin/python benchmarks/lm_head_loss.py [--tokens 1024] [--trainable] [--device cuda] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time


def one(
    variant: str, tokens: int, hidden: int, vocab: int, trainable: bool, device: str, repeat: int, rows: int
) -> dict:
    import torch
    import torch.nn.functional as F

    from tunekit.host import malloc as host_malloc

    host_malloc.tune()
    from tunekit.train.chunked_head import chunked_linear_cross_entropy

    g = torch.Generator().manual_seed(0)
    w = (
        torch.empty(vocab, hidden).normal_(0, 0.02, generator=g).to(device).requires_grad_(trainable)
    )  # no temporary copy
    x0 = torch.empty(tokens, hidden).normal_(generator=g).to(device)
    t = torch.randint(0, vocab, (tokens,), generator=g).to(device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeat):
        x = x0.clone().requires_grad_(True)
        c0, t0 = time.process_time(), time.perf_counter()
        if variant == "plain":
            loss = F.cross_entropy(F.linear(x, w).float(), t, reduction="sum")
        else:
            loss = chunked_linear_cross_entropy(x, w, None, t, rows or None)
        (loss / tokens).backward()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.process_time() - c0) if device == "cpu" else (time.perf_counter() - t0))
        w.grad = None
    peak = (
        (torch.cuda.max_memory_allocated() - base)
        if device == "cuda"
        else (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    )
    return {
        "variant": variant,
        "s_per_pass": statistics.median(times),
        "peak_mb": peak / 2**20,
        "loss": loss.item() / tokens,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=896)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--trainable", action="store_true", help="the head's weight trains (full fine-tuning)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument(
        "--rows", type=int, default=0, help="rows per chunk (default: the device's, chunked_head.chunk_rows)"
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        import torch

        if a.threads:
            torch.set_num_threads(a.threads)
        print(json.dumps(one(a.child, a.tokens, a.hidden, a.vocab, a.trainable, a.device, a.repeat, a.rows)))
        return 0
    rows = []
    for variant in ("plain", "chunked", "plain", "chunked"):  # A B A B
        cmd = [
            sys.executable,
            __file__,
            "--child",
            variant,
            "--tokens",
            str(a.tokens),
            "--hidden",
            str(a.hidden),
            "--vocab",
            str(a.vocab),
            "--device",
            a.device,
            "--repeat",
            str(a.repeat),
            "--threads",
            str(a.threads),
            "--rows",
            str(a.rows),
        ]
        if a.trainable:
            cmd.append("--trainable")
        rows.append(
            json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        )
        r = rows[-1]
        print(
            f"  {r['variant']:<8} {r['s_per_pass']:.3f} s/pass ({'CPU' if a.device == 'cpu' else 'wall'}) | peak "
            f"{r['peak_mb']:.0f} MB above the inputs | loss {r['loss']:.6f}",
            flush=True,
        )
    plain = [r for r in rows if r["variant"] == "plain"]
    chunk = [r for r in rows if r["variant"] == "chunked"]
    time_ratio = statistics.median(c["s_per_pass"] / p["s_per_pass"] for p, c in zip(plain, chunk))
    print(
        f"chunked / plain: time {time_ratio:.2f}, "
        f"peak {statistics.median(c['peak_mb'] / p['peak_mb'] for p, c in zip(plain, chunk)):.3f} "
        f"({a.tokens} tokens, vocab {a.vocab}, hidden {a.hidden}, head {'trainable' if a.trainable else 'frozen'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
