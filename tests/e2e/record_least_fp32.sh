#!/usr/bin/env bash
# bisect-nan --script --loss-tolerance: the least to keep in fp32 so that the AMP run comes
# within 5% of its fp32 twin's final loss, its candidates now also the cures that are no op
# (cli/bisect_command.cpp), tried before the ops: "master weights", "optimizer state", "the
# loss". Expectations from the planting (recorder/tests/scripts/twin_train.py's docstring):
#   bf16_weights  model.bfloat16() and SGD, no fp32 master weights: master weights alone
#   bf16_moments  a hand-written AdamW keeping its moments in bfloat16: the optimizer's state
#   bf16_loss     F.cross_entropy(logits.bfloat16(), y) over 8192 classes: the loss alone
#   offset        bf16 autocast over fp32 weights, the targets near 100, the loss in fp32: no
#                 cure is a candidate, module '2' (the last linear layer) as before
#   fp16_norm     a LayerNorm over a float16 linear's outputs near 2000: module 'lin1', the
#                 layer that makes the norm's input (what compare --script names as the cure)
# AMPCHECK_RECORD_FAMILIES picks one of them (ctest runs one test each: tests/CMakeLists.txt);
# unset, all five.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/record.sh"
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../recorder/tests/scripts" && pwd)
work=${WORK:?set WORK to a scratch directory}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
twin="$py $scripts/twin_train.py"
plantings=${AMPCHECK_RECORD_FAMILIES:-bf16_weights bf16_moments bf16_loss offset fp16_norm}

# least MODE CULPRIT CURE: the search on MODE finds CULPRIT alone, says CURE in its PyTorch
# advice, and stays within its bound (1 + k (log2 n + 2) + k runs for k culprits of n
# candidates, the twin's run on top).
least() {
  local mode=$1 culprit=$2 cure=$3 report="$work/$1.json"
  expect 0 "$cure" -- \
    "$bin" bisect-nan --quiet --script "$twin $mode" --loss-tolerance 0.05 --granularity instance --report "$report"
  validate "$report"
  [[ $(json_get "$report" 'r["bisect"]["culprits"], r["bisect"]["found"]') == "(['$culprit'], True)" ]] ||
    fail "$mode: the search should find '$culprit' alone, not $(json_get "$report" 'r["bisect"]["culprits"]')"
  [[ $(json_get "$report" 'r["bisect"]["suggestion"]["pytorch"]') == *"$cure"* ]] ||
    fail "$mode: the suggestion should say '$cure'"
  [[ $(json_get "$report" 'r["bisect"]["runs"] <= 2 + 1 * (__import__("math").ceil(__import__("math").log2(
       len(r["bisect"]["candidates"]))) + 2) + 1') == True ]] ||
    fail "$mode: $(json_get "$report" 'r["bisect"]["runs"]') runs is beyond the search's bound"
}

for planting in $plantings; do
  case $planting in
    bf16_weights)
      least bf16_weights "master weights" \
        "fp32 master weights: train the fp32 model under torch.autocast instead of model.bfloat16()"
      # A cure is tried before the ops: the first candidate.
      [[ $(json_get "$work/bf16_weights.json" 'r["bisect"]["candidates"][0]') == "master weights" ]] ||
        fail "bf16_weights: master weights should be the first candidate"
      ;;
    bf16_moments)
      least bf16_moments "optimizer state" "keep the optimizer's moments in fp32" ;;
    bf16_loss)
      least bf16_loss "the loss" "compute the loss in fp32" ;;
    offset)
      expect 0 "keep_fp32(model, modules=['2'])" -- "$bin" bisect-nan --quiet --script "$twin offset" \
        --loss-tolerance 0.05 --granularity instance --report "$work/offset.json"
      [[ $(json_get "$work/offset.json" 'r["bisect"]["culprits"], r["bisect"]["found"]') == "(['2'], True)" ]] ||
        fail "offset: the loss-tolerance search should find module '2' alone"
      # Nothing of it is stored in 16 bits and its loss is fp32: no cure is a candidate.
      [[ $(json_get "$work/offset.json" \
           'set(r["bisect"]["candidates"]) & {"master weights", "optimizer state", "the loss"}') == "set()" ]] ||
        fail "offset: no cure should be a candidate"
      ;;
    fp16_norm)
      least fp16_norm lin1 "keep_fp32(model, modules=['lin1'])"
      [[ $(json_get "$work/fp16_norm.json" \
           'set(r["bisect"]["candidates"]) & {"master weights", "optimizer state", "the loss"}') == "set()" ]] ||
        fail "fp16_norm: no cure should be a candidate"
      ;;
    *) fail "unknown planting '$planting' in AMPCHECK_RECORD_FAMILIES" ;;
  esac
done
(( fails == 0 )) || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
