#!/usr/bin/env bash
# ampcheck compare --script: the user's script beside its fp32 twin (the same script with
# autocast and the GradScaler disabled and its casts to bf16/fp16 kept in fp32, from the
# same seeds), the twin recorded --seeds times for its own spread. Expectations from the
# planting (recorder/tests/scripts/twin_train.py's docstring):
#   bf16_weights  no fp32 master weights: the loss stalls where fp32's falls: departs, exit 1
#   autocast      bf16 autocast over fp32 weights: within fp32's noise, exit 0
#   fixed_seed    the script seeds itself with a constant: shifted per twin run, exit 0
#   own_generator its randomness from a generator it seeds itself: no spread, exit 2
#   offset        bf16 outputs near 100 in the last linear layer: departs, and
#                 bisect-nan --loss-tolerance keeps module '2' in fp32
#   bf16_moments  a hand-written AdamW's moments in bf16: departs, the state named first
#   bf16_loss     F.cross_entropy over 8192 classes in bf16: departs, the loss named first
#   fp16_norm     a LayerNorm over float16 outputs near 2000: departs, born at the norm,
#                 cured by keeping the layer that makes its input ('lin1') in fp32
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/record.sh"
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../recorder/tests/scripts" && pwd)
work=${WORK:?set WORK to a scratch directory}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
twin="$py $scripts/twin_train.py"

expect 1 "the AMP run departs from its fp32 twin from step" -- \
  "$bin" compare --quiet --script "$twin bf16_weights" --seeds 3 --report "$work/planted.json" --html "$work/planted.html"
validate "$work/planted.json"
[[ $(json_get "$work/planted.json" 'r["compare"]["twin"]["verdict"], len(r["compare"]["twin"]["fp32"])') == "('departs', 3)" ]] ||
  fail "the planted run's report should hold a departure and 3 fp32 runs"
# The twin trained in fp32: the fp32 runs' losses are not the AMP run's, and the AMP run's
# own recording saw its bf16 weights.
json_get "$work/planted.json" 'r["compare"]["twin"]["fp32"][0]["losses"][-1] < 0.9 * r["compare"]["twin"]["amp_losses"][-1]' |
  grep -qx True || fail "the fp32 twin of the bf16-weight run should end lower than it"
grep -q "AMP run beside its fp32 twin" "$work/planted.html" || fail "the HTML report lacks the twin's section"
# Where it is born: the first layer's weights, stored in bf16, lose most of their updates.
json_get "$work/planted.json" 'r["compare"]["twin"]["cause"]' | grep -q "0.weight (" ||
  fail "the departure's cause should name 0.weight's updates lost to rounding"
json_get "$work/planted.json" 'r["compare"]["twin"]["cause"]' | grep -q "Keep fp32 master weights" ||
  fail "the cause should give the cure"

# Adam's moments kept in bfloat16 beside fp32 weights: the state is named, with its cure.
expect 1 "born in the optimizer's state" -- "$bin" compare --quiet --script "$twin bf16_moments" --seeds 2 \
  --report "$work/moments.json"
json_get "$work/moments.json" 'r["compare"]["twin"]["cause"]' | grep -q "weight:exp_avg_sq (" ||
  fail "the moments' cause should name weight:exp_avg_sq's updates lost to rounding"
json_get "$work/moments.json" 'r["compare"]["twin"]["cause"]' | grep -q "^born in the optimizer's state" ||
  fail "the moments should be named first"
# The loss over 8192 classes computed in bfloat16: the loss is named first, with its cure.
expect 1 "born in the loss: it was computed in bfloat16 (log_softmax, nll_loss" -- \
  "$bin" compare --quiet --script "$twin bf16_loss" --seeds 2 --report "$work/loss.json"
json_get "$work/loss.json" 'r["compare"]["twin"]["cause"]' | grep -q "^born in the loss" ||
  fail "the loss should be named first"
# A LayerNorm over a float16 linear's outputs near 2000: born at the norm, cured where its
# input is made ('lin1').
expect 1 "born in the forward at norm/layer_norm#0" -- \
  "$bin" compare --quiet --script "$twin fp16_norm" --seeds 2 --report "$work/norm.json"
json_get "$work/norm.json" 'r["compare"]["twin"]["cause"]' | grep -q "keep_fp32(model, modules=\['lin1'\])" ||
  fail "the norm's cure should be the layer that makes its input, lin1, in fp32"
# Every parameter's gradient at the first step set beside the twin's (the planted model's six).
[[ $(json_get "$work/norm.json" 'sorted(g["parameter"] for g in r["compare"]["twin"]["gradients"])') == \
   "['head.bias', 'head.weight', 'lin1.bias', 'lin1.weight', 'norm.bias', 'norm.weight']" ]] ||
  fail "each of the six parameters' gradients should be set beside the twin's"
[[ $(json_get "$work/norm.json" 'r["compare"]["born"][0]["name"]') == "norm/layer_norm#0" ]] ||
  fail "the report's table of where the forward departs should begin with the norm"

# The targets near 100: the last linear layer's bf16 output cannot hold them finely enough.
# Where it is born: the loss's subtraction near 100 magnifies the bf16 rounding of module '2''s
# output (through the script's .float(), which adds nothing): the cure is module '2'.
expect 1 "keep_fp32(model, modules=['2'])" -- "$bin" compare --quiet --script "$twin offset" --seeds 3
# bisect-nan --script --loss-tolerance: the least to keep in fp32 to come within 5% of the twin.
expect 0 "keep_fp32(model, modules=['2'])" -- \
  "$bin" bisect-nan --quiet --script "$twin offset" --loss-tolerance 0.05 --granularity instance --report "$work/bisect.json"
[[ $(json_get "$work/bisect.json" 'r["bisect"]["culprits"], r["bisect"]["found"]') == "(['2'], True)" ]] ||
  fail "the loss-tolerance search should find module '2' alone"
expect 0 "the AMP run stays within fp32's own noise" -- "$bin" compare --quiet --script "$twin autocast" --seeds 3
expect 0 "with one fp32 run there is no yardstick" -- "$bin" compare --quiet --script "$twin autocast" --seeds 1
# A script that seeds itself with a constant: the twin's k-th run shifts that seed by k.
expect 0 "the AMP run stays within fp32's own noise" -- "$bin" compare --quiet --script "$twin fixed_seed" --seeds 3
# All randomness from a generator the script seeds itself: nothing to shift, refused.
expect 2 'torch.manual_seed(int(os.environ.get("AMPCHECK_RECORD_SEED", 0)))' -- \
  "$bin" compare --quiet --script "$twin own_generator" --seeds 2
# A PaddlePaddle script: its twin disables auto_cast and the GradScaler and shifts paddle.seed.
expect 0 "beside its fp32 twin" -- "$bin" compare --quiet --script "$py $scripts/paddle_twin_train.py" --seeds 2
expect 2 "compare --script: --model sets ampcheck's own training" -- \
  "$bin" compare --script "$twin autocast" --model mlp
expect 2 "compare --script: --seeds 0 is out of range" -- "$bin" compare --script "$twin autocast" --seeds 0
expect 2 "compare: --seeds is --script's" -- "$bin" compare --model mlp --seeds 2
(( fails == 0 )) || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
