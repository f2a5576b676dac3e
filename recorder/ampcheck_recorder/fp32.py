"""Keeping ops and modules in fp32 inside autocast: the custom black list PyTorch lacks.

PyTorch's autocast has fixed op lists; a user cannot add ``bmm`` to its fp32 list. The
recorder can, at the level the script calls torch (a TorchFunctionMode, above autograd
and autocast): a call of a listed op type (``torch.bmm``, ``x * 300000``, ``F.linear``),
or any torch call made while a listed module runs, runs with autocast disabled and its
fp16/bf16 tensor arguments cast to fp32. That is the plain-PyTorch recipe,
``with torch.autocast(..., enabled=False): f(x.float())``, applied per call:

- the op computes AND stores its result in fp32, as an op on autocast's own fp32 list
  does; the ops after it see an fp32 tensor and autocast casts it again where its policy
  says. The result is not cast back: an overflowing result (a bmm whose products pass
  65504) is what forcing must prevent, and rounding it back would bring it back.
- autograd sees the casts, so the backward of the forced op runs in fp32 too, and the
  gradient reaches the fp16 input through the cast's backward, once.
- an activation cast once is reused by every forced call in the same forward (a cast
  cache, as autocast keeps one for weights): the gradients of its uses then add up in
  fp32 before the one cast back to fp16. ``x*s - x*s`` forced computes 0 in fp32 and its
  gradient, ``g*s - g*s``, is 0 in fp32 too, where two separate casts would each round
  ``g*s`` to fp16 and overflow. Leaves (parameters, inputs) are cast per call: a cached
  cast of a parameter would outlive the graph it was made in.

Op types are matched at the torch function the script calls (optypes.function_types):
``bmm`` matches torch.bmm and ``@`` on batched operands, ``matmul`` torch.mm and ``@`` on
matrices, ``square`` torch.square and ``x ** 2``, ``mul_scalar`` ``x * number``. An op inside
a composite the script calls as one function (nn.MultiheadAttention's bmm) is reached by
listing its module instead.

The same Forcer serves ``python -m ampcheck_recorder run --fp32-ops`` (bisect-nan's
trials, through the recorder's TorchFunctionMode) and ``keep_fp32(ops=...)`` in the user's
code (a mode of its own), so a fix bisect-nan finds is the fix the helper applies.
"""

from __future__ import annotations

import difflib
import threading
import weakref

import torch
from torch.overrides import TorchFunctionMode

from . import listen
from .numerics import LOW_PRECISION
from .optypes import check_op_names, function_types, packet_name


def _widen_dtype(x):
    # A dtype argument asking for fp16/bf16 (a cast, sum(dtype=...)) asks for fp32 instead.
    return torch.float32 if isinstance(x, torch.dtype) and x in LOW_PRECISION else x


def _upcast_plain(x):
    if isinstance(x, torch.Tensor):
        return x.float() if x.dtype in LOW_PRECISION else x
    if isinstance(x, (list, tuple)):
        return type(x)(_upcast_plain(y) for y in x)
    return x


def fp32_args(func, args, kwargs, widen_dtypes: bool):
    """An aten call's arguments with fp16/bf16 tensors upcast to fp32 (and, when asked,
    dtype arguments widened): the same call computed in fp32, for the recorder's recompute."""
    args = [_upcast_plain(a) for a in args]
    kwargs = {k: _upcast_plain(v) for k, v in kwargs.items()}
    if widen_dtypes:
        args = [_widen_dtype(a) for a in args]
        kwargs = {k: _widen_dtype(v) for k, v in kwargs.items()}
    if packet_name(func) in ("_softmax", "_log_softmax") and len(args) > 2:
        args[2] = False  # half_to_float: the input is fp32 now
    return args, kwargs


def _function_name(name: str) -> bool:
    """A custom autograd.Function's class name as an op-list entry: an identifier that
    begins with a capital (ScaledExp); op types and aten names are lower case."""
    name = name.strip()
    return bool(name) and name[0].isupper() and name.isidentifier()


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


