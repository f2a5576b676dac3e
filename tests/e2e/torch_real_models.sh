#!/usr/bin/env bash
# bench/real_models.py (issue 44: the real sizes of scripts/gpu-check.sh) on the CPU, at
# tiny sizes, against PyTorch itself: the three builders at the issue's sizes have the
# published parameter counts (torchvision's resnet50, GPT-2 small, BERT-base with a 2-class
# head); each tiny model exported by this torch's torch.onnx.export (its default exporter,
# or the TorchScript one where the default is missing) is imported by ampcheck with
# PyTorch's parameters, its forward (`ampcheck infer`) equals PyTorch's and it trains at
# O2; PyTorch's timed steps run; `bench` writes its results and table; the aims and the
# kernel families are read right from a made-up results file.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
work=${WORK:?set WORK to a scratch directory}
rm -rf "$work" && mkdir -p "$work"
if [[ -z ${AMPCHECK_PYTHON:-} ]] || ! "$AMPCHECK_PYTHON" -c 'import torch, numpy' 2>/dev/null; then
  echo "SKIPPED: bench/real_models.py needs the Python environment with PyTorch and numpy (AMPCHECK_PYTHON," \
       "set by scripts/test.sh from scripts/pyenv.sh; by hand: AMPCHECK_PYTHON=\$(bash scripts/pyenv.sh) ctest -L python)"
  exit 0
fi
py=$AMPCHECK_PYTHON
export OMP_NUM_THREADS=1
real=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../bench" && pwd)/real_models.py

"$py" - "$real" "$bin" "$work" <<'EOF' || fail "the builders, the exports or ampcheck's import of them (above)"
import json, os, subprocess, sys
import numpy as np
import torch
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import real_models as rm
ampcheck, work = sys.argv[2], sys.argv[3]
failed = 0

def check(ok, text):
    global failed
    print(("ok: " if ok else "FAIL: ") + text, flush=True)
    failed += not ok

# The issue's sizes: the published parameter counts.
for name, cfg in rm.sizes("full").items():
    n = sum(p.numel() for p in rm.build(name, cfg).parameters())
    check(n == rm.PUBLISHED_PARAMETERS[name], f"{name} at full size: {n:,} parameters (published {rm.PUBLISHED_PARAMETERS[name]:,})")

tiny = rm.sizes("tiny")
for name in rm.MODELS:
    info = rm.export_model(name, tiny[name], work)
    onnx, npz = f"{work}/{name}.onnx", f"{work}/{name}.npz"
    print(f"   {name}: {info['call']}" + (f"; {info['fallback']}" if info.get("fallback") else ""))
    # ampcheck trains it, with PyTorch's parameters (the TorchScript exporter unties GPT-2's
    # LM head: a transposed copy of the token embedding, vocab x dim more).
    r = subprocess.run([ampcheck, "run", "--model", onnx, "--data", npz, "--loss", rm.LOSS[name], "--level", "O2",
                        "--steps", "3", "--device", "cpu", "--report", f"{work}/{name}.json", "--quiet"],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"{name}: ampcheck run --model {name}.onnx --level O2: exit {r.returncode} {r.stderr[-300:]}")
    if r.returncode == 0:
        rep = json.load(open(f"{work}/{name}.json"))
        want = info["parameters"] + (tiny[name]["vocab"] * tiny[name]["dim"]
                                     if name == "gpt2" and info["exporter"] == "torchscript" else 0)
        check(rep["run"]["parameters"] == want and rep["summary"]["verdict"] == "healthy",
              f"{name}: ampcheck trains {rep['run']['parameters']:,} parameters (want {want:,}), "
              f"verdict {rep['summary']['verdict']}")
        # The exported F.scaled_dot_product_attention runs as one op, as PyTorch runs it.
        if name != "resnet50":
            check('"scaled_dot_product_attention"' in open(f"{work}/{name}.json").read(),
                  f"{name}: its attention runs as scaled_dot_product_attention")
    # Its forward is PyTorch's (eval mode).
    torch.manual_seed(0)
    model = rm.build(name, tiny[name], attention="sdpa").eval()
    inputs, _ = rm.make_inputs(name, tiny[name])
    with torch.no_grad():
        ref = model(*inputs.values()).double().numpy()
    r = subprocess.run([ampcheck, "infer", "--model", onnx, "--data", npz, "--out", f"{work}/{name}.out.npy",
                        "--device", "cpu", "--quiet"], capture_output=True, text=True)
    if r.returncode != 0:
        check(False, f"{name}: ampcheck infer: exit {r.returncode} {r.stderr[-300:]}")
        continue
    got = np.load(f"{work}/{name}.out.npy").astype(np.float64)
    rel = float(np.abs(got - ref).max() / np.abs(ref).max()) if got.shape == ref.shape else float("inf")
    check(rel < 1e-4, f"{name}: ampcheck infer against PyTorch's forward: max relative error {rel:.2g} "
                      f"(shapes {got.shape}, {ref.shape})")
    # The npz written without numpy reads back as the tensors.
    data = np.load(npz)
    check(all(np.array_equal(data[k], v.numpy()) for k, v in inputs.items()), f"{name}: {name}.npz holds the inputs")

