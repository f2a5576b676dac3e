"""The fp32 twin of a script (`ampcheck compare --script`): the same script, from the same
seeds, with AMP off, so that what the AMP run loses can be told from what training itself
varies.

AMPCHECK_RECORD_AMP=off turns, as torch is imported and before the script runs:

- every ``torch.autocast`` (``torch.amp.autocast``, ``torch.cuda.amp.autocast``, and so the
  trainers' own, which enter it) into a disabled one;
- every ``GradScaler`` (``torch.amp``, ``torch.cuda.amp``, FSDP's ``ShardedGradScaler``) into
  a disabled one: ``scale`` returns the loss as it is, ``step`` steps, ``update`` does nothing;
- the script's own casts to float16 or bfloat16 into float32: ``module.half()``,
  ``module.bfloat16()``, ``module.to(torch.float16)``, ``tensor.half()``,
  ``tensor.bfloat16()``, ``tensor.to(torch.bfloat16)``, so a model the script casts stays in
  fp32 and its inputs with it. The recorder's own casts (its statistics count what a value
  becomes in float16) are not touched.

Not turned: tensors the script makes in a low precision directly (``torch.randn(...,
dtype=torch.float16)``), ``torch.set_default_dtype``, and PaddlePaddle (its AMP is not
patched here).
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading

_LOW_NAMES = ("float16", "bfloat16", "half")


def _from_recorder(depth: int = 2) -> bool:
    """Whether the call being patched comes from the recorder's own code."""
    frame = sys._getframe(depth)
    return frame is not None and frame.f_globals.get("__name__", "").startswith("ampcheck_recorder")


def _disabled(cls, what: str):
    """cls.__init__ with its `enabled` argument forced to False."""
    original = cls.__init__
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["enabled"] = False
        return original(*bound.args, **bound.kwargs)

    init._ampcheck_twin = what
    cls.__init__ = init


def turn_amp_off():
    """Patches torch as the module docstring says. Idempotent."""
    import torch

    autocast = torch.amp.autocast_mode.autocast
    if getattr(autocast.__init__, "_ampcheck_twin", None):
        return
    _disabled(autocast, "autocast")
    _disabled(torch.amp.grad_scaler.GradScaler, "GradScaler")

    low = {torch.float16, torch.bfloat16}

    def wider(dtype):
        return torch.float32 if dtype in low else dtype

    def keep(method_name, cls):
        original = getattr(cls, method_name)

        @functools.wraps(original)
        def kept(self, *args, **kwargs):
            if _from_recorder():
                return original(self, *args, **kwargs)
            if isinstance(self, torch.Tensor):
                return self if self.is_floating_point() else self.float()
            return self  # a module: its parameters stay fp32

        setattr(cls, method_name, kept)

    for name in ("half", "bfloat16"):
        keep(name, torch.Tensor)
        keep(name, torch.nn.Module)

    def to_wider(cls):
        original = cls.to

        @functools.wraps(original)
        def to(self, *args, **kwargs):
            if not _from_recorder():
                args = tuple(wider(a) if isinstance(a, torch.dtype) else a for a in args)
                if "dtype" in kwargs:
                    kwargs["dtype"] = wider(kwargs["dtype"])
            return original(self, *args, **kwargs)

        cls.to = to

    to_wider(torch.Tensor)
    to_wider(torch.nn.Module)


_shifting = threading.local()


def _called_by_recorder() -> bool:
    """Whether the first caller outside torch (whose wrappers, dynamo's among them, may sit
    between) is the recorder."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name != "torch" and not name.startswith("torch."):
            return name.startswith("ampcheck_recorder")
        frame = frame.f_back
    return False


def offset_seeds(offset: int):
    """AMPCHECK_RECORD_SEED_OFFSET=k: every seed the script sets is shifted by k
    (``torch.manual_seed(s)`` seeds s + k; likewise ``torch.cuda.manual_seed``/``_all``,
    ``random.seed``, ``numpy.random.seed``, and so Lightning's ``seed_everything`` and Hugging
    Face's ``set_seed``, which call them), so that a script that seeds itself with a constant,
    as most do, still trains from another seed on each of the twin's runs (`ampcheck compare
    --script --seeds N`). k = 0 changes nothing. A ``torch.Generator(...).manual_seed(s)`` the
    script makes itself is not shifted (its type cannot be patched): data shuffled by one stays
    in its order."""
    if offset == 0:
        return
    import random

    import torch

    def shifted(original, wrap=lambda s: s):
        if getattr(original, "_ampcheck_offset", None) is not None:
            return original

        @functools.wraps(original)
        def seed(s=None, *args, **kwargs):
            # A seed call inside a shifted one (torch.manual_seed seeds the CUDA generators
            # through cuda.manual_seed_all) takes the seed already shifted; the recorder's
            # own calls are its own.
            if s is None or getattr(_shifting, "on", False) or _called_by_recorder():
                return original(s, *args, **kwargs)
            _shifting.on = True
            try:
                return original(wrap(int(s) + offset), *args, **kwargs)
            finally:
                _shifting.on = False

        seed._ampcheck_offset = offset
        return seed

    torch.manual_seed = shifted(torch.manual_seed)
    torch.random.manual_seed = torch.manual_seed
    torch.cuda.manual_seed = shifted(torch.cuda.manual_seed)
    torch.cuda.manual_seed_all = shifted(torch.cuda.manual_seed_all)
    random.seed = shifted(random.seed)
    try:
        import numpy
        numpy.random.seed = shifted(numpy.random.seed, lambda s: s % 2 ** 32)
    except ImportError:
        pass
