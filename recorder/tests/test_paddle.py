"""The PaddlePaddle recorder on Paddle's CPU build: planted failures named by layer, phase
and step; Paddle's own GradScaler read update by update; an auto_cast that Paddle ignores
on a CPU place told as such; the report valid against the schema and byte-identical for
the same seeded run.

Paddle does no AMP on a CPU place (auto_cast and GradScaler turn themselves off there), so
these runs are float32. The expected values come from outside the recorder: the planted
math (log of a negative number is NaN; d/dx sqrt(x) at 0 is +Inf), the model's structure
(two Linear layers per step make two matmuls), and the scaler's own state read by the
test after each update.
"""

import json
import math
import warnings
from collections import defaultdict

import pytest

paddle = pytest.importorskip("paddle", reason="PaddlePaddle is not installed in this environment "
                                               "(scripts/pyenv.sh installs it)")

from ampcheck_recorder import report as report_mod  # noqa: E402
from ampcheck_recorder.paddle_recorder import PaddleRecorder, array_stats  # noqa: E402

warnings.simplefilter("ignore")


# The planted layers (log of a negative value: NaN forward; sqrt(relu(x)): +Inf backward
# where relu made 0) and the two-Linear net around them, as the recorded script uses them.
from paddle_train import Log, Net, Sqrt  # noqa: E402


def _data(seed, steps):
    paddle.seed(seed)
    return [(paddle.randn([16, 4]), paddle.randn([16, 1])) for _ in range(steps)]


def train(middle, steps=3, seed=0, scaler=None, loss_scale=1.0, inspect="stats", out=None, observe=None, **kw):
    """A plain Paddle training loop under the recorder; `observe(step)` after each update."""
    data = _data(seed, steps)
    paddle.seed(seed + 1)
    model = Net(middle)
    opt = paddle.optimizer.Adam(learning_rate=0.01, parameters=model.parameters())
    rec = PaddleRecorder(model, opt, scaler, inspect=inspect, out=out, **kw)
    try:
        for x, y in data:
            with paddle.amp.auto_cast(level="O1", dtype="float16"):
                loss = ((model(x) - y) ** 2).mean() * loss_scale
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.minimize(opt, loss)
            opt.clear_grad()
            if observe is not None:
                observe(scaler)
    except BaseException:
        rec.discard()
        raise
    return rec.close(), model


def gpu_like_scaler(init, decr_every=1, dynamic=True):
    """paddle.amp.GradScaler as Paddle's constructor sets it up on a GPU place (on a CPU
    place it turns itself off): the same fields, so its own scale(), minimize() and
    _update() run on the CPU, with fp32 gradients."""
    from paddle.amp import grad_scaler as gs
    from paddle.amp.auto_cast import amp_global_state
    s = paddle.amp.GradScaler(init_loss_scaling=init)
    s._enable, s._use_dynamic_loss_scaling, s._init_loss_scaling = True, dynamic, init
    s._incr_ratio, s._decr_ratio, s._incr_every_n_steps, s._decr_every_n_nan_or_inf = 2.0, 0.5, 1000, decr_every
    s._incr_count = s._decr_count = 0
    for name in ("_found_inf", "_temp_found_inf_value_false", "_temp_found_inf_fp16", "_temp_found_inf_bf16",
                 "_temp_found_inf_fp32"):
        setattr(s, name, paddle.to_tensor(False))
    s._scale = paddle.to_tensor([init], dtype="float32")
    s._cache_found_inf = None
    s._optimizer_states = defaultdict(gs._refresh_optimizer_state)
    amp_global_state().amp_dtype = "float16"  # scale() turns dynamic scaling off for any other
    return s


