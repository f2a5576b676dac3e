#!/usr/bin/env bash
# The seam between what an op means and where it runs (docs/cuda-backend.md), checked on
# the sources: engine/ops/ says what ops compute and reaches kernels only through the
# dispatch point (engine/dispatch.h), so it must not
#   - look at a device (no Device::cuda / Device::cpu / device() comparisons),
#   - include a device's kernels (kernels/cpu/, kernels/cuda/) or the thread pool,
#   - hold an element loop (parallel_for, the old per-element load/store helpers).
# Exits 1 listing every offending line; ROOT defaults to the checkout this script is in.
set -uo pipefail
root=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
ops=("$root"/engine/ops/*.cpp "$root"/engine/ops/*.h)
failed=0

check() {  # description, extended regex
  local hits
  hits=$(grep -nE "$2" "${ops[@]}" | sed "s#^$root/##")
  if [[ -n $hits ]]; then
    echo "engine/ops: $1:"
    echo "$hits" | sed 's/^/  /'
    failed=1
  fi
}

check "a device branch (ops dispatch by their inputs' device instead)" \
  'Device::(cuda|cpu)|device\(\) *[!=]=|== *Device'
check "a device's kernels included (reach them through engine/dispatch.h)" \
  '#include "kernels/(cpu|cuda|no_gpu)/|#include "engine/parallel.h"'
check "an element loop (arithmetic belongs in kernels/cpu and kernels/cuda)" \
  'parallel_for|cpu::(load|store|load_gather|map_unary|map_binary|map_ternary|values|from_values|gemm)\b|\.data<|\.raw\(\)'

if ((failed)); then exit 1; fi
echo "engine/ops: no device branch, no device kernels, no element loops (${#ops[@]} files)"
