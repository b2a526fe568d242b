"""Peak memory of full fine-tuning a ~100M-parameter model on CPU with AdamW, GaLore, APOLLO, BAdam, Adam-mini and
Muon, measured, next to the planner's prediction.

Each optimizer runs in its own process (a fresh heap): build a random Qwen2-shaped model (hidden 768, 12 layers, MLP
2048, vocab 16384, tied embeddings: 97.6M parameters) in fp32, then ``--steps`` optimizer steps of batch 1 x
``--seq`` tokens (forward, backward, step, zero_grad with set_to_none) through ``tunekit.train.optimizers`` exactly as
``tunekit train`` builds them. Measured: the process's peak RSS (``ru_maxrss``) minus its RSS right before the model
was built (so imports are not counted), and the bytes of the optimizer's state tensors after the last step. Planner:
``tunekit.plan.memory.estimate_memory`` for the same config, total minus the GPU runtime overhead (no CUDA context on a
CPU), and its ``optimizer_states`` term.

    .venv/bin/python benchmarks/optimizer_memory.py [--steps 3] [--seq 256] [--only galore,muon]

Run it with ``.venv/bin/python`` (the optimizer packages come with the ``optimizers`` extra).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile

MB = 2**20
SHAPE = dict(
    model_type="qwen2",
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=12,
    num_attention_heads=12,
    num_key_value_heads=12,
    vocab_size=16384,
    tie_word_embeddings=True,
    max_position_embeddings=2048,
)
METHODS = {
    "adamw": dict(optim="adamw_torch"),
    "galore": dict(use_galore=True, galore_rank=128, optim="adamw_torch"),
    "galore_layerwise": dict(use_galore=True, galore_rank=128, galore_layerwise=True, optim="adamw_torch"),
    "apollo": dict(use_apollo=True, apollo_rank=128, optim="adamw_torch"),
    "badam": dict(use_badam=True),
    "adam_mini": dict(use_adam_mini=True),
    "muon": dict(use_muon=True),
}


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def child(method: str, steps: int, seq: int) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, Trainer

    from tunekit.config import load_config
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.memory import estimate_memory
    from tunekit.plan.training_setup import resolve_setup
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.optimizers import build_optimizer, optimizer_state_tensors

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        fields = dict(SHAPE)
        hf = AutoConfig.for_model(fields.pop("model_type"), **fields)
        hf.save_pretrained(tmp)
        cfg = load_config(
            None,
            dict(
                finetuning_type="full",
                cutoff_len=seq,
                per_device_train_batch_size=1,
                gradient_checkpointing=False,
                learning_rate=1e-4,
                output_dir=tmp,
                **METHODS[method],
            ),
        )
        est = estimate_memory(load_shape(tmp, None), resolve_setup(cfg))
        args = build_training_arguments(cfg, [])
        hf._attn_implementation = "sdpa"
        hf.use_cache = False
        before = rss_bytes()
        peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(hf, dtype=torch.float32)
        model.train()
        opt = build_optimizer(cfg, args, model, Trainer.get_decay_parameter_names(None, model))
        if opt is None:
            cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
            opt = cls(model.parameters(), **kwargs)
        ids = torch.randint(0, hf.vocab_size, (1, seq), generator=torch.Generator().manual_seed(0))
        losses = []
        for _ in range(steps):
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(round(float(loss), 4))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        held = optimizer_state_tensors(opt)
        if method == "badam":
            held += list(opt.param_idx2hp.values())
        state = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in held}.values())
        c = est.components
        return dict(
            method=method,
            params=sum(p.numel() for p in model.parameters()),
            measured_peak_mb=round((max(peak, peak_before) - before) / MB),
            measured_state_mb=round(state / MB, 1),
            planned_peak_mb=round((est.total - c["overhead"]) / MB),
            planned_state_mb=round(c["optimizer_states"] / MB, 1),
            losses=losses,
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--only", default=None, help="comma-separated subset of " + ", ".join(METHODS))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print("RESULT " + json.dumps(child(a.child, a.steps, a.seq)), flush=True)
        return 0
    rows = []
    for method in a.only.split(",") if a.only else METHODS:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", method, "--steps", str(a.steps), "--seq", str(a.seq)],
            capture_output=True,
            text=True,
        )
        line = next((out for out in proc.stdout.splitlines() if out.startswith("RESULT ")), None)
        if line is None:
            print(f"{method}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(line[7:]))
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{rows[0]['params'] / 1e6:.1f}M parameters, fp32, batch 1 x {a.seq}, {a.steps} steps\n" if rows else "")
    print(
        "| optimizer | measured peak (MB) | planned peak (MB) | measured optimizer state (MB) | planned optimizer "
        "state (MB) |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['method']} | {r['measured_peak_mb']} | {r['planned_peak_mb']} | {r['measured_state_mb']} | "
            f"{r['planned_state_mb']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