def test_forward_producer_is_the_layer_whose_finite_input_became_nan(validate):
    report, _ = train(Log(), steps=3)
    validate(report)
    producers = report["nonfinite"]["producers"]
    first = producers[0]
    assert (first["op"], first["module"], first["phase"], first["step"]) == ("Log", "mid", "forward", 1)
    # fc1's output feeds log: its negative values are the NaNs (log of a negative number).
    assert first["out_nan"] > 0 and first["inputs"][0]["min"] < 0 and first["inputs"][0]["nan"] == 0
    assert report["nonfinite"]["producer"] == first
    # The NaN update poisoned the weights: step 2's fc1 reads a NaN weight, a propagator.
    assert all(p["phase"] != "forward" or p["module"] == "mid" for p in producers)
    kinds = {f["kind"] for f in report["nonfinite"]["failures"]}
    assert "forward_non_finite" in kinds and report["summary"]["verdict"] == "failed"


def test_backward_producer_is_the_layer_whose_gradient_became_inf(validate):
    report, _ = train(Sqrt(), steps=2)
    validate(report)
    backward = [p for p in report["nonfinite"]["producers"] if p["phase"] == "backward"]
    assert backward, report["nonfinite"]
    first = backward[0]
    assert (first["op"], first["module"], first["step"]) == ("Sqrt", "mid", 1)
    assert first["out_pos_inf"] + first["out_nan"] > 0
    # What it read: the gradient reaching its output, finite.
    assert first["inputs"] and all(r["nan"] + r["pos_inf"] + r["neg_inf"] == 0 for r in first["inputs"])
    assert not any(p["phase"] == "forward" for p in report["nonfinite"]["producers"])
    skips = report["nonfinite"]["failures"]
    assert skips[0]["kind"] == "gradient_not_absorbed" and "Sqrt_grad in 'mid'" in skips[0]["detail"]


def test_healthy_run_is_not_failed_and_auto_cast_on_cpu_is_named(validate):
    report, _ = train(paddle.nn.ReLU(), steps=3)
    validate(report)
    s = report["summary"]
    assert s["verdict"] == "amp_off", s
    assert "auto_cast(level='O1', dtype='float16') was entered on cpu" in s["verdict_text"]
    assert "Paddle does no AMP" in s["verdict_text"]
    assert report["nonfinite"]["producers"] == [] and report["nonfinite"]["failures"] == []
    run = report["run"]
    assert (run["framework"], run["framework_version"], run["amp"]["semantics"]) == ("paddle", paddle.__version__,
                                                                                  "paddle")
    assert (run["model"], run["optimizer"], run["batch"], run["steps"], run["level"]) == ("Net", "Adam", 16, 3,
                                                                                       "O0")
    assert run["parameters"] == 4 * 8 + 8 + 8 * 1 + 1
    # Paddle's operator statistics: each step's two Linear layers make two matmuls, in fp32.
    ops = {r["type"]: r["calls"] for r in report["op_types"]}
    assert ops["matmul_v2"] == {"fp16": 0, "bf16": 0, "fp32": 6, "other": 0}
    rows = {o["name"]: o for o in report["ops"]}
    fc1 = rows["fc1/Linear#0"]
    assert (fc1["calls"], fc1["dtypes_in"], fc1["out"], fc1["phase"]) == (3, ["float32"], "float32", "forward")
    assert "aten" not in fc1
    assert fc1["numerics"][0]["numerics"]["count"] == 3 * 16 * 8


def test_losses_and_updates_are_the_runs_own():
    seen = []

    def observe(_):
        seen.append(None)
    report, _ = train(paddle.nn.ReLU(), steps=3, observe=observe)
    # The same loop without a recorder: the losses each step, computed by the test.
    data = _data(0, 3)
    paddle.seed(1)
    model = Net(paddle.nn.ReLU())
    opt = paddle.optimizer.Adam(learning_rate=0.01, parameters=model.parameters())
    expected = []
    for x, y in data:
        loss = ((model(x) - y) ** 2).mean()
        expected.append(float(loss))
        loss.backward()
        opt.step()
        opt.clear_grad()
    assert [s["loss"] for s in report["steps"]] == expected
    assert [s["skipped"] for s in report["steps"]] == [False] * 3 and len(seen) == 3


