"""The recorder: a PyTorch training run heard op by op, written as ampcheck's report.

    rec = Recorder(model, optimizer, scaler, inspect="stats", out="run.json")
    for batch in data:
        with rec.step():          # optional: steps are also found from optimizer.step /
            ...                   # scaler.update, so an unmodified loop works
    rec.close()                   # writes run.json (also at interpreter exit)

What it listens with is in listen.py; what it judges is nonfinite.py (the engine's
NanWatch rules); what it forces to fp32 is fp32.py; what it writes is report.py.

Steps. A step ends at ``GradScaler.update()`` when the step went through a scaler, else at
the end of ``optimizer.step()``; inside ``with rec.step():`` only the block's end ends it.
Steps count from 1, as the engine's do, and every op call belongs to the step in
progress (calls before the first optimizer step are step 1's).

Phases. A call is "backward" when the autograd engine runs it (a node is executing),
"optimizer" inside ``optimizer.step()`` and the GradScaler's ``scale``, ``unscale_``,
``step`` and ``update``, else "forward". Optimizer-phase calls are judged for non-finite
values (as the engine's are) but are not rows of the op table: they are not the model's.
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import sys
import threading
import traceback
from contextlib import contextmanager

import torch

from . import compiled as compiled_mod
from . import distributed as dist
from . import fp32 as fp32_mod
from . import listen
from . import trainers
from . import nonfinite as nf
from . import numerics as nx
from .optypes import ARG_DEPENDENT, IGNORED, op_type, packet_name

INSPECT_MODES = ("trace", "stats", "full")
# Which steps are heard op by op: "all", or "auto": the first AUTO_FIRST steps, every power of
# two after them, and every step after one whose loss or gradients were non-finite. A step
# not heard still has its loss, its scaler update and its gradients' finiteness read, and a
# failure in it is found op by op by running the model's call again eagerly.
LISTEN_POLICIES = ("auto", "all")
AUTO_FIRST = 4
# Op results whose statistics wait to be computed together (numerics.StatsBatch), at
# most this many elements: they are kept alive until then.
BATCH_ELEMENTS = 1 << 22

_active_lock = threading.Lock()
_active: "Recorder | None" = None


def active() -> "Recorder | None":
    """The recorder listening now, if any."""
    return _active


class NodeInfo:
    """What the forward call that created an autograd node was."""
    __slots__ = ("module", "op", "occurrence", "reason", "inserted_cast", "row", "function")

    def __init__(self, module, op, occurrence, reason, inserted_cast, function=""):
        self.module, self.op, self.occurrence, self.reason = module, op, occurrence, reason
        self.inserted_cast = inserted_cast
        self.row = op + "_grad"  # its backward calls' row of the op table
        # A custom torch.autograd.Function's class name: its backward is the script's own
        # code, whose aten calls are named in the report by that class and their aten op.
        self.function = function


class _Instance:
    """One op instance of the report (OpInstance): the k-th call of an op type in one
    module within a step, in one phase, over the run."""

    def __init__(self, module, type_, phase, occurrence):
        self.module, self.type, self.phase, self.occurrence = module, type_, phase, occurrence
        self.calls = 0
        self.reason = "off"
        self.autocast = ""         # autocast's dtype when it was on for the last call
        self.last = ([], None, None)  # the last call's (input dtypes, kernel dtype, output dtype)
        self.kernel_calls: dict = {}  # (device, aten, kernel dtype) -> calls, first-seen order
        self.casts: dict = {}      # (input, from, to) -> calls
        self.numerics: dict = {}   # role -> numerics.Accumulator
        # inspect full: the fp32 recompute
        self.error_count = 0
        self.error_nonfinite = 0
        self.error_sum = 0.0
        self.floor_sum = 0.0
        self.worst = -1.0
        self.floor_at_worst = 0.0
        self.worst_step = 0
        self.max_abs = 0.0
        self.underflow = 0
        self.overflow = 0
        self.first_loss = None     # (step, kind, value)
        self.fp8_cast = None       # casts into fp8: {"dtype", "elements", "beyond", "underflow", ...}
        self.fp32_nonfinite = 0

    @property
    def name(self) -> str:
        return f"{self.module}/{self.type}#{self.occurrence}"

    # What the report reads, made from the counts when it reads them.
    @property
    def dtypes_in(self) -> list:
        return [nx.dtype_name(d) for d in self.last[0]]

    @property
    def compute(self) -> str:
        kdtype = self.last[1]
        if kdtype is None:
            return ""
        return "float32" if kdtype in nx.LOW_PRECISION else nx.dtype_name(kdtype)

    @property
    def out(self) -> str:
        return nx.dtype_name(self.last[2]) if self.last[2] is not None else ""

    @property
    def kernel_dtypes(self) -> list:
        c = [0, 0, 0, 0]
        for (_, _, kdtype), n in self.kernel_calls.items():
            c[_BUCKET.get(kdtype, 3)] += n
        return c

    @property
    def kernels(self) -> dict:
        """"cpu:addmm:f16" -> calls, first-seen order."""
        out: dict = {}
        for (device, aten, kdtype), n in self.kernel_calls.items():
            short = _SHORT.get(kdtype, nx.dtype_name(kdtype) if kdtype is not None else "none")
            name = f"{device}:{aten}:{short}"
            out[name] = out.get(name, 0) + n
        return out

    @property
    def aten(self) -> list:
        """The aten ops its calls ran, first-seen order."""
        out = []
        for (_, aten, _) in self.kernel_calls:
            if aten not in out:
                out.append(aten)
        return out


class _Call:
    """One aten call's place in the report, worked out before it runs."""
    __slots__ = ("seq", "step", "phase", "op", "row", "module", "k", "reason", "autocast", "inserted",
                 "node_inserted", "device", "function")

    def __init__(self, seq, step, phase, op, row, module, k, reason, autocast, inserted, node_inserted, device,
                 function=""):
        self.seq, self.step, self.phase, self.op, self.row, self.module = seq, step, phase, op, row, module
        self.k, self.reason, self.autocast, self.inserted = k, reason, autocast, inserted
        self.node_inserted, self.device, self.function = node_inserted, device, function


class _FuncInfo:
    """What the recorder needs of an aten overload that does not depend on its arguments,
    worked out at its first call."""
    __slots__ = ("packet", "ignored", "op", "is_view", "recompute_ok", "mutable", "writes", "collective")

    def __init__(self, func):
        self.packet = packet_name(func)
        self.ignored = (self.packet in IGNORED or getattr(func, "namespace", "") in dist.TRANSIT_NAMESPACES
                        or (self.packet in dist.NOT_COLLECTIVES
                            and getattr(func, "namespace", "") in dist.COLLECTIVE_NAMESPACES))
        # c10d's collectives (DDP's buckets, FSDP's gathers and reductions, a script's own
        # dist.all_reduce) and the functional ones (DTensor, compiled code): dtypes and sizes
        # are recorded, their values never read (they may still be in flight).
        namespace = getattr(func, "namespace", "")
        self.collective = namespace in dist.COLLECTIVE_NAMESPACES
        self.op = None if self.packet in ARG_DEPENDENT else op_type(func, ())
        if self.collective:
            self.op = f"{namespace}.{self.packet}"  # the report's name of it: "c10d.allreduce_"
        self.is_view = bool(getattr(func, "is_view", False))
        self.recompute_ok = _recompute_allowed(func)
        schema = getattr(func, "_schema", None)
        self.mutable = bool(schema is not None and schema.is_mutable)
        self.writes = ()
        if self.mutable:
            self.writes = tuple(i for i, arg in enumerate(schema.arguments)
                                if arg.alias_info is not None and arg.alias_info.is_write)


_BUCKET = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}
_SHORT = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32", torch.float64: "f64"}


def _kernel_dtype(outs, tensors):
    # A call reading fp8 operands (torch._scaled_mm: an fp8 GEMM writing bf16) ran in fp8.
    for t in tensors:
        if t.dtype in nx.FP8:
            return t.dtype
    for group in (outs, tensors):
        for t in group:
            if t.is_floating_point():
                return t.dtype
    for group in (outs, tensors):
        for t in group:
            return t.dtype
    return None


def _recompute_allowed(func) -> bool:
    # Never re-run what has side effects or draws random numbers: a recompute must leave
    # the run exactly as it would be without the recorder (same RNG state, same buffers).
    if func.is_view:
        return False
    tags = getattr(func, "tags", ())
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    schema = getattr(func, "_schema", None)
    return not (schema is not None and schema.is_mutable)


def _make_recompute(func, args, kwargs):
    cache = []

    def recompute():
        if not cache:
            # Run later (a producer's walk back): its arguments' memory may have been freed.
            if not all(nx.storage_holds(t) for t in listen.tensors_of_call(args, kwargs)):
                cache.append(None)
                return None
            try:
                with listen.internal(), torch.no_grad():
                    a, k = fp32_mod.fp32_args(func, args, kwargs, widen_dtypes=True)
                    outs = [t for t in listen.tensors_of(func(*a, **k)) if t.is_floating_point()]
                cache.append(outs[0] if outs else None)
            except Exception:  # an op without an fp32 kernel for these inputs: not measured
                cache.append(None)
        return cache[0]

    return recompute


