"""probe.py: the AMP run's first-step forward set beside its fp32 twin's. The expected
differences are computed here in float64 from the tensors themselves."""

import json
import math
import types

import torch

from ampcheck_recorder.probe import SAMPLE, TwinProbe


def _inst(name):
    module, rest = name.split("/")
    return types.SimpleNamespace(name=name, type=rest.split("#")[0], module=module)


def _rel(a, b):
    a, b = a.double().reshape(-1), b.double().reshape(-1)
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


def test_each_op_is_set_beside_the_twins_with_what_it_adds_and_where_its_input_came_from(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 16, generator=g) + 2000.0
    samples = str(tmp_path / "twin.pt")

    # The twin: fp32 all through.
    twin = TwinProbe(dump=samples)
    h32 = x * 1.0
    n32 = torch.nn.functional.layer_norm(h32, (16,))
    twin.on_op(1, _inst("lin1/linear#0"), [x], [h32])
    twin.on_op(1, _inst("norm/layer_norm#0"), [h32], [n32])
    twin.on_op(2, _inst("lin1/linear#0"), [x], [h32])  # the next step ends the probe
    assert (tmp_path / "twin.pt").exists()

    # The AMP run: the same values rounded to float16, the norm over them in fp32.
    amp = TwinProbe(against=samples)
    h16 = (x * 1.0).half()
    n = torch.nn.functional.layer_norm(h16.float(), (16,))
    amp.on_op(1, _inst("lin1/linear#0"), [x], [h16], recompute=lambda: x * 1.0)
    amp.on_op(1, _inst("norm/layer_norm#0"), [h16], [n])
    amp.finish()
    births = json.loads((tmp_path / "twin.pt.births.json").read_text())
    assert births["step"] == 1
    lin, norm = births["ops"]
    assert lin["name"] == "lin1/linear#0" and lin["input"] == 0.0
    assert math.isclose(lin["output"], _rel(h16, h32), rel_tol=1e-12)
    assert math.isclose(lin["own"], _rel(h16, x), rel_tol=1e-12)
    assert norm["from"] == "lin1/linear#0"
    assert math.isclose(norm["input"], _rel(h16, h32), rel_tol=1e-12)
    assert math.isclose(norm["output"], _rel(n, n32), rel_tol=1e-12)
    assert norm["output"] > 100 * norm["input"]  # the cancellation the planting makes
    assert norm["own"] is None  # an fp32 op: no recompute given


def test_a_large_tensor_is_sampled_at_the_same_elements_in_both_runs(tmp_path):
    big = torch.arange(3 * SAMPLE, dtype=torch.float32)
    samples = str(tmp_path / "twin.pt")
    twin = TwinProbe(dump=samples)
    twin.on_op(1, _inst("m/relu#0"), [big], [big])
    twin.finish()
    amp = TwinProbe(against=samples)
    shifted = big.clone()
    shifted[0] += 1.0  # the first element is always in the sample
    amp.on_op(1, _inst("m/relu#0"), [big], [shifted])
    amp.finish()
    op = json.loads((tmp_path / "twin.pt.births.json").read_text())["ops"][0]
    picked = torch.linspace(0, big.numel() - 1, SAMPLE, dtype=torch.float64).long()
    assert math.isclose(op["output"], _rel(shifted[picked], big[picked]), rel_tol=1e-12)


def test_an_op_on_another_path_than_the_twins_is_not_set_beside_it(tmp_path):
    samples = str(tmp_path / "twin.pt")
    twin = TwinProbe(dump=samples)
    twin.on_op(1, _inst("m/add#0"), [torch.ones(4)], [torch.ones(4)])
    twin.finish()
    amp = TwinProbe(against=samples)
    amp.on_op(1, _inst("m/add#0"), [torch.ones(8)], [torch.ones(8)])
    amp.finish()
    assert json.loads((tmp_path / "twin.pt.births.json").read_text())["ops"] == []


def test_unreadable_samples_are_a_clear_error(tmp_path):
    bad = tmp_path / "twin.pt"
    bad.write_text("not a torch file")
    try:
        TwinProbe(against=str(bad))
    except ValueError as e:
        assert "fp32 twin's samples" in str(e) and str(bad) in str(e)
    else:
        raise AssertionError("a file torch cannot read should be refused")


def test_each_parameters_gradient_is_set_beside_the_twins(tmp_path):
    g = torch.Generator().manual_seed(1)
    grad = torch.randn(32, 8, generator=g)
    samples = str(tmp_path / "twin.pt")
    twin = TwinProbe(dump=samples)
    twin.on_op(1, _inst("fc/linear#0"), [grad], [grad])
    twin.on_gradients(1, [("fc.weight", grad), ("fc.bias", None)])
    twin.finish()
    amp = TwinProbe(against=samples)
    amp.on_op(1, _inst("fc/linear#0"), [grad], [grad])
    rounded = grad.bfloat16()
    amp.on_gradients(1, [("fc.weight", rounded), ("fc.bias", None)])
    amp.on_gradients(2, [("fc.weight", grad * 2)])  # another step's: not the probed one
    amp.finish()
    gradients = json.loads((tmp_path / "twin.pt.births.json").read_text())["gradients"]
    assert [x["parameter"] for x in gradients] == ["fc.weight"]
    assert math.isclose(gradients[0]["difference"], _rel(rounded, grad), rel_tol=1e-12)


def test_a_widening_cast_passes_on_who_made_its_input(tmp_path):
    y = torch.full((16,), 100.0) + torch.linspace(0, 0.1, 16)
    samples = str(tmp_path / "twin.pt")
    twin = TwinProbe(dump=samples)
    twin.on_op(1, _inst("2/linear#0"), [y], [y])
    twin.on_op(1, _inst("/cast#0"), [y], [y])
    twin.on_op(1, _inst("/mse_loss#0"), [y, y], [((y - 100.0) ** 2).mean()])
    twin.finish()
    amp = TwinProbe(against=samples)
    low = y.bfloat16()
    up = low.float()
    amp.on_op(1, _inst("2/linear#0"), [y], [low])
    amp.on_op(1, _inst("/cast#0"), [low], [up])
    amp.on_op(1, _inst("/mse_loss#0"), [up, y], [((up - 100.0) ** 2).mean()])
    amp.finish()
    ops = {o["name"]: o for o in json.loads((tmp_path / "twin.pt.births.json").read_text())["ops"]}
    assert ops["/mse_loss#0"]["from"] == "2/linear#0"  # not the cast, which only widened
