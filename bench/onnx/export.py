#!/usr/bin/env python3
"""Exports the models of the ONNX import benchmark with PyTorch, with their data.

Eleven models, random weights (fixed seed, PyTorch's default initialisation, nothing
downloaded), exported in eval mode by PyTorch's TorchScript exporter at opset 17 (the
newest the Debian ONNX 1.12 library can check) with a dynamic batch axis:

  resnet18       torchvision resnet18(num_classes=10), input float32 [N, 3, 64, 64]
  mobilenet_v3   torchvision mobilenet_v3_small(num_classes=10), input as resnet18
  bert_block     BERT-style encoder: token + learned position embedding, one post-LN
                 encoder layer (explicit q/k/v/out attention, erf GELU feed-forward),
                 mean pool over time, 2 classes; input int64 token ids [N, 16], vocab 100
  gpt2_block     GPT-2-style block: pre-LN, fused c_attn split into q/k/v, causal mask by
                 masked_fill(-inf), tanh GELU, final LayerNorm, last-token pooling, 2
                 classes; input as bert_block
  overflow_mlp   Linear(16,64) -> x*300 -> square -> LayerNorm -> ReLU -> Linear(64,4),
                 input float32 [N, 16]: finite in fp32, the square overflows fp16's 65504
  efficientnet_b0  torchvision efficientnet_b0(num_classes=10): depthwise 3x3 and 5x5
                 convolutions, squeeze-and-excitation, SiLU; input as resnet18
  mobilenet_v2   torchvision mobilenet_v2(num_classes=10): depthwise 3x3, ReLU6
  shufflenet_v2  torchvision shufflenet_v2_x1_0(num_classes=10): depthwise 3x3, channel
                 split and shuffle (Reshape/Transpose)
  resnext50      torchvision resnext50_32x4d(num_classes=10): grouped 3x3 convolutions
                 (32 groups)
  lstm_classifier  embedding, one nn.LSTM layer (batch_first), the last step's hidden
                 state, 2 classes; input as bert_block. An importer without LSTM refuses
                 it; the benchmarks report the refusal
  gru_classifier   the same with nn.GRU
  bert_mask      bert_block with a second input, attention_mask int64 [N, 16] (1 for a
                 real token, 0 for padding at the end), turned into the additive mask as
                 Hugging Face does: (1 - mask[:, None, None, :]) * finfo(float32).min;
                 pooled on the first token through a tanh pooler, as BertPooler

BatchNorm running statistics are taken from one train-mode pass over the training
inputs (no gradient) before the export, so that the eval-mode models do normalise (see
calibrate_batchnorm). For each model NAME it writes, into --out:
  NAME.onnx       the model (input "input", output "logits", batch axis "N")
  NAME.npz        training data: "input" (64 rows; bert_mask also "attention_mask") and
                  "labels" (int64 [64], in [0, classes))
  NAME.eval.npz   the inputs' first 8 rows
  NAME.ref.npy    PyTorch's eval-mode float32 logits on those 8 rows
and manifest.json (per model: classes, shapes, parameter counts, op types, opset, versions).

Then, unless --no-verify, each file is checked: onnx.checker (full check), strict
shape inference, and the ONNX reference evaluator's logits against NAME.ref.npy
(max |a-b| / max |b| < 1e-4). Exit 1 if a check fails.

  bench/onnx/.venv/bin/python bench/onnx/export.py --out /tmp/onnx-models
  options: --seed S, --only NAME[,NAME], --bn preserve (keep BatchNormalization nodes
  instead of folding them into the convolutions), --no-verify
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn as nn

def _torchvision():
    """torchvision, for the image models only: the attention blocks need nothing but torch."""
    import torchvision
    return torchvision


OPSET = 17
TRAIN_ROWS = 64  # rows of NAME.npz
EVAL_ROWS = 8  # rows of NAME.eval.npz and NAME.ref.npy
TRACE_ROWS = 2  # the batch the exporter traces: not 8, so a baked-in batch size shows up in the check
REL_TOL = 1e-4

VOCAB, SEQ, DIM, HEADS = 100, 16, 64, 4


class SelfAttention(nn.Module):
    """Multi-head self-attention written out: Linear q/k/v, scaled scores, Softmax, Linear out."""

    def __init__(self, dim: int, heads: int, causal_len: int | None = None, fused_qkv: bool = False):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.fused_qkv = fused_qkv
        if fused_qkv:  # GPT-2's c_attn: one projection to 3*dim, split into q, k, v
            self.c_attn = nn.Linear(dim, 3 * dim)
        else:
            self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        if causal_len is not None:
            # True above the diagonal: the future positions a token must not see. Used as
            # stored (no slicing, no negation), so it exports as an initializer named "...mask".
            mask = torch.triu(torch.ones(causal_len, causal_len, dtype=torch.bool), diagonal=1)
            self.register_buffer("mask", mask)
        else:
            self.mask = None

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        # [N, T, D] -> [N, H, T, Dh]; -1 for the batch so that no batch size is baked in.
        return x.reshape(-1, SEQ, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.fused_qkv:
            q, k, v = self.c_attn(x).split(self.heads * self.head_dim, dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale  # [N, H, T, T]
        if self.mask is not None:
            scores = scores.masked_fill(self.mask, float("-inf"))
        if additive_mask is not None:  # [N, 1, 1, T]: 0 where attended, finfo(float32).min where not
            scores = scores + additive_mask
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(-1, SEQ, self.heads * self.head_dim)
        return self.out(ctx)


class BertBlock(nn.Module):
    """BERT-style: embeddings + LayerNorm, one post-LN encoder layer, mean pool, head."""

    def __init__(self, classes: int = 2):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, DIM)
        self.pos_emb = nn.Parameter(torch.randn(SEQ, DIM) * 0.02)  # learned, added as is
        self.emb_norm = nn.LayerNorm(DIM)
        self.attn = SelfAttention(DIM, HEADS)
        self.attn_norm = nn.LayerNorm(DIM)
        self.ffn = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))
        self.ffn_norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb_norm(self.tok_emb(ids) + self.pos_emb)
        x = self.attn_norm(x + self.attn(x))
        x = self.ffn_norm(x + self.ffn(x))
        return self.head(x.mean(dim=1))


class BertMaskBlock(BertBlock):
    """bert_block with an attention_mask input, as a Hugging Face BERT takes it: the additive
    mask is built in the model from the int64 [N, T] mask (get_extended_attention_mask:
    (1 - mask[:, None, None, :]) * finfo(float32).min, added to the scores), and the
    first token is pooled through a tanh layer (BertPooler)."""

    def __init__(self, classes: int = 2):
        super().__init__(classes)
        self.pooler = nn.Linear(DIM, DIM)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        extended = attention_mask[:, None, None, :].to(torch.float32)
        extended = (1.0 - extended) * torch.finfo(torch.float32).min
        x = self.emb_norm(self.tok_emb(ids) + self.pos_emb)
        x = self.attn_norm(x + self.attn(x, extended))
        x = self.ffn_norm(x + self.ffn(x))
        return self.head(torch.tanh(self.pooler(x[:, 0])))


class RnnClassifier(nn.Module):
    """Sequence classifier: embedding, one recurrent layer (nn.LSTM or nn.GRU, batch_first),
    the last step's output, a linear head."""

    def __init__(self, cell: str, classes: int = 2):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.rnn = {"lstm": nn.LSTM, "gru": nn.GRU}[cell](DIM, DIM, batch_first=True)
        self.head = nn.Linear(DIM, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.emb(ids))
        return self.head(out[:, -1, :])


