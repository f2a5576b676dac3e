#!/usr/bin/env bash
# Everything the CUDA backend is checked by, in one command, on a machine with an NVIDIA
# GPU (there is none in the project's CI: run it by hand on a GPU machine):
#   1. a CUDA build (scripts/build.sh with AMPCHECK_CUDA=ON: the build fails without the
#      toolkit instead of quietly dropping the GPU);
#   2. the GPU tests (every test binary's CUDA, GPU and CUPTI cases, which skip without a
#      GPU; FULL_CTEST=1 runs the whole ctest suite instead), and the GPU libraries loaded
#      where the GPU is first used, not at start;
#   3. `ampcheck selftest --device cuda`: every op, dtype and case, forward and backward,
#      against the CPU reference (engine/parity.h);
#   4. `ampcheck run --device cuda` on every sample (samples/models/ORDER) at O0, O1 and
#      O2, each beside the same run on the CPU: the verdict (and exit code) must agree;
#   5. step times on the GPU: each sample at O0/O1/O2, and PyTorch on the same model
#      (fp32, and autocast float16 + GradScaler) where `import torch` works with CUDA;
#   6. which kernels really ran (CUPTI), and fp8 on cuBLASLt (the fp8 samples' GEMMs read
#      as fp8 on tensor cores, the CPU's verdict and loss);
#   9. the PyTorch recorder on CUDA: the planted scripts named as on the CPU, bisect-nan
#      --script, a compiled model, record --kernels, the recorder's overhead;
#  10. real sizes (issue 44, bench/real_models.py): ResNet-50 (batch 128, 224x224), GPT-2
#      small (batch 8, sequence 1024) and BERT-base (batch 32, sequence 512) built and
#      exported to ONNX here by PyTorch, trained by ampcheck at O0, O2 fp16 and O2 bf16 and
#      by PyTorch (eager fp32, autocast fp16 + GradScaler, autocast bf16, torch.compile):
#      step time, peak device memory, GPU time per kernel family (CUPTI), the issue's aims;
#  11. several processes on the GPU: data parallel with 2 and 4 ranks, the found_inf
#      consensus and a planted divergence read as on the CPU.
# Writes bench/results/DATE-gpu-<gpu name>.{md,json} (naming the GPU, driver and
# versions, from `ampcheck doctor --json`) even when a check fails, then exits 1 if any
# did. Without a GPU it exits 1 at once, saying so.
#
#   scripts/gpu-check.sh
# Environment: AMPCHECK_BUILD_DIR (default build-gpu), AMPCHECK_PREBUILT=1 (use that build
# as it is: no bootstrap, no build; for a GPU machine without network or Debian packages,
# given a build made elsewhere), AMPCHECK_JOBS (build and test parallelism), WORK (scratch
# folder), OUT_DIR (default bench/results), BENCH_STEPS (steps per timing, default 30),
# SAMPLES (default: every sample), BENCH_SAMPLES (the samples timed; default SAMPLES),
# SKIP_CTEST=1 (to iterate on the later parts), FULL_CTEST=1 (every test, not only the GPU
# ones), RUN_JOBS (sample runs at once, default 8), ONNX_MODELS (a folder bench/onnx/export.py
# wrote: its models' forward on the GPU against PyTorch's outputs); step 10: REAL_MODELS
# (default resnet50,gpt2,bert; - for none), REAL_SCALE (full, the issue's sizes; tiny),
# REAL_SIZES (overrides: gpt2.batch=4,bert.seq=256), REAL_BUDGET (seconds for the step,
# default 240), REAL_MODEL_TIMEOUT (seconds per model once exported, default 75),
# REAL_STEPS and REAL_WARMUP (timed and warm-up steps, default 5 and 3), REAL_COMPILE=0
# (no torch.compile column).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() {
  echo "gpu-check: $*" >&2
  exit 1
}

# ---- 0. a GPU at all? Asked before a build of several minutes.
if command -v nvidia-smi >/dev/null 2>&1; then
  if ! gpus=$(nvidia-smi -L 2>&1) || [[ $gpus != *GPU* ]]; then
    die "NO GPU: nvidia-smi lists none (${gpus:-no output}); this script checks the CUDA backend and needs an NVIDIA GPU with its driver (the CPU checks are scripts/test.sh)"
  fi
elif [[ ! -e /dev/nvidia0 ]]; then
  die "NO GPU: no nvidia-smi and no /dev/nvidia0 on this machine; this script checks the CUDA backend and needs an NVIDIA GPU with its driver (the CPU checks are scripts/test.sh)"
fi

dir=${AMPCHECK_BUILD_DIR:-$root/build-gpu}
work=${WORK:-$(mktemp -d)}
out_dir=${OUT_DIR:-$root/bench/results}
mkdir -p "$work" "$out_dir"
jobs=${AMPCHECK_JOBS:-$(nproc)}

# ---- 1. the CUDA build
if [[ ${AMPCHECK_PREBUILT:-0} == 1 ]]; then
  [[ -x $dir/cli/ampcheck ]] || die "AMPCHECK_PREBUILT=1 but $dir/cli/ampcheck is not there: build with AMPCHECK_CUDA=ON first"
else
  bash "$root/scripts/bootstrap.sh"
  AMPCHECK_CUDA=ON AMPCHECK_BUILD_DIR=$dir AMPCHECK_JOBS=$jobs bash "$root/scripts/build.sh" \
    || die "the CUDA build failed (AMPCHECK_CUDA=ON, $dir); see above"
