"""Interpreter-start bootstrap of ampcheck's recorder (ampcheck_recorder/inject.py).

``ampcheck record -- python train.py`` puts this folder on PYTHONPATH and the options in
AMPCHECK_RECORD_* variables; Python imports this module at start. It records only when
AMPCHECK_RECORD_OUT is set, imports nothing heavy (torch is imported by the script, and
the recorder starts right after), and then runs the sitecustomize this one shadows, so
a machine's own start-up customisation still happens.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _start():
    if not os.environ.get("AMPCHECK_RECORD_OUT"):
        return
    here = os.path.dirname(os.path.abspath(__file__))
    # The package this bootstrap belongs to, when it is not installed.
    package_root = os.path.dirname(os.path.dirname(here))
    if importlib.util.find_spec("ampcheck_recorder") is None:
        sys.path.append(package_root)
    try:
        from ampcheck_recorder import inject
        inject.from_environment()
    except Exception as e:  # never stop the user's program over the recorder
        print(f"ampcheck recorder: not recording: {e}", file=sys.stderr)


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        print(f"Error in sitecustomize {spec.origin}: {e}", file=sys.stderr)


_start()
_chain()
