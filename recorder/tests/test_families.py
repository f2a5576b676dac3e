"""The planted-failure families: the recorder names the producer of the first non-finite
value (op, module, phase, step) as `ampcheck run` names it on the sample, and what low
precision lost there, checked against PyTorch's own fp32 result on the very fp16 values
the op received (captured with forward hooks in a run without the recorder)."""

import pytest
import torch

import families as fam

# family -> the producers, in order: (op, module)
PRODUCERS = {
    "variance_overflow": [("square", "norm")],
    "attention_overflow": [("bmm", "attn")],
    "residual_overflow": [("add", "residual")],
    "sum_overflow": [("matmul", "rms")],
    "temperature_overflow": [("div_scalar", "sharpen")],
    "sigmoid_log": [("log", "gate")],
    "nan_through_relu": [("mul_scalar", "big")],
    "two_overflows": [("mul_scalar", "branch_a"), ("matmul", "branch_b")],
}


def captured(name, module_outputs=(), module_inputs=()):
    """Step 1's forward without the recorder: the named modules' outputs and inputs."""
    model, x, y, settings = fam.make(name)
    got = {}
    handles = []
    named = dict(model.named_modules())
    for path in module_outputs:
        handles.append(named[path].register_forward_hook(
            lambda m, a, out, p=path: got.setdefault(("out", p), out.detach())))
    for path in module_inputs:
        handles.append(named[path].register_forward_pre_hook(
            lambda m, a, p=path: got.setdefault(("in", p), a[0].detach())))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        model(x)
    for h in handles:
        h.remove()
    return model, got


def overflow_count(values32: torch.Tensor) -> int:
    return int((values32.abs() >= 65520).sum())  # fp16's overflow threshold: max + ulp/2


def expected_losses(name):
    """[(kind, count)] of the first producer's lost values, from fp32 references."""
    if name == "variance_overflow":
        _, got = captured(name, module_inputs=["norm"])
        h = got[("in", "norm")]
        assert h.dtype == torch.float16
        return [("overflow", overflow_count(h.float() ** 2))]
    if name == "attention_overflow":
        model, got = captured(name, module_outputs=["attn.q", "attn.k"])
        q, k = got[("out", "attn.q")], got[("out", "attn.k")]
        return [("overflow", overflow_count(torch.bmm(q.float(), k.float().transpose(1, 2))))]
    if name == "residual_overflow":
        _, got = captured(name, module_outputs=["branch_a", "branch_b"])
        a, b = got[("out", "branch_a")], got[("out", "branch_b")]
        assert a.abs().max() < 65504 and b.abs().max() < 65504  # each branch fits fp16
        return [("overflow", overflow_count(a.float() + b.float()))]
    if name == "sum_overflow":
        model, got = captured(name, module_inputs=["rms"])
        sq = torch.square(got[("in", "rms")]).to(torch.float16)  # autocast's cast into the fp16 matmul
        return [("overflow", overflow_count(sq.float() @ model.rms.ones))]
    if name == "temperature_overflow":
        _, got = captured(name, module_outputs=["proj"])
        return [("overflow", overflow_count(got[("out", "proj")].float() / 1e-5))]
    if name == "sigmoid_log":
        _, got = captured(name, module_inputs=["gate"])
        s = torch.sigmoid(got[("in", "gate")].float())
        return [("underflow", int(((s > 0) & (s <= 2.0 ** -25)).sum()))]  # flushed by fp16 rounding
    if name == "nan_through_relu":
        _, got = captured(name, module_inputs=["big"])
        return [("overflow", overflow_count(got[("in", "big")].float() * 300000))]
    if name == "two_overflows":
        _, got = captured(name, module_outputs=["branch_a.fc"])
        return [("overflow", overflow_count(got[("out", "branch_a.fc")].float() * 30000))]
    raise KeyError(name)


@pytest.mark.parametrize("name", sorted(PRODUCERS))
def test_recorder_names_the_producer(record, name):
    report, observed = record(name, steps=2)
    nf = report["nonfinite"]
    got = [(p["op"], p["module"], p["phase"], p["step"]) for p in nf["producers"]]
    want = [(op, module, "forward", 1) for op, module in PRODUCERS[name]]
    assert got == want
    assert nf["producer"] == nf["producers"][0]
    assert report["summary"]["verdict"] == "failed"
    assert nf["failures"][0]["kind"] == "forward_non_finite" and nf["failures"][0]["step"] == 1
    first = nf["producers"][0]
    assert all(i["nan"] + i["pos_inf"] + i["neg_inf"] == 0 for i in first["inputs"])  # a producer's inputs are finite
    assert [(l["kind"], l["count"]) for l in first["lost"][:1]] == expected_losses(name)
    assert "non-finite values first produced by " + PRODUCERS[name][0][0] in report["summary"]["verdict_text"]


def test_sigmoid_log_points_from_log_to_the_sigmoid_that_lost_the_value(record):
    report, _ = record("sigmoid_log", steps=1)
    lost = report["nonfinite"]["producer"]["lost"][0]
    assert (lost["input"], lost["op"], lost["module"], lost["kind"], lost["dtype"]) == \
        ("input 0", "sigmoid", "gate", "underflow", "float16")
    assert lost["limit"] == 2.0 ** -24
    # The value named is fp32's sigmoid at an element fp16 flushed: representable in fp32,
    # below half of fp16's smallest subnormal.
    assert 0 < lost["value"] <= 2.0 ** -25


def test_backward_producer_is_attributed_on_a_skipped_step(record):
    # scaler_probing: the forward is clean, the scaled gradients overflow in backward; the
    # skipped step names the parameter and the backward op that first made the Inf.
    report, observed = record("scaler_probing", steps=2)
    step = report["steps"][0]
    assert step["skipped"] and step["found_inf"]
    skip = report["nonfinite"]["skips"][0]
    assert (skip["update"], skip["reading"], skip["cause"]) == (1, "initial", "op")
    # PyTorch's own account of the gradients the scaler unscaled at step 1: which held Inf/NaN.
    model, x, y, _ = fam.make("scaler_probing")
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    (loss * 2.0 ** 32).backward()
    bad = [n for n, p in model.named_parameters() if not bool(torch.isfinite(p.grad).all())]
    assert skip["params"] == len(bad) and skip["param_names"] == bad[:8]
    producer = skip["event"]
    assert producer["phase"] == "backward" and producer["step"] == 1
    assert skip["text"].startswith(f"{producer['op']}_grad ")
    assert all(i["nan"] + i["pos_inf"] + i["neg_inf"] == 0 for i in producer["inputs"])
    assert producer["out_pos_inf"] + producer["out_neg_inf"] + producer["out_nan"] > 0
