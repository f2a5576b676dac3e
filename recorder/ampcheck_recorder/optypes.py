"""What an aten op is called in ampcheck's report.

The recorder listens below autograd, where PyTorch's ops are aten ops (``aten.addmm``,
``aten._softmax``, ``aten.pow.Tensor_Scalar``). ampcheck's report names ops by its own op
list (engine/ops/op_list.h: ``linear``, ``softmax``, ``square``, ``mul_scalar``), so
that a recorded PyTorch run and an ``ampcheck run`` of the same model read alike and
``ampcheck diff`` and ``bisect-nan`` speak of the same names. This module is that table,
the inverse of ``amp::torch_op_name`` (engine/amp/policy.cpp), plus the aten ops with no
ampcheck counterpart, which keep their aten name (``nll_loss``, ``baddbmm``).

It also holds the op families the non-finite analysis needs (ops that move values
without changing them, ops that carry an attention mask's -Inf on), written once here
in ampcheck's names as nan_source.cpp has them.
"""

from __future__ import annotations

import difflib
import numbers

import torch

# engine/ops/op_list.h, in its order. Checked by tests/test_optypes.py against the file.
AMPCHECK_OPS = (
    "matmul", "linear", "bmm", "scaled_dot_product_attention", "lstm", "gru", "rnn_tanh", "rnn_relu",
    "fp8_linear", "conv2d", "batch_norm", "layer_norm", "relu", "gelu", "silu",
    "sigmoid", "tanh", "hardswish", "hardsigmoid", "add", "sub", "mul", "div", "add_scalar",
    "sub_scalar", "mul_scalar", "div_scalar", "neg", "abs", "square", "exp", "log", "sqrt",
    "rsqrt", "pow", "reciprocal", "erf", "clamp", "sum", "mean", "max", "softmax",
    "log_softmax", "cross_entropy", "mse_loss", "embedding", "dropout", "max_pool2d",
    "avg_pool2d", "adaptive_avg_pool2d", "reshape", "permute", "concat", "slice", "where",
    "masked_fill", "cast",
)

# aten overload packet name -> ampcheck op type, where one exists. add/sub/mul/div and
# pow are resolved by their arguments in op_type() (a scalar operand, pow(x, 2)).
_BY_PACKET = {
    "mm": "matmul",
    "addmm": "linear",  # F.linear on CPU and CUDA: bias + x @ W^T as one addmm
    "linear": "linear",
    "bmm": "bmm",
    "native_batch_norm": "batch_norm",
    "_native_batch_norm_legit": "batch_norm",
    "_native_batch_norm_legit_no_training": "batch_norm",
    "batch_norm": "batch_norm",
    "native_layer_norm": "layer_norm",
    "layer_norm": "layer_norm",
    "relu": "relu",
    "gelu": "gelu",
    "silu": "silu",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
    "hardswish": "hardswish",
    "hardsigmoid": "hardsigmoid",
    "neg": "neg",
    "abs": "abs",
    "square": "square",
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "reciprocal": "reciprocal",
    "erf": "erf",
    "clamp": "clamp",
    "clamp_min": "clamp",
    "clamp_max": "clamp",
    "sum": "sum",
    "mean": "mean",
    "amax": "max",
    "max": "max",
    "_softmax": "softmax",
    "softmax": "softmax",
    # scaled_dot_product_attention's math path (CPU, and CUDA without a fused kernel):
    # a softmax that gives 0 for rows every value of which is -Inf (a padded query).
    "_safe_softmax": "softmax",
    "_log_softmax": "log_softmax",
    "log_softmax": "log_softmax",
    "cross_entropy_loss": "cross_entropy",
    "mse_loss": "mse_loss",
    "embedding": "embedding",
    "native_dropout": "dropout",
    "dropout": "dropout",
    "max_pool2d_with_indices": "max_pool2d",
    "max_pool2d": "max_pool2d",
    "avg_pool2d": "avg_pool2d",
    "_adaptive_avg_pool2d": "adaptive_avg_pool2d",
    "adaptive_avg_pool2d": "adaptive_avg_pool2d",
    "view": "reshape",
    "_unsafe_view": "reshape",
    "reshape": "reshape",
    "squeeze": "reshape",
    "unsqueeze": "reshape",
    "flatten": "reshape",
    "permute": "permute",
    "transpose": "permute",
    "t": "permute",
    "cat": "concat",
    "slice": "slice",
    "select": "slice",
    "narrow": "slice",
    "where": "where",
    "masked_fill": "masked_fill",
    "_to_copy": "cast",
}