fi
ampcheck=$dir/cli/ampcheck

# The runtime's view decides: a driver without a usable device, a device the build's
# architectures do not cover, a container without the device nodes.
"$ampcheck" doctor --json >"$work/doctor.json" || die "ampcheck doctor --json failed (exit $?)"
gpu_count=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["cuda"]["gpus"]))' "$work/doctor.json")
if [[ $gpu_count == 0 ]]; then
  why=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cuda"]["no_device"])' "$work/doctor.json")
  die "NO GPU usable by ampcheck: $why"
fi
"$ampcheck" doctor

# ---- 2. the tests. The GPU cases of every test binary (their names say Cuda, Gpu or
# Cupti, or they are the kernel families' device cases); the CPU suite is CI's.
gpu_filter='*Cuda*:*Gpu*:Cupti*:CliRun.Cupti*:ConvPoolKernels.*:GemmKernels.*:ShapeKernels.*'
ctest_rc=0
if [[ ${SKIP_CTEST:-0} != 1 && ${FULL_CTEST:-0} == 1 ]]; then
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" 2>&1 | tee "$work/ctest.log" || ctest_rc=$?
elif [[ ${SKIP_CTEST:-0} != 1 ]]; then
  # The binaries side by side (the GPU takes their kernels in turn; the CPU references
  # use the machine's cores), each into its own log, joined in a fixed order after.
  : >"$work/ctest.log"
  pids=() logs=()
  for t in "$dir"/tests/ampcheck_*_tests; do
    [[ -x $t ]] || continue
    log=$work/$(basename "$t").log
    ( echo "== $(basename "$t") --gtest_filter=$gpu_filter"
      "$t" --gtest_filter="$gpu_filter" --gtest_brief=1 2>&1 ) >"$log" &
    pids+=($!) logs+=("$log")
  done
else
  echo "SKIP_CTEST=1: ctest not run" | tee "$work/ctest.log"
  ctest_rc=skipped
fi

# ---- 3. backend parity, beside the tests
selftest_rc=0
"$ampcheck" selftest --device cuda --json "$work/selftest.json" >"$work/selftest.txt" 2>&1 || selftest_rc=$?
tail -n 1 "$work/selftest.txt"
grep -E ' (FAIL|SKIP) ' "$work/selftest.txt" || true

if [[ ${SKIP_CTEST:-0} != 1 && ${FULL_CTEST:-0} != 1 ]]; then
  passed=0 failed=0
  for i in "${!pids[@]}"; do
    if wait "${pids[$i]}"; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1)) ctest_rc=1
    fi
    cat "${logs[$i]}" | tee -a "$work/ctest.log"
  done
  echo "GPU tests: $passed of $((passed + failed)) test binaries passed (gtest filter $gpu_filter): $([[ $failed == 0 ]] && echo 100% tests passed || echo "$failed binaries with failures")" | tee -a "$work/ctest.log"
fi

# The GPU libraries are loaded where the GPU is first used (kernels/cuda/gpu_libraries.h):
# none at start, with every library hidden the commands that need no GPU still run and
# --device cuda names the missing one (tests/e2e/gpu_libraries.sh), and a GPU run loads
# cuBLASLt, cuDNN and CUPTI (the dynamic loader's own log) and trains.
libs_log=$work/gpu_libraries.log
if AMPCHECK=$ampcheck WORK=$work/gpu_libraries bash "$root/tests/e2e/gpu_libraries.sh" >"$libs_log" 2>&1 &&
   LD_DEBUG=libs "$ampcheck" run --device cuda --model mlp --steps 2 --quiet 2>&1 >/dev/null |
     grep -E 'find library=(libcublasLt|libcudnn|libcupti)\.' | sort -u | tee -a "$libs_log" | grep -q libcupti; then
  echo "GPU libraries: none at start; loaded at the first GPU use" | tee -a "$work/ctest.log"
else
  cat "$libs_log"
  echo "GPU libraries: FAILED, the loading where the GPU is first used (see above)" | tee -a "$work/ctest.log"
  [[ $ctest_rc == skipped ]] || ctest_rc=1
fi

# ---- 4, 5 and the results files: runs beside the CPU, step times, the report
export AMPCHECK=$ampcheck WORK=$work OUT_DIR=$out_dir ROOT=$root CTEST_RC=$ctest_rc SELFTEST_RC=$selftest_rc
exec python3 - <<'EOF'
import datetime, json, os, re, statistics, subprocess, sys, time

ampcheck, work, out_dir, root = (os.environ[k] for k in ("AMPCHECK", "WORK", "OUT_DIR", "ROOT"))
steps = int(os.environ.get("BENCH_STEPS", "30"))
levels = ["O0", "O1", "O2"]
samples = os.environ.get("SAMPLES", "").split() or open(f"{root}/samples/models/ORDER").read().split()
problems = []


def run(args, **kw):
    return subprocess.run([ampcheck, *args], capture_output=True, text=True, **kw)


