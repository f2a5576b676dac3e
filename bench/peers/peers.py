"""ampcheck beside PyTorch and PaddlePaddle on the CPU (issue 9).

  peers.py speed  --ampcheck-build DIR --out-dir bench/results   step times, interleaved
  peers.py inspect --ampcheck-build DIR                           the inspector's cost per mode
  peers.py scaling --ampcheck-build DIR                           fp32 step time by width and batch
  peers.py scaler --ampcheck BIN [--cases 200]                    GradScaler histories
  peers.py ops    --ampcheck BIN                                  O1 op decisions
  peers.py all    --ampcheck-build DIR --out-dir bench/results    the three, one report
  peers.py worker --framework torch|paddle --model FILE --mode fp32|bf16|fp16 ...

With --onnx-dir DIR (the output of bench/onnx/export.py), `speed` also times the real
models of the ONNX benchmark: ampcheck trains DIR/NAME.onnx on DIR/NAME.npz, PyTorch the
same architecture (export.py's MODELS), same batch, threads, loss and Adam.

bench/peers/run.sh makes the virtual environment and the Release build, then runs `all`.
"""

import argparse
import contextlib
import datetime
import io
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SAMPLES = ["mlp", "cnn", "transformer"]
ONNX_MODELS = ["resnet18", "mobilenet_v3", "bert_block", "gpt2_block", "efficientnet_b0", "mobilenet_v2",
               "shufflenet_v2", "resnext50", "lstm_classifier", "gru_classifier", "bert_mask"]
ONNX_LR = 1e-3  # ampcheck's default for an ONNX model (models/model_file.h TrainSpec)

# ---------------------------------------------------------------- workers (one per process)


def worker(args):
    sys.path.insert(0, HERE)
    import frameworks

    if args.onnx_dir:
        step = frameworks.torch_onnx_worker(args.model, args.onnx_dir, args.mode, args.batch, args.lr, args.threads)
    else:
        model = frameworks.load_model_file(args.model)
        step = frameworks.WORKERS[args.framework](model, args.mode, args.batch, args.lr, args.threads)
    print("ready", flush=True)
    for line in sys.stdin:
        command, k = line.split()
        assert command == "steps", line
        ms = []
        for _ in range(int(k)):
            start = time.perf_counter()
            step()
            ms.append((time.perf_counter() - start) * 1e3)
        print(json.dumps({"ms": ms}), flush=True)


class WorkerFailed(RuntimeError):
    """A worker that ended instead of answering: `said` is the last line of its stderr (for
    ampcheck, the importer's refusal of a model: the node and op it does not support)."""

    def __init__(self, label, code, said):
        super().__init__(f"{label}: worker ended (exit {code}){': ' + said if said else ''}")
        self.said = said


