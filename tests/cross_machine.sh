#!/usr/bin/env bash
# Other machines, simulated on this one: the determinism tests and a set of short runs'
# JSON reports under every OpenBLAS core type this CPU can execute and every CPU path
# (AMPCHECK_CPU_ISA) it supports, with 1, 2 and 3 threads, must give the same bytes as
# the run on this machine's defaults. A user's CI machine picks its own kernels: a
# report that depends on the pick is a drift gate that fails for no reason (issue 14).
#
# OPENBLAS_CORETYPE forces the kernel set OpenBLAS would pick on another CPU (Haswell
# and Zen: AVX2 machines such as Zen 3 or a Zen 5 that OpenBLAS 0.3.21 does not know;
# SkylakeX: AVX-512; Sandybridge: AVX only). The product does not use OpenBLAS today;
# this keeps it honest should a dependency on one bring it back.
#
# Environment (set by ctest, tests/CMakeLists.txt): AMPCHECK (the binary), TRAINING_TESTS
# and OP_TESTS (the gtest binaries holding the Determinism.* tests), WORK (scratch).
set -uo pipefail
: "${AMPCHECK:?set AMPCHECK to the ampcheck binary}"
: "${TRAINING_TESTS:?set TRAINING_TESTS to ampcheck_training_tests}"
: "${OP_TESTS:?set OP_TESTS to ampcheck_op_tests}"
work=${WORK:-$(mktemp -d)}
rm -rf "$work" && mkdir -p "$work"

flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { [[ " $flags " == *" $1 "* ]]; }

# The core types this CPU can execute (OpenBLAS would crash on an instruction it lacks).
coretypes=()
has avx && coretypes+=(Sandybridge)
has avx2 && has fma && coretypes+=(Haswell Zen)
has avx512f && has avx512bw && coretypes+=(SkylakeX)
# The CPU paths it supports: ampcheck itself says which (exit 2 for an unsupported one).
isas=()
for isa in scalar f16c avx512 avx512_bf16; do
  AMPCHECK_CPU_ISA=$isa "$AMPCHECK" --version >/dev/null 2>&1 && isas+=("$isa")
done
echo "cross-machine: core types ${coretypes[*]}; CPU paths ${isas[*]}"
[[ ${#coretypes[@]} -gt 0 && ${#isas[@]} -gt 0 ]] || { echo "cross-machine: nothing to simulate on this CPU"; exit 1; }

# Short runs that cover every op family, both low-precision dtypes and fp8 (the sample's
# delayed scaling, and MXFP8's blocks with E5M2 gradients), with full inspection
# (numerics, shadow errors, NaN sources, the fp8 watch): sample level dtype steps [option].
runs=(
  "mlp O2 float16 40"
  "cnn O1 bfloat16 6"
  "mobilenet O2 float16 4"
  "transformer O2 float16 8"
  "transformer O1 bfloat16 8"
  "attention_overflow O1 float16 4"
  "variance_overflow O1 float16 6"
  "fp8_transformer O1 bfloat16 6"
  "fp8_transformer O1 bfloat16 6 --fp8=MXFP8BlockScaling(fp8_format=Format.HYBRID)"
)

# Writes $1/<sample>.<level>.<dtype>.json (and .txt) for every run; exit 0 or 1 (the
# unstable samples fail by design) both leave a report.
reports() {
  local dir=$1
  mkdir -p "$dir"
  local r sample level dtype steps option name rc
  for r in "${runs[@]}"; do
    read -r sample level dtype steps option <<<"$r"
    name=$sample.$level.$dtype${option:+.${option%%(*}}
    name=${name//[^A-Za-z0-9._]/}
    rc=0
    "$AMPCHECK" run --model "$sample" --level "$level" --dtype "$dtype" --steps "$steps" --inspect full \
      ${option:+"$option"} --quiet --report "$dir/$name.json" >"$dir/$name.txt" 2>&1 || rc=$?
    if [[ $rc -gt 1 ]]; then
      echo "FAIL: ampcheck run --model $sample --level $level --dtype $dtype $option exited $rc:"
      tail -5 "$dir/$name.txt"
      return 1
    fi
  done
}

fails=0
reports "$work/reference" || exit 1

threads=(1 2 3)
i=0
for ct in "${coretypes[@]}"; do
  for isa in "${isas[@]}"; do
    t=${threads[$((i % 3))]}
    i=$((i + 1))
    name="OPENBLAS_CORETYPE=$ct AMPCHECK_CPU_ISA=$isa AMPCHECK_NUM_THREADS=$t"
    dir="$work/$ct.$isa.$t"
    before=$fails
    export OPENBLAS_CORETYPE=$ct AMPCHECK_CPU_ISA=$isa AMPCHECK_NUM_THREADS=$t
    for bin in "$TRAINING_TESTS" "$OP_TESTS"; do
      if ! out=$("$bin" --gtest_filter='Determinism.*:Gemm.*' 2>&1); then
        echo "FAIL: $name: $(basename "$bin") Determinism/Gemm tests:"
        grep -E '^\[  FAILED  \]|Failure|Expected|Which is' <<<"$out" | head -12
        fails=$((fails + 1))
      fi
    done
    if reports "$dir"; then
      for f in "$work/reference"/*.json; do
        if ! cmp -s "$f" "$dir/$(basename "$f")"; then
          echo "FAIL: $name: $(basename "$f") differs from this machine's default run:"
          diff <(python3 -m json.tool "$f") <(python3 -m json.tool "$dir/$(basename "$f")") | head -8
          fails=$((fails + 1))
        fi
      done
    else
      fails=$((fails + 1))
    fi
    unset OPENBLAS_CORETYPE AMPCHECK_CPU_ISA AMPCHECK_NUM_THREADS
    [[ $fails -eq $before ]] && echo "ok: $name: determinism tests pass, ${#runs[@]} reports byte-identical"
  done
done

if [[ $fails -gt 0 ]]; then
  echo "cross-machine: $fails failure(s): results depend on the machine's kernels"
  exit 1
fi
echo "cross-machine: $i simulated machines, every report byte-identical"
