#!/usr/bin/env bash
# Fill benchmarks/gpu/wheels/ with the wheels a bare GPU image may lack, for an offline install (run.sh).
#
#   bash benchmarks/gpu/fetch_wheels.sh                 # for this machine's Python (x86_64 manylinux wheels)
#   PY_VERSIONS="3.10 3.11 3.12" bash benchmarks/gpu/fetch_wheels.sh
#   SKIP="pyarrow bitsandbytes" bash benchmarks/gpu/fetch_wheels.sh   # leave out what the image already has
#
# What: tunekit's dependencies and theirs, at the versions installed in .venv (benchmarks/gpu/install.py closure:
# the versions constraints.txt pins), plus liger-kernel, setuptools and wheel (offline `pip install -e .` builds
# with them). Never torch, triton or the nvidia-*/cuda-* wheels: the GPU image's torch is the one tunekit uses.
# Each wheel is downloaded with --no-deps (a dependency resolution would pull a torch). The folder is ignored by git.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
DEST="$HERE/wheels"
PY_VERSIONS="${PY_VERSIONS:-$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')}"
SKIP="${SKIP:-}"
mkdir -p "$DEST"
REQS="$(mktemp)"
trap 'rm -f "$REQS"' EXIT
"$PY" "$HERE/install.py" closure > "$REQS"
for extra in liger-kernel wheel; do
  grep -qi "^${extra}==" "$REQS" || echo "$extra" >> "$REQS"
done
for s in $SKIP; do
  grep -vi "^${s}\(==\|$\)" "$REQS" > "$REQS.f" || true; mv "$REQS.f" "$REQS"
done
echo "[fetch] $(wc -l < "$REQS") distributions for Python $PY_VERSIONS -> $DEST"
for pyv in $PY_VERSIONS; do
  PIP_CONSTRAINT= "$PY" -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: --dest "$DEST" \
    --python-version "$pyv" --implementation cp --abi "cp${pyv/./}" --abi abi3 --abi none \
    $(for v in 39 38 35 34 31 28 27 26 24 17 12 5; do printf -- "--platform manylinux_2_%s_x86_64 " "$v"; done) --platform manylinux2014_x86_64 \
    --platform linux_x86_64 --platform any -r "$REQS"
done
echo "[fetch] $(ls "$DEST"/*.whl | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in $DEST"
ls -S "$DEST" | head -8 | while read -r f; do echo "  $(du -h "$DEST/$f" | cut -f1)  $f"; done
