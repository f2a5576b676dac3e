#!/usr/bin/env python3
"""The PaddlePaddle recorder's overhead on Paddle's own vision models and a small MLP.

Each model trains with a plain Paddle step (auto_cast O1, Adam; on a CPU place Paddle runs
it in fp32, which is what is timed there). The step is timed without the recorder and
under PaddleRecorder(inspect="trace" | "stats"), interleaved (plain, trace, stats, plain,
...) so that a change of the machine's speed lands on every mode alike; each mode's time is
the median of its steps, the ratio against the plain step's median.

  python bench/paddle_recorder_overhead.py [--rounds 5] [--steps 3] [--threads 1]
      [--batch 8] [--out FILE.md]

Needs paddlepaddle (the recorder's test environment, scripts/pyenv.sh, has it).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "recorder"))
warnings.simplefilter("ignore")

import paddle  # noqa: E402

from ampcheck_recorder import PaddleRecorder  # noqa: E402

MODES = ("plain", "trace", "stats")
AIMS = {"trace": 1.10, "stats": 1.5}


class Mlp(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = paddle.nn.Linear(64, 256), paddle.nn.Linear(256, 256), paddle.nn.Linear(256, 10)

    def forward(self, x):
        return self.fc3(paddle.nn.functional.relu(self.fc2(paddle.nn.functional.relu(self.fc1(x)))))


def models(batch):
    from paddle.vision import models as vm
    return {
        "resnet18": (lambda: vm.resnet18(num_classes=10), [batch, 3, 64, 64]),
        "mobilenet_v2": (lambda: vm.mobilenet_v2(num_classes=10), [batch, 3, 64, 64]),
        "mlp": (Mlp, [batch, 64]),
    }


def step(model, opt, x, y):
    with paddle.amp.auto_cast(level="O1"):
        loss = paddle.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.clear_grad()


def measure(name, make, shape, rounds, steps):
    paddle.seed(0)
    model = make()
    opt = paddle.optimizer.Adam(learning_rate=1e-4, parameters=model.parameters())
    x, y = paddle.randn(shape), paddle.randint(0, 10, [shape[0]])
    step(model, opt, x, y)  # warm-up
    times = {m: [] for m in MODES}
    for _ in range(rounds):
        for mode in MODES:
            rec = None if mode == "plain" else PaddleRecorder(model, opt, inspect=mode)
            for _ in range(steps):
                t0 = time.perf_counter()
                step(model, opt, x, y)
                times[mode].append(time.perf_counter() - t0)
            if rec is not None:
                rec.discard()
    med = {m: statistics.median(v) for m, v in times.items()}
    return med


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out")
    a = ap.parse_args()
    paddle.set_num_threads(a.threads) if hasattr(paddle, "set_num_threads") else None
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    rows = []
    for name, (make, shape) in models(a.batch).items():
        med = measure(name, make, shape, a.rounds, a.steps)
        base = med["plain"]
        cells = [f"{med[m] / base:.2f}x" + (" (over)" if med[m] / base > AIMS[m] else "") for m in MODES[1:]]
        rows.append(f"| {name} | {base * 1e3:.1f} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    text = (f"# PaddlePaddle recorder overhead, CPU: {cpu_name()}, {os.cpu_count()} cores\n\n"
            f"`bench/paddle_recorder_overhead.py --rounds {a.rounds} --steps {a.steps} --threads {a.threads} "
            f"--batch {a.batch}`, PaddlePaddle {paddle.__version__}, Python {platform.python_version()}. One "
            "training step: auto_cast O1 (fp32 on a CPU place: Paddle does no AMP there), Adam. Median step "
            "time per mode, the modes interleaved; ratio to the plain step.\n\n"
            "| model | plain step (ms) | trace | stats |\n| --- | ---: | ---: | ---: |\n" + "\n".join(rows) + "\n\n"
            "Aims (issue 30's, for the PyTorch recorder): trace <= 1.10x, stats <= 1.5x.\n")
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
