"""How the recorder hears a PyTorch run: one TorchDispatchMode below autograd, one
TorchFunctionMode above it, and global module and optimizer hooks.

Below autograd (TorchDispatchMode) every aten op is seen, forward and backward, with
the dtypes it really ran in: after autocast's casts, which arrive as ``aten._to_copy``
calls of their own. What cannot be read there is read elsewhere:

- **Autocast.** Inside a dispatch-mode handler autocast's dispatch key is excluded, so
  ``torch.is_autocast_enabled()`` always says False there. A TorchFunctionMode, which
  runs above autocast for every torch function the script calls, keeps the state (and
  the function in progress) in a thread-local that the dispatch mode reads. A cast made
  while autocast is on, by a torch function that is not itself a conversion (``F.linear``
  rather than ``x.half()``), is a cast autocast inserted.
- **Backward ops and their module.** During backward the autograd engine runs each node
  with ``torch._C._current_autograd_node()`` set, on whichever thread runs it (the
  calling thread for CPU work, the engine's device threads for CUDA: the engine hands
  them the caller's thread-local state, this mode included). Each forward aten call that
  creates an autograd node creates it just before the call reaches this mode, with the
  thread's next sequence number, so ``torch.autograd._get_sequence_nr() - 1`` seen in
  the handler is that node's ``_sequence_nr()``. The recorder keeps sequence number ->
  (module path, op, occurrence) and looks the running node up in backward: a backward
  op belongs to the module whose forward created its node.
- **Module paths.** Global forward pre/post hooks keep a per-thread stack of paths.

``backward()`` called from a thread on which the mode was never entered (a thread the
script started) would run unseen; the recorder wraps ``torch.autograd.backward`` and
``torch.autograd.grad`` to enter a mode on that thread for the call.
"""

from __future__ import annotations

import linecache
import os
import sys
import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.overrides import TorchFunctionMode

_tls = threading.local()

# Torch functions that convert on purpose: a cast they make is the script's, not autocast's.
CONVERSIONS = frozenset({
    "to", "type", "half", "float", "double", "bfloat16", "type_as", "cuda", "cpu", "copy_",
    "new_tensor", "tensor", "as_tensor", "_to_copy", "to_dense", "__torch_function__",
})


def state():
    """This thread's listening state."""
    try:
        return _tls.s
    except AttributeError:
        s = _tls.s = _ThreadState()
        return s


class _ThreadState:
    __slots__ = ("internal", "modules", "optimizer_depth", "function", "autocast_cpu",
                 "autocast_cuda", "node_seq", "node_results", "forcing", "in_scaler")

    def __init__(self):
        self.internal = 0          # > 0: the recorder's own work, not recorded
        self.modules: list = []    # the module paths entered, innermost last
        self.optimizer_depth = 0   # > 0: inside optimizer.step or a GradScaler call
        self.function = None       # the torch function in progress (its __name__)
        self.autocast_cpu = False
        self.autocast_cuda = False
        self.node_seq = None       # the autograd node whose ops are running here
        self.node_results = 0      # its non-view results so far ("grad<i>")
        self.forcing = 0           # > 0: inside a torch call forced to fp32 (fp32.py)
        self.in_scaler = 0         # > 0: inside GradScaler.unscale_ or step


_NoTorchFunction = torch._C.DisableTorchFunction
_NoTorchDispatch = torch._C._DisableTorchDispatch


class quiet:
    """The recorder's own tensor work from outside a handler, in bulk: no dispatch mode
    (this recorder's or another's) and no torch function mode sees it, so each torch call
    costs what it costs without the recorder (internal() still passes every call through
    the recorder's Python handler)."""

    def __enter__(self):
        state().internal += 1
        self._guards = (_NoTorchDispatch(), _NoTorchFunction())
        for g in self._guards:
            g.__enter__()
        return self

    def __exit__(self, *exc):
        for g in reversed(self._guards):
            g.__exit__(*exc)
        state().internal -= 1
        return False


class internal:
    """The recorder's own tensor work: not recorded, not seen by torch function modes."""

    def __enter__(self):
        state().internal += 1
        self._guard = torch._C.DisableTorchFunction()
        self._guard.__enter__()
        return self

    def __exit__(self, *exc):
        self._guard.__exit__(*exc)
        state().internal -= 1
        return False


