"""The recorder's findings as ampcheck's report (reports/schema/report.schema.json,
docs/report-format.md), written as ampcheck's own writer writes it.

The schema is the contract between the two languages: ``ampcheck report`` renders this
file as text and HTML and ``ampcheck diff`` gates on it. Fields appear in the order the
format documents (the members of reports/report.h), reals that are not finite are the
strings "nan", "inf" and "-inf", the indent is 2 and the file ends in a newline.

Schema 1.6 has the recorder's run fields (``run.framework``, ``framework_version``,
``script``, ``script_args``, ``script_outcome``, ``recorder_error``), every skipped update
with its reading and cause (``nonfinite.skips``) and the masks that were failures
(``nonfinite.mask_failures``); 1.10 adds what a recorded run of several processes and a
compiled model carry (``rank``, ``steps[].params_hash``/``grads_hash``, ``compiled``,
``run.lr_schedule``, ``run.micro_batches``, the "persistent" skip reading). What a PyTorch
run has that the schema has no field for goes where every object allows more
(``additionalProperties: true``), under names docs/recorder.md lists:
``steps[].scale_after``; ``ops[].aten``, ``ops[].autocast`` and ``ops[].fp32_nonfinite``;
``nonfinite.healed_updates``; NanEvent ``aten``.

Determinism: nothing here depends on time, host or process. The same seeded run on the
same machine and thread count gives the same bytes.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass

from . import judge as nf
from ._version import __version__

SCHEMA_VERSION = "1.10"


@dataclass(frozen=True)
class Framework:
    """What the report says of the framework a run was recorded in."""
    name: str      # run.framework and amp.semantics: "pytorch", "paddle"
    display: str   # "PyTorch", "PaddlePaddle"
    version: str
    build: str     # "CPU", "CUDA 13.0"
    seed: int      # the run's seed when the recorder saw none set


def _strip(ev: dict) -> dict:
    """A NanEvent as the report writes it: the watch's bookkeeping dropped."""
    out = {k: ev[k] for k in ("step", "phase", "op", "module", "inputs", "out_nan", "out_pos_inf", "out_neg_inf",
                              "lost")}
    if ev.get("aten") is not None:  # PyTorch's: the aten packet
        out["aten"] = ev["aten"]
    if ev.get("function"):  # in a custom autograd.Function's backward: its class
        out["function"] = ev["function"]
    if ev.get("script_casts"):  # computed in fp16/bf16 outside autocast: the script's casts that put it there
        out["script_casts"] = [dict(c) for c in ev["script_casts"]]
    return out


def scale_text(scale: float) -> str:
    """ "2^13" for a power of two, else the number (reports/advice.cpp)."""
    if scale > 0 and math.isfinite(scale):
        p = math.log2(scale)
        if p == math.floor(p):
            return f"2^{int(p)}"
    return f"{scale:g}"


def _scale_value(scale: float) -> str:
    return f"{scale:.0f}" if math.floor(scale) == scale and abs(scale) < 1e15 else f"{scale:g}"


# Each framework's loss scaler, as its users write it: the class and its initial-scale argument.
SCALERS = {"pytorch": ("PyTorch GradScaler", "init_scale", 65536),
           "paddle": ("paddle.amp.GradScaler", "init_loss_scaling", 65536)}


def _dynamic_scaling_advice(scale: float, framework: str) -> str:
    cls, arg, default = SCALERS[framework]
    if scale > 0:
        return f"{cls}({arg}={_scale_value(scale)}), enabled (it is dynamic)"
    return f"{cls}(), enabled (dynamic, from {default})"


def _probing_note(nonfinite: dict, framework: str) -> str:
    cls, arg, _ = SCALERS[framework]
    p = nonfinite.get("probing")
    if not p:
        return ""
    start = p["suggested_scale"] if p["suggested_scale"] > 0 else p["scale_to"]
    later = f" (later {scale_text(start)})" if start < p["scale_to"] else ""
    return (f"{p['skipped']} of {nonfinite['updates']} steps were skipped while the loss scaler came down from "
            f"{scale_text(p['scale_from'])} to {scale_text(p['scale_to'])}{later}: start it lower "
            f"({cls}({arg}={_scale_value(start)}))")


def _gradient_underflow_text(nonfinite: dict, framework: str) -> str:
    z = nonfinite["zero_gradients"]
    at_least = f" to at least {scale_text(z['scale_needed'])}" if z["scale_needed"] > 0 else ""
    return (f"gradients underflow: every parameter gradient was 0 in {z['dtype']} from step {z['first_step']} "
            f"({z['steps']} of {z['stepped']} steps); enable dynamic loss scaling or raise the scale{at_least} "
            f"({_dynamic_scaling_advice(z['scale_needed'], framework)})")


