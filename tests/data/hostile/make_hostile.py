#!/usr/bin/env python3
"""Writes tests/data/hostile/TARGET/*: one file for each class of hostile input of issue 31
(and each crash the fuzzers found), replayed by the test hostile.TARGET (fuzz/CMakeLists.txt):
each must end in exit 0, 1 or 2 with one line naming the file, never a signal or exit 3.

  bench/onnx/.venv/bin/python tests/data/hostile/make_hostile.py   (needs onnx, numpy)
"""
import gzip
import io
import json
import os
import sqlite3
import struct
import zipfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def out(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def model(nodes, inputs, outputs, inits=(), opset=17, check=False):
    g = helper.make_graph(nodes, "hostile", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="pytorch")
    m.ir_version = 8
    return m.SerializeToString()


def x(shape, name="x"):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def y(name="y"):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", "C"])


def f32(name, a):
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def i64(name, a):
    return numpy_helper.from_array(np.asarray(a, np.int64), name)


def head(inp, n_in, classes=3):
    """A Flatten + Gemm head, so that a model trains when nothing else stops it."""
    return ([helper.make_node("Flatten", [inp], ["flat"]), helper.make_node("Gemm", ["flat", "W", "B"], ["y"], transB=1)],
            [f32("W", np.full((classes, n_in), 0.1)), f32("B", np.zeros(classes))])


# ---- onnx ------------------------------------------------------------------------------
w = f32("w", np.full((2, 1, 3, 3), 0.1))
hn, hi = head("c", 2 * 4 * 4)
out("onnx", "conv_strides_zero.onnx",
    model([helper.make_node("Conv", ["x", "w"], ["c"], strides=[0, 0], kernel_shape=[3, 3], pads=[1, 1, 1, 1])] + hn,
          [x([2, 1, 4, 4])], [y()], [w] + hi))
out("onnx", "maxpool_strides_zero.onnx",
    model([helper.make_node("MaxPool", ["x"], ["c"], strides=[0, 0], kernel_shape=[2, 2])] + head("c", 16)[0],
          [x([2, 1, 4, 4])], [y()], head("c", 16)[1]))
out("onnx", "unsupported_op_strides_zero.onnx",
    model([helper.make_node("LpPool", ["x"], ["c"], strides=[0, 0], kernel_shape=[2, 2]), helper.make_node("Identity", ["c"], ["y"])],
          [x([2, 1, 4, 4])], [y()]))
out("onnx", "conv_kernel_shape_empty.onnx",
    model([helper.make_node("Conv", ["x", "w"], ["c"])] + hn, [x([2, 1, 4, 4])], [y()], [w] + hi))
# (the empty list written by hand: onnx's helper cannot infer its type)
m = onnx.load_from_string(open(os.path.join(HERE, "onnx", "conv_kernel_shape_empty.onnx"), "rb").read())
m.graph.node[0].attribute.append(helper.make_attribute("kernel_shape", [], attr_type=onnx.AttributeProto.INTS))
out("onnx", "conv_kernel_shape_empty.onnx", m.SerializeToString())
out("onnx", "conv_kernel_shape_short.onnx",
    model([helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3], pads=[1, 1, 1, 1])] + hn, [x([2, 1, 4, 4])], [y()], [w] + hi))
out("onnx", "conv_dilations_zero.onnx",
    model([helper.make_node("Conv", ["x", "w"], ["c"], dilations=[0, 0], pads=[1, 1, 1, 1])] + hn, [x([2, 1, 4, 4])], [y()], [w] + hi))

for op in ("Div", "Mod"):
    # A shape computed as INT64_MIN op -1 (SIGFPE in host arithmetic), then used by Reshape.
    nodes = [helper.make_node(op, ["a", "b"], ["q"]), helper.make_node("Reshape", ["x", "q"], ["r"])] + head("r", 8)[0]
    out("onnx", f"{op.lower()}_int64_min_by_minus_one.onnx",
        model(nodes, [x([2, 8])], [y()], [i64("a", [2, I64_MIN]), i64("b", [1, -1])] + head("r", 8)[1]))