def _autocast_enabled(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4
        if device_type == "cpu":
            return torch.is_autocast_cpu_enabled()
        return torch.is_autocast_enabled()


try:
    torch.is_autocast_enabled("cpu")
    _enabled = torch.is_autocast_enabled
except TypeError:  # torch < 2.4
    _enabled = _autocast_enabled


def autocast_dtype(device_type: str):
    try:
        return torch.get_autocast_dtype(device_type)
    except (AttributeError, TypeError):  # torch < 2.4
        if device_type == "cpu":
            return torch.get_autocast_cpu_dtype()
        return torch.get_autocast_gpu_dtype()


def autocast_now() -> tuple[bool, bool]:
    """Autocast on the CPU and on CUDA, as the script sees it (outside any handler)."""
    return _autocast_enabled("cpu"), _autocast_enabled("cuda")


class AutocastWatch(TorchFunctionMode):
    """Keeps the autocast state and the torch function in progress for the dispatch mode,
    and runs the calls a Forcer names in fp32 (fp32.py)."""

    def __init__(self, forcer=None):
        super().__init__()
        self.forcer = forcer if forcer else None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        try:
            s = _tls.s
        except AttributeError:
            s = state()
        if s.internal:
            return func(*args, **(kwargs or {}))
        prev = (s.function, s.autocast_cpu, s.autocast_cuda)
        s.function = getattr(func, "__name__", None)
        s.autocast_cpu = _enabled("cpu")
        s.autocast_cuda = _enabled("cuda")
        try:
            f = self.forcer
            if f is not None and not s.forcing and f.forced(func, args, s.modules[-1] if s.modules else ""):
                return f.run(func, args, kwargs)
            if kwargs:
                return func(*args, **kwargs)
            return func(*args)
        finally:
            s.function, s.autocast_cpu, s.autocast_cuda = prev


# torch 2.0 added the running node's binding; without it backward ops are told by the
# recorder's backward() wrapper alone and belong to no module.
HAS_NODE = hasattr(torch._C, "_current_autograd_node")


def current_node():
    return torch._C._current_autograd_node() if HAS_NODE else None


def next_sequence_nr() -> int:
    return torch.autograd._get_sequence_nr()


class RecordingMode(TorchDispatchMode):
    """Hands every aten call to `sink(func, args, kwargs, run)`, which must call
    `run(func, args, kwargs)` (or a replacement, to force fp32) and return its result."""

    def __init__(self, sink):
        super().__init__()
        self._sink = sink

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # TorchDynamo skips every frame while a mode that does not ignore compiled code is
        # on the stack: the model would run eagerly under the recorder. Regions compiled
        # through torch.compile are run with the recorder out of the way (compiled.py); this
        # keeps code compiled any other way (torch._dynamo.optimize) compiled too.
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        try:
            internal_work = _tls.s.internal
        except AttributeError:
            internal_work = state().internal
        if internal_work:
            return func(*args, **kwargs)
        return self._sink(func, args, kwargs)


# TorchDispatchMode wraps a subclass's handler in torch._disable_dynamo, a wrapper and a
# dynamo context per aten call (microseconds each, on every op of the run). The recorder's
# handler never runs inside a frame dynamo traces (compiled regions run with the recorder
# off the stack, and the mode ignores compile internals), so it is called as written.
_raw = RecordingMode.__dict__["__torch_dispatch__"]
RecordingMode.__torch_dispatch__ = getattr(_raw, "__wrapped__", _raw)


def mode_on_this_thread(mode_type) -> bool:
    """Whether a mode of this type is on the current thread's dispatch mode stack."""
    try:
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
        return any(isinstance(m, mode_type) for m in _get_current_dispatch_mode_stack())
    except ImportError:  # very old torch: assume not, a second mode is harmless there
        return False


def tensors_of(tree) -> list:
    """The tensors in a (nested) argument or result, in order."""
    out = []
    _collect(tree, out)
    return out


def _collect(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _collect(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _collect(y, out)


def tensors_of_call(args, kwargs) -> list:
    """tensors_of((args, kwargs)), for an aten call's flat arguments (the common case:
    tensors and numbers, sometimes a list of tensors)."""
    out = []
    for x in args:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple, dict)):
            _collect(x, out)
    if kwargs:
        _collect(kwargs, out)
    return out


PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


def local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's part on this rank (FSDP2's parameters and gradients), else the tensor:
    read without dispatching through the subclass."""
    part = getattr(t, "_local_tensor", None)
    return part if isinstance(part, torch.Tensor) else t


def plain(t: torch.Tensor) -> bool:
    """A tensor with storage the recorder can read: not a subclass (FakeTensor, DTensor),
    not on the meta device."""
    return type(t) in PLAIN_TYPES and not t.is_meta


def all_plain(tensors) -> bool:
    for t in tensors:
        if type(t) not in PLAIN_TYPES or t.is_meta:
            return False
    return True


_NOT_THE_SCRIPT = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
                   os.path.dirname(os.path.abspath(__file__)) + os.sep)


def script_site() -> dict | None:
    """The line of the script's (or a library's, outside torch and the recorder) that made
    the torch call in progress: {"file", "line", "code"}; file relative to the working
    folder when it is inside it."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not name.startswith(_NOT_THE_SCRIPT) and not name.startswith("<"):
            code = _without_comment(linecache.getline(name, f.f_lineno).strip())
            path = os.path.abspath(name)
            here = os.getcwd() + os.sep
            return {"file": path[len(here):] if path.startswith(here) else path, "line": f.f_lineno, "code": code}
        f = f.f_back
    return None


def _without_comment(code: str) -> str:
    """A line of code without its trailing comment (a '#' outside quotes)."""
    quote = ""
    for i, c in enumerate(code):
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == "#":
            return code[:i].rstrip()
    return code