def test_gradscaler_probing_is_read_as_paddle_counts_it(validate):
    # A scale of 2^127 overflows fp32 gradients as 2^15 overflows fp16 ones: the scaler
    # skips and backs off every second bad step (decr_every_n_nan_or_inf=2) until the
    # gradients fit.
    scaler = gpu_like_scaler(2.0 ** 127, decr_every=2)
    history = []

    def observe(s):
        history.append(float(s._scale.numpy().reshape(-1)[0]))
    report, _ = train(paddle.nn.ReLU(), steps=10, scaler=scaler, loss_scale=8.0, observe=observe)
    validate(report)
    steps = report["steps"]
    assert [s["scale_after"] for s in steps] == history
    assert [s["loss_scale"] for s in steps] == [2.0 ** 127] + history[:-1]
    skipped = [s["skipped"] for s in steps]
    assert skipped[0] and not skipped[-1], skipped
    nf = report["nonfinite"]
    # Every skip was absorbed: the first of each pair counts towards the back-off
    # (decr_count 1), the second halves the scale.
    assert nf["absorbed"] == nf["skipped"] == sum(skipped)
    readings = [k["reading"] for k in nf["skips"]]
    assert readings[0] == "initial" and set(readings) <= {"initial", "lower"}, readings
    assert nf["skips"][0]["param_names"][0] == "fc1.weight"
    assert nf["probing"]["scale_from"] == 2.0 ** 127 and nf["failures"] == []
    run = report["run"]
    assert (run["amp"]["loss_scaling"], run["amp"]["init_loss_scaling"]) == ("paddle", 2.0 ** 127)


def test_a_static_scale_that_overflows_is_a_failure():
    scaler = gpu_like_scaler(2.0 ** 127, dynamic=False)
    report, _ = train(paddle.nn.ReLU(), steps=2, scaler=scaler, loss_scale=1000.0)
    failures = report["nonfinite"]["failures"]
    assert failures and failures[0]["kind"] == "gradient_not_absorbed"
    assert "the scale did not react" in failures[0]["detail"]
    assert [s["loss_scale"] for s in report["steps"]] == [2.0 ** 127] * 2


def test_allowed_layer_inf_is_not_a_failure():
    report, _ = train(Log(), steps=1, allow_inf=("mid",))
    forward = [p for p in report["nonfinite"]["producers"] if p["phase"] == "forward"]
    assert forward == []


def test_same_seeded_run_gives_the_same_bytes_and_a_drift_does_not(tmp_path):
    a, _ = train(paddle.nn.ReLU(), steps=3, out=tmp_path / "a.json")
    b, _ = train(paddle.nn.ReLU(), steps=3, out=tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    c, _ = train(paddle.nn.ReLU(), steps=3, seed=5)
    assert report_mod.to_json(c) != report_mod.to_json(a)


def test_trace_mode_judges_nothing_and_full_is_refused(validate):
    report, _ = train(Log(), steps=2, inspect="trace")
    validate(report)
    assert report["nonfinite"]["producers"] == [] and report["run"]["inspect"] == "trace"
    assert report["ops"][0]["numerics"] == []
    with pytest.raises(ValueError, match="stats"):
        PaddleRecorder(Net(Log()), inspect="full")
    with pytest.raises(ValueError, match="paddle.nn.Layer"):
        PaddleRecorder(None)


def test_array_stats_counts_match_the_definition():
    import numpy as np
    x = np.array([0.0, -0.0, 1.0, -3.0, 70000.0, 1e-8, np.nan, np.inf, -np.inf, 2.0 ** -130], dtype=np.float32)
    s = array_stats(x)
    assert (s.count, s.zero, s.nan, s.pos_inf, s.neg_inf) == (10, 2, 1, 1, 1)
    # fp16: 70000 >= 65520 overflows; 1e-8 <= 2^-25 flushes; 2^-130 flushes too.
    assert s.f16 == [1, 0, 2, 0]
    # bf16: 2^-130 is a subnormal there (2^-134 < |x| < 2^-126 - 2^-134).
    assert s.bf16 == [0, 0, 0, 1]
    assert s.absmax == 70000.0 and s.min == -3.0 and s.min_nonzero_abs == np.float32(2.0 ** -130)
    # floor(log2|x|): 1 -> 0, 3 -> 1, 70000 -> 16, 1e-8 -> -27, 2^-130 -> -130.
    bins = {e - 149: c for e, c in enumerate(s.by_exponent) if c}
    assert bins == {0: 1, 1: 1, 16: 1, -27: 1, -130: 1}
    assert math.isclose(s.sum, 1.0 - 3.0 + 70000.0 + float(np.float32(1e-8)) + 2.0 ** -130)
    json.dumps(s.report(), default=str)


# -- a script recorded from outside ---------------------------------------------------------

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "paddle_train.py")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMPCHECK_RECORD_")}
    env.update(extra)
    return env


