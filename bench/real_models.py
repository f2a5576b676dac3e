#!/usr/bin/env python3
"""The models users train, at the sizes they train them: ampcheck beside PyTorch on the GPU.

Issue 44, deliverable 1 (step 10 of scripts/gpu-check.sh): ResNet-50 (batch 128, 224x224),
GPT-2 small (124M: batch 8, sequence 1024) and BERT-base (batch 32, sequence 512), built
here in plain PyTorch (the same model on every machine, whether or not torchvision or
transformers is installed; the published parameter counts), exported to ONNX by this
torch's torch.onnx.export (export_model says which exporter and why), and trained for a
few steps

  - by ampcheck, from the export: at O0, O2 float16 (dynamic loss scaling) and O2 bfloat16;
    the step time from bench/peer_step.cpp's worker (the step `ampcheck run --inspect off`
    trains); the peak device memory, the verdict and the GPU time per kernel family from
    `ampcheck run --model X.onnx --data X.npz --inspect trace --report R.json` (CUPTI:
    ops[].gpu_kernels and the step's own kernels.outside; run.device_memory);
  - by PyTorch, from the module: eager fp32, autocast float16 + GradScaler, autocast
    bfloat16, and torch.compile under autocast float16; the step time,
    torch.cuda.max_memory_allocated, and the GPU time per kernel family of a torch.profiler
    trace as `ampcheck kernels --json` reads it.

Each step is the one a user writes: zero_grad, forward and loss (under autocast), scaled
backward, the scaler's unscale and check, Adam (lr 1e-3: ampcheck's default for an ONNX
model), the scaler's update, loss.item() (so the GPU's work is in the step's time). The
step time is the median of the timed steps after the warm-up steps.

  bench/real_models.py bench --ampcheck build-gpu/cli/ampcheck --out DIR [--models resnet50,gpt2,bert]
                             [--scale full|tiny] [--sizes gpt2.batch=4,...] [--device cuda|cpu]
                             [--budget 240] [--model-timeout 75] [--no-compile]
      everything, within --budget seconds; writes DIR/real_models.json and DIR/real_models.md
  bench/real_models.py export NAME --out DIR [--scale ...] [--exporter default|torchscript|dynamo]
      DIR/NAME.onnx, NAME.npz (the inputs by name, and "labels") and NAME.export.json
  bench/real_models.py torch NAME [--scale ...] [--modes fp32,fp16,bf16,compile] [--profile-dir DIR]
      PyTorch's steps; one JSON line per mode
  bench/real_models.py table RESULTS.json
      the Markdown of a results file

The losses: ResNet-50 and BERT (a sequence classifier: [CLS] through BERT's tanh pooler,
2 classes, Hugging Face's additive padding mask) train with cross-entropy on their logits.
GPT-2 is a language model (the LM head tied to the token embedding, every position scored
over the 50257-token vocabulary): ampcheck's losses take one label per row, so the token
cross-entropy is computed in the graph (its second input "targets": the next tokens) and
the model's output is each sequence's mean token loss [B, 1], which both frameworks train
with the mean squared error towards 1 (ampcheck's --loss mse on one class). No dropout (an
export in eval mode is the model that trains); BatchNorm kept as BatchNormalization
(batch statistics in training, in both frameworks).

PyTorch computes attention with F.scaled_dot_product_attention (its fused kernels: what a
user's PyTorch model runs), and the export is of that model: the exporter writes the call
out (the scale split over Q and K^T, MatMul, the mask, Softmax, MatMul), which ampcheck
recognises and runs as one scaled_dot_product_attention (cuDNN's fused attention on a GPU;
models/onnx_attention.cpp). --torch-attention explicit gives PyTorch attention written out
by hand instead.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import datetime
import inspect
import io
import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
import zipfile

MODELS = ("resnet50", "gpt2", "bert")
LR = 1e-3  # ampcheck's default for an ONNX model (models/model_file.h, TrainSpec)

# The sizes, and a tiny form of each architecture for a CPU (the e2e test).
SIZES = {
    "full": {
        "resnet50": {"blocks": [3, 4, 6, 3], "width": 64, "classes": 1000, "batch": 128, "image": 224},
        "gpt2": {"layers": 12, "dim": 768, "heads": 12, "vocab": 50257, "seq": 1024, "batch": 8},
        "bert": {"layers": 12, "dim": 768, "heads": 12, "vocab": 30522, "seq": 512, "batch": 32, "classes": 2},
    },
    "tiny": {
        "resnet50": {"blocks": [1, 1, 1, 1], "width": 8, "classes": 10, "batch": 2, "image": 32},
        "gpt2": {"layers": 2, "dim": 64, "heads": 4, "vocab": 512, "seq": 32, "batch": 2},
        "bert": {"layers": 2, "dim": 64, "heads": 4, "vocab": 512, "seq": 32, "batch": 2, "classes": 2},
    },
}
# Parameters at the full sizes, as published: torchvision's resnet50 (25,557,032), GPT-2
# small with its LM head tied (124,439,808), BERT-base's BertModel with its pooler
# (109,482,240) plus a 2-class classifier (1,538).
PUBLISHED_PARAMETERS = {"resnet50": 25_557_032, "gpt2": 124_439_808, "bert": 109_483_778}
# What ampcheck's loss is on each model's output (the data's "labels" are its labels).
LOSS = {"resnet50": "cross_entropy", "gpt2": "mse", "bert": "cross_entropy"}
DESCRIPTION = {
    "resnet50": "ResNet-50 (bottleneck blocks, BatchNorm), cross-entropy over {classes} classes, batch {batch}, "
                "{image}x{image}",
    "gpt2": "GPT-2 small ({layers} layers, {dim} wide, {heads} heads, vocab {vocab}, causal, tanh GELU, LM head "
            "tied), token cross-entropy in the graph, batch {batch}, sequence {seq}",
    "bert": "BERT-base ({layers} layers, {dim} wide, {heads} heads, vocab {vocab}, padding mask, erf GELU), "
            "[CLS] classifier over {classes} classes, batch {batch}, sequence {seq}",
}


def sizes(scale: str = "full", overrides: str = "") -> dict:
    """The sizes of each model at a scale, with overrides "gpt2.batch=4,bert.seq=256"."""
    if scale not in SIZES:
        raise ValueError(f"scale {scale!r}: give one of {', '.join(SIZES)}")
    out = json.loads(json.dumps(SIZES[scale]))
    for item in filter(None, (s.strip() for s in overrides.split(","))):
        key, _, value = item.partition("=")
        model, _, field = key.partition(".")
        if model not in out or field not in out[model] or not value:
            raise ValueError(f"size override {item!r}: give MODEL.FIELD=VALUE with MODEL one of {', '.join(out)} "
                             f"and FIELD one of {', '.join(out.get(model, out['gpt2']))}")
        out[model][field] = [int(v) for v in value.split("/")] if field == "blocks" else int(value)
    return out


# ---------------------------------------------------------------- the models

def _torch():
    import torch
    return torch


def build(name: str, cfg: dict, attention: str = "sdpa"):
    """The model NAME at the sizes cfg (seed first), initialised as its reference is:
    torchvision's resnet50, Hugging Face's GPT-2 and BERT; attention by
    F.scaled_dot_product_attention ("sdpa") or written out ("explicit", what is exported)."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    class SelfAttention(nn.Module):
        """Multi-head self-attention; F.scaled_dot_product_attention, or written out."""

        def __init__(self, dim, heads, causal, fused_qkv):
            super().__init__()
            self.heads, self.causal, self.fused_qkv = heads, causal, fused_qkv
            if fused_qkv:  # GPT-2's c_attn / c_proj
                self.c_attn, self.c_proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            else:  # BERT's query / key / value / output.dense
                self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
                self.dense = nn.Linear(dim, dim)

        def forward(self, x, mask=None):
            b, t, c = x.shape
            if self.fused_qkv:
                q, k, v = self.c_attn(x).split(c, dim=2)
            else:
                q, k, v = self.query(x), self.key(x), self.value(x)
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
            if attention == "sdpa":
                mask = None if mask is None else mask.to(q.dtype)  # autocast's dtype: SDPA wants the query's
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)
            else:
                scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
                if self.causal:
                    future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
                    scores = scores.masked_fill(future, float("-inf"))
                if mask is not None:
                    scores = scores + mask
                y = torch.matmul(torch.softmax(scores, dim=-1), v)
            y = y.transpose(1, 2).reshape(b, t, c)
            return self.c_proj(y) if self.fused_qkv else self.dense(y)

    class Gpt2Block(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.attn = SelfAttention(dim, heads, causal=True, fused_qkv=True)
            self.mlp = nn.Sequential(collections.OrderedDict(
                c_fc=nn.Linear(dim, 4 * dim), act=nn.GELU(approximate="tanh"), c_proj=nn.Linear(4 * dim, dim)))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Gpt2(nn.Module):
        """GPT-2: token and position embeddings, pre-LN causal blocks, final LayerNorm, the LM
        head tied to the token embedding; returns each sequence's mean next-token loss [B, 1]."""

        def __init__(self, layers, dim, heads, vocab, seq, **_):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
            self.h = nn.ModuleList(Gpt2Block(dim, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(dim)

        def forward(self, ids, targets):
            b, t = ids.shape
            x = self.wte(ids) + self.wpe(torch.arange(t, device=ids.device))
            for block in self.h:
                x = block(x)
            # [B*T, vocab]. The dynamo exporter keeps the head tied (a Transpose of wte.weight);
            # the TorchScript exporter folds a transposed copy into a new initializer, which an
            # importer trains as a parameter of its own (vocab x dim more).
            logits = F.linear(self.ln_f(x).reshape(b * t, -1), self.wte.weight)
            nll = F.cross_entropy(logits, targets.reshape(b * t), reduction="none")
            return nll.reshape(b, t).mean(dim=1, keepdim=True)

    class BertLayer(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.attention = SelfAttention(dim, heads, causal=False, fused_qkv=False)
            self.attention_norm = nn.LayerNorm(dim, eps=1e-12)
            self.intermediate, self.output = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
            self.output_norm = nn.LayerNorm(dim, eps=1e-12)

        def forward(self, x, mask):
            x = self.attention_norm(x + self.attention(x, mask))
            return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))

    class Bert(nn.Module):
        """BERT: word, position and token-type embeddings with LayerNorm, post-LN encoder
        layers under Hugging Face's additive padding mask, [CLS] through the tanh pooler, a
        linear classifier."""

        def __init__(self, layers, dim, heads, vocab, seq, classes, **_):
            super().__init__()
            self.word_embeddings, self.position_embeddings = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
            self.token_type_embeddings = nn.Embedding(2, dim)
            self.embeddings_norm = nn.LayerNorm(dim, eps=1e-12)
            self.layer = nn.ModuleList(BertLayer(dim, heads) for _ in range(layers))
            self.pooler, self.classifier = nn.Linear(dim, dim), nn.Linear(dim, classes)

        def forward(self, ids, attention_mask, token_type_ids):
            t = ids.shape[1]
            x = (self.word_embeddings(ids) + self.position_embeddings(torch.arange(t, device=ids.device))
                 + self.token_type_embeddings(token_type_ids))
            x = self.embeddings_norm(x)
            # get_extended_attention_mask: 0 where attended, the dtype's lowest where padded.
            mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
            for layer in self.layer:
                x = layer(x, mask)
            return self.classifier(torch.tanh(self.pooler(x[:, 0])))

    class Bottleneck(nn.Module):
        def __init__(self, inplanes, planes, stride):
            super().__init__()
            out = planes * 4
            self.conv1, self.bn1 = nn.Conv2d(inplanes, planes, 1, bias=False), nn.BatchNorm2d(planes)
            self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
            self.conv3, self.bn3 = nn.Conv2d(planes, out, 1, bias=False), nn.BatchNorm2d(out)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or inplanes != out:
                self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))

        def forward(self, x):
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return self.relu(y + (x if self.downsample is None else self.downsample(x)))

    class ResNet(nn.Module):
        """torchvision's resnet50 (v1.5: the stride on the 3x3), its initialisation too."""

        def __init__(self, blocks, width, classes, **_):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.bn1, self.relu = nn.BatchNorm2d(width), nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            inplanes, stages = width, []
            for i, n in enumerate(blocks):
                planes = width * 2 ** i
                stage = []
                for j in range(n):
                    stage.append(Bottleneck(inplanes, planes, 2 if i > 0 and j == 0 else 1))
                    inplanes = planes * 4
                stages.append(nn.Sequential(*stage))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(inplanes, classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    if attention not in ("sdpa", "explicit"):
        raise ValueError(f"attention {attention!r}: give sdpa or explicit")
    builders = {"resnet50": ResNet, "gpt2": Gpt2, "bert": Bert}
    if name not in builders:
        raise ValueError(f"model {name!r}: give one of {', '.join(builders)}")
    model = builders[name](**cfg)
    if name != "resnet50":
        # Hugging Face's _init_weights for GPT-2 and BERT: N(0, 0.02) weights, zero biases
        # (PyTorch's N(0, 1) embeddings make the tied LM head's logits ~30 wide); GPT-2's
        # residual projections scaled by 1/sqrt(2 layers).
        for mod_name, m in model.named_modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                std = 0.02 / math.sqrt(2 * cfg["layers"]) if mod_name.endswith("c_proj") and name == "gpt2" else 0.02
                nn.init.normal_(m.weight, 0.0, std)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)
    # Biases and normalisation parameters start a little off their usual 0 and 1, each its
    # own: an exporter de-duplicates equal initializers (every zero bias of one size becomes
    # one tensor), which an importer then trains as one parameter tied across the layers.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p), alpha=1e-3)
    return model


