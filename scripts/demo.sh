#!/usr/bin/env bash
# The first command of the README: installs what is missing, builds, and runs the main
# job on a sample: the MLP sample trained under AMP O2 in float16 with the inspector in
# full mode (which ops ran in fp16, where values overflowed, what the loss scaler did),
# with its JSON and HTML reports in demo-out/; then bisect-nan on the sample with a
# planted fp16 overflow and on a model exported from PyTorch to ONNX (samples/onnx/), and
# the number explorer on the values AMP users trip over.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/bootstrap.sh"
bash "$root/scripts/build.sh" ampcheck >/dev/null
bin=${AMPCHECK_BUILD_DIR:-$root/build}/cli/ampcheck
out=${AMPCHECK_DEMO_OUT:-$root/demo-out}
mkdir -p "$out"

"$bin" --version
echo
echo "\$ ampcheck run --model mlp --level O2 --dtype float16 --steps 200 --report $out/run.json --html $out/run.html"
"$bin" run --model mlp --level O2 --dtype float16 --steps 200 --report "$out/run.json" --html "$out/run.html"
echo
echo "reports: $out/run.json (docs/report-format.md), $out/run.html (open it in a browser)"
echo
echo '$ ampcheck bisect-nan --model variance_overflow --steps 60'
"$bin" bisect-nan --model variance_overflow --steps 60 --quiet >"$out/bisect.txt"
sed -n '/^Non-finite values/,/^  input/p; /^Bisection/,/^Minimal fix/p' "$out/bisect.txt"
tail -n 1 "$out/bisect.txt"
echo "(the suggested config, PaddlePaddle and PyTorch forms: $out/bisect.txt)"
echo
echo '$ ampcheck bisect-nan --model samples/onnx/overflow_mlp.onnx --data samples/onnx/overflow_mlp.npz --steps 20 --batch 16'
echo '  (an MLP exported by torch.onnx.export whose torch.square overflows fp16: your own model goes the same way)'
"$bin" bisect-nan --model "$root/samples/onnx/overflow_mlp.onnx" --data "$root/samples/onnx/overflow_mlp.npz" \
  --steps 20 --batch 16 --quiet >"$out/bisect-onnx.txt"
sed -n '/^Bisection/,/^Minimal fix/p; /^PaddlePaddle:/,/^$/p; /^PyTorch:/,/^$/p' "$out/bisect-onnx.txt"
tail -n 1 "$out/bisect-onnx.txt"
echo
echo '$ ampcheck fp 65504 65519 65520 6e-8 3e-8 1e-8 0.1 --dtype f16,bf16'
"$bin" fp 65504 65519 65520 6e-8 3e-8 1e-8 0.1 --dtype f16,bf16