class Runner:
    """One worker process, kept alive across the interleaved rounds."""

    def __init__(self, framework, mode, label, argv, env):
        self.framework, self.mode, self.label = framework, mode, label
        self.stderr = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env,
                                     text=True, cwd=ROOT)
        self.ms = []
        self.block = 1

    def failed(self):
        code = self.proc.wait()
        self.stderr.seek(0)
        lines = [l.strip() for l in self.stderr.read().splitlines() if l.strip()]
        return WorkerFailed(self.label, code, lines[-1][:400] if lines else "")

    def wait_ready(self):
        if self.framework != "ampcheck":
            line = self.proc.stdout.readline()
            if line.strip() != "ready":
                raise self.failed()

    def run(self, k, keep=True):
        try:
            self.proc.stdin.write(f"steps {k}\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self.failed() from None
        line = self.proc.stdout.readline()
        if not line:
            raise self.failed()
        ms = json.loads(line)["ms"]
        if keep:
            self.ms += ms
        return ms

    def close(self):
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait()
        self.stderr.close()


# What each framework runs in each mode. Paddle's auto_cast and GradScaler make no
# effect on the CPU (paddle/amp/auto_cast.py warns "amp_guard can only be enabled on
# CUDAPlace, XPUPlace, and CustomPlace"), so it has fp32 only.
MODES = [
    # key, label, ampcheck (level, dtype, scaler), torch mode, paddle mode
    ("fp32", "fp32", ("O0", "float16", "none"), "fp32", "fp32"),
    ("o1_bf16", "bf16 autocast (O1)", ("O1", "bfloat16", "none"), "bf16", None),
    ("o1_fp16", "fp16 autocast + GradScaler (O1)", ("O1", "float16", "dynamic"), "fp16", None),
    ("o2_bf16", "bf16 storage (O2)", ("O2", "bfloat16", "none"), None, None),
    ("o2_fp16", "fp16 storage + GradScaler (O2)", ("O2", "float16", "dynamic"), None, None),
]


def speed(args, out):
    sys.path.insert(0, HERE)
    import frameworks

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads),
               MKL_NUM_THREADS=str(args.threads), PYTHONWARNINGS="ignore", GLOG_minloglevel="2")
    step_bin = os.path.join(args.ampcheck_build, "bench", "ampcheck_bench_peer_step")
    rng = random.Random(args.seed)
    rows = []
    cases = []  # (name, batch, ampcheck's model arguments, the peer worker's model arguments, peers)
    for sample in args.samples:
        path = os.path.join(ROOT, "samples", "models", sample + ".json")
        model = frameworks.load_model_file(path)
        batch, lr = model["train"]["batch"], model["train"]["lr"]
        cases.append((sample, batch, ["--model", path],
                      ["--model", path, "--batch", str(batch), "--lr", str(lr)], ("torch", "paddle")))
    if args.onnx_dir:
        for name in args.onnx_models:
            onnx_path = os.path.join(args.onnx_dir, name + ".onnx")
            if not os.path.exists(onnx_path):
                sys.exit(f"peers.py: {onnx_path} is missing: run bench/onnx/export.py --out {args.onnx_dir} --bn preserve")
            cases.append((name, args.onnx_batch,
                          ["--model", onnx_path, "--data", os.path.join(args.onnx_dir, name + ".npz"),
                           "--loss", "cross_entropy", "--batch", str(args.onnx_batch)],
                          ["--model", name, "--onnx-dir", args.onnx_dir, "--batch", str(args.onnx_batch),
                           "--lr", str(ONNX_LR)], ("torch",)))
    modes = [m for m in MODES if m[0] in args.modes]
    for sample, batch, ours, theirs, peers in cases:
        runners = []
        for key, label, (level, dtype, scaler), torch_mode, paddle_mode in modes:
            runners.append(Runner("ampcheck", key, f"{sample} ampcheck {key}",
                                  [step_bin, *ours, "--level", level, "--dtype", dtype, "--scaler", scaler,
                                   "--threads", str(args.threads)], env))
            for fw, mode in (("torch", torch_mode), ("paddle", paddle_mode)):
                if mode and fw in peers:
                    runners.append(Runner(fw, key, f"{sample} {fw} {key}",
                                          [sys.executable, os.path.abspath(__file__), "worker", "--framework", fw,
                                           *theirs, "--mode", mode, "--threads", str(args.threads)], env))
        failures = interleave(runners, args, rng)
        for key, label, *_ in modes:
            row = {"sample": sample, "mode": key, "label": label, "batch": batch}
            for r in runners:
                if r.mode == key:
                    if r in failures:
                        row.setdefault("refused", {})[r.framework] = failures[r].said
                    else:
                        row[r.framework] = {"median_ms": statistics.median(r.ms), "steps": len(r.ms),
                                            "iqr_ms": iqr(r.ms)}
            rows.append(row)
        print(f"  {sample}: done" + (f" ({len(failures)} worker(s) refused)" if failures else ""), file=sys.stderr,
              flush=True)
    fp32 = {r["sample"]: r["ampcheck"]["median_ms"] for r in rows if r["mode"] == "fp32" and "ampcheck" in r}
    for r in rows:
        if "ampcheck" not in r:
            continue
        ours = r["ampcheck"]["median_ms"]
        for fw in ("torch", "paddle"):
            if fw in r:
                r[f"ratio_{fw}"] = ours / r[fw]["median_ms"]
        if r["sample"] in fp32:
            r["ratio_own_fp32"] = ours / fp32[r["sample"]]
    out["speed"] = {"threads": args.threads, "rounds": args.rounds, "rows": rows}


