#!/usr/bin/env bash
# On a GPU machine with PyTorch (and torchvision, onnx): records the project's own AMP
# training profiles, the data `ampcheck kernels` is checked on beside the public traces of
# ../shared/data/traces, and the same models' kernels as ampcheck's own CUPTI trace sees them.
#
#   bench/profiles/record.sh OUT [AMPCHECK]
#
# Writes into OUT:
#   resnet18_fp16_autocast.pt.trace.json.gz   ResNet-18, autocast float16 + GradScaler, with_stack
#   gpt2_block_bf16_autocast.pt.trace.json.gz  the GPT-2-style block, autocast bfloat16
#   resnet18_fp32.pt.trace.json.gz             the fp32 control (no autocast)
#   resnet18_fp16_autocast.ncu.csv             Nsight Compute (`ncu --csv`) of one training step
#                                              of the first: its tensor-pipe counters, per kernel
#   resnet18_fp16_autocast.nsys.sqlite         Nsight Systems' SQLite export, where nsys works
#   onnx/                                      bench/onnx/export.py's resnet18 and gpt2_block
#   ampcheck_{resnet18,gpt2_block}_cuda.json   `ampcheck run --device cuda --inspect trace` on
#                                              those exports (CUPTI): AMPCHECK given, a CUDA build
#   record.log                                 what each step printed
# Each step is bounded in time and a failed step does not stop the others; exit 1 if any failed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:?usage: record.sh OUT [AMPCHECK]}
ampcheck=${2:-}
mkdir -p "$out"
log=$out/record.log
failed=0
step() {  # step SECONDS NAME CMD...: runs CMD with a time limit, logs it, counts a failure
  local secs=$1 name=$2
  shift 2
  echo "== $name: $*" | tee -a "$log"
  local t0=$SECONDS
  timeout "$secs" "$@" >>"$log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$log"
  ((rc == 0)) || failed=1
  return 0
}
py=${PYTHON:-python3}
rec=$here/record_torch_profile.py
export PYTHONUNBUFFERED=1

step 90 kineto-resnet18-fp16 "$py" "$rec" --model resnet18 --dtype float16 --stack --out "$out/resnet18_fp16_autocast.pt.trace.json.gz"
step 90 kineto-gpt2-bf16 "$py" "$rec" --model gpt2_block --dtype bfloat16 --out "$out/gpt2_block_bf16_autocast.pt.trace.json.gz"
step 90 kineto-resnet18-fp32 "$py" "$rec" --model resnet18 --dtype float32 --out "$out/resnet18_fp32.pt.trace.json.gz"

# Nsight Compute: the tensor-pipe counters this GPU has (a metric ncu does not know stops it).
if command -v ncu >/dev/null 2>&1; then
  want='gpu__time_duration|sm__inst_executed_pipe_tensor_op_hmma|sm__inst_executed_pipe_tensor_op_gmma|sm__inst_executed_pipe_tensor_op_imma|sm__ops_path_tensor_src_[a-z0-9]+_dst_[a-z0-9]+|sm__pipe_tensor_op_hmma_cycles_active|sm__pipe_tensor_op_gmma_cycles_active'
  metrics=$(ncu --query-metrics 2>/dev/null | awk '{print $1}' | grep -E "^($want)\$" | sed 's/$/.sum/' | paste -sd, -)
  echo "ncu metrics: ${metrics:-none found}" | tee -a "$log"
  if [[ -n $metrics ]]; then
    step 150 ncu-resnet18-fp16 ncu --profile-from-start off --clock-control none --csv --metrics "$metrics" \
      --log-file "$out/resnet18_fp16_autocast.ncu.csv" "$py" "$rec" --model resnet18 --dtype float16 --mode ncu
  fi
else
  echo "ncu: not on this machine" | tee -a "$log"
fi

# Nsight Systems, where it is installed and works.
nsys=$(command -v nsys || ls /opt/nvidia/nsight-systems*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null | head -1 || true)
if [[ -n $nsys ]]; then
  step 120 nsys-resnet18-fp16 "$nsys" profile --trace=cuda,nvtx --force-overwrite=true -o "$out/resnet18_fp16_autocast" \
    "$py" "$rec" --model resnet18 --dtype float16 --mode ncu
  [[ -f $out/resnet18_fp16_autocast.nsys-rep ]] && step 60 nsys-export "$nsys" export --type sqlite --force-overwrite=true \
    -o "$out/resnet18_fp16_autocast.nsys.sqlite" "$out/resnet18_fp16_autocast.nsys-rep"
else
  echo "nsys: not on this machine" | tee -a "$log"
fi

# The same models through ampcheck's own CUDA backend, CUPTI on: which kernels its ops ran.
if [[ -n $ampcheck ]]; then
  step 90 onnx-export "$py" "$here/../onnx/export.py" --out "$out/onnx" --only resnet18,gpt2_block --bn preserve --no-verify
  for m in resnet18 gpt2_block; do
    dt=float16
    [[ $m == gpt2_block ]] && dt=bfloat16
    step 90 "ampcheck-$m" "$ampcheck" run --model "$out/onnx/$m.onnx" --data "$out/onnx/$m.npz" --loss cross_entropy \
      --level O2 --dtype "$dt" --device cuda --inspect trace --steps 6 --quiet --report "$out/ampcheck_${m}_cuda.json"
  done
fi
echo "record.sh: done, $( ((failed)) && echo 'some steps failed' || echo 'every step passed')" | tee -a "$log"
exit $failed
