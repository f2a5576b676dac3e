"""Several processes: what one rank of a job records so that the job can be judged from
its ranks' reports (inspector/consensus.cpp reads them, as it reads the engine's MPI ranks).

- **Who it is.** A launcher (torchrun, ``python -m torch.distributed.run``, ``accelerate
  launch``, ``paddle.distributed.launch``, mpirun) is not the job: its workers get their
  rank from the environment (RANK / WORLD_SIZE / LOCAL_RANK; Paddle's PADDLE_TRAINER_ID /
  PADDLE_TRAINERS_NUM; OpenMPI's OMPI_COMM_WORLD_*). Each rank writes its own report beside
  the job's path (``report.rank1.json``).
- **Whether the replicas agree.** Every step, after the update: a checksum per parameter
  (the sum of its values' bit patterns as integers: exact, so independent of the order of
  the sum and of the thread count, and different for any change of a value but with
  negligible chance), and the same for the gradients the update used. The job's analysis
  compares the ranks parameter by parameter, among the parameters whose checksums agreed
  before the first update (a shard each rank holds alone is no replica).
- **The collectives as they ran.** c10d's collectives and the functional ones reach the
  recorder's dispatch mode with their tensors: the op, its dtype, the phase (a collective
  in backward is a gradient reduction), the module and the autograd.Function it ran in.
  Their values are never read: an asynchronous collective may still be writing them.
- **What mixed precision was asked of the wrappers**: FSDP2's MixedPrecisionPolicy
  (fully_shard), FSDP1's MixedPrecision, DDP's mixed_precision and its comm hooks (a
  bf16_compress_hook reduces gradients in bf16).
"""

from __future__ import annotations

import torch

from . import numerics as nx
from .ranks import MASK, RankInfo, combine, out_for_rank, pack, rank_from_environment, unpack  # noqa: F401

COLLECTIVE_NAMESPACES = frozenset({"c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd"})
# The data-parallel wrappers' own copies into and out of their communication buffers
# (FSDP2's all_gather_copy_in, split_with_sizes_copy, chunk_cat): values in transit, some
# of them in buffers a collective has not filled yet. Passed through unrecorded.
TRANSIT_NAMESPACES = frozenset({"fsdp"})
# Calls in those namespaces that move no data: passed through unrecorded.
NOT_COLLECTIVES = frozenset({"wait_tensor", "_wait_tensor", "wait"})

# c10d's op names (and the functional ones') as users say them.
_NAMES = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce", "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce", "all_reduce_coalesced": "all_reduce", "all_reduce_coalesced_": "all_reduce",
    "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "_allgather_base_": "all_gather", "allgather_": "all_gather", "allgather_coalesced_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather", "all_gather_into_tensor_out": "all_gather",
    "broadcast_": "broadcast", "broadcast": "broadcast", "reduce_": "reduce", "gather_": "gather",
    "scatter_": "scatter", "alltoall_": "all_to_all", "alltoall_base_": "all_to_all",
    "all_to_all_single": "all_to_all", "barrier": "barrier", "send": "send", "recv_": "recv",
    "recv_any_source_": "recv",
}



def _bits(t: torch.Tensor) -> torch.Tensor:
    # A DTensor (FSDP2's sharded parameters): this rank's part, taken without dispatching
    # through the subclass (the recorder reads with Python dispatch disabled).
    local = getattr(t, "_local_tensor", None)
    t = (local if isinstance(local, torch.Tensor) else t).detach()
    if t.is_floating_point() or t.is_complex():
        size = t.element_size()
        as_int = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(size)
        if as_int is None:
            t = t.to(torch.float64)
            as_int = torch.int64
        t = t.view(as_int)
    elif t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t


