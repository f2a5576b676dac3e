"""Where NaN and Inf came from, what the loss scaler made of them, and the quieter
failures of low precision: inspector/nan_source.h's NanWatch, for aten op calls.

The rules are the engine's, so that a recorded PyTorch run and `ampcheck run` judge
alike (docs/inspector.md, "NaN/Inf source and loss-scale history"; docs/recorder.md says
where the recorder differs):

  producer     an op call with a non-finite output while every floating input is
               finite. Forward: the call's tensors; backward: the aten call's own
               tensors (the incoming gradient and the saved values it reads). Every
               (op, module, phase) that does so is kept, its first occurrence.
  lost value   for a forward producer, what low precision lost on the way: its own
               fp16/bf16 result overflowing where fp32 holds it, or an input 0 that an
               earlier low-precision op made by flushing a value fp32 holds, followed back
               through casts and reshapes. Found by recomputing that op in fp32.
  propagator   a later call with a non-finite input and a non-finite output: counted
               per op, never blamed.
  allowed      calls of ops or modules the user allowed (--allow-inf), and calls whose
               only non-finite inputs are such values, are not reported.
  intended     a -Inf mask that only softmax reads: masked_fill's -Inf, an add/where
               taking -Inf from a constant, or a finfo.min-style mask that a narrower
               dtype or an add turned into -Inf (see _saturated_mask). Casts, reshapes,
               adds and log_softmax carry it on; any other reader, or a softmax making NaN
               of it, makes it a producer after all.
  constants    values the script made without touching the model (factory ops such as
               torch.full, and ops reading only such values) are data, not ops: a mask
               built with torch.full(-inf).triu() is a constant, as a buffer is.

Backward and optimizer-phase calls are held until the scaler's next update judges them:
found_inf, the step skipped and the scale lowered is absorbed; anything else is a real
failure. Steps without a GradScaler end with an update of scale 1 that never skips, so
non-finite gradients there fail the run (gradient_not_absorbed), as PyTorch's
GradScaler(enabled=False) does in the engine.

Skipped updates: one rule (docs/inspector.md). Every skipped update is listed with its
cause (the first backward producer: "op"; else the first backward call that held the
non-finite gradient received it: "accumulation"; else a parameter's own gradient:
"parameter") and its reading: probing while the scale looks for its level (no update
stepped yet: "initial"; the back-off takes the scale to a new low of the run: "lower";
the scale had grown past that of the last update that stepped: "after_growth"), else
"counted"; "forward" after a non-finite forward value, "not_absorbed" when the scaler
did not react. The skipped fraction counts what is not probing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from . import numerics as nx
from .optypes import KEEPS_ORDER, MASK_CARRIERS, MASK_WRITERS, WALKABLE

# Forward outputs remembered within a step for the walk back from a producer's input;
# a step with more starts over. They hold storage until the step ends.
MADE_KEPT = 8192
# -Inf masks and the tensors carrying them, per step.
MASK_VALUES_KEPT = 256
ALLOWED_VALUES_KEPT = 256
# How far back through casts and reshapes a producer's input is followed.
MAX_WALK = 16


@dataclass
class Options:
    allowed_ops: tuple = ()         # op types or aten names whose non-finite values are intended
    allowed_modules: tuple = ()     # module path prefixes, matched per dotted component
    scale_floor: float = 1.0        # a scale below this after an update is a failure
    max_skipped_fraction: float = 0.05
    max_listed: int = 8             # events kept per attribution list
    intended_masks: bool = True
    zero_gradient_steps: int = 3    # all-zero gradient steps in a row that fail a low-precision run


@dataclass
class OpEvent:
    """One aten call as the watch sees it."""
    seq: int
    step: int
    phase: str                 # "forward", "backward", "optimizer"
    op: str                    # ampcheck op type of the call (backward: of its forward op)
    aten: str                  # the aten packet that ran: "mm"
    module: str
    inputs: list               # (index, tensor) of every tensor argument
    outputs: list              # the tensors it produced (or wrote, in place)
    inserted_cast: bool = False
    recompute: object = None   # () -> the same call computed in fp32, or None when it cannot be


@dataclass
class Made:
    """A forward output of this step: what made it, and what a walk back needs."""
    seq: int
    step: int
    op: str
    module: str
    inserted_cast: bool
    output: torch.Tensor        # holds the identity: no other tensor can take its address
    first_input: object = None  # the walk's next tensor (walkable ops)
    recompute: object = None    # low-precision outputs: the fp32 recompute


@dataclass
class ScalerEvent:
    step: int                   # updates so far, this one included
    scale_before: float
    scale_after: float
    found_inf: bool
    skipped: bool
    counters: dict = field(default_factory=dict)
    # found_inf comes from a look at every parameter gradient (the GradScaler's check, or
    # the recorder's own scan when no scaler is on).
    checked: bool = True
    # Parameters whose gradients held Inf/NaN at the update: how many, and the first
    # (up to 8) by name, in the optimizer's order.
    nonfinite_params: int = 0
    nonfinite_names: list = field(default_factory=list)


@dataclass
class ScaleRecord:
    event: ScalerEvent
    absorbed: bool = False
    backward_producer: dict | None = None
    attribution: list = field(default_factory=list)
    propagators: int = 0
    forward_non_finite: bool = False
    reading: str = "counted"     # meaningful for a skipped update (PROBING, counted, forward, not_absorbed)
    cause: dict | None = None    # when it found Inf/NaN: {"kind", "event", "params", "names"}


PROBING = ("initial", "lower", "after_growth")
MAX_PARAM_NAMES = 8


def view_key(t: torch.Tensor):
    # A tensor's values by where they are: a fresh handle of the same values has the same key.
    return (t.device, t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))


def _floating(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def _under(module: str, prefix: str) -> bool:
    """"attn" covers "attn" and "attn.q", not "attention"."""
    if not prefix:
        return True
    return module == prefix or module.startswith(prefix + ".")


def _only_neg_inf(c) -> bool:
    return c[2] > 0 and c[0] == 0 and c[1] == 0


def _counts_text(c) -> str:
    parts = [f"{n} {what}" for n, what in zip(c, ("NaN", "+Inf", "-Inf")) if n]
    return ", ".join(parts) if parts else "none"


def value_text(v: float) -> str:
    """A value for a person, as reports/advice.cpp writes it: six significant digits
    between 1e-3 and 1e6 (65504, 90000), else three (2.06e-09, 5.96e-08)."""
    return f"{v:.6g}" if 1e-3 <= abs(v) < 1e6 else f"{v:.3g}"


class _Propagation:
    def __init__(self):
        self.events = 0
        self.by_op: dict[str, int] = {}  # first-seen order

    def add(self, op: str):
        self.events += 1
        self.by_op[op] = self.by_op.get(op, 0) + 1

    def merge(self, other: "_Propagation"):
        self.events += other.events
        for op, n in other.by_op.items():
            self.by_op[op] = self.by_op.get(op, 0) + n


class _Pending:
    """Backward and optimizer events since the last scaler update."""
    def __init__(self):
        self.producers: list[dict] = []
        self.attribution: list[dict] = []
        self.propagators = _Propagation()


@dataclass
class _MaskRoot:
    event: dict
    values: int
    readers: list = field(default_factory=list)
    spread: bool = False


def _key(ev: dict):
    return (ev["op"], ev["phase"], ev["module"])


def _add_producer(lst: list, ev: dict):
    """Adds `ev` as the first occurrence of its (op, module, phase), in sequence order: an
    earlier occurrence found late (a mask that spread) replaces a later one."""
    for i, p in enumerate(lst):
        if _key(p) == _key(ev):
            if p["_seq"] <= ev["_seq"]:
                return
            del lst[i]
            break
    at = len(lst)
    for i, p in enumerate(lst):
        if p["_seq"] > ev["_seq"]:
            at = i
            break
    lst.insert(at, ev)


class NanWatch:
    def __init__(self, options: Options | None = None):
        self.options = options or Options()
        self.producers: list[dict] = []
        self.propagators = _Propagation()
        self.scale_history: list[ScaleRecord] = []
        self.failures: list[dict] = []
        self.intended: dict[tuple, dict] = {}  # (op, module) -> IntendedInf, first-seen order
        self.events_checked = 0
        self.allowed_events = 0
        self.healed_updates = 0
        self.mask_failures: list[dict] = []
        # For reading skips: whether an update has stepped, the scale of the last that did,
        # and the lowest scale of the run so far.
        self._stepped_any = False
        self._last_stepped_scale = 0.0
        self._lowest_scale = math.inf
        self._pending = _Pending()
        self._allowed_values: list[torch.Tensor] = []
        self._below_floor = False
        self._first_forward_bad: dict | None = None
        self._first_forward_note = ""
        self._forward_bad_since_update = False
        self._made: dict = {}
        self._constants: dict = {}
        self._roots: list[_MaskRoot] = []
        self._mask_values: list = []  # (tensor, [root indices])
        self.low_precision = False
        self.low_dtype = None
        # Gradient underflow
        self._step_updates = 0
        self._step_nonzero = False
        self._step_flushed: dict | None = None
        self._step_loss = math.nan
        self._initial_loss = math.nan
        self._stepped = 0
        self._zero_run: dict | None = None
        self._zero_longest: dict | None = None
        self._step = 1
        # Gradients read outside backward (clip_grad_norm_, logging a gradient): a callback
        # giving the view keys of the parameters' .grad now, and what was computed from them.
        self.grad_keys = None
        self._grad_values: list = []

    # -- the op calls ---------------------------------------------------------------

    def is_constant(self, t: torch.Tensor) -> bool:
        return view_key(t) in self._constants

    def note_constant(self, t: torch.Tensor):
        """An output of a factory op, or of an op that read only constants."""
        if len(self._constants) >= MADE_KEPT:
            self._constants.clear()
        self._constants[view_key(t)] = t

    def _allowed(self, ev: OpEvent) -> bool:
        o = self.options
        if ev.op in o.allowed_ops or ev.aten in o.allowed_ops:
            return True
        return any(_under(ev.module, p) for p in o.allowed_modules)

    def _carries_allowed(self, t) -> bool:
        k = view_key(t)
        return any(view_key(a) == k for a in self._allowed_values)

    def _remember_allowed(self, t):
        if len(self._allowed_values) == ALLOWED_VALUES_KEPT:
            self._allowed_values.pop(0)
        self._allowed_values.append(t)

    def _remember_made(self, ev: OpEvent):
        if not ev.outputs:
            return
        if len(self._made) >= MADE_KEPT:
            self._made.clear()
        out = ev.outputs[0]
        key = view_key(out)
        if key in self._made:  # a view of values already made did not make them
            return
        m = Made(ev.seq, ev.step, ev.op, ev.module, ev.inserted_cast, out)
        if ev.op in WALKABLE and ev.inputs:
            m.first_input = ev.inputs[0][1]
        if out.is_floating_point() and nx.is_low_precision(out.dtype):
            m.recompute = ev.recompute
        self._made[key] = m

    def _lost_values(self, ev: OpEvent, produced) -> list[dict]:
        """What low precision lost on the way to a forward producer's non-finite values."""
        lost = []
        out = ev.outputs[0]
        explained = 0
        if nx.is_low_precision(out.dtype) and ev.recompute is not None:
            ref = ev.recompute()
            if ref is not None:
                own = nx.range_loss(out, ref)
                explained = own.overflow
                if own.overflow:
                    lost.append(_lost("", ev.op, ev.module, "forward", ev.step, ev.inserted_cast,
                                      "overflow", out.dtype, own.overflow_value, own.overflow,
                                      nx.BOUNDS[out.dtype].max))
        nonfinite = sum(produced)
        for index, t in ev.inputs:
            if explained >= nonfinite:
                break
            if not _floating(t) or not bool((t == 0).any()):
                continue
            aligned = t.numel() == out.numel()  # element j of the input made element j
            walk = t
            for _ in range(MAX_WALK):
                m = self._made.get(view_key(walk))
                if m is None:
                    break
                if m.recompute is not None:
                    ref = m.recompute()
                    if ref is not None and ref.numel() == m.output.numel():
                        r = nx.range_loss(m.output, ref)
                        if r.underflow:
                            value = r.underflow_value
                            if aligned and m.output.numel() == out.numel():
                                flushed = nx.flushed_elementwise(m.output, ref)
                                bad = ~torch.isfinite(out.detach().reshape(-1))
                                hit = torch.nonzero(flushed & bad)
                                if hit.numel():
                                    value = ref.reshape(-1)[int(hit[0])].item()
                            lost.append(_lost(f"input {index}", m.op, m.module, "forward", m.step,
                                              m.inserted_cast, "underflow", m.output.dtype, value,
                                              r.underflow, nx.BOUNDS[m.output.dtype].min_subnormal))
                            break
                if m.op not in WALKABLE or m.first_input is None:
                    break
                aligned = aligned and m.op in KEEPS_ORDER
                walk = m.first_input
        return lost

    def _remember_grad_value(self, t):
        if len(self._grad_values) == ALLOWED_VALUES_KEPT:
            self._grad_values.pop(0)
        self._grad_values.append(t)

    def _reads_gradients(self, ev: OpEvent, inputs_finite: bool) -> bool:
        """Whether a forward-phase call's non-finite values come from gradients: every
        non-finite input is a .grad or made from one; a producer reads one."""
        if self.grad_keys is None:
            return False
        keys = self.grad_keys() | {view_key(t) for t in self._grad_values}
        if not keys:
            return False
        floating = [t for _, t in ev.inputs if _floating(t)]
        if inputs_finite:
            return any(view_key(t) in keys for t in floating)
        bad = [t for t in floating if sum(nx.nonfinite_counts(t.detach())) > 0]
        return all(view_key(t) in keys for t in bad)

    def _mask_roots_of(self, t) -> list[int]:
        k = view_key(t)
        for value, roots in self._mask_values:
            if view_key(value) == k:
                return roots
        return []

    def _add_mask_value(self, t, roots):
        if len(self._mask_values) == MASK_VALUES_KEPT:
            self._mask_values.pop(0)
        self._mask_values.append((t, list(roots)))

    def _spread_masks(self, roots, reader: OpEvent, made_non_finite: bool, how: str):
        for i in roots:
            root = self._roots[i]
            if root.spread:
                continue
            root.spread = True
            writer = root.event
            if not any(f["op"] == writer["op"] and f["module"] == writer["module"] for f in self.mask_failures):
                self.mask_failures.append({"op": writer["op"], "module": writer["module"], "step": writer["step"],
                                           "reader": reader.op, "reader_module": reader.module,
                                           "made_non_finite": made_non_finite})
            _add_producer(self.producers, root.event)
            self._forward_bad_since_update = True
            if self._first_forward_bad is None or root.event["_seq"] < self._first_forward_bad["_seq"]:
                self._first_forward_bad = root.event
                self._first_forward_note = how

    def _fold_masks(self, roots, into: dict | None = None):
        into = self.intended if into is None else into
        for root in roots:
            if root.spread:
                continue
            key = (root.event["op"], root.event["module"])
            x = into.setdefault(key, {"op": key[0], "module": key[1], "events": 0,
                                               "values": 0, "readers": []})
            x["events"] += 1
            x["values"] += root.values
            for r in root.readers:
                if r not in x["readers"]:
                    x["readers"].append(r)

    def _note_backward_cast(self, ev: OpEvent, node_inserted: bool):
        # A backward cast into fp16/bf16 that passed back a gradient that is all 0 while
        # the gradient it received was not flushed it whole (the cast is exact but for its
        # rounding): the evidence of gradient underflow.
        if self._step_flushed is not None or not ev.outputs or not ev.inputs:
            return
        g = ev.outputs[0]
        src = ev.inputs[0][1]
        if not _floating(g) or not nx.is_low_precision(g.dtype) or not _floating(src):
            return
        if nx.any_nonzero(g):
            return
        x = src.detach().reshape(-1)
        x = x[torch.isfinite(x)]
        a = x.abs()
        nonzero = a[a != 0]
        if nonzero.numel() == 0:
            return
        i = int(torch.argmax(a))
        self._step_flushed = _lost("grad_output", "cast", ev.module, "backward", ev.step, node_inserted,
                                   "underflow", g.dtype, x[i].item(), int(nonzero.numel()),
                                   nx.BOUNDS[g.dtype].min_subnormal)

    def on_op(self, ev: OpEvent, node_inserted_cast: bool = False):
        self.events_checked += 1
        backward = ev.phase == "backward"
        forward = ev.phase == "forward"
        if forward and ev.outputs and not self.low_precision:
            dt = ev.outputs[0].dtype
            if nx.is_low_precision(dt):
                self.low_precision, self.low_dtype = True, dt
        if backward and ev.aten == "_to_copy":
            self._note_backward_cast(ev, node_inserted_cast)
        if forward:
            self._remember_made(ev)

        produced = [0, 0, 0]
        for t in ev.outputs:
            if _floating(t):
                c = nx.nonfinite_counts(t.detach())
                produced = [a + b for a, b in zip(produced, c)]
        if sum(produced) == 0:
            # A finite result of a -Inf mask: softmax is the reader a mask is meant for;
            # another op that reads it (exp, max) may be right or not: only the user can say.
            if forward and self._mask_values:
                for _, t in ev.inputs:
                    roots = self._mask_roots_of(t)
                    if not roots:
                        continue
                    if ev.op == "softmax":
                        for r in roots:
                            if ev.op not in self._roots[r].readers:
                                self._roots[r].readers.append(ev.op)
                    else:
                        self._spread_masks(roots, ev, False, f"; its -Inf reached {ev.op} in module '{ev.module}', "
                                                  "which is not a softmax (name the mask with --allow-inf "
                                                  "if that is intended)")
            return

        event = {"_seq": ev.seq, "step": ev.step, "phase": ev.phase, "op": ev.op, "module": ev.module,
                 "inputs": [], "out_nan": produced[0], "out_pos_inf": produced[1],
                 "out_neg_inf": produced[2], "lost": [], "aten": ev.aten}
        inputs_finite = True
        only_allowed_bad = only_mask_bad = only_constant_masks = True
        roots_read: list[int] = []
        holds_mask_value = False
        for index, t in ev.inputs:
            if not _floating(t):
                continue
            r = nx.range_of(t)
            event["inputs"].append(_range_report(f"input {index}", t, r))
            if r.nonfinite() == 0:
                if forward and ev.outputs and not holds_mask_value:
                    holds_mask_value = _saturated_mask(r, ev.outputs[0].dtype)
                continue
            inputs_finite = False
            only_allowed_bad = only_allowed_bad and self._carries_allowed(t)
            if not forward:
                continue
            roots = self._mask_roots_of(t)
            for root in roots:
                if root not in roots_read:
                    roots_read.append(root)
            only_mask_bad = only_mask_bad and bool(roots)
            only_constant_masks = (only_constant_masks and not roots and r.nan == 0 and r.pos_inf == 0
                                   and view_key(t) not in self._made)

        if forward and self._reads_gradients(ev, inputs_finite):
            # Not a forward value: the script reading gradients (clipping them, logging
            # their norm) between backward and the update. Judged with the gradients.
            forward = False
            event["phase"] = "optimizer"
            for t in ev.outputs:
                if _floating(t):
                    self._remember_grad_value(t)

        if self._allowed(ev) or (not inputs_finite and only_allowed_bad):
            self.allowed_events += 1
            for t in ev.outputs:
                if _floating(t):
                    self._remember_allowed(t)
            return

        if forward and self.options.intended_masks and ev.outputs:
            if ev.op == "masked_fill":
                writes_mask = inputs_finite or only_constant_masks
            elif ev.op in MASK_WRITERS:
                writes_mask = (not inputs_finite and only_constant_masks) or (inputs_finite and holds_mask_value)
            else:
                writes_mask = inputs_finite and holds_mask_value
            if _only_neg_inf(produced) and writes_mask:
                self._roots.append(_MaskRoot(event, produced[2]))
                self._add_mask_value(ev.outputs[0], [len(self._roots) - 1])
                return
            if not inputs_finite and only_mask_bad and _only_neg_inf(produced) and ev.op in MASK_CARRIERS:
                self._add_mask_value(ev.outputs[0], roots_read)
                return
            if roots_read:
                self._spread_masks(roots_read, ev, True, f"; its -Inf reached {ev.op} in module '{ev.module}', "
                                               f"which made {_counts_text(produced)} of it")

        if not forward:
            # Judged by the next scaler update: absorbed probing, or a real failure.
            p = self._pending
            if len(p.attribution) < self.options.max_listed:
                p.attribution.append(event)
            if inputs_finite:
                _add_producer(p.producers, event)
            else:
                p.propagators.add(ev.op)
            return
        self._forward_bad_since_update = True
        if self._first_forward_bad is None or event["_seq"] < self._first_forward_bad["_seq"]:
            self._first_forward_bad = event
            self._first_forward_note = ""
        if not inputs_finite:
            self.propagators.add(ev.op)
            return
        if any(_key(p) == _key(event) for p in self.producers):
            return
        event["lost"] = self._lost_values(ev, produced)  # a recompute or two, once per new producer
        _add_producer(self.producers, event)

    # -- gradients, steps and the scaler -------------------------------------------

    def on_loss(self, loss: float):
        """The loss of this step, as the loss scaler (or backward) received it."""
        if math.isnan(self._step_loss):
            self._step_loss = loss
        if math.isnan(self._initial_loss):
            self._initial_loss = loss

    def on_gradients(self, updates: int, nonzero: bool):
        """The gradients an optimizer step used: how many, and whether any was not 0."""
        self._step_updates += updates
        self._step_nonzero = self._step_nonzero or nonzero

    def on_step_begin(self, step: int):
        self._end_masks()
        self._step = step

    def _end_masks(self):
        self._fold_masks(self._roots)
        self._roots.clear()
        self._grad_values.clear()
        self._mask_values.clear()
        self._made.clear()
        self._constants.clear()

    def on_step_end(self, step: int):
        self._end_gradient_step(step)
        self._end_masks()

    def _end_gradient_step(self, step: int):
        updates, nonzero, flushed, loss = (self._step_updates, self._step_nonzero, self._step_flushed,
                                           self._step_loss)
        self._step_updates, self._step_nonzero, self._step_flushed = 0, False, None
        self._step_loss = math.nan
        if updates == 0:  # skipped, or no optimizer: neither breaks a run nor adds to it
            return
        self._stepped += 1
        if nonzero:
            self._zero_run = None
            return
        if self._zero_run is None:
            self._zero_run = {"first_step": step, "steps": 0, "evidence": flushed, "loss": loss}
        self._zero_run["steps"] += 1
        if self._zero_longest is None or self._zero_run["steps"] > self._zero_longest["steps"]:
            self._zero_longest = dict(self._zero_run)

    def on_scaler_update(self, e: ScalerEvent):
        rec = ScaleRecord(e)
        rec.absorbed = e.found_inf and e.skipped and e.scale_after < e.scale_before
        rec.forward_non_finite, self._forward_bad_since_update = self._forward_bad_since_update, False
        p = self._pending
        had_bad_grads = bool(p.attribution)
        if e.found_inf or had_bad_grads:
            if p.producers:
                rec.backward_producer = p.producers[0]
            rec.attribution = list(p.attribution)
            rec.propagators = p.propagators.events
            cause = {"kind": "unknown", "event": None, "params": e.nonfinite_params,
                     "names": list(e.nonfinite_names[:MAX_PARAM_NAMES])}
            if rec.backward_producer is not None:
                cause["kind"], cause["event"] = "op", rec.backward_producer
            elif rec.attribution:
                # The first backward call that held it received it: autograd's sum of the
                # gradients of a value read in several places overflowed outside any op.
                cause["kind"], cause["event"] = "accumulation", rec.attribution[0]
            elif e.nonfinite_params > 0:
                cause["kind"] = "parameter"
            rec.cause = cause
        # The reading of a skip, from the scales before it (inspector/nan_source.cpp).
        if e.skipped:
            if not rec.absorbed:
                rec.reading = "not_absorbed"
            elif rec.forward_non_finite:
                rec.reading = "forward"
            elif not self._stepped_any:
                rec.reading = "initial"
            elif e.scale_after < self._lowest_scale:
                rec.reading = "lower"
            elif e.scale_before > self._last_stepped_scale:
                rec.reading = "after_growth"
            else:
                rec.reading = "counted"
        else:
            self._stepped_any = True
            self._last_stepped_scale = e.scale_before
        self._lowest_scale = min(self._lowest_scale, e.scale_before, e.scale_after)
        if had_bad_grads and not e.found_inf and e.checked:
            # Inf in a gradient on its way that never reached a parameter: PyTorch's relu,
            # where and max-pool backward select, so a dead unit's Inf becomes an exact 0
            # (the engine's multiply would make NaN of it). The step applied finite,
            # correct gradients: no failure, counted.
            self.healed_updates += 1
        elif not rec.absorbed and (e.found_inf or had_bad_grads):
            self._merge_real(p)
            what = ("step skipped but the scale did not react" if e.skipped
                    else "step not skipped" if e.found_inf else "no Inf/NaN found by the scaler")
            self.failures.append({"kind": "gradient_not_absorbed", "step": e.step,
                                  "detail": f"{what} (scale {_num(e.scale_before)} -> {_num(e.scale_after)}); "
                                            f"{cause_text(rec.cause)}"})
        below = e.scale_after < self.options.scale_floor
        if below and not self._below_floor:
            self.failures.append({"kind": "scale_below_floor", "step": e.step,
                                  "detail": f"scale {_num(e.scale_after)} below the floor "
                                            f"{_num(self.options.scale_floor)}"})
        self._below_floor = below
        self.scale_history.append(rec)
        self._pending = _Pending()

    def _merge_real(self, p: _Pending):
        for ev in p.producers:
            _add_producer(self.producers, ev)
        self.propagators.merge(p.propagators)

    # -- the verdict ------------------------------------------------------------------

    def report(self) -> dict:
        """The NonFinite object's content and what the summary needs, for the run so far."""
        producers = list(self.producers)
        propagators = _Propagation()
        propagators.merge(self.propagators)
        failures = list(self.failures)
        intended = {k: dict(v, readers=list(v["readers"])) for k, v in self.intended.items()}
        self._fold_masks(self._roots, intended)
        p = self._pending
        if p.attribution:
            for ev in p.producers:
                _add_producer(producers, ev)
            propagators.merge(p.propagators)
            failures.append({"kind": "gradient_not_absorbed", "step": p.attribution[0]["step"],
                             "detail": "non-finite gradients no scaler update has judged; first in "
                                       + event_text(p.attribution[0])})
        if self._first_forward_bad is not None:
            f = self._first_forward_bad
            failures.append({"kind": "forward_non_finite", "step": f["step"],
                             "detail": "first non-finite forward value: " + event_text(f)
                                       + self._first_forward_note})

        h = self.scale_history
        probing = None
        lead = 0
        # Skips after a non-finite forward value are that value's doing, not the scale's.
        while lead < len(h) and h[lead].event.skipped and h[lead].absorbed and not h[lead].forward_non_finite:
            lead += 1
        if 0 < lead < len(h) and not h[lead].event.skipped and h[lead - 1].event.scale_after < h[0].event.scale_before:
            lowest = min([h[lead - 1].event.scale_after] + [r.event.scale_after for r in h[lead:]])
            probing = {"first_update": h[0].event.step, "last_update": h[lead - 1].event.step,
                       "skipped": lead, "scale_from": h[0].event.scale_before,
                       "scale_to": h[lead - 1].event.scale_after, "suggested_scale": lowest,
                       "excused": False}
            last = probing["last_update"]
            failures = [f for f in failures if not (f["kind"] == "scale_below_floor" and f["step"] <= last)]
        # The skipped fraction counts the skips that are not probing: a scale still looking
        # for its level is the scaler at work, however many steps it took.
        updates = len(h)
        skipped = sum(1 for r in h if r.event.skipped)
        probing_skips = sum(1 for r in h if r.event.skipped and r.reading in PROBING)
        if updates:
            counted = skipped - probing_skips
            fraction = counted / updates
            if fraction > self.options.max_skipped_fraction:
                detail = (f"{counted} of {updates} updates skipped outside the scaler's probing ({_num(fraction)} > "
                          f"{_num(self.options.max_skipped_fraction)})")
                first = next((r for r in h if r.event.skipped and r.reading not in PROBING), None)
                if first is not None:
                    detail += f"; the first at update {first.event.step}: {cause_text(first.cause)}"
                failures.append({"kind": "skipped_fraction", "step": updates, "detail": detail})
            elif probing and skipped / updates > self.options.max_skipped_fraction:
                probing["excused"] = True  # counting every skip would have failed the run: name the cure
        skips = [_skip(r) for r in h if r.event.skipped]

        zero = None
        z = self._zero_longest
        converged = (z is not None and not math.isnan(z["loss"]) and not math.isnan(self._initial_loss)
                     and z["loss"] < 0.1 * self._initial_loss)
        if (self.options.zero_gradient_steps > 0 and self.low_precision and z is not None and not converged
                and z["steps"] >= min(self.options.zero_gradient_steps, self._stepped)):
            dtype = self.low_dtype
            zero = {"first_step": z["first_step"], "steps": z["steps"], "stepped": self._stepped,
                    "dtype": nx.dtype_name(dtype), "scale_needed": 0.0, "loss": z["loss"],
                    "initial_loss": self._initial_loss}
            evidence = z["evidence"]
            if evidence is not None:
                zero["evidence"] = evidence
                if evidence["value"] != 0:
                    scale = 1.0
                    for rec in h:
                        if rec.event.step >= evidence["step"]:
                            scale = rec.event.scale_before
                            break
                    bounds = nx.BOUNDS[torch.float16 if evidence["dtype"] == "float16" else torch.bfloat16]
                    zero["scale_needed"] = 2.0 ** math.ceil(math.log2(scale * bounds.min_normal
                                                                      / abs(evidence["value"])))
            detail = (f"every parameter gradient was 0 in {nx.dtype_name(dtype)} for {z['steps']} optimizer "
                      f"step(s) in a row from step {z['first_step']}")
            if evidence is not None:
                detail += "; " + flushed_gradient_text(evidence)
            failures.append({"kind": "gradient_underflow", "step": z["first_step"], "detail": detail})

        failures.sort(key=lambda f: f["step"])  # stable: same-step failures keep their order
        return {
            "producers": producers,
            "propagators": propagators,
            "failures": failures,
            "intended": list(intended.values()),
            "probing": probing,
            "zero_gradients": zero,
            "updates": updates,
            "skipped": skipped,
            "absorbed": sum(1 for r in h if r.absorbed),
            "skips": skips,
            "mask_failures": [dict(f) for f in self.mask_failures],
            "healed_updates": self.healed_updates,
        }


