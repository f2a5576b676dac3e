#!/usr/bin/env python3
"""Checks ampcheck's ONNX import on the models export.py wrote, and writes a Markdown table.

For each model NAME in --models (the order of its manifest.json, else every NAME.onnx):
  1. forward: `ampcheck infer --model NAME.onnx --data NAME.eval.npz --out NAME.infer.npy`,
     compared with PyTorch's NAME.ref.npy: max rel err = max|a-b| / max|b|, PASS when
     < 1e-4 (and the shapes agree and every value is finite); max abs err reported too;
  2. training: `ampcheck run --model NAME.onnx --data NAME.npz --loss cross_entropy
     --level L --steps 20 --batch 16 --report NAME.L.json` for L in O0, O1, O2: exit code,
     verdict, first and last loss, skipped steps, final loss scale from the JSON report
     (docs/report-format.md; read defensively, the keys it lacks are named);
  3. overflow_mlp only: `ampcheck bisect-nan ... --level O2 --steps 20 --batch 16`, whose
     stdout from its bisection table on (the suggested black list) goes into the
     results verbatim.
The command outputs stay in --workdir (default: a new folder under /tmp) for a look.
Exit 1 if a forward check fails (a training or bisect failure is reported, not fatal);
2 on bad usage.

  bench/onnx/.venv/bin/python bench/onnx/check.py --models /tmp/onnx-models \
      --ampcheck build/cli/ampcheck --out results.md
Only the standard library and numpy: any python3 with numpy runs it.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
REL_TOL = 1e-4
LEVELS = ("O0", "O1", "O2")
BISECT_MODEL = "overflow_mlp"
# `run --json` is a flag (the report on stdout); `--report FILE` writes it to a file.
REPORT_FLAG = "--report"


# ---------------------------------------------------------------- running ampcheck


def run_cmd(cmd: list[str], timeout: float) -> dict:
    """Runs cmd; returns its exit code (None on time-out), stdout, stderr and seconds."""
    print("$ " + shlex.join(cmd), flush=True)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = None
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or ""))
        err += f"\n(timed out after {timeout:g} s)"
    secs = time.monotonic() - t0
    print(f"  -> exit {rc if rc is not None else 'timeout'} in {secs:.1f} s", flush=True)
    return {"cmd": cmd, "rc": rc, "out": out, "err": err, "secs": secs}


def why(res: dict) -> str:
    """The last meaningful stderr (else stdout) line of a failed command, for a table cell."""
    skip = ("CUDA build but no usable GPU",)
    for text in (res["err"], res["out"]):
        lines = [l.strip() for l in text.splitlines() if l.strip() and not any(s in l for s in skip)]
        said = [l for l in lines if l.startswith("ampcheck") or "error" in l.lower()]  # its own message
        if said or lines:
            return (said or lines)[-1][:200]
    return ""


def rc_text(rc: int | None) -> str:
    return "timeout" if rc is None else str(rc)


# ---------------------------------------------------------------- 1. forward check


def forward_check(ampcheck: str, models: Path, work: Path, name: str, timeout: float) -> dict:
    out = work / f"{name}.infer.npy"
    out.unlink(missing_ok=True)
    res = run_cmd([ampcheck, "infer", "--model", str(models / f"{name}.onnx"),
                   "--data", str(models / f"{name}.eval.npz"), "--out", str(out)], timeout)
    row = {"rc": res["rc"], "secs": res["secs"], "rel": None, "abs": None, "ok": False, "note": ""}
    if res["rc"] != 0:
        row["note"] = why(res)
        return row
    if not out.exists():
        row["note"] = f"exit 0 but no {out.name} written"
        return row
    try:
        got = np.load(out)
    except Exception as e:  # noqa: BLE001 - whatever the file is, say so in the table
        row["note"] = f"cannot read {out.name}: {e}"
        return row
    row["dtype"] = str(got.dtype)
    ref = np.load(models / f"{name}.ref.npy").astype(np.float64)
    if got.shape != ref.shape:
        row["note"] = f"shape {list(got.shape)}, expected {list(ref.shape)}"
        return row
    got = got.astype(np.float64)
    diff = np.abs(got - ref)
    row["abs"] = float(np.max(diff)) if np.isfinite(diff).all() else math.inf
    row["rel"] = row["abs"] / float(np.max(np.abs(ref)))
    finite = bool(np.isfinite(got).all())
    row["ok"] = finite and row["rel"] < REL_TOL
    if not finite:
        row["note"] = f"{int((~np.isfinite(got)).sum())} non-finite value(s)"
    return row


# ---------------------------------------------------------------- 2. training runs


def dig(obj, *paths):
    """The value at the first of paths (tuples of keys / indices) that exists, else None."""
    for path in paths:
        cur = obj
        try:
            for key in path:
                cur = cur[key]
        except (KeyError, IndexError, TypeError):
            continue
        return cur
    return None


def real(v):
    """A report real: a number, or "nan" / "inf" / "-inf" (docs/report-format.md, Values)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def read_report(report: dict) -> tuple[dict, list[str]]:
    """First/last loss, skipped steps, final loss scale, verdict; and what could not be found."""
    steps = dig(report, ("steps",), ("run", "steps"), ("history",), ("losses",))
    losses: list = []
    if isinstance(steps, list):
        for s in steps:
            losses.append(real(s.get("loss")) if isinstance(s, dict) else real(s))
    got = {
        "first_loss": real(dig(report, ("summary", "initial_loss"), ("run", "initial_loss"))),
        "last_loss": real(dig(report, ("summary", "final_loss"), ("run", "final_loss"))),
        "skipped": dig(report, ("summary", "skipped_steps"), ("nonfinite", "skipped"), ("run", "skipped_steps")),
        "scale": real(dig(report, ("summary", "final_loss_scale"), ("run", "final_loss_scale"))),
        "verdict": dig(report, ("summary", "verdict"), ("verdict",)),
        "steps": len(steps) if isinstance(steps, list) else None,
    }
    if got["first_loss"] is None and losses:
        got["first_loss"] = losses[0]
    if got["last_loss"] is None and losses:
        got["last_loss"] = losses[-1]
    if got["skipped"] is None and isinstance(steps, list) and steps and isinstance(steps[0], dict):
        got["skipped"] = sum(1 for s in steps if s.get("skipped"))
    if got["scale"] is None and isinstance(steps, list) and steps and isinstance(steps[-1], dict):
        got["scale"] = real(steps[-1].get("loss_scale"))
    missing = [k for k, v in got.items() if v is None]
    return got, missing


