"""The peers' side of bench/peers: an ampcheck model file (samples/models/*.json) built
as the same architecture in PyTorch or PaddlePaddle, and one training step of it as a
user of that framework writes it (zero_grad, forward and loss under the framework's
autocast, a GradScaler where the mode scales, the optimizer step, loss.item()).

Only what the peer benchmark's samples use is translated (linear, relu, gelu, conv2d,
batch_norm, layer_norm, add, adaptive_avg_pool2d, flatten, embedding, attention, mean);
any other node kind raises, naming it. Attention is written out as ampcheck's
MultiHeadAttention computes it (engine/nn/layers.cpp): separate q, k, v and out
projections, scores scaled by 1/sqrt(head dim), softmax, no mask."""

import json
import math
import os
import sys

SUPPORTED = {"linear", "relu", "gelu", "conv2d", "batch_norm", "layer_norm", "add",
             "adaptive_avg_pool2d", "flatten", "embedding", "attention", "mean"}


def load_model_file(path):
    with open(path) as f:
        m = json.load(f)
    for node in m["nodes"]:
        if node["kind"] not in SUPPORTED:
            raise ValueError(f"{path}: node {node['name']!r} of kind {node['kind']!r} has no peer translation; "
                             f"bench/peers/frameworks.py knows {sorted(SUPPORTED)}")
    return m


def input_spec(model):
    """(shape of one sample, is the input integer indices, vocabulary) from the data block."""
    d = model["data"]
    g = d.get("generator")
    if g == "spiral":
        return [2], False, 0
    if g == "blobs":
        return [d.get("dims", 2)], False, 0
    if g == "images":
        return [d.get("channels", 3), d["size"], d["size"]], False, 0
    if g == "sequences":
        return [d["length"]], True, d["vocab"]
    raise ValueError(f"data generator {g!r} has no peer translation")


def classes_of(model):
    out = {n["name"]: n for n in model["nodes"]}[model.get("output", model["nodes"][-1]["name"])]
    return out["out"]


def pair(v):
    return tuple(v) if isinstance(v, list) else (v, v)


class Graph:
    """The model file's wiring, framework-neutral: each node's inputs by name."""

    def __init__(self, model):
        self.model = model
        self.nodes = model["nodes"]
        self.wiring = []
        previous = "input"
        for n in self.nodes:
            if "inputs" in n:
                ins = n["inputs"]
            elif "input" in n:
                ins = [n["input"]]
            else:
                ins = [previous]
            self.wiring.append(ins)
            previous = n["name"]
        self.output = model.get("output", self.nodes[-1]["name"])

    def forward(self, inp, constants, apply, make=None):
        """Runs the nodes in file order; with make, creates each node's layer first from
        its inputs (the probe pass that infers input sizes)."""
        values = {"input": inp, **constants}
        for n, wires in zip(self.nodes, self.wiring):
            ins = [values[w] for w in wires]
            if make:
                make(n, ins)
            values[n["name"]] = apply(n, ins)
        return values[self.output]


def torch_step(net, opt, xb, yb, mode):
    """One PyTorch training step as a user writes it: zero_grad, forward and cross-entropy
    under CPU autocast (bf16, fp16 or off), a GradScaler for fp16, the optimizer step,
    loss.item()."""
    import torch
    import torch.nn.functional as F

    low = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[mode]
    scaler = torch.amp.GradScaler("cpu") if mode == "fp16" else None

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=low or torch.bfloat16, enabled=low is not None):
            loss = F.cross_entropy(net(*xb) if isinstance(xb, tuple) else net(xb), yb)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss.item()

    return step


def torch_worker(model, mode, batch, lr, threads):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    g = Graph(model)
    shape, integer, vocab = input_spec(model)
    classes = classes_of(model)
    constants = {}
    for name, c in model.get("constants", {}).items():
        if "arange" not in c:
            raise ValueError(f"constant {name!r}: only arange has a peer translation")
        constants[name] = torch.arange(c["arange"])

    # Layers need input sizes: run a probe in fp32 node by node, creating layers as they come.
    layers = torch.nn.ModuleDict()
    x = (torch.randint(0, vocab, [2] + shape) if integer else torch.randn([2] + shape))

    class Attention(torch.nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads = heads
            self.q, self.k, self.v, self.out = (torch.nn.Linear(dim, dim) for _ in range(4))

        def forward(self, t):
            b, n, d = t.shape
            dh = d // self.heads
            split = lambda u: u.reshape(b, n, self.heads, dh).permute(0, 2, 1, 3)
            q, k, v = split(self.q(t)), split(self.k(t)), split(self.v(t))
            s = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))
            a = torch.matmul(torch.softmax(s, -1), v)
            return self.out(a.permute(0, 2, 1, 3).reshape(b, n, d))

    def make(n, ins):
        k = n["kind"]
        t = ins[0]
        key = n["name"].replace(".", "_")
        if k == "linear":
            layers[key] = torch.nn.Linear(t.shape[-1], n["out"], bias=n.get("bias", True))
        elif k == "conv2d":
            layers[key] = torch.nn.Conv2d(t.shape[1], n["out"], pair(n["kernel"]), stride=pair(n.get("stride", 1)),
                                          padding=pair(n.get("padding", 0)), bias=n.get("bias", True))
        elif k == "batch_norm":
            layers[key] = torch.nn.BatchNorm2d(t.shape[1])
        elif k == "layer_norm":
            layers[key] = torch.nn.LayerNorm(t.shape[-1])
        elif k == "embedding":
            layers[key] = torch.nn.Embedding(n["num"], n["dim"])
        elif k == "attention":
            layers[key] = Attention(t.shape[-1], n["heads"])

    def apply(n, ins):
        k = n["kind"]
        key = n["name"].replace(".", "_")
        if key in layers:
            return layers[key](ins[0])
        if k == "relu":
            return F.relu(ins[0])
        if k == "gelu":
            return F.gelu(ins[0], approximate="tanh" if n.get("tanh") else "none")
        if k == "add":
            return ins[0] + ins[1]
        if k == "adaptive_avg_pool2d":
            return F.adaptive_avg_pool2d(ins[0], pair(n["output"]))
        if k == "flatten":
            return torch.flatten(ins[0], n.get("start_dim", 1))
        if k == "mean":
            return ins[0].mean(dim=n["dims"], keepdim=n.get("keepdim", False))
        raise ValueError(k)

    def forward(inp, build=False):
        return g.forward(inp, constants, apply, make if build else None)

    with torch.no_grad():
        forward(x, build=True)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = layers

        def forward(self, inp):
            return forward(inp)

    net = Net().train()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    xb = torch.randint(0, vocab, [batch] + shape) if integer else torch.randn([batch] + shape)
    yb = torch.randint(0, classes, [batch])
    return torch_step(net, opt, xb, yb, mode)