def _failure_text(w: dict) -> str:
    """The verdict's sentence for the first failure (cli/run_command.cpp's)."""
    f = w["failures"][0]
    producers = w["producers"]
    if f["kind"] == "forward_non_finite" and producers:
        p = producers[0]
        text = (f"non-finite values first produced by {p['op']} in module '{p['module']}' "
                f"({p['phase']}, step {p['step']})")
        if p["lost"]:
            text += "; " + nf.lost_text(p, p["lost"][0])
        for c in p.get("script_casts", [])[:1]:
            text += (f"; it ran in {c['dtype']} outside autocast: the script cast its {c['input']} to {c['dtype']} "
                     f"at {c['file']}:{c['line']} ({c['code']})")
        if len(producers) > 1:
            text += "; also by" + ",".join(f" {q['op']} in '{q['module']}' ({q['phase']}, step {q['step']})"
                                           for q in producers[1:])
        return text
    if f["kind"] == "gradient_underflow" and w["zero_gradients"]:
        z = w["zero_gradients"]
        return f"gradients underflow: every parameter gradient was 0 in {z['dtype']} from step {z['first_step']}"
    return f["detail"]


def _level(rec) -> str:
    # torch.autocast is ampcheck's O1 (per-op lists, fp32 weights); low-precision ops
    # without autocast are a .half()/.bfloat16() model, O3; neither is an fp32 run.
    if rec.autocast_seen:
        return rec.autocast_level
    return "O3" if rec.low_dtypes else "O0"


def torch_cuda_available() -> bool:
    import sys
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available())


def _rank(rec) -> dict | None:
    """One rank of a job a launcher started (ranks.py, distributed.py): who it is, what mixed
    precision its data-parallel wrappers were asked for, the collectives it ran, and the
    parameters its steps checksum."""
    info = getattr(rec, "rank_info", None)
    if info is None:
        return None
    from .ranks import pack
    details = rec.rank_details()
    out = {"rank": info.rank, "world_size": info.world_size, "local_rank": info.local_rank,
           "launcher": info.launcher, "backend": details.get("backend", ""),
           "found_inf_reduced": bool(details.get("found_inf_reduced", False)),
           "asked": details.get("asked", []), "collectives": details.get("collectives", []),
           "params": [name for name, _ in (rec._hashed or [])],
           "initial_hashes": pack(rec.initial_hashes) if rec.initial_hashes is not None else ""}
    return out


def _roots(rec) -> list:
    """The top-level modules the script called: the model (path "") and the others, by the
    class name that prefixes their paths (a loss module, a teacher), with where the script
    first called those."""
    out = []
    for prefix, module in getattr(rec, "_roots", []):
        entry = {"path": prefix, "class": type(module).__name__, "model": prefix == ""}
        site = getattr(rec, "_root_sites", {}).get(prefix)
        if site:
            entry["site"] = dict(site)
        out.append(entry)
    return out


def _lr_schedule(rec) -> dict | None:
    """How the learning rate moved over the steps, when it did (a warmup, a decay)."""
    rates = [(st["step"], st["lr"]) for st in rec.steps if "lr" in st]
    if len({lr for _, lr in rates}) < 2:
        return None
    peak_step, peak = max(rates, key=lambda r: (r[1], -r[0]))
    return {"scheduler": getattr(rec, "lr_scheduler", ""), "first": rates[0][1], "peak": peak,
            "peak_step": peak_step, "last": rates[-1][1]}


