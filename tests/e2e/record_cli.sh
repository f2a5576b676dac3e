#!/usr/bin/env bash
# ampcheck record end to end on PyTorch scripts: healthy runs are not failed (the scaler
# probing from a high initial scale, an intended masked_fill(-inf), a converged loss whose
# gradients flush to 0), the exit codes and messages of what goes wrong around the run
# (no command, a command not found, PyTorch not importable, a script that never imports
# torch, a script that fails, a run that does not repeat itself for bisect-nan), report
# and its HTML naming the framework and the script, and diff gating on two recordings.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/record.sh"
work=${WORK:?set WORK to a scratch directory}
rm -rf "$work" && mkdir -p "$work"
train=("$py" "$family_py" train)

# Healthy runs: exit 0, verdict healthy, and what made them look otherwise named.
expect 0 "probing for its scale" -- "$bin" record --quiet --report "$work/probing.json" -- "${train[@]}" scaler_probing 30
validate "$work/probing.json"
[[ $(json_get "$work/probing.json" '{k["reading"] for k in r["nonfinite"]["skips"]}') == "{'initial'}" ]] ||
  fail "scaler probing: its skips should read initial"
expect 0 "intended -Inf (masks softmax maps to 0)" -- "$bin" record --quiet -- "${train[@]}" causal_mask 3
expect 0 "verdict: healthy" -- "$bin" record --quiet --report "$work/converged.json" -- "${train[@]}" converged 25
[[ $(json_get "$work/converged.json" '"zero_gradients" in r["nonfinite"]') == False ]] ||
  fail "converged: zero gradients of a converged loss reported as underflow"

# What goes wrong around the run: exit 2 with the reason, 4 for the script's own failure.
expect 2 "no command to run" -- "$bin" record
expect 2 "command not found: \"no-such-python\"" -- "$bin" record -- no-such-python train.py
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  expect 2 "PyTorch cannot be imported by /usr/bin/python3" -- "$bin" record -- /usr/bin/python3 "$family_py" train mlp 1
fi
expect 2 "never imported torch" -- "$bin" record -- "$py" -c 'print("no torch here")'
expect 4 "the script failed: exit code 1, RuntimeError: the script broke after training" -- \
  "$bin" record --quiet --report "$work/raised.json" -- "${train[@]}" mlp 2 --raise
[[ $(json_get "$work/raised.json" 'len(r["steps"]), r["summary"]["verdict"]') == "(2, 'healthy')" ]] ||
  fail "a failed script's report should keep its 2 steps and the run's own verdict"
expect 2 "two runs of the unchanged script differ" -- "$bin" bisect-nan --quiet --script "$py $family_py train mlp 2 --unseeded"

# report and its HTML say where the run came from.
expect 1 "recorded in PyTorch" -- "$bin" record --quiet --html "$work/sig.html" --report "$work/sig.json" -- \
  "${train[@]}" sigmoid_log 2
expect 0 "from $family_py train sigmoid_log 2" -- "$bin" report "$work/sig.json" --text
expect 0 "" -- "$bin" report "$work/sig.json" --html "$work/again.html"
for page in "$work/sig.html" "$work/again.html"; do
  grep -q 'id="recorded">recorded in PyTorch' "$page" || fail "$page does not name the framework and the script"
  # What a new user opens it for: the op dtype table, the loss-scale history, the first
  # NaN's producer (sigmoid_log's log makes -Inf from a sigmoid that fp16 rounds to 0).
  grep -q 'id="op-types"' "$page" || fail "$page has no op dtype table"
  grep -q 'loss-scale' "$page" || fail "$page has no loss-scale history"
  grep -q '<h3>First producer</h3>' "$page" || fail "$page does not name the first non-finite producer"
done
"$bin" record --quiet --json -- "${train[@]}" mlp 1 > "$work/stdout.json" 2> "$work/stderr.txt"
python3 -m json.tool "$work/stdout.json" > /dev/null && grep -q "trained mlp" "$work/stderr.txt" &&
  ok "record --json: the report on stdout, the script's prints on stderr" || fail "record --json mixed its output"

# diff: two recordings of the same seeded run agree; a planted precision drift fails.
"$bin" record --quiet --report "$work/a.json" -- "${train[@]}" mlp 6 > /dev/null
"$bin" record --quiet --report "$work/b.json" -- "${train[@]}" mlp 6 > /dev/null
"$bin" record --quiet --report "$work/drift.json" -- "${train[@]}" mlp 6 --drift > /dev/null
cmp -s "$work/a.json" "$work/b.json" && ok "the same seeded script recorded twice: the same bytes" ||
  fail "two recordings of the same seeded script differ"
expect 0 "no drift" -- "$bin" diff "$work/a.json" "$work/b.json"
expect 1 "DRIFT" -- "$bin" diff "$work/a.json" "$work/drift.json"

# --seeds: only a script that takes its seed from ampcheck gives a spread.
expect 2 "the script sets its own" -- "$bin" record --quiet --seeds 2 -- "${train[@]}" mlp 2
expect 0 "verdict: healthy" -- "$bin" record --quiet --seeds 3 --report "$work/seeds.json" -- \
  "${train[@]}" mlp 6 --seed-from-env
[[ $(json_get "$work/seeds.json" '[s["seed"] for s in r["spread"]["seeds"]]') == "[0, 1, 2]" ]] ||
  fail "record --seeds 3: the spread should hold seeds 0, 1, 2"
validate "$work/seeds.json"
# A PaddlePaddle script, unmodified: the recorder starts at its `import paddle`. On the CPU
# Paddle ignores auto_cast (verdict amp_off, said why); a planted log of a negative value is
# named by its layer, and the report and its HTML name PaddlePaddle.
paddle_py=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../recorder/tests" && pwd)/paddle_train.py
expect 0 "where Paddle does no AMP" -- "$bin" record --quiet -- "$py" "$paddle_py" healthy 2
expect 1 "first non-finite forward value: Log in module 'mid', forward, step 1" -- \
  "$bin" record --quiet --report "$work/paddle.json" -- "$py" "$paddle_py" log 2
validate "$work/paddle.json"
expect 0 "recorded in PaddlePaddle" -- "$bin" report "$work/paddle.json" --text
expect 2 "the recorder said: ampcheck recorder: not recording: forcing ops or modules to fp32" -- \
  "$bin" record --quiet --fp32-ops exp -- "$py" "$paddle_py" healthy 1
expect 2 "this is a PaddlePaddle script" -- "$bin" bisect-nan --quiet --script "$py $paddle_py log 1"
exit $((fails > 0))