# ---- 4. every sample at O0/O1/O2 on the GPU, beside the CPU
def summary(device, sample, level):
    # The CPU runs share the machine's cores (threads change no result: the determinism rule).
    env = dict(os.environ, AMPCHECK_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // jobs)))
    r = run(["run", "--model", sample, "--level", level, "--dtype", "float16", "--device", device, "--json", "--quiet"],
            env=env)
    row = {"rc": r.returncode}
    if r.returncode in (0, 1):
        try:
            s = json.loads(r.stdout)["summary"]
            row.update(verdict=s["verdict"], final_loss=s["final_loss"], accuracy=s["accuracy"])
        except (ValueError, KeyError) as e:
            row["error"] = f"unreadable report: {e}"
    else:
        row["error"] = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
    return row


# Several at once: the CPU runs on the machine's cores, the GPU runs side by side on the GPU.
from concurrent.futures import ThreadPoolExecutor
jobs = int(os.environ.get("RUN_JOBS", "8"))
# Each pair is printed as it is read (in a fixed order), so that a run cut short shows what it did.
pool = ThreadPoolExecutor(max_workers=jobs)
pending = {(sample, level, device): pool.submit(summary, device, sample, level)
           for sample in samples for level in levels for device in ("cuda", "cpu")}
runs = []
for sample in samples:
    for level in levels:
        gpu, cpu = pending[(sample, level, "cuda")].result(), pending[(sample, level, "cpu")].result()
        agree = "error" not in gpu and gpu["rc"] == cpu["rc"] and gpu.get("verdict") == cpu.get("verdict")
        runs.append({"sample": sample, "level": level, "dtype": "float16", "cuda": gpu, "cpu": cpu, "agree": agree})
        print(f"run {sample} {level}: cuda {gpu.get('verdict', gpu.get('error'))}, cpu {cpu.get('verdict', cpu.get('error'))}"
              + ("" if agree else "  <-- DIFFERS"), flush=True)
        if not agree:
            problems.append(f"ampcheck run --model {sample} --level {level} --device cuda: "
                            f"{gpu.get('verdict', gpu.get('error'))} (exit {gpu['rc']}) where the CPU gives "
                            f"{cpu.get('verdict', cpu.get('error'))} (exit {cpu['rc']})")
pool.shutdown()


# ---- 5. step times. ampcheck: bench/peer_step.cpp's worker, the step `run --inspect off`
# trains, timed in the process step by step (each step ends with loss.item(), so the GPU's
# work is in it): the median after 10 warm-up steps.
peer_step = os.path.join(os.path.dirname(os.path.dirname(ampcheck)), "bench", "ampcheck_bench_peer_step")


def ampcheck_step_ms(sample, level):
    if not os.access(peer_step, os.X_OK):
        raise RuntimeError(f"{peer_step} is not built")
    r = subprocess.run([peer_step, "--model", f"{root}/samples/models/{sample}.json", "--level", level, "--dtype", "float16",
                        "--device", "cuda"], input=f"steps 10\nsteps {4 * steps}\n", capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or ["?"])[-1])
    return statistics.median(json.loads(r.stdout.strip().splitlines()[-1])["ms"])


# PyTorch: bench/peers/frameworks.py builds the model file's architecture and the step a
# user writes (zero_grad, autocast forward and loss, GradScaler, Adam, loss.item()) for
# the CPU; here in a subprocess whose default device is CUDA and whose autocast and
# GradScaler are CUDA's, so the model and step are the same ones.
TORCH_STEP = r'''
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import torch, frameworks
torch.set_default_device("cuda")
_autocast, _scaler = torch.autocast, torch.amp.GradScaler
torch.autocast = lambda device_type, **kw: _autocast("cuda", **kw)
torch.amp.GradScaler = lambda device="cuda", **kw: _scaler("cuda", **kw)
model = frameworks.load_model_file(sys.argv[2])
step = frameworks.torch_worker(model, sys.argv[3], model["train"]["batch"], model["train"]["lr"], 1)
for _ in range(10):
    step()
ms = []
for _ in range(int(sys.argv[4])):
    t = time.perf_counter(); step(); ms.append((time.perf_counter() - t) * 1e3)
print(json.dumps({"ms": statistics.median(ms)}))
'''
probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"],
                       capture_output=True, text=True)
torch_version = probe.stdout.split()[0] if probe.returncode == 0 and probe.stdout else None
torch_cuda = probe.returncode == 0 and probe.stdout.split()[-1] == "True"
torch_note = None if torch_cuda else ("PyTorch with CUDA not importable: " + (
    "torch.cuda.is_available() is False" if probe.returncode == 0 else (probe.stderr.strip().splitlines() or ["?"])[-1]))


def torch_step_ms(sample, mode):
    r = subprocess.run([sys.executable, "-c", TORCH_STEP, f"{root}/bench/peers", f"{root}/samples/models/{sample}.json",
                        mode, str(4 * steps)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or ["?"])[-1])
    return json.loads(r.stdout.strip().splitlines()[-1])["ms"]


bench = []
bench_samples = os.environ.get("BENCH_SAMPLES", "").split() or samples
if bench_samples == ["-"]:
    bench_samples = []
for sample in bench_samples:
    row = {"sample": sample}
    for level in levels:
        try:
            row[f"ampcheck_{level}_ms"] = ampcheck_step_ms(sample, level)
        except RuntimeError as e:
            row[f"ampcheck_{level}_error"] = str(e)
    if torch_cuda:
        for mode in ("fp32", "fp16"):
            try:
                row[f"torch_{mode}_ms"] = torch_step_ms(sample, mode)
            except (RuntimeError, ValueError) as e:
                row[f"torch_{mode}_error"] = str(e)
    bench.append(row)
    print(f"bench {sample}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k}: {v}"
                                          for k, v in row.items() if k != "sample"), flush=True)

