"""ampcheck's recorder for PaddlePaddle dygraph: a training run heard through Paddle's own
hooks and written as ampcheck's report (docs/recorder.md, "PaddlePaddle").

    from ampcheck_recorder.paddle_recorder import PaddleRecorder
    rec = PaddleRecorder(model, inspect="stats", out="run.json")
    for x, y in data:
        with paddle.amp.auto_cast(level="O1"):
            loss = loss_fn(model(x), y)
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.minimize(optimizer, scaled)
        optimizer.clear_grad()
    rec.close()

What Paddle's hooks reach, and so what the report holds:
  - the op dtype table: Paddle's operator statistics (paddle.amp.debugging's, read as a
    dict, not printed): every forward and optimizer op by the dtype its kernel ran in.
    Paddle counts no backward op there.
  - the layer table (report.ops): one row per layer call site (a layer called twice in a
    step is two rows), with the layer's input and output dtypes and, in "stats", the
    numerics of its outputs. Rows are layers, not ops: Paddle has no hook below them.
  - NaN/Inf producers: forward, the first layer whose output holds Inf/NaN while its
    inputs are finite (a container layer only when none of its sublayers made it: its own
    code between them did); backward, through gradient hooks on each layer's outputs,
    inputs and parameters: the layer whose output gradient was finite while the gradient
    it passed back (to an input or a parameter) was not. Everything else is a propagator.
  - the GradScaler (paddle.amp.GradScaler / AmpScaler): scale, found_inf and skip per
    update, Paddle's bad-step counter (decr_every_n_nan_or_inf), the first parameter whose
    gradient held the Inf, and the probing-vs-failure reading of ampcheck's inspector.
  - whether AMP really ran: auto_cast's level and dtype as entered, against the dtypes
    the kernels ran in (Paddle ignores auto_cast and GradScaler on a CPU place).
inspect="full" is refused: recomputing a call in fp32 needs a hook below the layers.

Judged by judge.py's rules, the engine's, as PyTorch runs are.
"""

from __future__ import annotations

import atexit
import math
import threading
import warnings
from contextlib import contextmanager

import numpy as np
import paddle

from . import judge
from . import ranks
from . import report as report_mod
from .stats import BF16, EXPONENTS, F16, MAX_EXPONENT, MIN_EXPONENT, Stats

INSPECT_MODES = ("trace", "stats")
_BUCKET = {"float16": 0, "bfloat16": 1, "float32": 2}

_active = None
_active_lock = threading.Lock()


def active() -> "PaddleRecorder | None":
    """The recorder now recording, if any."""
    return _active


# -- numerics of Paddle tensors, through numpy ----------------------------------------------

def dtype_name(dtype) -> str:
    """paddle.float16 -> "float16"."""
    return str(dtype).replace("paddle.", "")


def _floating(t) -> bool:
    return isinstance(t, paddle.Tensor) and t.is_floating_point()


def _tensors(tree, out=None) -> list:
    """The floating tensors in an argument or result (tuples, lists, dicts)."""
    out = [] if out is None else out
    if isinstance(tree, paddle.Tensor):
        if tree.is_floating_point():
            out.append(tree)
    elif isinstance(tree, (list, tuple)):
        for x in tree:
            _tensors(x, out)
    elif isinstance(tree, dict):
        for x in tree.values():
            _tensors(x, out)
    return out


def _values(t) -> np.ndarray:
    """A floating tensor's values as a flat numpy array of float32 (float64 kept): exact.
    numpy has no bfloat16, so bf16 comes as its bits and is widened here."""
    a = np.asarray(t.numpy()).reshape(-1)
    if a.dtype == np.uint16:  # bfloat16's bits
        return (a.astype(np.uint32) << 16).view(np.float32)
    if a.dtype == np.float64:
        return a
    return a.astype(np.float32, copy=False)


def _narrow_counts(a: np.ndarray, nonzero: np.ndarray, b) -> list:
    return [int(np.count_nonzero(a >= b.overflow)),
            int(np.count_nonzero((a > b.max) & (a < b.overflow))),
            int(np.count_nonzero(nonzero & (a <= b.underflow))),
            int(np.count_nonzero((a > b.underflow) & (a < b.min_normal_tie)))]


def array_stats(x: np.ndarray) -> Stats:
    """numerics.tensor_stats for a numpy array: the same counts and bins."""
    s = Stats(count=int(x.size), tensors=1)
    if s.count == 0:
        return s
    fin = np.isfinite(x)
    all_finite = bool(fin.all())
    xf = x if all_finite else x[fin]
    a = np.abs(xf)
    nonzero = a != 0
    nz = a[nonzero]
    exponent = np.frexp(nz)[1].astype(np.int64) - 1  # floor(log2|x|), subnormals too
    below = exponent < MIN_EXPONENT
    above = exponent > MAX_EXPONENT
    if not all_finite:
        s.nan = int(np.count_nonzero(np.isnan(x)))
        s.pos_inf = int(np.count_nonzero(x == np.inf))
        s.neg_inf = int(np.count_nonzero(x == -np.inf))
    s.zero = int(np.count_nonzero(~nonzero))
    s.below, s.above = int(np.count_nonzero(below)), int(np.count_nonzero(above))
    s.f16, s.bf16 = _narrow_counts(a, nonzero, F16), _narrow_counts(a, nonzero, BF16)
    s.by_exponent = np.bincount(exponent[~below & ~above] - MIN_EXPONENT, minlength=EXPONENTS).tolist()
    if xf.size:
        xd = xf.astype(np.float64)
        s.sum, s.sum_squares = float(xd.sum()), float((xd * xd).sum())
        s.min, s.max, s.absmax = float(xf.min()), float(xf.max()), float(a.max())
    if nz.size:
        s.min_nonzero_abs = float(nz.min())
    return s