def checksums(tensors) -> list[int]:
    """One checksum per tensor (None: 0): its values' bit patterns summed as integers,
    modulo 2^64. On the tensors' device; one read back for all of them."""
    sums, where = [], []
    for i, t in enumerate(tensors):
        if t is None:
            continue
        b = _bits(t)
        sums.append(torch.sum(b, dtype=torch.int64) if b.numel() else torch.zeros((), dtype=torch.int64,
                                                                                     device=b.device))
        where.append(i)
    out = [0] * len(tensors)
    if not sums:
        return out
    devices = {s.device for s in sums}
    values = []
    for d in sorted(devices, key=str):
        group = [s for s in sums if s.device == d]
        values.append((d, torch.stack(group).tolist()))
    by_device = {d: iter(v) for d, v in values}
    for i, s in zip(where, sums):
        out[i] = next(by_device[s.device]) & MASK
    return out


def collective_name(packet: str) -> str:
    return _NAMES.get(packet, packet.rstrip("_"))


class Collectives:
    """The collectives a rank ran, by (op, dtype, phase, module, function)."""

    def __init__(self):
        self.rows: dict = {}

    def add(self, packet: str, aten: str, tensors, phase: str, module: str, function: str, step: int):
        floating = [t for t in tensors if t.is_floating_point()]
        data = floating or list(tensors)
        dtype = nx.dtype_name(data[0].dtype) if data else ""
        elements = max((t.numel() for t in data), default=0)
        key = (collective_name(packet), aten, dtype, phase, module, function)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = [0, 0, step]
        row[0] += 1
        row[1] += elements

    def report(self) -> list:
        return [{"op": op, "aten": aten, "dtype": dtype, "phase": phase, "module": module, "function": function,
                 "calls": calls, "elements": elements, "first_step": first}
                for (op, aten, dtype, phase, module, function), (calls, elements, first) in self.rows.items()]


def _dtype(d) -> str:
    return nx.dtype_name(d) if isinstance(d, torch.dtype) else ""


def mixed_precision_asked(modules) -> list:
    """What mixed precision the data-parallel wrappers among `modules` ((path, module) pairs)
    were asked for: one entry per distinct setting, with the modules that have it."""
    found: dict = {}

    def add(api, path, param, reduce, output, hooks=()):
        key = (api, param, reduce, output, tuple(hooks))
        entry = found.get(key)
        if entry is None:
            entry = found[key] = {"api": api, "modules": [], "param_dtype": param, "reduce_dtype": reduce,
                                  "output_dtype": output, "comm_hooks": list(hooks)}
        if len(entry["modules"]) < 8:
            entry["modules"].append(path)

    for path, m in modules:
        get_state = getattr(m, "_get_fsdp_state", None)
        if callable(get_state):  # FSDP2: fully_shard(module, mp_policy=MixedPrecisionPolicy(...))
            try:
                mp = getattr(get_state(), "_mp_policy", None)
            except Exception:
                mp = None
            if mp is not None:
                add("fully_shard", path, _dtype(getattr(mp, "param_dtype", None)),
                    _dtype(getattr(mp, "reduce_dtype", None)), _dtype(getattr(mp, "output_dtype", None)))
            continue
        name = type(m).__name__
        if name == "FullyShardedDataParallel":
            mp = getattr(m, "mixed_precision", None)
            if mp is not None:
                add("FullyShardedDataParallel", path, _dtype(getattr(mp, "param_dtype", None)),
                    _dtype(getattr(mp, "reduce_dtype", None)), _dtype(getattr(mp, "buffer_dtype", None)))
        elif name == "DistributedDataParallel":
            mp = getattr(m, "mixed_precision", None)
            hooks = [getattr(h, "__name__", type(h).__name__) for h, _ in getattr(m, "_comm_hooks", [])]
            if mp is None and not hooks:  # gradients reduced as they are: nothing asked
                continue
            add("DistributedDataParallel", path, _dtype(getattr(mp, "param_dtype", None)) if mp else "",
                _dtype(getattr(mp, "reduce_dtype", None)) if mp else "", "", hooks)
    return list(found.values())


def backend() -> str:
    """The default process group's backend, when one is up."""
    try:
        import torch.distributed as td
        if td.is_available() and td.is_initialized():
            return str(td.get_backend())
    except Exception:
        pass
    return ""