out("onnx", "mul_shape_overflow.onnx",
    model([helper.make_node("Mul", ["a", "b"], ["q"]), helper.make_node("Reshape", ["x", "q"], ["r"])] + head("r", 8)[0],
          [x([2, 8])], [y()], [i64("a", [2, 2**62]), i64("b", [1, 4])] + head("r", 8)[1]))
# A Reshape target whose int64 product wraps to the input's size: [2^62 + 1, 8] = 2^65 + 8.
out("onnx", "reshape_product_wraps.onnx",
    model([helper.make_node("Reshape", ["x", "s"], ["r"])] + head("r", 8)[0], [x([1, 8])], [y()],
          [i64("s", [2**62 + 1, 8])] + head("r", 8)[1]))
out("onnx", "constant_of_shape_huge.onnx",
    model([helper.make_node("ConstantOfShape", ["s"], ["k"]), helper.make_node("ReduceSum", ["k"], ["ks"], keepdims=0),
           helper.make_node("Add", ["x", "ks"], ["r"])] + head("r", 4)[0],
          [x([2, 4])], [y()], [i64("s", [20000, 20000])] + head("r", 4)[1]))
out("onnx", "constant_of_shape_negative.onnx",
    model([helper.make_node("ConstantOfShape", ["s"], ["k"]), helper.make_node("Add", ["x", "k"], ["r"])] + head("r", 4)[0],
          [x([2, 4])], [y()], [i64("s", [-3, 4])] + head("r", 4)[1]))
for name, (a, b, d) in {"range_huge": (0, I64_MAX, 1), "range_wraps": (I64_MIN, I64_MAX, I64_MAX),
                        "range_float_inf": (0.0, float("inf"), 1.0)}.items():
    mk = f32 if isinstance(a, float) else i64
    nodes = [helper.make_node("Range", ["a", "b", "d"], ["k"]), helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["kf"], ["ks"], keepdims=0), helper.make_node("Add", ["x", "ks"], ["r"])] + head("r", 4)[0]
    out("onnx", name + ".onnx", model(nodes, [x([2, 4])], [y()], [mk("a", a), mk("b", b), mk("d", d)] + head("r", 4)[1]))
out("onnx", "no_trainable_parameter.onnx",
    model([helper.make_node("Relu", ["x"], ["y"])], [x(["N", 3])], [y()]))
out("onnx", "no_graph_input.onnx",
    model([helper.make_node("Relu", ["c"], ["y"])], [], [y()], [f32("c", np.ones((2, 3)))]))
out("onnx", "loss_without_weights.onnx",
    model([helper.make_node("Mul", ["x", "W"], ["m"]), helper.make_node("Relu", ["x"], ["y"])], [x(["N", 3])], [y()],
          [f32("W", np.ones(3))]))
for name, loc in {"external_absolute": "/etc/passwd", "external_dotdot": "../../../../etc/passwd",
                  "external_missing": "no_such_file.bin", "external_dotdot_missing": "../no/such/file.bin"}.items():
    t = f32("W", np.ones((3, 8)))
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value=loc)
    t.external_data.add(key="length", value=str(3 * 8 * 4))
    out("onnx", name + ".onnx",
        model([helper.make_node("Gemm", ["x", "W"], ["y"], transB=1)], [x(["N", 8])], [y()], [t]))
# A graph nested deeper than protobuf's default recursion limit (100), through If's
# then_branch: 40 levels of graph > node > attribute, encoded by hand (Python's protobuf
# refuses to build what is this deep).
def field(num, payload):
    def varint(v):
        b = bytearray()
        while True:
            c = v & 0x7F
            v >>= 7
            b.append(c | (0x80 if v else 0))
            if not v:
                return bytes(b)
    return varint(num << 3 | 2) + varint(len(payload)) + payload


leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "leaf", [], [y("o")])
graph_bytes = leaf.SerializeToString()
for k in range(40):
    attr = field(1, b"then_branch") + field(6, graph_bytes) + bytes([0xA0, 0x01, 5])  # type = GRAPH
    node = field(1, b"cond") + field(2, b"o") + field(4, b"If") + field(5, attr)
    graph_bytes = field(1, node) + field(2, b"g%d" % k) + field(12, y("o").SerializeToString())
