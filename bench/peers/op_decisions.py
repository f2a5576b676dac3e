"""O1 op decisions: ampcheck's against PyTorch's (probed) and PaddlePaddle's (from its lists).

For every op in ampcheck's registry and for bfloat16 and float16 this puts side by side
the dtype the op runs in at O1, in the two situations `ampcheck ops` reports:

  fp32 inputs  every floating input float32 (the model's data; parameters at O1);
  low inputs   activations already in the low dtype, parameters as decorate leaves them,
               which at O1 is float32 (cli/ops_command.cpp, input_dtypes()), integer
               inputs (labels, indices, masks) int64.

PyTorch is probed: each op is called under torch.autocast("cpu", dtype=...) with those
inputs and the output's dtype is recorded (or the error it raised).

PaddlePaddle cannot be probed on a CPU: paddle.amp.auto_cast warns "amp_guard can only be
enabled on CUDAPlace, XPUPlace, and CustomPlace ... so it makes no effect" and turns itself
off (python/paddle/amp/auto_cast.py, amp_guard); the C++ side would also send every op on
CPU tensors to float32 (GetDtypeWithPlace, below). So Paddle's decision is computed from
the lists it exposes, paddle.amp.amp_lists.white_list()[dtype]["O1"] and
black_list()[dtype]["O1"], under the name Paddle's dispatcher gives the op. That name is
observed, not guessed: each op's Paddle API is run once on the CPU with Paddle's operator
statistics on (paddle.amp.debugging's FLAGS_low_precision_op_list), which record the same
fluid op names (matmul_v2, elementwise_add, lookup_table_v2, ...) that the AMP lists use.

Usage (reports, never judges: exit 0 unless it crashes):
  OMP_NUM_THREADS=2 bench/peers/.venv/bin/python bench/peers/op_decisions.py \\
      --ampcheck build/cli/ampcheck --out-md X.md --out-json X.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import warnings
from typing import Callable, Sequence

LOW_DTYPES = ("bfloat16", "float16")
FP32 = "float32"
SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}

# How a model feeds each input of an op, exactly as cli/ops_command.cpp inputs_of() says
# (ampcheck's columns are computed from it): "act" an activation, "par" a parameter
# (float32 at O1 in both columns), "int" integer labels, indices or masks (never cast).
# Ops not listed take activations only (two for the binary and n-ary ones).
INPUTS: dict[str, tuple[str, ...]] = {
    "linear": ("act", "par", "par"),
    "conv2d": ("act", "par", "par"),
    "layer_norm": ("act", "par", "par"),
    "batch_norm": ("act", "par", "par", "par", "par"),
    "embedding": ("int", "par"),
    "cross_entropy": ("act", "int"),
    "masked_fill": ("act", "int"),
    "where": ("int", "act", "act"),
}
BINARY = {"matmul", "bmm", "add", "sub", "mul", "div", "mse_loss", "concat"}


def inputs_of(op: str) -> tuple[str, ...]:
    if op in INPUTS:
        return INPUTS[op]
    return ("act", "act") if op in BINARY else ("act",)


# ---------------------------------------------------------------------------- ampcheck

def ampcheck_ops(ampcheck: str, dtype: str, extra_args: Sequence[str] = ()) -> dict:
    """`ampcheck ops --json --level O1 --dtype DTYPE [extra_args]`, parsed."""
    cmd = [ampcheck, "ops", "--json", "--level", "O1", "--dtype", dtype, *extra_args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def ampcheck_version(ampcheck: str) -> str:
    r = subprocess.run([ampcheck, "--version"], capture_output=True, text=True)
    return (r.stdout or r.stderr).strip()


# ---------------------------------------------------------------------------- PyTorch

class _TorchInputs:
    """Makes a probe's inputs: activations in `act_dtype`, parameters float32."""

    def __init__(self, torch, act_dtype, device="cpu"):
        self.torch, self.act_dtype, self.device = torch, act_dtype, device

    def act(self, *shape, positive=False):
        t = self.torch.rand(*shape, device=self.device)
        t = t + 0.5 if positive else t - 0.5
        return t.to(self.act_dtype)

    def par(self, *shape):
        return self.torch.rand(*shape, device=self.device) + 0.5  # fp32: O1 casts no parameter

    def index(self, high, *shape):
        return self.torch.randint(0, high, shape, dtype=self.torch.int64, device=self.device)

    def mask(self, *shape):  # torch.where / masked_fill take bool; ampcheck's are i64 != 0
        return self.torch.rand(*shape, device=self.device) > 0.5


