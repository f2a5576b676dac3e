"""Numerics in the engine's terms (inspector/numerics.h), without a framework: the
statistics one key accumulates (Stats, the report's Numerics object) and the fp16/bf16
class boundaries. numerics.py fills them from PyTorch tensors, paddle_recorder.py from
PaddlePaddle's (through numpy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MIN_EXPONENT = -149
MAX_EXPONENT = 127
EXPONENTS = MAX_EXPONENT - MIN_EXPONENT + 1

@dataclass(frozen=True)
class NarrowBounds:
    """Where rounding into a 16-bit dtype changes class, as exact magnitudes."""
    name: str            # the dtype's long name, as the report writes it
    max: float           # the largest finite value
    overflow: float      # |x| >= this rounds to Inf (max + ulp(max)/2)
    underflow: float     # 0 < |x| <= this rounds to 0 (min_subnormal/2)
    min_normal_tie: float  # |x| < this (and above underflow) rounds to a subnormal
    min_subnormal: float
    min_normal: float


F16 = NarrowBounds("float16", 65504.0, 65520.0, 2.0 ** -25, 2.0 ** -14 - 2.0 ** -25,
                   2.0 ** -24, 2.0 ** -14)
BF16 = NarrowBounds("bfloat16", 2.0 ** 128 - 2.0 ** 120, 2.0 ** 128 - 2.0 ** 119, 2.0 ** -134,
                    2.0 ** -126 - 2.0 ** -134, 2.0 ** -133, 2.0 ** -126)

@dataclass
class Stats:
    """TensorStats: one key's statistics, merged over the tensors seen."""
    count: int = 0
    tensors: int = 0
    zero: int = 0
    nan: int = 0
    pos_inf: int = 0
    neg_inf: int = 0
    below: int = 0
    above: int = 0
    by_exponent: list = field(default_factory=lambda: [0] * EXPONENTS)
    f16: list = field(default_factory=lambda: [0, 0, 0, 0])   # overflow, rounds_to_max, underflow, subnormal
    bf16: list = field(default_factory=lambda: [0, 0, 0, 0])
    sum: float = 0.0
    sum_squares: float = 0.0
    min: float = math.nan
    max: float = math.nan
    absmax: float = math.nan
    min_nonzero_abs: float = math.nan

    def finite(self) -> int:
        return self.count - self.nan - self.pos_inf - self.neg_inf

    def nonzero_finite(self) -> int:
        return self.finite() - self.zero

    def merge(self, more: "Stats") -> None:
        """Adds `more`: counts add, extremes combine, the sums re-weight mean and rms."""
        had_finite, had_nonzero = self.finite() > 0, self.nonzero_finite() > 0
        for name in ("count", "tensors", "zero", "nan", "pos_inf", "neg_inf", "below", "above",
                     "sum", "sum_squares"):
            setattr(self, name, getattr(self, name) + getattr(more, name))
        self.by_exponent = [a + b for a, b in zip(self.by_exponent, more.by_exponent)]
        self.f16 = [a + b for a, b in zip(self.f16, more.f16)]
        self.bf16 = [a + b for a, b in zip(self.bf16, more.bf16)]
        # Undefined (NaN) extremes mean "no element yet": decided by the counts.
        if more.finite() > 0:
            self.min = min(self.min, more.min) if had_finite else more.min
            self.max = max(self.max, more.max) if had_finite else more.max
            self.absmax = max(self.absmax, more.absmax) if had_finite else more.absmax
        if more.nonzero_finite() > 0:
            self.min_nonzero_abs = (min(self.min_nonzero_abs, more.min_nonzero_abs)
                                    if had_nonzero else more.min_nonzero_abs)

    def report(self) -> dict:
        """The report's Numerics object (docs/report-format.md)."""
        finite = self.finite()
        mean = self.sum / finite if finite > 0 else math.nan
        rms = math.sqrt(self.sum_squares / finite) if finite > 0 else math.nan
        if self.nonzero_finite() > 0:
            ratio = self.absmax / self.min_nonzero_abs
            drange = (math.log2(ratio) if math.isfinite(ratio)
                      else math.log2(self.absmax) - math.log2(self.min_nonzero_abs))
        else:
            drange = math.nan
        nonempty = [i for i, c in enumerate(self.by_exponent) if c]
        counts = self.by_exponent[nonempty[0]:nonempty[-1] + 1] if nonempty else []
        return {
            "count": self.count,
            "tensors": self.tensors,
            "zeros": self.zero,
            "nan": self.nan,
            "pos_inf": self.pos_inf,
            "neg_inf": self.neg_inf,
            "f16": _counts_report(self.f16),
            "bf16": _counts_report(self.bf16),
            "min": self.min,
            "max": self.max,
            "absmax": self.absmax,
            "min_nonzero_abs": self.min_nonzero_abs,
            "mean": mean,
            "rms": rms,
            "dynamic_range_log2": drange,
            "histogram": {
                "min_exponent": MIN_EXPONENT + nonempty[0] if nonempty else 0,
                "counts": counts,
                "zero": self.zero,
                "nan": self.nan,
                "pos_inf": self.pos_inf,
                "neg_inf": self.neg_inf,
                "below": self.below,
                "above": self.above,
            },
        }


def _counts_report(c) -> dict:
    return {"overflow": c[0], "rounds_to_max": c[1], "underflow": c[2], "subnormal": c[3]}