top = helper.make_graph(head("o", 8)[0][1:], "hostile", [x([2, 8]), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                       [y()], head("o", 8)[1])
top_bytes = top.SerializeToString() + field(1, field(1, b"cond") + field(2, b"o") + field(4, b"If") +
                                             field(5, field(1, b"then_branch") + field(6, graph_bytes) + bytes([0xA0, 0x01, 5])))
mdl = helper.make_model(helper.make_graph([], "x", [], []), opset_imports=[helper.make_opsetid("", 17)])
mdl.ir_version = 8
mdl.ClearField("graph")
out("onnx", "nested_too_deep.onnx", mdl.SerializeToString() + field(7, top_bytes))
# An initializer that claims 2^40 elements and carries 12 bytes.
t = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2**20, 2**20], raw_data=b"\0" * 12)
out("onnx", "initializer_claims_more_than_it_holds.onnx",
    model([helper.make_node("MatMul", ["x", "W"], ["y"])], [x(["N", 2**20])], [y()], [t]))
out("onnx", "truncated.onnx", model([helper.make_node("Relu", ["x"], ["y"])], [x(["N", 3])], [y()])[:-7])
out("onnx", "not_onnx.onnx", b"this is not a model\n")
out("onnx", "empty.onnx", b"")


# The data each model trains on (hostile/data/NAME.npz: "input" of the graph's first input's
# shape, symbolic sizes 4, and labels of 3 classes), so that `run` reaches what each file
# plants; written outside the targets' folders, which the fuzz targets replay.
for f in sorted(os.listdir(os.path.join(HERE, "onnx"))):
    try:
        m = onnx.load_from_string(open(os.path.join(HERE, "onnx", f), "rb").read())
    except Exception:
        continue
    if not m.graph.input:
        continue
    dims = [d.dim_value if d.HasField("dim_value") else 4 for d in m.graph.input[0].type.tensor_type.shape.dim]
    if not dims or np.prod(dims) > 1 << 16:
        continue
    d = os.path.join(HERE, "data")
    os.makedirs(d, exist_ok=True)
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED) as z:
        for k, a in (("input", np.full(dims, 0.5, np.float32)), ("labels", np.arange(dims[0], dtype=np.int64) % 3)):
            a_bytes = io.BytesIO()
            np.save(a_bytes, a)
            z.writestr(zipfile.ZipInfo(k + ".npy", date_time=(2026, 1, 1, 0, 0, 0)), a_bytes.getvalue(), zipfile.ZIP_DEFLATED)
    with open(os.path.join(d, f.replace(".onnx", ".npz")), "wb") as fh:
        fh.write(b.getvalue())


# ---- arrays (--data of a training run of the mlp sample: 2 features, 3 classes) ---------
def npy(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def npz(**arrays):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED) as z:
        for k, a in arrays.items():
            z.writestr(zipfile.ZipInfo(k + ".npy", date_time=(2026, 1, 1, 0, 0, 0)), npy(a), zipfile.ZIP_DEFLATED)
    return b.getvalue()


good_x = np.array([[0.1, 0.2], [0.3, -0.4], [0.5, 0.1], [-0.2, 0.3]], np.float32)
out("arrays", "labels_int64_max.npz", npz(input=good_x, labels=np.array([0, 1, 2, I64_MAX], np.int64)))
out("arrays", "labels_negative.npz", npz(input=good_x, labels=np.array([0, -1, 2, 1], np.int64)))
out("arrays", "labels_beyond_classes.npz", npz(input=good_x, labels=np.array([0, 1, 2, 7], np.int64)))


def header(descr, shape):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h = h + " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode()


