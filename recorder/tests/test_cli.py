"""The two ways the C++ CLI drives the recorder, as separate processes: ``python -m
ampcheck_recorder run -- script`` and the interpreter-start bootstrap that ``ampcheck
record -- python train.py`` uses (PYTHONPATH and AMPCHECK_RECORD_* variables). Exit codes,
report, and the unchanged script."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import HERE, RECORDER_ROOT

TRAIN = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import torch
    import families as fam

    name, steps = sys.argv[1], int(sys.argv[2])
    model, x, y, settings = fam.make(name)
    fam.train(model, x, y, steps=steps, **settings)
    if len(sys.argv) > 3 and sys.argv[3] == "raise":
        raise RuntimeError("boom after training")
    if len(sys.argv) > 3 and sys.argv[3] == "interrupt":
        raise KeyboardInterrupt  # Ctrl-C after the steps
    if len(sys.argv) > 3 and sys.argv[3] == "child":
        import subprocess
        # A Python process the script starts (a DataLoader worker, a tool) must not record.
        subprocess.run([sys.executable, "-c", "import torch; torch.ones(2) * 2"], check=True)
    print("trained", name)
""")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TRAIN.format(tests=HERE))
    return path


def run(args, env_extra=None, cwd=None):
    env = dict(os.environ)
    env.pop("AMPCHECK_RECORD_OWNER", None)
    env.pop("AMPCHECK_RECORD_OUT", None)
    env["PYTHONPATH"] = RECORDER_ROOT
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=1200)


def load(path, validate):
    with open(path) as f:
        return validate(json.load(f))


def test_healthy_script_exits_0_with_a_valid_report(script, tmp_path, validate):
    out = tmp_path / "run.json"
    p = run(["-m", "ampcheck_recorder", "run", "--out", str(out), "--", str(script), "mlp", "3"])
    assert p.returncode == 0, p.stderr
    assert "trained mlp" in p.stdout
    r = load(out, validate)
    assert r["summary"]["verdict"] == "healthy"
    assert (r["run"]["script"], r["run"]["script_args"]) == (str(script), ["mlp", "3"])
    assert r["run"]["script_outcome"] == {"exit_code": 0, "error": ""}


def test_failed_run_exits_1_and_its_fp32_trial_exits_0(script, tmp_path, validate):
    out = tmp_path / "run.json"
    p = run(["-m", "ampcheck_recorder", "run", "--out", str(out), "--", str(script), "attention_overflow", "2"])
    assert p.returncode == 1, p.stderr
    assert load(out, validate)["nonfinite"]["producer"]["op"] == "bmm"
    trial = tmp_path / "trial.json"
    p = run(["-m", "ampcheck_recorder", "run", "--out", str(trial), "--fp32-ops", "bmm", "--",
             str(script), "attention_overflow", "6"])
    assert p.returncode == 0, p.stderr
    assert load(trial, validate)["run"]["amp"]["custom_black_list"] == ["bmm"]


def test_script_that_raises_exits_4_and_the_report_keeps_its_steps(script, tmp_path, validate):
    out = tmp_path / "run.json"
    p = run(["-m", "ampcheck_recorder", "run", "--out", str(out), "--", str(script), "mlp", "2", "raise"])
    assert p.returncode == 4, p.stderr
    assert "boom after training" in p.stderr
    r = load(out, validate)
    assert r["run"]["script_outcome"] == {"exit_code": 1, "error": "RuntimeError: boom after training"}
    assert len(r["steps"]) == 2


def test_ctrl_c_exits_130_with_the_steps_run_marked_interrupted(script, tmp_path, validate):
    out = tmp_path / "run.json"
    p = run(["-m", "ampcheck_recorder", "run", "--out", str(out), "--", str(script), "mlp", "2", "interrupt"])
    assert p.returncode == 130, p.stderr
    r = load(out, validate)
    assert r["interrupted"] == {"signal": "SIGINT", "steps_run": 2, "steps_requested": 2, "bisect_run": 0}
    assert r["summary"]["verdict"] == "interrupted"
    assert r["summary"]["verdict_text"].startswith("interrupted after 2 steps, by SIGINT; in the steps run: healthy")


@pytest.mark.parametrize("args, message", [
    (["--fp32-ops", "bmmm"], 'unknown op "bmmm" in the fp32 op list (did you mean "bmm"?)'),
    (["--inspect", "everything"], "invalid choice"),
])
def test_bad_usage_exits_2_and_names_the_fix(script, tmp_path, args, message):
    p = run(["-m", "ampcheck_recorder", "run", "--out", str(tmp_path / "r.json"), *args, "--", str(script), "mlp", "1"])
    assert p.returncode == 2 and message in p.stderr


def test_missing_script_exits_2(tmp_path):
    p = run(["-m", "ampcheck_recorder", "run", "--", str(tmp_path / "nope.py")])
    assert p.returncode == 2 and "not found" in p.stderr


def test_module_form(tmp_path, validate):
    pkg = tmp_path / "trainpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "main.py").write_text(TRAIN.format(tests=HERE))
    out = tmp_path / "run.json"
    p = run(["-m", "ampcheck_recorder", "run", "--out", str(out), "--", "-m", "trainpkg.main", "mlp", "2"],
            cwd=tmp_path, env_extra={"PYTHONPATH": f"{RECORDER_ROOT}{os.pathsep}{tmp_path}"})
    assert p.returncode == 0, p.stderr
    assert load(out, validate)["run"]["script"] == "-m trainpkg.main"


def test_bootstrap_records_an_unmodified_script_and_not_its_children(script, tmp_path, validate):
    bootstrap = run(["-m", "ampcheck_recorder", "bootstrap-path"]).stdout.strip()
    assert os.path.isfile(os.path.join(bootstrap, "sitecustomize.py"))
    out = tmp_path / "run.json"
    env = {"PYTHONPATH": bootstrap, "AMPCHECK_RECORD_OUT": str(out), "AMPCHECK_RECORD_FP32_OPS": "bmm",
           "AMPCHECK_RECORD_INSPECT": "stats"}
    p = run([str(script), "attention_overflow", "6", "child"], env_extra=env)
    assert p.returncode == 0, p.stderr  # the script's own exit code
    r = load(out, validate)
    assert r["run"]["script"] == str(script)  # written by the script's process, not its child
    assert r["run"]["amp"]["custom_black_list"] == ["bmm"] and r["summary"]["verdict"] == "healthy"
    assert len(r["steps"]) == 6


def test_same_seeded_script_twice_gives_identical_bytes(script, tmp_path):
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    for out in outs:
        p = run(["-m", "ampcheck_recorder", "run", "--inspect", "full", "--out", str(out), "--",
                 str(script), "sigmoid_log", "3"])
        assert p.returncode == 1, p.stderr
    assert outs[0].read_bytes() == outs[1].read_bytes()


def test_advice_command(tmp_path):
    p = run(["-m", "ampcheck_recorder", "advice", "--fp32-ops", "bmm", "--device", "cpu"])
    assert p.returncode == 0
    assert "keep_fp32(model, ops=['bmm'])" in p.stdout and 'device_type="cpu"' in p.stdout
