#!/usr/bin/env python3
"""ampcheck's fp8 casts against ml_dtypes on every binary32 pattern (issue 33's oracle).

For each format (e4m3: ml_dtypes.float8_e4m3fn, e5m2: ml_dtypes.float8_e5m2), each overflow
rule and each conversion path this CPU runs, ampcheck_bench_fp8_codes writes its code for
all 2^32 patterns and this script compares them, chunk by chunk, with ml_dtypes' astype:

  - not saturating (ampcheck's to_nonfinite): ml_dtypes' code, bit for bit;
  - saturating (TE's and CUDA's SATFINITE cast): ml_dtypes' code, except that a finite or
    infinite input whose ml_dtypes cast is NaN (E4M3) or Inf (E5M2) becomes +-max, as the
    saturating rule defines it; a NaN input stays NaN.

  bench/onnx/.venv/bin/python bench/fp8/ml_dtypes_oracle.py [--bin build/bench/ampcheck_bench_fp8_codes]
      [--paths scalar,f16c] [--out FILE.md]

Prints the mismatches (at most 10 per run) and a table; exit 1 when any run mismatches.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time

import ml_dtypes
import numpy as np

CHUNK = 1 << 24
FORMATS = {"e4m3": (ml_dtypes.float8_e4m3fn, 0x7E), "e5m2": (ml_dtypes.float8_e5m2, 0x7B)}


def expected(patterns: np.ndarray, fmt: str, saturate: bool) -> np.ndarray:
    dtype, max_code = FORMATS[fmt]
    x = patterns.view(np.float32)
    with np.errstate(all="ignore"):
        codes = x.astype(dtype).view(np.uint8).copy()
    if saturate:
        widened = codes.view(dtype).astype(np.float32)
        beyond = ~np.isfinite(widened) & ~np.isnan(x)
        codes[beyond] = (max_code | (patterns[beyond] >> 24 & 0x80)).astype(np.uint8)
    return codes


def run(binary: str, fmt: str, overflow: str, path: str) -> tuple[int, list[str], float]:
    start = time.perf_counter()
    proc = subprocess.Popen([binary, fmt, overflow, path], stdout=subprocess.PIPE)
    bad, examples = 0, []
    for base in range(0, 1 << 32, CHUNK):
        got = np.frombuffer(proc.stdout.read(CHUNK), dtype=np.uint8)
        if got.size != CHUNK:
            raise SystemExit(f"{binary} stopped at pattern {base:#x} (exit {proc.wait()})")
        patterns = np.arange(base, base + CHUNK, dtype=np.uint64).astype(np.uint32)
        want = expected(patterns, fmt, overflow == "saturate")
        diff = np.nonzero(got != want)[0]
        bad += diff.size
        for i in diff[: max(0, 10 - len(examples))]:
            examples.append(f"{fmt} {overflow} [{path}] {int(patterns[i]):#010x}: ampcheck {int(got[i]):#04x}, "
                            f"ml_dtypes {int(want[i]):#04x}")
    if proc.wait() != 0:
        raise SystemExit(f"{binary} failed (exit {proc.returncode})")
    return bad, examples, time.perf_counter() - start


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(here, "..", "..", "build", "bench", "ampcheck_bench_fp8_codes"))
    ap.add_argument("--paths", default="scalar,f16c", help="conversion paths to check (those this CPU runs)")
    ap.add_argument("--out")
    a = ap.parse_args()
    rows, failed = [], False
    for fmt in FORMATS:
        for overflow in ("to_nonfinite", "saturate"):
            for path in a.paths.split(","):
                bad, examples, seconds = run(a.bin, fmt, overflow, path)
                failed = failed or bad > 0
                for e in examples:
                    print(e)
                rows.append(f"| {fmt} | {overflow} | {path} | {1 << 32} | {bad} | {seconds:.0f} s |")
                print(rows[-1], flush=True)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    text = (f"# fp8 casts against ml_dtypes, every binary32 pattern\n\n"
            f"`bench/fp8/ml_dtypes_oracle.py --paths {a.paths}`: ml_dtypes {ml_dtypes.__version__}, numpy "
            f"{np.__version__}; {cpu}. Saturating: ml_dtypes' code with its out-of-range results (NaN in E4M3, "
            f"Inf in E5M2, from a non-NaN input) replaced by +-max.\n\n"
            "| format | overflow | path | patterns | mismatches | time |\n| --- | --- | --- | ---: | ---: | ---: |\n"
            + "\n".join(rows) + "\n")
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