out("arrays", "npy_shape_product_wraps.npy", header("<f4", "(8589934592, 2147483648)") + b"\0" * 16)
out("arrays", "npy_shape_huge.npy", header("<f4", "(1000000000, 3)") + b"\0" * 64)
out("arrays", "npy_shape_negative.npy", header("<f4", "(-4, 2)") + b"\0" * 32)
# A zip member whose sizes claim 3 GB (stored and deflated), in a file of under a kilobyte.
for method, name in ((zipfile.ZIP_STORED, "npz_member_claims_3gb_stored.npz"), (zipfile.ZIP_DEFLATED, "npz_member_claims_3gb.npz")):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", method) as z:
        z.writestr(zipfile.ZipInfo("input.npy", date_time=(2026, 1, 1, 0, 0, 0)), npy(good_x), method)
        z.writestr(zipfile.ZipInfo("labels.npy", date_time=(2026, 1, 1, 0, 0, 0)), npy(np.array([0, 1, 2, 1], np.int64)), method)
    data = bytearray(b.getvalue())
    claim = struct.pack("<I", 3_000_000_000)
    at = 0
    while True:  # every local header (PK\3\4: size at +22) and central entry (PK\1\2: +24)
        lh, ce = data.find(b"PK\x03\x04", at), data.find(b"PK\x01\x02", at)
        hits = [p for p in (lh, ce) if p >= 0]
        if not hits:
            break
        p = min(hits)
        data[p + (22 if p == lh else 24):p + (26 if p == lh else 28)] = claim
        at = p + 4
    out("arrays", name, bytes(data))
out("arrays", "npz_truncated.npz", npz(input=good_x, labels=np.array([0, 1, 2, 1]))[:-30])
out("arrays", "pb_claims_huge_dims.pb",
    TensorProto(name="input", data_type=TensorProto.FLOAT, dims=[2**31, 2**31, 4], raw_data=b"\0" * 8).SerializeToString())
out("arrays", "pb_garbage.pb", b"\x0a\xff\xff\xff\xff\x0f" + b"\x01" * 10)

# recurrent_hidden_size_int64_max.onnx and int64_scalar_raw_data_4_bytes.onnx: found by
# fuzz.onnx (issue 33's session), kept as they were found: an LSTM whose hidden_size is
# INT64_MAX overflowed 4 * hidden_size; an int64 initializer with 4 bytes of raw_data made
# the ONNX library's shape inference write through a null pointer.
# attribute_wrong_type_*.onnx (fuzz.onnx, kept as found): a node attribute of the wrong type
# (activations not a list of strings, auto_pad or direction not a string) was refused naming
# the node but not the file. config/fp8_keep_names_no_layer.json (fuzz.config): a config's
# fp8 keep list naming no layer was reported as --fp8-keep's. profile/
# duration_of_many_digits.json.gz (fuzz.profile): a duration of 19 digits overflowed int64
# before it reached the reader's double path.
# node_reads_missing_output_*.onnx (fuzz.onnx, found by CI's run of issue 33's last commit,
# kept as found): a recurrent node's op type changed to one with a single output (Transpose,
# Cast) while the graph still reads its output 1; the refusal named the node, not the file.
# arrays/pb_huge_dims_beside_a_zero.pb (fuzz.arrays, kept as found): a TensorProto whose dims
# multiply to 0 but whose product before the zero overflowed int64 (UBSan); a shape with a
# zero is now empty whatever its other dims.
# config/black_list_name_of_89k.json (fuzz.config, kept as found): an unknown op name of
# 89 KB in custom_black_list was echoed whole in the one-line error; names are now quoted by
# their start and their length.
# maxpool_pads_2_to_the_40.onnx (fuzz.onnx, kept as found): a MaxPool padded by 2^40 columns
# built its edge padding from 2^40 handles of one column (out of memory before any tensor
# was allocated); the padding now doubles a band, and pads, kernels, strides and
# dilations beyond 2^31 are refused.

# ---- model files ---------------------------------------------------------------------------
base = {"ampcheck_model": 1, "name": "hostile", "data": {"generator": "spiral", "n_per_class": 10, "classes": 3},
        "loss": "cross_entropy", "train": {"steps": 2, "batch": 6, "lr": 0.01, "optimizer": "adam"}}
out("model_file", "no_trainable_parameter.json", json.dumps({**base, "nodes": [{"name": "a", "kind": "relu"}]}).encode())
out("model_file", "linear_out_huge.json",
    json.dumps({**base, "nodes": [{"name": "fc", "kind": "linear", "out": 2**40}]}).encode())