# ---- 6. which kernels really ran (CUPTI, issue 17): the cnn sample at O2 in float16 with
# its JSON, HTML and Chrome-trace reports; its conv2d and linear instances must show f16
# tensor-core kernels, and every finding of the kernel check is listed.
cupti = {"command": "ampcheck run --model cnn --level O2 --dtype float16 --device cuda --inspect trace --steps 20"}
r = run(["run", "--model", "cnn", "--level", "O2", "--dtype", "float16", "--device", "cuda", "--inspect", "trace",
         "--steps", "20", "--quiet", "--report", f"{work}/cnn-o2.json", "--html", f"{work}/cnn-o2.html",
         "--chrome-trace", f"{work}/cnn-o2-trace.json"])
cupti["rc"] = r.returncode
try:
    rep = json.load(open(f"{work}/cnn-o2.json"))
    k = rep.get("kernels") or {}
    cupti["traced"] = k.get("traced", False)
    cupti["not_traced"] = k.get("not_traced", "")
    cupti["counts"] = {key: k.get(key) for key in ("kernels", "memcpys", "memsets", "attributed", "inspector",
                                                   "unattributed", "dropped", "invalid", "instances_checked")}
    cupti["findings"] = [f["severity"] + ": " + f["text"] for f in k.get("findings", [])]
    cupti["by_type"] = k.get("by_type", [])
    seen = {}
    for op in rep["ops"]:
        for g in op.get("gpu_kernels") or []:
            if g["kind"] in ("gemm", "conv fprop", "conv dgrad", "conv wgrad", "conv"):
                seen.setdefault(op["type"], []).append(g)
    cupti["matrix_kernels"] = {t: sorted({(g["name"][:120], g["input"], g["tensor_cores"]) for g in gs}) for t, gs in seen.items()}
    for t in ("conv2d", "linear"):
        ok = any(g["input"] == "f16" and g["tensor_cores"] == "yes" for typ in (t, t + "_grad") for g in seen.get(typ, []))
        cupti[f"{t}_fp16_tensor_cores"] = ok
        if not ok:
            problems.append(f"CUPTI: no f16 tensor-core kernel seen for {t} in the cnn sample at O2")
    trace_doc = json.load(open(f"{work}/cnn-o2-trace.json"))
    cupti["chrome_trace_gpu_spans"] = sum(1 for e in trace_doc["traceEvents"] if e.get("ph") == "X" and e.get("tid") == 1)
    html = open(f"{work}/cnn-o2.html").read()
    cupti["html_kernels_section"] = 'id="kernels"' in html
    if not cupti["traced"]:
        problems.append("CUPTI: the cnn run's kernels were not traced: " + cupti["not_traced"])
except (OSError, ValueError, KeyError) as e:
    cupti["error"] = f"{type(e).__name__}: {e}; stderr: {r.stderr.strip()[-500:]}"
    problems.append("CUPTI: " + cupti["error"])
print("cupti: " + json.dumps({k: v for k, v in cupti.items() if k not in ("by_type",)})[:3000], flush=True)

# ---- 6b. fp8 on cuBLASLt (issue 33): the fp8 transformer sample (DelayedScaling) and the
# same under Float8CurrentScaling, traced; its fp8_linear instances must show fp8
# tensor-core GEMMs (forward and backward), the run's verdict must be the CPU's, and its
# final loss within 10% of the CPU run's (fp8 GEMM accumulation orders differ; the casts do
# not: parity per op is ParityCuda's).
fp8 = {}
for name, extra in (("delayed", []), ("current", ["--fp8", "Float8CurrentScaling()"])):
    entry = {}
    gpu_json, cpu_json = f"{work}/fp8-{name}-gpu.json", f"{work}/fp8-{name}-cpu.json"
    g = run(["run", "--model", "fp8_transformer", "--device", "cuda", "--inspect", "trace", "--steps", "40", "--quiet",
             "--report", gpu_json] + extra)
    c = run(["run", "--model", "fp8_transformer", "--device", "cpu", "--inspect", "stats", "--steps", "40", "--quiet",
             "--report", cpu_json] + extra)
    entry["rc"] = [g.returncode, c.returncode]
    try:
        gr, cr = json.load(open(gpu_json)), json.load(open(cpu_json))
        entry["verdicts"] = [gr["summary"]["verdict"], cr["summary"]["verdict"]]
        entry["final_loss"] = [gr["summary"]["final_loss"], cr["summary"]["final_loss"]]
        kernels = {}
        for op in gr["ops"]:
            if op["type"].startswith("fp8_linear"):
                for k in op.get("gpu_kernels") or []:
                    if k["kind"] == "gemm":
                        kernels.setdefault(op["type"], set()).add((k["name"][:100], k["input"], k["tensor_cores"]))
        entry["gemms"] = {t: sorted(v) for t, v in kernels.items()}
        for t in ("fp8_linear", "fp8_linear_grad"):
            if not any(inp == "fp8" and tc == "yes" for _, inp, tc in kernels.get(t, [])):
                problems.append(f"fp8 ({name}): no fp8 tensor-core GEMM read for {t} on the GPU")
        if entry["verdicts"][0] != entry["verdicts"][1]:
            problems.append(f"fp8 ({name}): verdict {entry['verdicts'][0]} on the GPU, {entry['verdicts'][1]} on the CPU")
        gl, cl = entry["final_loss"]
        if not (isinstance(gl, (int, float)) and isinstance(cl, (int, float)) and abs(gl - cl) <= 0.1 * abs(cl)):
            problems.append(f"fp8 ({name}): final loss {gl} on the GPU, {cl} on the CPU")
    except (OSError, ValueError, KeyError) as e:
        entry["error"] = f"{type(e).__name__}: {e}; stderr: {g.stderr.strip()[-500:]}"
        problems.append(f"fp8 ({name}): " + entry["error"])
    fp8[name] = entry
