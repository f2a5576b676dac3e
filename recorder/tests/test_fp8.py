"""fp8 training in PyTorch, recorded: a float8 linear as torchao's and TransformerEngine's
are built (inputs and weight scaled and cast to float8_e4m3fn, torch._scaled_mm with the
inverse scales, a bf16 result), trained on the CPU. The recorder reads fp8 tensors (torch
has no aminmax or isnan for them on the CPU), counts the fp8 GEMMs as low precision, and
names the cast that turned an unscaled gradient-sized value beyond E5M2's 57344 into Inf.
(PyTorch's .to(float8_e5m2) does not saturate, as ml_dtypes' astype does not; its
.to(float8_e4m3fn) does: 1000 and Inf become 448, measured on torch 2.15's CPU.)"""

import pytest
import torch

from ampcheck_recorder import Recorder

if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
    pytest.skip("this torch has no float8_e4m3fn / _scaled_mm", allow_module_level=True)

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0


def _scaled_mm_works_on_cpu() -> bool:
    try:
        one = torch.tensor(1.0)
        a = torch.zeros(16, 16).to(E4M3)
        torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return True
    except (RuntimeError, NotImplementedError):
        return False


if not _scaled_mm_works_on_cpu():
    pytest.skip("torch._scaled_mm has no CPU kernel in this torch", allow_module_level=True)


class _Fp8Matmul(torch.autograd.Function):
    """y = x w^T with both operands in E4M3 (per-tensor scales), the result in bf16; the
    gradients in high precision (as a delayed-scaling recipe's wgrad/dgrad may run)."""

    @staticmethod
    def forward(ctx, x, w, x_scale, w_scale):
        ctx.save_for_backward(x, w)
        xq = (x * x_scale).to(E4M3)
        wq = (w * w_scale).to(E4M3)
        return torch._scaled_mm(xq, wq.t(), scale_a=(1.0 / x_scale), scale_b=(1.0 / w_scale),
                                out_dtype=torch.bfloat16)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g = g.float()
        return g @ w, g.t() @ x, None, None


class Fp8Linear(torch.nn.Module):
    def __init__(self, n_in, n_out, scale_inputs=True):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_out, n_in) * 0.1)
        self.scale_inputs = scale_inputs

    def forward(self, x):
        # Current scaling: amax / 448 from this very tensor (or none: a scale of 1).
        x_scale = (E4M3_MAX / x.detach().abs().amax().clamp(min=1e-12)) if self.scale_inputs else torch.tensor(1.0)
        w_scale = E4M3_MAX / self.weight.detach().abs().amax().clamp(min=1e-12)
        return _Fp8Matmul.apply(x, self.weight, x_scale.float(), w_scale.float())


class Net(torch.nn.Module):
    def __init__(self, scale_inputs=True):
        super().__init__()
        self.fc1 = Fp8Linear(32, 64, scale_inputs)
        self.fc2 = torch.nn.Linear(64, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)).float())


def train(scale_inputs, steps=3, input_scale=1.0, validate=None):
    torch.manual_seed(0)
    model = Net(scale_inputs)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rec = Recorder(model, opt, inspect="stats")
    try:
        for _ in range(steps):
            x, y = torch.randn(16, 32) * input_scale, torch.randn(16, 1)
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
    finally:
        report = rec.close()
    if validate is not None:
        validate(report)
    return report


def test_an_fp8_run_is_read_and_its_gemms_count_as_low_precision(validate):
    report = train(scale_inputs=True, steps=3, validate=validate)
    assert "recorder_error" not in report["run"], report["run"].get("recorder_error")
    rows = {r["type"]: r["calls"] for r in report["op_types"]}
    scaled = next(v for k, v in rows.items() if "scaled_mm" in k)
    assert scaled["fp8"] == 3 and scaled["other"] == 3 and scaled["bf16"] == 0
    s = report["summary"]
    assert s["verdict"] == "healthy", s["verdict_text"]
    assert "float8_e4m3fn" in s["verdict_text"] and s["low_precision_calls"] >= 3
    assert report["nonfinite"]["producers"] == []


