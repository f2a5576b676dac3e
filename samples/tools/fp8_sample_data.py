#!/usr/bin/env python3
"""The inline data of the fp8 samples whose failure is in their data (samples/models/
fp8_amax_jump.json, fp8_padding_grads.json): printed as the model file's "data" block.

  python3 samples/tools/fp8_sample_data.py amax_jump
  python3 samples/tools/fp8_sample_data.py padding_grads

Deterministic (no randomness beyond a fixed formula), pure Python.
"""
import json
import math
import sys


def amax_jump():
    # 64 rows of 16 features in batches of 16: batches 0 and 2 of order one, batches 1 and 3
    # the same kind of rows 256 times larger (a unit change, an un-normalised feed). The
    # label is the sign of the first 8 features' sum, whatever the scale.
    x, y = [], []
    for row in range(64):
        scale = 256.0 if (row // 16) % 2 == 1 else 1.0
        base = [math.sin(0.37 * row * (f + 1) + f) for f in range(16)]
        x.append([float(f"{scale * v:.4g}") for v in base])
        y.append(1 if sum(base[:8]) > 0 else 0)
    return {"x": x, "y": y}


def padding_grads():
    # 64 rows of 16 features in raw units (counts in the tens of thousands), in batches of
    # 16 whose last 4 rows are padding: all zeros, labelled 0 as a padded sequence's filler
    # would be. The label of a real row: whether its first 8 features outweigh the last 8.
    x, y = [], []
    for row in range(64):
        if row % 16 >= 12:
            x.append([0.0] * 16)
            y.append(0)
            continue
        v = [20000.0 + 15000.0 * math.sin(1.3 * row * (f + 1) + 0.7 * f) for f in range(16)]
        x.append([float(f"{a:.5g}") for a in v])
        y.append(1 if sum(v[:8]) > sum(v[8:]) else 0)
    return {"x": x, "y": y}


if __name__ == "__main__":
    data = {"amax_jump": amax_jump, "padding_grads": padding_grads}[sys.argv[1]]()
    rows = ",\n    ".join(json.dumps(r) for r in data["x"])
    print('"data": {\n  "x": [\n    ' + rows + '\n  ],\n  "y": ' + json.dumps(data["y"]) + "\n}")