# The binary arithmetic ops: with a tensor operand the op, with a Python number the
# scalar form, as ampcheck's engine has both.
_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div"}
# The packets whose op type depends on the call's arguments (op_type() reads them).
ARG_DEPENDENT = frozenset({"add", "sub", "mul", "div", "add_", "sub_", "mul_", "div_", "rsub", "pow",
                           "convolution", "_convolution"})

# Bookkeeping below autograd that is no computation: detaching, aliasing, reading a
# scalar out, allocating. Passed through without a record; they would crowd the op
# table with rows no AMP policy has.
IGNORED = frozenset({
    "detach", "alias", "lift_fresh", "lift_fresh_copy", "_local_scalar_dense", "empty",
    "empty_like", "empty_strided", "new_empty", "new_empty_strided", "is_same_size",
    "_has_compatible_shallow_copy_type", "set_", "_version", "record_stream",
    "_to_dense", "resize_", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "is_nonzero", "_assert_async", "_assert_tensor_metadata", "_functional_assert_async",
    # the profiler's markers (optimizer.step opens one)
    "_record_function_enter", "_record_function_enter_new", "_record_function_exit",
    # values made from a shape alone (backward()'s seed gradient is ones_like(loss))
    "ones_like", "zeros_like", "full_like", "rand_like", "randn_like", "randint_like",
})

# nan_source.cpp's families, by ampcheck op type.
# Move values without changing them: a producer's input 0 is followed back through them.
WALKABLE = frozenset({"cast", "reshape", "permute", "slice", "clone", "expand"})
# Keep element i at index i, so a producer's element can be matched to the lost one.
KEEPS_ORDER = frozenset({"cast", "reshape", "clone"})
# Write a -Inf mask: masked_fill from its fill value, add and where from a constant.
MASK_WRITERS = frozenset({"masked_fill", "add", "where", "cast"})
# Attention that reads an additive mask as its argument 3 and softmaxes it inside: ampcheck's
# op, and PyTorch's fused kernels that take one (flash attention takes none).
ATTENTION_OPS = frozenset({
    "scaled_dot_product_attention", "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
})
# Pass a mask's -Inf on as -Inf (moved, shifted, scaled, or log-probabilities).
MASK_CARRIERS = frozenset({
    "cast", "reshape", "permute", "slice", "concat", "where", "masked_fill", "add", "sub",
    "add_scalar", "sub_scalar", "mul_scalar", "div_scalar", "dropout", "log_softmax",
    "clone", "expand", "contiguous",
})


def packet_name(func) -> str:
    """The aten op's name without namespace and overload: ``addmm``, ``_softmax``."""
    packet = getattr(func, "_overloadpacket", None)
    return packet.__name__ if packet is not None else getattr(func, "__name__", str(func))


def aten_name(func) -> str:
    """The overload's full name: ``aten.mul.Tensor``."""
    return str(func)


def _is_number(x) -> bool:
    return isinstance(x, numbers.Number) and not isinstance(x, bool)