def cause_text(c: dict | None) -> str:
    """What made an update's gradients non-finite, in one line (inspector's cause_text)."""
    if c is None:
        return "no backward op held it"
    where = lambda m: f"in '{m}'" if m else "outside any module"
    e = c["event"]
    kind = c["kind"]
    if kind == "op":
        suffix = "_grad " if e["phase"] == "backward" else " "
        s = (f"{e['op']}{suffix}{where(e['module'])} ({e['phase']}) made "
             f"{_counts_text((e['out_nan'], e['out_pos_inf'], e['out_neg_inf']))} from finite values")
    elif kind == "accumulation":
        s = (f"the gradient reaching {e['op']}_grad {where(e['module'])} was already non-finite: autograd's sum "
             "of the gradients of a value read in several places (a residual, a reused activation) overflowed")
    elif kind == "parameter":
        s = "no backward op held it: a parameter's gradient summed over its uses (a shared or tied weight) overflowed"
    else:
        s = "no backward op held it"
    if c["params"] > 0:
        s += f"; {c['params']} parameter gradient{'' if c['params'] == 1 else 's'} held Inf/NaN"
        for i, name in enumerate(c["names"]):
            s += (": " if i == 0 else ", ") + name
        if c["params"] > len(c["names"]):
            s += ", ..."
    return s


