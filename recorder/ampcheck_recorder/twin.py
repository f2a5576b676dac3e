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

The same patches, narrowed, are the trials of the cures that are no op: bisect-nan
--script's "optimizer state" (keep_optimizer_state_fp32: the casts to 16 bits made inside
the optimizer's step) and "master weights" (keep_master_weights_fp32: the model's casts,
and its calls under autocast instead).
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


def _kept_casts(cls, script_cast, on_module=None):
    """`cls`'s casts to float16/bfloat16 (``.half()``, ``.bfloat16()``, ``.to(dtype)``) kept in
    float32 where ``script_cast()`` holds and the call is not the recorder's: a tensor's
    becomes a cast to float32 (a new tensor where the 16-bit cast would have made one, so
    that what the script changes in place is its own), a module keeps its parameters as
    they are; ``on_module(module, dtype)`` hears of each module's kept cast."""
    import torch

    low = (torch.float16, torch.bfloat16)
    tensor = issubclass(cls, torch.Tensor)
    original_to = cls.to

    def kept(self, dtype, to_args, to_kwargs):
        if tensor:
            out = original_to(self, *to_args, **to_kwargs)
            # The 16-bit cast would have made a new tensor: so does this one.
            return out.clone() if out is self and self.dtype != dtype else out
        if on_module is not None:
            on_module(self, dtype)
        return original_to(self, *to_args, **to_kwargs) if to_args or to_kwargs else self

    def keep(name, dtype):
        original = getattr(cls, name)

        @functools.wraps(original)
        def cast(self, *args, **kwargs):
            if _from_recorder() or not script_cast():
                return original(self, *args, **kwargs)
            if tensor:
                return kept(self, dtype, (torch.float32,), kwargs)
            return kept(self, dtype, (), {})

        setattr(cls, name, cast)

    keep("half", torch.float16)
    keep("bfloat16", torch.bfloat16)

    @functools.wraps(original_to)
    def to(self, *args, **kwargs):
        asked = [a for a in (*args, kwargs.get("dtype")) if isinstance(a, torch.dtype)]
        if not asked or asked[0] not in low or _from_recorder() or not script_cast():
            return original_to(self, *args, **kwargs)
        args = tuple(torch.float32 if a in low else a for a in args)
        if "dtype" in kwargs:
            kwargs["dtype"] = torch.float32
        return kept(self, asked[0], args, kwargs)

    cls.to = to


def _always() -> bool:
    return True


def turn_amp_off():
    """Patches torch as the module docstring says. Idempotent."""
    import torch

    autocast = torch.amp.autocast_mode.autocast
    if getattr(autocast.__init__, "_ampcheck_twin", None):
        return
    autocast.__init__ = _forced_off(autocast.__init__, "enabled")
    scaler = torch.amp.grad_scaler.GradScaler
    scaler.__init__ = _forced_off(scaler.__init__, "enabled")
    _kept_casts(torch.Tensor, _always)
    _kept_casts(torch.nn.Module, _always)


# Factory functions that take a dtype: the optimizer's state made directly in 16 bits.
_FACTORIES = ("zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like")
_NEW_FACTORIES = ("new_zeros", "new_ones", "new_empty", "new_full")


def keep_optimizer_state_fp32():
    """AMPCHECK_RECORD_FP32_OPTIMIZER_STATE=on (bisect-nan --script's "optimizer state"
    candidate): while an optimizer's step runs on a thread (the recorder's step hooks count
    it), the script's casts of tensors to float16/bfloat16 (``torch.zeros_like(p).to(
    torch.bfloat16)``, ``.half()``) and the tensors it makes with a 16-bit ``dtype=``
    (``torch.zeros_like(p, dtype=torch.bfloat16)``, ``zeros``, ``empty``, ``full``, ``ones``
    and their ``_like`` and ``Tensor.new_*`` forms) are kept in float32: moments created in
    16 bits inside ``step()`` are fp32 moments. Not reached: state made outside ``step()``
    (in ``__init__``, or loaded from a checkpoint), and state a stock optimizer makes like
    its 16-bit parameter (``torch.zeros_like(p)`` of a bfloat16 ``p``: fp32 master weights
    are that cure). Idempotent."""
    import torch

    from . import listen

    if getattr(torch.zeros_like, "_ampcheck_twin", None):
        return

    def stepping() -> bool:
        return listen.state().optimizer_depth > 0

    _kept_casts(torch.Tensor, stepping)
    low = (torch.float16, torch.bfloat16)

    def widened(original):
        @functools.wraps(original)
        def make(*args, **kwargs):
            if kwargs.get("dtype") in low and stepping() and not _from_recorder():
                kwargs["dtype"] = torch.float32
            return original(*args, **kwargs)

        make._ampcheck_twin = True
        return make

    for name in _FACTORIES:
        setattr(torch, name, widened(getattr(torch, name)))
    for name in _NEW_FACTORIES:
        setattr(torch.Tensor, name, widened(getattr(torch.Tensor, name)))


_outermost = threading.local()


def keep_master_weights_fp32():
    """AMPCHECK_RECORD_FP32_MASTER_WEIGHTS=on (bisect-nan --script's "master weights"
    candidate): fp32 master weights, as the cure says it, "train the fp32 model under
    torch.autocast instead of model.bfloat16()". The script's casts of a module to 16 bits
    (``.half()``, ``.bfloat16()``, ``.to(dtype)``) keep its parameters in float32, as the twin
    does, and every call of that module or of one inside it runs under ``torch.autocast`` at
    the dtype the script cast to, on the device of the module's parameters: entered at the
    outermost such call on the thread (in ``Module.__call__``, outside the module's hooks), so
    that an ``autocast(enabled=False)`` inside the model, or a forced module's, still holds.
    The script's tensor casts are the script's: inputs it casts to 16 bits meet fp32 weights
    under autocast, whose ops cast them as their policy says. Not reached: parameters made in
    16 bits directly (``nn.Linear(..., dtype=torch.bfloat16)``, ``from_pretrained(
    torch_dtype=...)``), ``module.to(other_tensor)``, and code outside the module's call that
    computes on its parameters (it meets fp32 where it met 16 bits). A float16 model gets no
    GradScaler this way: its gradients may underflow where a real fix would scale them.
    Idempotent."""
    import torch

    module_call = torch.nn.Module.__call__
    if getattr(module_call, "_ampcheck_twin", None):
        return

    def tag(module, dtype):
        for m in module.modules():
            m._ampcheck_autocast = dtype

    _kept_casts(torch.nn.Module, _always, tag)

    def device_type(module, args) -> str:
        for t in module.parameters():
            return t.device.type
        for t in module.buffers():
            return t.device.type
        return next((a.device.type for a in args if isinstance(a, torch.Tensor)), "cpu")

    @functools.wraps(module_call)
    def call(self, *args, **kwargs):
        dtype = self.__dict__.get("_ampcheck_autocast")
        if dtype is None or getattr(_outermost, "on", False):
            return module_call(self, *args, **kwargs)
        _outermost.on = True
        try:
            with torch.autocast(device_type=device_type(self, args), dtype=dtype):
                return module_call(self, *args, **kwargs)
        finally:
            _outermost.on = False

    call._ampcheck_twin = True
    torch.nn.Module.__call__ = call


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