def make_inputs(name: str, cfg: dict, seed: int = 1):
    """(the model's inputs by name, in its forward's order; the labels), on the CPU: one batch."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    b = cfg["batch"]
    if name == "resnet50":
        inputs = {"input": torch.randn(b, 3, cfg["image"], cfg["image"], generator=g)}
        labels = torch.randint(0, cfg["classes"], (b,), generator=g)
    elif name == "gpt2":
        ids = torch.randint(0, cfg["vocab"], (b, cfg["seq"] + 1), generator=g)
        inputs = {"input": ids[:, :-1].contiguous(), "targets": ids[:, 1:].contiguous()}  # the next tokens
        labels = torch.zeros(b, dtype=torch.int64)  # one class: the mse loss pulls the output towards 1
    else:
        t = cfg["seq"]
        ids = torch.randint(1, cfg["vocab"], (b, t), generator=g)
        lengths = torch.randint(t // 2, t + 1, (b,), generator=g)  # padded at the end, as a tokenizer does
        mask = (torch.arange(t)[None, :] < lengths[:, None]).long()
        inputs = {"input": ids * mask, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
        labels = torch.randint(0, cfg["classes"], (b,), generator=g)
    return inputs, labels


def loss_of(name: str, output, labels):
    """ampcheck's loss on the model's output, in PyTorch (models/runner.cpp, loss_of)."""
    F = _torch().nn.functional
    if LOSS[name] == "mse":
        return F.mse_loss(output.float(), F.one_hot(labels, output.shape[1]).float())
    return F.cross_entropy(output.float(), labels)


# ---------------------------------------------------------------- export and data

def default_exporter() -> str:
    """Which exporter this torch's torch.onnx.export runs when not told: "dynamo" (torch.export
    and onnxscript, the default since PyTorch 2.9) or "torchscript"."""
    params = inspect.signature(_torch().onnx.export).parameters
    return "dynamo" if "dynamo" in params and params["dynamo"].default is True else "torchscript"


def export_onnx(model, inputs: dict, path: str, exporter: str) -> dict:
    """Exports the model (in eval mode) at its inputs' shapes, the batch fixed by them, with
    the exporter named ("dynamo" or "torchscript"), called as a user calls it: the input and
    output names, and what ampcheck needs of the file.

    dynamo: external_data=False (ampcheck reads no external tensor data; these models are
    under protobuf's 2 GB); for a model with BatchNorm, optimize=False (the optimizer folds
    BatchNorm into the convolutions, as an eval-mode export does). torchscript: dynamo=False
    where the default is dynamo, training=PRESERVE (BatchNormalization kept, not folded).
    Returns what ran: the exporter, the call, the seconds, the file's size (and its opset and
    op types, where the onnx package is importable)."""
    import logging
    torch = _torch()
    model.eval()
    params = inspect.signature(torch.onnx.export).parameters
    kwargs = {"input_names": list(inputs), "output_names": ["output"]}
    batchnorms = sum(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    if exporter == "dynamo":
        if "dynamo" in params and params["dynamo"].default is not True:
            kwargs["dynamo"] = True
        if "external_data" in params:
            kwargs["external_data"] = False
        if batchnorms and "optimize" in params:
            kwargs["optimize"] = False
    elif exporter == "torchscript":
        if "dynamo" in params and params["dynamo"].default is True:
            kwargs["dynamo"] = False
        kwargs["training"] = torch.onnx.TrainingMode.PRESERVE
    else:
        raise ValueError(f"exporter {exporter!r}: give dynamo or torchscript")
    quiet = logging.getLogger("torch.onnx")  # "torchvision is not installed. Skipping torchvision::nms", ...
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    t0 = time.perf_counter()
    try:
        # no_grad: the TorchScript exporter's trace runs the forward, whose activations at
        # these sizes need not be kept.
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation, PRESERVE's folding note
            torch.onnx.export(model, tuple(inputs.values()), path, **kwargs)
    finally:
        quiet.setLevel(level)
    shown = {k: (f"TrainingMode.{v.name}" if hasattr(v, "name") else repr(v)) for k, v in kwargs.items()}
    info = {"exporter": exporter, "torch": torch.__version__, "seconds": round(time.perf_counter() - t0, 2),
            "bytes": os.path.getsize(path), "batchnorms": batchnorms,
            "call": "torch.onnx.export(model, args, f, " + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")"}
    if os.path.exists(path + ".data"):
        info["external_data"] = path + ".data"
    try:
        import onnx
        m = onnx.load(path, load_external_data=False)
        info["opset"] = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
        info["nodes"] = len(m.graph.node)
        info["op_types"] = dict(sorted(collections.Counter(n.op_type for n in m.graph.node).items()))
    except ImportError:
        pass
    return info


def export_model(name: str, cfg: dict, out: str, exporter: str = "default", device: str = "cpu") -> dict:
    """OUT/NAME.onnx (of the model as its users write it: F.scaled_dot_product_attention),
    OUT/NAME.npz (one batch: the inputs by name and "labels") and OUT/NAME.export.json.

    default: this torch's default exporter, but for a model with BatchNorm under the dynamo
    exporter, the TorchScript one first: dynamo's optimizer folds BatchNorm into the
    convolutions, and without it each bias-less convolution gets a zero bias computed in
    the graph (a bias add per convolution that PyTorch's model does not have). Where the
    exporter chosen fails (the dynamo exporter without onnxscript, a torch without the
    TorchScript exporter), the other one, and the reason is kept ("fallback")."""
    torch = _torch()
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = build(name, cfg, attention="sdpa").to(device)
    inputs, labels = make_inputs(name, cfg)
    save_npz(os.path.join(out, name + ".npz"), {**inputs, "labels": labels})
    path = os.path.join(out, name + ".onnx")
    on_device = {k: v.to(device) for k, v in inputs.items()}
    why = None
    if exporter != "default":
        order = [exporter]
    elif default_exporter() == "dynamo" and any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
                                                for m in model.modules()):
        order = ["torchscript", "dynamo"]
        why = ("not the default (dynamo) exporter: its optimizer folds BatchNorm into the convolutions, and without "
               "it every bias-less convolution gets a zero bias computed in the graph")
    else:
        order = [default_exporter(), "torchscript" if default_exporter() == "dynamo" else "dynamo"]
    failures = []
    for which in order:
        try:
            info = export_onnx(model, on_device, path, which)
            break
        except Exception as e:  # noqa: BLE001 - any exporter's failure: the next one, and why
            failures.append(f"the {which} exporter failed: {type(e).__name__}: "
                            f"{(str(e).strip().splitlines() or [''])[0][:300]}")
    else:
        raise RuntimeError("; ".join(failures))
    if why:
        info["why"] = why
    if failures:
        info["fallback"] = "; ".join(failures)
    info.update(model=name, sizes=cfg, loss=LOSS[name], inputs=list(inputs), device=device,
                default_exporter=default_exporter(), parameters=sum(p.numel() for p in model.parameters()),
                description=DESCRIPTION[name].format(**cfg))
    with open(os.path.join(out, name + ".export.json"), "w") as f:
        json.dump(info, f, indent=1)
    return info


def _npy_bytes(t) -> bytes:
    """One tensor as a .npy file (format 1.0), without numpy: torch alone writes the data."""
    t = t.detach().cpu().contiguous()
    descr = {"torch.float32": "<f4", "torch.int64": "<i8", "torch.int32": "<i4", "torch.float16": "<f2"}[str(t.dtype)]
    shape = "(" + "".join(f"{d}, " for d in t.shape) + ")" if t.dim() != 1 else f"({t.shape[0]},)"
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"  # the data starts 64-byte aligned
    data = ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b""
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1") + data


def save_npz(path: str, arrays: dict) -> None:
    """np.savez's file (an uncompressed zip of NAME.npy), written from torch tensors."""
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, t in arrays.items():
            z.writestr(name + ".npy", _npy_bytes(t))
    os.replace(path + ".tmp", path)


# ---------------------------------------------------------------- PyTorch's steps

TORCH_MODES = {  # mode -> (autocast dtype or None, GradScaler, torch.compile)
    "fp32": (None, False, False),
    "fp16": ("float16", True, False),
    "bf16": ("bfloat16", False, False),
    "compile": ("float16", True, True),
}


def torch_settings() -> dict:
    """The defaults that decide PyTorch's fp32 kernels (TF32) and its convolution algorithms
    (read without starting CUDA: the benchmark's own process holds no GPU memory)."""
    torch = _torch()
    s = {"torch": torch.__version__, "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
         "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32, "cudnn_benchmark": torch.backends.cudnn.benchmark}
    return s


def _torch_mode(name: str, cfg: dict, mode: str, device: str, inputs: dict, labels, warmup: int, steps: int,
                profile_dir: str, profile_steps: int, attention: str, wait_go: bool, emit) -> dict:
    """One mode of torch_steps, in a function of its own: its model, optimizer and step are
    gone when it returns, before the next mode's peak is measured."""
    torch = _torch()
    cuda = device == "cuda"
    if mode not in TORCH_MODES:
        raise ValueError(f"mode {mode!r}: give {', '.join(TORCH_MODES)}")
    dtype_name, scaled, compiled = TORCH_MODES[mode]
    dtype = getattr(torch, dtype_name) if dtype_name else None
    row = {"mode": mode}
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        row["gpu"] = torch.cuda.get_device_name(0)
    torch.manual_seed(0)
    model = build(name, cfg, attention).to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    scaler = torch.amp.GradScaler(device, enabled=scaled)
    forward = torch.compile(model) if compiled else model
    args = tuple(inputs.values())

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_of(name, forward(*args), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.item()

    t0 = time.perf_counter()
    row["first_loss"] = step()
    row["first_step_s"] = round(time.perf_counter() - t0, 3)  # torch.compile's compile is in it
    for _ in range(max(0, warmup - 1)):
        step()
    if wait_go:
        if cuda:
            torch.cuda.empty_cache()  # parked: its cache is not held while others run
        emit(json.dumps({"ready": mode}))
        sys.stdin.readline()
        step()  # the cache refilled
    ms, skipped = [], 0
    for _ in range(steps):
        scale = scaler.get_scale() if scaled else 0
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
        skipped += scaled and scaler.get_scale() < scale  # GradScaler backed off: the update was skipped
    row.update(ms=statistics.median(ms), ms_all=[round(v, 3) for v in ms], skipped_timed_steps=int(skipped),
               last_loss=step())
    if cuda:
        row["peak_bytes"] = torch.cuda.max_memory_allocated()
        row["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    if profile_dir and not compiled and profile_steps > 0:
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            for _ in range(profile_steps):
                step()
        row["trace"] = os.path.join(profile_dir, f"{name}-torch-{mode}.trace.json")
        row["profile_steps"] = profile_steps
        prof.export_chrome_trace(row["trace"])
    return row


def torch_steps(name: str, cfg: dict, modes: list, device: str, warmup: int, steps: int, profile_dir: str = "",
                profile_steps: int = 2, attention: str = "sdpa", wait_go: bool = False, emit=print) -> list:
    """PyTorch's training step at each mode, a fresh model (the same weights) each time.

    The step: zero_grad(set_to_none), forward and loss under autocast, GradScaler's
    scale/backward/step/update (fp16), Adam (PyTorch's default: foreach on CUDA), loss.item().
    Each mode emits {"mode", "ms" (median of the timed steps), "ms_all", "first_step_s",
    "skipped_timed_steps", "peak_bytes" (torch.cuda.max_memory_allocated: weights, optimizer
    state, gradients, activations and the batch), "peak_reserved_bytes", "trace" (a
    torch.profiler trace of profile_steps steps after the timed ones; not for compile)} or
    {"mode", "error"}. wait_go: after the warm-up, emit {"ready": mode} and wait for a line
    on stdin before timing (the compile and warm-up run beside other work; the timed steps
    do not)."""
    import gc
    inputs, labels = make_inputs(name, cfg)
    inputs = {k: v.to(device) for k, v in inputs.items()}
    labels = labels.to(device)
    rows = []
    for mode in modes:
        gc.collect()
        try:
            row = _torch_mode(name, cfg, mode, device, inputs, labels, warmup, steps, profile_dir, profile_steps,
                              attention, wait_go, emit)
        except Exception as e:  # noqa: BLE001 - one mode's failure (out of memory) is its row
            row = {"mode": mode, "error": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"}
        rows.append(row)
        emit(json.dumps(row))
    return rows


# ---------------------------------------------------------------- kernel families

FAMILIES = ("GEMM", "convolution", "attention", "normalization", "elementwise", "optimizer", "copies", "other")
_NORMALIZATION = ("batch_norm", "layer_norm", "group_norm", "instance_norm", "rms_norm", "softmax")
_COPIES = {"cast", "reshape", "permute", "concat", "slice", "copy", "_to_copy", "to", "clone", "contiguous", "cat",
           "expand", "transpose", "stack", "split", "narrow"}
_OPTIMIZER = ("optimizer", "_amp_", "foreach", "adam", "fused_sgd")


def family(kind: str, op_type: str, phase: str = "") -> str:
    """The family of one kernel, from its kind (inspector/kernel_class.h: the kernel's name
    read) and the op that launched it: GEMM, convolution and attention (every kernel of a
    convolution or fused-attention op, and such kernels of any op),
    normalization (BatchNorm, LayerNorm and softmax, the loss's log-softmax too), elementwise,
    optimizer (the optimizer's update, the loss scaler's unscale and inf check, zero_grad),
    copies (casts, layout changes, concatenations), other (reductions, losses, pooling,
    embedding lookups, names not read)."""
    t = op_type.lower().removeprefix("aten::").strip()
    if phase == "optimizer" or any(s in t for s in _OPTIMIZER):
        return "optimizer"
    # A convolution's or a fused attention's own helpers (cuDNN's GEMMs and layout
    # transforms, a bias) are its work, in both frameworks.
    if "convolution" in t or t.startswith(("conv1d", "conv2d", "conv3d", "conv_")) or kind.startswith("conv"):
        return "convolution"
    if "attention" in t or kind == "attention":
        return "attention"
    if kind in ("gemm", "gemv"):
        return "GEMM"
    if any(s in t for s in _NORMALIZATION):
        return "normalization"
    if kind == "layout" or t.split(" ")[0].rstrip("_") in _COPIES or t.split(" ")[0] in _COPIES:
        return "copies"
    if kind == "elementwise":
        return "elementwise"
    return "other"


def _family_table(items, steps: int) -> dict:
    """items: (family, op type, ns). Per step: ms per family, the total, each family's
    largest op types."""
    ns = collections.Counter()
    by_op = collections.defaultdict(collections.Counter)
    for fam, op, t in items:
        ns[fam] += t
        by_op[fam][op] += t
    steps = max(1, steps)
    total = sum(ns.values())
    return {"steps": steps, "kernel_ms": total / steps / 1e6,
            "ms": {f: ns[f] / steps / 1e6 for f in FAMILIES if ns[f]},
            "top_ops": {f: [[op, round(t / steps / 1e6, 4)] for op, t in by_op[f].most_common(3)] for f in FAMILIES if ns[f]}}


def ampcheck_families(report: dict, steps: int) -> dict:
    """GPU time per family per step of an `ampcheck run --inspect trace` report on CUDA: every
    op instance's gpu_kernels, and the step's own kernels (kernels.outside, owner "step":
    the optimizer, the scaler, zero_grad; the inspector's own are left out). The report
    keeps the 20 largest such names; memcpy and memset records are counted, not timed."""
    k = report.get("kernels") or {}
    if not k.get("traced"):
        return {"not_traced": k.get("not_traced") or "no CUPTI record in the report (a CPU run)"}
    items = []
    for op in report.get("ops", []):
        for g in op.get("gpu_kernels") or []:
            items.append((family(g["kind"], op["type"], op.get("phase", "")), op["type"], g["total_ns"]))
    for o in k.get("outside", []):
        if o["owner"] == "step":
            items.append(("optimizer", "(the step's own: optimizer, scaler)", o["total_ns"]))
    table = _family_table(items, steps)
    table["memcpys"], table["memsets"] = k.get("memcpys"), k.get("memsets")
    return table


def torch_families(kernels_json: dict, steps: int) -> dict:
    """The same of a torch.profiler trace as `ampcheck kernels --json` reads it: each op
    instance's kernels with the phase it ran in (optimizer: under Optimizer.step), and the
    kernels no launch in the profile ties to an op (other)."""
    ranks = kernels_json.get("ranks") or [{}]
    r = ranks[0]
    items = []
    for inst in r.get("instances", []):
        for g in inst.get("kernels", []):
            items.append((family(g.get("kind", "unknown"), inst["type"], inst.get("phase", "")), inst["type"],
                          g["total_ns"]))
    for u in r.get("unattributable", []):
        items.append(("other", "(unattributable: " + str(u.get("reason", "?")) + ")", u.get("ns", u.get("total_ns", 0))))
    return _family_table(items, steps)


# ---------------------------------------------------------------- the benchmark

# ampcheck's runs: (key, level, dtype, peer_step's scaler), each beside PyTorch's mode.
AMPCHECK_RUNS = (("O2 float16", "O2", "float16", "dynamic"), ("O0", "O0", "float16", "none"),
                 ("O2 bfloat16", "O2", "bfloat16", "none"))
PAIR = {"O0": "fp32", "O2 float16": "fp16", "O2 bfloat16": "bf16"}
TORCH_LABEL = {"fp32": "PyTorch eager fp32", "fp16": "PyTorch autocast fp16 + GradScaler",
               "bf16": "PyTorch autocast bf16", "compile": "torch.compile, autocast fp16 + GradScaler"}
AIMS = (("O2 float16", "step", 1.0), ("O2 float16", "memory", 1.1), ("O2 bfloat16", "step", 1.0),
        ("O2 bfloat16", "memory", 1.1), ("O0", "step", 1.0))


class Timeout(Exception):
    """A process past its time, killed; out: what it printed before."""

    def __init__(self, text: str, out: str = ""):
        super().__init__(text)
        self.out = out


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["(no message)"])[-1][:400]


def _run(cmd: list, timeout: float, stdin: str | None = None, env: dict | None = None) -> tuple:
    """(exit code, stdout, stderr); Timeout (the process group killed) past timeout seconds."""
    import signal
    if timeout <= 1:
        raise Timeout("not run: no time left")
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    try:
        out, err = p.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        raise Timeout(f"timed out after {timeout:.0f} s", out or "") from None
    return p.returncode, out, err


class CompileWorker:
    """`real_models.py torch NAME --modes compile --wait-go`, started early (niced): it
    compiles and warms up while other work runs, then waits; go() times its steps."""

    def __init__(self, cmd: list, log: str):
        import threading
        self.lines, self.ready, self.started, self.ready_s = [], threading.Event(), time.monotonic(), None
        self.log = open(log, "w")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                  start_new_session=True, preexec_fn=lambda: os.nice(10))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line)
            if line.startswith("{") and ('"ready"' in line or '"error"' in line):
                self.ready_s = round(time.monotonic() - self.started, 1)
                self.ready.set()
        self.ready.set()

    def busy(self) -> bool:
        """Still compiling or warming up."""
        return not self.ready.is_set() and self.p.poll() is None

    def kill(self):
        import signal
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
        self.p.wait()

    def go(self, timeout: float) -> dict:
        t0 = time.monotonic()
        if not self.ready.wait(max(1, timeout)):
            self.kill()
            return {"mode": "compile", "error": f"not compiled and warmed up {time.monotonic() - self.started:.0f} s "
                                                "after its start (the model's time ran out)"}
        timeout -= time.monotonic() - t0
        try:
            self.p.stdin.write("go\n")
            self.p.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            self.p.wait(timeout=max(1, timeout))
        except subprocess.TimeoutExpired:
            self.kill()
            return {"mode": "compile", "error": f"timed out after {timeout:.0f} s (its timed steps)"}
        self.reader.join(5)
        rows = [json.loads(l) for l in self.lines if l.startswith('{"mode"')]
        if rows:
            return dict(rows[-1], ready_s=self.ready_s)
        self.log.flush()
        return {"mode": "compile", "error": f"exit {self.p.returncode}: " + _last_line(open(self.log.name).read())}


def _torch_cmd(a, name: str, modes: str, extra: list) -> list:
    return [sys.executable, os.path.abspath(__file__), "torch", name, "--scale", a.scale, "--sizes", a.sizes,
            "--device", a.device, "--modes", modes, "--warmup", str(a.warmup), "--steps", str(a.steps),
            "--attention", a.torch_attention] + extra


def bench(a) -> dict:
    """Everything, model after model, within a.budget seconds; returns the results document
    (also written to OUT/real_models.json and, as Markdown, OUT/real_models.md).

    Phase A (nothing timed, up to --prepare-timeout seconds): each model exported (in
    parallel), its import checked with `ampcheck ops --onnx` (the TorchScript exporter where
    the dynamo exporter's file is refused), ampcheck's CUPTI runs (kernel time per family,
    peak memory, verdict: times of the GPU's kernels, which the compiles beside them barely
    change), while the torch.compile workers compile and warm up. Phase B, model after
    model: ampcheck's step times (peer_step), PyTorch's eager steps and profiles, the
    compiled model's steps; the GPU otherwise idle but for a compile still under way, which
    the model's "beside_compiles" names."""
    from concurrent.futures import ThreadPoolExecutor
    import threading
    t_start = time.monotonic()
    deadline = t_start + a.budget
    cfgs = sizes(a.scale, a.sizes)
    names = [n for n in a.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"real_models.py: unknown model(s) {unknown}; give some of {', '.join(MODELS)}")
    os.makedirs(a.out, exist_ok=True)
    _torch()  # importable, or nothing here can run
    doc = {"real_models": 1, "date": datetime.date.today().isoformat(), "scale": a.scale, "sizes_override": a.sizes,
           "device": a.device, "budget_s": a.budget, "warmup": a.warmup, "steps": a.steps,
           "trace_steps": a.trace_steps, "profile_steps": a.profile_steps, "torch_attention": a.torch_attention,
           "settings": torch_settings(), "default_exporter": default_exporter(), "models": [],
           "problems": []}
    models = {n: {"model": n, "sizes": cfgs[n], "description": DESCRIPTION[n].format(**cfgs[n]),
                  "ampcheck": {}, "torch": {}} for n in names}
    say = lambda text: print(f"real sizes: {text}", flush=True)
    gpu_lock = threading.Lock()
    phase_a_end = t_start + min(a.prepare_timeout, a.budget)

    def onnx_ok(path: str) -> str | None:
        rc, out, err = _run([a.ampcheck, "ops", "--onnx", path, "--level", "O2"], phase_a_end - time.monotonic())
        return None if rc == 0 else f"`ampcheck ops --onnx` exit {rc}: " + " ".join((out + err).strip().splitlines()[-6:])[:600]

    def export(name: str, exporter: str) -> dict:
        rc, out, err = _run([sys.executable, os.path.abspath(__file__), "export", name, "--out", a.out, "--scale",
                             a.scale, "--sizes", a.sizes, "--device", a.device, "--exporter", exporter],
                            phase_a_end - time.monotonic())
        if rc != 0:
            raise RuntimeError(f"the export ({exporter}) failed, exit {rc}: {_last_line(err)}")
        return json.load(open(os.path.join(a.out, name + ".export.json")))

    def trace_run(name: str, key: str, level: str, dtype: str) -> dict:
        report = os.path.join(a.out, f"{name}-{level}-{dtype}.report.json")
        cmd = [a.ampcheck, "run", "--model", os.path.join(a.out, name + ".onnx"), "--data",
               os.path.join(a.out, name + ".npz"), "--loss", LOSS[name], "--level", level, "--dtype", dtype,
               "--device", a.device, "--inspect", "trace", "--steps", str(a.trace_steps), "--quiet", "--report", report]
        rc, out, err = _run(cmd, phase_a_end - time.monotonic())
        if rc not in (0, 1) or not os.path.exists(report):
            return {"error": f"`ampcheck run --inspect trace` exit {rc}: {_last_line(err)}"}
        r = json.load(open(report))
        mem = r["run"].get("device_memory") or {}
        return {"verdict": r["summary"]["verdict"], "rc": rc, "parameters": r["run"].get("parameters"),
                "skipped_steps": r["summary"].get("skipped_steps"), "peak_bytes": mem.get("peak_allocated_bytes"),
                "peak_reserved_bytes": mem.get("peak_reserved_bytes"),
                "families": ampcheck_families(r, a.trace_steps),
                "kernel_findings": [f["text"] for f in (r.get("kernels") or {}).get("findings", [])][:5]}

    def prepare(name: str):
        m = models[name]
        try:
            info = export(name, "default")
            refused = onnx_ok(os.path.join(a.out, name + ".onnx"))
            if refused and info["exporter"] == "dynamo":
                info = export(name, "torchscript")
                info["fallback"] = "ampcheck refused the dynamo exporter's file: " + refused
                refused = onnx_ok(os.path.join(a.out, name + ".onnx"))
            m["export"] = info
            say(f"{name}: exported by {info['exporter']} ({info['bytes'] / 1e6:.0f} MB, {info['seconds']} s)"
                + (f"; {info['fallback']}" if info.get("fallback") else ""))
            if refused:
                m["error"] = "ampcheck does not import the export: " + refused
                return
        except (RuntimeError, Timeout, OSError, ValueError) as e:
            m["error"] = f"export: {e}"
            say(f"{name}: {m['error']}")
            return
        with gpu_lock:  # one CUPTI run on the GPU at a time
            for key, level, dtype, _ in AMPCHECK_RUNS:
                try:
                    m["ampcheck"].setdefault(key, {}).update(trace_run(name, key, level, dtype))
                except Timeout as e:
                    m["ampcheck"].setdefault(key, {})["trace_error"] = f"`run --inspect trace`: {e} (phase A's limit)"
                except (OSError, ValueError, KeyError, TypeError) as e:
                    m["ampcheck"].setdefault(key, {})["trace_error"] = f"`run --inspect trace`: {type(e).__name__}: {e}"
                run = m["ampcheck"][key]
                say(f"{name}: ampcheck {key} traced: " + (run.get("error") or run.get("trace_error") or
                    f"{run['verdict']}, peak {_gib(run.get('peak_bytes'))} GiB, kernels "
                    + (f"{run['families']['kernel_ms']:.2f} ms/step" if "kernel_ms" in run["families"]
                       else run["families"].get("not_traced", "?"))))

    compilers = {}
    if a.compile:
        for name in names:
            compilers[name] = CompileWorker(_torch_cmd(a, name, "compile", ["--wait-go"]),
                                            os.path.join(a.out, f"{name}-compile.log"))
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        for name, f in [(n, pool.submit(prepare, n)) for n in names]:
            try:
                f.result()
            except Exception as e:  # noqa: BLE001 - this script's own failure on one model: the others still run
                models[name]["error"] = f"bench/real_models.py (phase A): {type(e).__name__}: {e}"
    # The compiles get the rest of phase A; one still under way goes on (niced) beside the
    # timed steps of the models before its own, which say so ("beside_compiles").
    for w in compilers.values():
        w.ready.wait(max(0, phase_a_end - time.monotonic()))
    doc["phase_a_s"] = round(time.monotonic() - t_start, 1)
    say(f"phase A (exports, ampcheck's CUPTI runs, compiles) took {doc['phase_a_s']} s")

    peer_step = a.peer_step or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(a.ampcheck))), "bench",
                                            "ampcheck_bench_peer_step")

    def ampcheck_step(name: str, key: str, level: str, dtype: str, scaler: str, left) -> None:
        """ampcheck's step: bench/peer_step.cpp, the step `ampcheck run --inspect off` trains."""
        run = models[name]["ampcheck"].setdefault(key, {})
        cmd = [peer_step, "--model", os.path.join(a.out, name + ".onnx"), "--data", os.path.join(a.out, name + ".npz"),
               "--loss", LOSS[name], "--level", level, "--dtype", dtype, "--scaler", scaler, "--device", a.device]
        try:
            rc, out, err = _run(cmd, left(), stdin=f"steps {a.warmup}\nsteps {a.steps}\n")
            if rc != 0:
                run["step_error"] = f"peer_step exit {rc}: {_last_line(err)}"
            else:
                ms = json.loads(out.strip().splitlines()[-1])["ms"]
                run["ms"], run["ms_all"] = statistics.median(ms), [round(v, 3) for v in ms]
        except Timeout as e:
            run["step_error"] = f"peer_step: {e}"
        except (OSError, ValueError, IndexError, KeyError) as e:
            run["step_error"] = f"peer_step: {type(e).__name__}: {e}"
        say(f"{name}: ampcheck {key}: " + (f"{run['ms']:.2f} ms/step" if "ms" in run else run["step_error"]))

    def torch_eager(name: str, left) -> None:
        """PyTorch eager: one process, each mode a fresh model; its profiles read by `ampcheck kernels`."""
        m = models[name]
        try:
            profile = ["--profile-dir", a.out, "--profile-steps", str(a.profile_steps)] if a.device == "cuda" else []
            rc, out, err = _run(_torch_cmd(a, name, "fp16,fp32,bf16", profile), left())
            rows = [json.loads(l) for l in out.splitlines() if l.startswith('{"mode"')]
            for row in rows:
                m["torch"][row["mode"]] = row
            if rc != 0 or not rows:
                m["torch_error"] = f"exit {rc}: {_last_line(err)}"
        except Timeout as e:  # the modes it finished are kept
            for row in (json.loads(l) for l in e.out.splitlines() if l.startswith('{"mode"')):
                m["torch"][row["mode"]] = row
            m["torch_error"] = f"PyTorch's eager steps: {e}"
        except (OSError, ValueError) as e:
            m["torch_error"] = f"PyTorch's eager steps: {type(e).__name__}: {e}"
        for mode, row in m["torch"].items():
            if row.get("trace") and os.path.exists(row["trace"]):
                try:
                    rc, out, err = _run([a.ampcheck, "kernels", row["trace"], "--json"], max(left(), 30))
                    row["families"] = (torch_families(json.loads(out), row.get("profile_steps", 1)) if rc == 0
                                       else {"not_traced": f"`ampcheck kernels` exit {rc}: {_last_line(err)}"})
                except Timeout as e:
                    row["families"] = {"not_traced": f"`ampcheck kernels`: {e}"}
                except (OSError, ValueError, KeyError, TypeError) as e:
                    row["families"] = {"not_traced": f"`ampcheck kernels`: {type(e).__name__}: {e}"}
            say(f"{name}: {TORCH_LABEL[mode]}: " + (f"{row['ms']:.2f} ms/step, peak {_gib(row.get('peak_bytes'))} GiB"
                                                  if "ms" in row else row.get("error", "?")))

    # Phase B: model after model, each given up to --model-timeout seconds but leaving 30 s
    # to each model after it; within a model, what the aims need first.
    for i, name in enumerate(names):
        m = models[name]
        t_model = time.monotonic()
        end = max(t_model + 20, min(deadline - 30 * (len(names) - 1 - i), t_model + a.model_timeout))
        left = lambda: end - time.monotonic()
        if "error" in m:
            if name in compilers:
                compilers[name].kill()
            continue
        beside = [n for n, w in compilers.items() if w.busy()]
        if beside:
            m["beside_compiles"] = beside
        try:
            runs = {key: (key, level, dtype, scaler) for key, level, dtype, scaler in AMPCHECK_RUNS}
            ampcheck_step(name, *runs["O2 float16"], left)
            ampcheck_step(name, *runs["O0"], left)
            torch_eager(name, left)
            ampcheck_step(name, *runs["O2 bfloat16"], left)
            if name in compilers and "compile" not in m["torch"]:
                m["torch"]["compile"] = compilers[name].go(max(left(), 10))
                row = m["torch"]["compile"]
                say(f"{name}: {TORCH_LABEL['compile']}: " + (
                    f"{row['ms']:.2f} ms/step (compiled in {row['first_step_s']} s)" if "ms" in row else row.get("error", "?")))
        except Exception as e:  # noqa: BLE001 - this script's own failure on one model: the others still run
            m["error"] = f"bench/real_models.py: {type(e).__name__}: {e}"
            say(f"{name}: {m['error']}")
        m["seconds"] = round(time.monotonic() - t_model, 1)
    for w in compilers.values():
        w.kill()
    doc["models"] = [models[n] for n in names]
    doc["aims"] = aims(doc)
    doc["problems"] = problems(doc)
    doc["seconds"] = round(time.monotonic() - t_start, 1)
    with open(os.path.join(a.out, "real_models.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(a.out, "real_models.md"), "w") as f:
        f.write(markdown(doc))
    say(f"wrote {a.out}/real_models.json and real_models.md in {doc['seconds']} s")
    return doc


# ---------------------------------------------------------------- the aims and the table

def _gib(v) -> str:
    return f"{v / 2**30:.2f}" if isinstance(v, (int, float)) else "-"


def _gap_family(amp: dict, ref: dict, amp_ms: float | None, ref_ms: float | None) -> str:
    """Where ampcheck's step is longer: the family whose GPU time per step exceeds PyTorch's
    the most (the host's share: the step's time beside no kernel), and ampcheck's largest."""
    fa, fr = amp.get("ms"), ref.get("ms")
    if not fa:
        return "no CUPTI breakdown: " + str(amp.get("not_traced", "not measured"))
    rows = dict(fa)
    largest = max(rows, key=rows.get)
    text_largest = f"ampcheck's largest: {largest} {rows[largest]:.2f} ms/step ({rows[largest] / amp['kernel_ms']:.0%} of its kernel time)"
    if not fr:
        return text_largest + "; PyTorch's breakdown: " + str(ref.get("not_traced", "not measured"))
    gaps = {f: rows.get(f, 0.0) - fr.get(f, 0.0) for f in set(rows) | set(fr)}
    if amp_ms is not None and ref_ms is not None:
        gaps["GPU idle (host)"] = max(0.0, amp_ms - amp["kernel_ms"]) - max(0.0, ref_ms - ref["kernel_ms"])
    worst = max(gaps, key=gaps.get)
    if gaps[worst] <= 0:
        return text_largest
    if worst == "GPU idle (host)":
        mine, theirs = max(0.0, amp_ms - amp["kernel_ms"]), max(0.0, ref_ms - ref["kernel_ms"])
    else:
        mine, theirs = rows.get(worst, 0.0), fr.get(worst, 0.0)
    return f"{worst}: {mine:.2f} vs {theirs:.2f} ms/step (+{gaps[worst]:.2f}); {text_largest}"


def aims(doc: dict) -> list:
    """The issue's aims per model: ampcheck's O2 step <= 1.0x PyTorch's eager autocast step
    (float16 with GradScaler; bfloat16), O2 peak memory <= 1.1x, O0 step <= 1.0x eager fp32;
    each with its ratio and, where missed, where the time is."""
    out = []
    for m in doc["models"]:
        for key, what, limit in AIMS:
            amp, ref = m["ampcheck"].get(key, {}), m["torch"].get(PAIR[key], {})
            field = "ms" if what == "step" else "peak_bytes"
            aim = {"model": m["model"], "run": key, "against": TORCH_LABEL[PAIR[key]], "what": what, "limit": limit}
            a_v, r_v = amp.get(field), ref.get(field)
            if not isinstance(a_v, (int, float)) or not isinstance(r_v, (int, float)) or r_v <= 0:
                why = [s for s in (amp.get("step_error" if what == "step" else "error") or amp.get("trace_error"),
                                   ref.get("error"), m.get("error"), m.get("torch_error")) if s]
                if not why and what == "memory" and doc.get("device") != "cuda":
                    why = [f"no device memory on the {doc.get('device')}"]
                aim.update(ratio=None, met=None, note="not measured" + (": " + why[0] if why else ""))
            else:
                aim.update(ratio=a_v / r_v, met=a_v / r_v <= limit, ampcheck=a_v, torch=r_v)
                if what == "step":
                    aim["where"] = _gap_family(amp.get("families", {}), ref.get("families", {}), a_v, r_v)
                else:
                    aim["where"] = f"peak {_gib(a_v)} GiB vs {_gib(r_v)} GiB"
            out.append(aim)
    return out


def problems(doc: dict) -> list:
    """What failed (not an aim missed: those are the table's): a model not exported or not
    imported, a run that did not train."""
    out = []
    for m in doc["models"]:
        if "error" in m:
            out.append(f"{m['model']}: {m['error']}")
            continue
        for key, run in m["ampcheck"].items():
            for k in ("error", "step_error", "trace_error"):
                if run.get(k):
                    out.append(f"{m['model']} ampcheck {key}: {run[k]}")
        if m.get("torch_error"):
            out.append(f"{m['model']} PyTorch: {m['torch_error']}")
        for mode, row in m["torch"].items():
            if row.get("error"):
                out.append(f"{m['model']} {TORCH_LABEL[mode]}: {row['error']}")
    return out


def markdown(doc: dict) -> str:
    """The results document as Markdown: step times, peak memory, the aims, GPU time per
    kernel family."""
    def ms(v):
        return f"{v:.2f}" if isinstance(v, (int, float)) else "-"

    def ratio(x, y):
        return f"{x / y:.2f}x" if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y > 0 else "-"

    def cell(run: dict, field: str, fmt) -> str:
        if isinstance(run.get(field), (int, float)):
            return fmt(run[field])
        return "error" if any(run.get(k) for k in ("error", "step_error", "trace_error")) else "-"

    s = doc.get("settings", {})
    lines = [
        f"## Real sizes: ampcheck beside PyTorch ({doc['scale']} sizes, {doc['device']})", "",
        "Each model built in plain PyTorch (bench/real_models.py), exported to ONNX by `torch.onnx.export` "
        f"(this torch's default exporter: {doc.get('default_exporter')}) and trained by `ampcheck` from the export "
        "(`--model X.onnx --data X.npz`) and by PyTorch from the module. Step time: the median of "
        f"{doc['steps']} steps after {doc['warmup']} warm-up steps, each ending with loss.item() (ampcheck: "
        "bench/peer_step.cpp's worker, the step of `run --inspect off`). Peak memory: ampcheck's caching allocator "
        f"(`run.device_memory.peak_allocated_bytes` of a `run --inspect trace --steps {doc['trace_steps']}`), "
        "PyTorch's `torch.cuda.max_memory_allocated`: weights, optimizer state, gradients, activations and the batch. "
        "Kernel families: GPU time per step from CUPTI (ampcheck's `run --inspect trace`, "
        f"{doc['trace_steps']} steps) and from torch.profiler ({doc['profile_steps']} steps) read by "
        "`ampcheck kernels`. Adam (lr 1e-3) in both; ampcheck's timed O2 bfloat16 steps and PyTorch's bf16 "
        "without loss scaling (ampcheck's CUPTI run with `run`'s default dynamic scaling). PyTorch's attention: "
        + ("F.scaled_dot_product_attention (its fused kernels)" if doc.get("torch_attention") == "sdpa"
           else "written out, as exported") + "; "
        f"TF32: matmul {s.get('matmul_allow_tf32')}, cuDNN {s.get('cudnn_allow_tf32')} (PyTorch's defaults); "
        f"cudnn.benchmark {s.get('cudnn_benchmark')}. Ratios are ampcheck / PyTorch: below 1 ampcheck is faster "
        "or smaller.", ""]
    for m in doc["models"]:
        e = m.get("export", {})
        line = f"- **{m['model']}**: {m['description']}."
        if e:
            line += (f" Exported by {e['exporter']} in {e['seconds']} s ({e['bytes'] / 1e6:.0f} MB"
                     + (f", opset {e['opset']}, {e['nodes']} nodes" if e.get("opset") else "") + f"): `{e['call']}`."
                     + (f" The {e['exporter']} exporter, {e['why']}." if e.get("why") else "")
                     + (f" {e['fallback'][0].upper() + e['fallback'][1:]}; the {e['exporter']} exporter wrote it."
                        if e.get("fallback") else ""))
            params = next((r.get("parameters") for r in m["ampcheck"].values() if r.get("parameters")), None)
            line += f" Parameters: PyTorch {e['parameters']:,}" + (f", ampcheck {params:,}" if params else "") + "."
            verdicts = [f"{k} {r['verdict']}" + (f" ({r['skipped_steps']} of {doc['trace_steps']} steps skipped)"
                                                 if r.get("skipped_steps") else "")
                        for k, r in m["ampcheck"].items() if r.get("verdict")]
            if verdicts:
                line += " ampcheck's verdicts: " + ", ".join(verdicts) + "."
            skipped = [f"{TORCH_LABEL[k]} {r['skipped_timed_steps']}" for k, r in m["torch"].items()
                       if r.get("skipped_timed_steps")]
            if skipped:
                line += " Timed steps PyTorch's GradScaler skipped: " + ", ".join(skipped) + "."
        if m.get("error"):
            line += f" **Failed**: {m['error']}"
        lines.append(line)
    cols = [("ampcheck", "O0"), ("torch", "fp32"), ("ampcheck", "O2 float16"), ("torch", "fp16"),
            ("ampcheck", "O2 bfloat16"), ("torch", "bf16"), ("torch", "compile")]
    head = ("| model | ampcheck O0 | PyTorch fp32 | O0 / fp32 | ampcheck O2 fp16 | PyTorch autocast fp16 | "
            "O2 / autocast fp16 | ampcheck O2 bf16 | PyTorch autocast bf16 | O2 / autocast bf16 | torch.compile fp16 |")
    for title, field, fmt in (("Step time (ms, median)", "ms", ms), ("Peak device memory (GiB)", "peak_bytes", _gib)):
        lines += ["", f"### {title}", "", head, "|---|" + "---:|" * 10]
        for m in doc["models"]:
            v = {c: m[side].get(c, {}) for side, c in cols}
            lines.append(
                f"| {m['model']} | {cell(v['O0'], field, fmt)} | {cell(v['fp32'], field, fmt)} | "
                f"{ratio(v['O0'].get(field), v['fp32'].get(field))} | {cell(v['O2 float16'], field, fmt)} | "
                f"{cell(v['fp16'], field, fmt)} | {ratio(v['O2 float16'].get(field), v['fp16'].get(field))} | "
                f"{cell(v['O2 bfloat16'], field, fmt)} | {cell(v['bf16'], field, fmt)} | "
                f"{ratio(v['O2 bfloat16'].get(field), v['bf16'].get(field))} | {cell(v['compile'], field, fmt)} |")
    lines += ["", "### The aims (issue 44)", "", "| model | aim | ratio | met | where the difference is |",
              "|---|---|---:|---|---|"]
    for x in doc.get("aims", []):
        what = f"{x['run']} {'step' if x['what'] == 'step' else 'peak memory'} <= {x['limit']}x {x['against']}"
        met = "-" if x["met"] is None else ("yes" if x["met"] else "**no**")
        where = x.get("note") or (x.get("where", "") if x["met"] is False or x["what"] == "memory" else "")
        lines.append(f"| {x['model']} | {what} | {ratio(x.get('ampcheck'), x.get('torch'))} | {met} | {where} |")
    lines += ["", "### GPU time per kernel family (ms per step)", "",
              "| model | run | step | kernels | GPU busy | " + " | ".join(FAMILIES) + " |",
              "|---|---|---:|---:|---:|" + "---:|" * len(FAMILIES)]
    overfull = False
    for m in doc["models"]:
        for side, c in cols[:-1]:
            run = m[side].get(c, {})
            fam = run.get("families") or {}
            label = f"ampcheck {c}" if side == "ampcheck" else TORCH_LABEL[c]
            if "ms" not in fam:
                if run:
                    lines.append(f"| {m['model']} | {label} | {ms(run.get('ms'))} | - | - | "
                                 + " | ".join("-" for _ in FAMILIES) + " |")
                continue
            busy = "-"
            if isinstance(run.get("ms"), (int, float)) and run["ms"] > 0:
                busy = f"{fam['kernel_ms'] / run['ms']:.0%}" + (" (!)" if fam["kernel_ms"] > 1.02 * run["ms"] else "")
                overfull |= fam["kernel_ms"] > 1.02 * run["ms"]
            lines.append(f"| {m['model']} | {label} | {ms(run.get('ms'))} | {ms(fam['kernel_ms'])} | {busy} | "
                         + " | ".join(ms(fam["ms"].get(f)) if f in fam["ms"] else "-" for f in FAMILIES) + " |")
    untraced = sorted({f"{m['model']} {c}: {m[side][c]['families']['not_traced']}" for m in doc["models"]
                       for side, c in cols[:-1] if "not_traced" in (m[side].get(c, {}).get("families") or {})})
    beside = [f"{m['model']}'s beside the compiles of {', '.join(m['beside_compiles'])}" for m in doc["models"]
              if m.get("beside_compiles")]
    if beside:
        lines += ["", "Timed steps that ran while torch.compile was still compiling (niced) or warming up: "
                      + "; ".join(beside) + "."]
    if overfull:
        lines += ["", "(!) More kernel time per step than the timed step: that breakdown's kernels ran slower than in "
                      "the timed steps (ampcheck's CUPTI runs share the GPU with phase A's compiles)."]
    if doc["device"] != "cuda":
        lines += ["", f"No kernel breakdown and no device memory on the {doc['device']}: CUPTI, "
                      "torch.profiler's kernels and the caching allocator are the GPU's."]
    elif untraced:
        lines += ["", "No kernel breakdown:", ""] + [f"- {u}" for u in untraced]
    if doc.get("problems"):
        lines += ["", "Failed:", ""] + [f"- {p}" for p in doc["problems"]]
    lines += ["", f"Phase A (exports, ampcheck's CUPTI runs, compiles) {doc.get('phase_a_s', '-')} s; "
                  f"the whole step {doc.get('seconds', '-')} s of a {doc['budget_s']} s budget."]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the command line

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)

    def sizes_args(p):
        p.add_argument("--scale", default="full", choices=list(SIZES), help="the issue's sizes (full) or tiny ones")
        p.add_argument("--sizes", default="", help="overrides, e.g. gpt2.batch=4,bert.seq=256,resnet50.blocks=1/1/1/1")
        p.add_argument("--device", default="cuda", help="cuda (default) or cpu")

    p = sub.add_parser("bench", help="everything: the results JSON and Markdown in --out")
    sizes_args(p)
    p.add_argument("--ampcheck", required=True, help="the ampcheck binary (a CUDA build for --device cuda)")
    p.add_argument("--peer-step", default="", help="bench/peer_step.cpp's binary (default: beside the build's cli/)")
    p.add_argument("--out", required=True, help="folder for the exports, traces, reports and results")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before the timed ones (default 3)")
    p.add_argument("--steps", type=int, default=5, help="timed steps (default 5)")
    p.add_argument("--trace-steps", type=int, default=2, help="steps of ampcheck's CUPTI run (default 2)")
    p.add_argument("--profile-steps", type=int, default=2, help="steps of PyTorch's profile (default 2)")
    p.add_argument("--budget", type=float, default=240, help="seconds for everything (default 240)")
    p.add_argument("--prepare-timeout", type=float, default=110,
                   help="seconds from the start for phase A: exports, CUPTI runs, compiles (default 110)")
    p.add_argument("--model-timeout", type=float, default=75, help="seconds per model in phase B (default 75)")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="leave torch.compile out")
    p.add_argument("--torch-attention", default="sdpa", choices=["sdpa", "explicit"],
                   help="PyTorch's attention: its fused kernels (sdpa, default) or the exported graph's")

    p = sub.add_parser("export", help="NAME.onnx, NAME.npz and NAME.export.json in --out")
    p.add_argument("name", choices=MODELS)
    sizes_args(p)
    p.add_argument("--out", required=True)
    p.add_argument("--exporter", default="default", choices=["default", "torchscript", "dynamo"])

    p = sub.add_parser("torch", help="PyTorch's steps: one JSON line per mode")
    p.add_argument("name", choices=MODELS)
    sizes_args(p)
    p.add_argument("--modes", default="fp32,fp16,bf16", help=f"comma-separated, of {', '.join(TORCH_MODES)}")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--profile-dir", default="", help="write a torch.profiler trace of each eager mode here")
    p.add_argument("--profile-steps", type=int, default=2)
    p.add_argument("--attention", default="sdpa", choices=["sdpa", "explicit"])
    p.add_argument("--wait-go", action="store_true", help="after the warm-up, print {\"ready\"} and wait for a line")

    p = sub.add_parser("table", help="the Markdown of a results JSON")
    p.add_argument("results")

    a = ap.parse_args()
    if a.command == "table":
        doc = json.load(open(a.results))
        doc["aims"], doc["problems"] = aims(doc), problems(doc)
        sys.stdout.write(markdown(doc))
        return 0
    try:
        cfgs = sizes(a.scale, a.sizes)
    except ValueError as e:
        ap.error(str(e))
    if a.command == "export":
        info = export_model(a.name, cfgs[a.name], a.out, a.exporter, a.device)
        print(json.dumps({k: v for k, v in info.items() if k != "op_types"}))
        return 0
    if a.command == "torch":
        torch_steps(a.name, cfgs[a.name], [m for m in a.modes.split(",") if m], a.device, a.warmup, a.steps,
                    a.profile_dir, a.profile_steps, a.attention, a.wait_go, emit=lambda s: print(s, flush=True))
        return 0
    doc = bench(a)
    return 1 if doc["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
