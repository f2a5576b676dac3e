#!/usr/bin/env python3
"""Wall time of `ampcheck bisect-nan` on every unstable sample, for one or more builds,
interleaved (each repetition runs every build on every sample in a shuffled order) so a
noisy machine affects them alike. Prints a markdown table: median seconds per build, the
runs each bisection took, and the ratio to the first build.

  bench/bisect_times.py --ampcheck before=/tmp/base/build/cli/ampcheck --ampcheck after=build/cli/ampcheck
  options: --samples NAME ... (default: samples/models/ORDER without the stable four), --reps 3
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STABLE = {"mlp", "cnn", "mobilenet", "transformer"}  # healthy at every level: nothing to bisect


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ampcheck", action="append", required=True, help="LABEL=PATH of an ampcheck binary (repeatable)")
    p.add_argument("--samples", nargs="+")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    builds = [tuple(x.split("=", 1)) for x in a.ampcheck]
    samples = a.samples or [s for s in open(os.path.join(ROOT, "samples", "models", "ORDER")).read().split()
                            if s not in STABLE]
    times = {(b, s): [] for b, _ in builds for s in samples}
    runs = {}
    rng = random.Random(a.seed)
    with tempfile.TemporaryDirectory(prefix="ampcheck-bisect-") as tmp:
        for _ in range(a.reps):
            jobs = [(b, path, s) for b, path in builds for s in samples]
            rng.shuffle(jobs)
            for label, path, sample in jobs:
                report = os.path.join(tmp, f"{label}.{sample}.json")
                start = time.perf_counter()
                r = subprocess.run([path, "bisect-nan", "--model", sample, "--report", report, "--quiet"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
                times[(label, sample)].append(time.perf_counter() - start)
                try:
                    with open(report) as f:
                        runs[(label, sample)] = (r.returncode, json.load(f).get("bisect", {}).get("runs"))
                except (OSError, ValueError):
                    runs[(label, sample)] = (r.returncode, None)
    first = builds[0][0]
    head = "| sample | " + " | ".join(f"{b} s" for b, _ in builds) + " | runs | " + \
           " | ".join(f"{b} / {first}" for b, _ in builds[1:]) + " |"
    print(head)
    print("|" + " --- |" * (1 + len(builds) + 1 + len(builds) - 1))
    totals = {b: 0.0 for b, _ in builds}
    for s in samples:
        med = {b: statistics.median(times[(b, s)]) for b, _ in builds}
        for b in med:
            totals[b] += med[b]
        counts = "/".join(str(runs.get((b, s), (None, None))[1]) for b, _ in builds)
        print(f"| {s} | " + " | ".join(f"{med[b]:.2f}" for b, _ in builds) + f" | {counts} | " +
              " | ".join(f"{med[b] / med[first]:.2f}" for b, _ in builds[1:]) + " |")
    print("| **total** | " + " | ".join(f"{totals[b]:.2f}" for b, _ in builds) + " | | " +
          " | ".join(f"{totals[b] / totals[first]:.2f}" for b, _ in builds[1:]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