def _torch_probes(torch) -> dict[str, Callable[[_TorchInputs], object]]:
    F = torch.nn.functional
    return {
        "matmul": lambda m: torch.matmul(m.act(4, 8), m.act(8, 3)),
        "linear": lambda m: F.linear(m.act(4, 8), m.par(3, 8), m.par(3)),
        "bmm": lambda m: torch.bmm(m.act(2, 4, 8), m.act(2, 8, 3)),
        "conv2d": lambda m: F.conv2d(m.act(2, 3, 8, 8), m.par(4, 3, 3, 3), m.par(4)),
        # training mode; F.batch_norm's order is (x, running_mean, running_var, weight, bias)
        "batch_norm": lambda m: F.batch_norm(m.act(2, 3, 4, 4), m.par(3), m.par(3), m.par(3),
                                             m.par(3), training=True),
        "layer_norm": lambda m: F.layer_norm(m.act(4, 8), (8,), m.par(8), m.par(8)),
        "relu": lambda m: torch.relu(m.act(4, 8)),
        "gelu": lambda m: F.gelu(m.act(4, 8)),
        "silu": lambda m: F.silu(m.act(4, 8)),
        "sigmoid": lambda m: torch.sigmoid(m.act(4, 8)),
        "tanh": lambda m: torch.tanh(m.act(4, 8)),
        "hardswish": lambda m: F.hardswish(m.act(4, 8)),
        "hardsigmoid": lambda m: F.hardsigmoid(m.act(4, 8)),
        "add": lambda m: m.act(4, 8) + m.act(4, 8),
        "sub": lambda m: m.act(4, 8) - m.act(4, 8),
        "mul": lambda m: m.act(4, 8) * m.act(4, 8),
        "div": lambda m: m.act(4, 8) / m.act(4, 8, positive=True),
        "add_scalar": lambda m: m.act(4, 8) + 1.5,
        "sub_scalar": lambda m: m.act(4, 8) - 1.5,
        "mul_scalar": lambda m: m.act(4, 8) * 1.5,
        "div_scalar": lambda m: m.act(4, 8) / 1.5,
        "neg": lambda m: torch.neg(m.act(4, 8)),
        "abs": lambda m: torch.abs(m.act(4, 8)),
        "square": lambda m: torch.square(m.act(4, 8)),
        "exp": lambda m: torch.exp(m.act(4, 8)),
        "log": lambda m: torch.log(m.act(4, 8, positive=True)),
        "sqrt": lambda m: torch.sqrt(m.act(4, 8, positive=True)),
        "rsqrt": lambda m: torch.rsqrt(m.act(4, 8, positive=True)),
        # ampcheck's pow is tensor ** scalar (engine/ops/ops.h: pow(x, double exponent))
        "pow": lambda m: torch.pow(m.act(4, 8, positive=True), 2.5),
        "reciprocal": lambda m: torch.reciprocal(m.act(4, 8, positive=True)),
        "erf": lambda m: torch.erf(m.act(4, 8)),
        "clamp": lambda m: torch.clamp(m.act(4, 8), -0.25, 0.25),
        "sum": lambda m: torch.sum(m.act(4, 8)),
        "mean": lambda m: torch.mean(m.act(4, 8)),
        "max": lambda m: torch.amax(m.act(4, 8), dim=1),  # ampcheck's max is a reduction
        "softmax": lambda m: torch.softmax(m.act(4, 8), dim=-1),
        "log_softmax": lambda m: torch.log_softmax(m.act(4, 8), dim=-1),
        "cross_entropy": lambda m: F.cross_entropy(m.act(4, 8), m.index(8, 4)),
        "mse_loss": lambda m: F.mse_loss(m.act(4, 8), m.act(4, 8)),
        "embedding": lambda m: F.embedding(m.index(10, 2, 3), m.par(10, 4)),
        "dropout": lambda m: F.dropout(m.act(4, 8), p=0.5, training=True),
        "max_pool2d": lambda m: F.max_pool2d(m.act(2, 3, 8, 8), 2),
        "avg_pool2d": lambda m: F.avg_pool2d(m.act(2, 3, 8, 8), 2),
        "adaptive_avg_pool2d": lambda m: F.adaptive_avg_pool2d(m.act(2, 3, 8, 8), (1, 1)),
        "reshape": lambda m: m.act(4, 8).reshape(8, 4),
        "permute": lambda m: m.act(2, 4, 8).permute(2, 0, 1),
        "concat": lambda m: torch.cat([m.act(4, 8), m.act(4, 8)]),
        "slice": lambda m: m.act(4, 8)[:, 1:5],
        "where": lambda m: torch.where(m.mask(4, 8), m.act(4, 8), m.act(4, 8)),
        "masked_fill": lambda m: m.act(4, 8).masked_fill(m.mask(4, 8), 0.0),
    }