def paddle_worker(model, mode, batch, lr, threads):
    if mode != "fp32":
        raise ValueError("PaddlePaddle's auto_cast and GradScaler make no effect on the CPU (they warn so): "
                         "only fp32 is measured")
    import paddle
    import paddle.nn.functional as F

    paddle.set_device("cpu")
    paddle.seed(0)
    g = Graph(model)
    shape, integer, vocab = input_spec(model)
    classes = classes_of(model)
    constants = {name: paddle.arange(c["arange"]) for name, c in model.get("constants", {}).items()}
    layers = paddle.nn.LayerDict()

    class Attention(paddle.nn.Layer):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads = heads
            self.q, self.k, self.v, self.out = (paddle.nn.Linear(dim, dim) for _ in range(4))

        def forward(self, t):
            b, n, d = t.shape
            dh = d // self.heads
            split = lambda u: u.reshape([b, n, self.heads, dh]).transpose([0, 2, 1, 3])
            q, k, v = split(self.q(t)), split(self.k(t)), split(self.v(t))
            s = paddle.matmul(q, k, transpose_y=True) * (1.0 / math.sqrt(dh))
            a = paddle.matmul(F.softmax(s, -1), v)
            return self.out(a.transpose([0, 2, 1, 3]).reshape([b, n, d]))

    def make(n, ins):
        k = n["kind"]
        t = ins[0]
        key = n["name"].replace(".", "_")
        if k == "linear":
            layers[key] = paddle.nn.Linear(t.shape[-1], n["out"], bias_attr=None if n.get("bias", True) else False)
        elif k == "conv2d":
            layers[key] = paddle.nn.Conv2D(t.shape[1], n["out"], pair(n["kernel"]), stride=pair(n.get("stride", 1)),
                                           padding=pair(n.get("padding", 0)),
                                           bias_attr=None if n.get("bias", True) else False)
        elif k == "batch_norm":
            layers[key] = paddle.nn.BatchNorm2D(t.shape[1])
        elif k == "layer_norm":
            layers[key] = paddle.nn.LayerNorm(t.shape[-1])
        elif k == "embedding":
            layers[key] = paddle.nn.Embedding(n["num"], n["dim"])
        elif k == "attention":
            layers[key] = Attention(t.shape[-1], n["heads"])

    def apply(n, ins):
        k = n["kind"]
        key = n["name"].replace(".", "_")
        if key in layers:
            return layers[key](ins[0])
        if k == "relu":
            return F.relu(ins[0])
        if k == "gelu":
            return F.gelu(ins[0], approximate=bool(n.get("tanh")))
        if k == "add":
            return ins[0] + ins[1]
        if k == "adaptive_avg_pool2d":
            return F.adaptive_avg_pool2d(ins[0], pair(n["output"]))
        if k == "flatten":
            return paddle.flatten(ins[0], n.get("start_dim", 1))
        if k == "mean":
            return ins[0].mean(axis=n["dims"], keepdim=n.get("keepdim", False))
        raise ValueError(k)

    def forward(inp, build=False):
        return g.forward(inp, constants, apply, make if build else None)

    def data(rows):
        return (paddle.randint(0, vocab, [rows] + shape) if integer else paddle.randn([rows] + shape))

    with paddle.no_grad():
        forward(data(2), build=True)

    class Net(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.layers = layers

        def forward(self, inp):
            return forward(inp)

    net = Net()
    net.train()
    opt = paddle.optimizer.Adam(learning_rate=lr, parameters=net.parameters())
    xb, yb = data(batch), paddle.randint(0, classes, [batch])

    def step():
        opt.clear_grad(set_to_zero=False)
        loss = F.cross_entropy(net(xb), yb)
        loss.backward()
        opt.step()
        return loss.item()

    return step


WORKERS = {"torch": torch_worker, "paddle": paddle_worker}


def torch_onnx_worker(name, onnx_dir, mode, batch, lr, threads):
    """A model of the ONNX benchmark (bench/onnx/export.py) trained in PyTorch, as ampcheck
    trains its export: the first `batch` rows of NAME.npz, cross-entropy, Adam at `lr`."""
    import numpy as np
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "onnx"))
    import export

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    ctor, _classes, kind = export.MODELS[name]
    net = ctor().train()
    data = np.load(os.path.join(onnx_dir, name + ".npz"))
    # Every input of the model (bert_mask: the token ids and the attention mask), as ampcheck
    # takes them from the same file.
    xb = tuple(torch.from_numpy(data[k][:batch]) for k in export.input_names(kind))
    yb = torch.from_numpy(data["labels"][:batch]).long()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    return torch_step(net, opt, xb, yb, mode)
