"""The dispatch mode below autograd sees the backward pass: the autograd engine runs each
node with the caller's thread-local state (the mode included) on the thread that runs it,
the caller's own for CPU work. The recorder ties each backward op to the module whose
forward made its node, and sees backward() called from a thread the script started."""

import threading

import torch
import torch.nn as nn

import families as fam
from ampcheck_recorder import Recorder, listen


def test_a_dispatch_mode_sees_backward_ops_inside_their_nodes():
    seen = []

    def sink(func, args, kwargs):
        node = listen.current_node()
        seen.append((str(func), None if node is None else node.name(), threading.get_ident()))
        return func(*args, **kwargs)

    lin = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    with listen.RecordingMode(sink):
        lin(x).sum().backward()
    backward = [s for s in seen if s[1] is not None]
    assert ("aten.mm.default", "AddmmBackward0", threading.get_ident()) in backward
    assert any(name == "SumBackward0" for _, name, _ in backward)
    assert lin.weight.grad is not None


def test_backward_ops_belong_to_the_module_whose_forward_made_them(record):
    report, _ = record("mlp", steps=1)
    backward = {(o["module"], o["type"]) for o in report["ops"] if o["phase"] == "backward"}
    for module in ("fc1", "fc2", "head"):
        assert (module, "linear_grad") in backward
    # relu is called in the model's own forward, outside any child module.
    assert ("", "relu_grad") in backward
    # The backward of autocast's cast of fc1's weight, made in fc1's forward.
    assert ("fc1", "cast_grad") in backward


def test_gradient_accumulation_belongs_to_the_parameters_module():
    model, x, y, _ = fam.make("mlp")
    rec = Recorder(model, inspect="trace")
    opt = torch.optim.SGD(model.parameters(), 0.1)
    for _ in range(2):  # two micro-batches: the second adds into .grad
        nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    report = rec.close()
    accumulated = {o["module"] for o in report["ops"] if o["type"] == "accumulate_grad"}
    assert accumulated == {"fc1", "fc2", "head"}
    assert len(report["steps"]) == 1 and report["run"]["level"] == "O0"
    assert report["summary"]["verdict"] == "amp_off"


def _backward_ops(report):
    return sorted((o["name"], o["calls"]) for o in report["ops"] if o["phase"] == "backward")


def test_backward_from_a_thread_the_script_started_is_recorded():
    def run(in_thread):
        model, x, y, _ = fam.make("mlp")
        rec = Recorder(model, inspect="stats")
        opt = torch.optim.SGD(model.parameters(), 0.1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        if in_thread:
            t = threading.Thread(target=loss.backward)
            t.start()
            t.join()
        else:
            loss.backward()
        opt.step()
        return rec.close()

    same, other = run(False), run(True)
    assert _backward_ops(same) and _backward_ops(other) == _backward_ops(same)
