"""Small models PyTorch exports, with PyTorch's own outputs, for ampcheck_onnx_tests
(OnnxPytorchOps.*): recurrent layers, pooling with ceil_mode / dilation / asymmetric
padding, transposed convolutions, a sequence-classification head that picks the last real token (ArgMax on token
ids), TopK, Einsum, gather and scatter, and attention through F.scaled_dot_product_attention.

    python tests/data/onnx/make_models.py   # torch 2.x, onnx; writes next to this file

Each model NAME is NAME.onnx (random weights, seed 0, opset 17, the TorchScript exporter
with a dynamic batch axis, as docs/onnx.md says) and NAME.npz: the inputs under the
model's input names and PyTorch's float32 output as "output" (np.savez_compressed).
lstm_seq_lens.onnx is written with onnx.helper from a PyTorch LSTM's weights (PyTorch
exports no sequence_lens); its reference is PyTorch's packed-sequence output.
"""
import os

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)


def export(name, model, inputs, names, dynamic=None, opset=17):
    model.eval()
    path = os.path.join(HERE, name + ".onnx")
    axes = dynamic if dynamic is not None else {n: {0: "batch"} for n in names + ["output"]}
    torch.onnx.export(model, tuple(inputs), path, opset_version=opset, dynamo=False, input_names=names,
                      output_names=["output"], dynamic_axes=axes)
    with torch.no_grad():
        out = model(*inputs)
    arrays = {n: x.numpy() for n, x in zip(names, inputs)}
    arrays["output"] = out.numpy()
    np.savez_compressed(os.path.join(HERE, name + ".npz"), **arrays)


class Recurrent(torch.nn.Module):
    """A recurrent layer and a linear head on every step's output and on the last state."""

    def __init__(self, kind, **kw):
        super().__init__()
        self.rnn = getattr(torch.nn, kind)(3, 4, **kw)
        width = 4 * (2 if kw.get("bidirectional") else 1)
        self.head = torch.nn.Linear(width, 2)
        self.batch_first = kw.get("batch_first", False)

    def forward(self, x):
        y, state = self.rnn(x)
        h = state[0] if isinstance(state, tuple) else state
        last = h[-1]  # the last layer's last direction
        steps = y if self.batch_first else y.transpose(0, 1)
        return self.head(steps).sum(1) + last.sum(1, keepdim=True)


class Pools(torch.nn.Module):
    """SqueezeNet's and Caffe-era pooling: ceil_mode, padding, dilation, 'same' convs."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 4, padding="same")  # even kernel: asymmetric pads
        self.p1 = torch.nn.MaxPool2d(3, 2, ceil_mode=True)
        self.p2 = torch.nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=True)
        self.p3 = torch.nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False)
        self.p4 = torch.nn.MaxPool2d(2, 1, padding=1, dilation=2)
        self.p5 = torch.nn.MaxPool1d(3, 2, ceil_mode=True)

    def forward(self, x):
        y = self.conv(x)
        a = self.p1(y).flatten(1)
        b = self.p2(y).flatten(1)
        c = self.p3(y).flatten(1)
        d = self.p4(y).flatten(1)
        e = self.p5(y.flatten(2)).flatten(1)
        return torch.cat([a, b, c, d, e], 1)


class LastTokenHead(torch.nn.Module):
    """Hugging Face's sequence classification: the score at the last token before padding
    (pad id 0), found with ArgMax on the token ids; and the top-2 scores of the mean."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 6)
        self.score = torch.nn.Linear(6, 3, bias=False)

    def forward(self, input_ids):
        logits = self.score(torch.tanh(self.emb(input_ids)))
        last = (torch.eq(input_ids, 0).int().argmax(-1) - 1) % input_ids.shape[-1]
        picked = logits[torch.arange(input_ids.shape[0]), last]
        top = torch.topk(logits.mean(1), 2, dim=-1).values
        return torch.cat([picked, top], 1)


class Indexing(torch.nn.Module):
    """Einsum (attention scores, a batched matmul, a transpose), gather and scatter_add."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(4, 4)
        self.k = torch.nn.Linear(4, 4)

    def forward(self, x):
        q, k = self.q(x), self.k(x)
        scores = torch.einsum("bqd,bkd->bqk", q, k)
        mixed = torch.einsum("bqk,bkd->bqd", scores.softmax(-1), x)
        idx = torch.tensor([[2, 0, 1, 1], [0, 0, 2, 1], [1, 2, 2, 0]])
        g = torch.gather(mixed, 1, idx.expand(x.shape[0], 3, 4))
        s = torch.zeros_like(mixed).scatter_add(1, idx.expand(x.shape[0], 3, 4), g)
        return (s + torch.einsum("bqd->bdq", mixed).transpose(1, 2)).flatten(1)


class Upsampler(torch.nn.Module):
    """A decoder's transposed convolutions: stride 2 with output_padding, groups, dilation."""

    def __init__(self):
        super().__init__()
        self.up1 = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.up2 = torch.nn.ConvTranspose2d(6, 2, (2, 3), stride=(1, 2), padding=(0, 2), dilation=2)
        self.up3 = torch.nn.ConvTranspose1d(2, 3, 4, stride=3, padding=1)

    def forward(self, x):
        y = self.up2(torch.relu(self.up1(x)))
        return self.up3(y.flatten(2)).flatten(1)


