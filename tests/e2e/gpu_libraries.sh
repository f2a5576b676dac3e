#!/usr/bin/env bash
# No GPU libraries where none is needed (docs/cuda-backend.md, "Loading the GPU libraries"):
# commands that use no GPU load no CUDA library (the dynamic loader's own log, LD_DEBUG=libs,
# says what it opened), and run with every GPU library hidden (AMPCHECK_GPU_LIBRARIES naming
# an empty folder, LD_LIBRARY_PATH empty); `--device cuda` there exits 2 naming the missing
# library and the fix.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
work=${WORK:-$(mktemp -d)}
rm -rf "$work" && mkdir -p "$work/empty"

# A Kineto trace written by hand: one fp16 GEMM launched by aten::mm (profiles/chrome_trace.cpp).
cat >"$work/trace.json" <<'JSON'
{"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 20,
  "args": {"External id": 7, "Input Dims": [[64, 64], [64, 64]], "Input type": ["c10::Half", "c10::Half"]}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 12, "dur": 4,
  "args": {"correlation": 3, "External id": 7}},
 {"ph": "X", "cat": "kernel", "name": "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", "pid": 0, "tid": 7,
  "ts": 20, "dur": 30, "args": {"correlation": 3, "External id": 7, "device": 0, "stream": 7}}
]}
JSON

gpu_libs='libcublas|libcublasLt|libcudnn|libcupti|libnccl|libcudart|libcuda\.so'
loads_none() {  # the command's loader log names no CUDA library
  local log
  log=$(LD_DEBUG=libs "$@" 2>&1 >/dev/null | grep -E 'find library=' | grep -E "$gpu_libs")
  if [[ -n $log ]]; then fail "$* loaded a GPU library: $(head -3 <<<"$log")"; else ok "$* loads no GPU library"; fi
}
loads_none "$bin" --help
loads_none "$bin" fp 65504 --dtype f16,bf16
loads_none "$bin" run --device cpu --model mlp --steps 2 --seed 1 --report "$work/cpu.json"
loads_none "$bin" diff "$work/cpu.json" "$work/cpu.json"
loads_none "$bin" report "$work/cpu.json" --text
loads_none "$bin" kernels "$work/trace.json"

hidden=(env LD_LIBRARY_PATH= AMPCHECK_GPU_LIBRARIES="$work/empty")
expect 0 "ampcheck" -- "${hidden[@]}" "$bin" --help
# fp runs on the CPU where the GPU is not usable, the same bits, and says nothing of it.
out=$("${hidden[@]}" "$bin" fp 65504 --dtype f16 2>&1)
if [[ $? -ne 0 || $out == *"no usable GPU"* || $out != *"0x7bff"* ]]; then fail "fp with the GPU libraries hidden: $out"
else ok "fp with the GPU libraries hidden: 0x7bff, no notice"; fi
expect 0 "verdict: AMP is on" -- "${hidden[@]}" "$bin" kernels "$work/trace.json"
expect 0 "verdict" -- "${hidden[@]}" "$bin" run --device cpu --model mlp --steps 2 --seed 1 --report "$work/hidden.json"

if [[ $("$bin" doctor --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["cuda"]["built_with_cuda"])') == True ]]; then
  expect 2 "--device cuda needs the GPU libraries: cuBLASLt (libcublasLt.so." -- \
    "${hidden[@]}" "$bin" run --device cuda --model mlp --steps 2
  expect 2 "or name its folder in AMPCHECK_GPU_LIBRARIES" -- \
    "${hidden[@]}" "$bin" run --device cuda --model mlp --steps 2
  expect 0 "cuDNN:            not loaded: cuDNN (libcudnn.so." -- "${hidden[@]}" "$bin" doctor
else
  echo "SKIPPED: --device cuda with hidden libraries (a build without CUDA has none to miss)"
fi
(( fails == 0 )) || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
