#!/usr/bin/env python3
"""The GPU check kit: planner vs measured memory, tokens/s, FA2/SDPA, Liger, bf16, on real shapes, in one go.

    python benchmarks/gpu/kit.py OUT_DIR [--device cuda|cpu] [--tiny] [--budget-s 540] [--cell-timeout 240]
                                 [--models qwen2.5-1.5b,qwen2.5-7b] [--max-cells N] [--steps 4] [--inject-failure]
                                 [--ab-steps 8] [--ab-cell-timeout 120] [--ab all|none|hf,liger,...]

(``benchmarks/gpu/run.sh OUT_DIR ...`` installs what is missing first, then runs this.)

Models: random-weight Qwen2.5-1.5B and Qwen2.5-7B with the published architectures (benchmarks/_shapes.py),
saved in bf16, initialised on the GPU (seconds), cached in ``$TUNEKIT_GPU_KIT_CACHE`` (default
``~/.cache/tunekit-gpu-kit``, which also holds each cell's output_dir while it runs: only its logs and metrics are
copied to ``OUT_DIR/runs/CELL/``). ``--tiny``: the few-M-parameter model of the same family instead (CPU dry runs).

Data: a fixed-length SFT set written to ``OUT_DIR/data`` (alpaca records of random words, each longer than the
largest cutoff, so every sample is cut to exactly ``cutoff_len`` tokens): the planner's ``--seq-len`` is then
the real sequence length, and tokens/s counts no padding.

A/B matrix first (benchmarks/gpu/ab.py; ``--ab none`` leaves it out, ``--ab hf,liger`` runs those cells only, for
a rerun when time is short): on one job (the first model, LoRA, the first
cutoff, micro-batch 4 x accumulation 2, ``--ab-steps`` steps) plain transformers (every tunekit trick off), each
trick switched on alone, tunekit's defaults on this device and LLaMA-Factory; a second table states per trick the
loss difference against a derived bound, the memory and speed ratios and the suggested CUDA default.

Grid (each cell in its own subprocess, benchmarks/gpu/cell.py, with a timeout; one failure does not stop
the rest): method LoRA (r8, all linear) / full / QLoRA (4-bit NF4) x cutoff 1K / 4K x gradient checkpointing
on / off x Liger on / off, bf16 on the GPU (fp32 on the CPU), SDPA attention, micro-batch 1 x accumulation 2,
``--steps`` optimizer steps. Before each cell, tunekit's planner (``tunekit.plan.make_plan`` with
``seq_len=cutoff``, the GPU's memory) predicts the peak; a cell the planner says cannot fit is skipped and
recorded as such, as are cells whose package (bitsandbytes, liger-kernel, flash-attn) or device is missing.
Extra cells: FA2 against SDPA on the same job, fp32 against bf16, and LLaMA-Factory (when ``llamafactory`` is
importable, or ``$LF_PYTHON`` names an interpreter that has it) on the same job as a tunekit cell.
Cells run in priority order (the most informative first) until ``--budget-s`` (whole kit, models included)
would be exceeded; the rest are recorded as "not run: time budget".

Writes ``OUT_DIR/results.json`` (environment, every cell with its config, plan and measurement) and
``OUT_DIR/results.md`` (one table). Exit 0 when the kit itself ran (failed cells are results, not errors).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import ab  # noqa: E402  (benchmarks/gpu/ab.py: the A/B matrix and its table)
from lf import LF_LAUNCHER, lf_config, lf_device_ok, lf_python  # noqa: E402, F401  (LLaMA-Factory's side)

GiB = 2**30
TINY_CUTOFFS = (128, 256)
REAL_CUTOFFS = (1024, 4096)
WORDS = [
    "the",
    "model",
    "learns",
    "from",
    "data",
    "and",
    "each",
    "step",
    "updates",
    "weights",
    "while",
    "the",
    "loss",
    "goes",
    "down",
    "slowly",
    "over",
    "time",
    "people",
    "write",
    "long",
    "answers",
    "about",
    "science",
    "history",
    "music",
    "cooking",
    "travel",
    "code",
    "numbers",
    "planets",
    "rivers",
    "mountains",
    "cities",
    "languages",
    "animals",
    "plants",
    "weather",
    "stories",
    "games",
    "sports",
    "books",
    "art",
    "health",
    "water",
    "light",
]


def now() -> float:
    return time.monotonic()


# ---------------------------------------------------------------------------------------------- environment


def environment(device: str) -> dict:
    import torch

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "packages": {
            name: importlib.util.find_spec(name) is not None
            for name in ("flash_attn", "liger_kernel", "bitsandbytes", "llamafactory")
        },
    }
    for dist in ("transformers", "peft", "accelerate", "datasets", "trl", "tunekit"):
        try:
            from importlib.metadata import version

            env[dist] = version(dist)
        except Exception:  # noqa: BLE001
            env[dist] = None
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / GiB, 2),
            bf16=torch.cuda.is_bf16_supported(),
            capability=f"{props.major}.{props.minor}",
        )
    else:
        import psutil

        env.update(gpu=None, gpu_memory_gib=round(psutil.virtual_memory().total / GiB, 2), bf16=False)
    return env


# ---------------------------------------------------------------------------------------------- data


def write_data(data_dir: Path, model_dir: Path, max_cutoff: int, samples: int) -> Path:
    """Alpaca records each longer than ``max_cutoff`` tokens of ``model_dir``'s tokenizer (cut to cutoff_len)."""
    from transformers import AutoTokenizer

    data_dir.mkdir(parents=True, exist_ok=True)
    info, marker = data_dir / "dataset_info.json", data_dir / "kit_fixed.meta.json"
    want = {"max_cutoff": max_cutoff, "samples": samples, "model": str(model_dir)}
    if info.is_file() and marker.is_file() and json.loads(marker.read_text()) == want:
        return data_dir
    tok = AutoTokenizer.from_pretrained(model_dir)
    rng = random.Random(0)
    per_word = len(tok(" ".join(WORDS))["input_ids"]) / len(WORDS)
    n_words = int(max_cutoff * 1.3 / max(per_word, 0.5)) + 16
    records = []
    for _ in range(samples):
        instruction = " ".join(rng.choice(WORDS) for _ in range(n_words))
        output = " ".join(rng.choice(WORDS) for _ in range(max(16, n_words // 4)))
        records.append({"instruction": instruction, "input": "", "output": output})
    (data_dir / "kit_fixed.json").write_text(json.dumps(records))
    info.write_text(json.dumps({"kit_fixed": {"file_name": "kit_fixed.json"}}, indent=1))
    marker.write_text(json.dumps(want))
    return data_dir


# ---------------------------------------------------------------------------------------------- grid


def cell_name(c: dict) -> str:
    parts = [
        c["model"],
        c["method"],
        f"s{c['cutoff']}",
        "gc" if c["gc"] else "nogc",
        "liger" if c["liger"] else "",
        c["attn"],
        c["precision"],
        c.get("tool", "tunekit") if c.get("tool") == "lf" else "",
        c.get("tag", ""),
    ]
    return "-".join(p for p in parts if p)


def grid(models: list[str], cutoffs: tuple[int, int], precision: str) -> list[dict]:
    """Every cell, most informative first."""
    base = dict(attn="sdpa", precision=precision, liger=False)
    first = models[0]
    cells = [dict(base, model=first, method="lora", cutoff=cutoffs[0], gc=True, tag="baseline")]
    cells.append(dict(cells[0], tool="lf", tag="lf-same-job"))
    cells.append(dict(cells[0], attn="fa2", tag="fa2-vs-sdpa"))
    cells.append(dict(cells[0], liger=True, tag=""))
    if precision == "bf16":
        cells.append(dict(cells[0], precision="fp32", tag="fp32-vs-bf16"))
    for liger in (False, True):  # the models alternate, so that a budget cut leaves both covered
        for method in ("lora", "full", "qlora"):
            for cutoff in cutoffs:
                for gc in (True, False):
                    for model in models:
                        cells.append(dict(base, model=model, method=method, cutoff=cutoff, gc=gc, liger=liger))
    seen, out = set(), []
    for c in cells:
        key = cell_name(dict(c, tag=""))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def cell_config(c: dict, model_dir: Path, data_dir: Path, out_dir: Path, device: str, steps: int) -> dict:
    """The tunekit config of a cell (LLaMA-Factory's option names, so the LF cell reads the same)."""
    cfg = {
        "model_name_or_path": str(model_dir),
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "full" if c["method"] == "full" else "lora",
        "dataset": "kit_fixed",
        "dataset_dir": str(data_dir),
        "template": "qwen",
        "cutoff_len": c["cutoff"],
        "preprocessing_num_workers": 1,
        "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": 2,
        "max_steps": steps,
        "learning_rate": 1.0e-5 if c["method"] == "full" else 1.0e-4,
        "lr_scheduler_type": "constant",
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "output_dir": str(out_dir),
        "overwrite_output_dir": True,
        "disable_tqdm": True,
        "seed": 42,
        "flash_attn": c["attn"],
        "bf16": c["precision"] == "bf16",
        "fp16": False,
        "enable_liger_kernel": c["liger"],
        "gradient_checkpointing": c["gc"],
        "use_cpu": device == "cpu",
        "dataloader_num_workers": 0,
    }
    if c["method"] != "full":
        cfg.update(lora_rank=8, lora_target="all")
    if c["method"] == "qlora":
        cfg["quantization_bit"] = 4
    if c.get("break"):
        cfg["dataset"] = "no_such_dataset"  # --inject-failure: a real error inside tunekit train
    return cfg


def unsupported(c: dict, env: dict, device: str) -> str | None:
    pk = env["packages"]
    if c["method"] == "qlora" and (device != "cuda" or not pk["bitsandbytes"]):
        return "QLoRA needs bitsandbytes and a CUDA GPU"
    if c["liger"] and (device != "cuda" or not pk["liger_kernel"]):
        return "Liger needs liger-kernel and a CUDA GPU"
    if c["attn"] == "fa2" and (device != "cuda" or not pk["flash_attn"]):
        return "FA2 needs flash-attn and a CUDA GPU"
    if c["precision"] == "bf16" and not env.get("bf16"):
        return "no bf16 on this device"
    if c.get("tool") == "lf" and not lf_python():
        return "LLaMA-Factory not installed (import llamafactory failed; set LF_PYTHON to an interpreter that has it)"
    if c.get("tool") == "lf" and not lf_device_ok(device):
        return (
            f"LLaMA-Factory's interpreter {lf_python()} has no CUDA torch (LF_PYTHON: a venv over the image's torch)"
        )
    return None


def plan_cell(cfg: dict, memory_gib: float) -> dict:
    """tunekit's planner for the cell: the predicted peak per GPU and its components."""
    from tunekit.config import load_config
    from tunekit.plan import make_plan

    values = dict(cfg)
    values["use_cpu"] = False  # plan the GPU run the cell is (on the CPU dry run: the plan of that GPU run)
    plan = make_plan(
        load_config(None, values),
        gpu_memory_gib=memory_gib,
        seq_len=cfg["cutoff_len"],
        num_samples=cfg["per_device_train_batch_size"] * cfg["gradient_accumulation_steps"] * cfg["max_steps"],
    )
    mem = plan.memory
    return {
        "total_gib": mem["total_gib"],
        "overhead_gib": mem.get("overhead", 0.0),
        "fragmentation_gib": mem.get("fragmentation", 0.0),
        "allocated_gib": round(mem["total_gib"] - mem.get("overhead", 0.0) - mem.get("fragmentation", 0.0), 3),
        "components_gib": mem,
        "fits": plan.fits,
        "setup": plan.setup,
        "time": {k: (plan.time or {}).get(k) for k in ("flops_per_token", "seconds_per_step", "mfu")},
    }


def run_subprocess(cmd: list[str], log: Path, timeout: float, env: dict, cwd: Path) -> tuple[int | None, float]:
    """Run ``cmd`` in its own session; on timeout kill its whole process group. Returns (rc or None, seconds)."""
    t0 = now()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
    return rc, now() - t0


def run_lf(cfg: dict, out_dir: Path, log: Path, timeout: float, env: dict, cwd: Path) -> dict:
    import yaml

    job = out_dir.parent / f"{out_dir.name}.lf.yaml"
    job.write_text(yaml.safe_dump(lf_config(cfg), sort_keys=False))
    py = lf_python()
    peaks = out_dir.parent / f"{out_dir.name}.lf-peaks.json"
    peaks.unlink(missing_ok=True)
    rc, wall = run_subprocess([py, "-c", LF_LAUNCHER, str(job), str(peaks)], log, timeout, env, cwd)
    res = {"ok": rc == 0, "rc": rc, "cell_wall_s": wall}
    if peaks.is_file():  # the same peaks cell.py records, read in LLaMA-Factory's process as it exits
        res.update(json.loads(peaks.read_text()))
    path = out_dir / "all_results.json"
    if rc == 0 and path.is_file():
        r = json.loads(path.read_text())
        tokens = (
            cfg["per_device_train_batch_size"]
            * cfg["gradient_accumulation_steps"]
            * cfg["max_steps"]
            * cfg["cutoff_len"]
        )
        res.update(
            train_runtime=r.get("train_runtime"),
            train_loss=r.get("train_loss"),
            steps=cfg["max_steps"],
            runtime_tokens_per_s=tokens / r["train_runtime"] if r.get("train_runtime") else None,
            measured_kind=res.get("measured_kind", "lf_not_measured"),
        )
    elif rc is None:
        res["error"] = f"timeout after {timeout:.0f} s"
    else:
        res["error"] = f"exit {rc}: " + log.read_text(errors="replace")[-600:]
    return res


# ---------------------------------------------------------------------------------------------- report


def measured_gib(r: dict) -> float | None:
    if r.get("max_memory_allocated") is not None:
        return r["max_memory_allocated"] / GiB
    if r.get("measured_kind") == "cpu_peak_rss" and r.get("peak_rss_mb"):
        return r["peak_rss_mb"] / 1024
    return None


def markdown(env: dict, cells: list[dict], budget: dict) -> str:
    lines = [
        f"# GPU check kit: {env.get('gpu') or 'CPU (dry run)'}",
        "",
        f"torch {env['torch']} (CUDA {env['cuda']}), transformers {env['transformers']}, peft {env['peft']}, "
        f"tunekit {env['tunekit']}; packages: "
        + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in env["packages"].items()),
        f"budget {budget['budget_s']:.0f} s, used {budget['used_s']:.0f} s; cells run {budget['run']}, "
        f"ok {budget['ok']}, failed {budget['failed']}, skipped {budget['skipped']}, not run {budget['not_run']}",
        "",
        "Memory: planned = `tunekit plan` total per GPU; planned alloc = total − overhead − fragmentation "
        "(what `torch.cuda.max_memory_allocated` counts); measured = max_memory_allocated "
        "(on the CPU dry run: the cell's peak RSS, not comparable); error = planned alloc / measured − 1.",
        "",
        "tokens/s: steady = between the first and last logged step (tunekit's log); runtime = all tokens over "
        "train_runtime (first step included; the figure to compare with LLaMA-Factory, whose log has 1-s resolution).",
        "",
        "| cell | status | planned GiB | planned alloc GiB | measured GiB | reserved GiB | error | tokens/s steady | "
        "tokens/s runtime | s/step | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(v, d=2):
        return "" if v is None else f"{v:.{d}f}"

    for c in cells:
        p, r = c.get("plan") or {}, c.get("result") or {}
        meas = measured_gib(r)
        err = (p["allocated_gib"] / meas - 1) if p.get("allocated_gib") and meas else None
        reserved = r.get("max_memory_reserved")
        note = c.get("reason") or (r.get("error") or "")[:120].replace("|", "/").replace("\n", " ")
        lines.append(
            f"| {c['name']} | {c['status']} | {f(p.get('total_gib'))} | {f(p.get('allocated_gib'))} | {f(meas)} | "
            f"{f(reserved / GiB if reserved else None)} | {'' if err is None else f'{100 * err:+.1f} %'} | "
            f"{f(r.get('tokens_per_s'), 0)} | {f(r.get('runtime_tokens_per_s'), 0)} | {f(r.get('s_per_step'), 3)} | "
            f"{note} |"
        )
    return "\n".join(lines) + "\n"


def intermediate_size(model_dir: Path | None) -> int:
    """The longest reduction of the model's forward (the MLP's intermediate size), for ab.loss_bound."""
    try:
        return int(json.loads((model_dir / "config.json").read_text())["intermediate_size"])
    except (TypeError, OSError, KeyError, ValueError):
        return 1


# ---------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when visible, else cpu")
    ap.add_argument("--tiny", action="store_true", help="the tiny model of the same family (dry run)")
    ap.add_argument("--models", default="qwen2.5-1.5b,qwen2.5-7b")
    ap.add_argument("--budget-s", type=float, default=540.0, help="the whole kit's time budget (default 540 s)")
    ap.add_argument("--cell-timeout", type=float, default=240.0, help="one cell's limit (default 240 s)")
    ap.add_argument("--max-cells", type=int, default=0, help="run at most N cells (0: no limit)")
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps per cell (default 4; --tiny 2)")
    ap.add_argument("--ab-steps", type=int, default=0, help="optimizer steps of each A/B cell (default 8; --tiny 2)")
    ap.add_argument("--ab-cell-timeout", type=float, default=120.0, help="one A/B cell's limit (default 120 s)")
    ap.add_argument(
        "--ab",
        default="all",
        help="A/B cells to run (benchmarks/gpu/ab.py): all (default), none, or names such as hf,liger (hf, the "
        "reference, always runs with them)",
    )
    ap.add_argument(
        "--inject-failure",
        action="store_true",
        help="add a cell whose config names a dataset that does not exist (checks failure handling)",
    )
    args = ap.parse_args(argv)
    try:
        chosen = ab.chosen(args.ab)
    except ValueError as exc:
        ap.error(str(exc))
    t_start = now()
    out = Path(args.out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("[kit] --device cuda but torch sees no GPU", file=sys.stderr)
        return 2
    env = environment(device)
    print(f"[kit] {json.dumps(env)}", flush=True)
    models = ["tiny"] if args.tiny else [m.strip() for m in args.models.split(",") if m.strip()]
    cutoffs = TINY_CUTOFFS if args.tiny else REAL_CUTOFFS
    steps = args.steps or (2 if args.tiny else 4)
    ab_steps = args.ab_steps or (2 if args.tiny else 8)
    precision = "bf16" if device == "cuda" and env.get("bf16") else "fp32"
    # models, run folders (a full fine-tune saves the whole model) and the dataset cache live outside OUT_DIR, so
    # that OUT_DIR holds only results and logs (it may be a folder that is copied back from the GPU machine)
    cache = Path(os.environ.get("TUNEKIT_GPU_KIT_CACHE", Path.home() / ".cache" / "tunekit-gpu-kit"))
    scratch = cache / "scratch"
    child_env = dict(
        os.environ,
        TOKENIZERS_PARALLELISM="false",
        TUNEKIT_WARM="0",
        TUNEKIT_CACHE=str(scratch / "tunekit-cache"),
        PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    if device == "cuda":
        child_env.setdefault("CUDA_VISIBLE_DEVICES", "0")
        child_env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    else:
        child_env["CUDA_VISIBLE_DEVICES"] = ""
    logs = out / "logs"
    logs.mkdir(exist_ok=True)

    def remaining() -> float:
        return args.budget_s - (now() - t_start)

    # models (each build in its own process: the kit itself never holds GPU memory)
    model_dirs: dict[str, Path] = {}
    model_notes: dict[str, str] = {}
    dtype = "bfloat16" if precision == "bf16" else "float32"
    for m in models:
        folder = cache / f"{m}-{dtype}"
        rc, wall = run_subprocess(
            [sys.executable, str(HERE / "cell.py"), "build", m, str(folder), dtype, device],
            logs / f"build-{m}.log",
            max(1.0, remaining() - 30),
            child_env,
            out,
        )
        if rc == 0:
            model_dirs[m] = folder
            print(f"[kit] model {m}: {folder} ({wall:.0f} s)", flush=True)
        else:
            model_notes[m] = f"model build failed (exit {rc}, {wall:.0f} s): see {logs / f'build-{m}.log'}"
            print(f"[kit] {model_notes[m]}", flush=True)
    samples = max(16, ab.MICRO * ab.ACCUM * ab_steps)
    data_dir = (
        write_data(out / "data", next(iter(model_dirs.values())), max(cutoffs), samples)
        if model_dirs
        else out / "data"
    )

    plain = grid(models, cutoffs, precision)
    cells = [c for c in ab.cells(models[0], cutoffs[0], precision) if c["ab"] in chosen] + plain
    if args.inject_failure:
        cells.insert(1, dict(plain[0], tag="injected-failure", **{"break": True}))
    records: list[dict] = []
    run_count = 0
    for c in cells:
        name = cell_name(c)
        rec = {"name": name, "spec": c}
        records.append(rec)
        if c["model"] not in model_dirs:
            rec.update(status="skipped", reason=model_notes.get(c["model"], "no model"))
            continue
        why = unsupported(c, env, device)
        if why:
            rec.update(status="skipped", reason=why)
            continue
        cell_out = scratch / "runs" / name
        cfg = cell_config(c, model_dirs[c["model"]], data_dir, cell_out, device, ab_steps if c.get("ab") else steps)
        cell_env = dict(child_env)
        if c.get("ab"):
            cfg, changes = ab.apply(c, cfg)
            rec["env"] = changes
            for key, value in changes.items():
                if value is None:
                    cell_env.pop(key, None)
                else:
                    cell_env[key] = value
        rec["config"] = cfg
        try:
            rec["plan"] = plan_cell(cfg, env["gpu_memory_gib"])
        except Exception as exc:  # noqa: BLE001 - a planner error is a finding, recorded
            rec["plan"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        if rec["plan"].get("fits") is False:
            rec.update(
                status="skipped",
                reason=f"planner: {rec['plan']['total_gib']:.1f} GiB does not fit {env['gpu_memory_gib']:.0f} GiB",
            )
            continue
        if args.max_cells and run_count >= args.max_cells:
            rec.update(status="not run", reason=f"--max-cells {args.max_cells}")
            continue
        if remaining() < 20:
            rec.update(status="not run", reason="time budget")
            continue
        run_count += 1
        timeout = min(args.ab_cell_timeout if c.get("ab") else args.cell_timeout, remaining() - 5)
        shutil.rmtree(cell_out, ignore_errors=True)
        cell_out.parent.mkdir(parents=True, exist_ok=True)
        log = logs / f"{name}.log"
        if c.get("tool") == "lf":
            res = run_lf(cfg, cell_out, log, timeout, cell_env, out)
        else:
            (out / "runs").mkdir(parents=True, exist_ok=True)
            spec_path, res_path = out / "runs" / f"{name}.spec.json", out / "runs" / f"{name}.result.json"
            spec_path.write_text(json.dumps({"name": name, "config": cfg}, indent=1))
            res_path.unlink(missing_ok=True)
            rc, wall = run_subprocess(
                [sys.executable, str(HERE / "cell.py"), "train", str(spec_path), str(res_path)],
                log,
                timeout,
                cell_env,
                out,
            )
            res = json.loads(res_path.read_text()) if res_path.is_file() else {"ok": False}
            res.update(rc=rc, cell_wall_s=wall)
            if rc is None:
                res["error"] = f"timeout after {timeout:.0f} s (killed)"
            elif not res.get("ok") and "error" not in res:
                res["error"] = f"exit {rc} without a result: " + log.read_text(errors="replace")[-600:]
        keep = out / "runs" / name  # the run's small files (logs, metrics, resolved config); the weights are dropped
        keep.mkdir(parents=True, exist_ok=True)
        for small in (
            list(cell_out.glob("*.json")) + list(cell_out.glob("*.jsonl")) + list(cell_out.glob("*.yaml"))
            if cell_out.is_dir()
            else []
        ):
            shutil.copy2(small, keep / small.name)
        shutil.rmtree(cell_out, ignore_errors=True)
        res["losses"] = ab.step_losses(keep)
        rec["result"] = {k: v for k, v in res.items() if k != "traceback"}
        rec["status"] = "ok" if res.get("ok") else ("timeout" if res.get("rc", 0) is None else "failed")
        rec["log"] = str(log)
        meas = measured_gib(res)
        print(
            f"[kit] {name}: {rec['status']} | planned {rec['plan'].get('total_gib')} GiB (alloc "
            f"{rec['plan'].get('allocated_gib')}) | measured {'' if meas is None else f'{meas:.2f}'} GiB | tokens/s "
            f"{res.get('tokens_per_s')} | {res.get('cell_wall_s', 0):.0f} s | {(res.get('error') or '')[:160]}",
            flush=True,
        )
    used = now() - t_start
    budget = {
        "budget_s": args.budget_s,
        "used_s": used,
        "run": run_count,
        "ok": sum(r["status"] == "ok" for r in records),
        "failed": sum(r["status"] in ("failed", "timeout") for r in records),
        "skipped": sum(r["status"] == "skipped" for r in records),
        "not_run": sum(r["status"] == "not run" for r in records),
    }
    reduction = intermediate_size(model_dirs.get(models[0]))
    ab_rows, ab_md = ab.summary(records, env, ab_steps, reduction) if chosen else ([], "")
    (out / "results.json").write_text(
        json.dumps(
            {
                "environment": env,
                "budget": budget,
                "models": {k: str(v) for k, v in model_dirs.items()},
                "cells": records,
                "ab": ab_rows,
            },
            indent=1,
            default=str,
        )
    )
    (out / "results.md").write_text(markdown(env, records, budget) + ("\n" + ab_md if ab_md else ""))
    print(
        f"[kit] wrote {out / 'results.json'} and {out / 'results.md'} ({used:.0f} s of {args.budget_s:.0f})",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
