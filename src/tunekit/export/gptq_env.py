"""The isolated Python environment GPTQ export runs llm-compressor in, created on demand, once per machine.

llm-compressor (the maintained GPTQ implementation; it writes the compressed-tensors format transformers and vLLM
load) pins transformers and compressed-tensors to releases tunekit's own pins exclude, so it cannot live in
tunekit's environment. ``gptq_python`` returns the interpreter of a virtual environment that holds exactly
:data:`PINS` plus the torch release tunekit runs with (same version and build, so CPU or CUDA stays what it is):
``$TUNEKIT_ENVS/gptq-<key>`` (default ``~/.cache/tunekit/envs``), where ``key`` hashes the pins and the Python
version. It is created the first time it is needed, under a file lock (two exports at once build it once), and
marked complete only when pip finished; an unfinished one is removed and built again. ``$TUNEKIT_GPTQ_PYTHON``
names an interpreter to use instead (an environment built by hand, e.g. on a machine without network access).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..env import cache_dir
from ..errors import EnvironmentProblem

PINS = ("llmcompressor==0.14.0.1", "transformers==5.17.0")
ENVS_VAR = "TUNEKIT_ENVS"
PYTHON_VAR = "TUNEKIT_GPTQ_PYTHON"
MARKER = "tunekit-env.json"


def torch_pin() -> str:
    """The running torch, exactly (``torch==2.13.0+cpu``): pip then installs that build, never another one."""
    import torch

    return f"torch=={torch.__version__}"


def torch_index_args(pin: str) -> list[str]:
    """A local build tag (``+cpu``, ``+cu128``) lives on PyTorch's own index, not on PyPI."""
    tag = pin.partition("+")[2]
    return ["--extra-index-url", f"https://download.pytorch.org/whl/{tag}"] if tag else []


def env_pins() -> list[str]:
    return [torch_pin(), *PINS]


def env_dir(pins: list[str]) -> Path:
    key = hashlib.sha256("\n".join([*pins, f"python{sys.version_info[0]}.{sys.version_info[1]}"]).encode())
    root = os.environ.get(ENVS_VAR) or str(cache_dir("envs"))
    return Path(root).expanduser() / f"gptq-{key.hexdigest()[:12]}"


def interpreter(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def gptq_python() -> Path:
    """The interpreter GPTQ export runs with: ``$TUNEKIT_GPTQ_PYTHON``, else the isolated environment (created
    here when missing)."""
    chosen = os.environ.get(PYTHON_VAR)
    if chosen:
        if not Path(chosen).is_file():
            raise EnvironmentProblem(
                f"{PYTHON_VAR}={chosen} is not a file: name the python of an environment with "
                f"{' '.join(PINS)}, or unset it and tunekit builds one. Nothing was written."
            )
        return Path(chosen)
    pins = env_pins()
    folder = env_dir(pins)
    if not (folder / MARKER).is_file():
        from filelock import FileLock

        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder) + ".lock"):
            if not (folder / MARKER).is_file():  # another export may have built it while this one waited
                build_env(folder, pins)
    return interpreter(folder)


def build_env(folder: Path, pins: list[str]) -> None:
    """``python -m venv`` + ``pip install`` of the exact pins (torch first); prints what it does, how long and how
    big."""
    if folder.exists():
        print(f"removing the unfinished GPTQ environment in {folder}")
        shutil.rmtree(folder)
    print(
        f"GPTQ export runs llm-compressor in its own environment (its pins conflict with tunekit's): creating "
        f"{folder} with {' '.join(pins)}. This happens once per machine (about 1.5 GB with a CPU torch; torch "
        f"is the same release and build tunekit runs with)."
    )
    log = folder.parent / f"{folder.name}.log"
    start = time.monotonic()
    pip = [str(interpreter(folder)), "-m", "pip", "install", "--no-input"]
    with open(log, "w", encoding="utf-8") as out:
        steps = (
            [sys.executable, "-m", "venv", str(folder)],
            [*pip, pins[0], *torch_index_args(pins[0])],  # torch first, from where that build lives
            [*pip, *pins],  # the rest, with torch held to the installed build
        )
        for step in steps:
            out.write("$ " + " ".join(step) + "\n")
            out.flush()
            code = subprocess.run(
                step, check=False, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            ).returncode
            if code:
                raise _build_failed(folder, pins, step, code, log)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    info = {"pins": pins, "seconds": round(time.monotonic() - start), "bytes": size}
    (folder / MARKER).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    print(f"created the GPTQ environment in {info['seconds']} s: {size / 1e9:.1f} GB in {folder} (log: {log})")


def _build_failed(folder: Path, pins: list[str], step: list[str], code: int, log: Path) -> EnvironmentProblem:
    lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    last = lines[-1][:300] if lines else "no output"
    return EnvironmentProblem(
        f"GPTQ export runs llm-compressor in its own environment, and creating it in {folder} failed: "
        f"`{_shown(step)}` exited with {code} ({last}; the whole log: {log}). It needs PyPI (about 1.5 GB with a "
        f"CPU torch, once per machine): connect this machine to the network and export again, or build the "
        f"environment elsewhere with `python -m venv ENV && ENV/bin/pip install {' '.join(pins)}` and point "
        f"{PYTHON_VAR} at ENV/bin/python. Nothing was written."
    )


def _shown(step: list[str]) -> str:
    """A build step as the user would type it: ``python -m venv DIR`` or ``pip install PINS``."""
    return " ".join(["python", *step[1:]] if step[2] == "venv" else ["pip", *step[3:]])
