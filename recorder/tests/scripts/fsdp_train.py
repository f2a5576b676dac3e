"""FSDP2 (fully_shard) training under torchrun, gloo on the CPU, written for ampcheck's tests:

  python -m torch.distributed.run --nproc_per_node 2 fsdp_train.py [--steps 4] [--fault F]

The model's linear layers are sharded with MixedPrecisionPolicy(param_dtype=bfloat16,
reduce_dtype=float32): compute in bf16, gradients reduced in fp32.

  --fault none         healthy
  --fault tp_bf16      a "tensor-parallel" layer between them whose backward all-reduces its
                       input's gradient over the ranks itself (as Megatron-style TP does), in
                       the activations' dtype, bf16: FSDP's reduce_dtype does not reach it
  --fault sharded_scaler  healthy, with ShardedGradScaler (fp16 compute), which reduces
                       found_inf over the ranks
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


class ReduceGradient(torch.autograd.Function):
    """Identity forward; backward sums the gradient over the ranks (a TP region's entry)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        dist.all_reduce(g)
        return g


class TensorParallel(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(ReduceGradient.apply(x))


class Net(nn.Module):
    def __init__(self, tp):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.tp = TensorParallel(32) if tp else nn.Identity()
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(self.tp(torch.relu(self.fc1(x))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--fault", default="none", choices=("none", "tp_bf16", "sharded_scaler"))
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net(a.fault == "tp_bf16")
    low = torch.float16 if a.fault == "sharded_scaler" else torch.bfloat16
    mp = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)
    fully_shard(model.fc1, mp_policy=mp)
    fully_shard(model.fc2, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = None
    if a.fault == "sharded_scaler":
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
        scaler = ShardedGradScaler(device="cpu")
    g = torch.Generator().manual_seed(1 + rank)
    for _ in range(a.steps):
        x = torch.randn(8, 16, generator=g)
        y = torch.randint(0, 4, (8,), generator=g)
        loss = nn.functional.cross_entropy(model(x).float(), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        opt.zero_grad()
    if rank == 0:
        print(f"trained {a.steps} steps on {dist.get_world_size()} ranks ({a.fault})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
