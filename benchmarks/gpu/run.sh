#!/usr/bin/env bash
# The GPU check kit in one command (under ten minutes, install included):
#
#   bash benchmarks/gpu/run.sh OUT_DIR                      # on a GPU machine: Qwen2.5-1.5B and 7B grid
#   bash benchmarks/gpu/run.sh OUT_DIR --device cpu --tiny  # dry run on a CPU (what tests/project/test_gpu_kit.py does)
#   PYTHON=/opt/conda/bin/python bash benchmarks/gpu/run.sh OUT_DIR --budget-s 400
#
# 1. the interpreter ($PYTHON, default python3) must already have torch: the kit never installs, upgrades or
#    replaces torch (the image's CUDA build is what tunekit must use);
# 2. benchmarks/gpu/install.py installs only what is missing, offline from benchmarks/gpu/wheels/ when that
#    folder has wheels (fill it beforehand with fetch_wheels.sh), then tunekit with `pip install --no-deps -e .`;
#    if tunekit cannot be installed the kit runs from src/ (PYTHONPATH);
# 3. benchmarks/gpu/kit.py runs the grid within what is left of TOTAL_S (default 570 s) and writes
#    OUT_DIR/results.json and OUT_DIR/results.md. Any further arguments go to kit.py (see its --help).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
if [ $# -lt 1 ] || [ "${1:0:1}" = "-" ]; then
  echo "usage: bash benchmarks/gpu/run.sh OUT_DIR [--device cpu --tiny] [kit.py options]" >&2
  exit 2
fi
OUT="$1"; shift
PY="${PYTHON:-python3}"
TOTAL_S="${TOTAL_S:-570}"
mkdir -p "$OUT"
START=$(date +%s)
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "[run.sh] $PY cannot import torch: use the image's Python that has its torch build (PYTHON=...);" \
       "the kit does not install torch." >&2
  exit 2
fi
"$PY" -c "import torch; print('[run.sh] torch', torch.__version__, '| cuda', torch.version.cuda, '| gpus', torch.cuda.device_count())"
cd "$REPO"
if ! "$PY" "$HERE/install.py" check; then
  "$PY" "$HERE/install.py" install 2>&1 | tee "$OUT/install.log"
fi
if ! "$PY" -c "import tunekit" 2>/dev/null; then
  echo "[run.sh] tunekit is not installed: running it from $REPO/src"
  export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
fi
USED=$(( $(date +%s) - START ))
BUDGET=$(( TOTAL_S - USED - 15 ))
echo "[run.sh] install step took ${USED} s; kit budget ${BUDGET} s"
"$PY" "$HERE/kit.py" "$OUT" --budget-s "$BUDGET" "$@"
rc=$?
echo "[run.sh] done in $(( $(date +%s) - START )) s (exit $rc): $OUT/results.md"
exit $rc
