#!/usr/bin/env bash
# The second command of the README: installs what is missing, builds, and runs every
# test (unit, exhaustive 2^32 enumerations, CLI end to end; GPU tests skip, saying why,
# where there is no GPU).  scripts/test.sh --sanitize does the same in an
# address,undefined sanitizer build, where the enumerations sample instead.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/bootstrap.sh"
bash "$root/scripts/build.sh" "$@"

if [[ " $* " == *" --sanitize "* ]]; then
  dir=${AMPCHECK_BUILD_DIR:-$root/build-sanitize}
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:protect_shadow_gap=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
else
  dir=${AMPCHECK_BUILD_DIR:-$root/build}
fi
ctest --test-dir "$dir" --output-on-failure -j "${AMPCHECK_JOBS:-$(nproc)}"
