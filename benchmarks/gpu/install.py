#!/usr/bin/env python3
"""Install tunekit into a (possibly offline) GPU image without touching its torch build.

    python benchmarks/gpu/install.py check      # exit 0 when tunekit (this checkout) and its dependencies import
    python benchmarks/gpu/install.py install    # install what is missing, from benchmarks/gpu/wheels when present
    python benchmarks/gpu/install.py closure    # name==version of every wheel the kit carries (for fetch_wheels.sh)

Rules:
- torch, triton and the nvidia-* / cuda-* runtime wheels are never installed, upgraded or downgraded: the image's
  build is the one tunekit must use.
- A distribution is installed from the wheels folder (``pip install --no-index --find-links wheels --no-deps``) only
  when it is absent or its installed version does not satisfy tunekit's requirement; a present, satisfying version
  is left alone, whatever constraints.txt pins.
- tunekit itself: ``pip install --no-deps -e .`` (offline: build isolation gets setuptools/wheel from the folder).
  If that fails, the kit still runs from source (run.sh puts ``src/`` on PYTHONPATH) and says so.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
WHEELS = HERE / "wheels"
NEVER = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-.*|cuda-.*|pytorch-triton.*)$", re.I)
# Beyond tunekit's base dependencies: what the grid's cells use on a GPU (QLoRA, Liger) and the build backend.
KIT_EXTRAS = ("bitsandbytes", "liger-kernel", "setuptools", "wheel")


def _requirement(text: str):
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip vendors it
        from pip._vendor.packaging.requirements import Requirement
    return Requirement(text)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def tunekit_requirements() -> list:
    text = (REPO / "pyproject.toml").read_text()
    try:
        import tomllib  # Python >= 3.11

        deps = tomllib.loads(text)["project"]["dependencies"]
    except ImportError:  # 3.10: the dependencies list is one quoted string per line
        block = text.split("dependencies = [", 1)[1].split("]", 1)[0]
        deps = re.findall(r'"([^"]+)"', block)
    return [_requirement(d) for d in deps]


def missing(reqs) -> list[str]:
    """Requirements (as text) that are absent or unsatisfied, torch & co. excluded."""
    out = []
    for req in reqs:
        if NEVER.match(req.name):
            continue
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            out.append(str(req))
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            out.append(str(req))
    return out


def tunekit_importable() -> str | None:
    """Where ``import tunekit`` resolves, when it is this checkout's source."""
    try:
        import tunekit
    except ImportError:
        return None
    where = Path(tunekit.__file__).resolve()
    return str(where) if (REPO / "src") in where.parents else None


def closure() -> list[str]:
    """name==version of tunekit's dependencies + KIT_EXTRAS, recursively, as installed here (torch & co. excluded)."""
    todo = [r.name for r in tunekit_requirements()] + list(KIT_EXTRAS)
    seen: dict[str, str] = {}
    while todo:
        name = _norm(todo.pop())
        if name in seen or NEVER.match(name):
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            print(f"[install] {name}: not installed here, not carried", file=sys.stderr)
            continue
        seen[name] = dist.version
        for text in dist.requires or []:
            req = _requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue  # an extra's dependency, or another platform's
            todo.append(req.name)
    return [f"{n}=={v}" for n, v in sorted(seen.items())]


def pip(*args: str) -> int:
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *args]
    print("[install] " + " ".join(cmd), flush=True)
    return subprocess.call(cmd)


def install() -> int:
    reqs = tunekit_requirements()
    need = missing(reqs)
    offline = WHEELS.is_dir() and any(WHEELS.glob("*.whl"))
    src = ["--no-index", "--find-links", str(WHEELS)] if offline else []
    if need:
        print(f"[install] missing or unsatisfied: {', '.join(need)}", flush=True)
        if offline:
            # the whole closure of what is missing, from the folder, one level of dependencies at a time
            wanted = _expand(need)
            if pip("--no-deps", *src, *wanted) != 0:
                print("[install] some wheels failed to install (see above); continuing", flush=True)
        elif pip(*need, "torch==" + metadata.version("torch")) != 0:  # online: pin the image's torch in place
            print("[install] pip failed; continuing", flush=True)
    else:
        print("[install] tunekit's dependencies are all present", flush=True)
    for extra in ("bitsandbytes", "liger-kernel"):
        try:
            metadata.version(extra)
        except metadata.PackageNotFoundError:
            if offline and list(WHEELS.glob(f"{extra.replace('-', '_')}-*.whl")):
                pip("--no-deps", *src, extra)
    if tunekit_importable():
        print(f"[install] tunekit already importable from this checkout ({tunekit_importable()})", flush=True)
    elif pip("--no-deps", *src, "-e", str(REPO)) != 0:
        print("[install] pip install -e . failed: the kit runs from src/ on PYTHONPATH instead", flush=True)
    rest = missing(reqs)
    print(f"[install] still missing: {', '.join(rest)}" if rest else "[install] ok", flush=True)
    print(f"[install] torch {metadata.version('torch')} (left as the image has it)", flush=True)
    return 0 if not rest else 1


def _expand(need: list[str]) -> list[str]:
    """The wheels in the folder for ``need`` and, recursively, for their absent dependencies
    (metadata of the wheel)."""
    import zipfile

    wheels = {}
    for whl in WHEELS.glob("*.whl"):
        wheels.setdefault(_norm(whl.name.split("-")[0]), []).append(whl)
    out, todo, seen = [], [_requirement(t).name for t in need], set()
    while todo:
        name = _norm(todo.pop())
        if name in seen or NEVER.match(name):
            continue
        seen.add(name)
        if name not in wheels:
            print(f"[install] {name}: no wheel in {WHEELS}", flush=True)
            continue
        whl = sorted(wheels[name])[-1]
        out.append(str(whl))
        with zipfile.ZipFile(whl) as z:
            meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
            text = z.read(meta).decode() if meta else ""
        for line in text.splitlines():
            if line.startswith("Requires-Dist:"):
                req = _requirement(line.split(":", 1)[1].strip())
                if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                    continue
                try:
                    have = metadata.version(req.name)
                    if not req.specifier or req.specifier.contains(have, prereleases=True):
                        continue
                except metadata.PackageNotFoundError:
                    pass
                todo.append(req.name)
    return out


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "check"
    if cmd == "closure":
        print("\n".join(closure()))
        return 0
    if cmd == "check":
        need = missing(tunekit_requirements())
        where = tunekit_importable()
        print(
            f"[install] tunekit: {where or 'not importable from this checkout'}; missing: {', '.join(need) or 'none'}"
        )
        return 0 if where and not need else 1
    if cmd == "install":
        return install()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