class Gpt2Block(nn.Module):
    """GPT-2-style: embeddings, one pre-LN causal block (tanh GELU), final LayerNorm, last token, head."""

    def __init__(self, classes: int = 2):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, DIM)
        self.wpe = nn.Parameter(torch.randn(SEQ, DIM) * 0.02)
        self.ln_1 = nn.LayerNorm(DIM)
        self.attn = SelfAttention(DIM, HEADS, causal_len=SEQ, fused_qkv=True)
        self.ln_2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(approximate="tanh"), nn.Linear(4 * DIM, DIM))
        self.ln_f = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return self.head(self.ln_f(x)[:, -1, :])


class OverflowMlp(nn.Module):
    """fp16 trap: |fc1(x) * 300| > 256 squares past 65504; LayerNorm makes fp32 indifferent to the scale."""

    def __init__(self, classes: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.norm = nn.LayerNorm(64)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x) * 300.0
        h = torch.square(h)
        return self.fc2(self.act(self.norm(h)))


# name -> (constructor, classes, kind of input). New models go at the end: each model's
# seed is its index here, so the earlier models' files stay the same.
MODELS = {
    "resnet18": (lambda: _torchvision().models.resnet18(weights=None, num_classes=10), 10, "image"),
    "mobilenet_v3": (lambda: _torchvision().models.mobilenet_v3_small(weights=None, num_classes=10), 10, "image"),
    "bert_block": (lambda: BertBlock(2), 2, "tokens"),
    "gpt2_block": (lambda: Gpt2Block(2), 2, "tokens"),
    "overflow_mlp": (lambda: OverflowMlp(4), 4, "vector"),
    "efficientnet_b0": (lambda: _torchvision().models.efficientnet_b0(weights=None, num_classes=10), 10, "image"),
    "mobilenet_v2": (lambda: _torchvision().models.mobilenet_v2(weights=None, num_classes=10), 10, "image"),
    "shufflenet_v2": (lambda: _torchvision().models.shufflenet_v2_x1_0(weights=None, num_classes=10), 10, "image"),
    "resnext50": (lambda: _torchvision().models.resnext50_32x4d(weights=None, num_classes=10), 10, "image"),
    "lstm_classifier": (lambda: RnnClassifier("lstm", 2), 2, "tokens"),
    "gru_classifier": (lambda: RnnClassifier("gru", 2), 2, "tokens"),
    "bert_mask": (lambda: BertMaskBlock(2), 2, "tokens+mask"),
}


