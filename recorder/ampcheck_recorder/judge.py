"""The judge of a run's updates, for any framework: what the loss scaler made of the
non-finite values a run's calls produced, and the run's failures and verdict inputs.

The rules are the engine's (inspector/nan_source.h; docs/inspector.md, "NaN/Inf source and
loss-scale history"); nonfinite.py's NanWatch feeds it PyTorch's aten calls, and
paddle_recorder.py feeds it PaddlePaddle's layer calls. It needs no framework: events are
dicts, a producer's `_seq` orders them, and dtypes are their names ("float16").

  forward_event    a forward value with Inf/NaN: the first is remembered (the run's
                   forward_non_finite failure), producers (finite inputs) are kept per
                   (op, module, phase) at their first occurrence, propagators counted.
  gradient_event   a backward or optimizer value with Inf/NaN: held until the scaler's next
                   update judges it (on_scaler_update): absorbed when found_inf, the step
                   skipped and the scale lowered; a real failure otherwise.
  on_loss, on_gradients, on_step_end
                   the gradient-underflow reading (every gradient 0 for steps in a row).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# The smallest normal value of each low-precision dtype, by name.
MIN_NORMAL = {"float16": 2.0 ** -14, "bfloat16": 2.0 ** -126}


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
# Skips in a row with one cause that show the overflow does not follow the loss scale
# before they read "persistent" (inspector/nan_source.cpp's kPersistentSkips).
PERSISTENT_SKIPS = 3


MAX_PARAM_NAMES = 8


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


def op_text(e: dict, grad: bool = True) -> str:
    """An event's op as a sentence names it: "mm_grad" for a backward call (when `grad`),
    "exp in the backward of autograd.Function ScaledExp" for a call in a custom Function's
    backward, the script's own code."""
    if e.get("function"):
        return f"{e['op']} in the backward of autograd.Function {e['function']}"
    return e["op"] + ("_grad" if grad and e["phase"] == "backward" else "")


def _event_key(e: dict):
    return (e["op"], e["phase"], e["module"], e.get("function", ""))


def _follows_scale(prev: ScaleRecord, cur: ScaleRecord) -> bool:
    """Whether an input of the same op's event moved with the loss scale between two skips:
    its largest magnitude changed by a ratio nearer the scales' ratio than to 1. A pair
    that cannot show it (the scale did not drop, no comparable input) counts as following."""
    q = cur.event.scale_before / prev.event.scale_before if prev.event.scale_before > 0 else 1.0
    if not (0 < q < 1):
        return True
    before = {i["role"]: i.get("absmax", math.nan) for i in prev.cause["event"].get("inputs", [])}
    compared = False
    for i in cur.cause["event"].get("inputs", []):
        a, b = i.get("absmax", math.nan), before.get(i["role"], math.nan)
        if not (a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)):
            continue
        compared = True
        r = math.log2(a / b)
        if abs(r - math.log2(q)) < abs(r):
            return True
    return not compared


def cause_text(c: dict | None) -> str:
    """What made an update's gradients non-finite, in one line (inspector's cause_text)."""
    if c is None:
        return "no backward op held it"
    where = lambda m: f"in '{m}'" if m else "outside any module"
    e = c["event"]
    kind = c["kind"]
    if kind == "op":
        phase = "" if e.get("function") else f" ({e['phase']})"
        s = (f"{op_text(e)} {where(e['module'])}{phase} made "
             f"{_counts_text((e['out_nan'], e['out_pos_inf'], e['out_neg_inf']))} from finite values")
    elif kind == "accumulation":
        s = (f"the gradient reaching {op_text(e)} {where(e['module'])} was already non-finite: autograd's sum "
             "of the gradients of a value read in several places (a residual, a reused activation) overflowed")
    elif kind == "forward":
        s = "a forward value was non-finite already (the run's forward failure)"
        if e is not None:
            s += f"; {op_text(e)} {where(e['module'])} read it and passed the gradients on non-finite"
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


def _scale_text(scale: float) -> str:
    if scale > 0 and math.isfinite(scale) and math.log2(scale) == math.floor(math.log2(scale)):
        return f"2^{int(math.log2(scale))}"
    return f"{scale:g}"