def _short_error(e: BaseException) -> str:
    lines = str(e).strip().splitlines() or [type(e).__name__]
    msg = lines[0]
    return "error: " + (msg if len(msg) <= 100 else msg[:97] + "...")


def _run_probes(torch, probes, ops, low_t, device, autocast) -> dict:
    results = {}
    for op in ops:
        fn = probes.get(op)
        if fn is None:
            results[op] = ("error: no probe", "error: no probe")
            continue
        got = []
        for act in (torch.float32, low_t):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with autocast():
                        out = fn(_TorchInputs(torch, act, device))
                got.append(str(out.dtype).removeprefix("torch."))
            except Exception as e:  # an op without a kernel for this dtype, say
                got.append(_short_error(e))
        results[op] = tuple(got)
    return results


def probe_torch(ops: list[str], low: str) -> tuple[dict, dict]:
    """{op: (fp32-inputs result, low-inputs result)} under CPU autocast, plus facts."""
    import torch

    torch.manual_seed(0)
    low_t = getattr(torch, low)
    with torch.autocast("cpu", dtype=low_t):
        active = torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == low_t
    results = _run_probes(torch, _torch_probes(torch), ops, low_t, "cpu",
                          lambda: torch.autocast("cpu", dtype=low_t))
    return results, {"torch_version": torch.__version__, "autocast_active": bool(active)}


def probe_torch_cuda(ops: list[str], low: str) -> tuple[dict | None, str]:
    """The same probes under CUDA autocast, for reference (ampcheck's default lists
    follow PyTorch's CUDA lists, docs/amp.md). With a GPU: real tensors. Without one:
    fake CUDA tensors (torch._subclasses.FakeTensorMode), which go through the same
    dispatcher, AutocastCUDA wrappers included, and compute only dtypes and shapes.
    torch.autocast("cuda") switches itself off when no GPU is present, so the autocast
    state is set directly. Returns (results or None, how it was obtained)."""
    import contextlib

    import torch

    low_t = getattr(torch, low)
    probes = _torch_probes(torch)
    if torch.cuda.is_available():
        return (_run_probes(torch, probes, ops, low_t, "cuda",
                            lambda: torch.autocast("cuda", dtype=low_t)), "GPU")

    @contextlib.contextmanager
    def cuda_autocast():
        was_on, was_dtype = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
        torch.set_autocast_enabled("cuda", True)
        torch.set_autocast_dtype("cuda", low_t)
        torch.autocast_increment_nesting()
        try:
            yield
        finally:
            if torch.autocast_decrement_nesting() == 0:
                torch.clear_autocast_cache()
            torch.set_autocast_enabled("cuda", was_on)
            torch.set_autocast_dtype("cuda", was_dtype)

    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True):
            results = _run_probes(torch, probes, ops, low_t, "cuda", cuda_autocast)
    except Exception as e:  # a private API that moved: leave the column out
        return None, _short_error(e)
    return results, "fake CUDA tensors (no GPU here)"