def _nonfinite_block(rec, w: dict | None) -> dict:
    if w is None:  # inspect trace: nothing was judged
        return {"producers": [], "propagator_events": 0, "propagators": [], "failures": [], "updates": rec._updates,
                "skipped": sum(1 for s in rec.steps if s["skipped"]), "absorbed": 0, "events_checked": 0,
                "intended": [], "skips": [], "mask_failures": []}
    out = {}
    if w["producers"]:
        out["producer"] = _strip(w["producers"][0])
    out["producers"] = [_strip(p) for p in w["producers"]]
    out["propagator_events"] = w["propagators"].events
    out["propagators"] = [{"type": t, "events": n} for t, n in w["propagators"].by_op.items()]
    out["failures"] = [{"kind": f["kind"], "step": f["step"], "detail": f["detail"]} for f in w["failures"]]
    out["updates"] = w["updates"]
    out["skipped"] = w["skipped"]
    out["absorbed"] = w["absorbed"]
    out["events_checked"] = rec.watch.events_checked
    out["intended"] = []
    for i in w["intended"]:
        readers = i["readers"]
        if not readers:
            reason = "-inf mask: no op read it"
        elif all(r == "softmax" for r in readers):
            reason = "-inf mask: softmax maps it to 0"
        else:
            reason = f"-inf mask: {', '.join(readers)} {'maps' if len(readers) == 1 else 'map'} it to finite values"
        out["intended"].append({"op": i["op"], "module": i["module"], "events": i["events"], "values": i["values"],
                                "readers": list(readers), "reason": reason})
    if w["probing"]:
        out["probing"] = dict(w["probing"])
    if w["zero_gradients"]:
        out["zero_gradients"] = dict(w["zero_gradients"])
    out["skips"] = [dict(k, event=_strip(k["event"])) if "event" in k else dict(k) for k in w["skips"]]
    out["mask_failures"] = [dict(f) for f in w["mask_failures"]]
    out["healed_updates"] = w["healed_updates"]
    return out


def _op_instance(inst) -> dict:
    o = {
        "name": inst.name,
        "type": inst.type,
        "module": inst.module,
        "phase": inst.phase,
        "occurrence": inst.occurrence,
        "calls": inst.calls,
        "reason": inst.reason,
        "dtypes_in": list(inst.dtypes_in),
        "compute": inst.compute,
        "out": inst.out,
        "kernel_dtypes": _dtype_counts(inst.kernel_dtypes),
        "casts": [{"input": i, "slot": "", "from": a, "to": b, "calls": n} for (i, a, b), n in inst.casts.items()],
        "kernels": [{"name": k, "calls": n} for k, n in inst.kernels.items()],
        "numerics": [{"role": role, "numerics": s.report()} for role, s in inst.numerics.items()],
    }
    if inst.error_count or inst.error_nonfinite:
        n = inst.error_count
        o["local_error"] = {
            "count": n, "nonfinite": inst.error_nonfinite,
            "mean": inst.error_sum / n if n else 0.0, "mean_floor": inst.floor_sum / n if n else 0.0,
            "worst": max(inst.worst, 0.0), "floor_at_worst": inst.floor_at_worst,
            "worst_step": inst.worst_step, "max_abs": inst.max_abs,
        }
    if inst.first_loss is not None:
        step, kind, value = inst.first_loss
        o["range_loss"] = {"underflow": inst.underflow, "overflow": inst.overflow, "first_step": step,
                           "first_kind": kind, "first_value": value}
    if inst.aten is not None:  # PyTorch: the aten packets the instance's calls ran
        o["aten"] = list(inst.aten)
    o["autocast"] = inst.autocast
    if inst.fp32_nonfinite:
        o["fp32_nonfinite"] = inst.fp32_nonfinite
    if inst.fp8_cast:  # a cast into fp8: what left the format's range or flushed to 0
        o["fp8_cast"] = dict(inst.fp8_cast)
    return o


def _dtype_counts(c, fp8: int = 0) -> dict:
    out = {"fp16": c[0], "bf16": c[1], "fp32": c[2], "other": c[3]}
    if fp8:
        out["fp8"] = fp8  # of "other": the calls whose kernel ran in an fp8 dtype
    return out


