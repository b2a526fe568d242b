#!/usr/bin/env python3
"""``make bench``: every benchmark of tunekit, one after the other, with their figures printed.

1. help_time.py   ``tunekit --help`` / ``tunekit train --help`` wall time (target <= 0.3 s)
2. mfu.py         training tokens/s and MFU of a ~14M-parameter model, fp32, no checkpointing (>= 70 %),
                  eager and with torch_compile
3. lf_compare.py  the LoRA SFT job through tunekit and LLaMA-Factory 0.9.5, A B A B (wall <= 0.67x LF,
                  start-up to first step <= 2 s, peak RSS no higher)

The benchmarks run tunekit from ``benchmarks/.venv-base`` (tunekit's base install only, created here
when missing: see benchmarks/_common.py), not from the test venv, whose optional extras
(bitsandbytes, deepspeed) make ``import transformers``/``import peft`` slower than a user's install.
LLaMA-Factory runs from ``$LF_VENV`` (default ~/.cache/lf-venv); ``--setup-lf`` creates it with the
baseline's setup.sh (a few minutes), otherwise lf_compare is skipped when it is missing.

    python benchmarks/run_all.py [--only help,mfu,lf] [--pairs 2] [--setup-lf]

Exit status: 0 when every benchmark ran (targets missed are reported, not failures), 1 otherwise.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LF_BASELINE, LF_VENV, ensure_base_venv, loadavg  # noqa: E402

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="help,mfu,lf", help="comma list of: help, mfu, lf")
    ap.add_argument("--pairs", type=int, default=2, help="A B pairs for lf_compare (default 2)")
    ap.add_argument("--setup-lf", action="store_true", help="create the LLaMA-Factory venv if it is missing")
    args = ap.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]

    python = str(ensure_base_venv())
    print(f"[bench] base venv python: {python} | load {loadavg()}", flush=True)
    failed = []
    for name in chosen:
        if name == "lf" and not (LF_VENV / "bin" / "llamafactory-cli").exists():
            if not args.setup_lf:
                print(
                    f"[bench] skipping lf_compare: {LF_VENV} has no llamafactory-cli "
                    f"(run with --setup-lf, or bash {LF_BASELINE / 'setup.sh'})",
                    flush=True,
                )
                continue
            subprocess.run(["bash", str(LF_BASELINE / "setup.sh")], check=True)
        scripts = {
            "help": [["help_time.py"]],
            "mfu": [["mfu.py"], ["mfu.py", "--compile"]],
            "lf": [["lf_compare.py", "--pairs", str(args.pairs)]],
        }[name]
        for script in scripts:
            print(f"\n==== {' '.join(script)} ====", flush=True)
            t0 = time.time()
            rc = subprocess.call([python, str(HERE / script[0]), *script[1:]])
            print(f"[bench] {script[0]} exit {rc} in {time.time() - t0:.0f} s", flush=True)
            # help_time/mfu exit 1 when a target is missed; only a crash (other codes) counts as a failure
            if rc not in (0, 1):
                failed.append(script[0])
    if failed:
        print(f"[bench] failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
