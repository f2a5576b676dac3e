#!/usr/bin/env bash
# Configures and builds ampcheck. Used by demo.sh and test.sh; callable on its own:
#   scripts/build.sh [--sanitize] [TARGET...]
# Environment: AMPCHECK_BUILD_DIR (default build, or build-sanitize), AMPCHECK_CUDA
# (AUTO|ON|OFF, default AUTO), AMPCHECK_JOBS (default: number of cores).
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

if [[ -n $sanitize ]]; then
  dir=${AMPCHECK_BUILD_DIR:-$root/build-sanitize}
  type=RelWithDebInfo
else
  dir=${AMPCHECK_BUILD_DIR:-$root/build}
  type=Release
fi
generator=()
command -v ninja >/dev/null && [[ ! -f $dir/CMakeCache.txt ]] && generator=(-G Ninja)

mkdir -p "$dir"
cmake -S "$root" -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=$type \
  -DAMPCHECK_CUDA="${AMPCHECK_CUDA:-AUTO}" -DAMPCHECK_SANITIZE="$sanitize" >"$dir/configure.log" 2>&1 \
  || { cat "$dir/configure.log" >&2; exit 1; }
grep -E '^-- (ampcheck|CUDA)' "$dir/configure.log" || true
target_args=()
for t in "${targets[@]}"; do target_args+=(--target "$t"); done
cmake --build "$dir" -j "${AMPCHECK_JOBS:-$(nproc)}" "${target_args[@]}"
