#!/usr/bin/env python3
"""Wall time of ``tunekit --help`` and ``tunekit train --help`` (min of N runs; target <= 0.3 s).

The minimum is the figure to quote: it is the run least disturbed by other work on the machine.
The help paths must not import torch/transformers; this script also reports which heavy modules an
``--help`` process imported (via ``python -X importtime``), so a regression says where it came from.

    benchmarks/.venv-base/bin/python benchmarks/help_time.py [-n 10] [--tunekit PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BASE_VENV, fmt, loadavg  # noqa: E402

TARGET_S = 0.3
HEAVY = ("torch", "transformers", "peft", "trl", "datasets", "accelerate", "deepspeed", "pydantic", "yaml", "rich")


def time_command(cmd: list[str], n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return times


def heavy_imports(python: Path, args: list[str]) -> tuple[list[str], float]:
    """Top-level heavy packages imported by ``tunekit <args>`` and the total import time it reports (s)."""
    code = "import sys; from tunekit.cli.main import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([str(python), "-X", "importtime", "-c", code, *args], capture_output=True, text=True)
    seen, total_us = set(), 0
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = [p.strip() for p in line[len("import time:") :].split("|")]
        if not parts[0].isdigit():
            continue
        name = parts[2].strip()
        if not name.startswith(" ") and "." not in name:
            total_us += int(parts[1])
        if name.split(".")[0] in HEAVY:
            seen.add(name.split(".")[0])
    return sorted(seen), total_us / 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=10, help="runs per command (default 10)")
    ap.add_argument("--tunekit", default=str(BASE_VENV / "bin" / "tunekit"))
    args = ap.parse_args(argv)
    exe = Path(args.tunekit)
    if not exe.exists():
        print(f"[help_time] {exe} not found (see benchmarks/_common.py)", file=sys.stderr)
        return 2
    python = exe.parent / "python"
    print(f"[help_time] {exe} | min of {args.n} runs | load {loadavg()} | cpus {os.cpu_count()}")
    base = time_command([str(python), "-c", "pass"], args.n)
    print(
        f"  {'python -c pass (interpreter floor)':<36} min {fmt(min(base), 3)} s  median "
        f"{fmt(statistics.median(base), 3)} s"
    )
    ok = True
    results = {}
    for cmd in (["--help"], ["train", "--help"]):
        times = time_command([str(exe), *cmd], args.n)
        heavy, imp = heavy_imports(python, cmd)
        label = "tunekit " + " ".join(cmd)
        best = min(times)
        ok &= best <= TARGET_S
        results[label] = best
        print(
            f"  {label:<36} min {fmt(best, 3)} s  median {fmt(statistics.median(times), 3)} s  "
            f"(target <= {TARGET_S} s: {'ok' if best <= TARGET_S else 'MISSED'}) | imports {fmt(imp, 3)} s, "
            f"heavy packages: {', '.join(heavy) or 'none'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
