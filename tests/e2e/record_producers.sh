#!/usr/bin/env bash
# ampcheck record on the planted-failure families (ampcheck's unstable samples written as
# PyTorch scripts, recorder/tests/families.py) names the same producer of the first
# non-finite value (op, module, phase, step) that `ampcheck run` names on the same model's
# ONNX export (the engine's own training of the exported weights and data), exits 1, and
# writes a report that validates against the schema and says what it recorded.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/record.sh"
work=${WORK:?set WORK to a scratch directory}
rm -rf "$work" && mkdir -p "$work"

first_producer() {  # FILE: "op module phase step" of nonfinite.producer
  json_get "$1" '" ".join(str(r["nonfinite"]["producer"][k]) for k in ("op", "module", "phase", "step")) if "producer" in r["nonfinite"] else "none"'
}

families=(variance_overflow attention_overflow residual_overflow sum_overflow temperature_overflow sigmoid_log
          nan_through_relu two_overflows)
for f in "${families[@]}"; do
  export_family "$f" "$work"
  mapfile -t args < "$work/$f.args"
  engine=$work/$f.engine.json recorded=$work/$f.recorded.json
  expect 1 "verdict: FAILED" -- "$bin" run --model "$work/$f.onnx" --data "$work/$f.npz" "${args[@]}" --steps 2 \
    --inspect stats --quiet --report "$engine"
  expect 1 "verdict: FAILED" -- "$bin" record --quiet --report "$recorded" -- "$py" "$family_py" train "$f" 2
  [[ -f $recorded && -f $engine ]] || { fail "$f: a report is missing"; continue; }
  validate "$recorded"
  read -r op module phase step <<<"$(first_producer "$recorded")"
  want=$(first_producer "$engine")
  got="$(as_exported "$op") $module $phase $step"
  if [[ $got == "$want" ]]; then
    ok "$f: both name $want (the recorder: $op in '$module')"
  else
    fail "$f: the recorder names '$got' (as exported), ampcheck run on the export names '$want'"
  fi
  [[ $(json_get "$recorded" 'r["run"]["framework"], r["run"]["script_args"]') == "('pytorch', ['train', '$f', '2'])" ]] ||
    fail "$f: run.framework / script_args not recorded"
done
exit $((fails > 0))
