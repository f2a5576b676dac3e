#!/usr/bin/env python3
"""Real architectures exported as users export them, through ampcheck: a sweep.

For each model (torchvision image classifiers at 64x64 with 10 classes, Hugging Face
transformers sequence classifiers with tiny configurations; random weights, seed 0, eval
mode, nothing downloaded) this script exports the model with torch.onnx.export at opset 17
the way its users do (--export default: no dynamic_axes, so the batch of 4 the example
had is fixed in the file, the exporter's default and most tutorials'; --export dynamic: a
dynamic batch axis as docs/onnx.md shows), writes its data (16 rows) and PyTorch's
eval-mode outputs, then asks ampcheck:

  ops --onnx MODEL                       every node supported, or the refusals named
  infer                                  against PyTorch's outputs (max |a-b| / max |b|)
  run --level O0 / O2 --steps N          the fp32 verdict, and whether O2 gets the verdict
                                         its fp32 training deserves

and writes a Markdown table (and NAME.*.txt logs) into --out. A model ampcheck refuses
must be refused with its node and op type named; everything it imports must match
PyTorch's forward; a model healthy at O0 should be healthy at O2 unless low precision
really breaks it.

  bench/onnx/.venv/bin/python bench/onnx/zoo.py --out /tmp/zoo --ampcheck build/cli/ampcheck
  options: --only NAME[,NAME], --export default|dynamic, --steps N
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torchvision

OPSET, ROWS, BATCH, SEQ, VOCAB = 17, 16, 4, 16, 100


def vision(name: str):
    def make():
        ctor = getattr(torchvision.models, name)
        kwargs = {"weights": None, "num_classes": 10}
        if name in ("googlenet", "inception_v3"):
            kwargs.update(aux_logits=False, init_weights=True)
        return ctor(**kwargs)
    return make, "image"


def hf(kind: str):
    def make():
        import transformers as T
        common = dict(vocab_size=VOCAB, num_labels=2, pad_token_id=0)
        small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=64, attn_implementation="eager")
        if kind == "bert":
            model = T.BertForSequenceClassification(T.BertConfig(**small, **common))
        elif kind == "roberta":
            model = T.RobertaForSequenceClassification(T.RobertaConfig(**small, **common))
        elif kind == "electra":
            model = T.ElectraForSequenceClassification(T.ElectraConfig(**small, embedding_size=32, **common))
        elif kind == "albert":
            model = T.AlbertForSequenceClassification(T.AlbertConfig(**small, embedding_size=16, **common))
        elif kind == "distilbert":
            model = T.DistilBertForSequenceClassification(T.DistilBertConfig(
                dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64, attn_implementation="eager",
                **common))
        elif kind == "gpt2":
            model = T.GPT2ForSequenceClassification(T.GPT2Config(
                n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=1, eos_token_id=1,
                attn_implementation="eager", **common))
        else:
            raise ValueError(kind)

        class Logits(torch.nn.Module):  # the classifier's logits as one output, as users export them
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask).logits
        return Logits(model)
    return make, "tokens"


MODELS = {
    "resnet18": vision("resnet18"),
    "mobilenet_v2": vision("mobilenet_v2"),
    "mobilenet_v3_small": vision("mobilenet_v3_small"),
    "efficientnet_b0": vision("efficientnet_b0"),
    "squeezenet1_1": vision("squeezenet1_1"),
    "shufflenet_v2_x0_5": vision("shufflenet_v2_x0_5"),
    "mnasnet0_5": vision("mnasnet0_5"),
    "densenet121": vision("densenet121"),
    "googlenet": vision("googlenet"),
    "regnet_y_400mf": vision("regnet_y_400mf"),
    "resnext50_32x4d": vision("resnext50_32x4d"),
    "convnext_tiny": vision("convnext_tiny"),
    "bert": hf("bert"),
    "distilbert": hf("distilbert"),
    "roberta": hf("roberta"),
    "albert": hf("albert"),
    "electra": hf("electra"),
    "gpt2": hf("gpt2"),
}


def data(kind: str, rng: np.random.Generator):
    labels = rng.integers(0, 2, size=ROWS, dtype=np.int64)
    if kind == "image":
        return {"input": rng.standard_normal((ROWS, 3, 64, 64), dtype=np.float32)}, labels
    ids = rng.integers(2, VOCAB, size=(ROWS, SEQ), dtype=np.int64)
    lengths = rng.integers(4, SEQ + 1, size=ROWS)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int64)
    ids = np.where(mask == 1, ids, 0)  # padded with the pad token, as a tokenizer pads
    return {"input_ids": ids, "attention_mask": mask}, labels


def export(name: str, out: Path, mode: str) -> dict:
    make, kind = MODELS[name]
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = make().eval()
    inputs, labels = data(kind, rng)
    names = list(inputs)
    example = tuple(torch.from_numpy(v[:BATCH]) for v in inputs.values())
    kwargs = dict(opset_version=OPSET, input_names=names, output_names=["logits"], dynamo=False)
    if mode == "dynamic":
        kwargs["dynamic_axes"] = {**{n: {0: "batch"} for n in names}, "logits": {0: "batch"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example, str(out / f"{name}.onnx"), **kwargs)
    np.savez(out / f"{name}.npz", labels=labels, **inputs)
    with torch.no_grad():  # BATCH rows at a time: the fixed export runs no other size
        ref = np.concatenate([model(*(torch.from_numpy(v[i:i + BATCH]) for v in inputs.values())).numpy()
                              for i in range(0, ROWS, BATCH)])
    np.save(out / f"{name}.ref.npy", ref)
    return {"kind": kind, "parameters": int(sum(p.numel() for p in model.parameters()))}


def run(cmd: list[str], log: Path, timeout: float) -> tuple[int | None, str, float]:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        rc, text = None, f"(timed out after {timeout:g} s)"
    log.write_text("$ " + " ".join(cmd) + "\n" + text)
    return rc, text, time.monotonic() - t0


def last_line(text: str) -> str:
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    said = [l for l in lines if l.startswith(("ampcheck:", "verdict:"))]
    return ((said or lines or [""])[-1])[:240]


def check(name: str, out: Path, ampcheck: str, steps: int, timeout: float) -> dict:
    model, npz = str(out / f"{name}.onnx"), str(out / f"{name}.npz")
    row: dict = {}
    rc, text, _ = run([ampcheck, "ops", "--onnx", model], out / f"{name}.ops.txt", timeout)
    row["ops"] = "ok" if rc == 0 else f"exit {rc}: {last_line(text)}"
    got = out / f"{name}.infer.npy"
    rc, text, _ = run([ampcheck, "infer", "--model", model, "--data", npz, "--out", str(got), "-q"],
                      out / f"{name}.infer.txt", timeout)
    if rc == 0:
        a, b = np.load(got).astype(np.float64), np.load(out / f"{name}.ref.npy").astype(np.float64)
        row["forward"] = (float(np.max(np.abs(a - b)) / np.max(np.abs(b))) if a.shape == b.shape
                          else f"shape {a.shape} vs {b.shape}")
    else:
        row["forward"] = f"exit {rc}: {last_line(text)}"
    for level in ("O0", "O2"):
        report = out / f"{name}.{level}.json"
        rc, text, secs = run([ampcheck, "run", "--model", model, "--data", npz, "--level", level, "--steps", str(steps),
                              "-q", "--report", str(report)], out / f"{name}.{level}.txt", timeout)
        if rc in (0, 1) and report.exists():
            r = json.loads(report.read_text())
            row[level] = f"{r['summary']['verdict']} ({r['summary']['final_loss']:.4g}, {secs:.0f} s)" \
                if isinstance(r['summary']['final_loss'], (int, float)) else f"{r['summary']['verdict']}"
            if r["summary"]["verdict"] not in ("healthy", "reference"):
                row[level] += ": " + r["summary"]["verdict_text"][:200]
        else:
            row[level] = f"exit {rc}: {last_line(text)}"
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--ampcheck", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--export", choices=["default", "dynamic"], default="default")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    rows = {}
    for name in names:
        try:
            info = export(name, args.out, args.export)
        except Exception as e:  # noqa: BLE001 - an exporter failure is a row, not the end of the sweep
            rows[name] = {"export": f"{type(e).__name__}: {str(e)[:200]}"}
            print(f"{name}: export failed: {e}", flush=True)
            continue
        rows[name] = {"export": f"ok ({info['parameters']:,} parameters)", **check(name, args.out, args.ampcheck,
                                                                                 args.steps, args.timeout)}
        print(f"{name}: {json.dumps(rows[name])}", flush=True)
    md = ["| model | export | ops --onnx | infer vs PyTorch | O0 | O2 float16 |", "|---|---|---|---|---|---|"]
    for name, r in rows.items():
        fwd = r.get("forward", "-")
        md.append(f"| {name} | {r['export']} | {r.get('ops', '-')} | "
                  f"{f'{fwd:.2e}' if isinstance(fwd, float) else fwd} | {r.get('O0', '-')} | {r.get('O2', '-')} |")
    (args.out / "zoo.md").write_text("\n".join(md) + "\n")
    (args.out / "zoo.json").write_text(json.dumps(rows, indent=2) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
