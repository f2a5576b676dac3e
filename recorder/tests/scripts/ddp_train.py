"""Data-parallel training as PyTorch's DDP tutorial writes it, run under torchrun (gloo on
the CPU), with the faults users meet planted by flags (written for ampcheck's tests):

  python -m torch.distributed.run --nproc_per_node 2 ddp_train.py [--steps 6] [--fault F]

  --fault none           healthy: DDP, autocast fp16, one GradScaler per rank
  --fault skip_alone     a rank-local layer (a tensor-parallel shard, outside DDP) whose
                         weight's gradient overflows on rank 1 only at step 3; found_inf is not
                         reduced over the ranks, so rank 1 skips the update the others apply
  --fault late_param     a parameter added after DDP(model) was built: not in DDP's buckets,
                         its gradient stays each rank's own and the replicas drift apart
  --fault compress_hook  DDP's bf16_compress_hook: gradients reduced in bf16, as asked
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--fault", default="none", choices=("none", "skip_alone", "late_param", "compress_hook"))
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    shard = None
    if a.fault == "skip_alone":
        # Each rank's own slice of a layer: not replicated, not all-reduced.
        torch.manual_seed(100 + rank)
        shard = nn.Linear(4, 4)
    ddp = DDP(model)
    if a.fault == "late_param":
        model.fc2.register_parameter("gain", nn.Parameter(torch.ones(4)))
    if a.fault == "compress_hook":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    params = list(ddp.parameters()) + (list(shard.parameters()) if shard is not None else [])
    opt = torch.optim.SGD(params, lr=0.05)
    scaler = torch.amp.GradScaler("cpu")
    g = torch.Generator().manual_seed(1 + rank)
    for step in range(1, a.steps + 1):
        x = torch.randn(8, 16, generator=g)
        y = torch.randint(0, 4, (8,), generator=g)
        with torch.autocast("cpu", dtype=torch.float16):
            out = ddp(x)
            if a.fault == "late_param":
                out = out * model.fc2.gain
            if shard is not None:
                # On rank 1 at step 3 the shard reads large (finite) activations: its forward
                # stays in fp16's range, its weight's gradient does not.
                big = 15000.0 if (rank == 1 and step == 3) else 1.0
                out = out + 1e-3 * shard(out.detach() * big)
            loss = F.cross_entropy(out, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    if rank == 0:
        print(f"trained {a.steps} steps on {dist.get_world_size()} ranks ({a.fault})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