INSPECT_MODES = ["off", "trace", "stats", "full", "full/10"]
# Issue 32's aims for the CPU (ratios to off, interleaved); full/10 is full mode sampled
# as `ampcheck run --inspect full --inspect-every 10` samples it.
INSPECT_AIMS = {"trace": 1.02, "stats": 1.05, "full": 1.5, "full/10": 1.5}


def inspect_args(mode):
    """The worker's options for an INSPECT_MODES entry."""
    name, _, every = mode.partition("/")
    return ["--inspect", name] + (["--inspect-every", every] if every else [])


def interleave(runners, args, rng):
    """Warm-up blocks (discarded, sizing each block to about --block-seconds), then
    --rounds rounds running every worker once in a shuffled order. A worker that ends
    before its first timed block (ampcheck refusing a model it cannot import) is left out
    of the rounds; returns {runner: WorkerFailed} for those."""
    failures = {}
    for r in runners:
        try:
            r.wait_ready()
        except WorkerFailed as e:
            failures[r] = e
    for r in runners:
        if r in failures:
            continue
        try:
            r.run(3, keep=False)
            warm = statistics.median(r.run(5, keep=False))
        except WorkerFailed as e:
            failures[r] = e
            continue
        r.block = max(args.min_block, min(400, int(args.block_seconds * 1e3 / max(warm, 1e-3))))
    for e in failures.values():
        print(f"  {e}", file=sys.stderr, flush=True)
    live = [r for r in runners if r not in failures]
    for _ in range(args.rounds):
        order = live[:]
        rng.shuffle(order)
        for r in order:
            time.sleep(args.gap)  # let the last worker's threads go idle
            r.run(r.block)
    for r in runners:
        r.close()
    return failures


