#!/usr/bin/env bash
# Configures and builds ampcheck. Used by demo.sh and test.sh; callable on its own:
#   scripts/build.sh [--sanitize] [TARGET...]
# Environment: AMPCHECK_BUILD_DIR (default build, or build-sanitize), AMPCHECK_CUDA
# (AUTO|ON|OFF, default AUTO, OFF for --sanitize), AMPCHECK_CUDA_ARCHITECTURES (the GPU
# architectures to build for, e.g. "90" or "80;90"; default 75;80;90), AMPCHECK_JOBS
# (default: number of cores).
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
# here, and host sanitizers have nothing to add to device code. It is clang's (Debian's
# clang-14, scripts/bootstrap.sh --fuzz) with libFuzzer's coverage instrumentation in every
# library, so that the fuzz targets of fuzz/ fuzz (fuzz.TARGET, and scripts/fuzz.sh for
# long) besides replaying tests/data/hostile (hostile.TARGET); AMPCHECK_FUZZ=0 makes it the
# default compiler's, without libFuzzer. -O1 with line tables only: a sanitizer's report
# names file and line, and the build takes half the time of -O2 -g.
if [[ -n $sanitize ]]; then
  dir=${AMPCHECK_BUILD_DIR:-$root/build-sanitize}
  type=RelWithDebInfo
  cuda=${AMPCHECK_CUDA:-OFF}
  debug_flags="-O1 -g1 -DNDEBUG"
  if [[ ${AMPCHECK_FUZZ:-1} == 1 ]]; then
    command -v clang++-14 >/dev/null ||
      { echo "build.sh: --sanitize needs clang-14 (scripts/bootstrap.sh --fuzz installs it; AMPCHECK_FUZZ=0 uses the default compiler without libFuzzer)" >&2; exit 2; }
    export CC=clang-14 CXX=clang++-14
    sanitize="$sanitize,fuzzer-no-link"
    debug_flags="-O1 -gline-tables-only -DNDEBUG"
  fi
else
  dir=${AMPCHECK_BUILD_DIR:-$root/build}
  type=Release
  cuda=${AMPCHECK_CUDA:-AUTO}
  debug_flags=""
fi
generator=()
# A build folder configured for another compiler (an older sanitizer build) starts again.
if [[ -n ${CXX:-} && -f $dir/CMakeCache.txt ]] &&
   ! grep -q "^CMAKE_CXX_COMPILER:[A-Z]*=$(command -v "$CXX")\$" "$dir/CMakeCache.txt"; then
  echo "build.sh: $dir was configured for another compiler: configuring it again for $CXX"
  rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
fi
command -v ninja >/dev/null && [[ ! -f $dir/CMakeCache.txt ]] && generator=(-G Ninja)

# ccache, where the machine has it (scripts/bootstrap.sh installs it): a rebuild of what
# an earlier build compiled (CI's next run on the same machine) is a lookup.
launcher=()
if command -v ccache >/dev/null && [[ ! -f $dir/CMakeCache.txt ]]; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cuda_archs=()
[[ -n ${AMPCHECK_CUDA_ARCHITECTURES:-} ]] && cuda_archs=("-DCMAKE_CUDA_ARCHITECTURES=$AMPCHECK_CUDA_ARCHITECTURES")
mkdir -p "$dir"
# The benchmarks are timed in the Release build only: the sanitizer build leaves them out.
bench=ON
[[ -n $sanitize ]] && bench=OFF
cmake -S "$root" -B "$dir" "${generator[@]}" "${launcher[@]}" "${cuda_archs[@]}" -DCMAKE_BUILD_TYPE=$type \
  -DAMPCHECK_CUDA="$cuda" -DAMPCHECK_SANITIZE="$sanitize" -DAMPCHECK_BUILD_BENCH=$bench \
  ${debug_flags:+"-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$debug_flags" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$debug_flags"} \
  >"$dir/configure.log" 2>&1 \
  || { cat "$dir/configure.log" >&2; exit 1; }
grep -E '^-- (ampcheck|CUDA)' "$dir/configure.log" || true
target_args=()
for t in "${targets[@]}"; do target_args+=(--target "$t"); done
cmake --build "$dir" -j "${AMPCHECK_JOBS:-$(nproc)}" "${target_args[@]}"