# ---------------------------------------------------------------------------- PaddlePaddle
#
# Paddle's dynamic-graph O1 rule (paddle/fluid/imperative/amp_utils.h, GetAmpDestDtype and
# GetPromoteType; compiled into the wheel, read from PaddlePaddle/Paddle's source):
#   - op in the allow (white) list  -> the AMP dtype;
#   - op in the block (black) list  -> float32;
#   - otherwise ("gray")            -> GetPromoteType: float32 if any input is float32,
#     else the AMP dtype; batch_norm/layer_norm/sync_batch_norm look at input X alone
#     (their scale/bias are never cast: AmpAutoCast returns them untouched);
#   - then float32 wherever no input sits on a GPU/XPU/custom place (GetDtypeWithPlace),
#     which with the Python-side check makes AMP a no-op on CPU.
# What the wheel's Python side says: the auto_cast() docstring (paddle/amp/auto_cast.py)
# describes O1 by its white and black lists only, and use_promote ("Whether to promotes
# to fp32 when op has any float32 inputs. It is only supported when amp level is O2");
# amp_guard() hands the lists to the tracer (core._set_amp_op_list) and the rule above
# is C++. The static graph's rule is a different one (paddle/static/amp/fp16_utils.py,
# get_amp_dst_dtype: a gray_list op follows the lists of the ops that produced its
# inputs, an op on no list runs float32); it is not what auto_cast does.
# Not modelled: ops Paddle marks unsupported in the low dtype on the device (then
# float32); that table comes from the GPU build's kernels and cannot be read here.