def input_names(kind: str) -> list[str]:
    """The model's inputs, in its forward's order: the ONNX graph's input names and the
    data files' array names."""
    return ["input", "attention_mask"] if kind == "tokens+mask" else ["input"]


def make_data(kind: str, classes: int, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The inputs by name (input_names(kind)) and the labels."""
    if kind == "image":
        inputs = {"input": rng.standard_normal((TRAIN_ROWS, 3, 64, 64), dtype=np.float32)}
    elif kind == "tokens":
        inputs = {"input": rng.integers(0, VOCAB, size=(TRAIN_ROWS, SEQ), dtype=np.int64)}
    elif kind == "tokens+mask":
        # Sequences of 4 to SEQ real tokens, padded at the end with token 0 and mask 0, as a
        # tokenizer's padding="max_length" gives them.
        ids = rng.integers(1, VOCAB, size=(TRAIN_ROWS, SEQ), dtype=np.int64)
        lengths = rng.integers(4, SEQ + 1, size=(TRAIN_ROWS,))
        mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int64)
        inputs = {"input": ids * mask, "attention_mask": mask}
    else:
        inputs = {"input": rng.standard_normal((TRAIN_ROWS, 16), dtype=np.float32)}
    labels = rng.integers(0, classes, size=(TRAIN_ROWS,), dtype=np.int64)
    return inputs, labels


def calibrate_batchnorm(model: nn.Module, *x: torch.Tensor) -> int:
    """Sets BatchNorm running statistics to those of x: one train-mode pass, no gradient.

    Fresh BatchNorm layers hold mean 0 and variance 1, so at random init an eval-mode
    forward does not normalise at all: mobilenet_v3_small's logits come out near 1e-10
    (below fp16's smallest subnormal). With statistics of real activations the eval-mode
    model, and the Conv weights and biases its BatchNorm folds into, have realistic
    scales. Weights are left as initialised. Returns the number of BatchNorm layers.
    """
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if bns:
        momenta = [m.momentum for m in bns]
        for m in bns:
            m.momentum = 1.0  # running statistics := this batch's
        model.train()
        with torch.no_grad():
            model(*x)
        for m, momentum in zip(bns, momenta):
            m.momentum = momentum
    model.eval()
    return len(bns)


def export(model: nn.Module, samples: dict[str, torch.Tensor], path: Path, bn: str) -> None:
    training = torch.onnx.TrainingMode.PRESERVE if bn == "preserve" else torch.onnx.TrainingMode.EVAL
    kwargs = dict(
        export_params=True,
        do_constant_folding=True,
        opset_version=OPSET,
        input_names=list(samples),
        output_names=["logits"],
        dynamic_axes={**{name: {0: "N"} for name in samples}, "logits": {0: "N"}},
        training=training,
    )
    with warnings.catch_warnings():
        # The TorchScript exporter is deprecated (dynamo is the default since 2.9) and says
        # so on every call; PRESERVE also warns about constant folding. Both are expected.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*constant folding.*")
        try:
            torch.onnx.export(model, tuple(samples.values()), str(path), dynamo=False, **kwargs)
        except TypeError as e:  # a torch whose export() no longer takes dynamo=False
            raise SystemExit(f"export.py: this torch ({torch.__version__}) has no TorchScript ONNX exporter "
                             f"(dynamo=False): {e}; its dynamo exporter is not wired up here") from e


def describe(m: onnx.ModelProto) -> dict:
    g = m.graph
    ops = collections.Counter(n.op_type for n in g.node)
    return {
        "opset": {o.domain or "ai.onnx": o.version for o in m.opset_import},
        "ir_version": m.ir_version,
        "producer": f"{m.producer_name} {m.producer_version}",
        "op_types": dict(sorted(ops.items())),
        "nodes": len(g.node),
        "initializers": len(g.initializer),
        "initializer_elements": int(sum(math.prod(t.dims) for t in g.initializer)),
        "first_initializers": [t.name for t in g.initializer[:10]],
        "first_nodes": [f"{n.name} ({n.op_type})" for n in g.node[:10]],
        "inputs": [f"{i.name}: {onnx.helper.printable_type(i.type)}" for i in g.input],
        "outputs": [f"{o.name}: {onnx.helper.printable_type(o.type)}" for o in g.output],
    }


def verify(path: Path, eval_inputs: dict[str, np.ndarray], ref: np.ndarray) -> tuple[bool, str, float]:
    """onnx.checker, strict shape inference, and the reference evaluator against PyTorch.

    Returns (passed, what was found, seconds the reference evaluator took)."""
    onnx.checker.check_model(str(path), full_check=True)
    m = onnx.load(str(path))
    onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True, data_prop=True)
    try:
        from onnx.reference import ReferenceEvaluator
    except ImportError:
        return True, "checker + strict shape inference ok; this onnx has no ReferenceEvaluator", 0.0
    t0 = time.perf_counter()
    try:
        (got,) = ReferenceEvaluator(m).run(None, eval_inputs)
    except Exception as e:  # noqa: BLE001 - an op the evaluator lacks is a finding, not a crash
        return False, f"checker + strict shape inference ok; reference evaluator failed: {type(e).__name__}: {e}", 0.0
    secs = time.perf_counter() - t0
    if got.shape != ref.shape:
        return False, f"reference evaluator gave shape {got.shape}, PyTorch {ref.shape}", secs
    abs_err = float(np.max(np.abs(got.astype(np.float64) - ref)))
    rel = abs_err / float(np.max(np.abs(ref)))
    ok = bool(np.isfinite(got).all()) and rel < REL_TOL
    return ok, (f"checker + strict shape inference ok; reference evaluator {'PASS' if ok else 'FAIL'}: "
                f"max rel err {rel:.3g}, max abs err {abs_err:.3g} (max |ref| {np.max(np.abs(ref)):.4g})"), secs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="folder for the .onnx/.npz/.npy files")
    ap.add_argument("--seed", type=int, default=0, help="seed of the weights and the data (default 0)")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--bn", choices=["fold", "preserve"], default="fold",
                    help="fold: BatchNormalization folded into Conv, as an eval-mode export does (default); "
                         "preserve: keep BatchNormalization nodes and their parameter names")
    ap.add_argument("--no-verify", action="store_true", help="skip the checker and the reference evaluator")
    args = ap.parse_args()

    names = [n for n in args.only.split(",") if n] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    versions = {p: importlib.metadata.version(p) for p in ("torch", "torchvision", "onnx", "numpy")}
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    manifest = {"opset": OPSET, "seed": args.seed, "bn": args.bn, "versions": versions, "models": {}}
    failed = []
    for name in names:
        ctor, classes, kind = MODELS[name]
        # One seed per model (seed + its index in MODELS), so --only gives the same files.
        index = list(MODELS).index(name)
        torch.manual_seed(args.seed + index)
        rng = np.random.default_rng(args.seed + index)
        model = ctor()
        inputs, labels = make_data(kind, classes, rng)
        x = inputs["input"]
        batchnorms = calibrate_batchnorm(model, *(torch.from_numpy(v) for v in inputs.values()))  # leaves it in eval mode
        eval_inputs = {k: v[:EVAL_ROWS] for k, v in inputs.items()}
        with torch.no_grad():
            ref = model(*(torch.from_numpy(v) for v in eval_inputs.values())).float().numpy()

        path = args.out / f"{name}.onnx"
        export(model, {k: torch.from_numpy(v[:TRACE_ROWS]) for k, v in inputs.items()}, path, args.bn)
        np.savez(args.out / f"{name}.npz", **inputs, labels=labels)
        np.savez(args.out / f"{name}.eval.npz", **eval_inputs)
        np.save(args.out / f"{name}.ref.npy", ref)

        info = describe(onnx.load(str(path)))
        info.update(classes=classes, input_kind=kind, input_shape=list(x.shape), input_dtype=str(x.dtype),
                    parameters=int(sum(p.numel() for p in model.parameters())),
                    buffers=int(sum(b.numel() for b in model.buffers())), batchnorms_calibrated=batchnorms,
                    ref_absmax=float(np.max(np.abs(ref))),
                    onnx_bytes=path.stat().st_size)
        print(f"\n== {name}: {info['parameters']:,} parameters (PyTorch), {info['initializers']} initializers "
              f"holding {info['initializer_elements']:,} values; {info['nodes']} nodes; opset {info['opset']}, "
              f"IR {info['ir_version']}; {info['onnx_bytes']:,} bytes")
        print("   op types: " + ", ".join(f"{op} x{n}" for op, n in info["op_types"].items()))
        print("   first initializers: " + ", ".join(info["first_initializers"]))
        print("   first nodes: " + ", ".join(info["first_nodes"]))
        if not args.no_verify:
            ok, text, secs = verify(path, eval_inputs, ref)
            info["verify"] = text  # no timing: manifest.json is the same bytes on every run
            print(f"   {text}; {secs:.1f} s")
            if not ok:
                failed.append(name)
        manifest["models"][name] = info

    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if failed:
        print(f"\nexport.py: verification failed for {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"\nwrote {len(names)} models to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