def test_bootstrap_records_an_unmodified_paddle_script(tmp_path, validate):
    # What `ampcheck record -- python paddle_train.py log 3` sets up: the bootstrap on
    # PYTHONPATH, the options in the environment; the recorder starts at `import paddle`.
    from ampcheck_recorder import inject
    out = tmp_path / "log.json"
    r = subprocess.run([sys.executable, SCRIPT, "log", "3"], capture_output=True, text=True, timeout=300,
                       env=_env(PYTHONPATH=inject.bootstrap_path(), AMPCHECK_RECORD_OUT=str(out)))
    assert r.returncode == 0, r.stderr
    report = validate(json.loads(out.read_text()))
    assert report["run"]["framework"] == "paddle" and report["run"]["script"] == SCRIPT
    assert report["run"]["script_args"] == ["log", "3"] and len(report["steps"]) == 3
    assert report["run"]["model"] == "Net"
    first = report["nonfinite"]["producers"][0]
    assert (first["op"], first["module"], first["phase"], first["step"]) == ("Log", "mid", "forward", 1)
    assert report["summary"]["verdict"] == "failed"


def test_bootstrap_refuses_pytorch_only_options_for_paddle(tmp_path):
    from ampcheck_recorder import inject
    out = tmp_path / "x.json"
    r = subprocess.run([sys.executable, SCRIPT, "healthy", "1"], capture_output=True, text=True, timeout=300,
                       env=_env(PYTHONPATH=inject.bootstrap_path(), AMPCHECK_RECORD_OUT=str(out),
                                AMPCHECK_RECORD_FP32_OPS="matmul"))
    assert r.returncode == 0 and not out.exists()
    assert "not recording: forcing ops or modules to fp32" in r.stderr
    assert "custom_black_list" in r.stderr


def test_module_runner_records_a_paddle_script(tmp_path):
    out = tmp_path / "sqrt.json"
    r = subprocess.run([sys.executable, "-m", "ampcheck_recorder", "run", "--framework", "paddle", "--out", str(out),
                        "--", SCRIPT, "sqrt", "2", "--scaler"], capture_output=True, text=True, timeout=300,
                       cwd=os.path.dirname(HERE), env=_env())
    assert r.returncode == 1, r.stderr  # a failed run
    report = json.loads(out.read_text())
    backward = [p for p in report["nonfinite"]["producers"] if p["phase"] == "backward"]
    assert (backward[0]["op"], backward[0]["module"]) == ("Sqrt", "mid")
    # The GradScaler was asked for, and Paddle turned it off on the CPU: a static scale of 1.
    assert report["run"]["amp"]["loss_scaling"] == "static"


def test_the_paddle_recorder_never_imports_torch():
    code = ("import sys; from ampcheck_recorder import PaddleRecorder, report; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(HERE), env=_env())
    assert r.returncode == 0, r.stderr