def _paddle_calls(paddle) -> dict[str, tuple[list[str], Callable[[], object]]]:
    """{op: (the Paddle ops that decide its dtype, first to last; the call)}; inputs are
    made here, outside the statistics window, so only the op's own kernels are counted."""
    F = paddle.nn.functional
    r = lambda *s: paddle.rand(list(s)) - 0.5  # noqa: E731
    p = lambda *s: paddle.rand(list(s)) + 0.5  # noqa: E731
    a, b, x4 = r(4, 8), r(4, 8), r(2, 3, 8, 8)
    pos = p(4, 8)
    mask = r(4, 8) > 0
    labels = paddle.to_tensor([1, 2, 3, 0], dtype="int64")
    idx = paddle.to_tensor([[1, 2, 3], [4, 5, 6]], dtype="int64")
    w8_3, b3, w_conv, b4, c3 = p(8, 3), p(3), p(4, 3, 3, 3), p(4), p(3)
    bm_a, bm_b, emb_w, ln_w, ln_b = r(2, 4, 8), r(2, 8, 3), p(10, 4), p(8), p(8)
    return {
        "matmul": (["matmul_v2"], lambda: paddle.matmul(a, b.T)),
        # A CUDA build's F.linear calls _C_ops.linear_v2 (paddle/nn/functional/common.py,
        # linear()); a CPU build calls _C_ops.linear, which runs matmul_v2 + elementwise_add.
        "linear": (["linear_v2"], lambda: F.linear(a, w8_3, b3)),
        "bmm": (["bmm"], lambda: paddle.bmm(bm_a, bm_b)),
        "conv2d": (["conv2d"], lambda: F.conv2d(x4, w_conv, b4)),
        "batch_norm": (["batch_norm"], lambda: F.batch_norm(x4, c3, c3, c3, c3, training=True)),
        "layer_norm": (["layer_norm"], lambda: F.layer_norm(a, 8, ln_w, ln_b)),
        "relu": (["relu"], lambda: F.relu(a)),
        "gelu": (["gelu"], lambda: F.gelu(a)),
        "silu": (["silu"], lambda: F.silu(a)),
        "sigmoid": (["sigmoid"], lambda: F.sigmoid(a)),
        "tanh": (["tanh"], lambda: paddle.tanh(a)),
        "hardswish": (["hard_swish"], lambda: F.hardswish(a)),
        "hardsigmoid": (["hard_sigmoid"], lambda: F.hardsigmoid(a)),
        "add": (["elementwise_add"], lambda: paddle.add(a, b)),
        "sub": (["elementwise_sub"], lambda: paddle.subtract(a, b)),
        "mul": (["elementwise_mul"], lambda: paddle.multiply(a, b)),
        "div": (["elementwise_div"], lambda: paddle.divide(a, pos)),
        "add_scalar": (["scale"], lambda: a + 1.5),
        "sub_scalar": (["scale"], lambda: a - 1.5),
        "mul_scalar": (["scale"], lambda: a * 1.5),
        "div_scalar": (["div_scale"], lambda: a / 1.5),
        "neg": (["scale"], lambda: paddle.neg(a)),
        "abs": (["abs"], lambda: paddle.abs(a)),
        "square": (["square"], lambda: paddle.square(a)),
        "exp": (["exp"], lambda: paddle.exp(a)),
        "log": (["log"], lambda: paddle.log(pos)),
        "sqrt": (["sqrt"], lambda: paddle.sqrt(pos)),
        "rsqrt": (["rsqrt"], lambda: paddle.rsqrt(pos)),
        "pow": (["pow"], lambda: paddle.pow(pos, 2.5)),  # tensor ** scalar, as ampcheck's
        "reciprocal": (["reciprocal"], lambda: paddle.reciprocal(pos)),
        "erf": (["erf"], lambda: paddle.erf(a)),
        "clamp": (["clip"], lambda: paddle.clip(a, -0.25, 0.25)),
        "sum": (["reduce_sum"], lambda: paddle.sum(a)),
        "mean": (["reduce_mean"], lambda: paddle.mean(a)),
        "max": (["reduce_max"], lambda: paddle.max(a, axis=1)),
        "softmax": (["softmax"], lambda: F.softmax(a)),
        "log_softmax": (["log_softmax"], lambda: F.log_softmax(a)),
        # composites: the loss kernel, then the reduction that makes the result
        "cross_entropy": (["softmax_with_cross_entropy", "mean"],
                          lambda: F.cross_entropy(a, labels)),
        "mse_loss": (["elementwise_sub", "square", "reduce_mean"], lambda: F.mse_loss(a, b)),
        "embedding": (["lookup_table_v2"], lambda: F.embedding(idx, emb_w)),
        "dropout": (["dropout"], lambda: F.dropout(a, 0.5, training=True)),
        "max_pool2d": (["pool2d"], lambda: F.max_pool2d(x4, 2)),
        "avg_pool2d": (["pool2d"], lambda: F.avg_pool2d(x4, 2)),
        "adaptive_avg_pool2d": (["pool2d"], lambda: F.adaptive_avg_pool2d(x4, 1)),
        "reshape": (["reshape"], lambda: paddle.reshape(a, [8, 4])),
        "permute": (["transpose2"], lambda: paddle.transpose(a, [1, 0])),
        "concat": (["concat"], lambda: paddle.concat([a, b])),
        "slice": (["slice"], lambda: a[:, 1:5]),
        "where": (["where"], lambda: paddle.where(mask, a, b)),
        "masked_fill": (["masked_fill"], lambda: paddle.masked_fill(a, mask, 0.0)),
    }


def _import_paddle():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import paddle
    return paddle


