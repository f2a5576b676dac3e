"""Numerics in the engine's bins, against references written here from first principles:
math.frexp for the exponent, numpy's float16 conversion for fp16, and a round-to-nearest-
even on float32 bits for bf16."""

import math
import struct

import numpy as np
import pytest
import torch

from ampcheck_recorder import numerics as nx


def bf16_round(x: float) -> float:
    """x (a float32 value) rounded to bfloat16 by round-to-nearest-even on its bits."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if (bits & 0x7F800000) == 0x7F800000:
        return x
    lower = bits & 0xFFFF
    upper = bits >> 16
    if lower > 0x8000 or (lower == 0x8000 and (upper & 1)):
        upper += 1
    return struct.unpack("<f", struct.pack("<I", (upper << 16) & 0xFFFFFFFF))[0]


def classify(values, rounded, largest, smallest_normal):
    """(overflow, rounds_to_max, underflow, subnormal) from the rounded values."""
    c = [0, 0, 0, 0]
    for x, r in zip(values, rounded):
        if not math.isfinite(x) or x == 0:
            continue
        if math.isinf(r):
            c[0] += 1
        elif abs(x) > largest:
            c[1] += 1
        if r == 0:
            c[2] += 1
        elif abs(r) < smallest_normal:
            c[3] += 1
    return c


EDGES = [0.0, -0.0, 1.0, -3.5, 65504.0, 65504.5, 65519.0, 65519.99, 65520.0, -65520.0, 70000.0,
         2.0 ** -25, 2.0 ** -25 * 1.0001, 2.0 ** -24, 2.0 ** -14, 2.0 ** -14 - 2.0 ** -25,
         2.0 ** -14 - 2.0 ** -24, 1e-30, 1e-40, 2.0 ** -149, 2.0 ** -126 - 2.0 ** -134,
         2.0 ** -126 - 2.0 ** -133, 2.0 ** -134, 3.3e38, 3.39e38, float("inf"), float("-inf"),
         float("nan"), 123.456, -0.001]


def reference(values):
    vals = [float(np.float32(v)) for v in values]
    finite = [v for v in vals if math.isfinite(v)]
    nonzero = [abs(v) for v in finite if v != 0]
    bins = {}
    for a in nonzero:
        e = math.frexp(a)[1] - 1
        bins[e] = bins.get(e, 0) + 1
    with np.errstate(over="ignore"):
        f16 = [float(np.float16(np.float32(v))) for v in vals]
    bf16 = [bf16_round(v) for v in vals]
    return {
        "count": len(vals),
        "nan": sum(math.isnan(v) for v in vals),
        "pos_inf": sum(v == math.inf for v in vals),
        "neg_inf": sum(v == -math.inf for v in vals),
        "zeros": sum(v == 0 for v in finite),
        "bins": bins,
        "f16": classify(vals, f16, 65504.0, 2.0 ** -14),
        "bf16": classify(vals, bf16, float(torch.finfo(torch.bfloat16).max), 2.0 ** -126),
        "min": min(finite), "max": max(finite), "absmax": max(abs(v) for v in finite),
        "min_nonzero_abs": min(nonzero), "sum": math.fsum(finite),
    }


def test_stats_of_edge_values_match_rounding_references():
    t = torch.tensor(EDGES, dtype=torch.float32)
    s = nx.tensor_stats(t).report()
    ref = reference(EDGES)
    for key in ("count", "nan", "pos_inf", "neg_inf", "zeros"):
        assert s[key] == ref[key], key
    assert [s["f16"][k] for k in ("overflow", "rounds_to_max", "underflow", "subnormal")] == ref["f16"]
    assert [s["bf16"][k] for k in ("overflow", "rounds_to_max", "underflow", "subnormal")] == ref["bf16"]
    h = s["histogram"]
    got = {h["min_exponent"] + i: c for i, c in enumerate(h["counts"]) if c}
    assert got == ref["bins"]
    assert sum(h["counts"]) + h["zero"] + h["nan"] + h["pos_inf"] + h["neg_inf"] + h["below"] + h["above"] == len(EDGES)
    for key in ("min", "max", "absmax", "min_nonzero_abs"):
        assert s[key] == ref[key], key
    finite = ref["count"] - ref["nan"] - ref["pos_inf"] - ref["neg_inf"]
    assert s["mean"] == pytest.approx(ref["sum"] / finite, rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_stats_of_random_low_precision_tensors(dtype):
    g = torch.Generator().manual_seed(3)
    t = (torch.randn(4000, generator=g) * torch.exp2(torch.randint(-30, 30, (4000,), generator=g).float())).to(dtype)
    s = nx.tensor_stats(t).report()
    ref = reference(t.float().tolist())
    h = s["histogram"]
    assert {h["min_exponent"] + i: c for i, c in enumerate(h["counts"]) if c} == ref["bins"]
    assert s["zeros"] == ref["zeros"]
    finite = [v for v in t.double().tolist() if math.isfinite(v)]
    assert s["rms"] == pytest.approx(math.sqrt(math.fsum(v * v for v in finite) / len(finite)), rel=1e-9)
    assert s["pos_inf"] + s["neg_inf"] == 4000 - len(finite)


def test_f64_data_outside_the_f32_range_lands_below_and_above():
    t = torch.tensor([1e-300, 1e300, 1.0, 2.0 ** -150], dtype=torch.float64)
    h = nx.tensor_stats(t).report()["histogram"]
    assert (h["below"], h["above"]) == (2, 1)
    assert h["min_exponent"] == 0 and h["counts"] == [1]


def test_merge_equals_stats_of_the_concatenation():
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(300, generator=g) * 1e3, torch.randn(200, generator=g) * 1e-6
    b[7] = float("inf")
    merged = nx.tensor_stats(a)
    merged.merge(nx.tensor_stats(b))
    whole = nx.tensor_stats(torch.cat([a, b]))
    m, w = merged.report(), whole.report()
    assert m["tensors"] == 2 and w["tensors"] == 1
    for key in ("count", "zeros", "nan", "pos_inf", "neg_inf", "f16", "bf16", "histogram", "min", "max", "absmax",
                "min_nonzero_abs"):
        assert m[key] == w[key], key
    assert m["mean"] == pytest.approx(w["mean"], rel=1e-12)


def test_range_loss_tells_low_precision_losses_from_fp32_ones():
    ref = torch.tensor([70000.0, 1e-9, 3.0, float("inf"), 1e-46, 65000.0])
    low = ref.to(torch.float16)  # 70000 -> inf, 1e-9 -> 0, inf stays, 1e-46 is 0 in fp32 too
    r = nx.range_loss(low, ref)
    assert (r.overflow, r.underflow, r.fp32_nonfinite) == (1, 1, 1)
    assert r.overflow_value == 70000.0 and r.underflow_value == pytest.approx(1e-9)
    assert r.first_kind == "overflow"
