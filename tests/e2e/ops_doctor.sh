#!/usr/bin/env bash
# `ampcheck ops` and `ampcheck doctor` end to end: output and exit codes.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
expect 0 "AMP O1 float16" -- "$bin" ops
expect 0 "runs in, bfloat16 inputs" -- "$bin" ops --level O2 --dtype bf16
expect 0 "custom black" -- "$bin" ops --black linear
expect 0 "matmul_v2" -- "$bin" ops --level O1
expect 0 '"reason": "custom_white"' -- "$bin" ops --white softmax --json
expect 0 '"level": "O2"' -- "$bin" ops --config "$root/samples/configs/apex_o2.json" --json
expect 0 "O0: no op casts down" -- "$bin" ops --level O0
expect 2 '"O7" is not an AMP level' -- "$bin" ops --level O7
expect 2 'did you mean "softmax"?' -- "$bin" ops --black sofmax
expect 2 'float16 or bfloat16' -- "$bin" ops --dtype f64
expect 2 'did you mean' -- "$bin" ops --dtype bfloat61
expect 2 'no such file' -- "$bin" ops --config "$root/samples/configs/none.json"
expect 2 '--bogus' -- "$bin" ops --bogus
expect 0 "conversions:" -- "$bin" doctor
expect 0 "GEMM:" -- "$bin" doctor
expect 0 'ampcheck GEMM, scalar path' -- env AMPCHECK_CPU_ISA=scalar "$bin" doctor
expect 0 '"ampcheck_doctor": 1' -- "$bin" doctor --json
expect 0 'scalar (set by AMPCHECK_CPU_ISA)' -- env AMPCHECK_CPU_ISA=scalar "$bin" doctor
expect 2 '--bogus' -- "$bin" doctor --bogus
# The default thread count is the CPUs the process may use: pinned to one CPU by taskset
# (as a container's cpuset would), one thread, whatever the machine has online.
if command -v taskset >/dev/null; then
  expect 0 ' 1 (the CPUs this process may use: ' -- taskset -c 0 "$bin" doctor
  expect 0 ', 1 in its affinity mask' -- taskset -c 0 "$bin" doctor
  expect 0 '"affinity": 1,' -- taskset -c 0 "$bin" doctor --json
  expect 0 ' 3 (AMPCHECK_NUM_THREADS)' -- env AMPCHECK_NUM_THREADS=3 taskset -c 0 "$bin" doctor
fi
# Without a GPU the doctor says so plainly and still exits 0.
if [[ ! -e /dev/nvidia0 ]]; then
  expect 0 "no CUDA device: " -- "$bin" doctor
fi
echo "ops/doctor e2e: $fails failed"
[[ $fails -eq 0 ]]