def _skip(r: ScaleRecord) -> dict:
    """A skipped update as the report lists it (SkippedUpdate)."""
    c = r.cause or {"kind": "unknown", "event": None, "params": 0, "names": []}
    out = {"update": r.event.step, "scale_before": r.event.scale_before, "scale_after": r.event.scale_after,
           "reading": r.reading, "cause": c["kind"]}
    if c["event"] is not None:
        out["event"] = c["event"]
    out.update(params=c["params"], param_names=list(c["names"]), text=cause_text(r.cause))
    return out


def _lost(input_, op, module, phase, step, inserted, kind, dtype, value, count, limit) -> dict:
    return {"input": input_, "op": op, "module": module, "phase": phase, "step": step,
            "inserted_cast": bool(inserted), "kind": kind, "dtype": nx.dtype_name(dtype),
            "value": float(value), "count": int(count), "limit": float(limit)}


def _range_report(role: str, t: torch.Tensor, r: nx.Range) -> dict:
    return {"role": role, "dtype": nx.dtype_name(t.dtype), "shape": list(t.shape), "nan": r.nan,
            "pos_inf": r.pos_inf, "neg_inf": r.neg_inf, "min": r.min, "max": r.max, "absmax": r.absmax}


def _saturated_mask(r: nx.Range, out_dtype) -> bool:
    # A finite input holding a value at or below the lowest finite value of the output's
    # dtype: a mask written as finfo(dtype).min (or -1e9) that a cast into a narrower dtype,
    # or an add at the edge of the range, turned into -Inf. Such a -Inf is judged as a
    # mask: intended when only softmax reads it.
    if not out_dtype.is_floating_point or math.isnan(r.min):
        return False
    return r.min <= torch.finfo(out_dtype).min


