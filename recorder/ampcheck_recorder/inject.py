"""Recording a script that does not know about the recorder.

Two ways in, one configuration:

- ``python -m ampcheck_recorder run [options] -- train.py args`` (cli.py) starts the
  recorder and runs the script with runpy, in this process.
- ``ampcheck record -- python train.py args``: the C++ CLI cannot put ``-m`` in front of
  an arbitrary command, so it puts ``ampcheck_recorder/_bootstrap`` on PYTHONPATH and
  the options in the environment. That folder's sitecustomize.py runs at interpreter
  start and calls from_environment(), which waits for the script to import torch or
  paddle (a finder on sys.meta_path) and starts that framework's recorder right after,
  so neither is imported earlier than the script imports it. The report is written at
  exit. A PaddlePaddle script gets the PaddleRecorder (paddle_recorder.py), which takes
  no fp32 forcing (AMPCHECK_RECORD_FP32_*: Paddle's auto_cast custom_black_list is that)
  and no "full" inspection.

The environment (each also a flag of ``run``; docs/recorder.md):

    AMPCHECK_RECORD_OUT           the report's path; setting it turns recording on
    AMPCHECK_RECORD_INSPECT       trace | stats | full (default stats)
    AMPCHECK_RECORD_FP32_OPS      op types forced to fp32, comma separated
    AMPCHECK_RECORD_FP32_MODULES  module paths forced to fp32, comma separated
    AMPCHECK_RECORD_ALLOW_INF     op types or module paths whose Inf/-Inf is intended
    AMPCHECK_RECORD_MAX_SKIPPED   the skipped fraction a healthy run may have (0.05)
    AMPCHECK_RECORD_STATS_EVERY   numerics every N steps (1)
    AMPCHECK_RECORD_LISTEN        auto | all: the steps heard op by op (docs/recorder.md)
    AMPCHECK_RECORD_KERNELS       N: steps 2..N+1 under PyTorch's profiler (record --kernels N)
    AMPCHECK_RECORD_KERNELS_OUT   where that profile's Chrome trace goes (default NAME.kernels.json)
    AMPCHECK_RECORD_SEED          seeds torch (or paddle), random and numpy when the script
                                  imports the framework (`ampcheck record --seeds N`); a
                                  script that seeds itself afterwards wins (it may read
                                  this variable)
    AMPCHECK_RECORD_AMP           off: record the script's fp32 twin (twin.py: autocast and
                                  the GradScaler disabled, the script's casts to
                                  float16/bfloat16 kept in float32; `ampcheck compare --script`)
    AMPCHECK_RECORD_SEED_OFFSET   k: every seed the script sets itself is shifted by k (twin.py;
                                  `ampcheck compare --script --seeds N`'s k-th run)
    AMPCHECK_RECORD_FP32_OPTIMIZER_STATE  on: the script's casts to 16 bits inside the
                                  optimizer's step kept in float32 (twin.py; bisect-nan --script)
    AMPCHECK_RECORD_FP32_MASTER_WEIGHTS   on: the script's model casts to 16 bits kept in float32,
                                  its calls under autocast at that dtype (twin.py; bisect-nan --script)
    AMPCHECK_RECORD_TWIN_DUMP     PATH: the fp32 twin keeps samples of its first step's forward
                                  ops' inputs and outputs there (probe.py; compare --script)
    AMPCHECK_RECORD_TWIN_AGAINST  PATH: the AMP run sets its first step's beside them and writes
                                  each op's difference from the twin to PATH.births.json
    AMPCHECK_RECORD_OWNER         set by the recorder to its process id: a Python
                                  process the script starts (DataLoader workers,
                                  subprocesses) sees another id and does not record
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import signal
import sys

from . import ranks

ENV_OUT = "AMPCHECK_RECORD_OUT"
ENV_INSPECT = "AMPCHECK_RECORD_INSPECT"
ENV_FP32_OPS = "AMPCHECK_RECORD_FP32_OPS"
ENV_FP32_MODULES = "AMPCHECK_RECORD_FP32_MODULES"
ENV_ALLOW_INF = "AMPCHECK_RECORD_ALLOW_INF"
ENV_MAX_SKIPPED = "AMPCHECK_RECORD_MAX_SKIPPED"
ENV_STATS_EVERY = "AMPCHECK_RECORD_STATS_EVERY"
ENV_OWNER = "AMPCHECK_RECORD_OWNER"
ENV_SEED = "AMPCHECK_RECORD_SEED"
ENV_OWNER_RANK = "AMPCHECK_RECORD_OWNER_RANK"
ENV_LISTEN = "AMPCHECK_RECORD_LISTEN"
ENV_KERNELS = "AMPCHECK_RECORD_KERNELS"          # steps to profile (record --kernels N)
ENV_KERNELS_OUT = "AMPCHECK_RECORD_KERNELS_OUT"  # where the trace goes
ENV_AMP = "AMPCHECK_RECORD_AMP"                  # off: the fp32 twin (twin.py)
ENV_SEED_OFFSET = "AMPCHECK_RECORD_SEED_OFFSET"  # k: the script's own seeds shifted by k (twin.py)
ENV_FP32_STATE = "AMPCHECK_RECORD_FP32_OPTIMIZER_STATE"  # on: the moments kept fp32 (twin.py)
ENV_FP32_MASTERS = "AMPCHECK_RECORD_FP32_MASTER_WEIGHTS"  # on: fp32 weights under autocast (twin.py)
ENV_TWIN_DUMP = "AMPCHECK_RECORD_TWIN_DUMP"        # PATH: the first step's op samples written (probe.py)
ENV_TWIN_AGAINST = "AMPCHECK_RECORD_TWIN_AGAINST"  # PATH: set beside those samples (probe.py)


class ConfigError(ValueError):
    """A recorder option that cannot be used; the message names it and the fix."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so the report of the steps run is written."""


