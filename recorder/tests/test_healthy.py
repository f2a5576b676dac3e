"""Runs that are not failures must not be failed: scaler probing, a back-off after the
scale grew, intended -inf masks, a converged loss whose gradients fp16 cannot hold. And
the one quiet failure that is: gradients that underflow to zero. Each is checked against
what PyTorch itself reported (the GradScaler's scale, the loss, the gradients)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import families as fam
from ampcheck_recorder import Recorder


def test_scaler_probing_from_a_high_initial_scale_is_healthy(record):
    report, observed = record("scaler_probing", steps=30)
    assert [k["reading"] for k in report["nonfinite"]["skips"]] == readings(observed)
    assert all(k["reading"] == "initial" for k in report["nonfinite"]["skips"])
    # PyTorch's own account: a step skipped is one whose scale came down after it.
    skipped = [o["scale_after"] < o["scale_used"] for o in observed]
    lead = skipped.index(False)
    assert lead >= 2 and not any(skipped[lead:])  # a leading run, then clean training
    assert [s["loss_scale"] for s in report["steps"]] == [o["scale_used"] for o in observed]
    assert [s["skipped"] for s in report["steps"]] == skipped
    nf = report["nonfinite"]
    assert nf["failures"] == []
    p = nf["probing"]
    assert (p["first_update"], p["last_update"], p["skipped"]) == (1, lead, lead)
    assert p["scale_from"] == 2.0 ** 32 and p["scale_to"] == observed[lead]["scale_used"]
    assert p["excused"] == (lead / 30 > 0.05)
    assert report["summary"]["verdict"] == "healthy"
    assert "start it lower (PyTorch GradScaler(init_scale=" in report["summary"]["verdict_text"]


def readings(observed):
    """docs/inspector.md's one rule, applied to the scales PyTorch's GradScaler reported:
    for each skipped step, initial (nothing stepped yet), lower (the back-off takes the
    scale to a new low), after_growth (the scale had grown past the last that stepped),
    else counted."""
    out, stepped, last_stepped, lowest = [], False, 0.0, math.inf
    for o in observed:
        before, after = o["scale_used"], o["scale_after"]
        if after < before:  # PyTorch's account of a skip: the scale came down
            out.append("initial" if not stepped else "lower" if after < lowest
                       else "after_growth" if before > last_stepped else "counted")
        else:
            stepped, last_stepped = True, before
        lowest = min(lowest, before, after)
    return out


def test_a_back_off_after_growth_is_probing(record):
    report, observed = record("mlp", steps=60, init_scale=2.0 ** 10, growth_interval=3, lr=0.05)
    grew = [o["scale_after"] > o["scale_used"] for o in observed]
    skipped = [o["scale_after"] < o["scale_used"] for o in observed]
    backoffs = sum(1 for i in range(1, len(observed)) if skipped[i] and grew[i - 1])
    assert backoffs >= 2 and sum(skipped) == backoffs  # every skip follows a growth
    assert sum(skipped) / len(skipped) > 0.05          # the skip fraction alone would fail it
    nf = report["nonfinite"]
    want = readings(observed)
    assert set(want) == {"after_growth"}
    assert [k["reading"] for k in nf["skips"]] == want
    assert [k["update"] for k in nf["skips"]] == [i + 1 for i, s in enumerate(skipped) if s]
    assert nf["failures"] == [] and report["summary"]["verdict"] == "healthy"
    assert f"({len(want)} of them probing for its scale)" in report["summary"]["verdict_text"]


def test_a_skip_at_a_scale_that_trained_is_counted_and_fails_the_run():
    # Inf planted in a gradient (a hook) at chosen steps; the scaler grows every 2 clean
    # steps. Step 4 skips at 2^11, a scale step 3 trained at, and backs off to 2^10, no new
    # low: counted. Step 7 skips right after a growth: after_growth, probing.
    model, x, y, _ = fam.make("mlp")
    rec = Recorder(model, inspect="stats")
    opt = torch.optim.SGD(model.parameters(), 1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
    plant = [False]
    model.fc2.weight.register_hook(lambda g: g * float("inf") if plant[0] else g)
    observed = []
    for step in range(1, 9):
        plant[0] = step in (4, 7)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        before = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        observed.append({"scale_used": before, "scale_after": scaler.get_scale()})
    report = rec.close()
    nf = report["nonfinite"]
    assert readings(observed) == ["counted", "after_growth"]
    assert [(k["update"], k["reading"]) for k in nf["skips"]] == [(4, "counted"), (7, "after_growth")]
    assert nf["skips"][0]["scale_before"] == 2.0 ** 11 and nf["skips"][0]["scale_after"] == 2.0 ** 10
    assert nf["skips"][0]["params"] >= 1 and "fc2.weight" in nf["skips"][0]["param_names"]
    # 1 counted of 8 updates is above 5%: the run fails, naming the first counted skip.
    failure = next(f for f in nf["failures"] if f["kind"] == "skipped_fraction")
    assert failure["detail"].startswith("1 of 8 updates skipped outside the scaler's probing")
    assert "the first at update 4: " in failure["detail"]
    assert report["summary"]["verdict"] == "failed"


def _masked_positions(batch, length, steps):
    return batch * length * (length - 1) // 2 * steps


def test_masked_fill_minus_inf_read_by_softmax_is_intended(record):
    report, _ = record("causal_mask", steps=3)
    nf = report["nonfinite"]
    assert nf["failures"] == [] and nf["producers"] == []
    x, _ = fam.sequences()
    assert nf["intended"] == [{"op": "masked_fill", "module": "attn", "events": 3,
                               "values": _masked_positions(x.shape[0], x.shape[1], 3),
                               "readers": ["softmax"], "reason": "-inf mask: softmax maps it to 0"}]
    assert report["summary"]["verdict"] == "healthy"
    assert "intended -Inf (masks softmax maps to 0) not counted as failures" in report["summary"]["verdict_text"]


def test_additive_finfo_min_mask_that_an_add_takes_to_minus_inf_is_intended(record):
    report, _ = record("causal_mask_additive", steps=1)
    # PyTorch's own fp16 add of the same scores and mask: where it made -inf.
    model, x, y, _ = fam.make("causal_mask_additive")
    got = {}
    model.attn.q.register_forward_hook(lambda m, a, o: got.setdefault("q", o.detach()))
    model.attn.k.register_forward_hook(lambda m, a, o: got.setdefault("k", o.detach()))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        model(x)
    scores = torch.bmm(got["q"], got["k"].transpose(1, 2)) * model.attn.scale
    n = x.shape[1]
    mask = torch.zeros(n, n, dtype=torch.float16).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1),
                                                               torch.finfo(torch.float16).min)
    minus_inf = int(((scores + mask) == float("-inf")).sum())
    assert minus_inf > 0
    nf = report["nonfinite"]
    assert nf["failures"] == [] and nf["producers"] == []
    assert [(i["op"], i["module"], i["values"], i["readers"]) for i in nf["intended"]] == \
        [("add", "attn", minus_inf, ["softmax"])]


def test_a_minus_inf_mask_read_by_another_op_is_a_failure():
    # exp of a -inf mask is 0 and finite, but exp is not a softmax: only the user can say
    # it was meant (--allow-inf), so it is reported.
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            h = self.fc(x).masked_fill(torch.eye(4, dtype=torch.bool), float("-inf"))
            return torch.exp(h).sum(1, keepdim=True) + self.fc(x)

    torch.manual_seed(0)
    model = M()
    rec = Recorder(model, inspect="stats")
    opt = torch.optim.SGD(model.parameters(), 0.1)
    x = torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    report = rec.close()
    nf = report["nonfinite"]
    assert [(p["op"], p["module"]) for p in nf["producers"]] == [("masked_fill", "")]
    assert "which is not a softmax" in nf["failures"][0]["detail"]
    # Written by masked_fill at step 1, read by exp (finite values of it, but not a softmax).
    assert nf["mask_failures"] == [{"op": "masked_fill", "module": "", "step": 1, "reader": "exp",
                                    "reader_module": "", "made_non_finite": False}]


def test_converged_loss_with_zero_gradients_is_not_underflow():
    # Separable data trained to a loss so small that its gradients flush to 0 in fp16:
    # the loss came down, so this is convergence, not underflow.
    torch.manual_seed(0)
    x = torch.cat([torch.randn(32, 2) + 4, torch.randn(32, 2) - 4])
    y = torch.cat([torch.zeros(32, dtype=torch.long), torch.ones(32, dtype=torch.long)])
    model = nn.Linear(2, 2)
    rec = Recorder(model, inspect="stats")
    opt = torch.optim.SGD(model.parameters(), lr=20.0)
    losses, zero_steps = [], 0
    for _ in range(25):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        losses.append(float(loss.detach()))
        zero_steps = zero_steps + 1 if all(bool((p.grad == 0).all()) for p in model.parameters()) else 0
        opt.step()
    report = rec.close()
    assert zero_steps >= 3 and losses[-1] < 0.1 * losses[0]  # PyTorch's own account
    assert report["nonfinite"]["failures"] == []
    assert "zero_gradients" not in report["nonfinite"]
    assert report["summary"]["verdict"] == "healthy"


def test_gradient_underflow_without_a_scaler_fails_and_names_the_scale_needed(record):
    report, observed = record("grad_underflow", steps=4)
    assert all(bool((g == 0).all()) for o in observed for g in o["grads"])  # PyTorch's own gradients
    nf = report["nonfinite"]
    z = nf["zero_gradients"]
    assert (z["first_step"], z["steps"], z["stepped"], z["dtype"]) == (1, 4, 4, "float16")
    # The evidence: the loss gradient flushed whole on its cast back into fp16. Its
    # largest value, from fp32 autograd: 1e-6 * |softmax - onehot| / batch.
    model, x, y, _ = fam.make("grad_underflow")
    with torch.autocast("cpu", dtype=torch.float16):
        logits = model(x)
    logits32 = logits.detach().float().requires_grad_()
    (F.cross_entropy(logits32, y) * 1e-6).backward()
    largest = float(logits32.grad.abs().max())
    ev = z["evidence"]
    assert (ev["phase"], ev["kind"], ev["dtype"], ev["input"]) == ("backward", "underflow", "float16", "grad_output")
    assert abs(ev["value"]) == largest
    assert z["scale_needed"] == 2.0 ** math.ceil(math.log2(2.0 ** -14 / largest))
    assert report["summary"]["verdict"] == "gradient_underflow"
    assert report["summary"]["verdict_text"].startswith("FAILED: gradients underflow: every parameter gradient was 0")


def test_healthy_bf16_run(record):
    report, _ = record("mlp", steps=3, dtype=torch.bfloat16)
    assert report["run"]["dtype"] == "bfloat16" and report["run"]["level"] == "O1"
    assert report["summary"]["verdict"] == "healthy"
    calls = {r["type"]: r["calls"] for r in report["op_types"]}
    assert calls["linear"]["bf16"] == 9 and calls["linear"]["fp16"] == 0  # 3 linears x 3 steps


def test_a_view_of_memory_nothing_wrote_is_no_tensors_values():
    # DDP's gradient buckets: as_strided views of a flat buffer whose memory nothing has
    # written yet, then filled. A view computes nothing: its elements are no tensor's values
    # (here the storage holds NaN where the garbage would be), and the run made no NaN.
    class Bucketed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 2)
            self.bucket = torch.full((32,), float("nan"))  # allocated before the recording

        def forward(self, x):
            view = self.bucket.as_strided((16,), (1,), 16)
            view.zero_()
            return self.fc(x) + view.sum()

    torch.manual_seed(0)
    model = Bucketed()
    rec = Recorder(model, inspect="stats")
    opt = torch.optim.SGD(model.parameters(), 1e-2)
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    for _ in range(3):
        model.bucket.numpy()[:] = float("nan")  # garbage no op wrote, as an allocator leaves it
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    report = rec.close()
    views = [o for o in report["ops"] if o["type"] == "as_strided"]
    assert views and all(o["numerics"] == [] for o in views), views
    assert not any(n["numerics"]["nan"] for o in report["ops"] for n in o["numerics"])
    assert report["nonfinite"]["producers"] == [] and report["summary"]["verdict"] == "healthy"
