"""Forcing ops and modules to fp32 inside autocast: what bisect-nan's trials run, and the
helper the fix is written with. Each planted family's culprit set (the sample's
expect.culprit) makes the run healthy; less than the set does not."""

import json
import os

import pytest
import torch
import torch.nn.functional as F

import families as fam
from ampcheck_recorder import Recorder, fp32_advice, keep_fp32
from conftest import REPO_ROOT

FAMILIES = ["variance_overflow", "attention_overflow", "residual_overflow", "sum_overflow",
            "temperature_overflow", "sigmoid_log", "nan_through_relu", "two_overflows"]


def sample_culprits(name):
    path = os.path.join(REPO_ROOT, "samples", "models", f"{name}.json")
    if not os.path.exists(path):
        pytest.skip(f"{path} not found")
    with open(path) as f:
        return json.load(f)["expect"]["culprit"]


@pytest.mark.parametrize("name", FAMILIES)
def test_the_samples_culprits_in_fp32_make_the_run_healthy(record, name):
    culprits = sample_culprits(name)
    report, observed = record(name, steps=25, fp32_ops=culprits)
    assert report["summary"]["verdict"] == "healthy", report["summary"]["verdict_text"]
    assert report["run"]["amp"]["custom_black_list"] == sorted(culprits)
    assert all(torch.isfinite(torch.tensor(o["loss"])) for o in observed)  # PyTorch's own losses
    forced = {o["type"] for o in report["ops"] if o["reason"] == "custom_black" and o["phase"] == "forward"}
    assert set(culprits) <= forced


def test_one_of_two_culprits_is_not_enough(record):
    for alone in (["mul_scalar"], ["matmul"]):
        report, _ = record("two_overflows", steps=2, fp32_ops=alone)
        assert report["summary"]["verdict"] == "failed"


def test_forced_op_computes_and_stores_in_fp32_and_its_backward_too(record):
    report, _ = record("attention_overflow", steps=1, fp32_ops=["bmm"])
    ops = {o["name"]: o for o in report["ops"]}
    bmm = ops["attn/bmm#0"]
    assert (bmm["reason"], bmm["dtypes_in"], bmm["out"]) == ("custom_black", ["float32", "float32"], "float32")
    assert ops["attn/bmm_grad#0"]["kernel_dtypes"]["fp32"] > 0
    assert ops["attn/bmm_grad#0"]["kernel_dtypes"]["fp16"] == 0
    # The linears around it stay in fp16.
    assert ops["attn.q/linear#0"]["out"] == "float16"


def test_a_module_in_fp32(record):
    report, _ = record("attention_overflow", steps=25, fp32_modules=["attn"])
    assert report["summary"]["verdict"] == "healthy"
    assert report["run"]["amp"]["fp32_modules"] == ["attn"]
    inside = [o for o in report["ops"] if o["module"].startswith("attn") and o["phase"] == "forward"]
    assert inside and all(o["kernel_dtypes"]["fp16"] == 0 for o in inside)


def test_unknown_op_names_are_refused_with_the_closest_name():
    with pytest.raises(ValueError, match='unknown op "bmmm".*did you mean "bmm"'):
        Recorder(inspect="trace", fp32_ops=["bmmm"], start=False)


def _train_plain(model, x, y, steps):
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    sc = torch.amp.GradScaler("cpu")
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        sc.scale(loss).backward()
        sc.step(opt)
        sc.update()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("how", [{"ops": ["bmm"]}, {"modules": ["attn"]}])
def test_keep_fp32_fixes_the_run_without_the_recorder(how):
    model, x, y, _ = fam.make("attention_overflow")
    assert not all(torch.isfinite(torch.tensor(_train_plain(model, x, y, 2))))  # broken as it is
    model, x, y, _ = fam.make("attention_overflow")
    with keep_fp32(model, **how):
        losses = _train_plain(model, x, y, 20)
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]


def test_keep_fp32_names_a_missing_module():
    model, _, _, _ = fam.make("attention_overflow")
    with pytest.raises(ValueError, match='no module "atn".*did you mean "attn"'):
        keep_fp32(model, modules=["atn"])


def test_advice_gives_the_helper_and_the_plain_pytorch_form():
    text = fp32_advice(ops=["bmm"], modules=["attn"])
    assert "ampcheck_recorder.keep_fp32(model, modules=['attn'], ops=['bmm'])" in text
    assert 'with torch.autocast(device_type="cuda", enabled=False):' in text
    assert "model.attn(*(x.float() for x in inputs))" in text
    assert fp32_advice() == ""
