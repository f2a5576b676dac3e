# Sourced by the e2e tests of the PyTorch recorder (tests/e2e/record_*.sh), after
# expect.sh: $py, the Python with PyTorch the recorder runs under (AMPCHECK_PYTHON, set by
# scripts/test.sh from scripts/pyenv.sh), and the planted families' script and export
# (tests/e2e/record/family.py).
if [[ -z ${AMPCHECK_PYTHON:-} ]]; then
  echo "FAIL: AMPCHECK_PYTHON is not set: these tests need the Python environment with PyTorch that" \
       "scripts/pyenv.sh makes (scripts/test.sh sets it; by hand: AMPCHECK_PYTHON=\$(bash scripts/pyenv.sh) ctest -L python)"
  exit 1
fi
py=$AMPCHECK_PYTHON
family_py=$(cd "$(dirname "${BASH_SOURCE[0]}")/../record" && pwd)/family.py
# One thread each: ctest runs two of these scripts side by side on two cores, and the
# recorder's reports are byte-reproducible at a fixed thread count.
export OMP_NUM_THREADS=1

# The op types the recorder and the engine's ONNX import name differently for the same
# PyTorch op: the exporter writes torch.bmm as MatMul (ampcheck's matmul) and
# torch.square(x) as Mul(x, x) (ampcheck's mul). What `ampcheck run` names on the export,
# for what the recorder names on the script.
as_exported() {
  case $1 in
    bmm) echo matmul ;;
    square) echo mul ;;
    *) echo "$1" ;;
  esac
}

# export_family NAME DIR: DIR/NAME.onnx, .npz and .args (the engine's options).
export_family() {
  "$py" "$family_py" export "$1" "$2" || fail "$1: the export failed"
}
