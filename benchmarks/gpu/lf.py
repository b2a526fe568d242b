"""LLaMA-Factory's side of the GPU check kit: its interpreter, its spelling of a cell's config, and the launcher that
runs ``llamafactory-cli train`` and records the same peaks as cell.py does for tunekit.

The interpreter: ``$LF_PYTHON``, else this one when it imports ``llamafactory``, else the project's LF venv
(``~/.cache/lf-venv``, ../shared/bench/llamafactory-baseline/setup.sh). On a GPU run it must have a CUDA torch
(a venv made with ``--system-site-packages`` over the image's torch, with ``llamafactory==0.9.5`` installed into it).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

# LLaMA-Factory's `llamafactory-cli train JOB` in this process (one GPU: it trains in-process), then the peaks that
# cell.py records for tunekit: torch.cuda's max allocated / reserved when CUDA is up, and the process's peak RSS
LF_LAUNCHER = """
import json, resource, sys
job, peaks = sys.argv[1], sys.argv[2]
from llamafactory.cli import main
sys.argv = ['llamafactory-cli', 'train', job]
try:
    main()
finally:
    out = {'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 'measured_kind': 'cpu_peak_rss'}
    torch = sys.modules.get('torch')
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        out.update(max_memory_allocated=torch.cuda.max_memory_allocated(),
                   max_memory_reserved=torch.cuda.max_memory_reserved(), measured_kind='cuda_max_memory_allocated')
    open(peaks, 'w').write(json.dumps(out))
"""


# the venv ../shared/bench/llamafactory-baseline/setup.sh makes
LF_VENV_PYTHON = Path.home() / ".cache" / "lf-venv" / "bin" / "python"


def lf_python() -> str | None:
    """$LF_PYTHON, else this interpreter when it imports llamafactory, else the project's LF venv when present."""
    py = os.environ.get("LF_PYTHON")
    if py:
        return py if Path(py).exists() else None
    if importlib.util.find_spec("llamafactory") is not None:
        return sys.executable
    return str(LF_VENV_PYTHON) if LF_VENV_PYTHON.exists() else None


def lf_device_ok(device: str) -> bool:
    """On a GPU run, LLaMA-Factory's interpreter must see the GPU too (a CPU-torch venv would measure the CPU)."""
    py = lf_python()
    if device != "cuda" or py == sys.executable:
        return True
    probe = subprocess.run(
        [py, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    return probe.returncode == 0


def lf_config(cfg: dict) -> dict:
    """The same job in LLaMA-Factory's spelling (it has no gradient_checkpointing switch, only the disable flag)."""
    out = {k: v for k, v in cfg.items() if k not in ("gradient_checkpointing", "disable_tqdm")}
    out["disable_gradient_checkpointing"] = not cfg["gradient_checkpointing"]
    return out
