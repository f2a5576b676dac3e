#!/usr/bin/env bash
# The ampcheck binary end to end: output, exit codes, environment handling.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
expect 0 "verdict: healthy: AMP is on" -- "$bin" run --model mlp --level O2 --steps 20
expect 0 "Pure fp16 run operator: linear" -- env GLOG_v=5 "$bin" run --model mlp --level O2 --steps 2 --inspect trace
expect 0 "overflow -> inf" -- "$bin" fp 65504 65519 65520 6e-8 3e-8 1e-8 --dtype f16
expect 0 "underflow -> 0" -- "$bin" fp 1e-8 --dtype fp16
expect 0 "3.3895314e+38" -- "$bin" fp --limits
expect 0 '"ampcheck_fp_limits": 1' -- "$bin" fp --limits --json
expect 2 'cannot read "abc"' -- "$bin" fp abc
expect 2 'did you mean' -- "$bin" fp 1 --dtype bfloat61
expect 2 'AMPCHECK_CPU_ISA="sse9"' -- env AMPCHECK_CPU_ISA=sse9 "$bin" fp 1
expect 0 'scalar' -- env AMPCHECK_CPU_ISA=scalar "$bin" --version
# AMP configs: every sample explained with its style; every bad config exits 2 naming
# its key (tests/data/bad_configs/expected.tsv lists file and key).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for sample in paddle_amp_configs:paddle paddle_strategy:paddle pytorch:pytorch deepspeed:deepspeed \
              apex_o2:apex ampcheck_o2:ampcheck; do
  expect 0 "style:         ${sample#*:}" -- "$bin" config explain "$root/samples/configs/${sample%%:*}.json"
done
expect 0 '"converted_from": "deepspeed"' -- "$bin" config explain --json "$root/samples/configs/deepspeed.json"
while IFS=$'\t' read -r file key; do
  [[ -z $file || $file == \#* ]] && continue
  expect 2 "$key" -- "$bin" config explain "$root/tests/data/bad_configs/$file"
done <"$root/tests/data/bad_configs/expected.tsv"
expect 2 'no such file' -- "$bin" config explain "$root/samples/configs/none.json"
expect 2 'unknown command "confg" (did you mean "config"?); commands: run, record, bisect-nan' -- "$bin" confg
# A CUDA build on a machine without a GPU: a command that would train on the GPU says so in
# one notice line on stderr and runs on the CPU; one that uses no GPU (fp: the same bits
# on both) says nothing.
if "$bin" --version | grep -q "CUDA 1"; then
  if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    notice=$("$bin" run --model mlp --steps 1 2>&1 >/dev/null)
    if [[ $(grep -c . <<<"$notice") -eq 1 ]] && grep -q "running on the CPU" <<<"$notice"; then
      echo "ok: one-line CPU notice: $notice"
    else
      echo "FAIL: expected one notice line, got: $notice"; fails=$((fails + 1))
    fi
    quiet=$("$bin" fp 1 2>&1 >/dev/null)
    if [[ -z $quiet ]]; then echo "ok: fp says nothing of the GPU"
    else echo "FAIL: fp printed on stderr: $quiet"; fails=$((fails + 1)); fi
  fi
fi
echo "cli e2e: $fails failed"
[[ $fails -eq 0 ]]
