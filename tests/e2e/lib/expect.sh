# Sourced by the e2e scripts: $bin (the binary), a failure counter and
#   expect CODE PATTERN -- ARGS...   run ARGS; pass when the exit code is CODE and the
#                                    output (stdout and stderr) contains PATTERN;
#   validate FILE                    FILE is complete JSON and valid against the report
#                                    schema (reports/schema/report.schema.json);
#   json_get FILE EXPR               a Python expression over the document `r`.
bin=${AMPCHECK:?set AMPCHECK to the ampcheck binary}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
expect() {
  local code=$1 pattern=$2; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [[ $rc -ne $code ]] || ! grep -qF -- "$pattern" <<<"$out"; then
    fail "$* -> exit $rc (want $code), output lacks '$pattern':"; echo "$out" | tail -20
  else
    ok "$*"
  fi
}

schema=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/reports/schema/report.schema.json
python=
for py in /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import jsonschema' 2>/dev/null; then python=$py; break; fi
done
validate() {
  if ! python3 -m json.tool "$1" >/dev/null 2>&1; then fail "$1 is not complete JSON"; return; fi
  if [[ -z $python ]]; then
    [[ -n ${CI+set} ]] && fail "python3-jsonschema missing (scripts/bootstrap.sh installs it)"
    echo "SKIPPED: schema check of $1 (no python3 jsonschema)"; return
  fi
  if "$python" -c 'import json, sys, jsonschema
jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))' "$schema" "$1"; then
    ok "$(basename "$1") is complete JSON and validates against the schema"
  else
    fail "$1 does not validate against $schema"
  fi
}
json_get() {
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
