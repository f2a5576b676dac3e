"""Where the AMP run's forward departs from its fp32 twin's, op by op (`ampcheck compare
--script`): the two runs start from the same weights and the same data (same seeds), so at
their first step every op's inputs and output can be set side by side.

The twin (AMPCHECK_RECORD_TWIN_DUMP=PATH) keeps, for each forward op call of its first heard
step, a fixed sample of each floating input and of its output (the same evenly spaced
elements of the flattened tensor, at most SAMPLE of them), and writes them to PATH when that
step ends. The AMP run (AMPCHECK_RECORD_TWIN_AGAINST=PATH) reads them and measures, for the
same calls (matched by op instance and call number), each tensor's relative difference from
the twin's, ||amp - twin|| / ||twin|| in float64 over the sample: the output's, and the
largest of its inputs' with the op that made that input ("from"; through autocast's casts);
and for an op that ran in 16 bits its own rounding ("own": its output against the same call
in fp32 on the inputs it received). What an op adds is the first less the second: its own rounding, or
the cancellation that turns its inputs' small rounding into a large difference (a
normalization over values with a large mean). It writes them to PATH.births.json, with each parameter's gradient, as
the step's update receives it, against the twin's.

An op whose input or output differs in shape from the twin's (a different path) is skipped;
a tensor the twin has no sample of counts as not differing (a parameter, the data).
"""

from __future__ import annotations

import json
import math
import os
import weakref

import torch

from . import listen

SAMPLE = 4096


def _sample(t: torch.Tensor) -> torch.Tensor:
    flat = listen.local(t.detach()).reshape(-1)
    n = flat.numel()
    if n > SAMPLE:
        flat = flat[torch.linspace(0, n - 1, SAMPLE, dtype=torch.float64).long()]
    return flat.double().cpu()


def _difference(amp: torch.Tensor, twin: torch.Tensor) -> float:
    if amp.numel() != twin.numel():
        return math.nan
    norm = float(torch.linalg.vector_norm(twin))
    diff = float(torch.linalg.vector_norm(amp - twin))
    if not (math.isfinite(norm) and math.isfinite(diff)):
        return math.inf
    return diff / norm if norm > 0 else (0.0 if diff == 0 else math.inf)


class TwinProbe:
    """One run's side: dumping (the twin) or measuring against the dump (the AMP run)."""

    def __init__(self, dump: str = "", against: str = ""):
        self.dump, self.against = dump, against
        self.step = None  # the step it probes: the first with a forward op heard
        self.calls: dict = {}  # instance name -> calls seen in that step
        self.samples: dict = {}  # "name@k" -> {"in": [...], "out": tensor}
        self.twin: dict = {}
        self.births: list = []
        self.gradients: list = []  # per parameter: its gradient's difference from the twin's
        self.producers: dict = {}  # id(tensor) -> (weakref, the op instance that made it)
        self.done = False
        if against:
            try:
                self.twin = torch.load(against, weights_only=True)
            except Exception as e:  # torch.load's own errors (pickle's among them) vary by version
                raise ValueError(f"the fp32 twin's samples {against} could not be read ({e})") from None

    def _producer(self, t):
        hit = self.producers.get(id(t))
        return hit[1] if hit is not None and hit[0]() is t else ""

    def _made(self, outs, name: str):
        for t in outs:
            if isinstance(t, torch.Tensor) and name:
                self.producers[id(t)] = (weakref.ref(t), name)

    def on_cast(self, step: int, tensors, outs):
        """A cast autocast inserted (no op instance of its own): its result was made by
        whatever made its input."""
        if self.step is None:
            self.step = step
        if not self.done and self.step == step and tensors:
            self._made(outs, self._producer(tensors[0]))

    def on_op(self, step: int, inst, tensors, outs, recompute=None):
        """`recompute`: the same call in fp32 on the inputs it received (a 16-bit op's), whose
        difference from its output is the op's own rounding ("own")."""
        if self.done:
            return
        if self.step is None:
            self.step = step
        if step != self.step:
            self.finish()
            return
        out = next((t for t in outs if t.is_floating_point()), None)
        if out is None:
            return
        # A widening cast (the script's .float() of a 16-bit result) adds nothing: what it
        # returns was made where its input was.
        widening = (inst.type == "cast" and tensors and tensors[0].is_floating_point()
                    and out.element_size() > tensors[0].element_size())
        self._made(outs, (self._producer(tensors[0]) if widening else "") or inst.name)
        k = self.calls.get(inst.name, 0)
        self.calls[inst.name] = k + 1
        key = f"{inst.name}@{k}"
        with listen.internal(), torch.no_grad():
            inputs = [_sample(t) if t.is_floating_point() else None for t in tensors]
            if self.dump:
                self.samples[key] = {"in": [x if x is not None else torch.empty(0) for x in inputs],
                                     "out": _sample(out)}
                return
            twin = self.twin.get(key)
            if twin is None:
                return
            d_out = _difference(_sample(out), twin["out"])
            if math.isnan(d_out):
                return
            d_in, source = 0.0, ""
            for t, x, y in zip(tensors, inputs, twin["in"]):
                if x is None or y.numel() == 0:
                    continue
                d = _difference(x, y)
                if math.isnan(d):
                    return  # another path than the twin's: nothing to set side by side
                if d > d_in or not source:
                    d_in, source = max(d_in, d), self._producer(t) or source
            # JSON has no Infinity: a difference that is not finite is written as null.
            own = None
            if recompute is not None:
                ref = recompute()
                if isinstance(ref, torch.Tensor) and ref.numel() == out.numel():
                    own = _difference(_sample(out), _sample(ref))
                    own = own if math.isfinite(own) else None
            self.births.append({"own": own, "name": inst.name, "type": inst.type, "module": inst.module,
                                "dtype": str(out.dtype).replace("torch.", ""),
                                "input": d_in if math.isfinite(d_in) else None,
                                "output": d_out if math.isfinite(d_out) else None, "from": source})

    def on_gradients(self, step: int, named):
        """The gradients the probed step's update is about to use (unscaled: a GradScaler's
        step unscales them first), per parameter name."""
        if self.done or self.step is None or step != self.step:
            return
        with listen.internal(), torch.no_grad():
            for name, grad in named:
                if grad is None or not grad.is_floating_point():
                    continue
                if self.dump:
                    self.samples[f"grad:{name}"] = {"in": [], "out": _sample(grad)}
                    continue
                twin = self.twin.get(f"grad:{name}")
                if twin is None:
                    continue
                d = _difference(_sample(grad), twin["out"])
                if not math.isnan(d):
                    self.gradients.append({"parameter": name, "difference": d if math.isfinite(d) else None})

    def finish(self):
        """Writes what the probed step gave (at its end, or at the run's)."""
        if self.done:
            return
        self.done = True
        if self.dump:
            tmp = self.dump + ".tmp"
            torch.save(self.samples, tmp)
            os.replace(tmp, self.dump)
        elif self.against:
            out = self.against + ".births.json"
            with open(out + ".tmp", "w") as f:
                json.dump({"step": self.step or 0, "ops": self.births, "gradients": self.gradients}, f,
                          allow_nan=False)
            os.replace(out + ".tmp", out)
