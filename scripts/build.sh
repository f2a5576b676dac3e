#!/usr/bin/env bash
# Configures and builds ampcheck. Used by demo.sh and test.sh; callable on its own:
#   scripts/build.sh [--sanitize] [TARGET...]
# Environment: AMPCHECK_BUILD_DIR (default build, or build-sanitize), AMPCHECK_CUDA
# (AUTO|ON|OFF, default AUTO, OFF for --sanitize), AMPCHECK_JOBS (default: number of cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

sanitize=""
targets=()
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize="address,undefined" ;;
    -*) echo "build.sh: unknown option $arg (use --sanitize)" >&2; exit 2 ;;
    *) targets+=("$arg") ;;
  esac
done

# The sanitizer build is the build without CUDA (unless AMPCHECK_CUDA says otherwise): so
# CI compiles both flavours, the CUDA backend in the Release build and kernels/no_gpu/
# here, and host sanitizers have nothing to add to device code. The fuzz targets of fuzz/
# replay tests/data/hostile here (hostile.TARGET); AMPCHECK_FUZZ=1 (scripts/fuzz.sh) makes
# it clang's instead (Debian's clang-14), with libFuzzer's coverage instrumentation in
# every library, so that the targets fuzz.
if [[ -n $sanitize ]]; then
  dir=${AMPCHECK_BUILD_DIR:-$root/build-sanitize}
  type=RelWithDebInfo
  cuda=${AMPCHECK_CUDA:-OFF}
  if [[ ${AMPCHECK_FUZZ:-0} == 1 ]]; then
    export CC=clang-14 CXX=clang++-14
    sanitize="$sanitize,fuzzer-no-link"
  fi
else
  dir=${AMPCHECK_BUILD_DIR:-$root/build}
  type=Release
  cuda=${AMPCHECK_CUDA:-AUTO}
fi
generator=()
command -v ninja >/dev/null && [[ ! -f $dir/CMakeCache.txt ]] && generator=(-G Ninja)

mkdir -p "$dir"
# The benchmarks are timed in the Release build only: the sanitizer build leaves them out.
bench=ON
[[ -n $sanitize ]] && bench=OFF
cmake -S "$root" -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=$type \
  -DAMPCHECK_CUDA="$cuda" -DAMPCHECK_SANITIZE="$sanitize" -DAMPCHECK_BUILD_BENCH=$bench >"$dir/configure.log" 2>&1 \
  || { cat "$dir/configure.log" >&2; exit 1; }
grep -E '^-- (ampcheck|CUDA)' "$dir/configure.log" || true
target_args=()
for t in "${targets[@]}"; do target_args+=(--target "$t"); done
cmake --build "$dir" -j "${AMPCHECK_JOBS:-$(nproc)}" "${target_args[@]}"
