#!/usr/bin/env bash
# ampcheck beside PyTorch and PaddlePaddle on the CPU, end to end on a fresh machine:
# the project's own bootstrap and Release build, a virtual environment in
# bench/peers/.venv with PyTorch, PaddlePaddle and numpy from PyPI (peers and oracles
# only: the product never imports them), then all three parts: GradScaler histories,
# O1 op decisions, interleaved step times of the samples and of the ONNX benchmark's real
# models (exported by bench/onnx/export.py into a temporary folder, or ONNX_MODELS_DIR).
# Writes bench/results/DATE-peers-cpu.{md,json}.
# Exit 1 if a GradScaler history differs.
#
#   bench/peers/run.sh [peers.py all options, e.g. --rounds 9 --cases 300]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv="$root/bench/peers/.venv"
bash "$root/scripts/bootstrap.sh"
bash "$root/scripts/build.sh"
if [[ ! -x "$venv/bin/python" ]]; then
  command -v python3 > /dev/null || { echo "run.sh: python3 is missing: apt-get install python3 python3-venv" >&2; exit 2; }
  python3 -m venv "$venv"
fi
# numpy < 2.4: PaddlePaddle 3.3.1's GradScaler calls float() on a one-element array when
# it lowers the scale, which numpy 2.4 refuses (TypeError).
# torchvision and onnx: bench/onnx/export.py, for the real models.
"$venv/bin/pip" install --quiet --disable-pip-version-check "torch==2.15.*" "paddlepaddle==3.3.*" "numpy<2.4" \
  "torchvision==0.29.*" "onnx==1.23.*"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
# The real models: ONNX_MODELS_DIR when it already holds export.py's files (kept), else a
# temporary folder exported here and removed at the end.
if [[ -n ${ONNX_MODELS_DIR:-} ]]; then
  models=$ONNX_MODELS_DIR
else
  models=$(mktemp -d /tmp/peers-onnx.XXXXXX)
  trap 'rm -rf "$models"' EXIT
fi
[[ -f $models/gpt2_block.onnx ]] || "$venv/bin/python" "$root/bench/onnx/export.py" --out "$models" --bn preserve --no-verify > /dev/null
"$venv/bin/python" "$root/bench/peers/peers.py" all --ampcheck-build "${AMPCHECK_BUILD_DIR:-$root/build}" \
  --out-dir "$root/bench/results" --onnx-dir "$models" "$@"
