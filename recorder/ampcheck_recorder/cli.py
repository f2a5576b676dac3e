"""``python -m ampcheck_recorder``: run a script under the recorder, and small helpers.

    python -m ampcheck_recorder run [--inspect stats] [--out run.json] [--fp32-ops a,b]
        [--fp32-modules x,y] [--allow-inf m] [--max-skipped 0.05] [--stats-every 1]
        -- train.py args...          (or -- -m package.module args...)
    python -m ampcheck_recorder advice [--fp32-ops a,b] [--fp32-modules x,y] [--device cuda]
    python -m ampcheck_recorder bootstrap-path

Exit codes of ``run`` (docs/recorder.md): 0 the script ended and the run is healthy;
1 the script ended and the run failed (the report says why); 2 bad usage (the message
names the thing and the fix); 3 the recorder itself failed (a bug: the report, if any,
has run.recorder_error); 4 the script failed (an exception or a non-zero exit; the
report of the steps it ran is written, with run.script_outcome); 130 interrupted by
Ctrl-C or SIGTERM (the report of the steps run is written).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import traceback

from . import inject

OK, RUN_FAILED, USAGE, INTERNAL, SCRIPT_FAILED, INTERRUPTED = 0, 1, 2, 3, 4, 130


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        print(f"ampcheck_recorder: {message}", file=sys.stderr)
        raise SystemExit(USAGE)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m ampcheck_recorder", description="ampcheck's recorder for PyTorch and PaddlePaddle runs")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="run a script with the recorder attached",
                         description="Runs SCRIPT (or -m MODULE) with the recorder attached and writes the report.")
    run.add_argument("--out", default="run.json", help="the report's path (default run.json)")
    run.add_argument("--inspect", default="stats", choices=("trace", "stats", "full"),
                     help="what to record (default stats)")
    run.add_argument("--fp32-ops", default="", help="op types forced to fp32 inside autocast, comma separated")
    run.add_argument("--fp32-modules", default="", help="module paths forced to fp32, comma separated")
    run.add_argument("--allow-inf", default="",
                     help="op types or module paths whose Inf/-Inf is intended, comma separated")
    run.add_argument("--max-skipped", default="0.05", help="the skipped fraction a healthy run may have")
    run.add_argument("--stats-every", default="1", help="numerics every N steps (default 1)")
    run.add_argument("--kernels", default="0",
                     help="profile steps 2..N+1 with PyTorch's profiler (the GPU kernels each op launched), written "
                          "beside the report as NAME.kernels.json (default 0: none)")
    run.add_argument("--listen", default="auto", choices=("auto", "all"),
                     help="the steps heard op by op: auto (the first 4, powers of two, every step after a "
                          "failure) or all (default auto)")
    run.add_argument("--framework", default="torch", choices=("torch", "paddle"),
                     help="the script's framework (default torch; paddle: PaddleRecorder, stats or trace)")
    run.add_argument("target", nargs=argparse.REMAINDER, help="-- script.py args, or -- -m module args")
    adv = sub.add_parser("advice", help="print the PyTorch code that keeps ops or modules in fp32")
    adv.add_argument("--fp32-ops", default="")
    adv.add_argument("--fp32-modules", default="")
    adv.add_argument("--device", default="cuda", help="the autocast device type in the code (default cuda)")
    adv.add_argument("--report", default="",
                     help="the recording the fix is for: modules outside the model and the script's own casts "
                          "shape the advice")
    sub.add_parser("bootstrap-path", help="print the folder `ampcheck record` puts on PYTHONPATH")
    return p


def _target(rest: list[str]):
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        raise inject.ConfigError("no script to run: give -- train.py [args] (or -- -m package.module [args])")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise inject.ConfigError("-m needs a module name: -- -m package.module [args]")
        return "module", rest[1], rest[2:]
    script = rest[0]
    if not os.path.isfile(script):
        raise inject.ConfigError(f'script "{script}" not found; give the path of a Python file '
                                 "(or -m package.module)")
    return "path", script, rest[1:]


def _run(a) -> int:
    try:
        kind, target, args = _target(a.target)
        opts = inject.options(a.out, a.inspect, inject.split_list(a.fp32_ops), inject.split_list(a.fp32_modules),
                              inject.split_list(a.allow_inf), a.max_skipped, a.stats_every, listen=a.listen,
                              kernels=a.kernels)
        script = {"script": target if kind == "path" else f"-m {target}", "script_args": args,
                  "wait_for_model": True}
        if a.framework == "paddle":
            from .paddle_recorder import PaddleRecorder, active
            opts = inject.paddle_options(opts)
        else:
            from .recorder import Recorder, active
        if active() is not None:  # the bootstrap also started one (AMPCHECK_RECORD_OUT set): ours wins
            active().discard()
        rec = (PaddleRecorder(None, **script, **opts) if a.framework == "paddle" else Recorder(**script, **opts))
    except (inject.ConfigError, ValueError) as e:
        print(f"ampcheck_recorder run: {e}", file=sys.stderr)
        return USAGE
    inject.claim_process()
    inject.on_sigterm()
    code, error = 0, ""
    sys.argv = [target] + args
    try:
        if kind == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
        if code:
            error = f"SystemExit: {e.code}"
    except KeyboardInterrupt as e:
        rec.interrupted_by = "SIGTERM" if isinstance(e, inject.Terminated) else "SIGINT"
        code, error = INTERRUPTED, "KeyboardInterrupt" if rec.interrupted_by == "SIGINT" else "SIGTERM"
    except BaseException as e:
        traceback.print_exc()
        code, error = 1, f"{type(e).__name__}: {e}"
    rec.script_outcome = {"exit_code": code, "error": error}
    try:
        report = rec.close()
    except Exception:
        traceback.print_exc()
        print("ampcheck_recorder run: could not write the report (a recorder bug)", file=sys.stderr)
        return INTERNAL
    summary = report["summary"]
    print(f"ampcheck_recorder: {summary['verdict_text']}\nampcheck_recorder: report written to {a.out}",
          file=sys.stderr)
    if rec.internal_error is not None:
        return INTERNAL
    if rec.interrupted_by:
        return INTERRUPTED
    if code != 0:
        return SCRIPT_FAILED
    return RUN_FAILED if summary["verdict"] in ("failed", "gradient_underflow") else OK


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    if a.command == "run":
        return _run(a)
    if a.command == "advice":
        from .fp32 import _function_name, advice
        from .optypes import check_op_names
        try:
            names = inject.split_list(a.fp32_ops)
            functions = [n for n in names if _function_name(n)]
            ops = check_op_names([n for n in names if n not in functions], "--fp32-ops") + functions
        except ValueError as e:
            print(f"ampcheck_recorder advice: {e}", file=sys.stderr)
            return USAGE
        recording = None
        if a.report:
            try:
                with open(a.report, encoding="utf-8") as f:
                    recording = json.load(f)
            except (OSError, ValueError) as e:
                print(f"ampcheck_recorder advice: --report {a.report}: {e}", file=sys.stderr)
                return USAGE
        text = advice(ops, inject.split_list(a.fp32_modules), a.device, recording)
        if not text:
            print("ampcheck_recorder advice: nothing to keep in fp32: give --fp32-ops or --fp32-modules",
                  file=sys.stderr)
            return USAGE
        sys.stdout.write(text)
        return OK
    print(inject.bootstrap_path())
    return OK
