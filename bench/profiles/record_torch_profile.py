#!/usr/bin/env python3
"""Records the GPU profile of a PyTorch AMP training run, as a user would.

The models of the ONNX benchmark (bench/onnx/export.py: ResNet-18, the GPT-2- and
BERT-style blocks, ...), built the same way (same seed, same data), are trained on the GPU
for a few steps with the step a user writes: zero_grad, forward and loss under
torch.autocast, GradScaler (float16) or none (bfloat16), Adam. Two recordings:

  --mode kineto   torch.profiler with CPU and CUDA activity and record_shapes (with_stack
                  too where --stack): a Chrome trace, gzipped, of --active steps after one
                  wait and one warm-up step. This is the profile `ampcheck kernels` reads.
  --mode ncu      the same loop for Nsight Compute: warm-up steps, then one step between
                  cudaProfilerStart/Stop, so `ncu --profile-from-start off` measures exactly
                  that step's kernels (their tensor-pipe counters are the ground truth the
                  names are checked against).

Nothing is downloaded: torchvision builds ResNet-18 with random weights.

  python3 bench/profiles/record_torch_profile.py --model resnet18 --dtype float16 \
      --mode kineto --out /tmp/profiles/resnet18-fp16.pt.trace.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "onnx"))
import export  # noqa: E402  (bench/onnx/export.py: the models and their data)


def build(name: str, device: str):
    ctor, classes, kind = export.MODELS[name]
    index = list(export.MODELS).index(name)
    torch.manual_seed(index)
    rng = np.random.default_rng(index)
    model = ctor().to(device).train()
    x, labels = export.make_data(kind, classes, rng)
    return model, torch.from_numpy(x).to(device), torch.from_numpy(labels).to(device)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18", choices=list(export.MODELS))
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"],
                    help="autocast dtype; float32: no autocast (the fp32 control)")
    ap.add_argument("--mode", default="kineto", choices=["kineto", "ncu"])
    ap.add_argument("--steps", type=int, default=4, help="kineto: active steps (after 1 wait + 1 warm-up)")
    ap.add_argument("--stack", action="store_true", help="kineto: with_stack (python_function events: module paths)")
    ap.add_argument("--out", type=Path, help="kineto: the trace file to write (.json.gz)")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        print("record_torch_profile: no CUDA device", file=sys.stderr)
        return 2
    device = "cuda"
    model, x, labels = build(args.model, device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    low = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(args.dtype)
    scaler = torch.amp.GradScaler("cuda", enabled=low is torch.float16)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=low or torch.float32, enabled=low is not None):
            loss = loss_fn(model(x), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.item()

    if args.mode == "ncu":
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        step()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        return 0

    if args.out is None:
        ap.error("--mode kineto needs --out")
    from torch.profiler import ProfilerActivity, profile, schedule
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp()
    raw = os.path.join(tmp, "trace.json")

    def ready(prof) -> None:
        prof.export_chrome_trace(raw)

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 with_stack=args.stack, schedule=schedule(wait=1, warmup=1, active=args.steps),
                 on_trace_ready=ready) as prof:
        for _ in range(2 + args.steps):
            step()
            prof.step()
    with open(raw, "rb") as f, gzip.open(args.out, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    shutil.rmtree(tmp)
    print(f"record_torch_profile: {args.model} {args.dtype}: wrote {args.out} "
          f"({args.out.stat().st_size} bytes), torch {torch.__version__}, {torch.cuda.get_device_name()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
