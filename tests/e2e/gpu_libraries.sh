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

# `pip install ampcheck` beside a CUDA PyTorch: the nvidia-* packages of the Python environment
# the binary is installed in come before ld.so.cache and the build's folders, LD_LIBRARY_PATH
# still first, and an active VIRTUAL_ENV's count too (kernels/cuda/gpu_libraries.h); their
# CUPTI only where a GPU is usable. A made-up environment: the binary in venv/bin, this
# machine's own GPU libraries linked into site-packages/nvidia/cu13/lib and nvidia/cudnn/lib,
# as PyTorch's CUDA 13 wheels lay them out.
inits() { LD_DEBUG=libs "$@" doctor 2>&1 >/dev/null | grep -E 'calling init: .*/lib(cublasLt|cudnn|cupti)\.so' | sed 's/.*calling init: //'; }
real=$(inits env -u VIRTUAL_ENV -u CONDA_PREFIX LD_LIBRARY_PATH= "$bin" | grep -v _graph)
gpus=$("$bin" doctor --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["cuda"]["gpus"]))')
if [[ -z $real ]]; then
  echo "SKIPPED: the nvidia-* packages of a Python environment (no GPU library loads here: a build without CUDA, or no toolkit)"
else
  venv=$work/venv sp=$work/venv/lib/python3.12/site-packages
  mkdir -p "$venv/bin" "$sp/nvidia/cu13/lib" "$sp/nvidia/cudnn/lib" "$work/elsewhere/bin" "$work/ld"
  cp "$bin" "$venv/bin/ampcheck" && cp "$bin" "$work/elsewhere/bin/ampcheck"
  for f in $real; do
    case $(basename "$f") in libcudnn*) pkg=cudnn ;; *) pkg=cu13 ;; esac
    ln -sf "$f" "$sp/nvidia/$pkg/lib/"
  done
  plain=(env -u VIRTUAL_ENV -u CONDA_PREFIX -u AMPCHECK_GPU_LIBRARIES LD_LIBRARY_PATH=)
  loaded_from() {  # WHAT FOLDER -- COMMAND...: each library of $real opened from FOLDER
    local what=$1 folder=$2; shift 3
    local log missing=()
    log=$(inits "$@")
    for f in $real; do
      local b found=no line
      b=$(basename "$f")
      while read -r line; do [[ $line == "$folder"/*/"$b" || $line == "$folder/$b" ]] && found=yes; done <<<"$log"
      [[ $found == yes ]] || missing+=("$b")
    done
    if ((${#missing[@]})); then fail "$what: ${missing[*]} not opened from $folder; opened: $(tr '\n' ' ' <<<"$log")"
    else ok "$what: $(wc -w <<<"$real") GPU libraries opened from $folder"; fi
  }
  for f in $real; do ln -sf "$f" "$work/ld/"; done
  loaded_from "LD_LIBRARY_PATH before the environment" "$work/ld" -- "${plain[@]}" LD_LIBRARY_PATH="$work/ld" "$venv/bin/ampcheck"
  if ((gpus == 0)) && grep -q libcupti <<<"$real"; then
    # No GPU: the environment's CUPTI is passed over, the machine's opened as before.
    cupti=$(grep libcupti <<<"$real")
    got=$(inits "${plain[@]}" "$venv/bin/ampcheck" | grep libcupti)
    if [[ $got == "$cupti" ]]; then ok "no GPU: CUPTI not from the environment but from $got"
    else fail "no GPU: CUPTI should come from $cupti, not the environment's; opened: ${got:-none}"; fi
    real=$(grep -v libcupti <<<"$real")
  fi
  loaded_from "the binary's own environment before ld.so.cache" "$sp/nvidia" -- "${plain[@]}" "$venv/bin/ampcheck"
  loaded_from "an active VIRTUAL_ENV's" "$sp/nvidia" -- "${plain[@]}" VIRTUAL_ENV="$venv" "$work/elsewhere/bin/ampcheck"
fi
(( fails == 0 )) || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