def build(rec) -> dict:
    """The report of what `rec` recorded so far."""
    w = rec.watch.report() if rec.watch is not None else None
    steps = rec.steps
    # fp8 calls (in "other" of the four columns) ran in low precision too.
    low_calls = sum(c[0] + c[1] for c in rec.op_types.values()) + sum(rec.fp8_calls.values())
    total_calls = sum(sum(c) for c in rec.op_types.values())
    dtype = (rec.autocast_dtypes or rec.low_dtypes or ["float32"])[0]
    level = _level(rec)
    fw = rec.framework()  # Framework: names, versions and defaults of the user's framework
    scaling = fw.name if rec.scaler_enabled else "static"
    init_scale = rec.init_scale if rec.scaler_enabled and not math.isnan(rec.init_scale) else 1.0
    run = {
        "command": "record",
        "model": rec.model_name,
        "model_description": (f"{rec.model_name or 'a model'} trained by "
                              f"{rec.script or 'a ' + fw.display + ' script'}, recorded in {fw.display} "
                              f"{fw.version}"),
        "parameters": rec.parameters,
        "level": level,
        "dtype": dtype if level != "O0" else "float32",
        "device": rec.device or "cpu",
        "seed": rec.seed if rec.seed is not None else fw.seed,
        "steps": len(steps),
        "batch": rec.batch,
        "lr": rec.lr,
        "optimizer": rec.optimizer_name,
        "inspect": rec.inspect,
        "amp": {
            "semantics": fw.name,
            "config_file": "",
            "custom_white_list": [],
            "custom_black_list": sorted(rec.forcer.ops | rec.forcer.functions),
            "fp32_modules": list(rec.forcer.modules),
            "loss_scaling": scaling,
            "init_loss_scaling": init_scale,
        },
        "versions": {
            "ampcheck": __version__,
            "build": f"ampcheck-recorder {__version__} (pure Python) on {fw.display} {fw.version} ({fw.build})",
            "cpu_conversions": f"{fw.display}'s own kernels",
        },
        "framework": fw.name,
        "framework_version": fw.version,
        "script": rec.script or "",
        "script_args": list(rec.script_args),
    }
    if getattr(rec, "kernels", 0):
        run["kernels_profile"] = {"steps": list(rec.kernels_steps), "file": os.path.basename(rec.kernels_out or ""),
                                  "cuda": bool(torch_cuda_available()), "note": rec.kernels_note}
    if getattr(rec, "listen", None):
        run["listen"] = rec.listen
        run["listened_steps"] = list(rec.listened_steps)
    asked = getattr(rec, "trainer_asked", None)
    if asked:
        run["trainer"] = dict(asked)
    roots = _roots(rec)
    if roots:
        run["roots"] = roots
    schedule = _lr_schedule(rec)
    if schedule is not None:
        run["lr_schedule"] = schedule
    if getattr(rec, "micro_batches", 0) > 1:
        run["micro_batches"] = rec.micro_batches
    if rec.script_outcome is not None:
        run["script_outcome"] = dict(rec.script_outcome)
    if rec.internal_error is not None:
        run["recorder_error"] = rec.internal_error.strip().splitlines()[-1]

    report = {"schema_version": SCHEMA_VERSION, "run": run}
    if rec.interrupted_by and steps:
        report["interrupted"] = {"signal": rec.interrupted_by, "steps_run": len(steps),
                                 "steps_requested": len(steps), "bisect_run": 0}
    report["steps"] = [dict(s) for s in steps]
    rank = _rank(rec)
    if rank is not None:
        report["rank"] = rank
    report["op_types"] = [{"type": t, "calls": _dtype_counts(c, rec.fp8_calls.get(t, 0))}
                          for t, c in sorted(rec.op_types.items())]
    report["inserted_casts"] = [{"from": a, "to": b, "calls": n} for (a, b), n in rec.inserted_casts.items()]
    report["ops"] = [_op_instance(i) for i in rec.instances.values()]
    report["tensors"] = []
    # The PyTorch recorder's reading (recorder.py, _note_swamping_after); Paddle's has none.
    report["swamping"] = [{"parameter": name, "updates": n, "fraction": total / n}
                          for name, (n, total) in sorted(getattr(rec, "swamping", {}).items())]
    nonfinite = _nonfinite_block(rec, w)
    report["nonfinite"] = nonfinite
    compiled = rec.compiled.report() if getattr(rec, "compiled", None) is not None else []
    if compiled:
        report["compiled"] = compiled
    skipped = sum(1 for s in steps if s["skipped"])
    finite_losses = [s["loss"] for s in steps]
    summary = {
        "initial_loss": finite_losses[0] if finite_losses else math.nan,
        "final_loss": finite_losses[-1] if finite_losses else math.nan,
        "accuracy": rec.accuracy,
        "skipped_steps": skipped,
        "final_loss_scale": steps[-1].get("scale_after", steps[-1]["loss_scale"]) if steps else init_scale,
        "low_precision_calls": low_calls,
        "total_calls": total_calls,
    }
    summary.update(_verdict(rec, w, nonfinite, summary, dtype, report, fw.name))
    report["summary"] = summary
    return report


def _compiled_summary(report) -> tuple[int, list, str]:
    """(low-precision forward ops, their dtypes, the verdict's words) of the compiled
    regions' graphs (compiled.py): counted apart from the op calls heard one by one."""
    regions = report.get("compiled", [])
    if not regions:
        return 0, [], ""
    from .compiled import low_precision_share
    low, total, dtypes = low_precision_share(regions)
    names = ", ".join("the model" if not r["region"] else f"'{r['region']}'" for r in regions)
    if total:
        return low, dtypes, (f"; in the graphs torch.compile made of {names}: {low} of {total} forward ops in "
                             f"{' and '.join(dtypes) or 'float32'}, not counted above")
    return 0, [], (f"; {names} ran compiled and its graphs were not seen (a backend other than Inductor): its ops "
                   "are not counted; TORCH_COMPILE_DISABLE=1 records them eagerly")