# The aims and families, read from a made-up results file: the ratio, the verdict, and the
# family whose GPU time per step exceeds PyTorch's the most.
fam = lambda **ms: {"steps": 2, "kernel_ms": sum(ms.values()), "ms": ms, "top_ops": {}}
doc = {"scale": "full", "device": "cuda", "budget_s": 240, "warmup": 2, "steps": 5, "trace_steps": 2,
       "profile_steps": 2, "models": [{
           "model": "gpt2", "description": "GPT-2", "ampcheck": {
               "O2 float16": {"ms": 45.0, "peak_bytes": 30 << 30, "families": fam(GEMM=30.0, normalization=8.0, elementwise=4.0)},
               "O0": {"ms": 150.0, "peak_bytes": 40 << 30, "families": fam(GEMM=140.0)},
               "O2 bfloat16": {"step_error": "peer_step exit 2: out of memory"}},
           "torch": {"fp16": {"ms": 40.0, "peak_bytes": 28 << 30, "families": fam(GEMM=28.0, normalization=2.0, elementwise=4.0)},
                     "fp32": {"ms": 160.0, "peak_bytes": 36 << 30}, "bf16": {"ms": 41.0, "peak_bytes": 20 << 30}}}]}
doc["aims"], doc["problems"] = rm.aims(doc), rm.problems(doc)
aim = {(x["run"], x["what"]): x for x in doc["aims"]}
x = aim[("O2 float16", "step")]
check(abs(x["ratio"] - 1.125) < 1e-12 and x["met"] is False and x["where"].startswith("normalization: 8.00 vs 2.00"),
      f"a missed step aim: ratio {x['ratio']}, where {x['where']!r}")
x = aim[("O2 float16", "memory")]
check(abs(x["ratio"] - 30 / 28) < 1e-12 and x["met"] is True, f"a met memory aim: ratio {x['ratio']:.3f}")
x = aim[("O2 bfloat16", "step")]
check(x["met"] is None and "out of memory" in x["note"], f"an unmeasured aim says why: {x['note']!r}")
check(aim[("O0", "step")]["met"] is True, "O0 at 0.94x meets its aim")
check(doc["problems"] == ["gpt2 ampcheck O2 bfloat16: peer_step exit 2: out of memory"], f"problems {doc['problems']}")
md = rm.markdown(doc)
check("| gpt2 | O2 float16 step <= 1.0x PyTorch autocast fp16 + GradScaler | 1.12x | **no** |" in md,
      "the table shows the missed aim")
# Kernel families: the kernel's kind, then the op that launched it.
for args, want in [(("gemm", "linear"), "GEMM"), (("gemm", "aten::cudnn_convolution"), "convolution"),
                   (("other", "layer_norm", "backward"), "normalization"), (("elementwise", "aten::add_", "optimizer"), "optimizer"),
                   (("elementwise", "aten::_amp_foreach_non_finite_check_and_unscale_"), "optimizer"),
                   (("attention", "aten::_flash_attention_forward"), "attention"), (("elementwise", "cast"), "copies"),
                   (("elementwise", "aten::copy_"), "copies"), (("layout", "permute"), "copies"),
                   (("elementwise", "relu"), "elementwise"), (("reduction", "sum"), "other")]:
    check(rm.family(*args) == want, f"family{args} = {rm.family(*args)} (want {want})")
sys.exit(1 if failed else 0)
EOF

# PyTorch's timed steps on the CPU: one JSON line per mode.
out=$("$py" "$real" torch bert --scale tiny --device cpu --modes fp32,bf16 --warmup 1 --steps 2 2>"$work/torch.err")
if "$py" -c 'import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
assert [r["mode"] for r in rows] == ["fp32", "bf16"] and all(r["ms"] > 0 and len(r["ms_all"]) == 2 for r in rows), rows' <<<"$out"; then
  ok "real_models.py torch: PyTorch's steps timed in fp32 and bf16"
else
  fail "real_models.py torch: $out $(tail -3 "$work/torch.err")"
fi

# The whole benchmark on one tiny model, on the CPU (no CUPTI, no device memory there).
if "$py" "$real" bench --ampcheck "$bin" --peer-step "$(dirname "$(dirname "$bin")")/bench/ampcheck_bench_peer_step" \
     --out "$work/bench" --scale tiny --device cpu --models gpt2 --no-compile --warmup 1 --steps 2 --budget 120 \
     > "$work/bench.log" 2>&1 &&
   "$py" -c 'import json, sys
d = json.load(open(sys.argv[1]))
m = d["models"][0]
assert not d["problems"], d["problems"]
assert all(m["ampcheck"][k]["ms"] > 0 and m["ampcheck"][k]["verdict"] in ("healthy", "reference") for k in ("O0", "O2 float16", "O2 bfloat16")), m["ampcheck"]
assert all(m["torch"][k]["ms"] > 0 for k in ("fp32", "fp16", "bf16")), m["torch"]
assert [a["met"] is not None for a in d["aims"] if a["what"] == "step"] == [True] * 3, d["aims"]
' "$work/bench/real_models.json" && grep -q '^| gpt2 | O0 step <= 1.0x PyTorch eager fp32 |' "$work/bench/real_models.md"; then
  ok "real_models.py bench: gpt2 timed by ampcheck and PyTorch, the table written"
else
  fail "real_models.py bench: $(tail -5 "$work/bench.log")"
fi

[[ $fails -eq 0 ]] || exit 1
