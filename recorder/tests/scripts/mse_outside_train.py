"""A sum-reduced MSE computed in fp16 outside autocast, written for ampcheck's tests: the
model runs under autocast, then the script casts the target to the prediction's dtype
itself (`y.to(pred.dtype)`) and calls its criterion, a module that is no part of the model,
outside autocast: the sum of 512 squared errors of ~30 overflows fp16 at step 1.

  python mse_outside_train.py [--steps 4] [--fix] [--device cpu|cuda]

--fix computes the loss as the advice says: criterion(pred.float(), y).
"""
import argparse

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--fix", action="store_true")
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1)).to(a.device)
    criterion = nn.MSELoss(reduction="sum")
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    scaler = torch.amp.GradScaler(a.device)
    for _ in range(a.steps):
        x, y = torch.randn(512, 8).to(a.device), (torch.randn(512, 1) * 30).to(a.device)
        with torch.autocast(a.device, dtype=torch.float16):
            pred = model(x)
        if a.fix:
            loss = criterion(pred.float(), y)
        else:
            loss = criterion(pred, y.to(pred.dtype))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()


if __name__ == "__main__":
    main()
