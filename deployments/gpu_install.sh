#!/usr/bin/env bash
# onnxruntime-gpu alone on a GPU node: `make gpu-install` (a venv), cluster.yaml's GPU
# worker setup and a GPU image build all run this. onnxruntime and onnxruntime-gpu are
# two distributions of one Python package (onnxruntime); installed together, whichever
# came last owns the files, so the CPU wheel (a base dependency) can silently replace the
# GPU one. Both are removed, the GPU one installed alone, and the result verified:
# exactly one distribution provides onnxruntime, with CUDAExecutionProvider
# (`python -m models gpu-verify`, exit 1 and the reason otherwise).
set -euo pipefail
PYTHON="${PYTHON:-python3}"
ORT_GPU="${ORT_GPU:-onnxruntime-gpu>=1.18}"
"$PYTHON" -m pip uninstall -q -y onnxruntime onnxruntime-gpu
"$PYTHON" -m pip install -q "$ORT_GPU"
"$PYTHON" -m models gpu-verify
