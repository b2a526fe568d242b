"""The GPU check kit (benchmarks/gpu/) dry-run on the CPU, so that it cannot rot before a GPU runs it.

The slow test runs the whole kit as a user would (``bash benchmarks/gpu/run.sh OUT --device cpu --tiny``):
install check, a tiny model of the Qwen2.5 family, the fixed-length data, three cells in their own processes
(one made to fail), and the JSON + Markdown it writes. The fast tests pin the grid, the planner column and the
per-cell timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
KIT_DIR = REPO / "benchmarks" / "gpu"
sys.path.insert(0, str(KIT_DIR))
sys.path.insert(0, str(REPO / "benchmarks"))

import kit  # noqa: E402

HEADER = ("| cell | status | planned GiB | planned alloc GiB | measured GiB | reserved GiB | error | tokens/s steady | "
          "tokens/s runtime | s/step | note |")


def test_grid_order_and_size():
    cells = kit.grid(["tiny"], kit.TINY_CUTOFFS, "fp32")
    names = [kit.cell_name(c) for c in cells]
    # the four comparison cells first, then LoRA / full / QLoRA x 2 cutoffs x checkpointing on/off x Liger off/on,
    # without repeating the baseline and its Liger twin (4 + 24 - 2)
    assert names[:4] == ["tiny-lora-s128-gc-sdpa-fp32-baseline", "tiny-lora-s128-gc-sdpa-fp32-lf-lf-same-job",
                         "tiny-lora-s128-gc-fa2-fp32-fa2-vs-sdpa", "tiny-lora-s128-gc-liger-sdpa-fp32"]
    assert len(cells) == 26 and len(set(names)) == 26
    assert names[4:8] == ["tiny-lora-s128-nogc-sdpa-fp32", "tiny-lora-s256-gc-sdpa-fp32", "tiny-lora-s256-nogc-sdpa-fp32",
                          "tiny-full-s128-gc-sdpa-fp32"]
    real = kit.grid(["qwen2.5-1.5b", "qwen2.5-7b"], kit.REAL_CUTOFFS, "bf16")
    assert len(real) == 5 + 48 - 2  # + the fp32-vs-bf16 cell on a GPU
    # the two models alternate after the comparison cells, so that a budget cut leaves both covered
    assert [c["model"] for c in real[5:9]] == ["qwen2.5-7b", "qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-1.5b"]
    assert {c["method"] for c in real} == {"lora", "full", "qlora"} and {c["cutoff"] for c in real} == {1024, 4096}


def test_cell_config_and_lf_spelling(tmp_path):
    c = dict(model="tiny", method="qlora", cutoff=4096, gc=False, liger=True, attn="fa2", precision="bf16")
    cfg = kit.cell_config(c, tmp_path / "m", tmp_path / "d", tmp_path / "o", "cuda", 4)
    assert (cfg["finetuning_type"], cfg["quantization_bit"], cfg["lora_target"], cfg["cutoff_len"]) == ("lora", 4, "all", 4096)
    assert (cfg["gradient_checkpointing"], cfg["enable_liger_kernel"], cfg["flash_attn"], cfg["bf16"]) == (False, True, "fa2", True)
    lf = kit.lf_config(cfg)
    assert "gradient_checkpointing" not in lf and lf["disable_gradient_checkpointing"] is True


def test_unsupported_cells_say_why():
    env = {"packages": {"flash_attn": False, "liger_kernel": False, "bitsandbytes": True, "llamafactory": False}, "bf16": False}
    base = dict(model="tiny", method="lora", cutoff=128, gc=True, liger=False, attn="sdpa", precision="fp32")
    assert kit.unsupported(base, env, "cpu") is None
    assert kit.unsupported(dict(base, method="qlora"), env, "cpu") == "QLoRA needs bitsandbytes and a CUDA GPU"
    assert kit.unsupported(dict(base, liger=True), env, "cuda") == "Liger needs liger-kernel and a CUDA GPU"
    assert kit.unsupported(dict(base, attn="fa2"), env, "cuda") == "FA2 needs flash-attn and a CUDA GPU"
    assert kit.unsupported(dict(base, precision="bf16"), env, "cuda") == "no bf16 on this device"


def test_a_cell_past_its_timeout_is_killed(tmp_path):
    t0 = time.monotonic()
    rc, wall = kit.run_subprocess([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "log", 1.0,
                                  dict(os.environ), tmp_path)
    assert rc is None and wall < 10 and time.monotonic() - t0 < 10


def test_install_never_touches_torch():
    import install

    reqs = install.tunekit_requirements()
    assert "torch" in {r.name for r in reqs}  # tunekit does depend on it ...
    assert all(not install.NEVER.match(r.split("=")[0].split(">")[0].split("<")[0]) for r in install.missing(reqs))
    assert not any(install.NEVER.match(line.split("==")[0]) for line in install.closure())  # ... the kit never carries it


@pytest.mark.slow
def test_kit_dry_run_on_cpu(tmp_path):
    out = tmp_path / "kit"
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1", TUNEKIT_GPU_KIT_CACHE=str(tmp_path / "models"))
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(KIT_DIR / "run.sh"), str(out), "--device", "cpu", "--tiny", "--max-cells", "3",
                           "--inject-failure"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[install] tunekit:" in proc.stdout  # the install step ran (and found this checkout installed)
    res = json.loads((out / "results.json").read_text())
    assert set(res) == {"environment", "budget", "models", "cells"}
    assert res["environment"]["device"] == "cpu" and res["environment"]["torch"].startswith("2.")
    cells = {c["name"]: c for c in res["cells"]}
    assert len(cells) == 27
    base = cells["tiny-lora-s128-gc-sdpa-fp32-baseline"]
    assert base["status"] == "ok", base
    # the planner column is tunekit's own plan of that config (same call, same numbers)
    from tunekit.config import load_config
    from tunekit.plan import make_plan

    values = dict(base["config"], use_cpu=False)
    plan = make_plan(load_config(None, values), gpu_memory_gib=res["environment"]["gpu_memory_gib"], seq_len=128, num_samples=4)
    assert base["plan"]["total_gib"] == plan["memory"]["total_gib"] > 0
    assert base["plan"]["allocated_gib"] == pytest.approx(plan["memory"]["total_gib"] - plan["memory"]["overhead"]
                                                          - plan["memory"]["fragmentation"], abs=1e-3)
    r = base["result"]
    assert r["measured_kind"] == "cpu_peak_rss" and r["peak_rss_mb"] > 100 and r["steps"] == 2
    assert r["tokens_per_s"] > 0 and r["num_input_tokens_seen"] == 2 * 2 * 128  # fixed-length rows: 2 steps x 2 x 128
    failed = cells["tiny-lora-s128-gc-sdpa-fp32-injected-failure"]
    assert failed["status"] == "failed"
    assert failed["result"]["error"].startswith("ConfigError: Dataset 'no_such_dataset' is not in ")
    after = cells["tiny-lora-s128-nogc-sdpa-fp32"]  # the grid went on after the failure
    assert after["status"] == "ok" and after["result"]["steps"] == 2
    assert cells["tiny-qlora-s128-gc-sdpa-fp32"]["status"] == "skipped"
    assert cells["tiny-full-s128-gc-sdpa-fp32"]["reason"] == "--max-cells 3"
    assert res["budget"]["run"] == 3 and res["budget"]["ok"] == 2 and res["budget"]["failed"] == 1
    md = (out / "results.md").read_text()
    assert HEADER in md
    row = next(line for line in md.splitlines() if line.startswith("| tiny-lora-s128-gc-sdpa-fp32-baseline |"))
    fields = [f.strip() for f in row.strip("|").split("|")]
    assert fields[1] == "ok" and float(fields[2]) == pytest.approx(plan["memory"]["total_gib"], abs=0.005)
    assert float(fields[4]) > 0 and float(fields[7]) > 0 and float(fields[8]) > 0  # measured and tokens/s filled
    print(f"kit dry run: {wall:.0f} s")


def test_profile_groups_of_one_real_step():
    """benchmarks/_profile.py (real_shape.py --profile, mfu.py --profile): every op's self time in exactly one group."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import _profile

    torch.manual_seed(0)
    vocab = 1000  # no other tensor dimension of this model or batch is 1000
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2, attn_implementation="sdpa"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, vocab, (2, 16))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    res = _profile.summarize(prof, vocab, 1.0)
    assert set(res["cpu_s"]) == set(_profile.GROUPS) and all(res["cpu_s"][g] > 0 for g in _profile.GROUPS)
    events = [e for e in prof.events() if "CUDA" not in str(getattr(e, "device_type", ""))]
    assert sum(res["cpu_s"].values()) == pytest.approx(sum(e.self_cpu_time_total for e in events) / 1e6, rel=1e-9)
    groups = {}
    for e in events:
        groups.setdefault(e.name, set()).add(_profile.classify(e, vocab))
    assert groups["aten::_log_softmax"] == {"lm_head+loss"}
    assert groups["aten::_scaled_dot_product_flash_attention_for_cpu"] == {"attention"}
    assert {"lm_head+loss", "mlp/linear"} <= groups["aten::mm"]  # the head's matmuls by their vocab dimension
    assert groups["Optimizer.step#AdamW.step"] == {"optimizer"}  # torch's own range around the step, and all under it