def train_run(ampcheck: str, models: Path, work: Path, name: str, level: str, args) -> dict:
    path = work / f"{name}.{level}.json"
    path.unlink(missing_ok=True)
    res = run_cmd([ampcheck, "run", "--model", str(models / f"{name}.onnx"), "--data", str(models / f"{name}.npz"),
                   "--loss", "cross_entropy", "--level", level, "--steps", str(args.steps),
                   "--batch", str(args.batch), REPORT_FLAG, str(path)], args.timeout)
    (work / f"{name}.{level}.stdout.txt").write_text(res["out"])
    (work / f"{name}.{level}.stderr.txt").write_text(res["err"])
    row = {"rc": res["rc"], "secs": res["secs"], "note": ""}
    report = None
    if path.exists():
        try:
            report = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            row["note"] = f"{path.name} is not JSON: {e}"
    elif res["out"].lstrip().startswith("{"):  # a --json style report on stdout
        try:
            report = json.loads(res["out"])
        except json.JSONDecodeError:
            pass
    if report is None:
        row["note"] = row["note"] or (why(res) if res["rc"] != 0 else f"exit 0 but no report {path.name}")
        return row
    got, missing = read_report(report)
    row.update(got)
    if missing:
        keys = list(report) if isinstance(report, dict) else type(report).__name__
        print(f"  report {path.name}: no {', '.join(missing)}; top-level keys: {keys}", file=sys.stderr)
        row["note"] = f"report lacks {', '.join(missing)} (keys: {', '.join(map(str, keys))})"
    if res["rc"] != 0 and not row["note"]:
        # Exit 1 is the inspector's verdict on the training, which the report words.
        text = dig(report, ("summary", "verdict_text"))
        row["note"] = text if isinstance(text, str) and text else why(res)
    return row


# ---------------------------------------------------------------- 3. bisect-nan


BISECT_START = re.compile(r"^(Bisection over|Minimal fix|No black list|The run is healthy|The search was interrupted)")


