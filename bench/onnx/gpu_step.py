#!/usr/bin/env python3
"""The ONNX benchmark's models trained on the GPU: ampcheck's step against PyTorch's.

ampcheck: bench/peer_step.cpp's worker (the step `ampcheck run --inspect off` trains) on
DIR/NAME.onnx and DIR/NAME.npz with --device cuda, at O0 (fp32) and O2 (float16 storage,
dynamic loss scaling). PyTorch: the same architecture built by bench/onnx/export.py,
trained as bench/peers/frameworks.py's torch_onnx_worker trains it on the CPU (the first
16 rows, cross-entropy, Adam), here on CUDA in fp32 and under autocast float16 with a
GradScaler. Each configuration in its own process; the median step after 10 warm-up
steps, each step ending with loss.item() (so the GPU's work is in it). Prints a Markdown
table, and writes it to --out.

  bench/onnx/gpu_step.py --models DIR --peer-step build/bench/ampcheck_bench_peer_step [--only a,b] [--steps 80]
DIR is what `bench/onnx/export.py --out DIR --bn preserve` wrote (NAME.npz needed).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BATCH, LR = 16, 1e-3

TORCH_STEP = r'''
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import torch, frameworks
dev = sys.argv[8]
torch.set_default_device(dev)
_autocast, _scaler, _from_numpy = torch.autocast, torch.amp.GradScaler, torch.from_numpy
torch.autocast = lambda device_type, **kw: _autocast(dev, **kw)
torch.amp.GradScaler = lambda device=dev, **kw: _scaler(dev, **kw)
torch.from_numpy = lambda a: _from_numpy(a).to(dev)
step = frameworks.torch_onnx_worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6]), 1)
for _ in range(10):
    step()
ms = []
for _ in range(int(sys.argv[7])):
    t = time.perf_counter(); step(); ms.append((time.perf_counter() - t) * 1e3)
print(json.dumps({"ms": statistics.median(ms)}))
'''


def last_error(r):
    return (r.stderr.strip().splitlines() or ["(no message)"])[-1]


def ampcheck_ms(peer_step, models, name, level, steps, device):
    r = subprocess.run([peer_step, "--model", os.path.join(models, name + ".onnx"), "--data",
                        os.path.join(models, name + ".npz"), "--loss", "cross_entropy", "--batch", str(BATCH),
                        "--level", level, "--dtype", "float16", "--device", device],
                       input=f"steps 10\nsteps {steps}\n", capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(last_error(r))
    return statistics.median(json.loads(r.stdout.strip().splitlines()[-1])["ms"])


def torch_ms(models, name, mode, steps, device):
    r = subprocess.run([sys.executable, "-c", TORCH_STEP, os.path.join(ROOT, "bench", "peers"), name, models, mode,
                        str(BATCH), str(LR), str(steps), device], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(last_error(r))
    return json.loads(r.stdout.strip().splitlines()[-1])["ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", required=True, help="the folder export.py --bn preserve wrote")
    ap.add_argument("--peer-step", required=True, help="the ampcheck_bench_peer_step binary (a CUDA build)")
    ap.add_argument("--only", default="", help="comma-separated model names (default: every NAME.onnx with NAME.npz)")
    ap.add_argument("--steps", type=int, default=80, help="timed steps per configuration (default 80)")
    ap.add_argument("--out", help="also write the table to this Markdown file")
    ap.add_argument("--device", default="cuda", help="cuda (default), or cpu to try the script without a GPU")
    a = ap.parse_args()
    names = [n for n in a.only.split(",") if n] or sorted(
        f[:-5] for f in os.listdir(a.models) if f.endswith(".onnx") and os.path.exists(os.path.join(a.models, f[:-5] + ".npz")))
    lines = ["| model (batch 16) | ampcheck O0 | ampcheck O2 fp16 | PyTorch fp32 | PyTorch autocast fp16 + GradScaler | "
             "ampcheck O0 / PyTorch fp32 | ampcheck O2 / PyTorch fp16 |", "|---|---:|---:|---:|---:|---:|---:|"]
    errors = []
    for name in names:
        row = {}
        for key, f in (("a_O0", lambda: ampcheck_ms(a.peer_step, a.models, name, "O0", a.steps, a.device)),
                       ("a_O2", lambda: ampcheck_ms(a.peer_step, a.models, name, "O2", a.steps, a.device)),
                       ("t_fp32", lambda: torch_ms(a.models, name, "fp32", a.steps, a.device)),
                       ("t_fp16", lambda: torch_ms(a.models, name, "fp16", a.steps, a.device))):
            try:
                row[key] = f()
            except (RuntimeError, ValueError) as e:
                errors.append(f"- {name} {key}: {e}")
        cell = lambda k: f"{row[k]:.3f}" if k in row else "error"
        ratio = lambda x, y: f"{row[x] / row[y]:.2f}" if x in row and y in row else "-"
        lines.append(f"| {name} | {cell('a_O0')} | {cell('a_O2')} | {cell('t_fp32')} | {cell('t_fp16')} | "
                     f"{ratio('a_O0', 't_fp32')} | {ratio('a_O2', 't_fp16')} |")
        print(lines[-1], flush=True)
    text = "\n".join(["Milliseconds per training step (median; below 1 in the ratios ampcheck is faster).", ""] + lines
                     + (["", "Errors:", ""] + errors if errors else [])) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
