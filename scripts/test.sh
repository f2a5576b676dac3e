#!/usr/bin/env bash
# The second command of the README: installs what is missing, builds, and runs every
# test (unit, exhaustive 2^32 enumerations, CLI end to end; GPU tests skip, saying why,
# where there is no GPU).  scripts/test.sh --sanitize does the same in an
# address,undefined sanitizer build, where the enumerations sample instead.
#
# The recorder (recorder/: PyTorch's and PaddlePaddle's) is tested in the plain pass only
# (its tests test no C++ memory): its Python environment (scripts/pyenv.sh: PyTorch and
# PaddlePaddle from PyPI, in build/pyenv) is made in the background while the C++ builds and its tests run, then the
# recorder's pytest suite and the record / bisect-nan --script end-to-end tests (ctest
# label python) run in it. An environment that cannot be made (no network) fails the run
# after the C++ tests, unless AMPCHECK_SKIP_PYTHON_TESTS=1 says to skip them.
# Last, the wheel (pyproject.toml, docs/install.md) is made from this build's folder, as it
# is (nothing compiled again), repaired, installed into a fresh environment beside PyTorch
# and run there as users run it (scripts/wheel-test.sh); it needs PyPI as the recorder's
# tests do, and AMPCHECK_SKIP_PYTHON_TESTS=1 skips it with them.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=${AMPCHECK_JOBS:-$(nproc)}

python_tests=no
if [[ " $* " != *" --sanitize "* ]]; then
  if [[ ${AMPCHECK_SKIP_PYTHON_TESTS:-0} == 1 ]]; then
    echo "test.sh: AMPCHECK_SKIP_PYTHON_TESTS=1: the PyTorch recorder's tests are skipped"
  else
    python_tests=yes
    pyenv_log=$(mktemp /tmp/ampcheck-pyenv.XXXXXX)
    pyenv_start=$(date +%s)
    # Mostly network and disk: it overlaps the compilation and the C++ tests, niced and in
    # the idle I/O class so that its gigabytes of writes do not slow them.
    idle_io=()
    command -v ionice >/dev/null && ionice -c 3 true 2>/dev/null && idle_io=(ionice -c 3)
    "${idle_io[@]}" nice -n 10 bash "$root/scripts/pyenv.sh" > "$pyenv_log.python" 2> "$pyenv_log" &
    pyenv_pid=$!
    trap 'kill "$pyenv_pid" 2>/dev/null || true' EXIT
  fi
fi

if [[ " $* " == *" --sanitize "* ]]; then
  bash "$root/scripts/bootstrap.sh" --fuzz
else
  bash "$root/scripts/bootstrap.sh"
fi
bash "$root/scripts/build.sh" "$@"

if [[ " $* " == *" --sanitize "* ]]; then
  dir=${AMPCHECK_BUILD_DIR:-$root/build-sanitize}
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:protect_shadow_gap=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
else
  dir=${AMPCHECK_BUILD_DIR:-$root/build}
fi
if [[ $python_tests == no ]]; then
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" -LE python
  exit 0
fi
ctest_status=0
ctest --test-dir "$dir" --output-on-failure -j "$jobs" -LE python || ctest_status=$?

waited=$(date +%s)
if ! wait "$pyenv_pid"; then
  cat "$pyenv_log" >&2
  echo "test.sh: FAILED: the Python environment for the recorder's tests could not be made (above); set" \
       "AMPCHECK_SKIP_PYTHON_TESTS=1 to skip those tests on purpose" >&2
  exit 1
fi
trap - EXIT
python=$(tail -1 "$pyenv_log.python")
echo "test.sh: Python environment $python ready after $(($(date +%s) - pyenv_start)) s" \
     "($(($(date +%s) - waited)) s waited for it after the C++ tests)"
python_start=$(date +%s)
# The recorder's suite, on every core; then the CLI's end-to-end tests on PyTorch scripts.
pytest_status=0
(cd "$root/recorder" && "$python" -m pytest -q -p no:cacheprovider -n "$jobs" tests/) || pytest_status=$?
export AMPCHECK_PYTHON=$python
e2e_status=0
ctest --test-dir "$dir" --output-on-failure -j "$jobs" -L python || e2e_status=$?
echo "test.sh: the PyTorch recorder's tests took $(($(date +%s) - python_start)) s"
wheel_status=0
bash "$root/scripts/wheel-test.sh" --build-dir "$dir" || wheel_status=$?
exit $((ctest_status || pytest_status || e2e_status || wheel_status))
