#!/usr/bin/env bash
# ampcheck record and bisect-nan --script on scripts written as users write them
# (recorder/tests/scripts/): what each plants is named, and bisect-nan's fix is advice the
# script as written can take. Expectations from the scripts' docstrings:
#   custom_function_train.py  exp in the backward of autograd.Function ScaledTanh in 'act'
#                             overflows at every scale: by op type the fix is the Function
#                             (keep_fp32(model, ops=['ScaledTanh'])), by module 'act'
#   mse_outside_train.py      mse_loss in 'MSELoss', a module outside the model, in fp16
#                             because the script cast the target itself: the fix names the
#                             line that calls it, and that cast
#   compile_train.py --fault forward  a 6e4 input overflows emb's fp16 linear at step 3 inside a
#                             torch.compile'd model: named by the eager replay, fixed by modules
# and record's own usage: a forgotten `--` answered with the form to use.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/record.sh"
work=${WORK:?set WORK to a scratch directory}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../recorder/tests/scripts" && pwd)

expect 1 "exp in the backward of autograd.Function ScaledTanh in 'act'" -- \
  "$bin" record --quiet -- "$py" "$scripts/custom_function_train.py"
expect 0 "fp32 = ampcheck_recorder.keep_fp32(model, ops=['ScaledTanh'])" -- \
  "$bin" bisect-nan --quiet --script "$py $scripts/custom_function_train.py"
expect 0 "out = ScaledTanh.apply(*(x.float() for x in inputs))" -- \
  "$bin" bisect-nan --quiet --script "$py $scripts/custom_function_train.py"
expect 0 "fp32 = ampcheck_recorder.keep_fp32(model, modules=['act'])" -- \
  "$bin" bisect-nan --quiet --granularity instance --script "$py $scripts/custom_function_train.py"
# The fix, applied as the advice says, trains.
expect 0 "verdict: healthy" -- "$bin" record --quiet -- "$py" "$scripts/custom_function_train.py" --fix

line=$(grep -n "loss = criterion(pred, y.to(pred.dtype))" "$scripts/mse_outside_train.py" | cut -d: -f1)
expect 1 "the script cast its input 1 to float16 at $scripts/mse_outside_train.py:$line" -- \
  "$bin" record --quiet -- "$py" "$scripts/mse_outside_train.py"
expect 0 "# 'MSELoss' is not part of the model: the script calls MSELoss itself, at $scripts/mse_outside_train.py:$line:" -- \
  "$bin" bisect-nan --quiet --granularity instance --script "$py $scripts/mse_outside_train.py"

# A torch.compile'd model: its forward failure found by recording the failing call again
# eagerly, and bisect-nan's trials force the compiled graphs' modules (run eagerly, heard).
expect 1 "first produced by linear in module 'emb', forward, step 3" -- \
  "$bin" record --quiet -- "$py" "$scripts/compile_train.py" --fault forward
expect 0 "fp32 = ampcheck_recorder.keep_fp32(model, modules=[" -- \
  "$bin" bisect-nan --quiet --granularity instance --script "$py $scripts/compile_train.py --fault forward"

# A forgotten --: the script's options are named, with the form to use.
expect 2 "record: --steps is the command's, not ampcheck's: put -- before the command, ampcheck record --quiet -- python x.py --steps 5" -- \
  "$bin" record --quiet python x.py --steps 5
expect 2 'record: unknown option "--reprot" (did you mean "--report"?)' -- "$bin" record --reprot a.json -- python x.py

echo "record_styles: $fails failure(s)"
exit $((fails > 0))