def bisect(ampcheck: str, models: Path, work: Path, args) -> dict:
    path = work / f"{BISECT_MODEL}.bisect.json"
    path.unlink(missing_ok=True)
    res = run_cmd([ampcheck, "bisect-nan", "--model", str(models / f"{BISECT_MODEL}.onnx"),
                   "--data", str(models / f"{BISECT_MODEL}.npz"), "--loss", "cross_entropy", "--level", "O2",
                   "--steps", str(args.steps), "--batch", str(args.batch), REPORT_FLAG, str(path)],
                  args.bisect_timeout)
    (work / f"{BISECT_MODEL}.bisect.stdout.txt").write_text(res["out"])
    (work / f"{BISECT_MODEL}.bisect.stderr.txt").write_text(res["err"])
    lines = res["out"].splitlines()
    start = next((i for i, l in enumerate(lines) if BISECT_START.match(l)), None)
    # Verbatim: the bisection table, the minimal fix and the suggested configurations.
    excerpt = "\n".join(lines[start:]).rstrip() if start is not None else ""
    verdict_lines = [l for l in lines if l.startswith(("Minimal fix", "No black list", "The run is healthy"))]
    black = None
    if path.exists():
        try:
            black = dig(json.loads(path.read_text()), ("bisect", "suggested_black_list"))
        except json.JSONDecodeError:
            pass
    if black is None:  # from the ampcheck config printed on stdout
        m = re.search(r'"custom_black_list":\s*\[(.*?)\]', res["out"], re.S)
        if m:
            black = re.findall(r'"([^"]+)"', m.group(1))
    return {"cmd": res["cmd"], "rc": res["rc"], "secs": res["secs"], "excerpt": excerpt,
            "verdict": verdict_lines, "black_list": black, "note": "" if res["rc"] == 0 else why(res),
            "stdout_tail": "\n".join((lines or res["err"].splitlines())[-15:])}