def _num(v: float) -> str:
    return f"{v:g}"


def event_text(e: dict) -> str:
    out = (e["out_nan"], e["out_pos_inf"], e["out_neg_inf"])
    return (f"{e['op']} in module '{e['module']}', {e['phase']}, step {e['step']}: output "
            f"{_counts_text(out)}")


def _made(p: dict) -> str:
    kinds = [w for n, w in ((p["out_nan"], "NaN"), (p["out_pos_inf"], "+Inf"), (p["out_neg_inf"], "-Inf")) if n]
    if not kinds:
        return "a non-finite value"
    return kinds[0] if len(kinds) == 1 else ", ".join(kinds[:-1]) + " and " + kinds[-1]


def _who(l: dict) -> str:
    what = "an inserted cast" if l["inserted_cast"] else l["op"]
    return f"{what} in '{l['module']}'" if l["module"] else what


def _values(n: int) -> str:
    return f"{n} value{'' if n == 1 else 's'}"


def lost_text(p: dict, l: dict) -> str:
    """reports/advice.cpp's sentence for one lost value of a producer."""
    producer = (f"{p['op']} produced {_made(p)}" if not p["module"]
                else f"{p['op']} in '{p['module']}' produced {_made(p)}")
    if not l["input"]:
        return (f"{producer}: its result {value_text(l['value'])} "
                f"{'overflowed' if l['kind'] == 'overflow' else 'underflowed'} {l['dtype']} (largest finite "
                f"{value_text(l['limit'])}), which fp32 holds ({_values(l['count'])}, step {l['step']})")
    if l["kind"] == "overflow":
        return (f"{producer} <- its {l['input']} came from {_who(l)}, whose result {value_text(l['value'])} "
                f"overflowed {l['dtype']} (largest finite {value_text(l['limit'])}; {_values(l['count'])}, "
                f"step {l['step']})")
    return (f"{producer} <- its {l['input']} came from {_who(l)}, which flushed {value_text(l['value'])} to 0 "
            f"in {l['dtype']} (smallest subnormal {value_text(l['limit'])}; {_values(l['count'])}, step {l['step']})")


def flushed_gradient_text(l: dict) -> str:
    return (f"{_who(l)} ({l['phase']}, step {l['step']}) flushed every gradient it passed back to 0 in "
            f"{l['dtype']}: {_values(l['count'])}, the largest in magnitude {value_text(l['value'])} "
            f"(smallest subnormal {value_text(l['limit'])})")
