"""A small regression trained in one of the ways mixed precision is used, for
`ampcheck compare --script` (its fp32 twin). Planted (the expectation written from the
planting, tests/e2e/record_compare.sh):

  bf16_weights  model.bfloat16() and plain SGD: no fp32 master weights, so each update is
                rounded to the weight's bfloat16 spacing, and updates under half of it
                vanish. The loss stalls where fp32 keeps falling (0.10 against 0.07 after
                150 steps; fp32 seeds differ by under 0.01 there): the AMP run departs.
  autocast      torch.autocast(bfloat16) around fp32 weights: the mixed precision as it
                should be used; its gap from fp32 stays inside fp32's own seed spread.
  fixed_seed    as autocast, but the script seeds itself with a constant, as most scripts do:
                the twin's k-th run shifts that seed by k, so its runs differ and the AMP
                run stays within their noise.
  own_generator as autocast, but every random value comes from a torch.Generator the script
                seeds itself, which nothing shifts: the twin's runs train alike, there is no
                yardstick (refused, naming the fix).
  offset        bf16 autocast, the targets near 100: the last linear layer ('2') outputs
                bfloat16, whose spacing at 100 is 0.5, so the fit stalls (0.088 against
                fp32's 0.075 after 150 steps, 18%): departs; keeping module '2' in fp32
                closes it (bisect-nan --script --loss-tolerance).
  bf16_moments  a hand-written AdamW (fp32 weights) keeping its moments in bfloat16, on a
                linear regression: beta2 = 0.999 makes each step's change of exp_avg_sq
                under half its bfloat16 spacing once the gradients shrink, so it stops
                following them and the steps stay small: 0.0017 against fp32's 0.0002 after
                1000 steps (fp32 seeds within 0.0001 of each other there): departs; the
                moments kept in fp32 close it.
  bf16_loss     a classification over 8192 classes whose logits the script casts to
                bfloat16 for F.cross_entropy: log_softmax and nll_loss run in bfloat16, the
                gradient they start the backward with (softmax - one-hot) is rounded there
                and the confident classes' stops: 0.0075 against fp32's 0.0057 after 600 steps
                (fp32 seeds within 0.0001): departs; the loss in fp32 closes it.
  fp16_norm     float16 autocast; a LayerNorm (module 'norm', in fp32 by autocast's policy)
                over the outputs of a linear layer ('lin1') whose mean is near 2000: the
                linear's float16 outputs there are spaced by 1 where they vary by ~0.6, so
                what the LayerNorm keeps (the deviation from the mean) is mostly rounding:
                its output is far from fp32's at the first step, from inputs within 0.05%
                of fp32's. 0.047 against fp32's 0.031 after 150 steps (fp32 seeds within
                0.004): departs; keeping 'lin1' in fp32 closes it.

bf16_moments, bf16_loss and fp16_norm draw their data from a generator of their own (fixed) and their
weights from torch's, so the fp32 runs of other seeds differ by their initialisation only.
The data and the model come from torch's generator, which the recorder seeds from
AMPCHECK_RECORD_SEED at import (the script does not seed it, but for fixed_seed).
"""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["bf16_weights", "autocast", "fixed_seed", "own_generator", "offset",
                                     "bf16_moments", "bf16_loss", "fp16_norm"])
parser.add_argument("--steps", type=int, default=None)
args = parser.parse_args()
torch.set_num_threads(1)


class AdamW16(torch.optim.Optimizer):
    """AdamW as people write their own to save memory: fp32 weights, the moments stored in
    bfloat16."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p).to(torch.bfloat16)
                    state["exp_avg_sq"] = torch.zeros_like(p).to(torch.bfloat16)
                state["step"] += 1
                state["exp_avg"].mul_(b1).add_(p.grad, alpha=1 - b1)
                state["exp_avg_sq"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                t = state["step"]
                m = state["exp_avg"].float() / (1 - b1 ** t)
                v = state["exp_avg_sq"].float() / (1 - b2 ** t)
                p.add_(m / (v.sqrt() + group["eps"]), alpha=-group["lr"])


def train(steps, optimizer, loss_of):
    """The loop every mode runs: `loss_of()` is one step's forward and loss."""
    for _ in range(steps):
        loss = loss_of()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"final loss {loss.item():.6f}")


if args.mode == "bf16_moments":
    # A linear regression (convex: the fp32 runs of every seed head for the same optimum),
    # its features scaled over two decades; the data from a generator of its own, the
    # weights' initialisation from the seed.
    steps = args.steps or 1000
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(512, 32, generator=g) * torch.logspace(-1, 1, 32)
    y = x @ torch.randn(32, 1, generator=g) + 10.0
    model = torch.nn.Linear(32, 1)
    train(steps, AdamW16(model.parameters(), lr=3e-2), lambda: torch.nn.functional.mse_loss(model(x), y))
    raise SystemExit(0)
if args.mode == "bf16_loss":
    # Classification over a large vocabulary, its logits cast to bfloat16 for the loss.
    steps = args.steps or 600
    g = torch.Generator().manual_seed(1234)
    vocab = 8192
    x = torch.randn(256, 64, generator=g)
    y = (x @ torch.randn(64, vocab, generator=g)).argmax(-1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, vocab))
    train(steps, torch.optim.SGD(model.parameters(), lr=1.0),
          lambda: torch.nn.functional.cross_entropy(model(x).bfloat16(), y))
    raise SystemExit(0)
if args.mode == "fp16_norm":
    # float16 autocast over fp32 weights; a LayerNorm over the first layer's outputs, whose
    # mean is near 2000 (its bias): autocast runs the LayerNorm in fp32, but its input comes
    # from a float16 linear, whose spacing at 2000 is 1 where the outputs vary by ~0.6.
    steps = args.steps or 150
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(512, 32, generator=g)
    y = torch.tanh(x @ torch.randn(32, 1, generator=g) / 4)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin1 = torch.nn.Linear(32, 64)
            self.norm = torch.nn.LayerNorm(64)
            self.head = torch.nn.Linear(64, 1)
            with torch.no_grad():
                self.lin1.bias.fill_(2000.0)

        def forward(self, x):
            return self.head(torch.tanh(self.norm(self.lin1(x))))

    def loss_of():
        with torch.autocast("cpu", dtype=torch.float16):
            pred = model(x)
        return torch.nn.functional.mse_loss(pred.float(), y)

    model = Net()
    train(steps, torch.optim.SGD(model.parameters(), lr=0.05), loss_of)
    raise SystemExit(0)
args.steps = args.steps or 150
if args.mode == "fixed_seed":
    torch.manual_seed(0)

g = torch.Generator().manual_seed(0) if args.mode == "own_generator" else None
x = torch.randn(512, 32, generator=g)
w_true = torch.randn(32, 1, generator=g)
y = torch.tanh(x @ w_true / 4) + (100.0 if args.mode == "offset" else 0.0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
if args.mode == "offset":
    with torch.no_grad():
        model[2].bias.fill_(100.0)
if args.mode == "own_generator":
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
if args.mode == "bf16_weights":
    model = model.bfloat16()
dtype = next(model.parameters()).dtype


def loss_of():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.mode != "bf16_weights"):
        pred = model(x.to(dtype))
    return torch.nn.functional.mse_loss(pred.float(), y)


train(args.steps, torch.optim.SGD(model.parameters(), lr=0.01), loss_of)
