#!/usr/bin/env bash
# ampcheck diff across seeds (issue 14): a baseline recorded with one seed and a run of
# the same configuration with another seed is not drift under the default rules, on
# every stable sample; a baseline recorded with --seeds 5 shows its measured spread and
# passes a sixth seed; a run at another AMP level still fails. The spread report
# validates against the schema. The runs inspect in stats mode: what diff judges here (loss,
# accuracy, skips, overflow counts) is there, and full mode's diffs are the baselines' test.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
work=${WORK:?set WORK to a scratch directory}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"

run() {  # run NAME ARGS...: the report at $work/NAME.json; exit 0 or 1 both leave one
  local name=$1 rc=0
  shift
  "$bin" run --quiet --report "$work/$name.json" "$@" >"$work/$name.txt" 2>&1 || rc=$?
  [[ $rc -le 1 ]] || { fail "ampcheck run $* exited $rc"; tail -5 "$work/$name.txt"; }
}

# One seed against another, no spread: the final loss is judged against the scatter of
# the last steps, accuracy, skipped steps and overflow counts are listed, not judged.
for sample in mlp cnn mobilenet transformer; do
  for seed in 0 1; do run "$sample.O2.$seed" --model "$sample" --level O2 --dtype float16 --inspect stats --seed "$seed"; done
  expect 0 "noise: training noise estimated: the seeds differ (0 vs 1)" -- \
    "$bin" diff "$work/$sample.O2.0.json" "$work/$sample.O2.1.json"
done
run mlp.O1bf16.0 --model mlp --level O1 --dtype bfloat16 --inspect stats --seed 0
run mlp.O1bf16.1 --model mlp --level O1 --dtype bfloat16 --inspect stats --seed 1
expect 0 "another seed: the numbers are judged against the training noise" -- \
  "$bin" diff "$work/mlp.O1bf16.0.json" "$work/mlp.O1bf16.1.json"

# Another level is drift, whatever the seed.
run mlp.O1.0 --model mlp --level O1 --dtype float16 --inspect stats --seed 0
run mlp.O3.0 --model mlp --level O3 --dtype float16 --inspect stats --seed 0
run mlp.O3.1 --model mlp --level O3 --dtype float16 --inspect stats --seed 1
expect 1 "FAIL  settings_must_match  run.level" -- "$bin" diff "$work/mlp.O1.0.json" "$work/mlp.O3.0.json"
expect 1 "FAIL  dtype_change" -- "$bin" diff "$work/mlp.O1.0.json" "$work/mlp.O3.1.json"

# A measured spread: five seeds recorded, a sixth judged against them.
for sample in mlp transformer; do
  run "$sample.spread" --model "$sample" --level O2 --dtype float16 --inspect stats --seed 0 --seeds 5
  grep -qF "Training noise over 5 seeds" "$work/$sample.spread.txt" && ok "$sample: the text shows the 5 seeds" ||
    fail "$sample: no spread in the text: $(tail -3 "$work/$sample.spread.txt")"
  run "$sample.seed7" --model "$sample" --level O2 --dtype float16 --inspect stats --seed 7
  expect 0 "noise: training noise from the baseline's 5 seeds (0, 1, 2, 3, 4)" -- \
    "$bin" diff "$work/$sample.spread.json" "$work/$sample.seed7.json"
  expect 0 '"source": "spread"' -- "$bin" diff --json "$work/$sample.spread.json" "$work/$sample.seed7.json"
done
expect 1 "FAIL  settings_must_match  run.level" -- "$bin" diff "$work/mlp.spread.json" "$work/mlp.O3.1.json"

# The spread report against the schema.
validate "$work/mlp.spread.json"

echo "diff across seeds e2e: $fails failed"
[[ $fails -eq 0 ]]
