"""Numerics of tensors in the engine's terms (inspector/numerics.h).

One pass over a tensor of any float dtype gives what ampcheck's report calls Numerics:
the counts of zeros, NaN and +-Inf, the exponent histogram (one bin per binary exponent
floor(log2|x|) from -149 to 127, plus zero, NaN, +Inf, -Inf, and below/above for f64
data outside the f32 range), what the values would become in fp16 and bf16 (overflow,
rounds_to_max, underflow, subnormal), and min, max, absmax, min_nonzero_abs, mean, rms
and dynamic range over the finite elements. Statistics of one key merge over steps.

The fp16/bf16 classes compare |x| with the midpoints where round-to-nearest-even changes
class (kernels/numerics_kernels.h, NarrowBounds): that is exactly what rounding would do,
without converting every element. Everything here runs with the recorder paused, on the
tensor's own device; only a few scalars come back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .stats import (BF16, EXPONENTS, F16, MAX_EXPONENT, MIN_EXPONENT, NarrowBounds, Stats,  # noqa: F401
                    _counts_report)

LOW_PRECISION = (torch.float16, torch.bfloat16)
BOUNDS = {torch.float16: F16, torch.bfloat16: BF16}

_DTYPE_NAMES = {
    torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
    torch.float64: "float64",
}


def dtype_name(dtype) -> str:
    """The dtype as the report writes it: "float16", "int64", "bool"."""
    if dtype in _DTYPE_NAMES:
        return _DTYPE_NAMES[dtype]
    return str(dtype).replace("torch.", "")


def is_low_precision(dtype) -> bool:
    return dtype in LOW_PRECISION


# The fp8 dtypes of this torch (float8 training: torch._scaled_mm, torchao, TransformerEngine).
FP8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
            if hasattr(torch, n))


def is_fp8(dtype) -> bool:
    return dtype in FP8


@dataclass(frozen=True)
class Fp8Bounds:
    """What a cast into an fp8 dtype does at the ends of its range (one rounding to nearest
    even): |x| beyond `beyond` leaves the finite range (`beyond_inclusive`: at it too: a
    tie that rounds to the odd-mantissa max's successor), where PyTorch saturates to +-max
    (`saturates`) or makes +-Inf; 0 < |x| <= `underflow` (half the smallest subnormal, a
    tie to the even 0) becomes 0."""
    name: str
    max: float
    beyond: float
    beyond_inclusive: bool
    underflow: float
    saturates: bool


# E4M3 (fn): max 448 = 1.75 * 2^8, its next step 480 has no code: a tie at 464 rounds to
# 448 (even mantissa). E5M2: max 57344 = 1.75 * 2^15 (odd mantissa; two mantissa bits, so
# its step is 2^13), a tie at 61440 rounds
# up to Inf. PyTorch's .to(float8_e4m3fn) saturates (1000 -> 448), .to(float8_e5m2) does not.
FP8_BOUNDS = {d: b for d, b in (
    (getattr(torch, "float8_e4m3fn", None), Fp8Bounds("float8_e4m3fn", 448.0, 464.0, False, 2.0 ** -10, True)),
    (getattr(torch, "float8_e5m2", None), Fp8Bounds("float8_e5m2", 57344.0, 61440.0, True, 2.0 ** -17, False)),
) if d is not None}


def fp8_cast_counts(src: torch.Tensor, bounds: Fp8Bounds) -> tuple[int, int]:
    """(elements that leave the finite range, elements that underflow to 0) when src is cast."""
    a = readable(src.detach()).reshape(-1).to(torch.float64).abs()
    beyond = (a >= bounds.beyond) if bounds.beyond_inclusive else (a > bounds.beyond)
    c = torch.stack([(beyond & torch.isfinite(a)).sum(), ((a > 0) & (a <= bounds.underflow)).sum()]).tolist()
    return c[0], c[1]


def readable(t: torch.Tensor) -> torch.Tensor:
    """t, or its fp8 values widened to fp32 (exact): torch has few kernels for fp8 (no
    aminmax, isnan or comparisons on the CPU), and the statistics read every dtype alike."""
    return t.float() if t.dtype in FP8 else t


def storage_holds(t: torch.Tensor) -> bool:
    """Whether a tensor kept from earlier still has the memory it views: FSDP frees an
    unsharded parameter by resizing its storage to 0 (untyped_storage().resize_(0)), which no
    dispatch mode sees; reading such a view later would read freed memory."""
    if t.numel() == 0:
        return True
    try:
        extent = t.storage_offset() + 1 + sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride()))
        return t.untyped_storage().nbytes() >= extent * t.element_size()
    except (RuntimeError, NotImplementedError):  # no storage to ask (a subclass, a meta tensor)
        return False


def _work_dtype(t: torch.Tensor):
    # fp16, bf16 and fp32 values are exact in fp32, and so are the class boundaries of
    # both narrow dtypes (each a short mantissa times a power of two in fp32's range);
    # f64 data is kept in f64.
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _narrow_counts(a: torch.Tensor, nonzero: torch.Tensor, b: NarrowBounds) -> list:
    return [
        (a >= b.overflow).sum(),
        ((a > b.max) & (a < b.overflow)).sum(),
        (nonzero & (a <= b.underflow)).sum(),
        ((a > b.underflow) & (a < b.min_normal_tie)).sum(),
    ]


def tensor_stats(t: torch.Tensor) -> Stats:
    """The statistics of every element of a float tensor."""
    x = t.detach().reshape(-1).to(_work_dtype(t))
    s = Stats(count=x.numel(), tensors=1)
    if s.count == 0:
        return s
    fin = torch.isfinite(x)
    xf = x[fin]
    a = xf.abs()
    nonzero = a != 0
    nz = a[nonzero]
    # floor(log2|x|) exactly, subnormals too: |x| = m 2^e with 0.5 <= m < 1.
    exponent = torch.frexp(nz)[1].to(torch.int64) - 1
    below = exponent < MIN_EXPONENT
    above = exponent > MAX_EXPONENT
    inside = exponent[~below & ~above] - MIN_EXPONENT
    scalars = [
        torch.isnan(x).sum(),
        (x == math.inf).sum(),
        (x == -math.inf).sum(),
        (~nonzero).sum(),
        below.sum(),
        above.sum(),
        *_narrow_counts(a, nonzero, F16),
        *_narrow_counts(a, nonzero, BF16),
    ]
    counts = torch.stack(scalars).tolist()
    (s.nan, s.pos_inf, s.neg_inf, s.zero, s.below, s.above) = counts[:6]
    s.f16, s.bf16 = counts[6:10], counts[10:14]
    s.by_exponent = torch.bincount(inside, minlength=EXPONENTS).tolist()
    if xf.numel():
        xd = xf.to(torch.float64)
        sums = torch.stack([xd.sum(), (xd * xd).sum(), xf.min().double(), xf.max().double(),
                            a.max().double()]).tolist()
        s.sum, s.sum_squares, s.min, s.max, s.absmax = sums
    if nz.numel():
        s.min_nonzero_abs = nz.min().item()
    return s


@dataclass
class Range:
    """A floating tensor an event read (the report's TensorRange): its non-finite counts
    and the range of its finite values (NaN when it has none)."""
    nan: int
    pos_inf: int
    neg_inf: int
    min: float
    max: float
    absmax: float

    def nonfinite(self) -> int:
        return self.nan + self.pos_inf + self.neg_inf


def all_finite(t: torch.Tensor) -> bool:
    """Whether every element is finite: one aminmax (NaN and +-Inf reach its min or max),
    a cheaper pass than isfinite().all() (which is several kernels, slow ones in fp16)."""
    if t.numel() == 0:
        return True
    lo, hi = torch.aminmax(readable(t))
    return math.isfinite(lo.item()) and math.isfinite(hi.item())


def nonfinite_counts(t: torch.Tensor) -> tuple[int, int, int]:
    """(NaN, +Inf, -Inf) elements; one pass and one scalar back when all are finite."""
    t = readable(t)
    if all_finite(t):
        return (0, 0, 0)
    c = torch.stack([torch.isnan(t).sum(), (t == math.inf).sum(), (t == -math.inf).sum()]).tolist()
    return (c[0], c[1], c[2])


def range_of(t: torch.Tensor) -> Range:
    x = readable(t.detach().reshape(-1))
    nan, pos, neg = nonfinite_counts(x)
    xf = x[torch.isfinite(x)] if nan + pos + neg else x
    if xf.numel() == 0:
        return Range(nan, pos, neg, math.nan, math.nan, math.nan)
    w = xf.to(torch.float64)
    lo, hi, am = torch.stack([w.min(), w.max(), w.abs().max()]).tolist()
    return Range(nan, pos, neg, lo, hi, am)


def any_nonzero(t: torch.Tensor) -> bool:
    """Whether any element is not +-0 (a NaN counts as nonzero)."""
    return t.numel() > 0 and bool((readable(t) != 0).any())


@dataclass
class RangeLoss:
    """What a low-precision result lost against its fp32 recompute (docs/inspector.md,
    "Range loss"): elements stored as 0 whose fp32 value is nonzero and rounds to 0 in
    the dtype (underflow), stored as +-Inf whose fp32 value is finite and rounds to +-Inf
    in the dtype (overflow), with the first such value of each kind; and the elements
    that fp32 made non-finite too (no loss of the low precision)."""
    underflow: int = 0
    overflow: int = 0
    underflow_value: float = 0.0
    overflow_value: float = 0.0
    fp32_nonfinite: int = 0
    first_kind: str = ""  # what was lost first in element order: "underflow" or "overflow"


def range_loss(low: torch.Tensor, ref: torch.Tensor) -> RangeLoss:
    """Compares a low-precision result with the same op computed in fp32."""
    b = BOUNDS[low.dtype]
    lo = low.detach().reshape(-1).to(torch.float32)
    r = ref.detach().reshape(-1).to(torch.float32)
    ra = r.abs()
    r_finite = torch.isfinite(r)
    under = (lo == 0) & r_finite & (ra > 0) & (ra <= b.underflow)
    over = torch.isinf(lo) & r_finite & (ra >= b.overflow)
    both = ~torch.isfinite(lo) & ~r_finite
    n_under, n_over, n_both = torch.stack([under.sum(), over.sum(), both.sum()]).tolist()
    out = RangeLoss(underflow=n_under, overflow=n_over, fp32_nonfinite=n_both)
    first = {}
    if n_under:
        i = int(torch.nonzero(under)[0])
        out.underflow_value = r[i].item()
        first["underflow"] = i
    if n_over:
        i = int(torch.nonzero(over)[0])
        out.overflow_value = r[i].item()
        first["overflow"] = i
    if first:
        out.first_kind = min(first, key=first.get)
    return out


def flushed_elementwise(low: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per element: the low-precision result is 0 where fp32 holds a value the dtype rounds to 0."""
    b = BOUNDS[low.dtype]
    lo = low.detach().reshape(-1).to(torch.float32)
    r = ref.detach().reshape(-1).to(torch.float32)
    ra = r.abs()
    return (lo == 0) & torch.isfinite(r) & (ra > 0) & (ra <= b.underflow)


# -- many tensors at once ------------------------------------------------------------------
#
# tensor_stats() costs some twenty torch calls per tensor; a training step has hundreds
# of op results. StatsBatch takes a step's results as they come and computes the same
# statistics for all of them in a few calls: the tensors flattened into one fp32 buffer
# (fp16, bf16 and fp32 values are exact there), each element's |x| bits put in a bucket
# by one bucketize against every boundary the report's classes have (zero, each binary
# exponent, the fp16/bf16 rounding classes, Inf, NaN), and one bincount of (segment,
# bucket). Sums, extremes and the smallest nonzero |x| are segment reductions.
# A segment holding a NaN or Inf, and float64 data, take tensor_stats() itself.

def _bits(v: float) -> int:
    import struct
    return struct.unpack("<i", struct.pack("<f", v))[0]


def _boundaries():
    b = {1}  # 0: zero
    b.update(1 << k for k in range(23))            # f32 subnormals: exponents -149..-127
    b.update(e << 23 for e in range(1, 256))       # normal exponents -126..127, then Inf
    b.add((255 << 23) + 1)                         # NaN
    for nb in (F16, BF16):
        b.add(_bits(nb.overflow))                  # overflow: |x| >= overflow
        b.add(_bits(nb.max) + 1)                   # rounds_to_max: max < |x| < overflow
        b.add(_bits(nb.underflow) + 1)             # underflow: 0 < |x| <= underflow
        b.add(_bits(nb.min_normal_tie))            # subnormal: underflow < |x| < tie
    return sorted(b)


_BOUNDS = _boundaries()
NBUCKETS = len(_BOUNDS) + 1
_INF_BITS = 255 << 23


def _bucket_table():
    """Per bucket: (exponent index or -1, f16 class or -1, bf16 class or -1, kind), kind
    "zero", "finite", "inf" or "nan". A bucket [lo, hi) of |x| bits lies inside one
    exponent and one class of each narrow dtype."""
    import struct
    table = []
    lows = [0] + _BOUNDS
    for lo in lows:
        if lo == 0:
            table.append((-1, -1, -1, "zero"))
            continue
        if lo == _INF_BITS:
            table.append((-1, -1, -1, "inf"))
            continue
        if lo > _INF_BITS:
            table.append((-1, -1, -1, "nan"))
            continue
        a = struct.unpack("<f", struct.pack("<i", lo))[0]
        e = math.frexp(a)[1] - 1
        classes = []
        for nb in (F16, BF16):
            if a >= nb.overflow:
                c = 0
            elif a > nb.max:
                c = 1
            elif a <= nb.underflow:
                c = 2
            elif a < nb.min_normal_tie:
                c = 3
            else:
                c = -1
            classes.append(c)
        table.append((e - MIN_EXPONENT, classes[0], classes[1], "finite"))
    return table


_TABLE = _bucket_table()
_FIRST_NONFINITE = next(i for i, row in enumerate(_TABLE) if row[3] in ("inf", "nan"))
_bounds_cache: dict = {}


def _bounds_on(device):
    t = _bounds_cache.get(device)
    if t is None:
        t = _bounds_cache[device] = torch.tensor(_BOUNDS, dtype=torch.int32, device=device)
    return t


class Accumulator:
    """One key's statistics (a Stats) taking batched results too: the batched tensors'
    bucket counts are a row of their StatsBatch's table, their scalars add up here, and
    result() folds both into the Stats fields."""

    __slots__ = ("stats", "batch", "row", "count", "tensors", "sum", "sum_squares", "min", "max",
                 "min_nonzero_abs")

    def __init__(self):
        self.stats = Stats()   # tensors taken one at a time
        self.batch = None
        self.row = -1
        self.count = self.tensors = 0
        self.sum = self.sum_squares = 0.0
        self.min = self.max = self.min_nonzero_abs = math.nan

    def merge(self, more: Stats):
        self.stats.merge(more)

    def result(self) -> Stats:
        if self.batch is None or not self.tensors:
            return self.stats
        b = self.batch.row_counts(self.row)
        s = Stats(count=self.count, tensors=self.tensors, sum=self.sum, sum_squares=self.sum_squares,
                  min=self.min, max=self.max, absmax=max(-self.min, self.max) if self.min == self.min else math.nan,
                  min_nonzero_abs=self.min_nonzero_abs)
        for n, (e, c16, cb16, kind) in zip(b, _TABLE):
            if not n:
                continue
            if kind == "zero":
                s.zero += n
                continue
            s.by_exponent[e] += n
            if c16 >= 0:
                s.f16[c16] += n
            if cb16 >= 0:
                s.bf16[cb16] += n
        out = Stats()
        out.merge(s)
        out.merge(self.stats)
        return out

    def report(self) -> dict:
        return self.result().report()


class StatsBatch:
    """Tensors waiting for their statistics: add(accumulator, tensor), then flush(). The
    tensors must not change before the flush (the recorder flushes before any in-place op)."""

    def __init__(self):
        self.items: list = []    # (accumulator, tensor)
        self.elements = 0
        self.table = None        # int64 [rows, NBUCKETS] on the CPU
        self.rows = 0

    def __len__(self):
        return len(self.items)

    def add(self, acc: Accumulator, t: torch.Tensor):
        t = readable(t)
        n = t.numel()
        if n == 0 or t.dtype == torch.float64:
            acc.merge(tensor_stats(t))  # nothing to batch / not exact in fp32
            return
        if acc.batch is None:
            acc.batch, acc.row = self, self.rows
            self.rows += 1
        self.items.append((acc, t))
        self.elements += n

    def row_counts(self, row: int) -> list:
        if self.table is None or row >= self.table.shape[0]:
            return [0] * NBUCKETS
        return self.table[row].tolist()

    def flush(self):
        items, self.items, self.elements = self.items, [], 0
        # A result whose memory was freed meanwhile (FSDP's resharding) is not read.
        items = [item for item in items if storage_holds(item[1])]
        if not items:
            return
        if self.table is None or self.table.shape[0] < self.rows:
            grown = torch.zeros(max(self.rows, 64) * 2, NBUCKETS, dtype=torch.int64)
            if self.table is not None:
                grown[: self.table.shape[0]] = self.table
            self.table = grown
        by_device: dict = {}
        for item in items:
            by_device.setdefault(item[1].device, []).append(item)
        for device, group in by_device.items():
            self._flush_group(device, group)

    def _flush_group(self, device, group):
        tensors = [t.detach() for _, t in group]
        lengths = [t.numel() for t in tensors]
        flat = torch._utils._flatten_dense_tensors(tensors) if len(tensors) > 1 else tensors[0].reshape(-1)
        x = flat.to(torch.float32)
        nseg = len(tensors)
        bits = x.view(torch.int32) & 0x7FFFFFFF
        bucket = torch.bucketize(bits, _bounds_on(device), right=True, out_int32=True)
        lens = torch.tensor(lengths, device=device)
        # Each element's segment times NBUCKETS: NBUCKETS at every segment's start, summed up
        # (cheaper than repeat_interleave).
        if nseg > 1:
            starts = torch.zeros_like(bucket)
            starts[torch.tensor(lengths[:-1], device=device).cumsum(0)] = NBUCKETS
            bucket += starts.cumsum(0, dtype=torch.int32)
        counts = torch.bincount(bucket, minlength=nseg * NBUCKETS).view(nseg, NBUCKETS)
        xd = x.to(torch.float64)
        a = x.abs().masked_fill_(bits == 0, math.inf)
        red = torch.stack([
            torch.segment_reduce(xd, "sum", lengths=lens),
            torch.segment_reduce(xd * xd, "sum", lengths=lens),
            torch.segment_reduce(x, "min", lengths=lens).double(),
            torch.segment_reduce(x, "max", lengths=lens).double(),
            torch.segment_reduce(a, "min", lengths=lens).double(),
            counts[:, _FIRST_NONFINITE:].sum(1).double(),
        ]).t().tolist()
        rows = []
        bad = []
        for i, (acc, t) in enumerate(group):
            total, total_sq, lo, hi, min_nz, nonfinite = red[i]
            if nonfinite:
                acc.merge(tensor_stats(t))  # Inf/NaN: counted by sign, one tensor at a time
                bad.append(i)
                rows.append(acc.row)
                continue
            rows.append(acc.row)
            if acc.tensors:
                acc.min = min(acc.min, lo)
                acc.max = max(acc.max, hi)
                if min_nz != math.inf:
                    acc.min_nonzero_abs = (min_nz if acc.min_nonzero_abs != acc.min_nonzero_abs
                                           else min(acc.min_nonzero_abs, min_nz))
            else:
                acc.min, acc.max = lo, hi
                acc.min_nonzero_abs = min_nz if min_nz != math.inf else math.nan
            acc.count += lengths[i]
            acc.tensors += 1
            acc.sum += total
            acc.sum_squares += total_sq
        counts = counts.cpu()
        if bad:
            counts[bad] = 0
        self.table.index_add_(0, torch.tensor(rows), counts)