def range_stats(x: np.ndarray) -> Stats:
    """Only what a TensorRange needs (non-finite counts, min, max, absmax): for gradients,
    which are checked, not binned."""
    s = Stats(count=int(x.size), tensors=1)
    if s.count == 0:
        return s
    if bool(np.isfinite(x).all()):
        xf = x
    else:
        s.nan = int(np.count_nonzero(np.isnan(x)))
        s.pos_inf = int(np.count_nonzero(x == np.inf))
        s.neg_inf = int(np.count_nonzero(x == -np.inf))
        xf = x[np.isfinite(x)]
    if xf.size:
        s.min, s.max = float(xf.min()), float(xf.max())
        s.absmax = max(-s.min, s.max)
    return s


def _range(role: str, t, s: Stats) -> dict:
    """A TensorRange of the report, from a tensor's statistics."""
    return {"role": role, "dtype": dtype_name(t.dtype), "shape": list(t.shape), "nan": s.nan,
            "pos_inf": s.pos_inf, "neg_inf": s.neg_inf, "min": s.min, "max": s.max, "absmax": s.absmax}


def _nonfinite(s: Stats) -> int:
    return s.nan + s.pos_inf + s.neg_inf


# -- the layer table -----------------------------------------------------------------------

class _Instance:
    """One row of report.ops: the k-th call of a layer within a step, over the run."""

    def __init__(self, module, type_, occurrence):
        self.module, self.type, self.occurrence = module, type_, occurrence
        self.phase = "forward"
        self.calls = 0
        self.reason = "off"
        self.autocast = ""
        self.dtypes_in: list = []
        self.out = ""
        self.counts = [0, 0, 0, 0]  # output dtype of each call: fp16, bf16, fp32, other
        self.numerics: dict = {}    # role -> Stats
        self.casts: dict = {}
        self.kernels: dict = {}
        self.error_count = self.error_nonfinite = 0
        self.first_loss = None
        self.fp32_nonfinite = 0
        self.fp8_cast = None        # PyTorch's (casts into fp8); Paddle's rows are layers
        self.aten = None            # PyTorch's field; Paddle has no op under the layer

    @property
    def name(self) -> str:
        return f"{self.module}/{self.type}#{self.occurrence}"

    @property
    def compute(self) -> str:
        return self.out

    @property
    def kernel_dtypes(self) -> list:
        return list(self.counts)


class _Call:
    """One layer call in flight (forward), and what its gradient hooks learn (backward)."""
    __slots__ = ("layer", "path", "type", "seq", "step", "inputs", "parent", "bad_within", "forward_bad",
                 "out_bad", "out_ranges", "reported")

    def __init__(self, layer, path, type_, seq, step, inputs, parent):
        self.layer, self.path, self.type, self.seq, self.step = layer, path, type_, seq, step
        self.inputs = inputs
        self.parent = parent      # the layer call this one ran in, or None for a root
        self.bad_within = False   # a sublayer's output held Inf/NaN during this call
        self.forward_bad = False  # its output held Inf/NaN: its backward reads non-finite values
        self.out_bad = False      # backward: a gradient reaching its output held Inf/NaN
        self.out_ranges: list = []
        self.reported = False     # backward: judged here or in a sublayer call


# -- the recorder --------------------------------------------------------------------------

