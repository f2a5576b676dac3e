#!/usr/bin/env bash
# The precision-drift baselines of the project's own CI: the report of every sample
# (samples/models/ORDER) at O0, O1 and O2 in float16 and bfloat16, trained on the CPU
# with the model file's defaults, kept in samples/baselines/<sample>.<config>.json.
#
#   scripts/baselines.sh check    re-runs every configuration and fails when its report
#                                 is not the committed one, value for value (the same
#                                 build gives the same report on every x86-64 CPU; the
#                                 spread aside, which only `update` trains), when
#                                 `ampcheck diff` finds drift against it (docs/diff.md:
#                                 its output, judged against the recorded spread, says
#                                 whether a change is beyond training noise), or when a
#                                 stable sample misses the accuracy its model file
#                                 documents ("expect").
#   scripts/baselines.sh update   regenerates the reports, each with the spread of
#                                 $SEEDS seeds (default 3); `update SAMPLE...` those
#                                 samples' alone (`check SAMPLE...` checks those alone). A change that moves any
#                                 number fails `check` until this is run and the new
#                                 reports are committed, deliberately, with the reason.
#   scripts/baselines.sh table    prints the README's accuracy table from the committed
#                                 reports (final loss / accuracy per configuration).
#
# Environment: AMPCHECK (the binary; default: build it with scripts/build.sh),
# AMPCHECK_JOBS (parallel runs, default: the number of cores), WORK (scratch folder),
# SEEDS (update: the seeds of each spread).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=${1:-}
[[ $mode == check || $mode == update || $mode == table ]] || { echo "usage: scripts/baselines.sh check|update|table [SAMPLE...]" >&2; exit 2; }
# Named samples: check or update those alone (update keeps every other sample's reports).
shift
only=("$@")
for s in "${only[@]}"; do
  grep -qx "$s" "$root/samples/models/ORDER" || { echo "baselines: $s is not a sample of samples/models/ORDER" >&2; exit 2; }
done

if [[ $mode == table ]]; then
  exec python3 - "$root/samples" <<'EOF'
import json, sys
samples = sys.argv[1]
configs = ["O0", "O1-fp16", "O2-fp16", "O1-bf16", "O2-bf16"]
print("| sample | " + " | ".join(configs) + " |")
print("|---|" + "---|" * len(configs))
for name in open(f"{samples}/models/ORDER").read().split():
    cells = []
    for c in configs:
        r = json.load(open(f"{samples}/baselines/{name}.{c}.json"))
        s = r["summary"]
        loss = s["final_loss"]  # a number, or "NaN"/"Infinity" as the report writes non-finite values
        loss = f"{loss:.3g}" if isinstance(loss, (int, float)) else loss.lower()
        cells.append(f"{loss} / {100 * s['accuracy']:.1f}%" + (" ✗" if s["verdict"] in ("failed", "gradient_underflow") else ""))
    print(f"| `{name}` | " + " | ".join(cells) + " |")
EOF
fi

if [[ -z ${AMPCHECK:-} ]]; then
  bash "$root/scripts/build.sh" ampcheck >&2
  AMPCHECK=$root/build/cli/ampcheck
fi
export AMPCHECK
baselines=$root/samples/baselines
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
configs=("O0 float16" "O1 float16" "O2 float16" "O1 bfloat16" "O2 bfloat16")
# O0, O1-fp16, O2-bf16, ...
config_name() { if [[ $1 == O0 ]]; then echo O0; elif [[ $2 == float16 ]]; then echo "$1-fp16"; else echo "$1-bf16"; fi; }

# One run: writes $work/<sample>.<config>.json; exit 0 (healthy) and 1 (the verdict says
# the run failed: the unstable samples do) both leave a report.
run_one() {
  local sample=$1 level=$2 dtype=$3 name=$4
  local rc=0
  "$AMPCHECK" run --model "$sample" --level "$level" --dtype "$dtype" --inspect full --quiet --seeds "$seeds" \
    --report "$work/$sample.$name.json" >"$work/$sample.$name.txt" 2>&1 || rc=$?
  if [[ $rc -gt 1 ]]; then
    echo "baselines: ampcheck run --model $sample --level $level --dtype $dtype exited $rc:" >&2
    cat "$work/$sample.$name.txt" >&2
    return 1
  fi
}
seeds=1
[[ $mode == update ]] && seeds=${SEEDS:-3}
# $jobs runs at a time share the CPUs: each gets its share of threads (a report is the
# same bytes for any thread count), not a pool as wide as the machine whose threads
# would wait for each other's CPUs (measured on 2 cores: 16 threads per run made the
# check 3x slower than 2).
jobs_at_once=${AMPCHECK_JOBS:-$(nproc)}
export AMPCHECK_NUM_THREADS=${AMPCHECK_NUM_THREADS:-$(( $(nproc) / jobs_at_once > 1 ? $(nproc) / jobs_at_once : 1 ))}
export -f run_one
export work seeds