# MXFP8's block-scaled GEMMs are the CPU's: --device cuda refuses it naming --device cpu.
m = run(["run", "--model", "fp8_transformer", "--device", "cuda", "--fp8", "MXFP8BlockScaling()", "--steps", "2",
         "--quiet"])
fp8["mxfp8_on_gpu"] = {"rc": m.returncode, "stderr": m.stderr.strip()[-300:]}
if m.returncode != 2 or "--device cpu" not in m.stderr:
    problems.append(f"fp8 (MXFP8 on the GPU): exit {m.returncode}, expected 2 naming --device cpu: {m.stderr.strip()[-300:]}")
print("fp8: " + json.dumps(fp8)[:3000], flush=True)

# ---- 7. the inspector's overhead on the GPU, CUPTI off and on (bench/inspector_bench.cpp)
overhead = {}
inspector_bench = os.path.join(os.path.dirname(peer_step), "ampcheck_bench_inspector")
if os.access(inspector_bench, os.X_OK):
    r = subprocess.run([inspector_bench, "--device=cuda", "--benchmark_repetitions=5",
                        "--benchmark_enable_random_interleaving=true", "--benchmark_report_aggregates_only=true",
                        "--benchmark_min_time=0.2"], capture_output=True, text=True)
    overhead = {"rc": r.returncode, "summary": r.stdout[r.stdout.find("Inspector overhead"):].strip() if "Inspector overhead" in r.stdout
                else (r.stderr.strip().splitlines() or ["?"])[-1]}
    print("inspector overhead:\n" + overhead["summary"], flush=True)

# ---- 8. ONNX models on the GPU (ONNX_MODELS: the folder bench/onnx/export.py wrote, carried
# or exported on this machine): `ampcheck infer --device cuda` against PyTorch's f32 outputs
# (the bench's 1e-4 relative), and its O2 forward beside the CPU's O2 (the same fp16 rounding
# points, GEMM accumulation orders apart).
onnx_rows = []
models_dir = os.environ.get("ONNX_MODELS", "")
if models_dir:
    import glob
    try:
        import numpy as np
    except ImportError:
        np = None
        problems.append("ONNX: numpy is missing, the outputs cannot be compared")
    for model in sorted(glob.glob(os.path.join(models_dir, "*.onnx"))) if np else []:
        name = os.path.basename(model)[:-len(".onnx")]
        data, ref = os.path.join(models_dir, name + ".eval.npz"), os.path.join(models_dir, name + ".ref.npy")
        if not (os.path.exists(data) and os.path.exists(ref)):
            continue
        row, outs = {"model": name}, {}
        for device, level in (("cuda", "O0"), ("cuda", "O2"), ("cpu", "O2")):
            out = os.path.join(work, f"{name}.{device}.{level}.npy")
            r = run(["infer", "--model", model, "--data", data, "--out", out, "--device", device, "--level", level, "--quiet"])
            if r.returncode != 0:
                row[f"{device}_{level}_error"] = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
                continue
            outs[(device, level)] = np.load(out).astype(np.float64)
        want = np.load(ref).astype(np.float64)
        rel = lambda a, b: float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
        if ("cuda", "O0") in outs:
            row["cuda_f32_vs_torch"] = rel(outs[("cuda", "O0")], want)
            if row["cuda_f32_vs_torch"] >= 1e-4:
                problems.append(f"ONNX {name}: ampcheck infer --device cuda differs from PyTorch by {row['cuda_f32_vs_torch']:.3g} (>= 1e-4)")
        if ("cuda", "O2") in outs and ("cpu", "O2") in outs:
            row["cuda_o2_vs_cpu_o2"] = rel(outs[("cuda", "O2")], outs[("cpu", "O2")])
            row["cuda_o2_vs_torch_f32"] = rel(outs[("cuda", "O2")], want)
        problems += [f"ONNX {name}: {k[:-6]}: {v}" for k, v in row.items() if k.endswith("_error")]
        onnx_rows.append(row)
        print("onnx: " + json.dumps(row), flush=True)