def paddle_op_names(ops: list[str]) -> tuple[dict, dict]:
    """{op: (chain of deciding Paddle op names, names observed when its API ran on CPU)}."""
    paddle = _import_paddle()
    core = paddle.base.core
    calls = _paddle_calls(paddle)
    found = {}
    for op in ops:
        if op not in calls:
            found[op] = ([], [])
            continue
        chain, fn = calls[op]
        core.clear_low_precision_op_list()
        paddle.set_flags({"FLAGS_low_precision_op_list": 1})
        try:
            fn()
            seen = sorted(core.get_low_precision_op_list())
        except Exception as e:
            seen = [_short_error(e)]
        finally:
            paddle.set_flags({"FLAGS_low_precision_op_list": 0})
        found[op] = (chain, seen)
    # The claim that auto_cast does nothing on a CPU, checked rather than assumed.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with paddle.amp.auto_cast(dtype="bfloat16"):
            out = paddle.matmul(paddle.rand([2, 2]), paddle.rand([2, 2]))
    facts = {
        "paddle_version": paddle.__version__,
        "compiled_with_cuda": bool(paddle.is_compiled_with_cuda()),
        "cpu_auto_cast_matmul_dtype": str(out.dtype).removeprefix("paddle."),
        "cpu_auto_cast_warning": next((str(w.message) for w in caught if "amp_guard" in str(w.message)), None),
    }
    return found, facts


def paddle_lists(dtype: str) -> tuple[set, set]:
    paddle = _import_paddle()
    lists = paddle.amp.amp_lists
    return set(lists.white_list()[dtype]["O1"]), set(lists.black_list()[dtype]["O1"])


def _paddle_dst(name: str, in_dtypes: list[str], low: str, white: set, black: set,
                x_only: bool) -> str:
    if name in white:
        return low
    if name in black:
        return FP32
    considered = in_dtypes[:1] if x_only else in_dtypes
    return FP32 if FP32 in considered else low


def paddle_implied(op: str, chain: list[str], low: str, white: set, black: set) -> tuple[str, str, str]:
    """(list kind of the op that makes the result, fp32-inputs dtype, low-inputs dtype).
    A composite runs its ops in turn, each fed by the one before."""
    def run(low_inputs: bool) -> str:
        dtypes = [(low if low_inputs else FP32) if k == "act" else FP32
                  for k in inputs_of(op) if k != "int"]
        out = FP32
        for i, name in enumerate(chain):
            out = _paddle_dst(name, dtypes, low, white, black,
                              x_only=op in ("batch_norm", "layer_norm") and i == 0)
            dtypes = [out]
        return out

    last = chain[-1]
    kind = "white" if last in white else "black" if last in black else "gray"
    return kind, run(False), run(True)


def _list_of(name: str, white: set, black: set) -> str:
    return "white" if name in white else "black" if name in black else "gray"


# ---------------------------------------------------------------------------- compare