def persistent_text(history: list, first: ScaleRecord) -> str:
    """What a run of persistent skips shows, from its first record on."""
    run = []
    for r in history[history.index(first):]:
        if r.reading != "persistent":
            break
        run.append(r)
    return (f"the same op made it at every loss scale from {_scale_text(run[0].event.scale_before)} down to "
            f"{_scale_text(run[-1].event.scale_before)} ({len(run)} updates in a row) while its inputs did not "
            "shrink with the scale: no loss scale absorbs this overflow; compute that op in fp32")


def _skip(r: ScaleRecord) -> dict:
    """A skipped update as the report lists it (SkippedUpdate)."""
    c = r.cause or {"kind": "unknown", "event": None, "params": 0, "names": []}
    out = {"update": r.event.step, "scale_before": r.event.scale_before, "scale_after": r.event.scale_after,
           "reading": r.reading, "cause": c["kind"]}
    if c["event"] is not None:
        out["event"] = c["event"]
    out.update(params=c["params"], param_names=list(c["names"]), text=cause_text(r.cause))
    return out


def _num(v: float) -> str:
    return f"{v:g}"


def event_text(e: dict) -> str:
    out = (e["out_nan"], e["out_pos_inf"], e["out_neg_inf"])
    return (f"{op_text(e, grad=False)} in module '{e['module']}', {e['phase']}, step {e['step']}: output "
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


def _reacted(e: ScalerEvent) -> bool:
    """The scaler reacted to the overflow (inspector/nan_source.cpp's reacted()): the scale
    dropped, or a back-off is on its way (Paddle counts bad steps up to
    decr_every_n_nan_or_inf; DeepSpeed spends its hysteresis first)."""
    return e.scale_after < e.scale_before or e.counters.get("decr_count", 0) > 0 or "cur_hysteresis" in e.counters


class UpdateJudge:
    def __init__(self, options: Options | None = None):
        self.options = options or Options()
        self.producers: list[dict] = []
        self.propagators = _Propagation()
        self.scale_history: list[ScaleRecord] = []
        self.failures: list[dict] = []
        self.events_checked = 0
        self.healed_updates = 0
        self._stepped_any = False
        self._streak: list[ScaleRecord] = []   # skips in a row with one op as their cause
        self._streak_independent = True        # and in each pair, no input followed the scale
        self._last_stepped_scale = 0.0
        self._lowest_scale = math.inf
        self._pending = _Pending()
        self._below_floor = False
        self._first_forward_bad: dict | None = None
        self._first_forward_note = ""
        self._forward_bad_since_update = False
        self._step_updates = 0
        self._step_nonzero = False
        self._step_flushed: dict | None = None
        self._step_loss = math.nan
        self._initial_loss = math.nan
        self._stepped = 0
        self._zero_run: dict | None = None
        self._zero_longest: dict | None = None
        self._step = 1
        self.mask_failures: list[dict] = []
        # The first low-precision dtype a forward value had ("float16"), or "" for none.
        self.low_dtype_name = ""

    def note_low_precision(self, dtype_name: str):
        if not self.low_dtype_name:
            self.low_dtype_name = dtype_name

    # -- the events -------------------------------------------------------------------

    def gradient_event(self, event: dict, inputs_finite: bool):
        """A backward or optimizer-phase value with Inf/NaN: judged by the next scaler update."""
        p = self._pending
        if len(p.attribution) < self.options.max_listed:
            p.attribution.append(event)
        if inputs_finite:
            _add_producer(p.producers, event)
        else:
            p.propagators.add(event["op"])

    def forward_event(self, event: dict, inputs_finite: bool) -> bool:
        """A forward value with Inf/NaN. True when it is a new producer the caller adds
        (with _add_producer, after filling its lost values)."""
        self._forward_bad_since_update = True
        if self._first_forward_bad is None or event["_seq"] < self._first_forward_bad["_seq"]:
            self._first_forward_bad = event
            self._first_forward_note = ""
        if not inputs_finite:
            self.propagators.add(event["op"])
            return False
        return not any(_key(p) == _key(event) for p in self.producers)

    # -- gradients, steps and the scaler -------------------------------------------

    def on_step_begin(self, step: int):
        self._step = step

    def on_step_end(self, step: int):
        self._end_gradient_step(step)

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
        rec.absorbed = e.found_inf and e.skipped and _reacted(e)
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
            elif rec.forward_non_finite:
                # The gradients followed a forward value that was non-finite already.
                cause["kind"] = "forward"
                if rec.attribution:
                    cause["event"] = rec.attribution[0]
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
        self._note_streak(rec)
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
            # The update that took it there says what kept overflowing.
            why = f"; the update skipped for: {cause_text(rec.cause)}" if rec.cause is not None else ""
            self.failures.append({"kind": "scale_below_floor", "step": e.step,
                                  "detail": f"scale {_num(e.scale_after)} below the floor "
                                            f"{_num(self.options.scale_floor)}{why}"})
        self._below_floor = below
        self.scale_history.append(rec)
        self._pending = _Pending()

    def _note_streak(self, rec: ScaleRecord):
        """The persistent reading (docs/inspector.md, skipped updates): an op that makes
        Inf/NaN from finite values whatever the loss scale (exp of a saved activation, a
        custom Function's own arithmetic) has the scaler back off forever; each skip looks
        like probing (the scale at a new low) and the run never trains. Skips in a row with
        the same op as their cause, whose inputs did not shrink with the scale between
        any two of them, read "persistent" from the third: not probing, counted."""
        c = rec.cause
        probing_skip = rec.event.skipped and rec.absorbed and rec.reading in PROBING
        if not (probing_skip and c is not None and c["kind"] == "op" and c["event"] is not None):
            self._streak, self._streak_independent = [], True
            return
        if self._streak and _event_key(self._streak[0].cause["event"]) == _event_key(c["event"]):
            self._streak_independent = (self._streak_independent
                                        and not _follows_scale(self._streak[-1], rec))
        else:
            self._streak, self._streak_independent = [], True
        self._streak.append(rec)
        if len(self._streak) >= PERSISTENT_SKIPS and self._streak_independent:
            for r in self._streak:
                r.reading = "persistent"

    def _merge_real(self, p: _Pending):
        for ev in p.producers:
            _add_producer(self.producers, ev)
        self.propagators.merge(p.propagators)

    def _intended(self) -> list:
        """The intended -Inf masks (the frameworks that can tell one)."""
        return []

    # -- the verdict ------------------------------------------------------------------

    def report(self) -> dict:
        """The NonFinite object's content and what the summary needs, for the run so far."""
        producers = list(self.producers)
        propagators = _Propagation()
        propagators.merge(self.propagators)
        failures = list(self.failures)
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
                    if first.reading == "persistent":
                        detail += "; " + persistent_text(h, first)
                failures.append({"kind": "skipped_fraction", "step": updates, "detail": detail})
            elif probing and skipped / updates > self.options.max_skipped_fraction:
                probing["excused"] = True  # counting every skip would have failed the run: name the cure
        skips = [_skip(r) for r in h if r.event.skipped]

        zero = None
        z = self._zero_longest
        converged = (z is not None and not math.isnan(z["loss"]) and not math.isnan(self._initial_loss)
                     and z["loss"] < 0.1 * self._initial_loss)
        if (self.options.zero_gradient_steps > 0 and self.low_dtype_name and z is not None and not converged
                and z["steps"] >= min(self.options.zero_gradient_steps, self._stepped)):
            dtype = self.low_dtype_name
            zero = {"first_step": z["first_step"], "steps": z["steps"], "stepped": self._stepped,
                    "dtype": dtype, "scale_needed": 0.0, "loss": z["loss"],
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
                    zero["scale_needed"] = 2.0 ** math.ceil(math.log2(scale * MIN_NORMAL[evidence["dtype"]]
                                                                      / abs(evidence["value"])))
            detail = (f"every parameter gradient was 0 in {dtype} for {z['steps']} optimizer "
                      f"step(s) in a row from step {z['first_step']}")
            if evidence is not None:
                detail += "; " + flushed_gradient_text(evidence)
            failures.append({"kind": "gradient_underflow", "step": z["first_step"], "detail": detail})

        failures.sort(key=lambda f: f["step"])  # stable: same-step failures keep their order
        return {
            "producers": producers,
            "propagators": propagators,
            "failures": failures,
            "intended": self._intended(),
            "probing": probing,
            "zero_gradients": zero,
            "updates": updates,
            "skipped": skipped,
            "absorbed": sum(1 for r in h if r.absorbed),
            "skips": skips,
            "mask_failures": [dict(f) for f in self.mask_failures],
            "healed_updates": self.healed_updates,
        }
