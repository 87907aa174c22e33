#!/usr/bin/env bash
# GPU host check (< 5 minutes): the HBM tier and the KV block pool on real CUDA,
# the gpu-marked tests, and host-to-device bandwidth of GetBlocks into pinned
# memory vs torch's own pinned copy. Results: bench/results/gpu_check.json.
#
# Needs a venv with a CUDA build of torch and tiermem installed, e.g.
#   python -m venv .venv && .venv/bin/pip install torch && .venv/bin/pip install -e '.[gpu,test]'
# (or set PYTHON=/path/to/python). Nothing here runs on a CPU-only host except
# with DRY_RUN=1, which exercises the script without a device.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
extra=()
if [ "${DRY_RUN:-0}" = 1 ]; then
  extra=(--allow-cpu --block-mib 4 --blocks 4)
else
  "$PYTHON" - <<'PY'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("CUDA is not available to this torch build: nothing to check (DRY_RUN=1 to test the script)")
print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__)
PY
  timeout 180 "$PYTHON" -m pytest -q -m gpu tests/kv
fi
timeout 180 "$PYTHON" -m bench.gpu_h2d "${extra[@]}"
