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
dtype=torch.float16)``), ``torch.set_default_dtype``. A PaddlePaddle script's twin is
turn_paddle_amp_off's (auto_cast, GradScaler, decorate, a layer's casts).
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


def _forced_off(function, argument: str):
    """`function` with its `argument` (autocast's "enabled", Paddle's "enable") forced to False."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def off(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.arguments[argument] = False
        return function(*bound.args, **bound.kwargs)

    off._ampcheck_twin = True
    return off


def turn_amp_off():
    """Patches torch as the module docstring says. Idempotent."""
    import torch

    autocast = torch.amp.autocast_mode.autocast
    if getattr(autocast.__init__, "_ampcheck_twin", None):
        return
    autocast.__init__ = _forced_off(autocast.__init__, "enabled")
    scaler = torch.amp.grad_scaler.GradScaler
    scaler.__init__ = _forced_off(scaler.__init__, "enabled")

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
    import torch

    torch.manual_seed = _shift_plain(torch.manual_seed, offset)
    torch.random.manual_seed = torch.manual_seed
    torch.cuda.manual_seed = _shift_plain(torch.cuda.manual_seed, offset)
    torch.cuda.manual_seed_all = _shift_plain(torch.cuda.manual_seed_all, offset)
    _shift_random_and_numpy(offset)


def _shift_random_and_numpy(offset: int):
    import random
    random.seed = _shift_plain(random.seed, offset)
    try:
        import numpy
        numpy.random.seed = _shift_plain(numpy.random.seed, offset, lambda s: s % 2 ** 32)
    except ImportError:
        pass


def _shift_plain(original, offset: int, wrap=lambda s: s):
    """`original` (a seeding function) with its seed shifted by `offset`."""
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


def turn_paddle_amp_off():
    """The fp32 twin of a PaddlePaddle script, as far as Paddle's API reaches: every
    ``paddle.amp.auto_cast`` disabled (and ``amp_guard``, its older name), every
    ``paddle.amp.GradScaler`` disabled (``scale`` returns the loss, ``step``/``minimize``
    step), ``paddle.amp.decorate`` (O2: the parameters cast to float16/bfloat16, master
    weights) giving the models and optimizers back as they are, and a layer's own casts
    (``layer.half()``, ``.bfloat16()``, ``.float16()``, ``.to(dtype=...)`` to a 16-bit
    type) kept in float32. Idempotent."""
    import paddle

    if getattr(paddle.amp.auto_cast, "_ampcheck_twin", None):
        return

    paddle.amp.auto_cast = _forced_off(paddle.amp.auto_cast, "enable")
    if hasattr(paddle.amp, "amp_guard"):
        paddle.amp.amp_guard = _forced_off(paddle.amp.amp_guard, "enable")
    paddle.amp.GradScaler.__init__ = _forced_off(paddle.amp.GradScaler.__init__, "enable")

    def decorate(models, optimizers=None, *args, **kwargs):
        return models if optimizers is None else (models, optimizers)

    decorate._ampcheck_twin = True
    paddle.amp.decorate = decorate

    layer = paddle.nn.Layer
    for name in ("half", "bfloat16", "float16"):
        if hasattr(layer, name):
            setattr(layer, name, functools.wraps(getattr(layer, name))(lambda self, *a, **k: self))
    original_to = layer.to

    def wider(a):
        if isinstance(a, str):
            return "float32" if a in ("float16", "bfloat16") else a
        return paddle.float32 if a is paddle.float16 or a is paddle.bfloat16 else a

    @functools.wraps(original_to)
    def to(self, *args, **kwargs):
        args = tuple(wider(a) for a in args)
        if "dtype" in kwargs:
            kwargs["dtype"] = wider(kwargs["dtype"])
        return original_to(self, *args, **kwargs)

    layer.to = to


def offset_paddle_seeds(offset: int):
    """As offset_seeds, for ``paddle.seed`` (and random and numpy)."""
    if offset == 0:
        return
    import paddle

    paddle.seed = _shift_plain(paddle.seed, offset)
    _shift_random_and_numpy(offset)
