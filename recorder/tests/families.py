"""ampcheck's planted-failure samples (samples/models/*.json) written as PyTorch modules,
with the data generators they train on and one training loop, CPU autocast throughout.

Each family keeps the sample's module names (the report's module paths) and the op that
fails, so the recorder must name the same producer (op, module, phase, step) that
`ampcheck run` names on the sample. Only the data sizes are smaller, so the tests run in
seconds on two cores.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- data ------------------------------------------------------------------------------

def blobs(classes=4, n_per_class=30, dims=8, spread=1.0, center=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dims, generator=g) * center
    x = torch.cat([centers[c] + spread * torch.randn(n_per_class, dims, generator=g) for c in range(classes)])
    y = torch.arange(classes).repeat_interleave(n_per_class)
    return x, y


def spiral(classes=3, n_per_class=30, noise=0.1, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for c in range(classes):
        r = torch.linspace(0.05, 1.0, n_per_class)
        t = torch.linspace(c * 4.0, (c + 1) * 4.0, n_per_class) + noise * torch.randn(n_per_class, generator=g)
        xs.append(torch.stack([r * torch.sin(t), r * torch.cos(t)], 1))
        ys.append(torch.full((n_per_class,), c))
    return torch.cat(xs), torch.cat(ys)


def sequences(n=64, length=8, vocab=8, seed=0):
    """'Does the first token recur': class 1 when token 0 appears again later."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (n, length), generator=g)
    y = (x[:, 1:] == x[:, :1]).any(1).long()
    return x, y


# -- the families ------------------------------------------------------------------------

class Norm(nn.Module):
    """var = E[x^2] - E[x]^2, written out."""

    def forward(self, h):
        mean = h.mean(1, keepdim=True)
        var = torch.square(h).mean(1, keepdim=True) - torch.square(mean)
        return (h - mean) * torch.rsqrt(var + 1e-5)


class VarianceOverflow(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2, self.head = nn.Linear(8, 32), Norm(), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x):
        h = self.fc1(x * 1000)
        return self.head(torch.relu(self.fc2(torch.relu(self.norm(h)))))


class Attention(nn.Module):
    def __init__(self, dim=32, scale=1.7677669529663685e-05, causal=False, additive_min=False):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.scale, self.causal, self.additive_min = scale, causal, additive_min

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scale
        n = x.shape[1]
        if self.causal:
            future = torch.ones(n, n, dtype=torch.bool).triu(1)
            if self.additive_min:
                # Hugging Face's form: an additive mask of finfo(dtype).min, which the add
                # takes to -Inf where the score is negative enough.
                mask = torch.zeros(n, n, dtype=scores.dtype).masked_fill(future, torch.finfo(scores.dtype).min)
                scores = scores + mask
            else:
                scores = scores.masked_fill(future, float("-inf"))
        return torch.bmm(torch.softmax(scores, -1), v)


class AttentionOverflow(nn.Module):
    """Embeddings in raw units (x100), the units folded into the score scale after the bmm."""

    def __init__(self, units=100.0, causal=False, additive_min=False, scale=1.7677669529663685e-05):
        super().__init__()
        self.tok_embed, self.pos_embed = nn.Embedding(8, 32), nn.Embedding(8, 32)
        self.attn = Attention(32, scale, causal, additive_min)
        self.head = nn.Linear(32, 2)
        self.units = units

    def forward(self, x):
        positions = torch.arange(x.shape[1])
        raw = (self.tok_embed(x) + self.pos_embed(positions)) * self.units
        return self.head(self.attn(raw).mean(1) / self.units)


class CausalMask(AttentionOverflow):
    """Healthy: -inf written by masked_fill (or an additive finfo.min mask), read by softmax."""

    def __init__(self, additive_min=False):
        super().__init__(units=1.0 if not additive_min else 10.0, causal=True, additive_min=additive_min,
                         scale=0.17677669529663687)


class Residual(nn.Module):
    def forward(self, a, b):
        return a + b


class ResidualOverflow(nn.Module):
    def __init__(self):
        super().__init__()
        self.branch_a, self.branch_b = nn.Linear(8, 32), nn.Linear(8, 32)
        self.residual, self.norm = Residual(), nn.LayerNorm(32)
        self.fc, self.head = nn.Linear(32, 32), nn.Linear(32, 4)
        with torch.no_grad():  # each branch the mean of its inputs: ~36000 alone, ~72000 summed
            for branch in (self.branch_a, self.branch_b):
                branch.weight.fill_(1 / 8)
                branch.bias.zero_()

    def forward(self, x):
        raw = x * 9000
        h = self.residual(self.branch_a(raw), self.branch_b(raw))
        return self.head(torch.relu(self.fc(torch.relu(self.norm(h)))))


class RMS(nn.Module):
    """Mean of squares as a matmul with a ones vector: the sum of 2048 squares overflows fp16."""

    def __init__(self, dims):
        super().__init__()
        self.register_buffer("ones", torch.ones(dims, 1))
        self.dims = dims

    def forward(self, x):
        total = torch.matmul(torch.square(x), self.ones)
        return x * torch.rsqrt(total / self.dims + 1e-6)


class SumOverflow(nn.Module):
    def __init__(self, dims=2048):
        super().__init__()
        self.rms, self.head = RMS(dims), nn.Linear(dims, 4)

    def forward(self, x):
        return self.head(self.rms(x))


class Sharpen(nn.Module):
    def forward(self, logits):
        return logits / 1e-5


