#!/usr/bin/env bash
# ampcheck's ONNX import on real architectures exported by PyTorch, end to end on a fresh
# machine: the project's own bootstrap and Release build, a virtual environment in
# bench/onnx/.venv with PyTorch, torchvision, onnx and numpy from PyPI (exporters and
# oracles only: the product never imports them), then export.py (twelve models with random
# weights: resnet18, mobilenet_v3_small, a BERT-style and a GPT-2-style block, an MLP whose
# square overflows fp16, efficientnet_b0, mobilenet_v2, shufflenet_v2, resnext50_32x4d,
# LSTM and GRU classifiers, a BERT block with an attention mask; their data and PyTorch's
# outputs) and check.py (ampcheck infer
# against PyTorch, ampcheck run at O0/O1/O2, bisect-nan on the MLP).
# Writes bench/results/DATE-onnx-models-cpu-SLUG.md; exit 1 if a forward check fails.
#
#   bench/onnx/run.sh [check.py options, e.g. --only resnet18,bert_block --steps 10]
# Environment: AMPCHECK_BUILD_DIR (default build), ONNX_MODELS_DIR (where the models go;
# default a new folder under /tmp).
#
# PyPI has no CPU-only torch for Linux x86-64: its wheel needs the nvidia-* CUDA packages
# (about 5.5 GB in the venv; without them `import torch` fails on libcufile.so.0), so the
# venv holds them although nothing here uses a GPU.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv="$root/bench/onnx/.venv"
bash "$root/scripts/bootstrap.sh"
bash "$root/scripts/build.sh"
if [[ ! -x "$venv/bin/python" ]]; then
  command -v python3 > /dev/null || { echo "run.sh: python3 is missing: apt-get install python3 python3-venv" >&2; exit 2; }
  python3 -m venv "$venv"
fi
# torchvision 0.29 is torch 2.15's companion (built on torch's stable ABI, it asks for
# torch >= 2.14); onnx 1.23 has the reference evaluator export.py checks against.
"$venv/bin/pip" install --quiet --disable-pip-version-check \
  "torch==2.15.*" "torchvision==0.29.*" "onnx==1.23.*" "numpy==2.*"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

models=${ONNX_MODELS_DIR:-$(mktemp -d /tmp/onnx-models.XXXXXX)}
# BatchNormalization kept (not folded into the convolutions), so that training runs it in
# training mode with its running statistics, as PyTorch does.
"$venv/bin/python" "$root/bench/onnx/export.py" --out "$models" --bn preserve

# The machine in the file name as the other results name it: "AMD EPYC 7B13" -> cpu-amd-epyc-7b13.
cpu=$(grep -m1 -iE '^(model name|hardware|cpu model)' /proc/cpuinfo 2> /dev/null | cut -d: -f2- || true)
slug=$(printf '%s' "${cpu:-$(uname -m)}" \
  | sed -E 's/\((R|TM)\)//gI; s/ CPU @.*//I; s/@.*//; s/[0-9]+-Core Processor//I; s/ Processor//I' \
  | tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-+//; s/-+$//')
out="$root/bench/results/$(date -u +%F)-onnx-models-cpu-${slug:-unknown}.md"
exec "$venv/bin/python" "$root/bench/onnx/check.py" --models "$models" \
  --ampcheck "${AMPCHECK_BUILD_DIR:-$root/build}/cli/ampcheck" --out "$out" "$@"