# Torch functions that only convert or move: forcing them would undo the script's own casts.
_NOT_FORCED = frozenset({"to", "type", "half", "float", "double", "bfloat16", "type_as", "cuda", "cpu",
                         "detach", "requires_grad_", "backward", "size", "dim", "numel", "item", "tolist",
                         "__get__", "__set__", "__getitem__", "__setitem__", "__len__", "__format__",
                         "__repr__", "__bool__", "data_ptr", "is_floating_point", "register_hook",
                         "copy_", "clone", "contiguous", "view", "reshape", "__iter__", "__hash__"})


class Forcer:
    """Which torch calls run in fp32, and the cast cache of one forward."""

    def __init__(self, ops=(), modules=()):
        # A name that is no op but a class name (ScaledExp) is a custom autograd.Function
        # of the script's, forced where its apply() runs (the recorder's patch, keep_fp32).
        functions = [o for o in ops if _function_name(o)]
        self.functions = frozenset(functions)
        self.ops = frozenset(check_op_names([o for o in ops if o not in functions], "the fp32 op list"))
        self.modules = tuple(sorted({m.strip() for m in modules if m.strip()}))
        self._cache: dict = {}
        self._lock = threading.Lock()
        self._devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

    def __bool__(self):
        return bool(self.ops or self.modules or self.functions)

    def module_forced(self, module: str) -> bool:
        return any(_under(module, m) for m in self.modules)

    def forced(self, func, args, module: str) -> bool:
        name = getattr(func, "__name__", "")
        if name in _NOT_FORCED:
            return False
        if self.modules and self.module_forced(module):
            return True
        if not self.ops:
            return False
        return any(t in self.ops for t in function_types(func, args if isinstance(args, tuple) else tuple(args)))

    def clear(self):
        """Ends the cast cache's scope (the recorder calls it at each step's end)."""
        with self._lock:
            self._cache.clear()

    def _upcast(self, t: torch.Tensor) -> torch.Tensor:
        if t.grad_fn is None:  # a leaf: cast per call (see the module's comment)
            return t.float()
        key = id(t)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0]() is t and hit[1] == t._version:
                return hit[2]
        t32 = t.float()
        cache = self._cache
        with self._lock:
            cache[key] = (weakref.ref(t, lambda _, k=key: cache.pop(k, None)), t._version, t32)
        return t32

    def _convert(self, x):
        if isinstance(x, torch.Tensor):
            return self._upcast(x) if x.dtype in LOW_PRECISION else x
        if isinstance(x, (list, tuple)):
            return type(x)(self._convert(y) for y in x)
        if isinstance(x, dict):
            return {k: self._convert(v) for k, v in x.items()}
        return x

    def run(self, func, args, kwargs):
        """Runs one torch call in fp32: autocast off, fp16/bf16 arguments cast to fp32."""
        state = listen.state()
        contexts = [torch.autocast(device_type=d, enabled=False) for d in self._devices]
        for c in contexts:
            c.__enter__()
        state.forcing += 1
        try:
            args = self._convert(tuple(args))
            kwargs = {k: _widen_dtype(v) for k, v in self._convert(kwargs or {}).items()}
            args = tuple(_widen_dtype(a) for a in args)
            return func(*args, **kwargs)
        finally:
            state.forcing -= 1
            for c in reversed(contexts):
                c.__exit__(None, None, None)


class ForcingMode(TorchFunctionMode):
    """keep_fp32(ops=...): the listed op types in fp32, wherever the script calls them."""

    def __init__(self, forcer: Forcer):
        super().__init__()
        self.forcer = forcer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not listen.state().forcing and self.forcer.forced(func, args, ""):
            return self.forcer.run(func, args, kwargs)
        return func(*args, **kwargs)


