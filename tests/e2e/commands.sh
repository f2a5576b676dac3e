#!/usr/bin/env bash
# The commands end to end on the built binary: every level trains the smoke model; the
# reports of one run are byte-identical between runs and the JSON validates against its
# schema; bisect-nan names the planted op type and only it; diff passes on identical runs
# and fails (exit 1) when the level changed; every command rejects bad arguments with
# exit 2 and a message.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
work=${WORK:?set WORK to a scratch directory}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"

# Every level on the smoke model, with its report.
for level in O0 O1 O2 O3; do
  expect 0 "verdict: " -- "$bin" run --model mlp --level "$level" --steps 20 --quiet --report "$work/$level.json"
  validate "$work/$level.json"
done
[[ $(json_get "$work/O0.json" 'r["summary"]["verdict"]') == reference ]] && ok "O0 is the fp32 reference" ||
  fail "O0 verdict: $(json_get "$work/O0.json" 'r["summary"]["verdict"]')"
[[ $(json_get "$work/O2.json" 'r["summary"]["verdict"]') == healthy ]] && ok "O2 is healthy" || fail "O2 verdict"
[[ $(json_get "$work/O2.json" 'sum(o["kernel_dtypes"]["fp16"] for o in r["ops"]) > 0') == True ]] &&
  ok "O2 ran ops in fp16" || fail "O2 ran no op in fp16"
expect 0 "verdict: healthy" -- "$bin" run --model cnn --level O1 --dtype bfloat16 --steps 3 --quiet
expect 0 "verdict: healthy" -- "$bin" run --model transformer --level O2 --steps 3 --quiet

# The same run twice: byte-identical JSON, HTML and text; the saved report renders the
# same text as the run printed; the Chrome trace is JSON with op spans.
for i in 1 2; do
  "$bin" run --model mlp --level O2 --steps 30 --quiet --report "$work/same$i.json" --html "$work/same$i.html" \
    --chrome-trace "$work/trace$i.json" >"$work/same$i.txt" || fail "run $i"
done
for ext in json html txt; do
  cmp -s "$work/same1.$ext" "$work/same2.$ext" && ok "identical runs give identical .$ext" ||
    fail "same1.$ext and same2.$ext differ"
done
"$bin" report "$work/same1.json" --text >"$work/rendered.txt" && cmp -s "$work/same1.txt" "$work/rendered.txt" &&
  ok "report --text of the saved JSON equals the run's summary" || fail "report --text differs from the run's output"
[[ $(json_get "$work/trace1.json" 'sum(1 for e in r["traceEvents"] if e["ph"] == "X" and e.get("cat") == "forward")') -gt 0 ]] &&
  ok "Chrome trace has forward op spans" || fail "Chrome trace has no forward op spans"
for i in 1 2; do "$bin" run --model mlp --level O2 --steps 10 --quiet --json >"$work/stdout$i.json"; done
cmp -s "$work/stdout1.json" "$work/stdout2.json" && ok "--json output is byte-identical" || fail "--json output differs"
validate "$work/stdout1.json"

# bisect-nan on the planted fp16 overflow (the model file sets O1): square, and only square.
expect 0 "fix found" -- "$bin" bisect-nan --model variance_overflow --steps 60 --quiet --report "$work/bisect.json"
validate "$work/bisect.json"
culprits=$(json_get "$work/bisect.json" 'r["bisect"]["culprits"]')
[[ $culprits == "['square']" ]] && ok "bisect-nan names square and only it" || fail "culprits: $culprits"
producer=$(json_get "$work/bisect.json" 'r["bisect"]["producer"]["op"]')
[[ $producer == square ]] && ok "the producer is square" || fail "producer: $producer"
expect 0 "run norm.square in fp32" -- "$bin" bisect-nan --model variance_overflow --steps 60 --quiet --granularity instance
expect 0 "healthy as configured" -- "$bin" bisect-nan --model mlp --level O2 --steps 10 --quiet
# The suggested config really fixes the run.
json_get "$work/bisect.json" 'r["bisect"]["suggestion"]["ampcheck"]' >"$work/fix.json"
expect 0 "verdict: healthy" -- "$bin" run --model variance_overflow --steps 60 --quiet --config "$work/fix.json"

# compare: O0, O1, O2 in lock step.
expect 0 "O2 growth" -- "$bin" compare --model mlp --steps 12 --quiet --report "$work/compare.json"
validate "$work/compare.json"

# diff: identical runs pass; a changed level is drift (exit 1), with a JUnit file.
expect 0 "" -- "$bin" diff "$work/same1.json" "$work/same2.json"
"$bin" run --model mlp --level O1 --steps 30 --quiet --report "$work/o1.json" >/dev/null
expect 1 "level" -- "$bin" diff "$work/same1.json" "$work/o1.json" --junit "$work/drift.xml"
grep -q '<failure' "$work/drift.xml" && ok "JUnit file has the failures" || fail "no <failure> in $work/drift.xml"

# ops and doctor.
expect 0 "linear" -- "$bin" ops --level O1
expect 0 "CPU" -- "$bin" doctor

# Bad arguments: exit 2 and a message naming the thing, for every command.
expect 2 'unknown model "mpl"' -- "$bin" run --model mpl
expect 2 '--levels: "O7" is not a level' -- "$bin" compare --levels O0,O7
expect 2 '--granularity "module"' -- "$bin" bisect-nan --granularity module
expect 2 'needs an AMP level' -- "$bin" bisect-nan --level O0
expect 2 'cannot read' -- "$bin" diff "$work/none.json" "$work/same1.json"
expect 2 'same1.txt: line 1, column 1: not valid JSON' -- "$bin" report "$work/same1.txt" --text
expect 2 '--html OUT.html or --text' -- "$bin" report "$work/same1.json"
expect 2 '--report' -- "$bin" run --steps 2 --quiet --report /nonexistent/dir/r.json
# A directory as the target: named as the problem, and nothing written beside it (the
# temporary file once went into the directory's parent).
mkdir -p "$work/outdir"
before=$(ls -A "$work")
expect 2 "cannot write $work/outdir: it is a directory" -- "$bin" run --steps 1 --quiet --report "$work/outdir"
[[ $(ls -A "$work") == "$before" && -z $(ls -A "$work/outdir") ]] && ok "nothing written beside the directory" \
  || fail "files appeared: $(ls -A "$work" "$work/outdir")"
# Numbers beyond a double and syntax errors in a model file: the file, the line and column.
printf '{"ampcheck_model": 1,\n "data": {"generator": "spiral", "noise": -1e400},\n "nodes": [{"name": "a", "kind": "relu"}]}' \
  >"$work/overflow.json"
expect 2 "overflow.json: line 2, column 43: the number -1e400 is too large for a double" -- \
  "$bin" run --model "$work/overflow.json" --steps 1 --quiet
expect 2 'did you mean "softmax"' -- "$bin" ops --black sofmax
expect 2 'not expected: --bogus' -- "$bin" doctor --bogus
expect 2 'cannot read "abc"' -- "$bin" fp abc
expect 2 'no such file' -- "$bin" config explain "$work/none.json"
[[ ! -e /nonexistent/dir/r.json ]] && ok "nothing half-written" || fail "a report was written"

echo "commands e2e: $fails failed"
[[ $fails -eq 0 ]]
