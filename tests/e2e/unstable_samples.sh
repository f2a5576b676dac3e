#!/usr/bin/env bash
# The unstable samples keep their promises: every samples/models/*.json whose "expect"
# block names a culprit fails at its own AMP settings, bisect-nan (with the file's
# bisect_args) names exactly that culprit list within 2k log2(n) + 3 runs (k culprits,
# n candidates), the fix leaves ops running in low precision, and black-listing it (for
# an fp8 sample, "cure": "fp8_keep": keeping its layers out of fp8) makes the run healthy. A sample whose cure is the loss scaler ("cure": "scaler") gets no
# black list at all: bisect-nan says so and names the scaler setting instead. The samples
# are used by name, as built into the binary (samples/models/ORDER), so a file left out
# of ORDER fails here too.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
work=${WORK:?set WORK to a scratch directory}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"

# expect_of FILE KEY: the "expect" block's list KEY, one item a line (none if absent).
expect_of() {
  python3 -c 'import json, sys
for v in json.load(open(sys.argv[1])).get("expect", {}).get(sys.argv[2], []): print(v)' "$1" "$2"
}

unstable=0 failing=0
cure_of() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("expect", {}).get("cure", ""))' "$1"
}

for file in "$root"/samples/models/*.json; do
  name=$(basename "$file" .json)
  grep -qx "$name" "$root/samples/models/ORDER" || fail "$name.json is not in samples/models/ORDER"
  if [[ $(cure_of "$file") == scaler ]]; then
    # No black list: the run's verdict and bisect-nan name the loss scaler's setting.
    unstable=$((unstable + 1))
    out=$("$bin" bisect-nan --model "$name" --quiet --report "$work/$name.bisect.json" 2>&1)
    if python3 -c 'import json, sys
b = json.load(open(sys.argv[1]))["bisect"]
sys.exit(b["culprits"] != [])' "$work/$name.bisect.json" && grep -q "init_scale\|init_loss_scaling\|loss scaling" <<<"$out"; then
      ok "$name: no black list; bisect-nan names the loss scaler"
    else
      fail "$name: bisect-nan should offer the scaler setting, not a black list:"; echo "$out" | tail -8
    fi
    continue
  fi
  mapfile -t culprit < <(expect_of "$file" culprit)
  [[ ${#culprit[@]} -eq 0 ]] && continue
  mapfile -t extra < <(expect_of "$file" bisect_args)
  unstable=$((unstable + 1))
  black=$(IFS=,; echo "${culprit[*]}")
  # The cure: the culprits black-listed (op types), or kept out of fp8 (an fp8 sample's layers).
  fix=(--black "$black")
  [[ $(cure_of "$file") == fp8_keep ]] && fix=(--fp8-keep "$black")

  # Without the cure: a sample whose failure needs no extra bisect-nan options fails
  # its own run (verdict FAILED, exit 1).
  if [[ ${#extra[@]} -eq 0 ]]; then
    expect 1 "verdict: FAILED" -- "$bin" run --model "$name" --inspect stats --quiet
    failing=$((failing + 1))
  fi

  # bisect-nan names the documented culprits, and only them.
  report=$work/$name.bisect.json
  expect 0 "fix found" -- "$bin" bisect-nan --model "$name" --quiet --report "$report" "${extra[@]}"
  if [[ ! -f $report ]]; then
    fail "$name: bisect-nan wrote no report"
  elif got=$(python3 -c 'import json, sys
got = json.load(open(sys.argv[1]))["bisect"]["culprits"]
print(got)
sys.exit(sorted(got) != sorted(sys.argv[2:]))' "$report" "${culprit[@]}" 2>&1); then
    ok "$name: bisect-nan names $got"
  else
    fail "$name: bisect-nan names $got, the model file documents [${black}]"
  fi
  # Within the bound, and never a "fix" that leaves nothing in low precision.
  if [[ -f $report ]] && bound=$(python3 -c 'import json, math, sys
b = json.load(open(sys.argv[1]))["bisect"]
k, n, runs = max(1, len(b["culprits"])), max(2, len(b["candidates"])), b["runs"]
bound = 2 * k * math.log2(n) + 3
print("%d runs for k=%d of n=%d (bound %.1f)" % (runs, k, n, bound))
sys.exit(runs > bound)' "$report" 2>&1); then
    ok "$name: $bound"
  else
    fail "$name: $bound"
  fi
  expect 0 "AMP is on" -- "$bin" run --model "$name" "${fix[@]}" --quiet

  # The cure: with the culprits black-listed (kept out of fp8) the run is healthy as configured.
  expect 0 "healthy as configured" -- "$bin" bisect-nan --model "$name" "${fix[@]}" --quiet "${extra[@]}"
done

[[ $unstable -gt 0 ]] && ok "$unstable unstable samples checked" || fail "no sample in samples/models documents a culprit"
[[ $failing -gt 0 ]] && ok "$failing unstable samples fail without their cure" ||
  fail "no unstable sample was seen failing without its cure"
exit $((fails > 0))
