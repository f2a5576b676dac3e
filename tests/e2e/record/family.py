#!/usr/bin/env python3
"""The planted-failure families (recorder/tests/families.py: ampcheck's unstable samples
written as PyTorch modules), for the end-to-end tests of `ampcheck record` and
`bisect-nan --script` (tests/e2e/record_*.sh).

    family.py train NAME STEPS [FLAGS]       a plain PyTorch AMP training script: what the
                                              user runs, unmodified (no recorder import).
        --drift           the first Linear's output rounded through bfloat16: a planted
                          precision drift for `ampcheck diff`
        --raise           raise after training: a script that fails
        --seed-from-env   seed from AMPCHECK_RECORD_SEED (record --seeds N), else 0
        --unseeded        seed from the clock: a run that does not repeat itself
    family.py export NAME OUT_DIR            the same model, seeded alike, as ONNX
                                              (OUT_DIR/NAME.onnx) with its training data
                                              (OUT_DIR/NAME.npz) and the settings the
                                              script trains with (OUT_DIR/NAME.args: the
                                              engine's options, one a line)

The export is the model the script trains at its first step (same seed, same weights,
same data), so `ampcheck run` on the export and `ampcheck record` on the script see the
same first forward: the same producer of the first non-finite value.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "recorder", "tests"))

import torch  # noqa: E402

import families as fam  # noqa: E402

OPSET = 17


def train(name: str, steps: int, flags: list):
    seed = 0
    if "--seed-from-env" in flags:
        seed = int(os.environ.get("AMPCHECK_RECORD_SEED", "0"))
    if "--unseeded" in flags:
        import time
        seed = time.time_ns() % 2 ** 31
    model, x, y, settings = fam.make(name, seed)
    if "--drift" in flags:
        # A planted precision drift: the hidden activations of the first layer rounded
        # through bfloat16 (7 mantissa bits) on their way on.
        first = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
        first.register_forward_hook(lambda m, a, out: out.bfloat16().to(out.dtype))
    fam.train(model, x, y, steps=steps, **settings)
    print(f"trained {name} for {steps} steps")
    if "--raise" in flags:
        raise RuntimeError("the script broke after training")


def export(name: str, out: str):
    import warnings
    import numpy as np

    model, x, y, settings = fam.make(name)
    model.eval()
    path = os.path.join(out, f"{name}.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x[:2],), path, dynamo=False, export_params=True, do_constant_folding=True,
                          opset_version=OPSET, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
                          training=torch.onnx.TrainingMode.PRESERVE)
    np.savez(os.path.join(out, f"{name}.npz"), input=x.numpy(), labels=y.numpy())
    # The engine trains what the script trains: the whole data as one batch, autocast's
    # O1 in fp16, Adam at the family's learning rate.
    args = ["--level", "O1", "--dtype", "float16", "--batch", str(x.shape[0]), "--lr", str(settings.get("lr", 0.01))]
    with open(os.path.join(out, f"{name}.args"), "w") as f:
        f.write("\n".join(args) + "\n")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "train":
        train(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    elif len(sys.argv) == 4 and sys.argv[1] == "export":
        export(sys.argv[2], sys.argv[3])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
