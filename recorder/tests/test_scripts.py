"""Scripts written the way users write them (tests/scripts/: a Hugging Face custom loop and
Trainer, a LightningModule, a custom autograd.Function, a loss outside the model), each
recorded unmodified as `python -m ampcheck_recorder run -- SCRIPT` records it; the expected
verdicts and names are written from what each script plants (its docstring), not from the
recorder's output."""

import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "scripts")
RECORDER_ROOT = os.path.dirname(HERE)


def record(tmp_path, script, *args, inspect="stats", options=()):
    """(exit code, report, the script's stdout) of one recording."""
    out = tmp_path / "run.json"
    env = dict(os.environ, PYTHONPATH=RECORDER_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1")
    env.pop("AMPCHECK_RECORD_OUT", None)
    p = subprocess.run([sys.executable, "-m", "ampcheck_recorder", "run", "--out", str(out), "--inspect", inspect,
                        *options, "--", os.path.join(SCRIPTS, script), *args],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.exists(), f"no report: exit {p.returncode}\n{p.stderr[-3000:]}"
    return p.returncode, json.loads(out.read_text()), p.stdout


def _pytest_needs(module):
    return pytest.importorskip(module, reason=f"{module} is in the recorder's test environment (scripts/pyenv.sh)")


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_a_healthy_hugging_face_bert_with_padding_is_healthy_and_its_header_is_the_scripts(tmp_path, dtype, validate):
    _pytest_needs("transformers")
    code, r, stdout = record(tmp_path, "hf_bert_loop.py", "--dtype", dtype, "--steps", "4", "--accum", "2",
                             "--warmup", "2")
    validate(r)
    assert code == 0, r["summary"]["verdict_text"]
    assert r["summary"]["verdict"] == "healthy", r["summary"]["verdict_text"]
    # transformers' finfo.min padding mask reaches SDPA's _safe_softmax: an intended mask.
    intended = r["nonfinite"]["intended"]
    assert intended and all(i["readers"] == ["softmax"] for i in intended), intended
    assert not r["nonfinite"]["mask_failures"]
    # The header as the script sees it: the batch of its keyword-only model call, the rate it
    # gave AdamW (a linear warmup over 2 steps starts it at 0), the loss it printed (the sum
    # of its micro-batches' losses, each divided by the 2 accumulation steps).
    run = r["run"]
    assert run["batch"] == 8 and run["micro_batches"] == 2
    assert run["lr"] == pytest.approx(1e-3)
    assert run["lr_schedule"]["scheduler"] == "LambdaLR"
    assert run["lr_schedule"]["first"] == 0.0 and run["lr_schedule"]["peak"] == pytest.approx(1e-3)
    printed = [float(m) for m in re.findall(r"step \d+ loss ([0-9.]+)", stdout)]
    assert len(printed) == 4
    assert [s["loss"] for s in r["steps"]] == pytest.approx(printed, abs=2e-6)


def test_the_trainers_fp16_on_the_cpu_is_amp_off_naming_the_flag_and_bf16_trains(tmp_path):
    _pytest_needs("transformers")
    _pytest_needs("accelerate")
    code, r, _ = record(tmp_path, "hf_trainer_train.py", "--fp16", "--out", str(tmp_path / "hf"))
    assert code == 0
    assert r["summary"]["verdict"] == "amp_off"
    text = r["summary"]["verdict_text"]
    assert "transformers.Trainer was given TrainingArguments(fp16=True, use_cpu=True)" in text, text
    assert "ran nothing in float16" in text and "bf16=True" in text, text
    assert r["run"]["trainer"]["dtype"] == "float16"
    code, r, _ = record(tmp_path, "hf_trainer_train.py", "--bf16", "--out", str(tmp_path / "hf"))
    assert r["summary"]["verdict"] == "healthy" and r["run"]["dtype"] == "bfloat16", r["summary"]["verdict_text"]
    assert r["run"]["model"] == "BertForSequenceClassification" and r["run"]["batch"] == 8


def test_lightnings_closure_forward_and_backward_are_the_trainings_own(tmp_path):
    _pytest_needs("lightning")
    code, r, _ = record(tmp_path, "lightning_train.py", "--epochs", "2", options=("--listen", "all"))
    assert code == 0, r["summary"]["verdict_text"]
    assert r["run"]["listened_steps"] == list(range(1, 9))
    calls = {row["type"]: sum(row["calls"][k] for k in ("fp16", "bf16", "fp32", "other")) for row in r["op_types"]}
    # 32 samples in batches of 8: 4 training steps an epoch, 2 epochs; 1 validation batch an
    # epoch. Each training step a forward and a backward of the conv; validation forwards only.
    assert len(r["steps"]) == 8
    assert calls["conv2d"] == 8 + 2, calls
    assert calls["conv2d_grad"] == 8, calls
    trained = [o for o in r["ops"] if o["type"] == "conv2d" and o["phase"] == "forward"]
    assert trained and all(o["module"] == "conv" for o in trained)
    assert r["run"]["trainer"]["framework"] == "lightning.Trainer"


def test_a_custom_functions_backward_overflow_fails_naming_it_and_its_fix_trains(tmp_path):
    code, r, _ = record(tmp_path, "custom_function_train.py", "--steps", "12")
    assert code == 1
    nonfinite = r["nonfinite"]
    # Every update skipped, the scale halving from 2^16: not the scaler probing, since
    # exp(|x|) of the saved input does not shrink with the scale.
    assert [k["reading"] for k in nonfinite["skips"]] == ["persistent"] * 12
    event = nonfinite["skips"][0]["event"]
    assert (event["op"], event["function"], event["module"], event["phase"]) == ("exp", "ScaledTanh", "act",
                                                                                 "backward")
    text = r["summary"]["verdict_text"]
    assert "exp in the backward of autograd.Function ScaledTanh in 'act'" in text, text
    assert "no loss scale absorbs this overflow" in text, text
    # The Function is a forward row of the op table, its backward the module's.
    types = {row["type"] for row in r["op_types"]}
    assert {"ScaledTanh", "ScaledTanh_grad"} <= types
    assert any(o["name"] == "act/ScaledTanh_grad#0" for o in r["ops"])
    code, r, _ = record(tmp_path, "custom_function_train.py", "--steps", "12", "--fix")
    assert code == 0 and r["summary"]["verdict"] == "healthy", r["summary"]["verdict_text"]
    code, r, _ = record(tmp_path, "custom_function_train.py", "--steps", "12", "--fp32")
    assert r["summary"]["verdict"] == "amp_off"


def test_a_loss_outside_the_model_names_the_scripts_cast_and_the_advice_reaches_it(tmp_path):
    code, r, _ = record(tmp_path, "mse_outside_train.py", "--steps", "2")
    assert code == 1
    p = r["nonfinite"]["producers"][0]
    assert (p["op"], p["module"], p["step"]) == ("mse_loss", "MSELoss", 1)
    source = open(os.path.join(SCRIPTS, "mse_outside_train.py")).read().splitlines()
    line = next(i + 1 for i, code_line in enumerate(source) if "loss = criterion(pred, y.to(pred.dtype))" in code_line)
    cast = p["script_casts"][0]
    assert (cast["input"], cast["dtype"], cast["line"]) == ("input 1", "float16", line)
    assert cast["file"].endswith("mse_outside_train.py") and "y.to(pred.dtype)" in cast["code"]
    assert f"the script cast its input 1 to float16 at {cast['file']}:{line}" in r["summary"]["verdict_text"]
    roots = {x["path"]: x for x in r["run"]["roots"]}
    assert roots[""]["model"] and not roots["MSELoss"]["model"]
    assert roots["MSELoss"]["site"]["line"] == line
    report = tmp_path / "run.json"
    env = dict(os.environ, PYTHONPATH=RECORDER_ROOT)
    advice = subprocess.run([sys.executable, "-m", "ampcheck_recorder", "advice", "--fp32-modules", "MSELoss",
                             "--device", "cpu", "--report", str(report)], env=env, capture_output=True, text=True)
    assert advice.returncode == 0, advice.stderr
    assert "'MSELoss' is not part of the model" in advice.stdout
    assert f":{line}:" in advice.stdout, advice.stdout
    assert "fp32 = ampcheck_recorder.keep_fp32(model" not in advice.stdout, advice.stdout  # it cannot reach it
    code, r, _ = record(tmp_path, "mse_outside_train.py", "--steps", "12", "--fix")
    assert not r["nonfinite"]["producers"], r["summary"]["verdict_text"]


def _counters(stdout: str) -> str:
    line = next(x for x in stdout.splitlines() if x.startswith("compiled: "))
    return line


def test_a_compiled_model_stays_compiled_and_is_recorded_as_its_graphs(tmp_path, validate):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    plain = subprocess.run([sys.executable, os.path.join(SCRIPTS, "compile_train.py")], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
    assert plain.returncode == 0, plain.stderr[-2000:]
    code, r, stdout = record(tmp_path, "compile_train.py")
    validate(r)
    # torch.compile's own counters: the same graph, the same captured calls, no graph break.
    assert _counters(stdout) == _counters(plain.stdout)
    assert "'unique_graphs': 1" in _counters(stdout) and "graph breaks: 0" in _counters(stdout)
    assert code == 0 and r["summary"]["verdict"] == "healthy", r["summary"]["verdict_text"]
    (region,) = r["compiled"]
    assert region["region"] == "" and region["calls"] == 6 and region["backward_calls"] == 6
    kinds = [g["kind"] for g in region["graphs"]]
    assert kinds == ["forward", "backward"]
    forward = {(o["op"], o["module"]): o["dtype"] for o in region["graphs"][0]["ops"]}
    # autocast's fp16 linears, with the user's module paths (no _orig_mod.)
    for module in ("emb", "block.fc1", "block.fc2", "head"):
        assert forward[("linear", module)] == "float16", forward
    assert ("linear_grad", "head") in {(o["op"], o["module"]) for o in region["graphs"][1]["ops"]}
    assert not any(o["module"].startswith("_orig_mod") for o in r["ops"])
    assert "in the graphs torch.compile made of the model" in r["summary"]["verdict_text"]


def test_a_failure_inside_a_compiled_region_is_found_by_recording_it_again_eagerly(tmp_path):
    code, r, _ = record(tmp_path, "compile_train.py", "--fault", "forward")
    assert code == 1
    p = r["nonfinite"]["producers"][0]
    # The value of 6e4 through emb's fp16 linear: the same producer the eager run names.
    assert (p["op"], p["module"], p["phase"], p["step"]) == ("linear", "emb", "forward", 3), p
    assert p["lost"] and p["lost"][0]["kind"] == "overflow"
    replays = r["compiled"][0]["replays"]
    assert replays[0]["step"] == 3 and replays[0]["found"] == "linear in 'emb'", replays
    code, r, _ = record(tmp_path, "compile_train.py", "--fault", "custom_backward")
    assert code == 1
    text = r["summary"]["verdict_text"]
    assert "exp in the backward of autograd.Function ScaledTanh in 'block'" in text, text


def test_a_compiled_model_written_as_nanogpt_is_recorded_without_touching_its_backward(tmp_path):
    # nanoGPT's loop: the compiled model returns (logits, loss), so backward gives logits no
    # gradient (a None to the recorder's hook, which must never raise into the user's run);
    # two micro-batches a step, unscale_ and clip_grad_norm_.
    code, r, stdout = record(tmp_path, "compile_train.py", "--nanogpt")
    assert code == 0 and r["summary"]["verdict"] == "healthy", r["summary"]["verdict_text"]
    assert "graph breaks: 0" in _counters(stdout)
    (region,) = r["compiled"]
    assert region["calls"] == 12 and region["backward_calls"] == 12
    assert r["run"]["micro_batches"] == 2
    # The backward replay gets the loss's gradient only, and finds the Function's overflow.
    code, r, _ = record(tmp_path, "compile_train.py", "--nanogpt", "--fault", "custom_backward")
    assert code == 1
    assert "exp in the backward of autograd.Function ScaledTanh in 'block'" in r["summary"]["verdict_text"]
    assert r["compiled"][0]["replays"][0]["found"] == "exp in 'block'", r["compiled"][0]["replays"]
