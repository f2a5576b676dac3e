#!/usr/bin/env bash
# bisect-nan --script on the planted-failure families (PyTorch scripts run under the
# recorder, candidates forced to fp32 inside autocast) finds the same minimal set that
# bisect-nan finds on the same model's ONNX export (the engine's trials), by op type and
# by module path, within 2k log2(n) + 3 trials (k culprits of n candidates), and gives
# the fix in PyTorch's terms: the recorder's keep_fp32 and the plain autocast(enabled=False).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/record.sh"
work=${WORK:?set WORK to a scratch directory}
rm -rf "$work" && mkdir -p "$work"

culprits() {  # FILE [type]: the culprits, sorted, one line; op types as the export names them
  local names
  names=$(json_get "$1" '" ".join(sorted(r["bisect"]["culprits"]))')
  if [[ ${2:-} == type ]]; then
    local mapped=()
    for n in $names; do mapped+=("$(as_exported "$n")"); done
    printf '%s\n' "${mapped[@]}" | sort | tr '\n' ' ' | sed 's/ $//'
  else
    echo "$names"
  fi
}

# Every planted family with AMPCHECK_RECORD_FAMILIES=all (each trial is a PyTorch process:
# about 12 minutes on 2 cores); by default, to keep CI within its time, three that cover
# the kinds: one culprit by overflow, two culprits, and a NaN a log produces (ctest runs
# them as three tests, e2e.record_bisect.FAMILY, side by side; AMPCHECK_RECORD_GRANULARITIES
# chooses among type and instance, default both).
if [[ ${AMPCHECK_RECORD_FAMILIES:-} == all ]]; then
  families=(variance_overflow attention_overflow residual_overflow sum_overflow temperature_overflow sigmoid_log
            nan_through_relu two_overflows)
else
  families=(${AMPCHECK_RECORD_FAMILIES:-variance_overflow two_overflows sigmoid_log})
fi
for f in "${families[@]}"; do
  export_family "$f" "$work"
  mapfile -t args < "$work/$f.args"
  for g in ${AMPCHECK_RECORD_GRANULARITIES:-type instance}; do
    engine=$work/$f.$g.engine.json script=$work/$f.$g.script.json
    "$bin" bisect-nan --model "$work/$f.onnx" --data "$work/$f.npz" "${args[@]}" --steps 2 --granularity "$g" \
      --quiet --report "$engine" > "$work/$f.$g.engine.txt" 2>&1
    expect 0 "fix found" -- "$bin" bisect-nan --script "$py $family_py train $f 2" --granularity "$g" --quiet \
      --report "$script"
    [[ -f $script && -f $engine ]] || { fail "$f ($g): a bisect report is missing"; continue; }
    want=$(culprits "$engine") got=$(culprits "$script" "$g")
    if [[ -n $want && $got == "$want" ]]; then
      ok "$f ($g): both find [$want]"
    else
      fail "$f ($g): bisect-nan --script finds [$got] (as exported), on the export [$want]"
      tail -5 "$work/$f.$g.engine.txt"
    fi
    if bound=$(python3 -c 'import json, math, sys
b = json.load(open(sys.argv[1]))["bisect"]
k, n, runs = max(1, len(b["culprits"])), max(2, len(b["candidates"])), b["runs"]
bound = 2 * k * math.log2(n) + 3
print("%d runs for k=%d of n=%d (bound %.1f)" % (runs, k, n, bound))
sys.exit(runs > bound)' "$script" 2>&1); then
      ok "$f ($g): $bound"
    else
      fail "$f ($g): $bound"
    fi
    fix=$(json_get "$script" 'r["bisect"]["suggestion"]["pytorch"]')
    if grep -qF "ampcheck_recorder.keep_fp32(model" <<<"$fix" && grep -qF 'autocast(device_type="cpu", enabled=False)' <<<"$fix"; then
      ok "$f ($g): the fix in PyTorch's terms"
    else
      fail "$f ($g): the fix lacks keep_fp32 or autocast(enabled=False): $fix"
    fi
  done
done
exit $((fails > 0))
