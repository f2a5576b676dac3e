#!/usr/bin/env bash
# docs/model-format.md against the binary: every complete model file in it (a ```json
# block with "ampcheck_model") trains for 3 steps with exit 0; every error example (a
# ```json block right after `<!-- error: TEXT -->`) exits 2 with TEXT in its message and,
# where the doc shows the command and message after it, exactly that message; every node
# kind the binary knows has a section and a runnable example. A ```json block right after
# `<!-- file: NAME -->` is written as NAME next to the examples (a data file they read).
set -uo pipefail
source "$(dirname "$0")/lib/expect.sh"
work=${WORK:?set WORK to a scratch directory}
doc=$(dirname "$0")/../../docs/model-format.md
[[ -f $doc ]] && doc=$(cd "$(dirname "$doc")" && pwd)/$(basename "$doc")
source_file=$(cd "$(dirname "$0")/../.." && pwd)/models/model_file.cpp
[[ $bin == */* ]] && bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
[[ -f $doc ]] || { echo "FAIL: $doc not found"; exit 1; }
rm -rf "$work" && mkdir -p "$work/blocks" "$work/run"
work=$(cd "$work" && pwd)

# Split the doc: blocks/L.json for the ```json block starting on line L, and one line of
# blocks/index per block: L, the line before its fence (a marker comment or not), and the
# command and message of the plain ``` block that follows an error block, if any.
awk -v dir="$work/blocks" '
  function out(l) { printf "%s\t%s\t%s\t%s\n", l, meta[l], cmd[l], msg[l] > (dir "/index") }
  /^```json[[:space:]]*$/ && !in_json && !in_plain {
    in_json = 1; start = NR; meta[start] = prev; file = dir "/" start ".json"; printf "" > file; next }
  /^```[[:space:]]*$/ && in_json { in_json = 0; close(file); order[++n] = start; last = start; prev = ""; next }
  in_json { print > file; next }
  /^```[[:space:]]*$/ && !in_plain { in_plain = 1; first = ""; second = ""; lines = 0; prev = ""; next }
  /^```[[:space:]]*$/ && in_plain {
    in_plain = 0
    if (last && meta[last] ~ /^<!-- error:/ && cmd[last] == "" && first ~ /^\$ ampcheck run --model /) {
      cmd[last] = first; msg[last] = second }
    last = 0; prev = ""; next }
  in_plain { if (++lines == 1) first = $0; else if (lines == 2) second = $0; next }
  /^```/ { last = 0 }
  /[^[:space:]]/ && !/^<!--/ { last = 0 }
  { prev = $0 }
  END { for (i = 1; i <= n; ++i) out(order[i]) }
' "$doc"
[[ -s $work/blocks/index ]] || { echo "FAIL: no \`\`\`json blocks found in $doc"; exit 1; }

cd "$work/run" || exit 1
# Data files first: the examples read them by relative path.
while IFS=$'\t' read -r line meta cmd msg; do
  if [[ $meta =~ ^\<\!--\ file:\ ([^ ]+)\ --\>$ ]]; then cp "$work/blocks/$line.json" "${BASH_REMATCH[1]}"; fi
done <"$work/blocks/index"

models=0 errors=0 passed=()
while IFS=$'\t' read -r line meta cmd msg; do
  block=$work/blocks/$line.json
  if [[ $meta =~ ^\<\!--\ error:\ (.*)\ --\>$ ]]; then
    fragment=${BASH_REMATCH[1]}
    errors=$((errors + 1))
    name=line$line.json
    [[ $cmd =~ ^\$\ ampcheck\ run\ --model\ ([^ ]+)$ ]] && name=${BASH_REMATCH[1]}
    cp "$block" "$name"
    out=$("$bin" run --model "$name" --steps 3 --quiet 2>&1); rc=$?
    if [[ $rc -ne 2 ]] || ! grep -qF -- "$fragment" <<<"$out"; then
      fail "doc line $line ($name): exit $rc (want 2), message lacks '$fragment':"; echo "$out" | tail -5
    elif [[ -n $msg && $out != "$msg" ]]; then
      fail "doc line $line ($name): the message differs from the documented one:"
      echo "  documented: $msg"; echo "  printed:    $out"
    else
      ok "doc line $line: $name gives its documented error"
    fi
  elif [[ $meta =~ ^\<\!--\ file: ]]; then
    continue
  elif grep -q '"ampcheck_model"' "$block"; then
    models=$((models + 1))
    name=example_line$line.json
    cp "$block" "$name"
    out=$("$bin" run --model "$name" --steps 3 --quiet 2>&1); rc=$?
    if [[ $rc -ne 0 ]]; then
      fail "doc line $line: the example model exits $rc (want 0):"; echo "$out" | tail -5
    else
      ok "doc line $line: the example model trains"; passed+=("$name")
    fi
  fi
done <"$work/blocks/index"
[[ $models -ge 40 ]] && ok "$models example models" || fail "only $models example models found in $doc"
[[ $errors -ge 12 ]] && ok "$errors error examples" || fail "only $errors error examples found in $doc"

# Every node kind the binary knows: `ampcheck ops --nodes` where it exists, else the kind
# table of the interpreter's source.
if kinds_json=$("$bin" ops --nodes --json 2>/dev/null); then
  kinds=$(grep -oE '"kind": *"[a-z0-9_]+"' <<<"$kinds_json" | sed -E 's/.*"([a-z0-9_]+)"$/\1/')
  from="ampcheck ops --nodes"
else
  kinds=$(awk '/static const std::vector<Kind> table/ { f = 1; next } f && /^  };/ { exit } f' "$source_file" |
    grep -oE '^[[:space:]]*\{"[a-z0-9_]+", "' | grep -oE '[a-z0-9_]+')
  from=$source_file
fi
count=$(wc -w <<<"$kinds")
[[ $count -ge 40 ]] && ok "$count node kinds from $from" || fail "only $count node kinds read from $from"
for kind in $kinds; do
  grep -qF -- "#### \`$kind\`" "$doc" || fail "node kind $kind has no section in the doc"
  if [[ ${#passed[@]} -gt 0 ]] && grep -qlE -- "\"kind\": *\"$kind\"" "${passed[@]}"; then
    ok "node kind $kind has a runnable example"
  else
    fail "node kind $kind has no runnable example in $doc"
  fi
done

echo "model format docs e2e: $fails failed"
[[ $fails -eq 0 ]]
