#!/usr/bin/env python3
"""Exports hf_gpt2_tiny.onnx: a Hugging Face transformers GPT2Model (2 layers, width 32,
2 heads, vocabulary 50, random weights from seed 0) under a Linear head on the last
token, exported by torch.onnx.export (TorchScript, opset 17, dynamic batch), as a user
exports a sequence classifier. Its attention builds the masks transformers builds from
torch.finfo(float32).min; trained at O2 in float16 its loss scaler skips steps while the
gradients grow, some of them through autograd's sum over a residual.

Beside it: hf_gpt2_tiny.npz (input_ids, attention_mask with padding, labels; 64 rows)
and hf_gpt2_tiny.ref.npy (PyTorch's eval-mode logits for the first 8 rows).

Also hf_bert_sdpa.onnx (.npz, .ref.npy the same way): a BertForSequenceClassification (2
layers, width 32, 2 heads, 2 labels) with transformers' default attention, "sdpa"
(F.scaled_dot_product_attention with the padding mask as a boolean attn_mask, which the
exporter writes as a Where of 0 and -inf and a safe softmax).

  bench/onnx/.venv/bin/pip install transformers
  bench/onnx/.venv/bin/python tests/data/onnx/make_hf_exports.py [--out tests/data/onnx]
"""

import argparse
import warnings
from pathlib import Path

import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2Model

SEQ, VOCAB, ROWS = 16, 50, 64


class LastTokenHead(torch.nn.Module):
    def __init__(self, base: torch.nn.Module, width: int):
        super().__init__()
        self.base = base
        self.head = torch.nn.Linear(width, 2)

    def forward(self, input_ids, attention_mask):
        h = self.base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(h[:, -1, :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    out = ap.parse_args().out
    torch.manual_seed(0)
    config = GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=VOCAB, n_positions=SEQ, bos_token_id=0,
                        eos_token_id=0, attn_implementation="eager")
    model = LastTokenHead(GPT2Model(config), 32).eval()
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, size=(ROWS, SEQ), dtype=np.int64)
    lengths = rng.integers(4, SEQ + 1, size=ROWS)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int64)
    labels = (ids[:, 0] % 2).astype(np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.from_numpy(ids[:2]), torch.from_numpy(mask[:2])), str(out / "hf_gpt2_tiny.onnx"),
                          dynamo=False, opset_version=17, input_names=["input_ids", "attention_mask"],
                          output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"}, "logits": {0: "batch"}})
    np.savez(out / "hf_gpt2_tiny.npz", input_ids=ids, attention_mask=mask, labels=labels)
    with torch.no_grad():
        np.save(out / "hf_gpt2_tiny.ref.npy", model(torch.from_numpy(ids[:8]), torch.from_numpy(mask[:8])).numpy())
    print(f"wrote {out / 'hf_gpt2_tiny.onnx'}")
    bert_sdpa(out, ids, mask, labels)


class Logits(torch.nn.Module):
    def __init__(self, base: torch.nn.Module):
        super().__init__()
        self.base = base

    def forward(self, input_ids, attention_mask):
        return self.base(input_ids=input_ids, attention_mask=attention_mask).logits


def bert_sdpa(out: Path, ids, mask, labels) -> None:
    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        vocab_size=VOCAB, max_position_embeddings=SEQ, num_labels=2, attn_implementation="sdpa")
    model = Logits(BertForSequenceClassification(config)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.from_numpy(ids[:2]), torch.from_numpy(mask[:2])), str(out / "hf_bert_sdpa.onnx"),
                          dynamo=False, opset_version=17, input_names=["input_ids", "attention_mask"],
                          output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"}, "logits": {0: "batch"}})
    np.savez(out / "hf_bert_sdpa.npz", input_ids=ids, attention_mask=mask, labels=labels)
    with torch.no_grad():
        np.save(out / "hf_bert_sdpa.ref.npy", model(torch.from_numpy(ids[:8]), torch.from_numpy(mask[:8])).numpy())
    print(f"wrote {out / 'hf_bert_sdpa.onnx'}")


if __name__ == "__main__":
    main()
