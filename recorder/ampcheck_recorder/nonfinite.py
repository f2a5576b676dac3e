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
from .judge import (MAX_PARAM_NAMES, PROBING, Options, ScalerEvent, ScaleRecord, UpdateJudge, _add_producer,  # noqa: F401
                    _counts_text, _key, cause_text, event_text, flushed_gradient_text, lost_text, value_text)
from .optypes import ATTENTION_OPS, KEEPS_ORDER, MASK_CARRIERS, MASK_WRITERS, WALKABLE

# Forward outputs remembered within a step for the walk back from a producer's input;
# a step with more starts over. They hold storage until the step ends.
MADE_KEPT = 8192
# -Inf masks and the tensors carrying them, per step.
MASK_VALUES_KEPT = 256
ALLOWED_VALUES_KEPT = 256
# How far back through casts and reshapes a producer's input is followed.
MAX_WALK = 16


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
    function: str = ""         # backward of a custom autograd.Function: its class name
    autocast: bool = False     # autocast was on for the call
    site: dict | None = None   # a cast of the script's into fp16/bf16: where ({"file", "line", "code"})
    view: bool = False         # a view: its output is memory of its input's storage, computed by nobody


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
    site: dict | None = None    # a cast of the script's into fp16/bf16: where it is


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


@dataclass
class _MaskRoot:
    event: dict
    values: int
    readers: list = field(default_factory=list)
    spread: bool = False


class NanWatch(UpdateJudge):
    """The judge of updates, fed by aten calls."""

    def __init__(self, options: Options | None = None):
        super().__init__(options)
        self.intended: dict[tuple, dict] = {}  # (op, module) -> IntendedInf, first-seen order
        self.allowed_events = 0
        self._allowed_values: list[torch.Tensor] = []
        self._made: dict = {}
        self._constants: dict = {}
        self._roots: list[_MaskRoot] = []
        self._mask_values: list = []  # (tensor, [root indices])
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
        m = Made(ev.seq, ev.step, ev.op, ev.module, ev.inserted_cast, out, site=ev.site)
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

    def _script_casts(self, ev: OpEvent) -> list[dict]:
        """A producer that computed in fp16/bf16 outside autocast: the casts of the script's
        that put its inputs there, followed back through moves (reshapes, views)."""
        found = []
        for index, t in ev.inputs:
            if not _floating(t) or not nx.is_low_precision(t.dtype):
                continue
            walk = t
            for _ in range(MAX_WALK):
                m = self._made.get(view_key(walk))
                if m is None:
                    break
                if m.site is not None:
                    found.append({"input": f"input {index}", "dtype": nx.dtype_name(t.dtype), **m.site})
                    break
                if m.op not in WALKABLE or m.first_input is None:
                    break
                walk = m.first_input
        return found

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
        if forward and ev.outputs and not self.low_dtype_name:
            dt = ev.outputs[0].dtype
            if nx.is_low_precision(dt):
                self.note_low_precision(nx.dtype_name(dt))
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
            # A finite result of a -Inf mask: softmax is the reader a mask is meant for (and
            # a fused attention's, whose mask is argument 3); another op that reads it (exp,
            # max) may be right or not: only the user can say.
            if forward and self._mask_values:
                for index, t in ev.inputs:
                    roots = self._mask_roots_of(t)
                    if not roots:
                        continue
                    if ev.op == "softmax" or (ev.op in ATTENTION_OPS and index == 3):
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
        if ev.function:
            event["function"] = ev.function
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

        if ev.view:
            # A view computes nothing: its Inf/NaN are its input's (judged where they were
            # made, or where a computation reads them), or storage beyond the input's own
            # elements that nothing computed (DDP's as_strided views of an uninitialized
            # gradient bucket).
            return
        if not forward:
            self.gradient_event(event, inputs_finite)
            return
        if self.forward_event(event, inputs_finite):
            event["lost"] = self._lost_values(ev, produced)  # a recompute or two, once per new producer
            if not ev.autocast and ev.outputs and nx.is_low_precision(ev.outputs[0].dtype):
                casts = self._script_casts(ev)
                if casts:
                    event["script_casts"] = casts
            _add_producer(self.producers, event)

    # -- steps not heard op by op -----------------------------------------------------

    def forward_failed_at(self, step: int) -> bool:
        """Whether a non-finite forward value of `step` was seen (heard, or replayed)."""
        return self._first_forward_bad is not None and self._first_forward_bad["step"] == step or any(
            p["step"] == step and p["phase"] == "forward" for p in self.producers)

    def unheard_loss(self, step: int, loss: float):
        """A non-finite loss on a step not heard op by op, that running the model's call again
        did not explain (the loss computed outside the model, or no call to replay): the
        step's first non-finite forward value is the loss, its producer unheard."""
        c = [int(math.isnan(loss)), int(loss == math.inf), int(loss == -math.inf)]
        event = {"_seq": 1 << 62, "step": step, "phase": "forward", "op": "loss", "module": "", "inputs": [],
                 "out_nan": c[0], "out_pos_inf": c[1], "out_neg_inf": c[2], "lost": [], "aten": ""}
        if self.forward_event(event, False) is False and self._first_forward_bad is event:
            self._first_forward_note = (f" (step {step} was not heard op by op and the model's call, run again, "
                                        "made nothing non-finite: the loss was computed outside the model; the "
                                        "steps after it are heard)")

    # -- gradients, steps and the scaler -------------------------------------------

    def on_step_begin(self, step: int):
        self._end_masks()
        super().on_step_begin(step)

    def _end_masks(self):
        self._fold_masks(self._roots)
        self._roots.clear()
        self._grad_values.clear()
        self._mask_values.clear()
        self._made.clear()
        self._constants.clear()

    def on_step_end(self, step: int):
        super().on_step_end(step)
        self._end_masks()

    # -- the verdict ------------------------------------------------------------------

    def _intended(self) -> list:
        intended = {k: dict(v, readers=list(v["readers"])) for k, v in self.intended.items()}
        self._fold_masks(self._roots, intended)
        return list(intended.values())



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