def lstm_seq_lens():
    """A bidirectional LSTM over padded sequences of lengths 4, 2 and 1: ONNX's
    sequence_lens against PyTorch's packed sequences."""
    lstm = torch.nn.LSTM(3, 4, bidirectional=True)
    x = torch.randn(4, 3, 3)
    lens = torch.tensor([4, 2, 1])
    with torch.no_grad():
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lens, enforce_sorted=False)
        y, (h, c) = lstm(packed)
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=4)  # [T, B, 2H], zeros past the end

    def iofc(w):  # PyTorch's gates i, f, g, o; ONNX's i, o, f, c
        i, f, g, o = w.chunk(4, 0)
        return torch.cat([i, o, f, g], 0)

    sd = {k: v.detach() for k, v in lstm.state_dict().items()}
    W = torch.stack([iofc(sd["weight_ih_l0"]), iofc(sd["weight_ih_l0_reverse"])])
    R = torch.stack([iofc(sd["weight_hh_l0"]), iofc(sd["weight_hh_l0_reverse"])])
    B = torch.stack([torch.cat([iofc(sd["bias_ih_l0"]), iofc(sd["bias_hh_l0"])]),
                     torch.cat([iofc(sd["bias_ih_l0_reverse"]), iofc(sd["bias_hh_l0_reverse"])])])
    node = helper.make_node("LSTM", ["input", "W", "R", "B", "lens"], ["Y", "Y_h", "Y_c"], name="/lstm/LSTM",
                            direction="bidirectional", hidden_size=4)
    graph = helper.make_graph(
        [node], "lstm_seq_lens",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [4, 3, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4, 2, 3, 4]),
         helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("Y_c", TensorProto.FLOAT, [2, 3, 4])],
        [numpy_helper.from_array(W.numpy(), "W"), numpy_helper.from_array(R.numpy(), "R"),
         numpy_helper.from_array(B.numpy(), "B"), numpy_helper.from_array(lens.numpy().astype(np.int32), "lens")])
    model = helper.make_model(graph, producer_name="pytorch", opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, "lstm_seq_lens.onnx"))
    y = y.reshape(4, 3, 2, 4).permute(0, 2, 1, 3)  # [T, D, B, H] as ONNX
    np.savez_compressed(os.path.join(HERE, "lstm_seq_lens.npz"), input=x.numpy(), Y=y.numpy(), Y_h=h.numpy(),
                        Y_c=c.numpy())


class Attention(torch.nn.Module):
    """Three attentions over the heads of one projection: F.scaled_dot_product_attention
    with is_causal, the same with an additive float mask (a buffer), and attention written
    by hand as nanoGPT's slow path writes it ((q @ k^T) / sqrt(d), softmax, @ v). The
    exporter writes the first two in the SDPA form ampcheck runs as one op; the third stays
    as written."""

    def __init__(self, dim=16, heads=2, length=6):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.register_buffer("bias", torch.randn(length, length))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        causal = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        masked = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=self.bias[:t, :t])
        scores = (q @ k.transpose(-2, -1)) / (k.size(-1) ** 0.5)
        by_hand = torch.softmax(scores, dim=-1) @ v
        y = (causal + 2 * masked + by_hand).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


if __name__ == "__main__":
    x = torch.randn(2, 5, 3)
    export("lstm", Recurrent("LSTM", num_layers=2, batch_first=True, bidirectional=True), [x], ["input"])
    export("gru", Recurrent("GRU", bidirectional=True), [x.transpose(0, 1).contiguous()], ["input"],
           dynamic={"input": {1: "batch"}, "output": {0: "batch"}})
    export("rnn_relu", Recurrent("RNN", nonlinearity="relu", batch_first=True), [x], ["input"])
    export("pools", Pools(), [torch.randn(2, 3, 7, 8)], ["input"])
    ids = torch.tensor([[3, 4, 5, 0, 0], [1, 2, 3, 4, 5], [7, 0, 0, 0, 0]])
    export("last_token_head", LastTokenHead(), [ids], ["input_ids"],
           dynamic={"input_ids": {0: "batch", 1: "sequence"}, "output": {0: "batch"}})
    export("indexing", Indexing(), [torch.randn(2, 3, 4)], ["input"])
    lstm_seq_lens()
    export("upsampler", Upsampler(), [torch.randn(2, 4, 3, 4)], ["input"])
    export("attention", Attention(), [torch.randn(2, 6, 16)], ["input"])
