#!/usr/bin/env bash
# The Python environment the recorder's tests run in (recorder/, tests/e2e/record_*.sh):
# PyTorch and the test tools from PyPI in a virtual environment, made once and reused.
# The C++ product needs none of it (it depends on Debian packages only); only its tests of
# the PyTorch recorder do.
#
#   scripts/pyenv.sh            makes (or checks) the environment, prints its python
# Environment: AMPCHECK_PYENV (default build/pyenv).
#
# Idempotent: an environment whose stamp matches the requirements below is left as it is
# (a second call takes a second). PyPI has no CPU-only torch for Linux x86-64: its wheel
# pulls the nvidia-* CUDA packages (about 3 GB to download, 5.5 GB installed; without them
# `import torch` fails on libcufile.so.0), although nothing here uses a GPU. pip keeps the
# downloads in its cache (~/.cache/pip), so a machine makes the environment from the
# network once.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${AMPCHECK_PYENV:-$root/build/pyenv}
mkdir -p "$(dirname "$venv")"

# torch 2.15 is what the recorder is tested against (it needs >= 2.1); paddlepaddle 3.3 (the
# CPU build, 0.2 GB) is what its Paddle recorder is tested against; onnx exports the planted
# families for the engine's side of the comparison (tests/e2e/record_families.sh);
# pytest-xdist runs the recorder's suite on every core. numpy 2.3: Paddle 3.3's GradScaler
# logs a back-off with float() of its one-element scale tensor, which numpy 2.4 refuses
# (TypeError: only 0-dimensional arrays can be converted to Python scalars).
# transformers, accelerate and lightning are the trainers users record their runs in
# (recorder/tests/scripts: a Hugging Face loop and Trainer, accelerate launch, a
# LightningModule); the recorder itself needs none of them.
requirements=("torch==2.15.*" "paddlepaddle==3.3.*" "numpy==2.3.*" "onnx==1.23.*" "pytest==9.*" "pytest-xdist==3.*"
              "jsonschema==4.*" "transformers==5.*" "accelerate==1.*" "lightning==2.*")
stamp="$venv/.ampcheck-requirements"
want=$(printf '%s\n' "${requirements[@]}")

ready() { [[ -x $venv/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; }
if ready; then
  echo "$venv/bin/python"
  exit 0
fi
# One maker at a time (two test runs sharing AMPCHECK_PYENV): the second waits, then finds it made.
exec 9> "$venv.lock"
flock 9
if ready; then
  echo "$venv/bin/python"
  exit 0
fi
command -v python3 >/dev/null || { echo "pyenv: python3 is missing: apt-get install python3 python3-venv" >&2; exit 2; }
if [[ ! -x $venv/bin/python ]]; then
  rm -rf "$venv"
  python3 -m venv "$venv" >&2 || { echo "pyenv: python3 -m venv failed: apt-get install python3-venv" >&2; exit 2; }
fi
rm -f "$stamp"
if ! "$venv/bin/pip" install --quiet --disable-pip-version-check --progress-bar off "${requirements[@]}" >&2; then
  echo "pyenv: could not install ${requirements[*]} from PyPI into $venv (no network?); the recorder's" \
       "tests need them (AMPCHECK_SKIP_PYTHON_TESTS=1 skips those tests on purpose)" >&2
  exit 2
fi
"$venv/bin/python" -c "import torch, paddle, numpy, onnx, pytest, jsonschema, transformers, accelerate, lightning" >&2 \
  || { echo "pyenv: $venv installed, but import torch or paddle fails (above)" >&2; exit 2; }
printf '%s\n' "$want" > "$stamp"
echo "$venv/bin/python"
