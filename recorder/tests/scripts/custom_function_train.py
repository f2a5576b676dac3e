"""A planted fp16 failure in a custom torch.autograd.Function's backward, written for
ampcheck's tests: ScaledTanh's hand-written backward reads exp(|x|) of its saved input,
which overflows fp16 for |x| > 11.1 whatever the loss scale (the gradient it multiplies is
not an input of the exp). fc1's outputs reach 13.7, so every update is skipped and the
scaler backs off forever; in fp32 the same run trains.

  python custom_function_train.py [--steps 12] [--fp32] [--fix] [--device cpu|cuda]

--fix applies the advice bisect-nan gives: ampcheck_recorder.keep_fp32(model, ops=["ScaledTanh"]).
"""
import argparse

import torch
import torch.nn as nn


class ScaledTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.tanh(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.exp(x.abs()) * 1e-6


class Act(nn.Module):
    def forward(self, x):
        return ScaledTanh.apply(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.act = Act()
        self.fc2 = nn.Linear(64, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--fp32", action="store_true")
    p.add_argument("--fix", action="store_true")
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.manual_seed(0)
    model = Net().to(a.device)
    with torch.no_grad():
        model.fc1.weight.mul_(6)
    if a.fix:
        import ampcheck_recorder
        ampcheck_recorder.keep_fp32(model, ops=["ScaledTanh"])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler(a.device, enabled=not a.fp32)
    x = torch.randn(32, 16).to(a.device)
    y = torch.randint(0, 4, (32,)).to(a.device)
    for _ in range(a.steps):
        with torch.autocast(a.device, dtype=torch.float16, enabled=not a.fp32):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    print(f"final loss {loss.item():.4f}, scale {scaler.get_scale()}")


if __name__ == "__main__":
    main()
