# Sourced by the e2e scripts: $bin (the binary), a failure counter and
#   expect CODE PATTERN -- ARGS...   run ARGS; pass when the exit code is CODE and the
#                                    output (stdout and stderr) contains PATTERN.
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