jobs=()
while read -r sample; do
  [[ -z $sample ]] && continue
  [[ ${#only[@]} -gt 0 && " ${only[*]} " != *" $sample "* ]] && continue
  for c in "${configs[@]}"; do
    read -r level dtype <<<"$c"
    jobs+=("$sample $level $dtype $(config_name "$level" "$dtype")")
  done
done <"$root/samples/models/ORDER"

printf '%s\n' "${jobs[@]}" | xargs -P "$jobs_at_once" -L 1 bash -c 'run_one "$@"' _

if [[ $mode == update ]]; then
  mkdir -p "$baselines"
  [[ ${#only[@]} -eq 0 ]] && rm -f "$baselines"/*.json
  for j in "${jobs[@]}"; do
    read -r sample _ _ name <<<"$j"
    cp "$work/$sample.$name.json" "$baselines/$sample.$name.json"
  done
  echo "baselines: wrote ${#jobs[@]} reports (each with the spread of $seeds seeds) to samples/baselines/; review and commit them with the reason"
  exit 0
fi

fails=0
for j in "${jobs[@]}"; do
  read -r sample level dtype name <<<"$j"
  base=$baselines/$sample.$name.json
  if [[ ! -f $base ]]; then
    echo "FAIL: $sample $name: no baseline $base (run scripts/baselines.sh update and commit it)"
    fails=$((fails + 1))
    continue
  fi
  same=1
  python3 - "$base" "$work/$sample.$name.json" <<'EOF' || same=0
import json, sys
base, now = (json.load(open(p)) for p in sys.argv[1:3])
base.pop("spread", None)
now.pop("spread", None)
# The GPU architectures the binary was built for change no value of a CPU run (CI builds
# sm_75 alone, a user's build sm_75/80/90): the rest of the report must be the same bytes.
for r in (base, now):
    r.get("run", {}).get("versions", {}).pop("build", None)
if base != now:
    diffs = [k for k in sorted(set(base) | set(now)) if base.get(k) != now.get(k)]
    print(f"  the report differs from the committed one in: {', '.join(diffs)}")
    sys.exit(1)
EOF
  if out=$("$AMPCHECK" diff "$base" "$work/$sample.$name.json" 2>&1) && [[ $same -eq 1 ]]; then
    echo "ok: $sample $name: the committed report, value for value"
  elif [[ $same -eq 0 ]]; then
    echo "FAIL: $sample $name: not the committed report (the same build must reproduce it on any CPU); ampcheck diff says:"
    echo "$out"
    fails=$((fails + 1))
  else
    echo "FAIL: $sample $name drifted from its baseline:"
    echo "$out"
    fails=$((fails + 1))
  fi
done

# The accuracy each stable sample documents: reached at O0, kept within the tolerance at
# O1 and O2 in both dtypes.
python3 - "$root/samples/models" "$work" "$root/samples/models/ORDER" <<'EOF' || fails=$((fails + 1))
import json, sys
models, work, order = sys.argv[1:4]
bad = 0
for sample in open(order).read().split():
    expect = json.load(open(f"{models}/{sample}.json")).get("expect", {})
    if "accuracy" not in expect:
        continue
    acc = lambda name: json.load(open(f"{work}/{sample}.{name}.json"))["summary"]["accuracy"]
    ref, want, tol = acc("O0"), expect["accuracy"], expect["tolerance"]
    if ref < want:
        print(f"FAIL: {sample}: O0 accuracy {ref:.4f} is below the documented {want}"); bad += 1
    else:
        print(f"ok: {sample}: O0 accuracy {ref:.4f} >= {want}")
    for name in ["O1-fp16", "O2-fp16", "O1-bf16", "O2-bf16"]:
        a = acc(name)
        if abs(a - ref) > tol:
            print(f"FAIL: {sample} {name}: accuracy {a:.4f} is {abs(a - ref):.4f} from O0's {ref:.4f} (tolerance {tol})"); bad += 1
        else:
            print(f"ok: {sample} {name}: accuracy {a:.4f} within {tol} of O0's {ref:.4f}")
sys.exit(1 if bad else 0)
EOF
if [[ $fails -gt 0 ]]; then
  echo "baselines: $fails check(s) failed. If the change is meant to move precision, run"
  echo "  bash scripts/baselines.sh update"
  echo "and commit samples/baselines/ with the reason."
  exit 1
fi
echo "baselines: all ${#jobs[@]} runs reproduce their baselines"