class E5m2FakeQuant(torch.nn.Module):
    """x through E5M2 and back, unscaled (a quantize-dequantize step, as fp8 simulators
    put before a GEMM): a value beyond 57344 (+ half an ulp) becomes Inf."""

    def forward(self, x):
        return x.to(torch.float8_e5m2).to(torch.float32)


def test_an_unscaled_value_beyond_e5m2s_range_is_named_at_its_cast():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), E5m2FakeQuant(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rec = Recorder(model, opt, inspect="stats")
    try:
        for _ in range(2):
            x = torch.randn(4, 8) * 1e5
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
    finally:
        report = rec.close()
    assert "recorder_error" not in report["run"]
    first = report["nonfinite"]["producers"][0]
    assert (first["phase"], first["module"], first["step"]) == ("forward", "1", 1)
    assert first["op"] == "cast" and first["out_pos_inf"] + first["out_neg_inf"] > 0
    assert all(r["nan"] + r["pos_inf"] + r["neg_inf"] == 0 for r in first["inputs"])
    assert report["summary"]["verdict"] == "failed"


class E4m3FakeQuant(torch.nn.Module):
    def forward(self, x):
        return x.to(E4M3).to(torch.float32)


def test_values_that_a_cast_to_e4m3_saturates_or_flushes_are_counted_and_named(validate):
    # Hand-worked: E4M3's largest finite value is 448; 464 is the tie between it and the
    # missing 480 and rounds to the even 448; above it PyTorch's cast saturates, silently.
    # Its smallest subnormal is 2^-9: 2^-10 (a tie to the even 0) and less flush to 0.
    assert torch.tensor([464.0, 465.0, 1e9]).to(E4M3).float().tolist() == [448.0, 448.0, 448.0]
    values = torch.tensor([[465.0, 1000.0, -2000.0, 464.0, 448.0, 2.0 ** -11, 2.0 ** -10, 0.0, 1.0, 3.0 * 2.0 ** -11]])
    model = torch.nn.Sequential(torch.nn.Identity(), E4m3FakeQuant())
    rec = Recorder(model, inspect="stats")
    try:
        for _ in range(2):
            model(values)
            with rec.step():
                pass
    finally:
        report = rec.close()
    validate(report)
    row = next(o for o in report["ops"] if o.get("fp8_cast"))
    c = row["fp8_cast"]
    assert (row["module"], c["dtype"], c["max"], c["saturates"]) == ("1", "float8_e4m3fn", 448.0, True)
    assert (c["elements"], c["beyond"], c["underflow"]) == (20, 6, 4)
    assert (c["first_beyond_step"], c["first_underflow_step"]) == (1, 1)
    text = report["summary"]["verdict_text"]
    assert "fp8: 6 value(s) saturated to +-448 in casts to float8_e4m3fn (first in '1', step 1)" in text, text


def test_the_range_bounds_are_torchs_own_casts():
    """The recorder's counts of values that leave fp8's range or flush to 0, against what
    torch's cast does to each value: a sweep across both ends of each format, ties
    included. E5M2's cast does not saturate, so leaving its range is an Inf; E4M3's
    saturates, so there the top end is checked on the values that do not round to 448."""
    from ampcheck_recorder import numerics as nx

    for dtype, b in nx.FP8_BOUNDS.items():
        step = b.max / 7.0 / 2.0 ** (2 if dtype == torch.float8_e5m2 else 3)  # a quarter / an eighth of a binade
        top = torch.arange(b.max - 4 * step, b.max + 4 * step, step / 64.0, dtype=torch.float32)
        bottom = torch.arange(0.0, 8 * b.underflow, b.underflow / 64.0, dtype=torch.float32)[1:]
        values = torch.cat([top, -top, bottom, -bottom])
        cast = values.to(dtype).float()
        flushed = int(((cast == 0) & (values != 0)).sum())
        if b.saturates:
            # E4M3's 448 would be followed by 480 (1.111 * 2^8, the NaN code): nearer to it,
            # a value has left the range; the tie at 464 goes to the even 448.
            beyond = int((values.abs() > (b.max + 480.0) / 2).sum())
        else:
            beyond = int(torch.isinf(cast).sum())
        assert nx.fp8_cast_counts(values, b) == (beyond, flushed), (b.name, beyond, flushed)
        assert beyond > 0 and flushed > 0