class _ModuleFp32:
    """Forward hooks that run one module as the plain-PyTorch advice says: autocast off
    and floating inputs cast to fp32."""

    def __init__(self, module: torch.nn.Module, device_types):
        self.device_types = device_types
        self._stack = threading.local()
        module.float()  # a module of a .half() model needs fp32 weights to compute in fp32
        self.handles = [
            module.register_forward_pre_hook(self._pre, with_kwargs=True),
            module.register_forward_hook(self._post, always_call=True),
        ]

    def _pre(self, module, args, kwargs):
        contexts = [torch.autocast(device_type=d, enabled=False) for d in self.device_types]
        for c in contexts:
            c.__enter__()
        stack = getattr(self._stack, "v", None)
        if stack is None:
            stack = self._stack.v = []
        stack.append(contexts)
        up = lambda x: x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
        return tuple(up(a) for a in args), {k: up(v) for k, v in kwargs.items()}

    def _post(self, module, args, output):
        for c in reversed(self._stack.v.pop()):
            c.__exit__(None, None, None)
        return None

    def remove(self):
        for h in self.handles:
            h.remove()


class _FunctionsFp32:
    """keep_fp32(ops=[...]) naming custom autograd.Functions: their apply() runs on fp32
    inputs with autocast off (what they save for backward is then fp32 too)."""

    def __init__(self, forcer: Forcer):
        self._descriptor = torch.autograd.Function.__dict__["apply"]
        descriptor = self._descriptor

        def apply(cls, *args, **kwargs):
            run = descriptor.__get__(None, cls)
            if cls.__name__ in forcer.functions and not listen.state().forcing:
                return forcer.run(run, args, kwargs)
            return run(*args, **kwargs)

        torch.autograd.Function.apply = classmethod(apply)

    def remove(self):
        torch.autograd.Function.apply = self._descriptor


class KeepFp32:
    """The handle keep_fp32 returns: ``remove()`` undoes it; also a context manager."""

    def __init__(self, module_hooks, mode, functions=None):
        self._module_hooks = module_hooks
        self._mode = mode
        self._functions = functions
        self._removed = False

    def remove(self):
        if self._removed:
            return
        self._removed = True
        for h in self._module_hooks:
            h.remove()
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
        if self._functions is not None:
            self._functions.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


def keep_fp32(model: torch.nn.Module | None = None, *, modules=(), ops=()) -> KeepFp32:
    """Keeps the named modules of `model`, and the named op types everywhere, in fp32
    inside autocast.

    modules: paths as ``model.named_modules()`` gives them ("encoder.attn"). Each runs with
    autocast disabled, its floating inputs cast to fp32 and its weights in fp32: the
    plain-PyTorch recipe, applied by forward hooks at no cost to other modules.

    ops: ampcheck op types or aten names ("bmm", "softmax", "mul_scalar"). PyTorch has no
    per-op autocast list, so these are forced by a TorchFunctionMode entered on the calling
    thread until ``remove()``: one Python call per torch function the thread calls. A class
    name (``"ScaledExp"``) is a custom torch.autograd.Function of the script's: its apply()
    runs on fp32 inputs with autocast off, so that what it saves for backward is fp32.

    Returns a handle; ``with keep_fp32(...):`` removes it at the end of the block.
    """
    modules = [m for m in modules if m]
    hooks = []
    if modules:
        if model is None:
            raise ValueError("keep_fp32(modules=...) needs the model the paths are in: "
                             "keep_fp32(model, modules=[...])")
        named = dict(model.named_modules())
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        for path in modules:
            if path not in named:
                close = difflib.get_close_matches(path, [n for n in named if n], n=1)
                hint = f' (did you mean "{close[0]}"?)' if close else ""
                raise ValueError(f'keep_fp32: the model has no module "{path}"{hint}; '
                                 "use a path from model.named_modules()")
            hooks.append(_ModuleFp32(named[path], devices))
    mode = functions = None
    if ops:
        forcer = Forcer(ops=ops)
        if forcer.ops:
            mode = ForcingMode(forcer)
            mode.__enter__()
        if forcer.functions:
            functions = _FunctionsFp32(forcer)
    return KeepFp32(hooks, mode, functions)


