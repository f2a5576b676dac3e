#!/usr/bin/env python3
"""Exports the small ONNX models the import tests train, the way users export them.

Each model is exported by PyTorch's TorchScript exporter at opset 17 with random weights
(a fixed seed), beside its training data (NAME.npz: the graph's inputs by name and
"labels") and PyTorch's eval-mode float32 output (NAME.ref.npy: every row of the fixed-batch
model, the first four rows of the others):

  fixed_batch_torch   a small CNN exported WITHOUT dynamic_axes (torch.onnx.export's
                      default): its input is [4, 3, 8, 8], the batch size fixed at 4, and
                      the exporter bakes the 4 into a Reshape before the classifier.
  hf_bert_mul         a BERT-style encoder layer whose additive attention mask is made as
                      Hugging Face transformers made it for years:
                      (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min
                      (a Sub and a Mul by the constant -3.4e38), added to the scores, softmax.
  hf_bert_where       the same mask as transformers makes it now:
                      torch.where(mask.bool(), 0.0, torch.finfo(torch.float32).min)
                      (a Where of two constants).
  hf_gpt2_where       a GPT-2-style causal block: torch.where(causal, scores, mask_value)
                      with mask_value = torch.finfo(float32).min (GPT-2's attention), then the
                      padding mask added as in hf_bert_mul, softmax.
  mask_misread        the hf_bert_mul mask read by something other than softmax: the row
                      maximum of the masked scores (a ReduceMax: finite, since every row keeps
                      a real token) feeds the output. A failure unless the user says, with
                      --allow-inf, that the max is meant to read the mask.
  mask_to_loss        the same mask's row minimum (a ReduceMin) feeds the output: the -3.4e38
                      that fp16 turns into -Inf reaches the loss. A real failure.

  bench/onnx/.venv/bin/python tests/data/onnx/make_exports.py [--out tests/data/onnx]
"""

from __future__ import annotations

import argparse
import math
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

OPSET = 17
VOCAB, SEQ, DIM, HEADS, ROWS = 50, 8, 16, 2, 16
FMIN = torch.finfo(torch.float32).min


class Attention(nn.Module):
    def __init__(self, causal: bool = False):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM) for _ in range(4))
        self.hd = DIM // HEADS
        if causal:
            self.register_buffer("bias", torch.tril(torch.ones(SEQ, SEQ, dtype=torch.bool)).view(1, 1, SEQ, SEQ))
        else:
            self.bias = None

    def heads(self, x):
        return x.reshape(-1, SEQ, HEADS, self.hd).transpose(1, 2)

    def scores(self, x):
        q, k = self.heads(self.q(x)), self.heads(self.k(x))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd)
        if self.bias is not None:  # GPT-2: attn_weights = torch.where(causal_mask, attn_weights, mask_value)
            mask_value = torch.full([], FMIN, dtype=s.dtype)
            s = torch.where(self.bias, s, mask_value)
        return s

    def finish(self, x, probs):
        ctx = torch.matmul(probs, self.heads(self.v(x))).transpose(1, 2).reshape(-1, SEQ, DIM)
        return self.o(ctx)


class MaskedEncoder(nn.Module):
    """Embedding, one attention layer with an additive padding mask, LayerNorm, mean pool, head."""

    def __init__(self, mask_form: str, causal: bool = False, misread: str = ""):
        super().__init__()
        self.mask_form, self.misread = mask_form, misread
        self.emb = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(SEQ, DIM) * 0.02)
        self.attn = Attention(causal)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, 2)

    def extended_mask(self, mask):
        m = mask[:, None, None, :]
        if self.mask_form == "mul":  # transformers' get_extended_attention_mask, 2020-2024
            return (1.0 - m) * FMIN
        return torch.where(m.bool(), 0.0, FMIN)  # transformers' newer mask utilities

    def forward(self, input_ids, attention_mask):
        x = self.emb(input_ids) + self.pos
        s = self.attn.scores(x) + self.extended_mask(attention_mask)
        probs = torch.softmax(s, dim=-1)
        h = self.norm(x + self.attn.finish(x, probs))
        out = self.head(h.mean(dim=1))
        if self.misread:  # the masked scores' row maximum (or minimum) reaches the output
            row = s.amax(dim=-1) if self.misread == "max" else s.amin(dim=-1)
            out = out + 1e-3 * row.mean(dim=(1, 2)).unsqueeze(-1)
        return out


class FixedCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 3)

    def forward(self, x):
        h = torch.relu(self.conv(x))
        h = torch.nn.functional.max_pool2d(h, 2)
        return self.fc(h.reshape(x.shape[0], -1))  # the traced batch size becomes a constant


def export(model, args, names, path, dynamic: bool):
    kwargs = dict(opset_version=OPSET, input_names=names, output_names=["logits"], do_constant_folding=True)
    if dynamic:
        kwargs["dynamic_axes"] = {**{n: {0: "batch"} for n in names}, "logits": {0: "batch"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(path), dynamo=False, **kwargs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    out = ap.parse_args().out
    out.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    cnn = FixedCnn().eval()
    x = rng.standard_normal((ROWS, 3, 8, 8), dtype=np.float32)
    y = rng.integers(0, 3, size=ROWS, dtype=np.int64)
    export(cnn, (torch.from_numpy(x[:4]),), ["input"], out / "fixed_batch_torch.onnx", dynamic=False)
    np.savez(out / "fixed_batch_torch.npz", input=x, labels=y)
    with torch.no_grad():  # every row, four at a time
        np.save(out / "fixed_batch_torch.ref.npy",
                np.concatenate([cnn(torch.from_numpy(x[i:i + 4])).numpy() for i in range(0, ROWS, 4)]))

    ids = rng.integers(0, VOCAB, size=(ROWS, SEQ), dtype=np.int64)
    lengths = rng.integers(3, SEQ + 1, size=ROWS)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.float32)  # 1: a real token, 0: padding
    labels = rng.integers(0, 2, size=ROWS, dtype=np.int64)
    for name, model in (("hf_bert_mul", MaskedEncoder("mul")), ("hf_bert_where", MaskedEncoder("where")),
                        ("hf_gpt2_where", MaskedEncoder("mul", causal=True)),
                        ("mask_misread", MaskedEncoder("mul", misread="max")),
                        ("mask_to_loss", MaskedEncoder("mul", misread="min"))):
        torch.manual_seed(1)
        model.eval()
        export(model, (torch.from_numpy(ids[:2]), torch.from_numpy(mask[:2])), ["input_ids", "attention_mask"],
               out / f"{name}.onnx", dynamic=True)
        np.savez(out / f"{name}.npz", input_ids=ids, attention_mask=mask, labels=labels)
        with torch.no_grad():
            np.save(out / f"{name}.ref.npy", model(torch.from_numpy(ids[:4]), torch.from_numpy(mask[:4])).numpy())
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
