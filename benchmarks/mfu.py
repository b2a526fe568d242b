#!/usr/bin/env python3
"""Training tokens/s and model-FLOPs utilisation (MFU) of tunekit's trainer on a ~14M-parameter model, fp32.

MFU = 6 x N x (training tokens/s) / (this machine's fp32 matmul throughput)

  N            every parameter of the model (``model.num_parameters()``): the issue's "6 x parameters".
               6 = 2 FLOPs per multiply-add x (1 forward + 2 backward). The embedding lookup does no
               matmul (over-counts by vocab x hidden) and attention scores/values are not counted
               (under-counts by 12 x layers x hidden x seq per token); both are printed, with the MFU
               they would give, so the headline's assumptions are visible.
  tokens/s     steady state: tokens of optimizer steps after --warmup steps, over their wall time,
               timed by a TrainerCallback at each on_step_end (every token is real: fixed-length
               random sequences, no padding, labels = inputs, "from scratch" style).
  peak         fp32 ``torch.matmul`` of two --peak-n square matrices, with the same torch thread count as
               training. Two figures come from it:
               - interleaved (the headline): after every optimizer step the peak is measured again
                 (one untimed matmul to bring the matrices back into cache, then the better of two timed
                 blocks of 3; ~0.5 s, outside the step's timing), each step's MFU is its model FLOP/s over the
                 mean of the peak blocks on either side of it, and the median over the measured steps is
                 reported. On a machine whose neighbours take a varying share of the cores (timings here
                 swing 2x within a minute), this compares the step with the machine as it was during
                 that step.
               - whole window: tokens/s over all measured steps against the larger of a ~2 s peak before
                 and after training (the conservative figure, low whenever the host is busier during
                 training than at either end).

Shape: batch 16 x 256 tokens (4096 tokens per micro-batch) by default; ``--grad-accum K`` accumulates K
micro-batches per optimizer step, as fine-tuning runs do (LLaMA-Factory's examples use 8), which spreads the
optimizer step, clipping and zeroing (~4 % of a 4096-token step here) over K x 4096 tokens. The 6N count leaves
attention out, which is fair only when attention is a small share of the FLOPs, as in the models people fine-tune: 12 x
L x d x seq / 6N is ~5 % for Qwen2.5-7B at 2K tokens and ~7 % here at 256 tokens, but ~14 % at 512 tokens on this
512-wide model, where the headline would then mostly measure the attention kernel. ``--seq 512 --batch 8`` gives that
variant (the alternative count below includes attention either way).

``--compile`` sets tunekit's ``torch_compile: true`` (TrainingArguments' torch.compile, inductor): on a
CPU it fuses the element-wise work (RMSNorm, rotary, SwiGLU, the residual adds) that eager mode runs as
separate memory-bound kernels. Compilation happens in the first steps, which the warm-up leaves out
(it takes a minute or two on 2 cores; inductor caches it for the next run).

The run goes through tunekit's own path: ``load_config`` -> ``build_training_arguments`` ->
``load_tokenizer``/``load_model`` (finetuning_type full, gradient checkpointing off) ->
``tunekit.train.stages.sft.build_trainer`` (TunekitTrainer + PaddingCollator) -> ``trainer.train()``. The model is
a tunekit tiny model (``tunekit.tiny.text.build_tiny_model``, llama family by default, untied lm_head).

    benchmarks/.venv-base/bin/python benchmarks/mfu.py [--compile] [--grad-accum 4] [--batch 16 --seq
    256 --steps 14 --warmup 4]

``--shape qwen2.5-0.5b``: Qwen2.5-0.5B's exact architecture with random weights (benchmarks/_shapes.py; 494M
parameters, 151,936-row tied embedding), full fine-tuning, fp32, no checkpointing, sequence 1024 (batch 1 x
accumulation 1 by default, 4 optimizer steps of which the first 2 are warm-up: ~11 GB of RAM, ~4 minutes eager on
2 cores; do not run it beside other work). Its headline uses the standard count:

  FLOPs per token = 6 x N_matmul + 12 x L x h x s
  N_matmul     the weights every token is multiplied by: every nn.Linear incl. the LM head (tied to the
               embedding here: its 136M weights count once, as the head's matmul; the lookup does none)
  12 x L x h x s   attention's QK^T and AV, forward + backward (h = heads x head_dim, s = sequence; causal
               masking's saving is not subtracted, as in the usual formula)

``--profile`` records one extra step (the last, left out of the timings) with torch.profiler and prints where
its time went (benchmarks/_profile.py's groups: LM head + loss, attention, MLP/linear, optimizer, other) and
what share of the step's model FLOPs each group's matmuls carry, so the gap to the peak can be attributed.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import WORK, fmt, loadavg  # noqa: E402

TARGET = 0.70


class MatmulPeak:
    """fp32 FLOP/s of an n x n @ n x n matmul on preallocated matrices."""

    def __init__(self, n: int):
        import torch

        self.n = n
        self.a = torch.randn(n, n, dtype=torch.float32)
        self.b = torch.randn(n, n, dtype=torch.float32)
        self.c = torch.empty(n, n, dtype=torch.float32)
        self.cpu_rates: list[float] = []
        self.block()

    def block(self, reps: int = 3) -> float:
        """One timed block of ``reps`` matmuls, after an untimed one that brings the matrices back into cache."""
        import torch

        torch.matmul(self.a, self.b, out=self.c)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(reps):
            torch.matmul(self.a, self.b, out=self.c)
        flops = 2 * self.n**3 * reps
        self.cpu_rates.append(flops / max(1e-9, time.process_time() - c0))  # FLOPs per CPU-second of this process
        return flops / (time.perf_counter() - t0)

    def sustained(self, seconds: float = 2.0) -> float:
        """Best of the blocks run during ``seconds``."""
        best = 0.0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            best = max(best, self.block())
        return best


def build_model(folder: Path, args) -> Path:
    from tunekit.tiny.text import build_tiny_model

    if args.shape != "custom":
        import _shapes
        from _common import LF_DATA

        return _shapes.build_random_model(
            WORK / f"real-{args.shape}",
            args.shape,
            data_dir=LF_DATA if (LF_DATA / "dataset_info.json").is_file() else None,
        )
    if not (folder / "config.json").is_file():
        build_tiny_model(
            folder,
            like=args.like,
            seed=0,
            hidden_size=args.hidden,
            num_layers=args.layers,
            intermediate_size=args.intermediate,
            num_heads=args.heads,
            num_kv_heads=args.heads,
            vocab_size=args.vocab,
        )
    return folder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--like", default="llama", help="tiny model family (default llama)")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=1376)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument(
        "--shape",
        default="custom",
        choices=["custom", "qwen2.5-0.5b", "tiny"],
        help="custom: the --like/--hidden/... model (default); qwen2.5-0.5b: that architecture, seq 1024; "
        "tiny: the same family at a few M parameters (a dry run of --shape)",
    )
    ap.add_argument(
        "--batch", type=int, default=None, help="per-device batch (default 16; 1 for --shape qwen2.5-0.5b)"
    )
    ap.add_argument("--seq", type=int, default=None, help="tokens per sequence (default 256; 1024 for qwen2.5-0.5b)")
    ap.add_argument(
        "--grad-accum",
        type=int,
        default=None,
        help="gradient_accumulation_steps (micro-batches per optimizer step; default 1)",
    )
    ap.add_argument("--profile", action="store_true", help="profile one extra step (left out of the timings)")
    ap.add_argument("--compile", action="store_true", help="torch_compile: true (inductor)")
    ap.add_argument(
        "--attn",
        default="sdpa",
        choices=["sdpa", "eager"],
        help="flash_attn option: sdpa (torch's CPU flash kernel) or eager (matmul + softmax, which inductor "
        "can fuse under --compile)",
    )
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps in all (default 14; 4 for qwen2.5-0.5b)")
    ap.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="first steps left out of tokens/s (default 4; 2 for qwen2.5-0.5b: "
        "the first compiles under --compile, the second is the first at speed)",
    )
    ap.add_argument("--peak-n", type=int, default=2048, help="matrix size of the peak matmul")
    args = ap.parse_args(argv)
    real = args.shape != "custom"
    args.batch = args.batch or (1 if real else 16)
    args.seq = args.seq or (1024 if real else 256)
    args.grad_accum = args.grad_accum or 1
    # a 0.5B step of 1,024 tokens is ~3.3 TFLOP, ~40-60 s on 2 cores: at accumulation 4 and 5 + 1 steps (the first
    # version) the run needed ~25 minutes and was stopped after 19
    args.steps = args.steps or (4 if args.shape == "qwen2.5-0.5b" else 14)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.shape == "qwen2.5-0.5b" else 4)
    if args.steps <= args.warmup:
        ap.error("--steps must exceed --warmup")

    from tunekit.host import malloc as host_malloc

    host_malloc.tune()  # as `tunekit train` does at start-up (TUNEKIT_MALLOC_TUNE=0: glibc's defaults)
    import numpy as np
    import torch
    import transformers

    from tunekit.config import load_config
    from tunekit.data.pipeline import PreparedData
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.stages import sft

    threads = torch.get_num_threads()
    print(
        f"[mfu] torch {torch.__version__} | threads {threads} | cpus {os.cpu_count()} | load {loadavg()}", flush=True
    )
    meter = MatmulPeak(args.peak_n)
    peak_before = meter.sustained()
    print(f"[mfu] fp32 matmul {args.peak_n}^3: {peak_before / 1e9:.1f} GFLOP/s (before training)", flush=True)

    WORK.mkdir(parents=True, exist_ok=True)
    name = f"mfu-{args.like}-h{args.hidden}-l{args.layers}-i{args.intermediate}-v{args.vocab}"
    model_dir = build_model(WORK / name, args)
    out = tempfile.mkdtemp(prefix="tunekit-mfu-")
    cfg = load_config(
        None,
        {
            "stage": "sft",
            "model_name_or_path": str(model_dir),
            "output_dir": out,
            "finetuning_type": "full",
            "gradient_checkpointing": False,
            "per_device_train_batch_size": args.batch,
            "gradient_accumulation_steps": args.grad_accum,
            "max_steps": args.steps + (1 if args.profile else 0),
            "learning_rate": 1e-4,
            "lr_scheduler_type": "constant",
            "logging_steps": 1,
            "save_strategy": "no",
            "report_to": "none",
            "bf16": False,
            "fp16": False,
            "use_cpu": True,
            "disable_tqdm": True,
            "template": "default",
            "seed": 0,
            "torch_compile": args.compile,
            "flash_attn": args.attn,
        },
    )
    transformers.set_seed(cfg.seed)
    targs = build_training_arguments(cfg, [])
    tokenizer = load_tokenizer(cfg)
    if tokenizer.pad_token_id is None:  # llama has none; the sequences are all full length, nothing is padded
        tokenizer.pad_token = tokenizer.eos_token
    model = load_model(cfg, tokenizer, is_trainable=True)
    n_params = model.num_parameters()
    conf = model.config
    embed = conf.vocab_size * conf.hidden_size
    print(
        f"[mfu] model {model_dir.name}: {n_params:,} parameters ({n_params / 1e6:.2f}M; embedding {embed:,}, "
        f"tied lm_head: {bool(getattr(conf, 'tie_word_embeddings', False))}) | layers {conf.num_hidden_layers} | "
        f"hidden {conf.hidden_size} | intermediate {conf.intermediate_size} | heads {conf.num_attention_heads} | "
        f"fp32 | gradient checkpointing off | attention {conf._attn_implementation} | "
        f"torch.compile {'on' if args.compile else 'off'}",
        flush=True,
    )

    rng = np.random.default_rng(0)
    n_rows = args.batch * args.grad_accum * (args.steps + 1)
    ids = rng.integers(3, conf.vocab_size, size=(n_rows, args.seq)).tolist()
    import datasets

    data = PreparedData(train=datasets.Dataset.from_dict({"input_ids": ids, "labels": ids}))
    times: list[float] = []  # end of each optimizer step
    cpu_at: list[tuple[float, float]] = []  # process CPU time at each step end and after its peak blocks
    resumed: list[float] = []  # end of the peak block after it: the next step's start
    peaks: list[float] = []  # the peak block after each step
    losses: list[float] = []

    usage: list[tuple[int, float]] = []  # (minor page faults, system CPU s) at each step end

    class StepTimer(transformers.TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            times.append(time.perf_counter())
            c_end = time.process_time()
            use = resource.getrusage(resource.RUSAGE_SELF)
            usage.append((use.ru_minflt, use.ru_stime))
            peaks.append(max(meter.block(), meter.block()))
            resumed.append(time.perf_counter())
            cpu_at.append((c_end, time.process_time()))
            began = resumed[-2] if len(resumed) >= 2 else t_train
            first = " (with start-up, and compilation under --compile)" if len(times) == 1 else ""
            print(
                f"[mfu] step {state.global_step}: {times[-1] - began:.1f} s, "
                f"{c_end - (cpu_at[-2][1] if len(cpu_at) >= 2 else 0):.1f} "
                f"CPU-s{first} | peak RSS {use.ru_maxrss / 2**20:.2f} GiB | peak block {peaks[-1] / 1e9:.0f} GFLOP/s "
                "| "
                f"load {loadavg()}",
                flush=True,
            )

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                losses.append(logs["loss"])

    callbacks = [StepTimer()]
    if args.profile:
        from _profile import ProfileCallback

        prof_cb = ProfileCallback(Path(out) / "profile.json", args.steps + 1, "tunekit")
        callbacks.insert(0, prof_cb)  # stops the profiler before StepTimer's peak blocks
    trainer = sft.build_trainer(cfg, targs, model, tokenizer, data, callbacks)
    trainer.remove_callback(transformers.trainer_callback.PrinterCallback)
    t_train = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t_train
    peak_after = meter.sustained()
    peak = max(peak_before, peak_after)

    tokens_per_step = args.batch * args.grad_accum * args.seq
    measured = range(args.warmup, args.steps)  # steps after the warm-up ones (not the profiled extra step)
    step_times = [times[i] - resumed[i - 1] for i in measured]
    steps = len(step_times)
    tps = tokens_per_step * steps / sum(step_times)
    step_s = sum(step_times) / steps
    flops_6n = 6 * n_params * tps
    per_step = sorted(
        6 * n_params * tokens_per_step / dt / ((peaks[i - 1] + peaks[i]) / 2) for i, dt in zip(measured, step_times)
    )
    mfu_interleaved = statistics.median(per_step)
    attn = (
        12 * conf.num_hidden_layers * conf.hidden_size * args.seq
    )  # per token, fwd+bwd, QK^T and AV (no causal saving)
    no_embed = 6 * (n_params - embed) + attn
    print(
        f"[mfu] batch {args.batch} x seq {args.seq} x accumulation {args.grad_accum} = {tokens_per_step} tokens per "
        f"optimizer step | "
        f"{args.steps} steps, first {args.warmup} left out | step {step_s:.3f} s | whole train() {wall:.1f} s | "
        f"loss {fmt(losses[0] if losses else None, 3)} -> {fmt(losses[-1] if losses else None, 3)}"
    )
    print(
        f"[mfu] fp32 matmul {args.peak_n}^3 after training: {peak_after / 1e9:.1f} GFLOP/s; whole-window peak "
        f"{peak / 1e9:.1f} GFLOP/s | peak blocks between steps {min(peaks) / 1e9:.0f}-{max(peaks) / 1e9:.0f} GFLOP/s "
        "| "
        f"load {loadavg()}"
    )
    n_faults = usage[args.steps - 1][0] - usage[args.warmup - 1][0]
    sys_s = usage[args.steps - 1][1] - usage[args.warmup - 1][1]
    print(
        f"[mfu] per step: {n_faults / steps:,.0f} page faults, {sys_s / steps:.3f} s system CPU (peak blocks included)"
    )
    print(f"training tokens/s: {tps:.0f}")
    print(f"model FLOP/s (6 x {n_params / 1e6:.2f}M x tokens/s): {flops_6n / 1e9:.1f} GFLOP/s")
    mfu = mfu_interleaved
    print(
        f"MFU: {100 * mfu:.1f} % (median of {steps} steps against the peak measured beside each; range "
        f"{100 * per_step[0]:.1f}-{100 * per_step[-1]:.1f} %) (target >= {100 * TARGET:.0f} %: "
        f"{'ok' if mfu >= TARGET else 'MISSED'})"
    )
    print(
        f"  whole window: {100 * flops_6n / peak:.1f} % (tokens/s of all measured steps over the larger "
        f"before/after peak)"
    )
    print(
        f"  alternative count (6 x non-embedding params + attention 12*L*d*seq per token = "
        f"{no_embed / 1e6:.1f} MFLOP/token vs 6N = {6 * n_params / 1e6:.1f}): MFU "
        f"{100 * mfu * no_embed / (6 * n_params):.1f} %"
    )
    # the standard count: 6 x (every matmul weight, LM head included) + attention 12*L*h*s per token
    from torch import nn

    n_matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    head_dim = getattr(conf, "head_dim", None) or conf.hidden_size // conf.num_attention_heads
    attn_std = 12 * conf.num_hidden_layers * conf.num_attention_heads * head_dim * args.seq
    per_token_std = 6 * n_matmul + attn_std
    mfu_std = mfu * per_token_std / (6 * n_params)
    print(
        f"  standard count (6 x N_matmul {n_matmul / 1e6:.1f}M incl. LM head + attention 12*L*h*s = "
        f"{attn_std / 1e6:.1f} MFLOP/token; {per_token_std / 1e6:.1f} MFLOP/token): MFU {100 * mfu_std:.1f} %"
        f"{' (headline for --shape)' if real else ''}"
    )
    # the same count over process CPU time: each step's FLOPs per CPU-second against the matmul's FLOPs per CPU-second
    # (a shared host's contention slows both in wall time but leaves CPU time nearly alone; run with OMP_NUM_THREADS=1
    # there, since idle intra-op threads spin and count as CPU time)
    step_cpu = [cpu_at[i][0] - cpu_at[i - 1][1] for i in measured]
    cpu_peak = statistics.median(meter.cpu_rates)
    mfu_cpu = per_token_std * tokens_per_step / statistics.median(step_cpu) / cpu_peak
    print(
        f"  standard count over process CPU time: step {statistics.median(step_cpu):.2f} CPU-s (median), matmul "
        f"{cpu_peak / 1e9:.1f} GFLOP per CPU-s (median of {len(meter.cpu_rates)} blocks): MFU {100 * mfu_cpu:.1f} %"
    )
    if args.profile:
        import json

        from _profile import GROUPS

        res = json.loads((Path(out) / "profile.json").read_text())
        if "cpu_s" in res:
            total = sum(res["cpu_s"].values()) or 1.0
            # FLOPs each group carries (per optimizer step): LM head 6*V*h per token, attention 12*L*h*s,
            # the other matmuls 6*(N_matmul - V*h)
            vh = res["vocab"] * conf.hidden_size
            flops = {"lm_head+loss": 6 * vh, "attention": attn_std, "mlp/linear": 6 * (n_matmul - vh)}
            print(
                f"[mfu] where the profiled step went (CPU self time {total:.2f} s, wall {res['step_wall_s']:.2f} s; "
                f"profiler overhead included):"
            )
            peak_now = statistics.median(peaks)
            for g in GROUPS:
                t = res["cpu_s"][g]
                line = f"  {g:<13} {t:7.3f} s  {100 * t / total:5.1f} %"
                if g in flops and t > 0:
                    rate = flops[g] * tokens_per_step / t
                    line += (
                        f" | {flops[g] / per_token_std * 100:5.1f} % of the FLOPs at {rate / 1e9:6.1f} GFLOP/s = "
                        f"{100 * rate / peak_now:5.1f} % of the matmul peak"
                    )
                print(line)
            print(
                "  (the gap to 100 %: the time in 'other' and 'optimizer' does no counted FLOPs, and each matmul "
                "group runs below the square-matmul peak by the factor shown)"
            )
    headline = mfu_std if real else mfu
    return 0 if headline >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