class Recorder:
    """Records a PyTorch training run as ampcheck's report.

    model:     the model (or a dict of name -> module, or a list) whose module paths the
               report uses; None: found at its first call (the first top-level module
               with trainable parameters is the model, its paths unprefixed).
    optimizer: the optimizer (or a list); None: found at its first step.
    scaler:    the torch.amp.GradScaler; None is fine: every GradScaler is listened to.
    inspect:   "trace" (op dtypes and steps), "stats" (plus numerics, the NaN/Inf
               producers and the loss-scale reading) or "full" (plus each fp16/bf16 op
               recomputed in fp32: what low precision lost).
    out:       where close() (or the interpreter's exit) writes the report; None: nowhere.
    fp32_ops, fp32_modules: op types and module paths forced to fp32 (bisect-nan's trials).
    allow_inf: op types or module paths whose Inf/-Inf is intended (not a failure).
    wait_for_model: record from the first top-level module call (or backward) on, not
               from now: what ``python -m ampcheck_recorder run`` and the bootstrap use,
               since they start before the script builds its model.
    """

    def __init__(self, model=None, optimizer=None, scaler=None, *, inspect="stats", out=None,
                 fp32_ops=(), fp32_modules=(), allow_inf=(), max_skipped_fraction=0.05, stats_every=1,
                 listen="auto", kernels=0, kernels_out=None, script=None, script_args=(), wait_for_model=False,
                 start=True):
        if inspect not in INSPECT_MODES:
            raise ValueError(f'inspect="{inspect}" is not a mode; use "trace", "stats" or "full"')
        if listen not in LISTEN_POLICIES:
            raise ValueError(f'listen="{listen}" is not a policy; use "auto" or "all"')
        if not isinstance(kernels, int) or kernels < 0:
            raise ValueError(f"kernels={kernels!r}: give the steps to profile (0: none)")
        if not isinstance(stats_every, int) or stats_every < 1:
            raise ValueError(f"stats_every={stats_every!r}: give 1 (every step) or more")
        self.inspect = inspect
        self.out = out
        self.forcer = fp32_mod.Forcer(fp32_ops, fp32_modules)
        from .optypes import known_op_names
        known = known_op_names()
        allowed_ops = tuple(n for n in allow_inf if n in known)
        allowed_modules = tuple(n for n in allow_inf if n not in known)
        self.watch = None
        if inspect != "trace":
            self.watch = nf.NanWatch(nf.Options(allowed_ops=allowed_ops, allowed_modules=allowed_modules,
                                                max_skipped_fraction=max_skipped_fraction))
            self.watch.grad_keys = self._grad_keys
        self._batch = nx.StatsBatch()
        # compare --script: the first step's forward set beside the fp32 twin's (probe.py).
        self.twin_probe = None
        self.max_skipped_fraction = max_skipped_fraction
        self.stats_every = stats_every
        self.allow_inf = tuple(allow_inf)
        self.script = script
        self.script_args = list(script_args)
        # A script run under the recorder builds its model and data first: those ops
        # (initialisation, loading) are set-up, not training. Recording starts at the first
        # top-level module call (or backward, for a script without modules).
        self._waiting = wait_for_model
        self._lock = threading.RLock()
        # steps
        self.step_index = 1
        self._explicit = False
        self._step_losses: list = []
        self._step_lr = None          # the first optimizer's learning rate at its step
        self.micro_batches = 0        # the most backward() calls (micro-batches) in one step
        self.lr_scheduler = ""        # the class of the scheduler that moved the rate
        self._step_updates: list = []
        self._step_busy = False
        self._scaled_ids: set = set()
        self._in_scaler_step = 0
        self._scaler_optimizers: list = []
        self._grad_nonfinite = False
        self._grad_bad: list = []
        self._updates = 0
        self.steps: list = []
        self._seq = 0
        # the op table
        self._occurrences: dict = {}
        self._nodes: dict = {}
        self._nodes_prev: dict = {}
        self.op_types: dict = {}
        self.inserted_casts: dict = {}
        self.instances: dict = {}
        self._pending_casts: dict = {}
        self._finfo: dict = {}        # aten overload -> _FuncInfo
        self._node_ops: dict = {}     # autograd node name -> op type
        # the model
        self._paths: dict = {}        # id(module) -> (path, module)
        self._roots: list = []        # (prefix, module)
        self._root_sites: dict = {}   # prefix -> where the script first called that root
        self.quiet_beside_ranks = False  # a launcher's: write nothing when ranks recorded
        # which steps are heard op by op (LISTEN_POLICIES); forcing ops or modules to fp32
        # needs every step heard, since the forcing itself rides on the listening
        self.listen = "all" if self.forcer else listen
        self.listening = False
        self.listened_steps: list = []
        self._listen_next: set = set()
        self._model_root = None       # the model's root module: its calls are what a replay runs
        self._root_call = None        # its last call on a step not heard: (module, args, kwargs, ...)
        self._root_hooks: list = []
        self._heard = True            # the step in progress is heard
        # record --kernels: steps 2..1+kernels run under PyTorch's profiler, its Chrome trace
        # written to kernels_out (default: beside the report, NAME.kernels.json), read by
        # ampcheck's profile analysis (profiles/, `ampcheck kernels`)
        self.kernels = kernels
        self.kernels_out = kernels_out or (os.path.splitext(out)[0] + ".kernels.json" if out else None)
        self._profiler = None
        self.kernels_steps: list = []
        self.kernels_note = ""
        self.compiled = compiled_mod.Compiled(self)  # torch.compile's regions (compiled.py)
        self.replaying = ""           # the compiled region being recorded again eagerly
        self._compiled_nodes: set = set()  # CompiledFunctionBackward nodes seen this step
        self.trainer_asked = None     # trainers.amp_asked(): the trainer's AMP flags
        self._trainer_seen = False
        self.backend = ""             # the process group's backend, when a collective ran
        # several processes (distributed.py): this rank, its collectives, its checksums
        self.rank_info = dist.rank_from_environment()
        self.collectives = dist.Collectives()
        self._found_inf_reduced = False
        self._hashed: list | None = None     # (name, parameter) checksummed each step, fixed at the start
        self.initial_hashes: list | None = None
        self._step_hashes = None
        self._param_names: dict = {}  # id(param) -> name
        # Updates lost to rounding (the engine's inspector reads the same): a parameter stored
        # in float16/bfloat16 and updated there (no fp32 master copy) loses each element's
        # update smaller than half its spacing. On heard steps, the low-precision parameters
        # before the update with their nonzero gradients' mask; after it, per parameter name:
        # [updates seen, sum of the fractions of moving elements that did not move].
        self._swamp_before: list = []
        self.swamping: dict = {}
        self._optimizers: list = []
        self.model_name = ""
        self.parameters = 0
        self.batch = 0
        self.lr = math.nan
        self.optimizer_name = ""
        self.device = ""
        self.autocast_dtypes: list = []
        self.low_dtypes: list = []
        self.fp8_calls: dict = {}     # op type -> calls whose kernel ran in an fp8 dtype (also in "other")
        self.fp8_dtypes: list = []
        self.autocast_seen = False
        self.autocast_level = "O1"  # torch.autocast's per-op lists with fp32 weights: ampcheck's O1
        self.scaler_seen = False
        self.scaler_enabled = False
        self.init_scale = math.nan
        self.seed = None
        self.accuracy = math.nan
        self.internal_error = None
        self.script_outcome = None   # set by the runner: {"exit_code": n, "error": "..."}
        self.interrupted_by = ""
        self._backward_autocast = (False, False)
        self._backward_dtypes = ("", "")
        self._in_backward = 0
        self._handles: list = []
        self._patches: list = []
        self._mode = None
        self._fmode = None
        self._started = False
        self._closed = False
        self._atexit = False
        if model is not None:
            self._add_models(model)
        for opt in ([] if optimizer is None else optimizer if isinstance(optimizer, (list, tuple)) else [optimizer]):
            self._note_optimizer(opt)
        if scaler is not None:
            self.scaler_seen = True
        if start:
            self.start()

    # -- lifetime ---------------------------------------------------------------------

    def start(self):
        """Starts listening on the calling thread (and on autograd's threads from it)."""
        global _active
        with _active_lock:
            if _active is not None and _active is not self:
                raise RuntimeError("another ampcheck Recorder is recording; close() it before starting one")
            if self._started:
                return self
            _active = self
            self._started = True
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
        mm = torch.nn.modules.module
        self._handles = [
            mm.register_module_forward_pre_hook(self._module_pre),
            mm.register_module_forward_hook(self._module_post, always_call=True, with_kwargs=True),
            register_optimizer_step_pre_hook(self._optimizer_pre),
            register_optimizer_step_post_hook(self._optimizer_post),
        ]
        self._patch_scaler()
        self._patch_autograd()
        self._patch_function_apply()
        self._patch_scheduler()
        self._patch_compile()
        self._fmode = listen.AutocastWatch(self.forcer)
        self._mode = listen.RecordingMode(self._on_call)
        self._set_listening(True)
        if self.out and not self._atexit:
            atexit.register(self._close_at_exit)
            self._atexit = True
        return self

    def _set_listening(self, on: bool):
        """Hears the steps to come op by op, or not: the recorder's modes on the calling
        thread's stacks and its global module hooks, in or out."""
        if on == self.listening:
            return
        self.listening = on
        mm = torch.nn.modules.module
        hooks = ((mm._global_forward_pre_hooks, self._handles[0], self._module_pre),
                 (mm._global_forward_hooks, self._handles[1], self._module_post))
        if on:
            for d, h, fn in hooks:
                d[h.id] = fn
            self._fmode.__enter__()
            self._mode.__enter__()
            listen.state().modules.clear()
        else:
            for d, h, _ in hooks:
                d.pop(h.id, None)
            _exit_mode(self._mode, torch._C._len_torch_dispatch_stack,
                       lambda: torch._C._pop_torch_dispatch_stack(None), torch._C._push_on_torch_dispatch_stack)
            _exit_mode(self._fmode, torch._C._len_torch_function_stack, torch._C._pop_torch_function_stack,
                       torch._C._push_on_torch_function_stack)

    def _hears(self, step: int) -> bool:
        """Whether `step` is heard op by op (LISTEN_POLICIES)."""
        if self.listen == "all" or step <= AUTO_FIRST or step in self._listen_next:
            return True
        return step & (step - 1) == 0  # a power of two

    def close(self):
        """Stops listening and writes the report to `out` (if given). Returns the report."""
        global _active
        if self._closed:
            return self._final
        self._closed = True
        if self._started:
            self._set_listening(False)
            for h in self._handles + self._root_hooks:
                h.remove()
            for owner, name, original in reversed(self._patches):
                setattr(owner, name, original)
            self.compiled.uninstall()
            with _active_lock:
                if _active is self:
                    _active = None
        if self._step_busy:
            self._end_step()
        if self.twin_probe is not None:
            self.twin_probe.finish()
        self._stop_profiler()  # a run shorter than the window: what it profiled
        self._flush_stats()
        from . import report as report_mod
        with self._lock:  # a thread still running ops is not recorded any more (_closed)
            self._final = report_mod.build(self)
        if self.out and not (self.quiet_beside_ranks and self._waiting and self._ranks_beside()):
            report_mod.write(self._final, self.out)
        return self._final

    def rank_details(self) -> dict:
        """What report.py's rank block needs of this recorder (distributed.py)."""
        modules = []
        for prefix, module in self._roots:
            modules += list(_walk(module, prefix))
        return {"backend": dist.backend() or self.backend, "found_inf_reduced": self._found_inf_reduced,
                "asked": dist.mixed_precision_asked(modules), "collectives": self.collectives.report()}

    def _ranks_beside(self) -> bool:
        """Whether ranks of a job wrote their reports beside this process's (a launcher's)."""
        import glob
        root, ext = os.path.splitext(self.out)
        return bool(glob.glob(glob.escape(root) + ".rank*" + (ext or ".json")))

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
        from . import report as report_mod
        with self._lock:
            self._flush_stats()
            return report_mod.build(self)

    def framework(self):
        """What the report says of PyTorch (report.Framework)."""
        from .report import Framework
        return Framework("pytorch", "PyTorch", torch.__version__,
                         f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU", int(torch.initial_seed()))

    def amp_note(self) -> str:
        """Where the run's low precision is not what the trainer running the loop was asked
        for (trainers.py): a Trainer's fp16=True on the CPU that ran nothing in fp16."""
        return trainers.ignored_note(self.trainer_asked, self.low_dtypes, self.device or "cpu")

    def set_accuracy(self, accuracy: float):
        """The training accuracy the script measured, in [0, 1], for summary.accuracy."""
        self.accuracy = float(accuracy)

    @contextmanager
    def step(self):
        """One training step: its boundaries are this block's, not optimizer.step()'s."""
        self._explicit = True
        try:
            yield self
        finally:
            self._end_step(always=True)

    # -- patches ------------------------------------------------------------------------

    def _patch(self, owner, name, make):
        original = getattr(owner, name)
        # What close() puts back: the class's own attribute (a classmethod's descriptor,
        # not the method bound to this class), else what the lookup found.
        self._patches.append((owner, name, owner.__dict__.get(name, original) if isinstance(owner, type)
                              else original))
        setattr(owner, name, make(original))

    def _patch_compile(self):
        """torch.compile's results run as compiled regions (compiled.py): compiled, with the
        recorder out of the way, their graphs read from Inductor, a failure in them recorded
        again eagerly. nn.Module.compile calls torch.compile, so it is covered too."""
        rec = self

        def make(original):
            @functools.wraps(original)
            def compile(model=None, *args, **kwargs):
                if model is None:  # @torch.compile(mode=...) as a decorator factory
                    return lambda fn: compile(fn, *args, **kwargs)
                out = original(model, *args, **kwargs)
                if active() is not rec:
                    return out
                try:
                    return rec._as_region(model, out)
                except Exception:
                    rec._broke()
                    return out
            return compile

        self._patch(torch, "compile", make)

    def _as_region(self, model, out):
        if isinstance(model, torch.nn.Module) and isinstance(getattr(out, "_orig_mod", None), torch.nn.Module):
            # An OptimizedModule: its forward is dynamo's; the replay calls the module itself.
            out.forward = self.compiled.wrap(out.forward, model.__call__, module=model)
            return out
        owner = getattr(model, "__self__", None)  # Module.compile: torch.compile(self._call_impl)
        module = owner if isinstance(owner, torch.nn.Module) else None
        return self.compiled.wrap(out, model, module=module)

    def module_path(self, module) -> str:
        """A module's path in the report, the model's first call registering it as a root."""
        with self._lock:
            hit = self._paths.get(id(module))
            if hit is not None and hit[1] is module:
                return hit[0]
            self._waiting = False
            self._add_root(module, None)
            return self._paths[id(module)][0]

    @property
    def closed(self) -> bool:
        return self._closed or active() is not self

    @contextmanager
    def out_of_the_way(self, s):
        """For a compiled region's call: the recorder's modes off the stacks, its global
        module hooks and its Function.apply patch removed, all put back after."""
        mm = torch.nn.modules.module
        hooks = []
        for d in (mm._global_forward_pre_hooks, mm._global_forward_hooks):
            for h in self._handles[:2]:
                if h.id in d:
                    hooks.append((d, h.id, d.pop(h.id)))
        apply_patch = torch.autograd.Function.__dict__.get("apply")
        original_apply = next((orig for owner, name, orig in self._patches
                               if owner is torch.autograd.Function and name == "apply"), None)
        if original_apply is not None:
            torch.autograd.Function.apply = original_apply
        dispatch = _remove_mode(torch._C._len_torch_dispatch_stack, lambda: torch._C._pop_torch_dispatch_stack(None),
                                torch._C._push_on_torch_dispatch_stack, self._mode)
        function = _remove_mode(torch._C._len_torch_function_stack, torch._C._pop_torch_function_stack,
                                torch._C._push_on_torch_function_stack, self._fmode)
        depth = len(s.modules)
        try:
            yield
        finally:
            _restore_modes(torch._C._len_torch_function_stack, torch._C._pop_torch_function_stack,
                           torch._C._push_on_torch_function_stack, function)
            _restore_modes(torch._C._len_torch_dispatch_stack, lambda: torch._C._pop_torch_dispatch_stack(None),
                           torch._C._push_on_torch_dispatch_stack, dispatch)
            if original_apply is not None:
                torch.autograd.Function.apply = apply_patch
            for d, hid, hook in hooks:
                d[hid] = hook
            del s.modules[depth:]

    def _patch_scheduler(self):
        """The learning-rate scheduler's class, for the header ("LambdaLR" behind a warmup)."""
        rec = self

        def make(original):
            def step(scheduler, *args, **kwargs):
                if active() is rec and not rec.lr_scheduler:
                    rec.lr_scheduler = type(scheduler).__name__
                return original(scheduler, *args, **kwargs)
            step.__wrapped__ = original
            return step

        try:
            from torch.optim.lr_scheduler import LRScheduler
        except ImportError:  # torch < 2.0
            from torch.optim.lr_scheduler import _LRScheduler as LRScheduler
        self._patch(LRScheduler, "step", make)

    def _patch_function_apply(self):
        """A custom torch.autograd.Function (the script's own forward and backward): its
        forward runs without grad mode and makes its node after it, so no aten call claims
        the node. The recorder claims it here, for the module that called apply(), so that
        its backward belongs to that module and is named by the Function's class; the call
        is a forward row of its own (the Function's name), and a Function forced to fp32 (by
        name, or inside a forced module) runs on fp32 inputs with autocast off, so that what
        it saves for its backward is fp32 too (a TorchFunctionMode never sees apply())."""
        rec = self
        descriptor = torch.autograd.Function.__dict__["apply"]

        def make(original):
            def apply(cls, *args, **kwargs):
                run = descriptor.__get__(None, cls)
                if active() is not rec or rec._waiting or rec.internal_error is not None:
                    return run(*args, **kwargs)
                s = listen.state()
                if s.internal:
                    return run(*args, **kwargs)
                module = s.modules[-1] if s.modules else ""
                forcer = rec.forcer
                # torch's own Functions (FSDP's hooks, checkpointing) are no op of the script's.
                internal = (getattr(cls, "__module__", "") or "").startswith("torch.")
                forced = bool(forcer) and not s.forcing and not internal and (
                    cls.__name__ in forcer.functions or forcer.module_forced(module))
                out = forcer.run(run, args, kwargs) if forced else run(*args, **kwargs)
                try:
                    rec._on_function(cls.__name__, module, args, kwargs, out, forced, internal)
                except Exception:
                    rec._broke()
                return out
            return classmethod(apply)

        self._patch(torch.autograd.Function, "apply", make)

    def _on_function(self, name, module, args, kwargs, out, forced, internal=False):
        s = listen.state()
        if internal:  # only its node, for the module its backward belongs to
            with self._lock:
                for t in listen.tensors_of(out):
                    node = getattr(t, "grad_fn", None)
                    if node is not None:
                        seq = node._sequence_nr()
                        if seq not in self._nodes:
                            self._nodes[seq] = NodeInfo(module, _node_op(node), 0, "off", False)
                        break
            return
        tensors = listen.tensors_of_call(args, kwargs)
        outs = [t for t in listen.tensors_of(out) if listen.plain(t)]
        if not listen.all_plain(tensors):
            return
        device = tensors[0].device.type if tensors else (outs[0].device.type if outs else "cpu")
        on = s.autocast_cuda if device == "cuda" else s.autocast_cpu
        reason = "custom_black" if forced else ("autocast" if on else "off")
        with self._lock:
            self._seq += 1
            key = (module, name)
            k = self._occurrences.get(key, 0)
            self._occurrences[key] = k + 1
            dt = nx.dtype_name(_autocast_dtype(device)) if on and not forced else ""
            call = _Call(self._seq, self.step_index, "optimizer" if s.optimizer_depth else "forward", name, name,
                         module, k, reason, dt, False, False, device, name)
            kdtype = _kernel_dtype(outs, tensors)
            if call.phase == "forward":
                self._table(call, "apply", tensors, outs, kdtype)
            for t in outs:
                node = t.grad_fn
                if node is not None:
                    seq = node._sequence_nr()
                    if seq not in self._nodes:
                        self._nodes[seq] = NodeInfo(module, name, k, reason, False, function=name)
                    break

    def _patch_scaler(self):
        scaler_cls = torch.amp.GradScaler
        rec = self

        def wrap(method):
            def make(original):
                def wrapper(scaler, *args, **kwargs):
                    if active() is not rec:
                        return original(scaler, *args, **kwargs)
                    return method(scaler, original, *args, **kwargs)
                wrapper.__wrapped__ = original
                return wrapper
            return make

        self._patch(scaler_cls, "scale", wrap(self._scaler_scale))
        self._patch(scaler_cls, "unscale_", wrap(self._scaler_unscale))
        self._patch(scaler_cls, "step", wrap(self._scaler_step))
        self._patch(scaler_cls, "update", wrap(self._scaler_update))

    def _patch_autograd(self):
        rec = self

        def make(original):
            def wrapper(tensors, *args, **kwargs):
                if active() is not rec:
                    return original(tensors, *args, **kwargs)
                return rec._backward(original, tensors, args, kwargs)
            wrapper.__wrapped__ = original
            return wrapper

        # Tensor.backward calls torch.autograd.backward by its module attribute.
        self._patch(torch.autograd, "backward", make)
        self._patch(torch.autograd, "grad", make)

    # -- the model ----------------------------------------------------------------------

    def _add_models(self, model):
        if isinstance(model, dict):
            for prefix, m in model.items():
                self._add_root(m, str(prefix))
        elif isinstance(model, (list, tuple)):
            for i, m in enumerate(model):
                self._add_root(m, "" if i == 0 else None)
        else:
            self._add_root(model, "")

    def _add_root(self, module, prefix):
        if prefix is None:
            trainable = any(p.requires_grad for p in module.parameters())
            if trainable and all(p != "" for p, _ in self._roots):
                prefix = ""
            else:
                base = type(module).__name__
                prefix, n = base, 2
                while any(p == prefix for p, _ in self._roots):
                    prefix, n = f"{base}{n}", n + 1
        self._roots.append((prefix, module))
        if prefix:
            # A module the script calls itself, outside the model (its loss, a teacher): where,
            # so that advice can point at the call keep_fp32(model, ...) cannot reach.
            self._root_sites[prefix] = listen.script_site()
        if prefix == "":
            self._note_model_root(module)
        if prefix == "" and not self.model_name:
            inner = module
            while _WRAPPERS.get(type(inner).__name__) and isinstance(
                    getattr(inner, _WRAPPERS[type(inner).__name__], None), torch.nn.Module):
                inner = getattr(inner, _WRAPPERS[type(inner).__name__])
            cls = type(inner)
            if cls.__name__.startswith("FSDP") and any(b.__name__ == "FSDPModule" for b in cls.__mro__):
                # fully_shard (FSDP2) swaps the module's class for FSDP<Class>(FSDPModule, Class).
                cls = next((b for b in cls.__bases__ if b.__name__ != "FSDPModule"), cls)
            self.model_name = cls.__name__
            self.parameters = sum(p.numel() for p in module.parameters() if p.requires_grad)
        for path, m in _walk(module, prefix):
            self._paths.setdefault(id(m), (path, m))
            for name, p in m.named_parameters(recurse=False):
                self._param_names.setdefault(id(p), _join(path, name))

    def _path_of(self, module, s) -> str:
        hit = self._paths.get(id(module))
        if hit is not None and hit[1] is module:
            return hit[0]
        if not s.modules:
            self._add_root(module, None)
            return self._paths[id(module)][0]
        # A module not registered as a child (kept in a plain list, or made on the fly).
        parent = s.modules[-1]
        path = f"{parent}.{type(module).__name__}" if parent else type(module).__name__
        self._paths[id(module)] = (path, module)
        return path

    def _module_pre(self, module, args):
        s = listen.state()
        if s.internal:
            return None
        with self._lock:
            self._waiting = False
            path = self._path_of(module, s)
            if path == "" and not self.batch:
                for t in listen.tensors_of(args):
                    if t.dim() > 0:
                        self.batch = int(t.shape[0])
                        break
        s.modules.append(path)
        return None

    def _module_post(self, module, args, kwargs, output):
        s = listen.state()
        if not s.internal and s.modules:
            path = s.modules.pop()
            if path == "" and not self.batch and kwargs:
                # A model called with keyword arguments only (Hugging Face's model(**batch)):
                # its batch is the first dimension of the first tensor among them.
                for t in listen.tensors_of(kwargs):
                    if t.dim() > 0:
                        self.batch = int(t.shape[0])
                        break
        return None

    def _note_optimizer(self, optimizer):
        if any(o is optimizer for o in self._optimizers):
            return
        self._optimizers.append(optimizer)
        if not self.optimizer_name:
            self.optimizer_name = type(optimizer).__name__.lower()

    def _lr_now(self) -> float:
        """The first optimizer's learning rate now, and (once) the rate the script gave it:
        a scheduler keeps that in each group's initial_lr and moves lr (a warmup starts it
        at 0)."""
        if not self._optimizers or not self._optimizers[0].param_groups:
            return math.nan
        group = self._optimizers[0].param_groups[0]
        lr = group.get("lr", math.nan)
        lr = float(lr.item() if isinstance(lr, torch.Tensor) else lr)
        if math.isnan(self.lr):
            base = group.get("initial_lr", lr)
            self.lr = float(base.item() if isinstance(base, torch.Tensor) else base)
        return lr

    def _grad_keys(self) -> set:
        """The view keys of every known parameter's gradient now."""
        params = [p for o in self._optimizers for g in o.param_groups for p in g["params"]]
        params += [p for _, m in self._roots for p in m.parameters()]
        return {nf.view_key(p.grad) for p in params if p.grad is not None and listen.plain(p.grad)}

    def _param_name(self, g: int, i: int, p) -> str:
        return self._param_names.get(id(p), f"param_groups[{g}][{i}]")

    # -- optimizer, scaler, backward -----------------------------------------------------

    def _scan_grads(self, optimizers):
        """(gradients, any nonzero, the non-finite ones' names in the optimizers' order) of
        the optimizers' params."""
        count, nonzero, bad = 0, False, []
        seen = set()
        with listen.internal():
            for opt in optimizers:
                for g, group in enumerate(opt.param_groups):
                    for i, p in enumerate(group["params"]):
                        if p.grad is None or id(p) in seen:
                            continue
                        seen.add(id(p))
                        count += 1
                        grad = listen.local(p.grad)  # a DTensor's (FSDP2): this rank's shard
                        finite, any_nz = torch.stack([torch.isfinite(grad).all(), (grad != 0).any()]).tolist()
                        nonzero = nonzero or bool(any_nz)
                        if not finite:
                            bad.append(self._param_name(g, i, p))
        return count, nonzero, bad

    def _optimizer_pre(self, optimizer, args, kwargs):
        s = listen.state()
        s.optimizer_depth += 1
        with self._lock:
            self._swamp_before = []  # a step that raised before its update left its own
            self._step_busy = True
            self._note_optimizer(optimizer)
            self._note_initial_hashes()
            self._note_trainer()
            if self._step_lr is None:
                self._step_lr = self._lr_now()
        # args are step()'s own, the optimizer first: step(self, closure=None).
        closure = args[1] if len(args) > 1 else kwargs.get("closure")
        if not callable(closure):
            self._note_gradients(optimizer)
            return None
        # optimizer.step(closure) (PyTorch Lightning, LBFGS): the closure runs the forward and
        # the backward inside the step; those are the training's phases, not the optimizer's,
        # and the gradients the update uses exist only once it has run.
        rec = self

        def closure_in_training_phase(*a, **k):
            st = listen.state()
            depth, st.optimizer_depth = st.optimizer_depth, 0
            try:
                return closure(*a, **k)
            finally:
                st.optimizer_depth = depth
                if active() is rec:
                    rec._note_gradients(optimizer)

        if len(args) > 1:
            return (args[0], closure_in_training_phase) + tuple(args[2:]), kwargs
        return args, dict(kwargs, closure=closure_in_training_phase)

    def _note_trainer(self):
        """Once, at the first optimizer step: the trainer on the call stack and the mixed
        precision it was asked for (trainers.py)."""
        if self._trainer_seen:
            return
        self._trainer_seen = True
        try:
            self.trainer_asked = trainers.amp_asked(sys._getframe(1))
        except Exception:  # a trainer's attribute that raises: nothing asked that we know of
            self.trainer_asked = None

    def _note_gradients(self, optimizer):
        """The gradients an optimizer step is about to use: counted for the gradient-underflow
        reading, and the non-finite ones named for the update's record. On a step not heard
        inside a GradScaler's step there is nothing to read: the scaler found them finite (it
        steps only then), and the underflow reading counts heard steps only."""
        if not self.listening and self._in_scaler_step:
            return
        with self._lock:
            if self.twin_probe is not None:
                self.twin_probe.on_gradients(self.step_index, (
                    (self._param_name(g, i, p), p.grad) for g, group in enumerate(optimizer.param_groups)
                    for i, p in enumerate(group["params"])))
            count, nonzero, bad = self._scan_grads([optimizer])
            if self.listening:
                self._note_swamping_before(optimizer)
            if self.watch is not None:
                self.watch.on_gradients(count, nonzero)
            if bad:
                self._grad_nonfinite = True
                self._grad_bad += bad
                if self.watch is not None and not self.watch._pending.producers:
                    self.compiled.replay_backward("the gradients the update read were non-finite")
                    if not self.listening:
                        self._quiet_failure("the gradients the update read were non-finite", backward=True)

    def _note_swamping_before(self, optimizer):
        """The low-precision tensors this update is about to change, as they are: the
        parameters, and the optimizer's state of each (Adam's moments, "NAME:exp_avg_sq") where
        kept in float16/bfloat16 and shaped as the parameter."""
        low = (torch.float16, torch.bfloat16)
        with listen.internal():
            for g, group in enumerate(optimizer.param_groups):
                for i, p in enumerate(group["params"]):
                    if p.grad is None:
                        continue
                    name = self._param_name(g, i, p)
                    moving = None
                    if p.dtype in low:
                        moving = listen.local(p.grad) != 0
                        self._swamp_before.append((name, lambda p=p: p, listen.local(p.detach()).clone(), moving))
                    for key, value in optimizer.state.get(p, {}).items():
                        if not isinstance(value, torch.Tensor) or value.dtype not in low or value.shape != p.shape:
                            continue
                        if moving is None:
                            moving = listen.local(p.grad) != 0
                        self._swamp_before.append(
                            (f"{name}:{key}", lambda p=p, key=key, opt=optimizer: opt.state.get(p, {}).get(key),
                             listen.local(value.detach()).clone(), moving))

    def _note_swamping_after(self):
        """Per tensor: the share of its moving elements (nonzero gradient) the update left
        exactly as they were."""
        taken, self._swamp_before = self._swamp_before, []
        with listen.internal():
            for name, current, before, moving in taken:
                now = current()
                if not isinstance(now, torch.Tensor):
                    continue
                after = listen.local(now.detach())
                if after.shape != before.shape:
                    continue
                n = int(moving.sum())
                if n == 0:
                    continue
                lost = int(((after == before) & moving).sum())
                entry = self.swamping.setdefault(name, [0, 0.0])
                entry[0] += 1
                entry[1] += lost / n

    def _optimizer_post(self, optimizer, args, kwargs):
        s = listen.state()
        s.optimizer_depth = max(0, s.optimizer_depth - 1)
        with self._lock:
            if self._swamp_before:
                self._note_swamping_after()
            if self._in_scaler_step:
                return  # the scaler's update() ends this step
            self._update(1.0, 1.0, self._grad_nonfinite, False, {}, self._grad_bad)
            if not self._explicit:
                self._end_step()

    @contextmanager
    def _optimizer_phase(self):
        s = listen.state()
        s.optimizer_depth += 1
        try:
            yield
        finally:
            s.optimizer_depth -= 1

    def _scaler_scale(self, scaler, original, outputs, *args, **kwargs):
        with self._optimizer_phase():
            scaled = original(scaler, outputs, *args, **kwargs)
        with self._lock:
            self.scaler_seen = True
            self._step_busy = True
            self.scaler_enabled = scaler.is_enabled()
            if isinstance(outputs, torch.Tensor) and outputs.numel() == 1:
                with listen.internal():
                    self._note_loss(float(outputs.detach().float()))
                if isinstance(scaled, torch.Tensor):
                    self._scaled_ids.add(id(scaled))
                self._after_loss()
        return scaled

    def _scaler_unscale(self, scaler, original, optimizer, *args, **kwargs):
        s = listen.state()
        s.in_scaler += 1
        try:
            with self._optimizer_phase():
                return original(scaler, optimizer, *args, **kwargs)
        finally:
            s.in_scaler -= 1

    def _scaler_step(self, scaler, original, optimizer, *args, **kwargs):
        with self._lock:
            self._in_scaler_step += 1
            self._step_busy = True
            if not any(o is optimizer for o in self._scaler_optimizers):
                self._scaler_optimizers.append(optimizer)
            self._note_optimizer(optimizer)
            self._note_initial_hashes()
            self._note_trainer()
        st = listen.state()
        st.in_scaler += 1
        try:
            with self._optimizer_phase():
                return original(scaler, optimizer, *args, **kwargs)
        finally:
            st.in_scaler -= 1
            with self._lock:
                self._in_scaler_step -= 1

    def _scaler_update(self, scaler, original, *args, **kwargs):
        with self._lock:
            self._note_initial_hashes()
        with self._lock, listen.internal():
            enabled = scaler.is_enabled()
            before = scaler.get_scale() if enabled else 1.0
            found = False
            if enabled:
                for st in scaler._per_optimizer_states.values():
                    for f in st.get("found_inf_per_device", {}).values():
                        found = found or bool(f.item())
            bad = []
            if found:
                _, _, bad = self._scan_grads(self._scaler_optimizers)
        if found and self.watch is not None and not self.watch._pending.producers:
            # Recorded (not the recorder's own work): outside internal().
            self.compiled.replay_backward("the loss scaler found Inf/NaN in the gradients")
            if not self.listening:
                self._quiet_failure("the loss scaler found Inf/NaN in the gradients", backward=True)
        with self._optimizer_phase():
            result = original(scaler, *args, **kwargs)
        with self._lock, listen.internal():
            after = scaler.get_scale() if enabled else 1.0
            counters = {"growth_tracker": int(scaler._get_growth_tracker())} if enabled else {}
            if enabled and math.isnan(self.init_scale):
                self.init_scale = before
            self.scaler_enabled = self.scaler_enabled or enabled
            if enabled:
                self._update(before, after, found, found, counters, bad)
            else:  # GradScaler(enabled=False): a plain optimizer.step, which never skips
                self._update(1.0, 1.0, self._grad_nonfinite, False, {}, self._grad_bad)
            self._scaler_optimizers = []
            if not self._explicit:
                self._end_step()
        return result

    def _several_ranks(self) -> bool:
        return self.rank_info is not None and self.rank_info.world_size > 1

    def _note_initial_hashes(self):
        """Before the first update: which parameters are checksummed every step (the
        optimizers', in their order) and their checksums now, which tell the job's analysis
        the replicas (equal on every rank) from the shards."""
        if self._hashed is not None or not self._several_ranks() or not self._optimizers:
            return
        seen, hashed = set(), []
        for opt in self._optimizers:
            for g, group in enumerate(opt.param_groups):
                for i, p in enumerate(group["params"]):
                    if id(p) not in seen:
                        seen.add(id(p))
                        hashed.append((self._param_name(g, i, p), p))
        self._hashed = hashed
        with listen.quiet():
            self.initial_hashes = dist.checksums([p for _, p in hashed])

    def _update(self, before, after, found_inf, skipped, counters, bad_params):
        if self._hashed is not None:
            # After the update (or the skip): the parameters and the gradients it used.
            with listen.quiet():
                params = [p for _, p in self._hashed]
                self._step_hashes = (dist.checksums(params), dist.checksums([p.grad for p in params]))
        self._updates += 1
        if found_inf:
            self._listen_next.add(self.step_index + 1)  # a failure: the step after it is heard
        bad = list(bad_params) if found_inf else []
        event = nf.ScalerEvent(self._updates, float(before), float(after), bool(found_inf), bool(skipped),
                               dict(counters), nonfinite_params=len(bad), nonfinite_names=bad[:nf.MAX_PARAM_NAMES])
        if self.watch is not None:
            self.watch.on_scaler_update(event)
        self._step_updates.append(event)
        self._grad_nonfinite, self._grad_bad = False, []

    def _note_loss(self, loss: float):
        self._step_losses.append(loss)
        if not math.isfinite(loss):
            self._listen_next.add(self.step_index + 1)  # a failure: the step after it is heard
        if self.watch is not None:
            self.watch.on_loss(loss)

    def _after_loss(self):
        """On a step not heard, a non-finite loss: the model's call heard again; when that
        finds no non-finite value (the loss computed outside the model), the loss itself is
        the step's first non-finite forward value, its producer unheard."""
        if self.listening or self.replaying or self.watch is None or not self._step_losses:
            return
        loss = self._step_losses[-1]
        if math.isfinite(loss):
            return
        self._quiet_failure("the loss was non-finite", backward=False)
        if not self.watch.forward_failed_at(self.step_index):
            self.watch.unheard_loss(self.step_index, loss)

    def _backward(self, original, tensors, args, kwargs):
        if self.replaying:  # a replay's own backward: no loss of the script's
            return original(tensors, *args, **kwargs)
        with self._lock:
            self._waiting = False
            self._step_busy = True
            t = tensors if isinstance(tensors, torch.Tensor) else (
                tensors[0] if isinstance(tensors, (list, tuple)) and len(tensors) == 1 else None)
            noted = False
            if isinstance(t, torch.Tensor) and t.numel() == 1 and id(t) not in self._scaled_ids:
                with listen.internal():
                    self._note_loss(float(t.detach().float()))
                noted = True
            # The engine runs backward with the caller's thread-local state: autocast's too.
            self._backward_autocast = listen.autocast_now()
            self._backward_dtypes = tuple(nx.dtype_name(listen.autocast_dtype(d)) if on else ""
                                          for d, on in zip(("cpu", "cuda"), self._backward_autocast))
        if noted:
            self._after_loss()
        mode = None
        if self.listening and not listen.mode_on_this_thread(listen.RecordingMode):
            mode = listen.RecordingMode(self._on_call)  # a thread the script started
            mode.__enter__()
        self._in_backward += 1
        try:
            return original(tensors, *args, **kwargs)
        finally:
            self._in_backward -= 1
            if mode is not None:
                mode.__exit__(None, None, None)

    # -- steps ------------------------------------------------------------------------

    def _end_step(self, always=False):
        # Ops after the last optimizer step (an evaluation, a log line) make no step of their
        # own; a step block does, whatever ran in it.
        with self._lock:
            if not (always or self._step_busy or self._step_updates or self._step_losses):
                return
            step = self.step_index
            losses = self._step_losses
            # Micro-batches (gradient accumulation): their losses add up to the loss whose
            # gradient the update applies, which for a script that divides each by the
            # accumulation steps (nanoGPT, the Trainer, Lightning) is its mean loss.
            record = {"step": step, "loss": math.fsum(losses) if losses else math.nan,
                      "loss_scale": 1.0, "found_inf": False, "skipped": False}
            if self._step_updates:
                first, last = self._step_updates[0], self._step_updates[-1]
                record["loss_scale"] = first.scale_before
                record["found_inf"] = any(u.found_inf for u in self._step_updates)
                record["skipped"] = any(u.skipped for u in self._step_updates)
                record["scale_after"] = last.scale_after
            self.steps.append(record)
            self._flush_stats()
            if self.seed is None:
                self.seed = int(torch.initial_seed())
            if self.watch is not None:
                self.watch.on_step_end(step)
                self.watch.on_step_begin(step + 1)
            self.step_index += 1
            if len(losses) > 1:
                record["micro_batches"] = len(losses)
                self.micro_batches = max(self.micro_batches, len(losses))
            if self._step_lr is not None:
                record["lr"] = self._step_lr
            if self._step_hashes is not None:
                params, grads = self._step_hashes
                record["params_hash"] = dist.combine(params)
                record["grads_hash"] = dist.combine(grads)
                record["param_hashes"] = dist.pack(params)
                record["grad_hashes"] = dist.pack(grads)
                self._step_hashes = None
            self._step_losses, self._step_updates, self._step_busy = [], [], False
            self._step_lr = None
            # An optimizer.step that raised never ran its post hook: its phase ends here.
            listen.state().optimizer_depth = 0
            self._scaled_ids = set()
            self._occurrences = {}
            self._nodes_prev, self._nodes = self._nodes, {}
            self._compiled_nodes = set()
            self.compiled.step_ended()
            self._pending_casts = {}
            self.forcer.clear()
            if self._heard:
                self.listened_steps.append(step)
            if self._profiler is not None:
                self.kernels_steps.append(step)
                if len(self.kernels_steps) >= self.kernels:
                    self._stop_profiler()
            elif self.kernels and step == 1 and self.kernels_out and not self.kernels_steps:
                self._start_profiler()
            self._root_call = None
            self._set_listening(self._hears(self.step_index))
            self._heard = self.listening

    # -- record --kernels: a window of steps under PyTorch's profiler ----------------------

    def _start_profiler(self):
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        try:
            self._profiler = profile(activities=activities, record_shapes=True)
            with listen.quiet():
                self._profiler.__enter__()
        except Exception as e:  # a profiler already running (the script's own): said, not fatal
            self._profiler = None
            self.kernels_note = f"the profiler could not start: {e}"

    def _stop_profiler(self):
        prof, self._profiler = self._profiler, None
        if prof is None:
            return
        try:
            with listen.quiet():
                prof.__exit__(None, None, None)
            folder = os.path.dirname(os.path.abspath(self.kernels_out))
            os.makedirs(folder, exist_ok=True)
            tmp = self.kernels_out + ".partial"
            prof.export_chrome_trace(tmp)
            os.replace(tmp, self.kernels_out)
        except Exception as e:
            self.kernels_note = f"the profile could not be written: {e}"

    # -- steps not heard op by op --------------------------------------------------------

    def _note_model_root(self, module):
        """The model's root module: on a step not heard, hooks of its own keep its last call
        (inputs, autocast and RNG state) and the gradients its outputs receive, for a replay."""
        if self._model_root is not None:
            return
        self._model_root = module
        # Its inputs only: a hook on its outputs for the gradients they receive costs more per
        # step than a step not heard may (~2% on a small block); a backward failure on such a
        # step is found on the next, heard one when it recurs.
        self._root_hooks = [module.register_forward_pre_hook(self._root_pre, with_kwargs=True)]

    def _root_pre(self, module, args, kwargs):
        if self.listening or self.replaying or self.inspect == "trace" or active() is not self:
            return None
        self._root_call = (module, args, dict(kwargs), listen.autocast_now(),
                           (listen.autocast_dtype("cpu"), listen.autocast_dtype("cuda")), compiled_mod._rng_state())
        return None

    def _quiet_failure(self, why: str, backward: bool):
        """A step not heard op by op turned non-finite: the next step is heard. A non-finite
        loss has the model's call of this step run again, heard (the producers found as on any
        heard step); gradients found non-finite wait for the next step (the gradients the
        model's outputs received are not kept on a step not heard)."""
        self._listen_next.add(self.step_index + 1)
        call = self._root_call
        if backward or call is None or self.listening or self.replaying or self.watch is None:
            return False
        module, args, kwargs, on, dtypes, rng = call
        target = _replay_target(module)
        if target is None:
            return False
        self.replaying = "the model"
        self._set_listening(True)
        try:
            compiled_mod.run_again(target, args, kwargs, on, dtypes, rng)
            return True
        except Exception:  # the replay could not run: the failure stays unexplained, said so
            return False
        finally:
            self._set_listening(False)
            self.replaying = ""

    # -- op calls -----------------------------------------------------------------------

    def _flush_stats(self):
        if self._batch:
            with listen.quiet():
                self._batch.flush()

    def _func_info(self, func) -> "_FuncInfo":
        info = self._finfo.get(func)
        if info is None:
            info = self._finfo[func] = _FuncInfo(func)
        return info

    def _on_call(self, func, args, kwargs):
        info = self._finfo.get(func)
        if info is None:
            info = self._func_info(func)
        if info.ignored or self._waiting or self.internal_error is not None or self._closed:
            return func(*args, **kwargs)
        if self.compiled.regions and self._in_compiled_backward():
            return func(*args, **kwargs)  # a compiled region's backward: its graph, read from Inductor
        tensors = listen.tensors_of_call(args, kwargs)
        if info.collective:
            try:
                self._collective(info, tensors)
            except Exception:
                self._broke()
            return func(*args, **kwargs)
        if not listen.all_plain(tensors):
            return func(*args, **kwargs)  # FakeTensor, DTensor, meta: not values to read
        try:
            call = self._begin(info, func, args, tensors)
            if info.mutable and self._batch:
                self._flush_stats()  # the waiting results may be what it overwrites
        except Exception:
            self._broke()
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        try:
            self._end(call, info, func, args, kwargs, tensors, out)
        except Exception:
            self._broke()
        return out

    def _in_compiled_backward(self) -> bool:
        node = _current_node() if listen.HAS_NODE else None
        if node is None or not node.name().startswith("CompiledFunction"):
            return False
        seq = node._sequence_nr()
        with self._lock:
            if seq not in self._compiled_nodes:
                self._compiled_nodes.add(seq)
                self.compiled.on_backward_node()
        return True

    def _collective(self, info, tensors):
        s = listen.state()
        node = _current_node() if listen.HAS_NODE else None
        with self._lock:
            if node is not None:
                seq = node._sequence_nr()
                ni = self._nodes.get(seq) or self._nodes_prev.get(seq)
                phase, module, function = "backward", (ni.module if ni else self._node_module(node)), \
                    (ni.function if ni else "")
            elif self._in_backward:  # the engine's final callbacks (FSDP's last reductions)
                phase, module, function = "backward", "", ""
            elif s.optimizer_depth:
                phase, module, function = "optimizer", "", ""
                if s.in_scaler:
                    self._found_inf_reduced = True  # a collective inside unscale_ (ShardedGradScaler's)
            else:
                phase, module, function = "forward", (s.modules[-1] if s.modules else ""), ""
            if not self.backend:
                self.backend = dist.backend()
            self.collectives.add(info.packet, info.op, tensors, phase, module, function, self.step_index)

    def _broke(self):
        # A bug in the recorder must not stop the user's training: record it, stop
        # listening, and let the report (and the exit code) say so.
        self.internal_error = traceback.format_exc()
        print("ampcheck recorder: internal error; recording stopped, the script goes on:\n"
              + self.internal_error, file=sys.stderr)

    def _begin(self, info, func, args, tensors) -> "_Call":
        # Per call only what differs between calls is worked out; what depends on the op
        # alone (its names, its schema) is in `info`, made once per aten overload.
        s = listen.state()
        node = _current_node() if listen.HAS_NODE else None
        with self._lock:
            self._seq += 1
            if tensors:
                device = tensors[0].device.type
                if not self.device:
                    self.device = device
            else:
                device = "cpu"
            if node is not None or (self._in_backward and not listen.HAS_NODE):
                seq = node._sequence_nr() if node is not None else -1
                ni = self._nodes.get(seq) or self._nodes_prev.get(seq)
                if ni is None:
                    op = self._node_op(node)
                    ni = NodeInfo(self._node_module(node), op, 0, "off", False)
                on = self._backward_autocast[1 if device == "cuda" else 0]
                autocast = (self._backward_dtypes[1 if device == "cuda" else 0] if on else "")
                if s.node_seq != seq:
                    s.node_seq, s.node_results = seq, 0
                return _Call(self._seq, self.step_index, "backward", ni.op, ni.row, ni.module, ni.occurrence,
                             ni.reason, autocast, False, ni.inserted_cast, device, ni.function)
            op = info.op or op_type(func, args)
            if s.optimizer_depth:
                # The scaler's multiply of the loss makes a node backward runs first.
                self._claim_node(tensors, NodeInfo("", op, 0, "off", False))
                return _Call(self._seq, self.step_index, "optimizer", op, op, "", 0, "off", "", False, False,
                             device)
            module = s.modules[-1] if s.modules else ""
            on = s.autocast_cuda if device == "cuda" else s.autocast_cpu
            inserted = on and op == "cast" and s.function not in listen.CONVERSIONS
            # Inside a torch call the Forcer runs in fp32 (fp32.py): the custom black list.
            reason = "custom_black" if s.forcing else ("autocast" if on else "off")
            dt = ""
            if on:
                self.autocast_seen = True
                dt = nx.dtype_name(_autocast_dtype(device))
                if dt not in self.autocast_dtypes:
                    self.autocast_dtypes.append(dt)
            k = 0
            if not inserted:
                key = (module, op)
                k = self._occurrences.get(key, 0)
                self._occurrences[key] = k + 1
            if tensors and torch.is_grad_enabled():
                self._claim_node(tensors, NodeInfo(module, op, k, reason, inserted))
            return _Call(self._seq, self.step_index, "forward", op, op, module, k, reason, dt, inserted, False,
                         device)

    def _claim_node(self, tensors, info: "NodeInfo"):
        # The node a forward call creates is made just before the call reaches the mode,
        # with the thread's last sequence number; a call that made none (an output that is
        # not differentiable) finds that number claimed by the call that made it.
        if torch.is_grad_enabled():
            for t in tensors:
                if t.requires_grad:
                    seq = _next_sequence_nr() - 1
                    if seq not in self._nodes:
                        self._nodes[seq] = info
                    return

    def _node_op(self, node) -> str:
        name = node.name() if node is not None else None
        op = self._node_ops.get(name)
        if op is None:
            op = self._node_ops[name] = _node_op(node)
        return op

    def _node_module(self, node) -> str:
        # Gradient accumulation into a parameter belongs to the parameter's module.
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            name = self._param_names.get(id(variable), "")
            return name.rsplit(".", 1)[0] if "." in name else ""
        return ""

    def _end(self, call, info, func, args, kwargs, tensors, out):
        if type(out) is torch.Tensor:
            outs = [out] if not out.is_meta else []
        else:
            outs = [t for t in listen.tensors_of(out) if listen.plain(t)]
        if not outs and info.writes:  # an in-place op returning nothing: what it wrote is its result
            outs = [args[i] for i in info.writes if i < len(args) and isinstance(args[i], torch.Tensor)]
        phase = call.phase
        aten = info.packet
        kdtype = _kernel_dtype(outs, tensors)
        with self._lock:
            if phase == "forward" and kdtype in nx.LOW_PRECISION:
                name = nx.dtype_name(kdtype)
                if name not in self.low_dtypes:
                    self.low_dtypes.append(name)
            if kdtype in nx.FP8 and nx.dtype_name(kdtype) not in self.fp8_dtypes:
                self.fp8_dtypes.append(nx.dtype_name(kdtype))
            if phase != "optimizer" and not self.replaying:  # a replay's calls ran once already
                self._table(call, aten, tensors, outs, kdtype)
            if self.watch is None:
                return
            with listen.internal():
                self._watch_call(call, info, func, args, kwargs, tensors, outs, aten)

    def _watch_call(self, call, info, func, args, kwargs, tensors, outs, aten):
        phase = call.phase
        floating_in = [t for t in tensors if t.is_floating_point()]
        if phase == "forward" and (not floating_in or all(self.watch.is_constant(t) for t in floating_in)):
            for t in outs:  # made from constants only: a constant (a mask, a position table)
                self.watch.note_constant(t)
            return
        recompute = None
        if phase == "forward" and info.recompute_ok and outs and outs[0].is_floating_point() \
                and outs[0].dtype in nx.LOW_PRECISION:
            recompute = _make_recompute(func, args, kwargs)
        # A custom Function's backward is the script's own code: its calls are named by
        # their own op, within the Function ("exp in the backward of autograd.Function F").
        op = (info.op or op_type(func, args)) if call.function else call.op
        ev = nf.OpEvent(call.seq, call.step, phase, op, aten, call.module,
                        list(enumerate(tensors)), outs, call.inserted, recompute, call.function,
                        call.reason == "autocast", view=info.is_view)
        if phase == "forward" and call.op == "cast" and outs and outs[0].dtype in nx.LOW_PRECISION \
                and floating_in and floating_in[0].dtype not in nx.LOW_PRECISION:
            # The script's own cast into fp16/bf16 (autocast's are call.inserted): where it is,
            # so that advice can name the line that put an op into low precision.
            ev.site = listen.script_site()
        self.watch.on_op(ev, call.node_inserted)
        if self.twin_probe is not None and phase == "forward" and call.inserted and not self.replaying:
            self.twin_probe.on_cast(call.step, tensors, outs)
        if phase == "optimizer" or call.inserted or self.replaying:
            return
        inst = self._instance(call)
        if self.twin_probe is not None and phase == "forward":
            self.twin_probe.on_op(call.step, inst, tensors, outs, recompute)
        if outs and outs[0].dtype in nx.FP8_BOUNDS and floating_in and floating_in[0].dtype not in nx.FP8:
            self._fp8_cast(inst, call.step, floating_in[0], nx.FP8_BOUNDS[outs[0].dtype])
        sample = (call.step - 1) % self.stats_every == 0
        if sample:
            # A view computes nothing: its values are counted where they were made (and an
            # as_strided view of DDP's uninitialized gradient bucket holds no values at all).
            role = None
            if info.is_view:
                pass
            elif phase == "forward":
                role = "out"
            else:
                s = listen.state()
                role = f"grad{s.node_results}"
                s.node_results += 1
            first = next((t for t in outs if t.is_floating_point()), None)
            if role is not None and first is not None:
                acc = inst.numerics.get(role)
                if acc is None:
                    acc = inst.numerics[role] = nx.Accumulator()
                # A new handle of the values, not the tensor: the tensor's own reference count
                # decides whether AccumulateGrad may take a gradient as it is (or copies it).
                self._batch.add(acc, first.detach())
                if self._batch.elements > BATCH_ELEMENTS:
                    self._flush_stats()
        if self.inspect == "full" and recompute is not None:
            self._measure(inst, call.step, outs[0], recompute())

    @staticmethod
    def _fp8_cast(inst, step: int, src, bounds):
        """A cast into fp8: how many of its values left the format's finite range (saturated
        to +-max by PyTorch's E4M3 cast, silently; Inf in E5M2) or underflowed to 0."""
        beyond, under = nx.fp8_cast_counts(src, bounds)
        c = inst.fp8_cast
        if c is None:
            c = inst.fp8_cast = {"dtype": bounds.name, "max": bounds.max, "saturates": bounds.saturates,
                                 "elements": 0, "beyond": 0, "underflow": 0, "first_beyond_step": 0,
                                 "first_underflow_step": 0}
        c["elements"] += src.numel()
        c["beyond"] += beyond
        c["underflow"] += under
        if beyond and not c["first_beyond_step"]:
            c["first_beyond_step"] = step
        if under and not c["first_underflow_step"]:
            c["first_underflow_step"] = step

    def _instance(self, call) -> _Instance:
        key = (call.module, call.row, call.phase, call.k)
        inst = self.instances.get(key)
        if inst is None:
            inst = self.instances[key] = _Instance(call.module, call.row, call.phase, call.k)
        return inst

    def _table(self, call, aten, tensors, outs, kdtype):
        if call.inserted:
            src = None
            for t in tensors:
                if t.is_floating_point():
                    src = t
                    break
            if src is not None and outs:
                key = (nx.dtype_name(src.dtype), nx.dtype_name(outs[0].dtype))
                self.inserted_casts[key] = self.inserted_casts.get(key, 0) + 1
                if len(self._pending_casts) > 4096:
                    self._pending_casts.clear()
                self._pending_casts[id(outs[0])] = (key, outs[0])
            return
        row = self.op_types.get(call.row)
        if row is None:
            row = self.op_types[call.row] = [0, 0, 0, 0]
        row[_BUCKET.get(kdtype, 3)] += 1
        if kdtype in nx.FP8:
            self.fp8_calls[call.row] = self.fp8_calls.get(call.row, 0) + 1
        key = (call.module, call.row, call.phase, call.k)
        inst = self.instances.get(key)
        if inst is None:
            inst = self.instances[key] = _Instance(call.module, call.row, call.phase, call.k)
        inst.calls += 1
        inst.reason = call.reason
        inst.autocast = call.autocast
        # The last call's dtypes, as dtypes: their names are written once, in the report.
        inst.last = ([t.dtype for t in tensors], kdtype, outs[0].dtype if outs else None)
        kernel = (call.device, aten, kdtype)
        inst.kernel_calls[kernel] = inst.kernel_calls.get(kernel, 0) + 1
        if call.phase == "forward" and self._pending_casts:
            for i, t in enumerate(tensors):
                hit = self._pending_casts.get(id(t))
                if hit is not None and hit[1] is t:
                    key = (i, hit[0][0], hit[0][1])
                    inst.casts[key] = inst.casts.get(key, 0) + 1

    def _measure(self, inst: _Instance, step: int, low: torch.Tensor, ref):
        """inspect full: the fp16/bf16 result against the same op in fp32."""
        if ref is None or ref.numel() != low.numel():
            return
        if ref.dtype == torch.float32 and low.numel() and nx.all_finite(low) and nx.all_finite(ref):
            # Both finite (the common case): nothing overflowed and nothing is non-finite in
            # fp32 either; only underflow is left to count, with the errors, in one read-back.
            b = nx.BOUNDS[low.dtype]
            lo32 = low.detach().reshape(-1).to(torch.float32)
            r = ref.detach().reshape(-1)
            ra = r.abs()
            under = (lo32 == 0) & (ra > 0) & (ra <= b.underflow)
            lo = lo32.double()
            y = r.double()
            diff = lo - y
            floor_diff = y.to(low.dtype).double() - y
            n_under, norm, norm_diff, norm_floor, max_abs = torch.stack([
                under.sum().double(), torch.linalg.vector_norm(y), torch.linalg.vector_norm(diff),
                torch.linalg.vector_norm(floor_diff), diff.abs().max()]).tolist()
            if n_under:
                r_loss = nx.range_loss(low, ref)  # where it underflowed first, and the value
                inst.underflow += r_loss.underflow
                if inst.first_loss is None:
                    inst.first_loss = (step, "underflow", r_loss.underflow_value)
            err = norm_diff / norm if norm > 0 else 0.0
            floor = norm_floor / norm if norm > 0 else 0.0
            self._add_error(inst, step, err, floor, max_abs)
            return
        r = nx.range_loss(low, ref)
        inst.fp32_nonfinite += r.fp32_nonfinite
        if r.underflow or r.overflow:
            inst.underflow += r.underflow
            inst.overflow += r.overflow
            if inst.first_loss is None:
                kind = r.first_kind
                inst.first_loss = (step, kind, r.underflow_value if kind == "underflow" else r.overflow_value)
        lo = low.detach().reshape(-1).double()
        y = ref.detach().reshape(-1).double()
        if not (bool(torch.isfinite(lo).all()) and bool(torch.isfinite(y).all())):
            inst.error_nonfinite += 1
            return
        norm = float(torch.linalg.vector_norm(y))
        diff = lo - y
        floor_diff = y.to(low.dtype).double() - y
        err = float(torch.linalg.vector_norm(diff)) / norm if norm > 0 else 0.0
        floor = float(torch.linalg.vector_norm(floor_diff)) / norm if norm > 0 else 0.0
        self._add_error(inst, step, err, floor, float(diff.abs().max()) if diff.numel() else 0.0)

    @staticmethod
    def _add_error(inst, step, err, floor, max_abs):
        inst.error_count += 1
        inst.error_sum += err
        inst.floor_sum += floor
        if err > inst.worst:
            inst.worst, inst.floor_at_worst, inst.worst_step = err, floor, step
        inst.max_abs = max(inst.max_abs, max_abs)


def _remove_mode(length, pop, push, mode):
    """Takes `mode` off a mode stack; returns the stack as it was (bottom first)."""
    modes = [pop() for _ in range(length())]
    modes.reverse()
    for m in modes:
        if m is not mode:
            push(m)
    return modes


def _replay_target(module):
    """What a replay of the model's call runs: the module itself, or the one a wrapper holds
    (DDP's `module`: its forward would reduce gradients over the ranks, which one rank must
    not do alone); None for a model whose parameters are shards (FSDP: gathering them is a
    collective of every rank)."""
    if any(type(m).__name__ == "FullyShardedDataParallel" or hasattr(m, "_get_fsdp_state")
           for m in module.modules()):
        return None
    while type(module).__name__ in _WRAPPERS and isinstance(getattr(module, _WRAPPERS[type(module).__name__], None),
                                                            torch.nn.Module):
        module = getattr(module, _WRAPPERS[type(module).__name__])
    return module


def _exit_mode(mode, length, pop, push):
    """mode.__exit__() (its own bookkeeping kept), with any mode pushed above it put back."""
    above = []
    while length():
        top = pop()
        if top is mode:
            push(top)
            break
        above.append(top)
    else:  # not on the stack
        for m in reversed(above):
            push(m)
        return
    mode.__exit__(None, None, None)
    for m in reversed(above):
        push(m)


def _restore_modes(length, pop, push, modes):
    for _ in range(length()):
        pop()
    for m in modes:
        push(m)


_current_node = torch._C._current_autograd_node if listen.HAS_NODE else (lambda: None)
_next_sequence_nr = torch.autograd._get_sequence_nr
try:
    torch.get_autocast_dtype("cpu")
    _autocast_dtype = torch.get_autocast_dtype
except (AttributeError, TypeError):  # torch < 2.4
    _autocast_dtype = listen.autocast_dtype


# Modules that wrap the user's model and add no path of their own: DDP's `module`,
# torch.compile's `_orig_mod`, FSDP1's and activation checkpointing's wrapped module. The
# report's paths are the user's (fc1, not module.fc1 or _orig_mod.fc1).
_WRAPPERS = {"DistributedDataParallel": "module", "DataParallel": "module", "OptimizedModule": "_orig_mod",
             "FullyShardedDataParallel": "_fsdp_wrapped_module", "CheckpointWrapper": "_checkpoint_wrapped_module",
             "OffloadWrapper": "_checkpoint_wrapped_module"}


def _join(a: str, b: str) -> str:
    return f"{a}.{b}" if a and b else (a or b)


def _walk(module, path: str, seen=None):
    """(path, module) for a module and its descendants, wrappers adding no path."""
    seen = set() if seen is None else seen
    if id(module) in seen:
        return
    seen.add(id(module))
    yield path, module
    wrapped = _WRAPPERS.get(type(module).__name__)
    for name, child in module.named_children():
        yield from _walk(child, path if name == wrapped else _join(path, name), seen)


def _node_op(node) -> str:
    if node is None:
        return "backward"
    name = node.name()
    if name.endswith("AccumulateGrad"):
        return "accumulate"
    base = name.split("::")[-1]
    for suffix in ("Backward0", "Backward1", "Backward2", "Backward"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base or name