def compare(ampcheck: str, extra_args: Sequence[str] = ()) -> dict:
    """extra_args go to `ampcheck ops` (--white, --black, --config) to see what a custom
    list changes."""
    rows, summary = [], {"ampcheck": ampcheck_version(ampcheck), "dtypes": {},
                         "ampcheck_args": list(extra_args)}
    paddle_names = None
    for low in LOW_DTYPES:
        table = ampcheck_ops(ampcheck, low, extra_args)
        ops = [o for o in table["ops"] if o["op"] != "cast"]
        names = [o["op"] for o in ops]
        if paddle_names is None:
            paddle_names, paddle_facts = paddle_op_names(names)
            summary["paddle"] = paddle_facts
        torch_results, torch_facts = probe_torch(names, low)
        cuda_results, cuda_how = probe_torch_cuda(names, low)
        summary.setdefault("torch_cuda", {})[low] = cuda_how
        summary.setdefault("torch", {}).update(torch_version=torch_facts["torch_version"])
        summary["torch"].setdefault("autocast_active", {})[low] = torch_facts["autocast_active"]
        white, black = paddle_lists(low)
        counts = {fw: {"agree": 0, "disagree": 0, "not_comparable": 0}
                  for fw in ("torch", "paddle", "torch_cuda")}
        counts.update(torch_disagree=[], paddle_disagree=[], torch_cuda_disagree=[],
                      torch_errors=[])
        for o in ops:
            op = o["op"]
            amp = (o["runs_in_fp32_inputs"], o["runs_in_low_inputs"])
            t = torch_results[op]
            chain, seen = paddle_names[op]
            if chain:
                kind, p32, plow = paddle_implied(op, chain, low, white, black)
            else:
                kind, p32, plow = "no mapping", None, None
            t_err = any(str(v).startswith("error") for v in t)
            agree_torch = None if t_err else (t[0] == amp[0] and t[1] == amp[1])
            agree_paddle = None if not chain else (p32 == amp[0] and plow == amp[1])
            tc = cuda_results[op] if cuda_results else (None, None)
            agree_cuda = (None if cuda_results is None or any(str(v).startswith("error") for v in tc)
                          else (tc[0] == amp[0] and tc[1] == amp[1]))
            rows.append({
                "op": op, "dtype": low,
                "ampcheck": {"reason": o["reason"], "category": o["category"],
                             "fp32_inputs": amp[0], "low_inputs": amp[1], "aliases": o["aliases"]},
                "torch": {"fp32_inputs": t[0], "low_inputs": t[1]},
                "paddle": {"ops": chain, "lists": [_list_of(n, white, black) for n in chain],
                           "list": kind, "fp32_inputs": p32, "low_inputs": plow,
                           "observed_on_cpu": seen,
                           "names_observed": all(n in seen for n in chain)},
                "torch_cuda": {"fp32_inputs": tc[0], "low_inputs": tc[1]},
                "agree_torch": agree_torch, "agree_paddle": agree_paddle,
                "agree_torch_cuda": agree_cuda,
            })
            for fw, agree in (("torch", agree_torch), ("paddle", agree_paddle),
                              ("torch_cuda", agree_cuda)):
                key = "not_comparable" if agree is None else "agree" if agree else "disagree"
                counts[fw][key] += 1
                if agree is False:
                    counts[fw + "_disagree"].append(op)
            if t_err:
                counts["torch_errors"].append(op)
        summary["dtypes"][low] = counts
    summary["paddle_names_not_observed"] = sorted(
        {r["op"] for r in rows if not r["paddle"]["names_observed"]})
    return {"rows": rows, "summary": summary}


# ---------------------------------------------------------------------------- markdown

def _s(d: str | None) -> str:
    if d is None:
        return "-"
    return SHORT.get(d, d)


def _pair(a, b, ref=None) -> str:
    cells = []
    for v, r in zip((a, b), ref or (None, None)):
        text = _s(v)
        cells.append(f"**{text}**" if ref is not None and v != r else text)
    return " / ".join(cells)


def _yes(v) -> str:
    return "n/a" if v is None else "yes" if v else "**NO**"


def _torch_cell(pair, ref) -> str:
    if any(v is None or str(v).startswith("error") for v in pair):
        return " / ".join(_s(v) for v in pair)
    return _pair(*pair, ref=ref)