# ---- 9. the PyTorch recorder on the GPU (issue 41): the planted scripts of
# recorder/tests/scripts with --device cuda must be named as on the CPU (their docstrings
# say what each plants), bisect-nan --script must find the custom Function on the GPU, the
# compiled model must stay compiled, record --kernels must read the bf16 BERT's kernels as
# bf16 on tensor cores, and the recorder's overhead on the GPU (a run and a heard step).
recorder_rows = []
if torch_cuda:
    scripts = f"{root}/recorder/tests/scripts"
    py = sys.executable
    cases = [
        ("custom_function", ["record", "--quiet", "--", py, f"{scripts}/custom_function_train.py", "--device", "cuda"],
         1, "exp in the backward of autograd.Function ScaledTanh in 'act'"),
        ("custom_function fixed", ["record", "--quiet", "--", py, f"{scripts}/custom_function_train.py", "--device", "cuda",
                                   "--fix"], 0, "verdict: healthy"),
        ("mse outside the model", ["record", "--quiet", "--", py, f"{scripts}/mse_outside_train.py", "--device", "cuda"],
         1, "the script cast its input 1 to float16"),
        ("compiled forward fault", ["record", "--quiet", "--", py, f"{scripts}/compile_train.py", "--device", "cuda",
                                    "--fault", "forward"], 1, "first produced by linear in module 'emb', forward, step 3"),
        ("compiled healthy", ["record", "--quiet", "--", py, f"{scripts}/compile_train.py", "--device", "cuda"], 0,
         "in the graphs torch.compile made of the model"),
        ("hf bert bf16 --kernels", ["record", "--quiet", "--kernels", "2", "--", py, f"{scripts}/hf_bert_loop.py",
                                    "--device", "cuda", "--steps", "4"], 0, "GPU kernels of steps 2-3"),
        ("bisect custom_function", ["bisect-nan", "--quiet", "--script",
                                    f"{py} {scripts}/custom_function_train.py --device cuda"], 0,
         "keep_fp32(model, ops=['ScaledTanh'])"),
    ]
    has_transformers = subprocess.run([py, "-c", "import transformers"], capture_output=True).returncode == 0
    if not has_transformers:
        cases = [c for c in cases if not c[0].startswith("hf ")]
        recorder_rows.append({"case": "hf bert bf16 --kernels", "rc": "-", "ok": False,
                              "verdict": "not run: transformers is not installed beside this torch"})
    for name, args, want_rc, want in cases:
        t0 = time.time()
        r = run(args, timeout=900)
        out = r.stdout + r.stderr
        row = {"case": name, "rc": r.returncode, "seconds": round(time.time() - t0, 1),
               "ok": r.returncode == want_rc and want in out,
               "verdict": next((l for l in out.splitlines() if l.startswith("verdict:")), "")}
        if not row["ok"]:
            row["tail"] = out.strip().splitlines()[-8:]
            problems.append(f"recorder on the GPU, {name}: exit {r.returncode} (want {want_rc}), "
                            f"{'found' if want in out else 'lacks'} '{want}'")
        recorder_rows.append(row)
        print("recorder: " + json.dumps(row), flush=True)
    # Not named `bench`: that is step 5's rows, which the results files write.
    overhead_run = subprocess.run([py, f"{root}/bench/recorder_overhead.py", "--device", "cuda", "--rounds", "3",
                                   "--steps", "5", "--run-steps", "256", "--only", "bert_block,gpt2_block,resnet18",
                                   "--out", f"{work}/recorder-overhead-gpu.md"], capture_output=True, text=True)
    recorder_rows.append({"case": "overhead", "rc": overhead_run.returncode,
                          "table": open(f"{work}/recorder-overhead-gpu.md").read() if overhead_run.returncode == 0 else
                          (overhead_run.stderr.strip().splitlines() or ["?"])[-1]})
    print("recorder overhead on the GPU:\n" + str(recorder_rows[-1]["table"]), flush=True)

# ---- 10. real sizes (issue 44): bench/real_models.py builds ResNet-50, GPT-2 small and
# BERT-base in PyTorch here (no file is carried), exports each with torch.onnx.export, and
# times ampcheck's training of the export (O0, O2 fp16, O2 bf16) beside PyTorch's of the
# module (eager fp32, autocast fp16 + GradScaler, autocast bf16, torch.compile): step time,
# peak device memory, GPU time per kernel family from CUPTI and torch.profiler, the aims.
# Within REAL_BUDGET seconds (one model's failure or slowness leaves the others theirs);
# its progress lines go to this log as they come.
real = {}
real_models = os.environ.get("REAL_MODELS", "resnet50,gpt2,bert")
if real_models in ("", "-", "none"):
    real = {"not_run": "REAL_MODELS=" + real_models}
elif not torch_cuda:
    real = {"not_run": torch_note}
else:
    real_out = f"{work}/real-models"
    real_budget = float(os.environ.get("REAL_BUDGET", "240"))
    cmd = [sys.executable, f"{root}/bench/real_models.py", "bench", "--ampcheck", ampcheck, "--peer-step", peer_step,
           "--out", real_out, "--device", "cuda", "--models", real_models, "--scale", os.environ.get("REAL_SCALE", "full"),
           "--sizes", os.environ.get("REAL_SIZES", ""), "--budget", str(real_budget),
           "--model-timeout", os.environ.get("REAL_MODEL_TIMEOUT", "75"), "--steps", os.environ.get("REAL_STEPS", "5"),
           "--warmup", os.environ.get("REAL_WARMUP", "3")] + ([] if os.environ.get("REAL_COMPILE", "1") != "0" else ["--no-compile"])
    t0 = time.time()
    try:
        r = subprocess.run(cmd, stderr=subprocess.PIPE, text=True, timeout=real_budget + 120)
        rc, why = r.returncode, (r.stderr.strip().splitlines() or ["(no message)"])[-1]
    except subprocess.TimeoutExpired:
        rc, why = "timeout", f"still running {real_budget + 120:.0f} s after its start"
    try:
        real = json.load(open(f"{real_out}/real_models.json"))
        real["markdown"] = open(f"{real_out}/real_models.md").read()
        problems += [f"real sizes: {p}" for p in real["problems"]]
    except (OSError, ValueError, KeyError) as e:
        real = {"error": f"bench/real_models.py exit {rc}: {why} ({type(e).__name__}: {e})"}
        problems.append("real sizes: " + real["error"])
    print(f"real sizes: {time.time() - t0:.0f} s, exit {rc}", flush=True)

