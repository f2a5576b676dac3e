#!/usr/bin/env bash
# The first command of the README: installs what is missing, builds, and runs the main
# job on a sample: the MLP sample trained under AMP O2 in float16 with the inspector in
# full mode (which ops ran in fp16, where values overflowed, what the loss scaler did),
# then the number explorer on the values AMP users trip over.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/bootstrap.sh"
bash "$root/scripts/build.sh" ampcheck >/dev/null
bin=${AMPCHECK_BUILD_DIR:-$root/build}/cli/ampcheck

"$bin" --version
echo
echo '$ ampcheck run --model mlp --level O2 --dtype float16 --steps 200'
"$bin" run --model mlp --level O2 --dtype float16 --steps 200
echo
echo '$ ampcheck fp 65504 65519 65520 6e-8 3e-8 1e-8 0.1 --dtype f16,bf16'
"$bin" fp 65504 65519 65520 6e-8 3e-8 1e-8 0.1 --dtype f16,bf16
