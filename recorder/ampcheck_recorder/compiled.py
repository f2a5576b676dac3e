"""Compiled code (torch.compile): recorded as what it runs, without changing what runs.

A TorchDispatchMode on the stack makes TorchDynamo skip every frame (the model would run
eagerly, uncompiled), and module hooks or a patched autograd.Function.apply would be traced
into its graphs (graph breaks). So a compiled region (an OptimizedModule's forward, a
torch.compile'd function, a module's .compile()) runs with the recorder out of the way: its
modes off the stacks, its global module hooks and its Function.apply patch removed for the
call, all put back after. What the region ran is read from its graphs instead: Inductor hands
each graph it compiles, forward and backward, after its post-grad passes to a pass of the
recorder's (``post_grad_custom_post_pass``), whose nodes are aten ops with their dtypes and
the module paths dynamo kept. A value that comes out of a region non-finite, or gradients
that a step finds non-finite after a region ran, are found op by op by running the region
again eagerly on the inputs of its last call (its original module or function, the autocast
state and the RNG state of that call, the RNG put back after): "recorded again eagerly".
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading

import torch

from . import listen
from . import numerics as nx
from .optypes import op_type

_tls = threading.local()


# Eager replays per region over a run: the first failures are the ones to find.
MAX_REPLAYS = 8


class Region:
    """One compiled entry point: an OptimizedModule, a compiled function or module call."""

    def __init__(self, name: str, module, fn):
        self.name = name              # the module path ("" the model) or the function's name
        self.module = module          # the module it compiles (None for a function)
        self.fn = fn                  # the uncompiled callable, for the eager replay
        self.calls = 0
        self.graphs: list = []        # {"kind", "ops": {(op, dtype, module): count}}
        self.last = None              # (args, kwargs, autocast, rng) of its last call, for a replay
        self.grads: list = []         # the gradients its last call's outputs received
        self.backward_calls = 0
        self.eager_calls = 0          # run eagerly for a trial forcing ops to fp32
        self.replays: list = []       # {"step", "why", "found"}


def _dtype_of(val):
    if isinstance(val, (list, tuple)):
        val = next((v for v in val if isinstance(v, torch.Tensor)), None)
    return getattr(val, "dtype", None)


_FRAME_LOCAL = re.compile(r"^L\[['\"][^'\"]+['\"]\]\.?")


def _path(meta) -> str:
    """The module path dynamo kept for a node: "L['self'].blocks[0].fc1" -> "blocks.0.fc1"."""
    stack = meta.get("nn_module_stack") or meta.get("fwd_nn_module_stack")
    if not stack:
        return ""
    path = _FRAME_LOCAL.sub("", str(list(stack.values())[-1][0]))
    path = re.sub(r"\[['\"]?([^'\"\]]+)['\"]?\]", r".\1", path).lstrip(".")
    if path.startswith("L[") or path.startswith("L__"):
        return ""
    return path.replace("_orig_mod.", "").replace("._orig_mod", "")


def graph_ops(graph, forward_names: dict | None = None) -> tuple[str, dict]:
    """(kind, {(op, dtype, module): calls}) of an FX graph after Inductor's decompositions:
    the nodes one aten call of the traced program became (its original_aten and autograd
    sequence number) counted as one call, in ampcheck's op names, with the dtype of its last
    node (the call's output); a backward graph's calls named as the eager recorder names them,
    by their forward op ("softmax_grad"). `forward_names` maps sequence numbers to forward op
    names, filled by forward graphs and read by backward ones."""
    names = {} if forward_names is None else forward_names
    backward = any(n.op == "placeholder" and n.name.startswith("tangents") for n in graph.nodes)
    groups: dict = {}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        original = node.meta.get("original_aten")
        if original is None or not hasattr(original, "_schema"):
            continue
        seq = node.meta.get("seq_nr")
        grad = bool(node.meta.get("autograd_backward")) and backward
        key = (str(original), seq, grad)
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"original": original, "seq": seq, "grad": grad, "dtype": None, "path": ""}
        dt = _dtype_of(node.meta.get("val"))
        if dt is not None and (dt.is_floating_point or g["dtype"] is None):
            g["dtype"] = dt
        if not g["path"]:
            g["path"] = _path(node.meta)
    ops: dict = {}
    for g in groups.values():
        op = op_type(g["original"], ())
        if not g["grad"] and g["seq"] is not None:
            names.setdefault(g["seq"], op)
        if g["grad"]:
            op = names.get(g["seq"], op) + "_grad"
        key = (op, nx.dtype_name(g["dtype"]) if g["dtype"] is not None else "", g["path"])
        ops[key] = ops.get(key, 0) + 1
    return ("backward" if backward else "forward"), ops


class Compiled:
    """The recorder's view of torch.compile in one run."""

    def __init__(self, recorder):
        self.rec = recorder
        self.regions: list[Region] = []
        self._compiling: Region | None = None   # the region whose call compiles now
        self._last: Region | None = None
        self._pass_installed = False
        self._previous_pass = None
        self._forward_names: dict = {}  # autograd sequence number -> forward op, from forward graphs
        self._backward_ran = False     # a compiled backward ran in this step

    # -- what wraps a compiled callable ----------------------------------------------------

    def wrap(self, compiled, original, module=None):
        """`compiled` (torch.compile's result on `original`) run as a region."""
        name = getattr(original, "__qualname__", getattr(original, "__name__", "compiled"))
        region = Region(name, module, original)
        self.regions.append(region)
        owner = self

        @functools.wraps(compiled)
        def run(*args, **kwargs):
            if owner.rec.closed or getattr(_tls, "inside", False):
                return compiled(*args, **kwargs)
            if owner.rec.forcer:
                # A trial forcing ops or modules to fp32 (bisect-nan --script): the forcing
                # is the recorder's, on the calls it hears, so the region runs eagerly, heard.
                region.calls += 1
                region.eager_calls += 1
                eager = region.module if region.module is not None else region.fn
                return eager(*args, **kwargs)
            return owner.call(region, compiled, args, kwargs)

        for attr in ("_torchdynamo_orig_callable", "_torchdynamo_inline"):
            if hasattr(compiled, attr):
                setattr(run, attr, getattr(compiled, attr))
        return run

    def call(self, region: Region, compiled, args, kwargs):
        rec = self.rec
        if region.module is not None:
            region.name = rec.module_path(region.module)
        region.calls += 1
        self._install_pass()
        s = listen.state()
        keep = rec.inspect != "trace"
        if keep:
            region.last = (args, dict(kwargs), listen.autocast_now(),
                           (listen.autocast_dtype("cpu"), listen.autocast_dtype("cuda")), _rng_state())
            region.grads = []
        self._compiling, self._last = region, region
        _tls.inside = True
        try:
            with rec.out_of_the_way(s):
                out = compiled(*args, **kwargs)
        finally:
            _tls.inside = False
            self._compiling = None
        self._after(region, out, keep)
        return out

    def _after(self, region: Region, out, keep: bool):
        outs = [t for t in listen.tensors_of(out) if isinstance(t, torch.Tensor) and listen.plain(t)]
        floating = [t for t in outs if t.is_floating_point()]
        if keep:
            with listen.quiet():
                bad = any(not nx.all_finite(t) for t in floating)
            if bad:  # a non-finite value made inside the region: find it op by op
                self.replay(region, "a value it returned was non-finite", backward=False)
        # Its backward runs (counted once a call) and, to replay it, the gradients it receives.
        call = {"counted": False}
        wanting = [t for t in floating if t.requires_grad]
        if keep:
            region.grads = [None] * len(wanting)
        for i, t in enumerate(wanting):
            t.register_hook(functools.partial(_on_grad, self, region, call, keep, i))

    # -- the graphs Inductor compiled --------------------------------------------------------

    def _install_pass(self):
        if self._pass_installed:
            return
        self._pass_installed = True
        try:
            import torch._inductor.config as config
        except ImportError:  # no Inductor: the regions are named, their graphs unseen
            return
        self._previous_pass = config.post_grad_custom_post_pass
        previous, owner = self._previous_pass, self

        def see(graph):
            if previous is not None:
                previous(graph)
            try:
                owner.on_graph(graph)
            except Exception:  # never the compile's failure
                pass

        config.post_grad_custom_post_pass = see

    def uninstall(self):
        if self._pass_installed:
            try:
                import torch._inductor.config as config
                config.post_grad_custom_post_pass = self._previous_pass
            except ImportError:
                pass

    def on_graph(self, graph):
        region = self._compiling or self._last
        if region is None:
            return
        kind, ops = graph_ops(graph, self._forward_names)
        region.graphs.append({"kind": kind, "ops": ops})

    # -- the eager replay ------------------------------------------------------------------

    def on_backward_node(self):
        """A compiled region's backward (CompiledFunctionBackward) runs on a heard step."""
        if self._last is not None:
            self._backward_ran = True

    def replay_backward(self, why: str):
        """Gradients found non-finite in a step whose backward ran through a compiled region:
        the last such region recorded again eagerly, forward and backward."""
        if self._backward_ran and self._last is not None:
            self._backward_ran = False
            self.replay(self._last, why, backward=True)

    def step_ended(self):
        self._backward_ran = False

    def replay(self, region: Region, why: str, backward: bool):
        """Runs the region's last call again eagerly, recorded: its ops' producers found as
        any eager run's are. Its outputs are dropped; the RNG is put back after."""
        if region.last is None or len(region.replays) >= MAX_REPLAYS:
            return
        rec = self.rec
        args, kwargs, on, dtypes, rng = region.last
        fn = region.module if region.module is not None else region.fn
        if fn is None:
            return
        found = len(rec.watch.producers) if rec.watch is not None else 0
        pending = len(rec.watch._pending.producers) if rec.watch is not None else 0
        _tls.inside = True
        rec.replaying = region.name or "the compiled region"
        leaves = [p for p in (region.module.parameters() if region.module is not None else []) if p.requires_grad]
        try:
            run_again(fn, args, kwargs, on, dtypes, rng, region.grads if backward else None, leaves)
        except Exception as e:  # the replay could not run: said, never the run's failure
            region.replays.append({"step": rec.step_index, "why": why, "found": f"not replayed: {e}"})
            return
        finally:
            rec.replaying = ""
            _tls.inside = False
        if rec.watch is None:
            return
        new = (rec.watch._pending.producers[pending:] if backward else rec.watch.producers[found:])
        what = ", ".join(f"{e['op']} in '{e['module']}'" for e in new[:3]) or "no op made it eagerly"
        region.replays.append({"step": rec.step_index, "why": why, "found": what})

    def report(self) -> list:
        out = []
        for r in self.regions:
            if not r.calls:
                continue
            graphs = []
            for g in r.graphs:
                rows = [{"op": op, "dtype": dt, "module": m, "count": n} for (op, dt, m), n in g["ops"].items()]
                graphs.append({"kind": g["kind"], "ops": rows})
            entry = {"region": r.name, "calls": r.calls, "backward_calls": r.backward_calls, "graphs": graphs,
                     "replays": list(r.replays)}
            if r.eager_calls:
                entry["eager_calls"] = r.eager_calls  # a forcing trial's: run eagerly, heard
            out.append(entry)
        return out


def _on_grad(owner: "Compiled", region: Region, call: dict, keep: bool, index: int, grad):
    # Hooks fire in backward's order, so each gradient is kept at its output's place. An
    # output the loss does not use (nanoGPT's logits beside its loss) gets None. The hook
    # only listens: it never raises into the user's backward.
    if not call["counted"]:
        call["counted"] = True
        region.backward_calls += 1
        owner._backward_ran = True
    if keep and grad is not None and index < len(region.grads):
        region.grads[index] = grad.detach()
    return None


def run_again(fn, args, kwargs, autocast_on, dtypes, rng, grads=None, leaves=()):
    """Runs a call again as it ran: under its autocast state (on, dtype for the CPU and
    CUDA) and from its RNG state, the RNG put back after. Without `grads`, under no_grad;
    with them, backward from its outputs (the gradients they received, in their order) into
    `leaves`, without accumulating into any .grad. Its outputs are dropped."""
    before = _rng_state()
    _set_rng_state(rng)
    try:
        with contextlib.ExitStack() as stack:
            for device, enabled, dtype in (("cpu", autocast_on[0], dtypes[0]), ("cuda", autocast_on[1], dtypes[1])):
                if enabled:
                    stack.enter_context(torch.autocast(device_type=device, dtype=dtype))
            if grads is None:
                stack.enter_context(torch.no_grad())
            out = fn(*args, **kwargs)
            if grads:
                outs = [t for t in listen.tensors_of(out) if isinstance(t, torch.Tensor)
                        and t.is_floating_point() and t.requires_grad]
                if len(grads) == len(outs):  # the outputs that received a gradient
                    pairs = [(t, g) for t, g in zip(outs, grads) if g is not None]
                    if pairs and leaves:
                        torch.autograd.grad([t for t, _ in pairs], list(leaves),
                                            grad_outputs=[g for _, g in pairs], allow_unused=True)
    finally:
        _set_rng_state(before)


def _rng_state():
    cuda = None
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda = torch.cuda.get_rng_state_all()
    return torch.get_rng_state(), cuda


def _set_rng_state(state):
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def low_precision_share(regions: list) -> tuple[int, int, list]:
    """(ops in fp16/bf16, ops, dtypes) over the compiled regions' forward graphs."""
    low = total = 0
    dtypes: list = []
    for r in regions:
        for g in r["graphs"]:
            if g["kind"] != "forward":
                continue
            for row in g["ops"]:
                if row["op"] == "cast":
                    continue
                total += row["count"]
                if row["dtype"] in ("float16", "bfloat16"):
                    low += row["count"]
                    if row["dtype"] not in dtypes:
                        dtypes.append(row["dtype"])
    return low, total, dtypes


def in_region() -> bool:
    return getattr(_tls, "inside", False)