# ---------------------------------------------------------------- the machine


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_lines(ampcheck: str, manifest: dict) -> list[str]:
    mem = ""
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f", {kb / 2**20:.0f} GiB"
    except (OSError, AttributeError):
        pass
    os_name = platform.system()
    try:
        os_name = re.search(r'^PRETTY_NAME="?([^"\n]*)', Path("/etc/os-release").read_text(), re.M).group(1)
    except (OSError, AttributeError):
        pass
    versions = dict(manifest.get("versions", {}))
    for p in ("torch", "torchvision", "onnx", "numpy"):
        if p not in versions:
            try:
                versions[p] = importlib.metadata.version(p)
            except importlib.metadata.PackageNotFoundError:
                versions[p] = "not installed"
    try:
        amp_version = subprocess.run([ampcheck, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        amp_version = f"({e})"
    commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    return [
        f"- CPU: {cpu_model()} ({os.cpu_count()} logical cores{mem}); {os_name}; Python {platform.python_version()}",
        f"- ampcheck: `{amp_version}`, commit {commit}",
        "- exported by: " + ", ".join(f"{k} {v}" for k, v in versions.items())
        + f"; opset {manifest.get('opset', '?')}, BatchNorm {manifest.get('bn', '?')}, seed {manifest.get('seed', '?')}",
    ]


# ---------------------------------------------------------------- Markdown


def num(v, fmt: str = ".6g") -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    try:
        return format(v, fmt)
    except (TypeError, ValueError):
        return cell(str(v))


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def write_markdown(path: Path, date: str, machine: list[str], manifest: dict, names: list[str], fwd: dict,
                   train: dict, bis: dict | None, args) -> None:
    md = [f"# ampcheck ONNX import on PyTorch-exported models — {date}", "", *machine, ""]
    md += ["Models: random weights, exported by `bench/onnx/export.py` (PyTorch's TorchScript exporter, "
           "eval mode); data: 64 training rows, the first 8 for the forward check. "
           "Reproduce: `bench/onnx/run.sh`.", ""]
    models = manifest.get("models", {})
    if models:
        md += ["| model | input | classes | parameters | ONNX nodes | ONNX op types |", "|---|---|---|---:|---:|---|"]
        for n in names:
            m = models.get(n, {})
            ops = ", ".join(f"{k} {v}" for k, v in m.get("op_types", {}).items())
            shape = "x".join(map(str, m.get("input_shape", [])))
            md.append(f"| {n} | {m.get('input_dtype', '?')} [{shape}] | {m.get('classes', '?')} | "
                      f"{m.get('parameters', 0):,} | {m.get('nodes', '?')} | {ops} |")
        md.append("")

    md += [f"## Forward: `ampcheck infer` against PyTorch (8 rows, float32; PASS: max rel err < {REL_TOL:g})", "",
           "| model | exit | max rel err | max abs err | result | note |", "|---|---:|---:|---:|---|---|"]
    for n in names:
        r = fwd[n]
        md.append(f"| {n} | {rc_text(r['rc'])} | {num(r['rel'], '.3g')} | {num(r['abs'], '.3g')} | "
                  f"{'PASS' if r['ok'] else 'FAIL'} | {cell(r['note'])} |")
    md.append("")

    md += [f"## Training: `ampcheck run --loss cross_entropy --steps {args.steps} --batch {args.batch}`", "",
           "Exit 1 is the inspector's verdict on that training (its words in the note): more updates skipped than "
           "its 5% limit (PyTorch's scaler starting at 65536 and halving after the first steps counts, unless every "
           "skip comes before the first good step), or a non-finite value. The forward check above is what this "
           "benchmark passes or fails on.", "",
           "| model | level | exit | verdict | first loss | last loss | skipped | final loss scale | note |",
           "|---|---|---:|---|---:|---:|---:|---:|---|"]
    for n in names:
        for level in args.levels:
            r = train[n][level]
            md.append(f"| {n} | {level} | {rc_text(r['rc'])} | {r.get('verdict') or '-'} | "
                      f"{num(r.get('first_loss'))} | {num(r.get('last_loss'))} | {num(r.get('skipped'), 'd')} | "
                      f"{num(r.get('scale'), 'g')} | {cell(r['note'])} |")
    md.append("")

    if bis is not None:
        md += [f"## `bisect-nan` on {BISECT_MODEL} (O2 float16: the square overflows 65504)", "",
               "    " + shlex.join(bis["cmd"]), "",
               f"Exit {rc_text(bis['rc'])}; suggested black list: "
               + (", ".join(f"`{x}`" for x in bis["black_list"]) if bis["black_list"] else "none found")
               + (f"; {cell(bis['note'])}" if bis["note"] else ""), ""]
        if bis["excerpt"]:
            md += ["Its stdout, from the bisection on, verbatim:", "", "```", bis["excerpt"], "```", ""]
        else:
            md += ["No bisection in its stdout; its last lines (stderr where stdout is empty):", "", "```",
                   bis["stdout_tail"], "```", ""]
    path.write_text("\n".join(md))


# ---------------------------------------------------------------- main


def find_ampcheck() -> str | None:
    default = ROOT / "build" / "cli" / "ampcheck"
    if default.is_file():
        return str(default)
    found = sorted(p for p in (ROOT / "build").rglob("ampcheck") if p.is_file() and os.access(p, os.X_OK))
    return str(found[0]) if found else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", required=True, type=Path, help="the folder export.py wrote")
    ap.add_argument("--ampcheck", help="the ampcheck binary (default: build/cli/ampcheck, else found under build/)")
    ap.add_argument("--out", required=True, type=Path, help="the Markdown file to write")
    ap.add_argument("--workdir", type=Path, help="where command outputs go (default: a new folder under /tmp)")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--levels", default=",".join(LEVELS), help="AMP levels of the training runs (default O0,O1,O2)")
    ap.add_argument("--steps", type=int, default=20, help="training steps (default 20: the loss scaler probes its first scale down in the first steps)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per infer/run command (default 900)")
    ap.add_argument("--bisect-timeout", type=float, default=1800, help="seconds for bisect-nan (default 1800)")
    args = ap.parse_args()
    args.levels = [l for l in args.levels.split(",") if l]

    ampcheck = args.ampcheck or find_ampcheck()
    if not ampcheck or not Path(ampcheck).is_file():
        ap.error(f"no ampcheck binary at {ampcheck or 'build/cli/ampcheck'}: build it (scripts/build.sh) or pass --ampcheck")
    ampcheck = str(Path(ampcheck).resolve())
    manifest_path = args.models / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    names = list(manifest.get("models", {})) or sorted(p.stem for p in args.models.glob("*.onnx"))
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    if not names:
        ap.error(f"no models in {args.models}: run export.py --out {args.models} first")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="ampcheck-onnx-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"ampcheck {ampcheck}; models {', '.join(names)}; outputs in {work}", flush=True)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")

    fwd, train = {}, {}
    for n in names:
        fwd[n] = forward_check(ampcheck, args.models, work, n, args.timeout)
        if fwd[n]["rel"] is not None:
            print(f"  {n}: max rel err {fwd[n]['rel']:.3g}, max abs err {fwd[n]['abs']:.3g} -> "
                  f"{'PASS' if fwd[n]['ok'] else 'FAIL'}", flush=True)
        train[n] = {level: train_run(ampcheck, args.models, work, n, level, args) for level in args.levels}
    bis = bisect(ampcheck, args.models, work, args) if BISECT_MODEL in names else None

    write_markdown(args.out, date, machine_lines(ampcheck, manifest), manifest, names, fwd, train, bis, args)
    failed = [n for n in names if not fwd[n]["ok"]]
    print(f"\nwrote {args.out}; forward check: {len(names) - len(failed)} passed, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