# ---- 11. several processes on the GPU (issue 44): data parallel with 2 and 4 ranks and
# --device cuda. The gradient average goes over NCCL where every rank has a GPU of its own
# (NCCL takes one rank per GPU); ranks that share one GPU reduce over the host (MPI), and
# the run's distributed line says which. The found_inf consensus and the planted
# divergence (tests/data/dp/rank_overflow.json, --dp-no-inf-reduce: each rank acts on its
# own overflow) must read as on the CPU (tests/e2e/data_parallel.sh).
ranks = []
planted = f"{root}/tests/data/dp/rank_overflow.json"
for nproc in (2, 4):
    for name, args, want_rc, want in (
            ("cnn O2", ["run", "--model", "cnn", "--level", "O2", "--steps", "30"], 0, "all in agreement"),
            ("rank-local overflow", ["run", "--model", planted], 1, "alone"),
            ("found_inf not reduced", ["run", "--model", planted, "--dp-no-inf-reduce"], 1, "ranks disagreed at step 2")):
        report = f"{work}/ranks-{nproc}-{len(ranks)}.json"
        try:
            r = run(args + ["--nproc", str(nproc), "--device", "cuda", "--report", report], timeout=600)
            rc, out = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired:
            rc, out = "timeout", "still running after 600 s"
        row = {"case": f"{name}, {nproc} ranks", "rc": rc, "ok": rc == want_rc and want in out,
               "line": next((l.strip() for l in out.splitlines() if "Data parallel" in l or "ranks disagreed" in l), "")}
        if not row["ok"]:
            row["tail"] = out.strip().splitlines()[-6:]
            problems.append(f"ranks on the GPU, {row['case']}: exit {rc} (want {want_rc}), "
                            f"{'found' if want in out else 'lacks'} '{want}'")
        ranks.append(row)
        print("ranks: " + json.dumps(row), flush=True)

# ---- the results files
doctor = json.load(open(f"{work}/doctor.json"))
gpu = doctor["cuda"]["gpus"][0]
slug = re.sub(r"[^a-z0-9]+", "-", gpu["name"].lower()).strip("-")
date = datetime.date.today().isoformat()
ctest_rc = os.environ["CTEST_RC"]
ctest_log = open(f"{work}/ctest.log").read()
ctest_line = next((l.strip() for l in ctest_log.splitlines() if "tests passed" in l or l.startswith("GPU tests:")),
                  "ctest: no summary line")
ctest_failed = sorted({l.strip() for l in ctest_log.splitlines() if l.startswith("[  FAILED  ]") and "listed below" not in l})
if ctest_rc not in ("0", "skipped"):
    problems.append(f"ctest: {ctest_line}")
selftest_rc = int(os.environ["SELFTEST_RC"])
selftest = {"rc": selftest_rc}
try:
    st = json.load(open(f"{work}/selftest.json"))
    selftest["summary"] = st["summary"]
    selftest["not_passed"] = [r for r in st["results"] if r["status"] != "pass"]
except (OSError, ValueError) as e:
    lines = open(f"{work}/selftest.txt").read().strip().splitlines()
    selftest["error"] = lines[-1] if lines else str(e)
if selftest_rc != 0:
    problems.append("ampcheck selftest --device cuda: " + (
        "{failed} of {cases} cases failed".format(**selftest["summary"]) if "summary" in selftest else str(selftest.get("error"))))
try:
    compiler = subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
except (OSError, IndexError):
    compiler = "?"
versions = {"ampcheck": doctor["version"], "build": doctor["cuda"]["build"], "driver": doctor["cuda"]["driver_version"],
            "cuda_runtime": doctor["cuda"]["runtime_version"], "cublas": doctor["cuda"]["cublas_version"],
            "cudnn": doctor["cuda"]["cudnn_version"], "compiler": compiler, "python": sys.version.split()[0],
            "torch": torch_version or "not installed"}
doc = {"ampcheck_gpu_check": 1, "date": date, "gpu": gpu, "cpu": doctor["cpu"]["model"], "versions": versions,
       "ctest": {"rc": ctest_rc, "summary": ctest_line, "failed": ctest_failed}, "selftest": selftest, "runs": runs,
       "bench": {"steps": 4 * steps, "method": "median step after 10 warm-up steps, each ending with loss.item(): "
                 "ampcheck's bench/peer_step worker (the step of `run --inspect off`), PyTorch's step of the same model",
                 "torch_note": torch_note,
                 "rows": bench},
       "cupti": cupti, "fp8": fp8, "inspector_overhead": overhead, "onnx": onnx_rows, "recorder": recorder_rows,
       "real_models": {k: v for k, v in real.items() if k != "markdown"}, "ranks": ranks, "problems": problems}


def num(v):
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def ms(row, key):
    v = row.get(f"{key}_ms")
    return f"{v:.3f}" if v is not None else ("error" if f"{key}_error" in row else "-")


md = [f"# GPU check — {gpu['name']}, {date}", "",
      f"GPU: {gpu['name']} (compute capability {gpu['compute_capability']}, "
      f"{gpu['memory_bytes'] / 2**30:.1f} GiB, {gpu['multiprocessors']} SMs); CPU: {doctor['cpu']['model']}.", "",
      "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".", "",
      "Command: `scripts/gpu-check.sh`", "",
      "## Verdict", "", "All checks passed." if not problems else "Failed:", ""]
md += [f"- {p}" for p in problems] + [""]
md += ["## Tests", "", f"{ctest_line} (exit {ctest_rc})", ""] + [f"- {l}" for l in ctest_failed] + [""]
md += ["## Backend parity (`ampcheck selftest --device cuda`)", ""]
if "summary" in selftest:
    s = selftest["summary"]
    md += [f"{s['cases']} cases: {s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped.", ""]
    if selftest["not_passed"]:
        md += ["| op | dtype | direction | shapes | NMSE | threshold | status | why |", "|---|---|---|---|---:|---:|---|---|"]
        md += [f"| {r['op']} | {r['dtype']} | {r['direction']} | {r['shapes']} | {r['nmse']} | {r['threshold']} | "
               f"{r['status']} | {r['reason']} |" for r in selftest["not_passed"]]
        md.append("")