def inspect(args, out):
    """The inspector's cost: ampcheck's step with `--inspect MODE` against the same step
    with the inspector off, interleaved, per sample (O1 float16 with the dynamic scaler:
    what a user debugging fp16 runs)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    step_bin = os.path.join(args.ampcheck_build, "bench", "ampcheck_bench_peer_step")
    rng = random.Random(args.seed + 1)
    rows = []
    cases = [(sample, ["--model", os.path.join(ROOT, "samples", "models", sample + ".json")]) for sample in args.samples]
    # The ONNX benchmark's real models (--onnx-dir), trained as `speed` trains them.
    for name in (args.onnx_models if args.onnx_dir else []):
        cases.append((f"{name} (batch {args.onnx_batch})",
                      ["--model", os.path.join(args.onnx_dir, name + ".onnx"), "--data",
                       os.path.join(args.onnx_dir, name + ".npz"), "--loss", "cross_entropy", "--batch",
                       str(args.onnx_batch)]))
    for sample, model_args in cases:
        runners = [Runner("ampcheck", mode, f"{sample} inspect {mode}",
                          [step_bin, *model_args, "--level", "O1", "--dtype", "float16", "--scaler", "dynamic",
                           "--threads", str(args.threads), *inspect_args(mode)], env) for mode in INSPECT_MODES]
        interleave(runners, args, rng)
        off = statistics.median(runners[0].ms)
        for r in runners:
            med = statistics.median(r.ms)
            rows.append({"sample": sample, "mode": r.mode, "median_ms": med, "steps": len(r.ms),
                         "iqr_ms": iqr(r.ms), "ratio_off": med / off})
        print(f"  {sample}: inspector modes done", file=sys.stderr, flush=True)
    out["inspect"] = {"threads": args.threads, "rounds": args.rounds, "rows": rows}


SCALING_WIDTHS = [64, 128, 256, 512, 1024]
SCALING_BATCHES = [16, 64, 256, 1024]


def scaling_model(width, batch):
    """An MLP of two hidden layers of `width` on 64-dimensional blobs (10 classes, enough
    rows for the batch): the shape family whose crossover the table locates."""
    return {"ampcheck_model": 1, "name": f"mlp_w{width}",
            "description": f"MLP 64-{width}-{width}-10 on blobs (scaling table)",
            "data": {"generator": "blobs", "n_per_class": max(100, batch // 10 + 1), "classes": 10, "dims": 64,
                     "spread": 1.0},
            "nodes": [{"name": "fc1", "kind": "linear", "out": width}, {"name": "act1", "kind": "relu"},
                      {"name": "fc2", "kind": "linear", "out": width}, {"name": "act2", "kind": "relu"},
                      {"name": "head", "kind": "linear", "out": 10}],
            "loss": "cross_entropy", "train": {"steps": 200, "batch": batch, "lr": 0.001, "optimizer": "adam"}}


def scaling(args, out):
    """fp32 step time against model width and batch, ampcheck and PyTorch side by side,
    interleaved per configuration: where ampcheck's own GEMM and per-op costs cross over."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONWARNINGS="ignore")
    step_bin = os.path.join(args.ampcheck_build, "bench", "ampcheck_bench_peer_step")
    rng = random.Random(args.seed + 2)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ampcheck-scaling-") as tmp:
        for width in SCALING_WIDTHS:
            for batch in SCALING_BATCHES:
                path = os.path.join(tmp, f"mlp_w{width}_b{batch}.json")
                with open(path, "w") as f:
                    json.dump(scaling_model(width, batch), f)
                runners = [Runner("ampcheck", "fp32", f"w{width} b{batch} ampcheck",
                                  [step_bin, "--model", path, "--level", "O0", "--threads", str(args.threads)], env),
                           Runner("torch", "fp32", f"w{width} b{batch} torch",
                                  [sys.executable, os.path.abspath(__file__), "worker", "--framework", "torch",
                                   "--model", path, "--mode", "fp32", "--batch", str(batch), "--lr", "0.001",
                                   "--threads", str(args.threads)], env)]
                interleave(runners, args, rng)
                ours, theirs = (statistics.median(r.ms) for r in runners)
                rows.append({"width": width, "batch": batch, "ampcheck_ms": ours, "torch_ms": theirs,
                             "ratio_torch": ours / theirs})
                print(f"  scaling w{width} b{batch}: {ours:.3f} / {theirs:.3f} ms", file=sys.stderr, flush=True)
    out["scaling"] = {"threads": args.threads, "rounds": args.rounds, "rows": rows}


def iqr(xs):
    q = statistics.quantiles(xs, n=4)
    return q[2] - q[0]


# ---------------------------------------------------------------- scaler conformance


