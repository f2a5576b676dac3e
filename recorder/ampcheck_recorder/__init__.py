"""ampcheck's recorder for PyTorch: a training run heard op by op, below autograd, and
written as ampcheck's report (docs/recorder.md); and for PaddlePaddle, PaddleRecorder, a
dygraph run heard through Paddle's layer and gradient hooks (paddle_recorder.py).

    import ampcheck_recorder
    rec = ampcheck_recorder.Recorder(model, optimizer, scaler, inspect="stats", out="run.json")
    ...train...
    rec.close()

or, without changing the script: ``python -m ampcheck_recorder run -- train.py ...``.

The names below load on first use, so that the interpreter-start bootstrap (inject.py)
can import this package without importing torch before the script does.
"""

from ._version import __version__

__all__ = ["Recorder", "PaddleRecorder", "keep_fp32", "fp32_advice", "active", "__version__"]


def __getattr__(name):
    if name in ("Recorder", "active"):
        from . import recorder
        return getattr(recorder, name)
    if name == "PaddleRecorder":
        from .paddle_recorder import PaddleRecorder
        return PaddleRecorder
    if name == "keep_fp32":
        from .fp32 import keep_fp32
        return keep_fp32
    if name == "fp32_advice":
        from .fp32 import advice
        return advice
    raise AttributeError(f"module 'ampcheck_recorder' has no attribute '{name}'")
