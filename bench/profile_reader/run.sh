#!/usr/bin/env bash
# The profile-reader benchmark: a generated 100 MB PyTorch profiler trace (make_trace.py),
# read by ampcheck (ampcheck_bench_profile_reader: read and attribute, then the whole
# check) and loaded by HTA (hta_load.py, HolisticTraceAnalysis from PyPI in a venv under
# bench/), each RUNS times in fresh processes, alternating; the medians of time and the
# peak memory, and the ratios of the two measured in this run, go to
# bench/results/<date>-profile-reader-<machine>.md.
#
# Environment: BENCH (the ampcheck_bench_profile_reader binary; default build/bench/...),
# WORK (scratch folder; default a temporary one), MB (trace size, default 100), RUNS
# (default 3), OUT (the results file).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bench=${BENCH:-$root/build/bench/ampcheck_bench_profile_reader}
work=${WORK:-$(mktemp -d)}
mb=${MB:-100}
runs=${RUNS:-3}
venv=$root/bench/.venv-hta
if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q HolisticTraceAnalysis
fi
mkdir -p "$work/trace"
trace=$work/trace/rank0.json
[[ -f $trace ]] || python3 "$root/bench/profile_reader/make_trace.py" "$trace" --mb "$mb"

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
cores=$(nproc)
machine=$(echo "$cpu" | tr 'A-Z' 'a-z' | sed -E 's/\(r\)|\(tm\)|[0-9]+-core processor|processor//g; s/[^a-z0-9]+/-/g; s/^-|-$//g' | cut -d- -f1-2)
out=${OUT:-$root/bench/results/$(date +%Y-%m-%d)-profile-reader-$machine.md}

ours=() peers=()
for ((i = 0; i < runs; i++)); do
  ours+=("$("$bench" "$trace")")
  peers+=("$("$venv/bin/python" "$root/bench/profile_reader/hta_load.py" "$work/trace" 2>/dev/null | tail -1)")
done
python3 - "$out" "$trace" "$cpu" "$cores" "$runs" "${#ours[@]}" "${ours[@]}" "${peers[@]}" <<'PY'
import json, os, statistics, sys
out, trace, cpu, cores, runs, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
ours = [json.loads(x) for x in sys.argv[7:7 + n]]
peers = [json.loads(x) for x in sys.argv[7 + n:]]
size = os.path.getsize(trace)
med = statistics.median
read = med(o["read_seconds"] for o in ours)
check = med(o["check_seconds"] for o in ours)
rss = max(o["peak_rss"] for o in ours)
hta = med(p["seconds"] for p in peers)
hta_rss = max(p["peak_rss_self"] + p["peak_rss_children"] for p in peers)
mib = lambda b: b / 2**20
lines = [
    "# Profile reader: a 100 MB PyTorch profiler trace, ampcheck beside HTA",
    "",
    f"Machine: {cpu}, {cores} cores (shared with other work; figures are medians of {runs} runs in fresh processes,",
    "ampcheck and HTA alternating, so that both saw the same load). Measured with `bench/profile_reader/run.sh`.",
    "",
    f"The trace: `bench/profile_reader/make_trace.py --mb 100`, {mib(size):.1f} MiB of Kineto 2022+ JSON "
    f"(a transformer training step after step: nn.Module frames, cpu_ops with Input Dims / Input type / Concrete "
    f"Inputs, the autograd thread's nodes, launches, kernels and ac2g flows); {ours[0]['kept_events']} ops, kernels "
    f"and launches kept by ampcheck; HTA's table holds {peers[0]['events']} events.",
    "",
    "| | time | peak memory | memory / file |",
    "| --- | ---: | ---: | ---: |",
    f"| ampcheck: read and attribute (`profiles::read_profiles`) | {read:.2f} s | {mib(rss):.0f} MiB | {rss / size:.2f}x |",
    f"| ampcheck: the whole check after it (`inspector::check_profiles`) | {check:.2f} s | (same process) | |",
    f"| HTA: `TraceAnalysis(trace_dir=...)` | {hta:.2f} s | {mib(hta_rss):.0f} MiB | {hta_rss / size:.2f}x |",
    "",
    f"Ratios measured in this run: HTA's load takes **{hta / read:.1f}x** ampcheck's read "
    f"({hta / (read + check):.1f}x read and check together) and **{hta_rss / rss:.1f}x** its peak memory.",
    "",
    "Targets (issue 29): a 100 MB trace in at most 3 s on 2 cores, memory within 2x the file: "
    f"{'met' if read <= 3 else 'NOT met'} ({read:.2f} s), {'met' if rss <= 2 * size else 'NOT met'} ({rss / size:.2f}x).",
    "",
    "Raw runs (ampcheck, then HTA):",
    "",
    "```",
    *[json.dumps(o) for o in ours],
    *[json.dumps(p) for p in peers],
    "```",
]
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
