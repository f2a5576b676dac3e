#!/usr/bin/env bash
# Fuzzes every reader of users' files for a long while, from random seeds (CI replays the
# hostile files of tests/data/hostile through the same targets and fuzzes each for 20 s
# from a fixed seed: fuzz/CMakeLists.txt). Builds the
# sanitizer build (build-sanitize: clang-14 with libFuzzer, ASan and UBSan, the build of
# scripts/test.sh --sanitize and CI's second pass), then runs each target for SECONDS on
# its corpus (build-sanitize/fuzz/corpus/TARGET, grown from the project's own files of that
# kind and tests/data/hostile/TARGET), JOBS targets at once.
#
#   scripts/fuzz.sh [--time SECONDS] [--jobs N] [TARGET...]
#     TARGET: onnx arrays model_file config report profile (default: all)
#     SECONDS: per target, default 3600; JOBS: targets at once, default the number of cores
#
# Each crash (a signal, a sanitizer report, exit 3, an error of several lines or naming no
# file: fuzz/harness.h) is saved as build-sanitize/crashes/TARGET/crash-*; reproduce it with
# `build-sanitize/fuzz/ampcheck_fuzz_TARGET FILE`, fix it, and add the file to
# tests/data/hostile/TARGET/ (it becomes a regression test: hostile.TARGET replays it in
# every build; a class worth its own words goes into make_hostile.py and
# tests/onnx_hostile_test.cpp).
# Writes a summary per target (executions, coverage, crashes) to build-sanitize/fuzz-summary.txt.
# Exit 1 if any target crashed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=3600
jobs=$(nproc)
targets=()
while (($#)); do
  case $1 in
    --time) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -*) echo "fuzz.sh: unknown option $1 (use --time SECONDS, --jobs N)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
bash "$root/scripts/bootstrap.sh" --fuzz
dir=${AMPCHECK_FUZZ_BUILD_DIR:-$root/build-sanitize}
AMPCHECK_FUZZ=1 AMPCHECK_BUILD_DIR=$dir bash "$root/scripts/build.sh" --sanitize
((${#targets[@]})) || mapfile -t targets < <(cd "$dir/fuzz" && ls ampcheck_fuzz_* | sed 's/^ampcheck_fuzz_//')

export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# Several targets share the machine: each reader's memory budget (what it may allocate for
# a file's claims, as --max-memory) stays under libFuzzer's RSS limit, so that a claim it
# refuses is a refusal, and one it does not is an out-of-memory crash.
export AMPCHECK_MAX_MEMORY=${AMPCHECK_MAX_MEMORY:-1G}
summary=$dir/fuzz-summary.txt
: >"$summary"
run_target() {
  local t=$1 bin=$dir/fuzz/ampcheck_fuzz_$1
  [[ -x $bin ]] || { echo "fuzz.sh: no target $t ($bin)" >&2; return 2; }
  rm -f "$dir/crashes/$t"/{crash,leak,timeout,oom,slow-unit}-*
  mkdir -p "$dir/crashes/$t" "$dir/fuzz/corpus/$t"
  # The seed folders the test of this target uses (fuzz/CMakeLists.txt), from its command.
  local seeds
  seeds=$(ctest --test-dir "$dir" -R "^fuzz\.$t\$" --show-only=json-v1 2>/dev/null |
    python3 -c 'import json,sys; t=json.load(sys.stdin)["tests"]; print(" ".join(a for a in t[0]["command"][1:] if not a.startswith("-")) if t else "")')
  # A crash ends a libFuzzer run: the target starts again (its corpus kept) until its time is
  # spent, so one finding does not end the hunt. -timeout is wall time, generous: several
  # targets share the cores, and a starved process is not a slow input.
  local log=$dir/crashes/$t/fuzz.log rc=0 start now runs=0 execs=0 crashes=0
  : >"$log"
  start=$(date +%s)
  while now=$(date +%s); ((now - start < seconds)); do
    local one=0
    # shellcheck disable=SC2086
    "$bin" -max_total_time=$((seconds - (now - start))) -timeout=120 -rss_limit_mb=2560 -max_len=1048576 \
      -print_final_stats=1 -artifact_prefix="$dir/crashes/$t/" ${seeds:-$dir/fuzz/corpus/$t} >>"$log" 2>&1 || one=$?
    runs=$((runs + 1))
    ((one == 0)) || { rc=1; crashes=$((crashes + 1)); }
  done
  execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{s += $2} END {print s + 0}')
  # One write per target: the targets finish at once, and their lines must not interleave.
  local block
  block=$(
    echo "== $t: $(($(date +%s) - start)) s, $runs run(s), $execs executions, $crashes ending in a finding"
    grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1 | sed -E 's/[[:space:]]+MS:.*//' || true
    grep -E '^stat::(new_units_added|peak_rss_mb)' "$log" | tail -2 || true
    ls "$dir/crashes/$t" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' | sed 's/^/  artifact: /' || true
  )
  printf '%s\n' "$block" >>"$summary"
  return $rc
}
export -f run_target
export dir seconds summary
failed=0
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_target {}' || failed=1
cat "$summary"
exit $failed
