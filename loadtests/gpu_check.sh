#!/usr/bin/env bash
# The GPU check of issue 34 on a bare GPU machine: this repository plus the carried .gpu/
# folder (make gpu-prepare), with the machine's own python (numpy, torch, transformers,
# tokenizers, onnxruntime). Writes $OUT/gpu_check.json; arguments go to gpu_check.py
# (--dry-run: no GPU needed, CPU parts only). Bounded: the script starts no new work
# after --budget-s (300 s by default) and this wrapper kills it after 420 s.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then  # the first python that has torch
  for candidate in python3 python; do
    if "$candidate" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)" 2>/dev/null; then
      PYTHON="$candidate"
      break
    fi
  done
fi
PYTHON="${PYTHON:-python3}"
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec timeout 420 "$PYTHON" loadtests/gpu_check.py "$@"
