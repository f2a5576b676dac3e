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

# The device code has no per-architecture branch (`__CUDA_ARCH__ >= 800`, ...): every
# line is compiled for every architecture, so CI's one-architecture build (.ci/run)
# compiles all of it. A feature of newer GPUs goes through a runtime check instead.
arch_hits=$(grep -rnE '__CUDA_ARCH__ *(>|<|=|!)|__CUDA_ARCH_(SPECIFIC|FAMILY_SPECIFIC)__' "$root"/kernels "$root"/engine \
  --include='*.cu' --include='*.cuh' --include='*.h' --include='*.cpp' | sed "s#^$root/##")
if [[ -n $arch_hits ]]; then
  echo "device code: a per-architecture branch (compile for all or check at run time):"
  echo "$arch_hits" | sed 's/^/  /'
  failed=1
fi

if ((failed)); then exit 1; fi
echo "engine/ops: no device branch, no device kernels, no element loops (${#ops[@]} files)"