out("model_file", "linear_out_negative.json",
    json.dumps({**base, "nodes": [{"name": "fc", "kind": "linear", "out": -3}]}).encode())
out("model_file", "data_huge.json",
    json.dumps({**base, "data": {"generator": "spiral", "n_per_class": 2**40, "classes": 3},
                "nodes": [{"name": "fc", "kind": "linear", "out": 3}]}).encode())
out("model_file", "nested_arrays.json", b"[" * 100000 + b"]" * 100000)
out("model_file", "not_json.json", b"\xff\xfe\x00garbage")
# Issue 33: samples written in the model file, nested deep (the sample's walk recursed per
# level); a recipe whose calls nest deep, and a scaling function of endless parentheses
# (both parsers recursed per level), through a model's "amp" block and a config's "fp8".
deep = "[" * 30000 + "1" + "]" * 30000
out("model_file", "inline_samples_nested_deep.json",
    ('{"ampcheck_model": 1, "data": {"x": [' + deep + '], "y": [0]}, '
     '"nodes": [{"name": "fc", "kind": "linear", "out": 2}]}').encode())
out("model_file", "fp8_recipe_nested_deep.json",
    json.dumps({**base, "nodes": [{"name": "fc", "kind": "linear", "out": 16}],
                "amp": {"level": "O1", "dtype": "bfloat16",
                        "fp8": "Float8CurrentScaling(fp8_quant_fwd_inp=" + "QParams(x=" * 50000 + "1" + ")" * 50001}}).encode())

# ---- configs ---------------------------------------------------------------------------------
out("config", "paddle_scaling_inf.json", b'{"amp": {"level": "O2", "init_loss_scaling": 1e400}}')
out("config", "pytorch_nested.json", b'{"autocast": ' * 5000 + b"1" + b"}" * 5000)
out("config", "deepspeed_window_huge.json", b'{"fp16": {"enabled": true, "loss_scale_window": 1e30, "initial_scale_power": 4000}}')
out("config", "not_json.json", b"level = O2\n")
out("config", "fp8_scale_fn_parens_deep.json",
    json.dumps({"level": "O1", "dtype": "bfloat16",
                "fp8": "DelayedScaling(scaling_factor_compute_algo=lambda a, s, m, r: " + "(" * 100000 + "1" + ")" * 100000 + ")"}).encode())
out("config", "fp8_scale_fn_minus_deep.json",
    json.dumps({"level": "O1", "dtype": "bfloat16",
                "fp8": "DelayedScaling(scaling_factor_compute_algo=lambda a, s, m, r: " + "-" * 900 + "1)"}).encode())

# ---- reports ---------------------------------------------------------------------------------
with open(os.path.join(HERE, "..", "..", "..", "samples", "baselines", "mlp.O2-fp16.json"), "rb") as f:
    rep = f.read()
out("report", "truncated.json", rep[: len(rep) // 2])
r = json.loads(rep)
r["schema_version"] = "99.0"
out("report", "future_schema.json", json.dumps(r).encode())
r = json.loads(rep)
r["steps"] = [{"step": -(2**62), "loss": "NaN"}] * 3
out("report", "steps_wrong_types.json", json.dumps(r).encode())
out("report", "array_not_object.json", b"[1, 2, 3]")

# ---- profiles --------------------------------------------------------------------------------
trace = {"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                                               "ts": 0, "dur": 10}]}
out("profile", "cpu_only_trace.json", json.dumps(trace).encode())
out("profile", "truncated.json.gz", gzip.compress(json.dumps(trace).encode() * 50)[:-40])
out("profile", "kernel_negative_duration.json",
    json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "ampere_h16816gemm", "pid": 0, "tid": 7,
                                 "ts": 1e300, "dur": -5, "args": {"correlation": -1, "External id": 2**70}}]}).encode())
db = os.path.join(HERE, "profile", "other_tool.sqlite")
if os.path.exists(db):
    os.remove(db)
c = sqlite3.connect(db)
c.execute("CREATE TABLE users (id INTEGER, name TEXT)")
c.commit()
c.close()
out("profile", "nested.json", b'{"traceEvents": ' + b"[" * 100000 + b"]" * 100000 + b"}")
print("written under", HERE)