class TemperatureOverflow(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.proj, self.sharpen = nn.Linear(8, 32), nn.Linear(32, 4), Sharpen()

    def forward(self, x):
        return self.sharpen(self.proj(torch.relu(self.fc1(x))))


class Gate(nn.Module):
    def forward(self, z):
        return torch.log(torch.sigmoid(z))


class SigmoidLog(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.gate, self.fc2, self.head = nn.Linear(2, 64), Gate(), nn.Linear(64, 64), nn.Linear(64, 3)

    def forward(self, x):
        return self.head(torch.relu(self.fc2(self.gate(self.fc1(x * 40)))))


class Big(nn.Module):
    """x*s - x*s with s = 300000: 0 in fp32, Inf - Inf = NaN in fp16."""

    def forward(self, h):
        return h + (h * 300000 - h * 300000)


class NanThroughRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.big, self.fc2, self.head = nn.Linear(2, 64), Big(), nn.Linear(64, 64), nn.Linear(64, 3)

    def forward(self, x):
        return self.head(torch.relu(self.fc2(torch.relu(self.big(self.fc1(x))))))


class BranchA(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.fc = nn.Linear(dims, 16)
        self.register_buffer("scale_back", torch.tensor(1e-5))

    def forward(self, x):
        return (self.fc(x) * 30000) * self.scale_back


class BranchB(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.register_buffer("ones", torch.ones(dims, 8))
        self.register_buffer("scale_back", torch.tensor(1e-5))

    def forward(self, x):
        return torch.matmul(torch.square(x), self.ones) * self.scale_back


class TwoOverflows(nn.Module):
    def __init__(self, dims=2048):
        super().__init__()
        self.branch_a, self.branch_b = BranchA(dims), BranchB(dims)
        self.fc, self.head = nn.Linear(24, 32), nn.Linear(32, 4)

    def forward(self, x):
        h = torch.cat([self.branch_a(x), self.branch_b(x)], 1)
        return self.head(torch.relu(self.fc(h)))


class Mlp(nn.Module):
    def __init__(self, dims=2, hidden=64, classes=3):
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(dims, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, classes)

    def forward(self, x):
        return self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


# -- training -----------------------------------------------------------------------------

def make(name: str, seed: int = 0):
    """(model, x, y, training settings) of one family, seeded."""
    torch.manual_seed(seed)
    if name == "variance_overflow":
        return VarianceOverflow(), *blobs(), {}
    if name == "attention_overflow":
        return AttentionOverflow(), *sequences(), {"lr": 3e-3}
    if name == "causal_mask":
        return CausalMask(), *sequences(), {"lr": 5e-3}
    if name == "causal_mask_additive":
        return CausalMask(additive_min=True), *sequences(), {"lr": 5e-3}
    if name == "residual_overflow":
        x, y = blobs(center=1.0)
        return ResidualOverflow(), x.abs().clamp(max=3.0) + 3.5, y, {}
    if name == "sum_overflow":
        x, y = blobs(n_per_class=8, dims=2048, spread=6.0)
        return SumOverflow(), x, y, {}
    if name == "temperature_overflow":
        return TemperatureOverflow(), *blobs(), {}
    if name == "sigmoid_log":
        return SigmoidLog(), *spiral(), {}
    if name == "nan_through_relu":
        return NanThroughRelu(), *spiral(), {}
    if name == "two_overflows":
        x, y = blobs(n_per_class=8, dims=2048, spread=6.0)
        return TwoOverflows(), x, y, {}
    if name == "grad_underflow":
        return Mlp(), *spiral(noise=0.2), {"loss_weight": 1e-6, "scaler": None, "lr": 0.02}
    if name == "scaler_probing":
        return Mlp(), *spiral(), {"init_scale": 2.0 ** 32}
    if name == "mlp":
        return Mlp(), *spiral(), {}
    if name == "converged":
        # Separable data, a large step: the loss falls to where its gradients flush to 0
        # in fp16, without a scaler. Healthy: the model has converged (train 25 steps).
        g = torch.Generator().manual_seed(seed)
        x = torch.cat([torch.randn(32, 2, generator=g) + 4, torch.randn(32, 2, generator=g) - 4])
        y = torch.cat([torch.zeros(32, dtype=torch.long), torch.ones(32, dtype=torch.long)])
        return nn.Linear(2, 2), x, y, {"optimizer": "sgd", "lr": 20.0, "scaler": None}
    raise KeyError(name)


def train(model, x, y, *, steps=4, dtype=torch.float16, lr=0.01, scaler="dynamic", init_scale=65536.0,
          growth_interval=2000, loss_weight=1.0, optimizer="adam", observe=None):
    """A plain PyTorch AMP loop: autocast, GradScaler("cpu"), optimizer. `observe(step, info)`
    sees what PyTorch itself reports each step (loss, the scaler's scale, gradients), for
    tests that compare the recorder against PyTorch's own numbers."""
    opt = (torch.optim.Adam(model.parameters(), lr=lr) if optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=lr))
    sc = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval) if scaler else None
    for step in range(1, steps + 1):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype):
            loss = F.cross_entropy(model(x), y) * loss_weight
        scale_used = sc.get_scale() if sc else 1.0
        if sc:
            sc.scale(loss).backward()
            sc.step(opt)
            sc.update()
        else:
            loss.backward()
            opt.step()
        if observe is not None:
            grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
            observe(step, {"loss": float(loss.detach()), "scale_used": scale_used,
                           "scale_after": sc.get_scale() if sc else 1.0, "grads": grads})
    return opt, sc


def is_power_of_two(v: float) -> bool:
    return v > 0 and math.log2(v) == int(math.log2(v))
