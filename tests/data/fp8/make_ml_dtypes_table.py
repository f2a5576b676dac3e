#!/usr/bin/env python3
"""Writes ml_dtypes_fp8.txt: what ml_dtypes (the fp8 types of JAX and numpy) makes of the
fp8 formats, for tests/fp8_test.cpp to hold kernels/fp_bits.h against.

  decode FORMAT CODE F32BITS    every code 0x00..0xff, as the binary32 ml_dtypes widens it to
  encode FORMAT F32BITS CODE    binary32 patterns cast by ml_dtypes (astype: round to
                                nearest even, not saturating): the boundaries of each
                                format (every code's neighbours and midpoints, +-1 ulp),
                                the specials, and random patterns of every binade

FORMAT is e4m3 (ml_dtypes.float8_e4m3fn) or e5m2 (ml_dtypes.float8_e5m2). Deterministic:
run it with any Python that has numpy and ml_dtypes (bench/onnx/.venv has both):

    bench/onnx/.venv/bin/python tests/data/fp8/make_ml_dtypes_table.py
"""
from pathlib import Path

import ml_dtypes
import numpy as np

FORMATS = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def f32_bits(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def main() -> None:
    rng = np.random.default_rng(20261126)
    lines = [f"# written by make_ml_dtypes_table.py with ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}"]
    for name, t in FORMATS.items():
        codes = np.arange(256, dtype=np.uint8)
        widened = codes.view(t).astype(np.float32)
        lines += [f"decode {name} {c:#04x} {b:#010x}" for c, b in zip(codes, f32_bits(widened))]
        # Boundaries: every finite value, the midpoints between neighbours and the
        # binary32 patterns one ulp either side of each.
        finite = np.unique(np.abs(widened[np.isfinite(widened)]).astype(np.float64))
        mids = (finite[:-1] + finite[1:]) / 2
        top = finite[-1]
        beyond = np.array([top * 2 ** (1 / 16) * k for k in (1.0, 1.05, 1.1)] + [top * 1.0625, top * 1.125, 2 * top])
        anchors = np.concatenate([finite, mids, beyond, finite[:8] / 2, finite[:8] / 4])
        a32 = f32_bits(anchors.astype(np.float32)).astype(np.int64)
        around = np.concatenate([a32 - 1, a32, a32 + 1])
        around = around[(around >= 0) & (around < 0x7F800000)]
        specials = np.array([0x00000000, 0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x7F800000,
                             0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0x7FA00000], dtype=np.int64)
        random = rng.integers(0, 0x7F800000, size=2000, dtype=np.int64)
        pos = np.unique(np.concatenate([around, specials, random])).astype(np.uint32)
        pats = np.concatenate([pos, pos | np.uint32(0x80000000)])
        got = pats.view(np.float32).astype(t).view(np.uint8)
        lines += [f"encode {name} {p:#010x} {c:#04x}" for p, c in zip(pats, got)]
    out = Path(__file__).with_name("ml_dtypes_fp8.txt")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}: {len(lines) - 1} lines")


if __name__ == "__main__":
    main()