class PaddleRecorder:
    """Records a PaddlePaddle dygraph training run as ampcheck's report.

    model:     the paddle.nn.Layer (or a dict of name -> layer, or a list) whose sublayer
               paths the report uses; None with wait_for_model: the first top-level layer
               called that has trainable parameters is the model (its paths unprefixed),
               later ones are named by their class.
    optimizer, scaler: accepted for symmetry with the PyTorch recorder; every Paddle
               optimizer and GradScaler is listened to while the recorder records.
    inspect:   "trace" (dtypes and steps) or "stats" (plus numerics, NaN/Inf producers and
               the loss-scale reading).
    out:       where close() (or the interpreter's exit) writes the report; None: nowhere.
    allow_inf: layer types or layer paths whose Inf/-Inf is intended (not a failure).
    wait_for_model: find the model at its first call (``ampcheck record`` starts the
               recorder when the script imports paddle, before it builds its model).
    """

    def __init__(self, model, optimizer=None, scaler=None, *, inspect="stats", out=None, allow_inf=(),
                 max_skipped_fraction=0.05, script=None, script_args=(), wait_for_model=False, start=True):
        if inspect == "full":
            raise ValueError('inspect="full" recomputes each fp16/bf16 op in fp32, which needs a hook below '
                             'Paddle\'s layers that Paddle does not have; use inspect="stats"')
        if inspect not in INSPECT_MODES:
            raise ValueError(f'inspect="{inspect}" is not a mode; use "trace" or "stats"')
        if model is None and not wait_for_model:
            raise ValueError("PaddleRecorder needs the model (a paddle.nn.Layer), or wait_for_model=True to take "
                             "the first layer the script calls")
        self.inspect = inspect
        self.out = out
        self.allow_inf = tuple(allow_inf)
        self.max_skipped_fraction = max_skipped_fraction
        self.watch = None
        if inspect == "stats":
            self.watch = judge.UpdateJudge(judge.Options(max_skipped_fraction=max_skipped_fraction))
        self.script, self.script_args = script, list(script_args)
        self.forcer = _NoForcing()
        self._lock = threading.RLock()
        # the model
        self._roots: list = []        # (prefix, layer)
        self._paths: dict = {}        # id(layer) -> path
        self._hooked: set = set()     # id(layer) of the layers with hooks
        self._owner: dict = {}        # id(parameter) -> owning layer's path
        self._param_names: dict = {}  # id(parameter) -> structured name
        self._waiting = wait_for_model and model is None
        # several processes (paddle.distributed.launch): this rank and its checksums (ranks.py)
        self.rank_info = ranks.rank_from_environment()
        self._hashed: list | None = None
        self.initial_hashes: list | None = None
        self._step_hashes = None
        self.quiet_beside_ranks = False
        self.model_name = ""
        self.parameters = 0
        # the run
        self.steps: list = []
        self.step_index = 1
        self._explicit = False
        self._step_busy = False
        self._step_losses: list = []
        self._step_updates: list = []
        self._updates = 0
        self._seq = 0
        self._stack: list = []
        self._occurrences: dict = {}
        self._last_call: dict = {}    # layer path -> its last _Call this step (parameter hooks)
        self._scaled_ids: set = set()
        self._in_scaler = 0
        self._found_pending = None    # scaler.step()'s found_inf, for its update()
        self._scale_pending = math.nan
        self._grad_bad: list = []
        self._allowed_outputs: list = []
        self.instances: dict = {}
        self.op_types: dict = {}
        self.fp8_calls: dict = {}     # Paddle's operator statistics count no fp8 column
        self.fp8_dtypes: list = []
        self.inserted_casts: dict = {}
        # what the report's run block says
        self.batch = 0
        self.lr = math.nan
        self.optimizer_name = ""
        self.device = "cuda" if paddle.get_device().startswith("gpu") else paddle.get_device().split(":")[0]
        self.autocast_seen = False
        self.autocast_level = "O1"
        self.autocast_dtypes: list = []
        self.low_dtypes: list = []
        self.autocast_requests: list = []  # auto_cast(...) as the script entered it
        self.scaler_enabled = False
        self.scaler_seen = scaler is not None
        self.init_scale = math.nan
        self.seed = None
        self.accuracy = math.nan
        self.internal_error = None
        self.script_outcome = None
        self.interrupted_by = ""
        self._handles: list = []
        self._patches: list = []
        self._flag_before = None
        self._started = False
        self._listening = False  # from start() until close() or an internal error
        self._closed = False
        self._final = None
        self._atexit = False
        if model is not None:
            self._add_models(model)
        for opt in ([] if optimizer is None else optimizer if isinstance(optimizer, (list, tuple)) else [optimizer]):
            self._note_optimizer(opt)
        if start:
            self.start()

    # -- the model ----------------------------------------------------------------------

    def _add_models(self, model):
        if isinstance(model, paddle.nn.Layer):
            self._add_root(model, "")
            return
        items = list(model.items()) if isinstance(model, dict) else [(None, m) for m in model]
        if not items or not all(isinstance(m, paddle.nn.Layer) for _, m in items):
            raise ValueError("model: give a paddle.nn.Layer, or a dict or list of them")
        for i, (prefix, m) in enumerate(items):
            self._add_root(m, str(prefix) if prefix is not None else "" if i == 0 else None)

    def _add_root(self, layer, prefix):
        if prefix is None:  # a later top-level layer: named by its class
            base = type(layer).__name__
            prefix, n = base, 2
            while any(p == prefix for p, _ in self._roots):
                prefix, n = f"{base}{n}", n + 1
        self._roots.append((prefix, layer))
        # paddle.DataParallel wraps the model as its _layers: its paths are the model's own.
        inner = layer._layers if type(layer).__name__ == "DataParallel" and isinstance(
            getattr(layer, "_layers", None), paddle.nn.Layer) else layer
        if not self.model_name:
            self.model_name = type(inner).__name__
            self.parameters = sum(int(np.prod(p.shape)) for p in layer.parameters() if not p.stop_gradient)
        for name, sub in layer.named_sublayers(include_self=True):
            if id(sub) in self._paths:
                continue
            if inner is not layer:
                name = name[len("_layers."):] if name.startswith("_layers.") else ("" if name == "_layers" else name)
            path = ".".join(x for x in (prefix, name) if x)
            self._paths[id(sub)] = path
            for pname, p in sub.named_parameters(include_sublayers=False):
                self._owner[id(p)] = path
                self._param_names[id(p)] = ".".join(x for x in (path, pname) if x)
        if self._listening:
            self._hook(layer)

    def _hook(self, root):
        for _, layer in root.named_sublayers(include_self=True):
            if id(layer) in self._hooked:
                continue
            self._hooked.add(id(layer))
            self._handles.append(layer.register_forward_pre_hook(self._pre))
            self._handles.append(layer.register_forward_post_hook(self._post))
            if self.inspect == "stats":
                for p in layer.parameters(include_sublayers=False):
                    if not p.stop_gradient:
                        self._handles.append(p.register_hook(self._param_hook(p)))

    def _wrap_layer_call(self, original):
        rec = self

        def wrapper(layer, *args, **kwargs):
            if rec._listening and not rec._stack and id(layer) not in rec._paths:
                try:
                    if any(not p.stop_gradient for p in layer.parameters()):
                        with rec._lock:
                            rec._waiting = False
                            rec._add_root(layer, None if rec._roots else "")
                except Exception as e:  # noqa: BLE001
                    rec._broke(e)
            return original(layer, *args, **kwargs)
        return wrapper

    # -- lifetime ---------------------------------------------------------------------

    def start(self):
        """Starts listening: layer and gradient hooks, the optimizers and loss scalers."""
        global _active
        with _active_lock:
            if _active is not None and _active is not self:
                raise RuntimeError("another ampcheck recorder is recording; close() it before starting one")
            if self._started:
                return self
            _active = self
            self._started = True
            self._listening = True
        for _, root in self._roots:
            self._hook(root)
        if self._waiting:
            self._patch(paddle.nn.Layer, "__call__", self._wrap_layer_call)
        self._patch_optimizers()
        self._patch_scalers()
        self._patch(paddle.Tensor, "backward", self._wrap_backward)
        for name in ("auto_cast", "amp_guard"):
            if hasattr(paddle.amp, name):
                self._patch(paddle.amp, name, self._wrap_auto_cast)
        self._flag_before = paddle.get_flags(["FLAGS_low_precision_op_list"])["FLAGS_low_precision_op_list"]
        paddle.base.core.clear_low_precision_op_list()
        paddle.set_flags({"FLAGS_low_precision_op_list": 1})
        self.seed = int(paddle.base.core.default_cpu_generator().initial_seed())
        if self.out and not self._atexit:
            atexit.register(self._close_at_exit)
            self._atexit = True
        return self

    def close(self):
        """Stops listening and writes the report to `out` (if given). Returns the report."""
        global _active
        if self._closed:
            return self._final
        self._closed = True
        self._listening = False
        if self._started:
            self._read_op_stats()
            paddle.set_flags({"FLAGS_low_precision_op_list": self._flag_before})
            for h in self._handles:
                h.remove()
            for owner, name, original in reversed(self._patches):
                setattr(owner, name, original)
            with _active_lock:
                if _active is self:
                    _active = None
        if self._step_busy:
            self._end_step()
        self._final = report_mod.build(self)
        if self.out and not (self.quiet_beside_ranks and self._waiting and self._ranks_beside()):
            report_mod.write(self._final, self.out)
        return self._final

    def _ranks_beside(self) -> bool:
        """Whether ranks of a job wrote their reports beside this process's (a launcher's)."""
        import glob
        import os
        root, ext = os.path.splitext(self.out)
        return bool(glob.glob(glob.escape(root) + ".rank*" + (ext or ".json")))

    def rank_details(self) -> dict:
        """What report.py's rank block needs: Paddle's collectives are not heard (no hook below
        its layers), nor what its wrappers were asked for."""
        backend = ""
        try:
            import paddle.distributed as pd
            if pd.is_initialized():
                backend = str(pd.get_backend()).lower()
        except Exception:  # noqa: BLE001 - older Paddle: no backend to read
            pass
        return {"backend": backend}

    def _note_initial_hashes(self):
        """Before the first update: the parameters checksummed every step and their checksums
        now (ranks.py): the job's analysis tells the replicas from the shards by them."""
        if self._hashed is not None or self.rank_info is None or self.rank_info.world_size < 2:
            return
        hashed, seen = [], set()
        for _, root in self._roots:
            for p in root.parameters():
                if id(p) not in seen and not p.stop_gradient:
                    seen.add(id(p))
                    hashed.append((self._param_names.get(id(p), p.name), p))
        self._hashed = hashed
        self.initial_hashes = [_checksum(p) for _, p in hashed]

    def discard(self):
        """Stops listening and writes nothing."""
        self.out = None
        self.close()

    def _close_at_exit(self):
        if not self._closed:
            self.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is KeyboardInterrupt:
            self.interrupted_by = "SIGINT"
        self.close()
        return False

    def report(self) -> dict:
        """The report of the run so far (close() gives the final one)."""
        with self._lock:
            if not self._closed:
                self._read_op_stats()
            return report_mod.build(self)

    def set_accuracy(self, accuracy: float):
        """The training accuracy the script measured, in [0, 1], for summary.accuracy."""
        self.accuracy = float(accuracy)

    @contextmanager
    def step(self):
        """One training step: its boundaries are this block's, not the optimizer's."""
        self._explicit = True
        try:
            yield self
        finally:
            self._end_step(always=True)

    def framework(self):
        """What the report says of PaddlePaddle (report.Framework)."""
        cuda = paddle.version.cuda()
        return report_mod.Framework("paddle", "PaddlePaddle", paddle.__version__,
                                    f"CUDA {cuda}" if cuda and cuda != "False" else "CPU", self.seed or 0)

    def amp_note(self) -> str:
        """Why no op ran in low precision, when the script asked for it."""
        if not self.autocast_requests or self.low_dtypes:
            return ""
        level, dtype = self.autocast_requests[0]
        where = paddle.get_device()
        note = f"paddle.amp.auto_cast(level='{level}', dtype='{dtype}') was entered on {where}"
        if not where.startswith(("gpu", "xpu")):
            note += (", where Paddle does no AMP (auto_cast and GradScaler work on CUDA, XPU and custom "
                     "places only): run on a GPU (paddle.set_device('gpu'))")
        return note

    # -- patches ------------------------------------------------------------------------

    def _patch(self, owner, name, make):
        original = owner.__dict__[name] if name in getattr(owner, "__dict__", {}) else getattr(owner, name)
        self._patches.append((owner, name, original))
        setattr(owner, name, make(original))

    def _patch_class_tree(self, root, wraps: dict):
        """Wraps each method named in `wraps` wherever a class of root's tree (root and all its
        subclasses, which may override it: Adam defines its own step) defines it."""
        seen, pending = set(), [root]
        while pending:
            cls = pending.pop()
            if cls in seen:
                continue
            seen.add(cls)
            pending.extend(cls.__subclasses__())
            for name, wrap in wraps.items():
                if name in cls.__dict__:
                    self._patch(cls, name, wrap)

    def _patch_optimizers(self):
        self._patch_class_tree(paddle.optimizer.Optimizer, {"step": self._wrap_optimizer,
                                                            "minimize": self._wrap_optimizer})

    def _patch_scalers(self):
        # GradScaler derives from AmpScaler (Paddle >= 2.3); older ones have GradScaler alone.
        root = paddle.amp.AmpScaler if hasattr(paddle.amp, "AmpScaler") else paddle.amp.GradScaler
        self._patch_class_tree(root, {"scale": self._wrap_scale,
                                      "minimize": lambda original: self._wrap_scaler_stepping(original, True),
                                      "step": lambda original: self._wrap_scaler_stepping(original, False),
                                      "update": self._wrap_scaler_update})

    def _wrap_optimizer(self, original):
        rec = self

        def wrapper(opt, *args, **kwargs):
            if not rec._listening or getattr(opt, "_ampcheck_depth", 0):
                return original(opt, *args, **kwargs)
            opt._ampcheck_depth = 1
            try:
                rec._optimizer_pre(opt, args)
                result = original(opt, *args, **kwargs)
            finally:
                opt._ampcheck_depth = 0
            rec._optimizer_post(opt)
            return result
        return wrapper

    def _wrap_scale(self, original):
        rec = self

        def wrapper(scaler, var, *args, **kwargs):
            scaled = original(scaler, var, *args, **kwargs)
            if not rec._listening:
                return scaled
            with rec._lock:
                rec.scaler_seen = True
                rec._step_busy = True
                rec._note_scalar_loss(var)
                rec._scaled_ids.add(id(scaled))  # its backward is the same loss's
                if scaler._enable:  # Paddle turns it off on a CPU place, and for bf16 dynamic scaling
                    rec.scaler_enabled = True
            return scaled
        return wrapper

    def _enter_scaler(self, scaler) -> bool:
        """True when this is the outermost call of an enabled scaler (super() calls nest)."""
        if not self._listening or not scaler._enable or getattr(scaler, "_ampcheck_depth", 0):
            return False
        self._note_initial_hashes()
        scaler._ampcheck_depth = 1
        self._in_scaler += 1
        return True

    def _leave_scaler(self, scaler):
        scaler._ampcheck_depth = 0
        self._in_scaler -= 1

    def _wrap_scaler_stepping(self, original, updates: bool):
        """minimize (updates: the step and the scale's update in one call) and step (the
        update comes with update(), but for a static scale, whose update() does nothing)."""
        rec = self

        def wrapper(scaler, optimizer, *args, **kwargs):
            if not rec._enter_scaler(scaler):
                return original(scaler, optimizer, *args, **kwargs)
            before = _scale_of(scaler)
            try:
                result = original(scaler, optimizer, *args, **kwargs)
            finally:
                rec._leave_scaler(scaler)
            rec._note_optimizer(optimizer)
            found = bool(scaler._cache_found_inf)
            if updates or not scaler._use_dynamic_loss_scaling:
                rec._scaler_event(scaler, before, found, optimizer)
            else:
                rec._found_pending, rec._scale_pending = (found, optimizer), before
            return result
        return wrapper

    def _wrap_scaler_update(self, original):
        rec = self

        def wrapper(scaler, *args, **kwargs):
            if not rec._enter_scaler(scaler):
                return original(scaler, *args, **kwargs)
            try:
                result = original(scaler, *args, **kwargs)
            finally:
                rec._leave_scaler(scaler)
            if rec._found_pending is not None:
                (found, optimizer), before = rec._found_pending, rec._scale_pending
                rec._found_pending = None
                rec._scaler_event(scaler, before, found, optimizer)
            return result
        return wrapper

    def _wrap_backward(self, original):
        rec = self

        def wrapper(tensor, *args, **kwargs):
            if rec._listening:
                if id(tensor) not in rec._scaled_ids:
                    rec._note_scalar_loss(tensor)
                rec._step_busy = True
            return original(tensor, *args, **kwargs)
        return wrapper

    def _wrap_auto_cast(self, original):
        rec = self

        def wrapper(*args, **kwargs):
            names = ("enable", "custom_white_list", "custom_black_list", "level", "dtype")
            given = dict(zip(names, args))
            given.update(kwargs)
            if given.get("enable", True):
                request = (str(given.get("level", "O1")), str(given.get("dtype", "float16")))
                if request not in rec.autocast_requests:
                    rec.autocast_requests.append(request)
            return original(*args, **kwargs)
        return wrapper

    # -- layers (forward) -------------------------------------------------------------------

    def _pre(self, layer, inputs):
        if not self._listening:
            return None
        try:
            with self._lock:
                path = self._paths.get(id(layer), "")
                tracer = paddle.base.framework._dygraph_tracer()
                level = str(getattr(tracer, "_amp_level", "O0")).split(".")[-1]
                if level in ("O1", "O2"):
                    self.autocast_seen, self.autocast_level = True, level
                    amp_dtype = str(getattr(tracer, "_amp_dtype", "float16"))
                    if amp_dtype not in self.autocast_dtypes:
                        self.autocast_dtypes.append(amp_dtype)
                tensors = _tensors(inputs)
                if not self._stack and tensors and not self.batch and tensors[0].shape:
                    self.batch = int(tensors[0].shape[0])
                self._seq += 1
                parent = self._stack[-1] if self._stack else None
                # A forward alone (an evaluation after the last update) makes no step of its own.
                self._stack.append(_Call(layer, path, type(layer).__name__, self._seq, self.step_index, tensors,
                                         parent))
        except Exception as e:  # noqa: BLE001 - the recorder never breaks the user's run
            self._broke(e)
        return None

    def _post(self, layer, inputs, outputs):
        if not self._listening:
            return None
        try:
            with self._lock:
                # A sublayer that raised never reached its post hook: its call ends here too.
                at = next((i for i in range(len(self._stack) - 1, -1, -1) if self._stack[i].layer is layer), None)
                if at is None:
                    return None
                call = self._stack[at]
                del self._stack[at:]
                outs = _tensors(outputs)
                self._table(call, outs)
                if self.inspect == "stats":
                    self._judge_forward(call, outs)
                    self._hook_gradients(call, outs)
        except Exception as e:  # noqa: BLE001
            self._broke(e)
        return None

    def _table(self, call: _Call, outs: list):
        k = self._occurrences.get(call.path, 0)
        self._occurrences[call.path] = k + 1
        key = (call.path, call.type, k)
        inst = self.instances.get(key)
        if inst is None:
            inst = self.instances[key] = _Instance(call.path, call.type, k)
        inst.calls += 1
        inst.dtypes_in = [dtype_name(t.dtype) for t in call.inputs]
        out = dtype_name(outs[0].dtype) if outs else ""
        inst.out = out
        inst.counts[_BUCKET.get(out, 3)] += 1
        if out in ("float16", "bfloat16") and out not in self.low_dtypes:
            self.low_dtypes.append(out)
        if self.autocast_seen:
            inst.reason, inst.autocast = f"auto_cast {self.autocast_level}", self.autocast_dtypes[0]
        if self.inspect == "stats":
            for i, t in enumerate(outs):
                s = array_stats(_values(t))
                call_stats = inst.numerics.setdefault(f"output {i}", Stats())
                call_stats.merge(s)
                t._ampcheck_stats = s  # for the judge, below
        self._last_call[call.path] = call

    def _allowed(self, call: _Call) -> bool:
        return any(call.type == a or call.path == a or call.path.startswith(a + ".") for a in self.allow_inf)

    def _judge_forward(self, call: _Call, outs: list):
        produced = [0, 0, 0]
        for t in outs:
            s = t._ampcheck_stats
            produced = [produced[0] + s.nan, produced[1] + s.pos_inf, produced[2] + s.neg_inf]
        if sum(produced) == 0:
            return
        call.forward_bad = True
        if self._stack:
            self._stack[-1].bad_within = True
        if call.bad_within:
            return  # a sublayer made it (or passed it on): judged there
        inputs, bad_inputs = [], []
        # A layer's inputs are its arguments and its own parameters (a weight an earlier
        # update made non-finite passes Inf/NaN on: that is no producer).
        named = [(f"input {i}", t) for i, t in enumerate(call.inputs)]
        named += [(name, p) for name, p in call.layer.named_parameters(include_sublayers=False)
                  if p.is_floating_point()]
        for role, t in named:
            s = getattr(t, "_ampcheck_stats", None) if role.startswith("input ") else None
            s = s or array_stats(_values(t))
            inputs.append(_range(role, t, s))
            if _nonfinite(s):
                bad_inputs.append(t)
        if self._allowed(call) or (bad_inputs and all(any(t is a for a in self._allowed_outputs)
                                                     for t in bad_inputs)):
            self._allowed_outputs.extend(outs)
            return
        event = self._event(call, "forward", inputs, produced)
        if self.watch.forward_event(event, not bad_inputs):
            judge._add_producer(self.watch.producers, event)

    def _event(self, call: _Call, phase: str, inputs: list, produced: list) -> dict:
        self._seq += 1
        return {"_seq": self._seq if phase != "forward" else call.seq, "step": call.step, "phase": phase,
                "op": call.type, "module": call.path, "inputs": inputs, "out_nan": produced[0],
                "out_pos_inf": produced[1], "out_neg_inf": produced[2], "lost": [], "aten": None}

    # -- gradients (backward) ---------------------------------------------------------------

    def _hook_gradients(self, call: _Call, outs: list):
        outs = [t for t in outs if not t.stop_gradient]
        if not outs:
            return
        for i, t in enumerate(outs):
            t.register_hook(self._output_grad_hook(call, i))
        for i, t in enumerate(call.inputs):
            if not t.stop_gradient:
                t.register_hook(self._input_grad_hook(call, f"input {i}"))

    def _output_grad_hook(self, call: _Call, index: int):
        def hook(grad):
            if not self._listening:
                return None
            try:
                with self._lock:
                    s = range_stats(_values(grad))
                    call.out_ranges.append(_range(f"gradient of output {index}", grad, s))
                    if _nonfinite(s) and not call.out_bad:
                        call.out_bad = True
                        if call.parent is None and not self._allowed(call):
                            # The gradient reaching the model's output: the loss computation
                            # after the model (not a layer) made it, from finite values when the
                            # model's output was finite.
                            loss = _Call(None, "", "loss", call.seq, call.step, [], None)
                            self.watch.gradient_event(self._event(loss, "backward", [], [s.nan, s.pos_inf,
                                                                                        s.neg_inf]),
                                                      not call.forward_bad)
            except Exception as e:  # noqa: BLE001
                self._broke(e)
            return None
        return hook

    def _input_grad_hook(self, call: _Call, what: str):
        def hook(grad):
            if not self._listening:
                return None
            try:
                with self._lock:
                    self._judge_gradient(call, grad, what)
            except Exception as e:  # noqa: BLE001
                self._broke(e)
            return None
        return hook

    def _param_hook(self, p):
        def hook(grad):
            if not self._listening:
                return None
            try:
                with self._lock:
                    call = self._last_call.get(self._owner.get(id(p), ""))
                    if call is not None:
                        self._judge_gradient(call, grad, f"gradient of {self._param_names.get(id(p), 'a parameter')}")
            except Exception as e:  # noqa: BLE001
                self._broke(e)
            return None
        return hook

    def _judge_gradient(self, call: _Call, grad, what: str):
        if call.reported or self._allowed(call):
            return
        a = _values(grad)
        if bool(np.isfinite(a).all()):
            return
        s = range_stats(a)
        up = call
        while up is not None:  # the layers it ran in are not judged again for it
            up.reported = True
            up = up.parent
        event = self._event(call, "backward", list(call.out_ranges), [s.nan, s.pos_inf, s.neg_inf])
        # Its backward reads the gradient reaching its output and its forward values.
        self.watch.gradient_event(event, not call.out_bad and not call.forward_bad)

    # -- optimizer steps and the scaler -----------------------------------------------------

    def _note_optimizer(self, opt):
        if not self.optimizer_name:
            self.optimizer_name = type(opt).__name__
            try:
                self.lr = float(opt.get_lr())
            except Exception:  # noqa: BLE001 - a scheduler object some versions cannot read
                self.lr = math.nan

    def _scan_grads(self):
        """Gradients of the model's parameters: how many, whether any is nonzero, the names
        of those holding Inf/NaN (in the model's order)."""
        count, nonzero, bad = 0, False, []
        for _, root in self._roots:
            for p in root.parameters():
                g = p.grad
                if g is None:
                    continue
                count += 1
                a = _values(g)
                nonzero = nonzero or bool(np.any(a != 0))
                if not np.all(np.isfinite(a)):
                    bad.append(self._param_names.get(id(p), p.name))
        return count, nonzero, bad

    def _optimizer_pre(self, opt, args):
        with self._lock:
            self._note_optimizer(opt)
            self._note_initial_hashes()
            self._step_busy = True
            if args and isinstance(args[0], paddle.Tensor) and id(args[0]) not in self._scaled_ids:
                self._note_scalar_loss(args[0])  # minimize(loss)
            if self._in_scaler:
                return  # the scaler judges its own step
            count, nonzero, bad = self._scan_grads()
            if self.watch is not None:
                self.watch.on_gradients(count, nonzero)
            self._grad_bad = bad

    def _optimizer_post(self, opt):
        with self._lock:
            if self._in_scaler:
                return
            bad, self._grad_bad = self._grad_bad, []
            self._update(1.0, 1.0, bool(bad), False, {}, bad)
            if not self._explicit:
                self._end_step()

    def _scaler_event(self, scaler, before: float, found: bool, optimizer):
        with self._lock:
            after = _scale_of(scaler)
            if math.isnan(self.init_scale):
                self.init_scale = before
            self.scaler_enabled = True
            count, nonzero, bad = self._scan_grads()
            if not found and self.watch is not None:
                self.watch.on_gradients(count, nonzero)
            counters = {}
            if scaler._use_dynamic_loss_scaling:
                counters = {"decr_count": int(scaler._decr_count), "incr_count": int(scaler._incr_count)}
            self._update(before, after, found, found, counters, bad if found else [])
            if not self._explicit:
                self._end_step()

    def _update(self, before, after, found_inf, skipped, counters, bad):
        if self._hashed is not None:  # after the update (or the skip): parameters and gradients
            self._step_hashes = ([_checksum(p) for _, p in self._hashed],
                                 [_checksum(p.grad) for _, p in self._hashed])
        self._updates += 1
        event = judge.ScalerEvent(self._updates, float(before), float(after), bool(found_inf), bool(skipped),
                                  dict(counters), nonfinite_params=len(bad),
                                  nonfinite_names=list(bad[:judge.MAX_PARAM_NAMES]))
        if self.watch is not None:
            self.watch.on_scaler_update(event)
        self._step_updates.append(event)

    def _note_scalar_loss(self, t):
        if not self._listening or not isinstance(t, paddle.Tensor) or int(np.prod(t.shape)) != 1:
            return
        with self._lock:
            loss = float(_values(t)[0])
            self._step_losses.append(loss)
            if self.watch is not None:
                self.watch.on_loss(loss)

    def _end_step(self, always=False):
        with self._lock:
            if not (always or self._step_busy or self._step_updates or self._step_losses):
                return
            step = self.step_index
            losses = self._step_losses
            # Micro-batches: their losses add up to the loss whose gradient the update applies.
            record = {"step": step, "loss": math.fsum(losses) if losses else math.nan,
                      "loss_scale": 1.0, "found_inf": False, "skipped": False}
            if self._step_updates:
                first, last = self._step_updates[0], self._step_updates[-1]
                record["loss_scale"] = first.scale_before
                record["found_inf"] = any(u.found_inf for u in self._step_updates)
                record["skipped"] = any(u.skipped for u in self._step_updates)
                record["scale_after"] = last.scale_after
            if self._step_hashes is not None:
                params, grads = self._step_hashes
                record.update(params_hash=ranks.combine(params), grads_hash=ranks.combine(grads),
                              param_hashes=ranks.pack(params), grad_hashes=ranks.pack(grads))
                self._step_hashes = None
            self.steps.append(record)
            if self.watch is not None:
                self.watch.on_step_end(step)
                self.watch.on_step_begin(step + 1)
            self.step_index += 1
            self._step_losses, self._step_updates, self._step_busy = [], [], False
            self._scaled_ids = set()
            self._occurrences = {}
            self._last_call = {}
            self._allowed_outputs = []
            self._stack = []

    def _read_op_stats(self):
        """Paddle's operator statistics: op -> calls by kernel dtype (fp16, bf16, fp32, other)."""
        for op, text in paddle.base.core.get_low_precision_op_list().items():
            counts = [int(x) for x in str(text).split(",")[:4]]
            self.op_types[op] = counts + [0] * (4 - len(counts))

    def _broke(self, e: BaseException):
        if self.internal_error is None:
            import traceback
            self.internal_error = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            warnings.warn(f"ampcheck recorder: stopped on an internal error ({e!r}); the run goes on unrecorded")
        self._listening = False


class _NoForcing:
    """Paddle runs no fp32 forcing of the recorder's: its own auto_cast custom_black_list does that."""
    ops: frozenset = frozenset()
    modules: tuple = ()
    functions: frozenset = frozenset()


def _checksum(t) -> int:
    """A tensor's values' bit patterns summed as integers, modulo 2^64 (ranks.py); 0 for none."""
    if t is None:
        return 0
    a = np.ascontiguousarray(np.asarray(t.numpy()))
    if a.size == 0:
        return 0
    ints = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}.get(a.dtype.itemsize)
    if ints is None:
        a, ints = a.astype(np.float64), np.int64
    return int(np.sum(a.view(ints), dtype=np.int64)) & ranks.MASK


def _scale_of(scaler) -> float:
    s = scaler._scale
    return float(_values(s)[0]) if isinstance(s, paddle.Tensor) else float(s)