# How PyTorch users write each op, for the advice text.
_TORCH_SPELLING = {
    "matmul": "torch.matmul / @ on matrices", "bmm": "torch.bmm / @ on batches", "linear": "nn.Linear / F.linear",
    "add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b", "mul_scalar": "x * number",
    "div_scalar": "x / number", "add_scalar": "x + number", "sub_scalar": "x - number",
    "square": "torch.square / x ** 2", "pow": "torch.pow / x ** p", "softmax": "softmax",
    "log_softmax": "log_softmax", "sum": "sum", "mean": "mean", "exp": "torch.exp", "log": "torch.log",
    "sigmoid": "torch.sigmoid", "layer_norm": "nn.LayerNorm", "conv2d": "nn.Conv2d",
}


def _outside_model(module: str, recording: dict | None) -> dict | None:
    """The root a module path belongs to when that root is not the model (a loss module
    the script calls itself): the report's run.roots entry."""
    for root in (recording or {}).get("run", {}).get("roots", []):
        path = root.get("path", "")
        if path and not root.get("model") and (module == path or module.startswith(path + ".")):
            return root
    return None


def _script_casts(recording: dict | None) -> list[dict]:
    """The script's own casts into fp16/bf16 that put a producer outside autocast in low
    precision, from the recording's producers."""
    out = []
    for p in (recording or {}).get("nonfinite", {}).get("producers", []):
        for c in p.get("script_casts", []):
            out.append(dict(c, op=p["op"], module=p["module"]))
    return out


def advice(ops=(), modules=(), device_type: str = "cuda", recording: dict | None = None) -> str:
    """The fix in PyTorch's words: the recorder's helper, and the plain-PyTorch form.
    `recording` (a report) names what the helper cannot reach: modules the script calls
    itself outside the model, and the script's own casts into fp16/bf16."""
    ops, modules = sorted(set(ops)), sorted(set(modules))
    if not ops and not modules:
        return ""
    inside = [m for m in modules if _outside_model(m, recording) is None]
    outside = [m for m in modules if _outside_model(m, recording) is not None]
    lines = ["# Keep these in fp32 inside autocast (found by ampcheck bisect-nan)."]
    args = []
    if inside:
        args.append(f"modules={inside!r}")
    if ops:
        args.append(f"ops={ops!r}")
    if args:
        lines += ["import ampcheck_recorder",
                  f"fp32 = ampcheck_recorder.keep_fp32(model, {', '.join(args)})", ""]
    for m in outside:
        root = _outside_model(m, recording)
        site = root.get("site")
        where = f", at {site['file']}:{site['line']}:" if site else ""
        lines += [f"# '{m}' is not part of the model: the script calls {root['class']} itself{where}"]
        if site:
            lines.append(f"#     {site['code']}")
        lines += ["# keep_fp32(model, ...) cannot reach it; compute that call in fp32:",
                  f'with torch.autocast(device_type="{device_type}", enabled=False):',
                  f"    ...  # the {root['class']} call, its tensor inputs cast with .float()", ""]
    casts = _script_casts(recording)
    for c in casts:
        lines += [f"# {c['op']} in '{c['module']}' ran in {c['dtype']} outside autocast because the script cast its "
                  f"{c['input']} to {c['dtype']} at {c['file']}:{c['line']}:",
                  f"#     {c['code']}",
                  "# keep that tensor in fp32 there (drop the cast, or .float() it for this op)", ""]
    if inside or ops:
        lines.append("# Or in plain PyTorch, around each call:")
    for m in inside:
        lines += [f'with torch.autocast(device_type="{device_type}", enabled=False):',
                  f"    out = model.{m}(*(x.float() for x in inputs))  # the module {m!r} in fp32"]
    for o in ops:
        if _function_name(o):  # a custom autograd.Function: what it saves for backward must be fp32
            lines += [f'with torch.autocast(device_type="{device_type}", enabled=False):',
                      f"    out = {o}.apply(*(x.float() for x in inputs))  # your autograd.Function in fp32: "
                      "what it saves for its backward is fp32 too"]
            continue
        spelled = _TORCH_SPELLING.get(o, o)
        lines += [f'with torch.autocast(device_type="{device_type}", enabled=False):',
                  f"    y = ...  # the {o} ({spelled}), its tensor inputs cast with .float()"]
    return "\n".join(lines).rstrip("\n") + "\n"