else:
    md += [f"no results: {selftest.get('error')}", ""]
md += ["## Every sample on the GPU beside the CPU (float16)", "",
       "| sample | level | cuda verdict | cpu verdict | cuda final loss | cpu final loss | cuda accuracy | cpu accuracy | agree |",
       "|---|---|---|---|---:|---:|---:|---:|---|"]
for r in runs:
    g, c = r["cuda"], r["cpu"]
    md.append(f"| {r['sample']} | {r['level']} | {g.get('verdict', g.get('error'))} | {c.get('verdict', c.get('error'))} | "
              f"{num(g.get('final_loss', '-'))} | {num(c.get('final_loss', '-'))} | {num(g.get('accuracy', '-'))} | "
              f"{num(c.get('accuracy', '-'))} | {'yes' if r['agree'] else '**no**'} |")
md += ["", f"## Step times on the GPU (ms per step; {doc['bench']['method']})", ""]
if torch_note:
    md += [torch_note, ""]
md += ["| sample | ampcheck O0 | ampcheck O1 | ampcheck O2 | PyTorch fp32 | PyTorch autocast fp16 + GradScaler |",
       "|---|---:|---:|---:|---:|---:|"]
md += [f"| {r['sample']} | {ms(r, 'ampcheck_O0')} | {ms(r, 'ampcheck_O1')} | {ms(r, 'ampcheck_O2')} | "
       f"{ms(r, 'torch_fp32')} | {ms(r, 'torch_fp16')} |" for r in bench]
if "markdown" in real:
    md += ["", real["markdown"].rstrip()]
elif real:
    md += ["", "## Real sizes: ampcheck beside PyTorch", "", "Not run: " + str(real.get("not_run") or real.get("error"))]
md += ["", "## Kernels each op really ran (CUPTI)", "", f"`{cupti['command']}` (exit {cupti.get('rc')}): "
       + ("traced" if cupti.get("traced") else "NOT traced: " + str(cupti.get("not_traced") or cupti.get("error"))) + ".", ""]
if cupti.get("counts"):
    md += ["Counts: " + ", ".join(f"{k} {v}" for k, v in cupti["counts"].items()) + f"; GPU spans in the Chrome trace: "
           f"{cupti.get('chrome_trace_gpu_spans')}; HTML kernels section: {cupti.get('html_kernels_section')}.", ""]
    md += ["| op type | kernel | input | tensor cores |", "|---|---|---|---|"]
    md += [f"| {t} | `{n}` | {i} | {tc} |" for t, ks in sorted(cupti.get("matrix_kernels", {}).items()) for n, i, tc in ks]
    md += ["", "Kernel check findings:", ""] + [f"- {f}" for f in cupti.get("findings", [])] + ([] if cupti.get("findings") else ["- none"])
if overhead:
    md += ["", "## Inspector overhead on the GPU (CUPTI off and on)", "", "```", overhead.get("summary", ""), "```"]
if onnx_rows:
    fmt3 = lambda v: f"{v:.3g}" if isinstance(v, float) else "-"
    md += ["", "## ONNX models on the GPU (`ampcheck infer`; max relative error)", "",
           "| model | cuda f32 vs PyTorch f32 | cuda O2 vs cpu O2 | cuda O2 vs PyTorch f32 |", "|---|---:|---:|---:|"]
    md += [f"| {r['model']} | {fmt3(r.get('cuda_f32_vs_torch'))} | {fmt3(r.get('cuda_o2_vs_cpu_o2'))} | "
           f"{fmt3(r.get('cuda_o2_vs_torch_f32'))} |" for r in onnx_rows]
if recorder_rows:
    md += ["", "## The PyTorch recorder on the GPU (recorder/tests/scripts, --device cuda)", "",
           "| case | exit | as planted | seconds | verdict |", "|---|---:|---|---:|---|"]
    md += [f"| {r['case']} | {r['rc']} | {'yes' if r.get('ok') else '**no**'} | {r.get('seconds', '-')} | "
           f"{r.get('verdict', '')[:160]} |" for r in recorder_rows if r["case"] != "overhead"]
    md += ["", str(next((r["table"] for r in recorder_rows if r["case"] == "overhead"), ""))]
if ranks:
    md += ["", "## Several processes on the GPU (`--nproc`, `--device cuda`)", "",
           "| case | exit | as on the CPU | the run's line |", "|---|---:|---|---|"]
    md += [f"| {r['case']} | {r['rc']} | {'yes' if r['ok'] else '**no**'} | {r['line'][:200]} |" for r in ranks]
errors = [f"- {r['sample']} {k[:-6]}: {v}" for r in bench for k, v in r.items() if k.endswith("_error")]
if errors:
    md += ["", "Errors:", ""] + errors

base = f"{out_dir}/{date}-gpu-{slug}"
for path, text in ((base + ".json", json.dumps(doc, indent=2) + "\n"), (base + ".md", "\n".join(md) + "\n")):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
print(f"gpu-check: wrote {base}.md and {base}.json")
if problems:
    print("gpu-check: FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(1)
print("gpu-check: every check passed")
EOF
