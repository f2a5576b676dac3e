"""aten ops get ampcheck's op names: the table mirrors engine/ops/op_list.h (one op list)
and inverts amp::torch_op_name (engine/amp/policy.cpp)."""

import os
import re

import pytest
import torch
import torch.nn.functional as F

from ampcheck_recorder import listen
from ampcheck_recorder.optypes import AMPCHECK_OPS, check_op_names, op_type
from conftest import REPO_ROOT


def test_the_op_list_is_the_engines():
    path = os.path.join(REPO_ROOT, "engine", "ops", "op_list.h")
    if not os.path.exists(path):
        pytest.skip(f"{path} not found")
    with open(path) as f:
        ops = re.findall(r"^\s*X\((\w+),", f.read(), re.M)
    assert tuple(ops) == AMPCHECK_OPS


def test_torch_op_names_map_back():
    # engine/amp/policy.cpp's torch_op_name, read from the source: ampcheck op -> aten name.
    path = os.path.join(REPO_ROOT, "engine", "amp", "policy.cpp")
    if not os.path.exists(path):
        pytest.skip(f"{path} not found")
    with open(path) as f:
        body = f.read().split("std::string_view torch_op_name(Op op)")[1].split("\n}\n")[0]
    renamed = dict(re.findall(r"case Op::(\w+): return \"(\w+)\";", body))
    # Every ampcheck op whose aten name differs is named back by the recorder; the scalar
    # forms share their aten op with the tensor forms and are told apart by the operand.
    assert renamed["concat"] == "cat" and op_type(torch.ops.aten.cat.default, ([],)) == "concat"
    assert op_type(torch.ops.aten.amax.default, (None,)) == "max"
    assert op_type(torch.ops.aten._to_copy.default, (None,)) == "cast"
    assert op_type(torch.ops.aten.mul.Tensor, (None, 3.0)) == "mul_scalar"
    assert op_type(torch.ops.aten.div.Tensor, (None, 2)) == "div_scalar"


def seen_types(fn):
    types = []

    def sink(func, args, kwargs):
        if listen.current_node() is None:
            types.append(op_type(func, args))
        return func(*args, **kwargs)

    with listen.RecordingMode(sink):
        fn()
    return types


def test_what_pytorch_code_is_called():
    x = torch.randn(4, 8)
    w = torch.randn(3, 8)
    q = torch.randn(2, 4, 8)
    assert seen_types(lambda: F.linear(x, w, torch.zeros(3)))[-1] == "linear"
    assert seen_types(lambda: x @ x.t()) == ["permute", "matmul"]
    assert seen_types(lambda: q @ q.transpose(1, 2)) == ["permute", "expand", "reshape", "expand", "reshape",
                                                         "bmm", "reshape"]
    assert seen_types(lambda: q @ w.t())[-2:] == ["matmul", "reshape"]  # batched @ matrix folds into one mm
    assert seen_types(lambda: torch.square(x)) == ["square"]
    assert seen_types(lambda: x ** 3) == ["pow"]
    assert seen_types(lambda: x / 1e-5) == ["div_scalar"]
    assert seen_types(lambda: x * x) == ["mul"]
    assert seen_types(lambda: torch.softmax(x, -1)) == ["softmax"]
    assert seen_types(lambda: F.layer_norm(x, (8,))) == ["layer_norm"]
    assert seen_types(lambda: x.masked_fill(x > 0, float("-inf"))) == ["gt", "masked_fill"]


def test_names_are_checked():
    assert check_op_names(["bmm", " addmm", "aten.mul.Tensor", ""], "--fp32-ops") == ["addmm", "aten.mul.Tensor", "bmm"]
    with pytest.raises(ValueError, match='unknown op "sofmax" in --fp32-ops \\(did you mean "softmax"\\?\\)'):
        check_op_names(["sofmax"], "--fp32-ops")