def op_type(func, args) -> str:
    """ampcheck's name of a forward aten call, else its aten packet name."""
    name = packet_name(func)
    if name.endswith("_") and not name.startswith("_") and name[:-1] in _BINARY:
        name = name[:-1]  # add_ is add, computed in place
    if name in _BINARY:
        other = args[1] if len(args) > 1 else None
        scalar = _is_number(other) or (isinstance(other, torch.Tensor) and other.dim() == 0
                                       and not other.is_floating_point())
        return _BINARY[name] + ("_scalar" if scalar else "")
    if name == "rsub":  # 1 - x
        return "sub_scalar" if len(args) > 1 and _is_number(args[1]) else "sub"
    if name == "pow":
        exponent = args[1] if len(args) > 1 else None
        if _is_number(exponent):
            return "square" if exponent == 2 else "pow"
        return "pow"
    if name in ("convolution", "_convolution"):
        weight = args[1] if len(args) > 1 else None
        if isinstance(weight, torch.Tensor) and weight.dim() == 4:
            return "conv2d"
        return name
    if name in ("clone", "contiguous", "expand"):
        return name
    return _BY_PACKET.get(name, name)


# Torch function names that are not their aten packet's name.
_FUNCTION_NAMES = {"truediv": "div", "true_divide": "div", "multiply": "mul", "subtract": "sub",
                   "divide": "div", "concat": "cat", "concatenate": "cat", "sym_matmul": "matmul"}
# Torch functions that run several aten ops: forced when any of these types is listed.
_COMPOSITES = {
    "cross_entropy": ("cross_entropy", "log_softmax", "nll_loss"),
    "scaled_dot_product_attention": ("scaled_dot_product_attention", "bmm", "softmax"),
}


def function_types(func, args) -> tuple[str, ...]:
    """The ampcheck op types a torch function the script calls (``torch.bmm``, ``x * 3``,
    ``F.linear``, ``x @ w``) runs as, decided before it runs: the names the fp32 lists use."""
    name = getattr(func, "__name__", "")
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        if name.startswith("r") and name[1:] in ("add", "sub", "mul", "truediv", "matmul", "pow"):
            name = "rsub" if name == "rsub" else name[1:]
    name = _FUNCTION_NAMES.get(name, name)
    if name in _COMPOSITES:
        return _COMPOSITES[name]
    if name == "matmul":
        a, b = (args + (None, None))[:2] if isinstance(args, tuple) else (None, None)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.dim() >= 3 and b.dim() >= 3 or (a.dim() <= 2 and b.dim() >= 3):
                return ("bmm",)
        return ("matmul",)
    if name in ("softmax", "log_softmax", "linear", "layer_norm", "embedding", "dropout", "conv2d",
                "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "nll_loss"):
        return (_BY_PACKET.get(name, name),)
    return (op_type(_Named(name), tuple(args) if isinstance(args, (list, tuple)) else ()),)


class _Named:
    """A stand-in with an aten packet's name, for op_type()."""

    def __init__(self, name):
        self.__name__ = name


def known_op_names() -> set[str]:
    """Every name an fp32 or allow list may use: ampcheck's op types and aten ops."""
    return set(AMPCHECK_OPS) | set(_BY_PACKET) | {"clone", "contiguous", "expand", "nll_loss"}


def _aten_exists(name: str) -> bool:
    base = name[len("aten."):] if name.startswith("aten.") else name
    packet = base.split(".")[0]
    return bool(packet) and hasattr(torch.ops.aten, packet)


def check_op_names(names, flag: str) -> list[str]:
    """The names of an fp32 op list, checked: ampcheck op types or aten op names.

    Raises ValueError naming the unknown name, the flag it came from and the closest
    known name, so a typo cannot make a bisect trial silently run the unchanged script.
    """
    checked = []
    known = known_op_names()
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name in known or _aten_exists(name):
            checked.append(name)
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f' (did you mean "{close[0]}"?)' if close else ""
        raise ValueError(f'unknown op "{name}" in {flag}{hint}; use an ampcheck op type '
                         f'(ampcheck ops lists them) or an aten op name such as "addmm"')
    return sorted(set(checked))


def matches(names, op: str, func) -> bool:
    """Whether a forward call of `func` (ampcheck type `op`) is named by `names`: by its
    ampcheck type, its aten packet (``addmm``) or its full overload (``aten.mul.Tensor``)."""
    if not names:
        return False
    if op in names:
        return True
    packet = packet_name(func)
    full = aten_name(func)
    return packet in names or full in names or ("aten." + packet) in names
