"""A torch.compile'd transformer-style MLP block trained in fp16 under autocast with a
GradScaler, written for ampcheck's tests:

  python compile_train.py [--steps 6] [--fault none|forward|custom_backward] [--eager] [--device cpu|cuda]
                          [--nanogpt]

  --fault forward          step 3's batch holds values of 6e4: emb's fp16 output overflows to
                           Inf (fp32 holds it), and the LayerNorm after it makes NaN of it
  --fault custom_backward  the activation is a custom autograd.Function whose backward reads
                           exp(|x|) of its saved fp16 input (x up to ~14): Inf at every scale
  --nanogpt                written as nanoGPT's train.py is: the compiled model returns
                           (logits, loss), the loss computed inside it and logits unused by
                           backward; two micro-batches a step, unscale_ and clip_grad_norm_

Prints torch.compile's counters at the end: a recording must leave them as a plain run has
them (one graph, the same captured calls, no graph break).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.utils import counters


class ScaledTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.tanh(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.exp(x.abs()) * 1e-6


class Block(nn.Module):
    def __init__(self, dim, custom):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.ln = nn.LayerNorm(4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.custom = custom

    def forward(self, x):
        h = self.ln(self.fc1(x))
        h = ScaledTanh.apply(h * 6) if self.custom else F.gelu(h)
        return x + self.fc2(h)


class Net(nn.Module):
    def __init__(self, custom):
        super().__init__()
        self.emb = nn.Linear(16, 32)
        self.block = Block(32, custom)
        self.head = nn.Linear(32, 4)

    def forward(self, x, targets=None):
        logits = self.head(self.block(self.emb(x)))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits, targets)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--fault", default="none", choices=("none", "forward", "custom_backward"))
    p.add_argument("--eager", action="store_true", help="do not compile")
    p.add_argument("--device", default="cpu")
    p.add_argument("--nanogpt", action="store_true", help="nanoGPT's loop: (logits, loss), accumulation, clipping")
    a = p.parse_args()
    torch.manual_seed(0)
    model = Net(a.fault == "custom_backward").to(a.device)
    run = model if a.eager else torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler(a.device)
    g = torch.Generator().manual_seed(1)
    for step in range(1, a.steps + 1):
        x = torch.randn(32, 16, generator=g)
        y = torch.randint(0, 4, (32,), generator=g)
        if a.fault == "forward" and step == 3:
            x[0] = 6e4
        x, y = x.to(a.device), y.to(a.device)
        if a.nanogpt:
            for micro in range(2):
                with torch.autocast(a.device, dtype=torch.float16):
                    logits, loss = run(x[16 * micro:16 * (micro + 1)], y[16 * micro:16 * (micro + 1)])
                    loss = loss / 2
                scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        else:
            with torch.autocast(a.device, dtype=torch.float16):
                loss = F.cross_entropy(run(x), y)
            scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    print(f"compiled: {dict(counters['stats'])}, graph breaks: {sum(counters['graph_break'].values())}")


if __name__ == "__main__":
    main()
