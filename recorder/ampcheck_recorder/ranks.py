"""Which rank of a job this process is, from the environment its launcher set: no torch
imported (the interpreter-start bootstrap reads it before the script imports its framework).
distributed.py has the rest of what several processes record."""

from __future__ import annotations

import base64
import os
import struct
from dataclasses import dataclass

MASK = (1 << 64) - 1


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    launcher: str


def _int(env, *names):
    for n in names:
        v = env.get(n)
        if v is not None and v.strip().lstrip("-").isdigit():
            return int(v)
    return None


def rank_from_environment(env=None) -> RankInfo | None:
    """This process's rank in a job a launcher started, or None for a lone process."""
    env = os.environ if env is None else env
    rank = _int(env, "RANK", "PADDLE_TRAINER_ID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
    world = _int(env, "WORLD_SIZE", "PADDLE_TRAINERS_NUM", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    if rank is None or world is None or world < 1:
        return None
    local = _int(env, "LOCAL_RANK", "PADDLE_RANK_IN_NODE", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
    if "ACCELERATE_MIXED_PRECISION" in env or "ACCELERATE_DYNAMO_BACKEND" in env:
        launcher = "accelerate launch"
    elif "TORCHELASTIC_RUN_ID" in env or "TORCHELASTIC_RESTART_COUNT" in env:
        launcher = "torchrun"
    elif "PADDLE_TRAINER_ID" in env:
        launcher = "paddle.distributed.launch"
    elif "OMPI_COMM_WORLD_RANK" in env:
        launcher = "mpirun"
    else:
        launcher = "environment"
    return RankInfo(rank, world, rank if local is None else local, launcher)


def out_for_rank(out: str, rank: int) -> str:
    """A rank's report beside the job's: run.json -> run.rank1.json."""
    root, ext = os.path.splitext(out)
    return f"{root}.rank{rank}{ext or '.json'}"


def combine(values) -> str:
    """The checksums of several tensors as one, in hex (FNV-1a over their 64-bit words)."""
    h = 0xCBF29CE484222325
    for v in values:
        h = ((h ^ (v & MASK)) * 0x100000001B3) & MASK
    return f"{h:016x}"


def pack(values) -> str:
    """Per-tensor checksums as base64 of little-endian 64-bit words (the report's form)."""
    return base64.b64encode(struct.pack(f"<{len(values)}Q", *[v & MASK for v in values])).decode("ascii")


def unpack(text: str) -> list[int]:
    raw = base64.b64decode(text)
    return list(struct.unpack(f"<{len(raw) // 8}Q", raw))
