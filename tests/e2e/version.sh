#!/usr/bin/env bash
# One version (docs/install.md): the project() line of CMakeLists.txt is where it lives;
# `ampcheck --version`, the wheel's metadata (pyproject.toml's regex over that line, applied
# here as scikit-build-core applies it), the recorder's _version.py and recorder/pyproject.toml
# (the recorder packaged alone) all say the same. CMake refuses a different _version.py at
# configure; this test also holds the other three to it.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

cmake_version=$(sed -n 's/^project(ampcheck VERSION \([0-9][0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
[[ -n $cmake_version ]] || fail "no 'project(ampcheck VERSION X.Y.Z' line in CMakeLists.txt"

same() {  # WHAT VALUE
  if [[ $2 == "$cmake_version" ]]; then ok "$1 says $2, as CMakeLists.txt"
  else fail "$1 says '$2', CMakeLists.txt's project() says '$cmake_version'"; fi
}
same "ampcheck --version" "$("$bin" --version | sed -n 's/^ampcheck \([^ ]*\) .*/\1/p')"
same "recorder/ampcheck_recorder/_version.py" \
  "$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$root/recorder/ampcheck_recorder/_version.py")"
same "recorder/pyproject.toml" "$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/recorder/pyproject.toml")"
# The wheel's version: pyproject.toml's own regex over its own input file.
if python3 -c 'import tomllib' 2>/dev/null; then
  same "the wheel (pyproject.toml's regex)" "$(python3 - "$root" <<'PY'
import pathlib, re, sys, tomllib
root = pathlib.Path(sys.argv[1])
meta = [m for m in tomllib.loads((root / "pyproject.toml").read_text())["tool"]["dynamic-metadata"]
        if m["field"] == "version"][0]
match = re.search(meta["regex"], (root / meta["input"]).read_text(), re.MULTILINE)
print(match.group("value") if match else "")
PY
)"
else
  echo "SKIPPED: the wheel's version (python3 without tomllib, older than 3.11)"
fi
(( fails == 0 )) || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