def split_list(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def _whole(value, least, what, fix):
    """value as an int of at least `least`, or a ConfigError naming `what` and the fix."""
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{what} is not a whole number; {fix}") from None
    if number < least:
        raise ConfigError(f"{what} is below {least}; {fix}")
    return number


def options(out, inspect="stats", fp32_ops=(), fp32_modules=(), allow_inf=(), max_skipped=0.05,
            stats_every=1, source="", listen="auto", kernels=0, kernels_out=None) -> dict:
    """The Recorder's keyword arguments, checked; `source` names where they came from."""
    where = f" ({source})" if source else ""
    if inspect not in ("trace", "stats", "full"):
        raise ConfigError(f'inspect "{inspect}"{where} is not a mode; use trace, stats or full')
    try:
        max_skipped = float(max_skipped)
    except ValueError:
        raise ConfigError(f'max skipped fraction "{max_skipped}"{where} is not a number; give e.g. 0.05') from None
    if not 0 <= max_skipped <= 1:
        raise ConfigError(f"max skipped fraction {max_skipped}{where} is not in [0, 1]; give e.g. 0.05")
    stats_every = _whole(stats_every, 1, f'stats every "{stats_every}"{where}', "give 1 (every step) or more")
    if listen not in ("auto", "all"):
        raise ConfigError(f'listen "{listen}"{where} is not a policy; use auto (the first steps, powers of two and '
                          'every step after a failure) or all (every step)')
    kernels = _whole(kernels, 0, f'kernels "{kernels}"{where}', "give the steps to profile (0: none)")
    return {"out": out, "inspect": inspect, "fp32_ops": list(fp32_ops), "fp32_modules": list(fp32_modules),
            "allow_inf": list(allow_inf), "max_skipped_fraction": max_skipped, "stats_every": stats_every,
            "listen": listen, "kernels": kernels, "kernels_out": kernels_out}


def options_from_environment() -> dict | None:
    out = os.environ.get(ENV_OUT)
    if not out:
        return None
    env = os.environ
    return options(out, env.get(ENV_INSPECT, "stats") or "stats", split_list(env.get(ENV_FP32_OPS)),
                   split_list(env.get(ENV_FP32_MODULES)), split_list(env.get(ENV_ALLOW_INF)),
                   env.get(ENV_MAX_SKIPPED, "0.05") or "0.05", env.get(ENV_STATS_EVERY, "1") or "1",
                   source="the AMPCHECK_RECORD_* environment", listen=env.get(ENV_LISTEN, "auto") or "auto",
                   kernels=env.get(ENV_KERNELS, "0") or "0", kernels_out=env.get(ENV_KERNELS_OUT) or None)


def claim_process() -> bool:
    """True in a process that records: the command's first Python process, or a rank a
    launcher started (torchrun's workers: each rank records itself, the launcher records
    nothing it would write); False in a Python process a recording process started that is
    no new rank (DataLoader workers, subprocesses)."""
    owner = os.environ.get(ENV_OWNER)
    me = ranks.rank_from_environment()
    mine = "" if me is None else str(me.rank)
    if owner and owner != str(os.getpid()):
        if me is None or os.environ.get(ENV_OWNER_RANK, "") == mine:
            return False
    os.environ[ENV_OWNER] = str(os.getpid())
    os.environ[ENV_OWNER_RANK] = mine
    return True


def out_of_this_process(out: str) -> str:
    """Where this process writes its report: a rank beside the job's path (run.rank1.json)."""
    me = ranks.rank_from_environment()
    return out if me is None else ranks.out_for_rank(out, me.rank)


def on_sigterm():
    """SIGTERM ends the script like Ctrl-C: the report of the steps run is still written."""
    def handler(signum, frame):
        raise Terminated()
    try:
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        pass


FRAMEWORKS = ("torch", "paddle")


class _AfterFrameworkImport(importlib.abc.MetaPathFinder):
    """Runs callback(name) once the first of ``torch`` and ``paddle`` has been imported,
    whoever imports it."""

    def __init__(self, callback):
        self.callback = callback

    def find_spec(self, name, path=None, target=None):
        if name not in FRAMEWORKS:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader, callback = spec.loader, self.callback
        exec_module = loader.exec_module

        def exec_then_start(module):
            exec_module(module)
            callback(name)

        loader.exec_module = exec_then_start
        return spec


_excepthook_state = {"error": ""}
_started: dict = {}  # "recorder": the recorder this bootstrap started


def _note_uncaught(exc_type, exc, tb, previous=sys.excepthook):
    _excepthook_state["error"] = f"{exc_type.__name__}: {exc}"
    rec = _started.get("recorder")
    if rec is not None and issubclass(exc_type, KeyboardInterrupt):
        rec.interrupted_by = "SIGTERM" if issubclass(exc_type, Terminated) else "SIGINT"
    previous(exc_type, exc, tb)


def _seed_from_environment(framework: str):
    """AMPCHECK_RECORD_SEED: the seed of `ampcheck record --seeds N`'s k-th run, set as the
    script imports its framework; a script that seeds itself later overrides it."""
    text = os.environ.get(ENV_SEED, "")
    if not text:
        return
    try:
        seed = int(text)
    except ValueError:
        raise ConfigError(f'{ENV_SEED}="{text}" is not a whole number') from None
    import random
    random.seed(seed)
    if framework == "paddle":
        import paddle
        paddle.seed(seed)
    else:
        import torch
        torch.manual_seed(seed)
    try:
        import numpy
        numpy.random.seed(seed % 2 ** 32)
    except ImportError:
        pass


def paddle_options(opts: dict) -> dict:
    """The options a PaddleRecorder takes, or the reason it cannot record with these."""
    if opts["fp32_ops"] or opts["fp32_modules"]:
        raise ConfigError("forcing ops or modules to fp32 (bisect-nan --script's trials) is PyTorch's only: in "
                          "PaddlePaddle, give them to paddle.amp.auto_cast(custom_black_list={...})")
    if opts["inspect"] == "full":
        raise ConfigError("inspect full needs a hook below Paddle's layers, which Paddle does not have: use stats")
    if opts["stats_every"] != 1:
        raise ConfigError("stats every N steps is PyTorch's only: the PaddlePaddle recorder checks every step")
    if opts.get("kernels"):
        raise ConfigError("record --kernels profiles with PyTorch's profiler: for a PaddlePaddle run, profile it with "
                          "paddle.profiler (targets=[ProfilerTarget.CPU, ProfilerTarget.GPU]) and read the trace "
                          "with ampcheck kernels")
    return {k: opts[k] for k in ("out", "inspect", "allow_inf", "max_skipped_fraction")}


def _start_from_environment(opts, framework="torch"):
    try:
        _seed_from_environment(framework)
        amp = os.environ.get(ENV_AMP, "on") or "on"
        if amp not in ("on", "off"):
            raise ConfigError(f'{ENV_AMP}="{amp}" is not on or off')
        offset_text = os.environ.get(ENV_SEED_OFFSET, "0") or "0"
        try:
            offset = int(offset_text)
        except ValueError:
            raise ConfigError(f'{ENV_SEED_OFFSET}="{offset_text}" is not a whole number') from None
        from . import twin
        if offset:
            (twin.offset_paddle_seeds if framework == "paddle" else twin.offset_seeds)(offset)
        if amp == "off":
            (twin.turn_paddle_amp_off if framework == "paddle" else twin.turn_amp_off)()
        for name, keep in ((ENV_FP32_STATE, twin.keep_optimizer_state_fp32),
                           (ENV_FP32_MASTERS, twin.keep_master_weights_fp32)):
            value = os.environ.get(name, "off") or "off"
            if value not in ("on", "off"):
                raise ConfigError(f'{name}="{value}" is not on or off')
            if value == "on" and framework == "paddle":
                raise ConfigError(f"{name} (bisect-nan --script's trials) is PyTorch's only")
            if value == "on":
                keep()
        script = {"script": sys.argv[0] if sys.argv else "", "script_args": sys.argv[1:], "wait_for_model": True}
        if framework == "paddle":
            from .paddle_recorder import PaddleRecorder
            rec = PaddleRecorder(None, **script, **paddle_options(opts))
        else:
            from .recorder import Recorder
            rec = Recorder(**script, **opts)
            dump, against = os.environ.get(ENV_TWIN_DUMP, ""), os.environ.get(ENV_TWIN_AGAINST, "")
            # One process sets its step beside the twin's: a lone one, or a job's rank 0 (the
            # ranks would write the same files).
            job = ranks.rank_from_environment()
            if (dump or against) and (job is None or job.rank == 0):
                from .probe import TwinProbe
                try:
                    rec.twin_probe = TwinProbe(dump=dump, against=against)
                except ValueError as e:  # the run is still recorded, only not set beside its twin
                    print(f"ampcheck recorder: {e}: the first step is not set beside the twin's", file=sys.stderr)
        _started["recorder"] = rec
        # A launcher (torchrun) imports torch too: when its workers recorded as ranks and it
        # saw no training of its own, it writes nothing.
        rec.quiet_beside_ranks = ranks.rank_from_environment() is None
        # At exit: what the script did, as far as this process can tell.
        rec.script_outcome = _excepthook_state
    except Exception as e:  # never break the user's run over the recorder
        not_recording(str(e))


def not_recording(reason: str):
    """Says why this process records nothing: on stderr, and beside the report's path
    (REPORT.why), where `ampcheck record` looks when no report came."""
    message = f"ampcheck recorder: not recording: {reason}"
    print(message, file=sys.stderr)
    out = os.environ.get(ENV_OUT)
    if out:
        try:
            with open(out + ".why", "w", encoding="utf-8") as f:
                f.write(message + "\n")
        except OSError:
            pass


def from_environment():
    """The bootstrap: records this process when AMPCHECK_RECORD_OUT is set."""
    try:
        opts = options_from_environment()
    except ConfigError as e:
        not_recording(str(e))
        return
    if opts is None or not claim_process():
        return
    opts["out"] = out_of_this_process(opts["out"])
    if opts["kernels_out"]:
        opts["kernels_out"] = out_of_this_process(opts["kernels_out"])
    sys.excepthook = _note_uncaught
    on_sigterm()
    imported = [name for name in FRAMEWORKS if name in sys.modules]
    if imported:
        _start_from_environment(opts, imported[0])
    else:
        sys.meta_path.insert(0, _AfterFrameworkImport(lambda name: _start_from_environment(opts, name)))


def bootstrap_path() -> str:
    """The folder to put on PYTHONPATH for ``ampcheck record``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap")
