#!/usr/bin/env python3
"""Exports fixed_batch_paddle.onnx the way a PaddlePaddle user does: paddle.onnx.export
(paddle2onnx) of a dygraph Layer with a fixed-size InputSpec([4, 3, 8, 8]), opset 13.

paddle2onnx 2.x leaves the file's producer_name empty; ampcheck knows the exporter by the
graph's name ("PaddlePaddle Graph in PIR mode") and its "p2o.*" initializers. Beside the
model: fixed_batch_paddle.npz (the input "x", 16 rows, and "labels") and
fixed_batch_paddle.ref.npy (Paddle's eval-mode output for every row, four at a time).

  python -m venv /tmp/pd && /tmp/pd/bin/pip install "paddlepaddle==3.3.*" paddle2onnx packaging "numpy<2.4"
  /tmp/pd/bin/python tests/data/onnx/make_paddle_export.py [--out tests/data/onnx]
"""

import argparse
from pathlib import Path

import numpy as np
import paddle


class Cnn(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = paddle.nn.Conv2D(3, 8, 3, padding=1)
        self.pool = paddle.nn.MaxPool2D(2)
        self.fc = paddle.nn.Linear(8 * 4 * 4, 3)

    def forward(self, x):
        h = self.pool(paddle.nn.functional.relu(self.conv(x)))
        return self.fc(paddle.flatten(h, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    out = ap.parse_args().out
    paddle.seed(0)
    model = Cnn()
    model.eval()
    spec = [paddle.static.InputSpec(shape=[4, 3, 8, 8], dtype="float32", name="x")]
    paddle.onnx.export(model, str(out / "fixed_batch_paddle"), input_spec=spec, opset_version=13)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 3, 8, 8), dtype=np.float32)
    y = rng.integers(0, 3, size=16, dtype=np.int64)
    ref = np.concatenate([model(paddle.to_tensor(x[i:i + 4])).numpy() for i in range(0, 16, 4)])
    np.savez(out / "fixed_batch_paddle.npz", x=x, labels=y)
    np.save(out / "fixed_batch_paddle.ref.npy", ref)
    print(f"wrote {out / 'fixed_batch_paddle.onnx'} (paddle {paddle.__version__})")


if __name__ == "__main__":
    main()
