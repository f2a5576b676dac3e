"""The report as a file: it validates against ampcheck's schema, names PyTorch and its
version, uses ampcheck's op names, and is byte-identical for the same seeded run while a
planted drift changes it."""

import torch
import torch.nn.functional as F

import families as fam
from ampcheck_recorder import Recorder
from ampcheck_recorder import report as report_mod
from test_families import expected_losses


def recorded_bytes(name, steps=3, lr=0.01, inspect="full"):
    model, x, y, settings = fam.make(name, seed=0)
    rec = Recorder(model, inspect=inspect)
    settings = dict(settings, lr=lr)
    fam.train(model, x, y, steps=steps, **settings)
    return report_mod.to_json(rec.close())


def test_same_seeded_run_gives_the_same_bytes_and_a_drift_does_not():
    a = recorded_bytes("mlp")
    b = recorded_bytes("mlp")
    assert a == b
    drifted = recorded_bytes("mlp", lr=0.02)
    assert drifted != a
    import json
    ja, jd = json.loads(a), json.loads(drifted)
    assert ja["summary"]["final_loss"] != jd["summary"]["final_loss"]
    assert ja["run"]["lr"] == 0.01 and jd["run"]["lr"] == 0.02


def test_run_names_the_framework_and_the_script_settings(record):
    report, observed = record("mlp", steps=3)
    run = report["run"]
    assert (run["framework"], run["framework_version"], run["command"]) == ("pytorch", torch.__version__, "record")
    assert (run["level"], run["dtype"], run["device"], run["optimizer"]) == ("O1", "float16", "cpu", "adam")
    assert run["model"] == "Mlp" and run["parameters"] == sum(p.numel() for p in fam.Mlp().parameters())
    assert run["amp"]["semantics"] == "pytorch" and run["amp"]["loss_scaling"] == "pytorch"
    assert run["amp"]["init_loss_scaling"] == 65536.0
    assert run["batch"] == fam.spiral()[0].shape[0] and run["steps"] == 3 and run["seed"] == 0
    assert [s["step"] for s in report["steps"]] == [1, 2, 3]
    assert [s["loss"] for s in report["steps"]] == [o["loss"] for o in observed]
    assert report["summary"]["final_loss"] == observed[-1]["loss"]


def test_op_table_uses_ampcheck_names_forward_and_backward(record):
    report, _ = record("mlp", steps=2)
    names = {o["name"]: o for o in report["ops"]}
    fc1 = names["fc1/linear#0"]
    assert (fc1["type"], fc1["module"], fc1["phase"], fc1["calls"]) == ("linear", "fc1", "forward", 2)
    assert fc1["dtypes_in"] == ["float16", "float16", "float16"] and fc1["compute"] == "float32"
    assert fc1["aten"] == ["addmm"] and fc1["kernels"] == [{"name": "cpu:addmm:f16", "calls": 2}]
    # Autocast's casts are counted apart and attached to the op that read them.
    assert {"input": 1, "slot": "", "from": "float32", "to": "float16", "calls": 2} in fc1["casts"]
    assert any(c["from"] == "float32" and c["to"] == "float16" for c in report["inserted_casts"])
    grad = names["fc1/linear_grad#0"]
    assert (grad["type"], grad["module"], grad["phase"]) == ("linear_grad", "fc1", "backward")
    rows = {r["type"]: r["calls"] for r in report["op_types"]}
    assert rows["linear"] == {"fp16": 6, "bf16": 0, "fp32": 0, "other": 0}
    assert rows["log_softmax"]["fp32"] == 2  # on autocast's fp32 list (cross_entropy)
    assert report["summary"]["low_precision_calls"] == sum(r["fp16"] + r["bf16"] for r in rows.values())


def test_numerics_bins_sum_to_the_elements(record):
    report, _ = record("mlp", steps=2)
    for op in report["ops"]:
        for n in op["numerics"]:
            s = n["numerics"]
            h = s["histogram"]
            assert sum(h["counts"]) + h["zero"] + h["nan"] + h["pos_inf"] + h["neg_inf"] + h["below"] + h["above"] \
                == s["count"], op["name"]


def test_full_mode_tells_losses_of_low_precision_against_fp32(record):
    report, _ = record("attention_overflow", steps=1, inspect="full")
    bmm = next(o for o in report["ops"] if o["name"] == "attn/bmm#0")
    (kind, count), = expected_losses("attention_overflow")
    assert bmm["range_loss"]["overflow"] == count and bmm["range_loss"]["first_kind"] == "overflow"
    assert "fp32_nonfinite" not in bmm  # fp32 holds every value fp16 lost


def test_full_mode_local_error_of_a_linear_against_torch_fp32(record):
    report, _ = record("mlp", steps=1, inspect="full")
    head = next(o for o in report["ops"] if o["name"] == "head/linear#0")
    # The same linear in fp32 on the fp16 values it received, by torch itself.
    model, x, y, _ = fam.make("mlp")
    got = {}
    model.head.register_forward_hook(lambda m, a, out: got.update(inp=a[0].detach(), out=out.detach()))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        model(x)
    with torch.no_grad():
        w, b = model.head.weight.to(torch.float16).float(), model.head.bias.to(torch.float16).float()
        ref = F.linear(got["inp"].float(), w, b).double()
    err = float((got["out"].double() - ref).norm() / ref.norm())
    floor = float((ref.to(torch.float16).double() - ref).norm() / ref.norm())
    e = head["local_error"]
    assert e["count"] == 1 and abs(e["mean"] - err) <= 1e-6 * max(err, 1e-12) + 1e-12
    assert abs(e["mean_floor"] - floor) <= 1e-9
