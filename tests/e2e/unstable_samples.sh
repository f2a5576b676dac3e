#!/usr/bin/env bash
# The unstable samples keep their promises: every samples/models/*.json whose "expect"
# block names a culprit fails at its own AMP settings, bisect-nan (with the file's
# bisect_args) names exactly that culprit list, and black-listing it makes the run
# healthy. The samples are used by name, as built into the binary (samples/models/ORDER),
# so a file left out of ORDER fails here too.
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
for file in "$root"/samples/models/*.json; do
  name=$(basename "$file" .json)
  mapfile -t culprit < <(expect_of "$file" culprit)
  [[ ${#culprit[@]} -eq 0 ]] && continue
  mapfile -t extra < <(expect_of "$file" bisect_args)
  unstable=$((unstable + 1))
  black=$(IFS=,; echo "${culprit[*]}")

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

  # The cure: with the culprits black-listed the run is healthy as configured.
  expect 0 "healthy as configured" -- "$bin" bisect-nan --model "$name" --black "$black" --quiet "${extra[@]}"
done

[[ $unstable -gt 0 ]] && ok "$unstable unstable samples checked" || fail "no sample in samples/models documents a culprit"
[[ $failing -gt 0 ]] && ok "$failing unstable samples fail without their cure" ||
  fail "no unstable sample was seen failing without its cure"
exit $((fails > 0))