def to_markdown(result: dict) -> str:
    s = result["summary"]
    out = []
    for low in LOW_DTYPES:
        rows = [r for r in result["rows"] if r["dtype"] == low]
        c = s["dtypes"][low]
        out.append(f"### O1 {low}\n")
        out.append("Each cell: the dtype the op runs in with fp32 inputs / with " + _s(low) +
                   " activations (parameters fp32, as at O1; integer inputs int64). "
                   "**Bold**: differs from ampcheck.\n")
        out.append("| op | ampcheck reason | ampcheck | PyTorch CPU autocast | agrees | "
                   "Paddle op | Paddle list | Paddle (implied) | agrees | PyTorch CUDA autocast † | agrees |")
        out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            a, t, p, tc = r["ampcheck"], r["torch"], r["paddle"], r["torch_cuda"]
            ref = (a["fp32_inputs"], a["low_inputs"])
            pops = " → ".join(f"`{n}`" for n in p["ops"]) or "-"
            if not p["names_observed"]:
                pops += " \\*"
            plist = " → ".join(p["lists"]) if len(p["ops"]) > 1 else p["list"]
            out.append(
                f"| {r['op']} | {a['reason']} | {_pair(*ref)} | "
                f"{_torch_cell((t['fp32_inputs'], t['low_inputs']), ref)} | {_yes(r['agree_torch'])} | "
                f"{pops} | {plist} | {_pair(p['fp32_inputs'], p['low_inputs'], ref=ref)} | "
                f"{_yes(r['agree_paddle'])} | "
                f"{_torch_cell((tc['fp32_inputs'], tc['low_inputs']), ref)} | {_yes(r['agree_torch_cuda'])} |")
        out.append("")
        for fw, name in (("torch", "PyTorch CPU autocast"), ("paddle", "PaddlePaddle"),
                         ("torch_cuda", "PyTorch CUDA autocast †")):
            k = c[fw]
            line = f"- {name}: {k['agree']} agree, {k['disagree']} disagree"
            if k["not_comparable"]:
                line += f", {k['not_comparable']} not comparable"
            if c[fw + "_disagree"]:
                line += " (" + ", ".join(c[fw + "_disagree"]) + ")"
            out.append(line)
        if c["torch_errors"]:
            out.append("- PyTorch CPU autocast raised for: " + ", ".join(c["torch_errors"]))
        out.append("")
    t, p = s["torch"], s["paddle"]
    if s.get("ampcheck_args"):
        out.append("ampcheck columns from `ampcheck ops " + " ".join(s["ampcheck_args"]) + "`.\n")
    missing = [r for r in result["rows"] if r["dtype"] == LOW_DTYPES[0] and not r["paddle"]["names_observed"]]
    for r in missing:
        out.append(f"\\* `{r['op']}`: Paddle's op name is that of a CUDA build; this "
                   f"{'CUDA' if p['compiled_with_cuda'] else 'CPU-only'} build ran "
                   + ", ".join(f"`{n}`" for n in r["paddle"]["observed_on_cpu"]) + ".\n")
    how = sorted(set(s["torch_cuda"].values()))
    out.append("† For reference: PyTorch's CUDA autocast lists, observed through "
               + "; ".join(how) + ". Not counted in the comparison with PyTorch above.\n")
    out.append(f"Versions: {s['ampcheck']}; PyTorch {t['torch_version']} (CPU autocast active: "
               + ", ".join(f"{k} {v}" for k, v in t["autocast_active"].items())
               + f"); PaddlePaddle {p['paddle_version']} (compiled with CUDA: {p['compiled_with_cuda']}; "
               f"a matmul under paddle.amp.auto_cast on the CPU ran in {p['cpu_auto_cast_matmul_dtype']}).\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ampcheck", default=os.environ.get("AMPCHECK", "build/cli/ampcheck"),
                    help="the ampcheck binary (default: $AMPCHECK, else build/cli/ampcheck)")
    ap.add_argument("--out-md", help="write the Markdown tables here (default: stdout)")
    ap.add_argument("--out-json", help="write the rows and summary as JSON here")
    ap.add_argument("--white", help="passed to `ampcheck ops --white` (comma separated)")
    ap.add_argument("--black", help="passed to `ampcheck ops --black` (comma separated)")
    ap.add_argument("--config", help="passed to `ampcheck ops --config`")
    args = ap.parse_args(argv)
    extra = []
    for flag in ("white", "black", "config"):
        if getattr(args, flag):
            extra += [f"--{flag}", getattr(args, flag)]
    result = compare(args.ampcheck, extra)
    md = to_markdown(result)
    if args.out_md:
        with open(args.out_md, "w") as f:
            f.write(md)
    else:
        sys.stdout.write(md)
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    for low, c in result["summary"]["dtypes"].items():
        print(f"{low}: torch {c['torch']}, paddle {c['paddle']}, torch CUDA {c['torch_cuda']}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