def scaler_cases(n, seed):
    """n random found_inf sequences with random intervals and ratios, per framework, plus
    the edges random draws rarely reach (growth past float32's max, long clean runs)."""
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        length = rng.randint(1, 80)
        p = rng.choice([0.02, 0.1, 0.3, 0.6, 0.9])
        seq = "".join("1" if rng.random() < p else "0" for _ in range(length))
        init = 2.0 ** rng.uniform(-8, 40) if i % 7 else 2.0 ** rng.randint(-3, 127)
        grow = rng.choice([2.0, 1.5, 4.0, 1 + rng.random() * 3])
        shrink = rng.choice([0.5, 0.25, 0.8, 0.01 + rng.random() * 0.98])
        cases.append({"found_inf": seq,
                      "torch": {"init_scale": init, "growth_factor": grow, "backoff_factor": shrink,
                                "growth_interval": rng.randint(1, 12)},
                      "paddle": {"init_loss_scaling": init, "incr_ratio": grow, "decr_ratio": shrink,
                                 "incr_every_n_steps": rng.randint(1, 12),
                                 "decr_every_n_nan_or_inf": rng.randint(1, 4),
                                 "use_dynamic_loss_scaling": True}})
    # Edges: the largest float32 power of two that can still grow once; a scale that
    # shrinks toward float32's denormals; growth every step.
    edges = [("1" * 0 + "0" * 6, 2.0 ** 126, 2.0, 0.5, 1), ("1" * 60, 2.0 ** -100, 2.0, 0.5, 1),
             ("0" * 40, 1.0, 3.0, 0.5, 1)]
    for seq, init, grow, shrink, interval in edges:
        cases.append({"found_inf": seq,
                      "torch": {"init_scale": init, "growth_factor": grow, "backoff_factor": shrink,
                                "growth_interval": interval},
                      "paddle": {"init_loss_scaling": init, "incr_ratio": grow, "decr_ratio": shrink,
                                 "incr_every_n_steps": interval, "decr_every_n_nan_or_inf": 1,
                                 "use_dynamic_loss_scaling": True}})
    return cases


# The loss is scaled down by 2^-30 so that no scale in float32's range makes a finite
# gradient overflow by itself: only the injected Inf makes a step non-finite. Whether a
# step was skipped is the framework's own record of it (its found_inf), read before update().
LOSS_FACTOR = 2.0 ** -30


def torch_history(options, seq):
    import torch

    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", **options)
    x = torch.ones(4, 2)
    out = []
    for bad in seq:
        opt.zero_grad()
        loss = model(x).sum() * (math.inf if bad == "1" else LOSS_FACTOR)
        scaler.scale(loss).backward()
        scaler.step(opt)
        found = scaler._per_optimizer_states[id(opt)]["found_inf_per_device"]
        skipped = sum(v.item() for v in found.values()) > 0
        scaler.update()
        out.append({"scale_after": float(scaler.get_scale()), "skipped": bool(skipped)})
    return out


def paddle_scaler(options):
    """paddle.amp.GradScaler as it runs on a GPU, on the CPU. Two of its checks switch it
    off there: the constructor unless the tracer's place is a GPU, XPU or custom device,
    and scale() unless auto_cast's dtype is float16 (auto_cast does nothing on the CPU, so
    it never sets it). Everything else (scale, check_finite_and_unscale, the optimizer's
    skip, the update rules on the float32 scale tensor) has CPU kernels or is Python. So
    the constructor runs with a tracer that answers "GPU" to that one check, and the
    global AMP state says float16, as it does inside auto_cast(dtype="float16") on a GPU."""
    import paddle
    import paddle.amp.grad_scaler as gs
    from paddle.amp.auto_cast import amp_global_state

    real = gs._dygraph_tracer

    class Place:
        def is_gpu_place(self):
            return True

    class Tracer:
        _expected_place = Place()

    gs._dygraph_tracer = lambda: Tracer()
    try:
        scaler = paddle.amp.GradScaler(**options)
    finally:
        gs._dygraph_tracer = real
    amp_global_state().amp_dtype = "float16"
    return scaler


def paddle_history(options, seq):
    import paddle

    paddle.set_device("cpu")
    model = paddle.nn.Linear(2, 1)
    opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    scaler = paddle_scaler(options)
    x = paddle.ones([4, 2])
    out = []
    for bad in seq:
        opt.clear_grad()
        loss = model(x).sum() * (math.inf if bad == "1" else LOSS_FACTOR)
        scaler.scale(loss).backward()
        with contextlib.redirect_stdout(io.StringIO()):  # it prints each decrease
            scaler.step(opt)
            skipped = bool(scaler._cache_found_inf)
            scaler.update()
        out.append({"scale_after": float(scaler._scale.numpy().reshape(-1)[0]), "skipped": skipped})
    return out