def _verdict(rec, w, nonfinite, summary, dtype, report, framework: str) -> dict:
    failed = bool(w and w["failures"])
    compiled_low, compiled_dtypes, compiled_text = _compiled_summary(report)
    if summary["low_precision_calls"] == 0 and compiled_dtypes and dtype == "float32":
        dtype = compiled_dtypes[0]
    if failed:
        kinds = {f["kind"] for f in w["failures"]}
        if w["zero_gradients"] and kinds <= {"gradient_underflow", "scale_below_floor"}:
            verdict, text = "gradient_underflow", "FAILED: " + _gradient_underflow_text(nonfinite, framework)
        else:
            verdict, text = "failed", "FAILED: " + _failure_text(w)
    elif summary["low_precision_calls"] == 0 and not compiled_low:
        verdict, text = "amp_off", "AMP is NOT on: no op ran in a low-precision dtype"
        if rec.amp_note():
            text += ": " + rec.amp_note()
        text += compiled_text
    else:
        verdict = "healthy"
        ran_in = " and ".join(d for d in ([dtype] if dtype != "float32" else []) + list(rec.fp8_dtypes)
                              + [d for d in compiled_dtypes if d != dtype])
        text = (f"healthy: AMP is on ({summary['low_precision_calls']} of {summary['total_calls']} op calls ran "
                f"in {ran_in or dtype}{compiled_text}), {summary['skipped_steps']} skipped step(s) absorbed by the "
                "scaler")
        probing = sum(1 for k in nonfinite.get("skips", []) if k["reading"] in nf.PROBING)
        if probing:
            text += f" ({probing} of them probing for its scale)"
        if rec.amp_note():  # ran in another dtype than the trainer was asked for
            text += "; " + rec.amp_note()
        if nonfinite.get("probing", {}).get("excused"):
            text += "; " + _probing_note(nonfinite, framework)
    if not failed and nonfinite["intended"]:
        values = sum(i["values"] for i in nonfinite["intended"])
        softmax_only = all(r == "softmax" for i in nonfinite["intended"] for r in i["readers"])
        text += (f"; {values} intended -Inf "
                 f"({'masks softmax maps to 0' if softmax_only else 'masks their readers map to finite values'}) "
                 "not counted as failures")
    text += _fp8_saturation_text(report)
    if "interrupted" in report:
        when = f"interrupted after {len(rec.steps)} steps, by {rec.interrupted_by}"
        if verdict in ("failed", "gradient_underflow"):
            text += f" (the run was {when})"
        else:
            verdict, text = "interrupted", f"{when}; in the steps run: {text}"
    if rec.internal_error is not None:
        text += "; the recorder stopped early on an internal error (run.recorder_error): the steps after it were not seen"
    return {"verdict": verdict, "verdict_text": text}


def _fp8_saturation_text(report) -> str:
    """The casts into fp8 whose values left the format's range without a NaN to show for it:
    PyTorch's E4M3 cast saturates them to +-448, silently (a scale too large for the values,
    as a delayed scale behind an amax jump is)."""
    hits = [o for o in report["ops"] if o.get("fp8_cast", {}).get("beyond") and o["fp8_cast"]["saturates"]]
    if not hits:
        return ""
    n = sum(o["fp8_cast"]["beyond"] for o in hits)
    first = min(hits, key=lambda o: o["fp8_cast"]["first_beyond_step"])
    c = first["fp8_cast"]
    where = f"in '{first['module']}'" if first["module"] else "outside any module"
    return (f"; fp8: {n} value(s) saturated to +-{c['max']:g} in casts to {c['dtype']} (first {where}, step "
            f"{c['first_beyond_step']}): the scale is too large for those values (an amax that jumped past "
            f"a delayed scale?)")


def _jsonable(x):
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def to_json(report: dict) -> str:
    """The report's bytes: ampcheck's JSON format (see the module's comment)."""
    return json.dumps(_jsonable(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write(report: dict, path) -> str:
    """Writes atomically: a reader never sees half a report."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ampcheck-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(to_json(report))
        umask = os.umask(0)  # mkstemp makes the file 0600; a report is as readable as any file
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