def ampcheck_history(binary, config, seq):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(config, f)
    try:
        res = subprocess.run([binary, "config", "simulate", f.name, "--found-inf", seq, "--json"],
                             capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if res.returncode != 0:
        raise RuntimeError(f"ampcheck config simulate: {res.stderr.strip()}")
    return [{"scale_after": float(s["scale_after"]), "skipped": s["skipped"]} for s in json.loads(res.stdout)["steps"]]


def scaler(args, out):
    results = {}
    for fw, history, wrap in (("torch", torch_history, lambda o: {"framework": "pytorch", "grad_scaler": o}),
                              ("paddle", paddle_history, lambda o: dict(o, framework="paddle"))):
        cases = scaler_cases(args.cases, args.seed)
        failures = []
        for i, c in enumerate(cases):
            theirs = history(c[fw], c["found_inf"])
            ours = ampcheck_history(args.ampcheck, wrap(c[fw]), c["found_inf"])
            if theirs != ours:
                step = next((j for j, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
                failures.append({"case": i, "options": c[fw], "found_inf": c["found_inf"], "first_difference": step + 1,
                                 "theirs": theirs[step] if step < len(theirs) else None,
                                 "ours": ours[step] if step < len(ours) else None})
        steps = sum(len(c["found_inf"]) for c in cases)
        results[fw] = {"cases": len(cases), "steps": steps, "identical": len(cases) - len(failures),
                       "failures": failures[:10]}
        print(f"  scaler {fw}: {len(cases) - len(failures)}/{len(cases)} identical ({steps} steps)",
              file=sys.stderr, flush=True)
    out["scaler"] = results


# ---------------------------------------------------------------- O1 op decisions


def ops(args, out):
    sys.path.insert(0, HERE)
    import op_decisions

    out["ops"] = op_decisions.compare(args.ampcheck)


# ---------------------------------------------------------------- the report


def cpu_name():
    """The model name with what decides ampcheck's vector path: family/model and whether the
    CPU has AVX-512 or only AVX2+FMA (Zen 3 has no AVX-512, Zen 4 has)."""
    info = {}
    for line in open("/proc/cpuinfo"):
        if ":" in line:
            key, value = (x.strip() for x in line.split(":", 1))
            info.setdefault(key, value)
        if not line.strip() and info:
            break
    flags = set(info.get("flags", "").split())
    vector = ("AVX-512" + (" with BF16" if "avx512_bf16" in flags else "") if "avx512f" in flags else
              "AVX2+FMA, no AVX-512" if {"avx2", "fma"} <= flags else "no AVX2")
    return (f"{info.get('model name', '?')} (family {info.get('cpu family', '?')} model {info.get('model', '?')}, "
            f"{vector})")


def machine():
    cpu = cpu_name()
    mem = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
    versions = {"python": platform.python_version()}
    for name in ("torch", "paddle", "numpy"):
        try:
            versions[name] = __import__(name).__version__
        except Exception as e:  # a missing peer is reported, not fatal
            versions[name] = f"not importable: {e}"
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / 2 ** 20, 1),
            "os": platform.platform(), "versions": versions}


def fmt_ms(x):
    return f"{x:.3f}" if x < 1 else f"{x:.2f}"


def to_markdown(out):
    m = out["machine"]
    lines = [f"# ampcheck beside PyTorch and PaddlePaddle on the CPU — {out['date']}", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {m['os']}.",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()) + ".",
             f"Command: `{out['command']}`", ""]
    if "speed" in out:
        s = out["speed"]
        lines += ["## Step time", "",
                  f"Median milliseconds per training step (zero_grad, forward, cross-entropy, backward, Adam step, "
                  f"loss.item()), {s['threads']} threads in every framework, each sample's batch size from its model "
                  f"file. Every configuration is a live worker process; {s['rounds']} rounds, each running every "
                  "worker for about the same wall time in a shuffled order, after a discarded warm-up. Ratios are "
                  "ampcheck / peer: below 1 ampcheck is faster.", "",
                  "| sample | mode | ampcheck ms | PyTorch ms | Paddle ms | ampcheck / PyTorch | ampcheck / Paddle | "
                  "ampcheck / own fp32 |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        refusals = {}
        for r in s["rows"]:
            cell = lambda fw: (fmt_ms(r[fw]["median_ms"]) if fw in r else
                               "refused" if fw in r.get("refused", {}) else "—")
            ratio = lambda key: f"{r[key]:.2f}" if key in r else "—"
            lines.append(f"| {r['sample']} (batch {r['batch']}) | {r['label']} | {cell('ampcheck')} | {cell('torch')} | "
                         f"{cell('paddle')} | {ratio('ratio_torch')} | {ratio('ratio_paddle')} | "
                         f"{ratio('ratio_own_fp32')} |")
            for fw, said in r.get("refused", {}).items():
                refusals.setdefault((r["sample"], fw), said)
        lines += ["", "—: the framework has no such mode on the CPU (PaddlePaddle's auto_cast and GradScaler make no "
                  "effect there), or the mode is ampcheck's own (O2 keeps parameters and activations in the low "
                  "dtype; PyTorch's CPU autocast is O1 only).", ""]
        if refusals:
            lines += ["Refused (the worker ended before its first timed step; its last words):", ""]
            lines += [f"- {sample}, {fw}: {said or '(nothing on stderr)'}" for (sample, fw), said in refusals.items()]
            lines.append("")
    if "inspect" in out:
        s = out["inspect"]
        lines += ["## The inspector's cost", "",
                  f"ampcheck's step (O1 float16, dynamic loss scaling, Adam) with the inspector attached in each mode, "
                  f"as `ampcheck run --inspect MODE` trains, against the same step with it off; {s['threads']} threads, "
                  f"{s['rounds']} interleaved rounds. Aims: trace <= {INSPECT_AIMS['trace']}x, stats <= "
                  f"{INSPECT_AIMS['stats']}x, full <= {INSPECT_AIMS['full']}x.", "",
                  "| sample | mode | ms/step | / off | aim |", "| --- | --- | ---: | ---: | --- |"]
        for r in s["rows"]:
            aim = INSPECT_AIMS.get(r["mode"])
            verdict = "" if aim is None else (f"<= {aim} met" if r["ratio_off"] <= aim else f"<= {aim} **missed**")
            lines.append(f"| {r['sample']} | {r['mode']} | {fmt_ms(r['median_ms'])} | {r['ratio_off']:.2f} | {verdict} |")
        lines.append("")
    if "scaling" in out:
        s = out["scaling"]
        lines += ["## Scaling: fp32 step time against width and batch", "",
                  f"An MLP 64-W-W-10 (two hidden layers of width W, ReLU, cross-entropy, Adam) at batch B, ampcheck "
                  f"and PyTorch, {s['threads']} threads, {s['rounds']} interleaved rounds per cell. Each cell: "
                  "ampcheck ms / PyTorch ms (ratio; below 1 ampcheck is faster).", "",
                  "| width \\ batch | " + " | ".join(str(b) for b in SCALING_BATCHES) + " |",
                  "| ---: | " + " | ".join("---:" for _ in SCALING_BATCHES) + " |"]
        cells = {(r["width"], r["batch"]): r for r in s["rows"]}
        for w in SCALING_WIDTHS:
            line = f"| {w} |"
            for b in SCALING_BATCHES:
                r = cells.get((w, b))
                line += (f" {fmt_ms(r['ampcheck_ms'])} / {fmt_ms(r['torch_ms'])} ({r['ratio_torch']:.2f}) |" if r else " — |")
            lines.append(line)
        lines.append("")
    if "scaler" in out:
        lines += ["## GradScaler histories", "",
                  "Random found_inf sequences (1 to 80 steps) with random initial scales, ratios and intervals; the "
                  "real framework's GradScaler on the CPU against `ampcheck config simulate` with the same keys. "
                  "Compared per step: the scale after update() (exactly, as float32 values) and whether the "
                  "optimizer step was skipped.", "",
                  "| framework | cases | steps | identical |", "| --- | ---: | ---: | ---: |"]
        for fw, r in out["scaler"].items():
            lines.append(f"| {fw} | {r['cases']} | {r['steps']} | {r['identical']} |")
        for fw, r in out["scaler"].items():
            for f in r["failures"]:
                lines.append(f"\n- {fw} case {f['case']} differs at step {f['first_difference']}: "
                             f"theirs {f['theirs']}, ours {f['ours']} ({f['options']}, {f['found_inf']})")
        lines.append("")
    if "ops" in out:
        sys.path.insert(0, HERE)
        import op_decisions

        lines += ["## O1 op decisions", "", op_decisions.to_markdown(out["ops"]), ""]
    return "\n".join(lines)


def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--framework", choices=["torch", "paddle"], required=True)
    w.add_argument("--model", required=True)
    w.add_argument("--mode", choices=["fp32", "bf16", "fp16"], required=True)
    w.add_argument("--batch", type=int, required=True)
    w.add_argument("--lr", type=float, required=True)
    w.add_argument("--threads", type=int, default=os.cpu_count())
    w.add_argument("--onnx-dir", default=None, help="--model names a model of bench/onnx/export.py in this folder")
    for name in ("speed", "inspect", "scaling", "scaler", "ops", "all"):
        c = sub.add_parser(name)
        c.add_argument("--ampcheck-build", default=os.path.join(ROOT, "build"))
        c.add_argument("--out-dir", default=None, help="write DATE-peers-cpu.{md,json} here")
        c.add_argument("--samples", nargs="*", default=SAMPLES)
        c.add_argument("--threads", type=int, default=os.cpu_count())
        c.add_argument("--rounds", type=int, default=7)
        c.add_argument("--block-seconds", type=float, default=0.25)
        c.add_argument("--min-block", type=int, default=5, help="fewest steps per timed block (default 5)")
        c.add_argument("--modes", nargs="+", default=[m[0] for m in MODES], choices=[m[0] for m in MODES],
                       help="the speed table's modes (default: all)")
        c.add_argument("--gap", type=float, default=0.2)
        c.add_argument("--cases", type=int, default=200, help="random scaler sequences per framework")
        c.add_argument("--seed", type=int, default=0)
        c.add_argument("--onnx-dir", default=None,
                       help="also time the ONNX benchmark's models (bench/onnx/export.py --out DIR --bn preserve)")
        c.add_argument("--onnx-models", nargs="+", default=ONNX_MODELS)
        c.add_argument("--onnx-batch", type=int, default=16)
    args = p.parse_args()
    if args.command == "worker":
        return worker(args)
    args.ampcheck = os.path.join(args.ampcheck_build, "cli", "ampcheck")
    for f in (args.ampcheck,):
        if not os.access(f, os.X_OK):
            sys.exit(f"peers.py: {f} is not built: run bench/peers/run.sh, or cmake --build {args.ampcheck_build}")
    out = {"date": datetime.date.today().isoformat(), "machine": machine(),
           "command": "bench/peers/peers.py " + " ".join(a.replace(ROOT + os.sep, "") for a in sys.argv[1:])}
    steps = {"speed": [speed], "inspect": [inspect], "scaling": [scaling], "scaler": [scaler], "ops": [ops],
             "all": [scaler, ops, speed, inspect, scaling]}[args.command]
    for f in steps:
        f(args, out)
    text = to_markdown(out)
    print(text)
    if args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
        base = os.path.join(args.out_dir, f"{out['date']}-peers-cpu")
        write_atomically(base + ".md", text + "\n")
        write_atomically(base + ".json", json.dumps(out, indent=1) + "\n")
        print(f"wrote {base}.md and {base}.json", file=sys.stderr)
    failed = any(r["identical"] != r["cases"] for r in out.get("scaler", {}).values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
