"""Folding small constant equations while lowering, with NumPy, exactly as XLA computes them.

Solvers and schedules compute step sizes, tolerances and time grids from
constants (diffrax's ``t0``, ``t1`` and ``dt0`` go through hundreds of scalar
``nextafter``, ``select_n`` and comparisons before the first step). Lowered as
they are, they become a long chain of scalar nodes that ONNX Runtime would
recompute on every run. An equation whose inputs are all constants, small
(at most :data:`LIMIT` elements per value) and first-order is computed here and
becomes an initializer.

Only operations whose NumPy result is bit-identical to XLA's on the CPU are
folded: data movement, selects, comparisons, logic, ``nextafter``, and the
correctly rounded float arithmetic (``+ - * /``, ``sqrt``) on float32/float64
and integers. XLA's CPU flushes subnormal floats to zero in arithmetic and
comparisons, NumPy does not: an equation that sees or makes a subnormal
is lowered instead. Everything else is lowered as usual (evaluating it with
JAX would compile one XLA program per equation, which costs more conversion
time than the nodes it saves).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

LIMIT = 256  # elements: constant bookkeeping, never weights or tables


def _broadcast_in_dim(x, *, shape, broadcast_dimensions, **_):
    expanded = (
        np.reshape(
            x,
            [
                x.shape[broadcast_dimensions.index(i)] if i in broadcast_dimensions else 1
                for i in range(len(shape))
            ],
        )
        if x.ndim
        else x
    )
    return np.broadcast_to(expanded, shape)


def _slice(x, *, start_indices, limit_indices, strides=None):
    steps = strides or (1,) * x.ndim
    return x[tuple(slice(a, b, s) for a, b, s in zip(start_indices, limit_indices, steps))]


def _select_n(which, *cases):
    return np.choose(which.astype(np.intp), cases)


def _convert(x, *, new_dtype, **_):
    target = np.dtype(new_dtype)
    if x.dtype.kind == "f" and target.kind in "iub":
        if target.kind != "b":
            return None  # float -> int: XLA saturates, NumPy does not
        return x != 0
    return x.astype(target)


def _logical(bool_fn: Callable[..., Any], int_fn: Callable[..., Any]) -> Callable[..., Any]:
    def fold(*xs, **_):
        return bool_fn(*xs) if xs[0].dtype == np.bool_ else int_fn(*xs)

    return fold


def _float_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    def fold(*xs, **_):
        return fn(*xs) if xs[0].dtype.kind == "f" else None  # integer division truncates

    return fold


def _plain(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *xs, **_: fn(*xs)


# data movement and selects: bits are copied, subnormals included
_MOVES: dict[str, Callable[..., Any]] = {
    "copy": _plain(np.copy),
    "copy_p": _plain(np.copy),
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": lambda x, *, new_sizes, **_: np.reshape(x, new_sizes),
    "squeeze": lambda x, *, dimensions: np.squeeze(x, tuple(dimensions)),
    "transpose": lambda x, *, permutation: np.transpose(x, permutation),
    "slice": _slice,
    "concatenate": lambda *xs, dimension: np.concatenate(xs, axis=dimension),
    "select_n": _plain(_select_n),
    "nextafter": _plain(np.nextafter),
}

# arithmetic and comparisons: exact unless a subnormal is involved
_ARITHMETIC: dict[str, Callable[..., Any]] = {
    "add": _plain(np.add),
    "sub": _plain(np.subtract),
    "mul": _plain(np.multiply),
    "div": _float_only(np.divide),
    "neg": _plain(np.negative),
    "sqrt": _float_only(np.sqrt),
    "ceil": _plain(np.ceil),
    "floor": _plain(np.floor),
    "is_finite": _plain(np.isfinite),
    "eq": _plain(np.equal),
    "ne": _plain(np.not_equal),
    "lt": _plain(np.less),
    "le": _plain(np.less_equal),
    "gt": _plain(np.greater),
    "ge": _plain(np.greater_equal),
    "and": _logical(np.logical_and, np.bitwise_and),
    "or": _logical(np.logical_or, np.bitwise_or),
    "xor": _logical(np.logical_xor, np.bitwise_xor),
    "not": _logical(np.logical_not, np.invert),
    "convert_element_type": _convert,
}

_KINDS = "biuf"  # bool, integers, float32/float64 (half floats and complex are lowered)


def candidate(eqn: Any) -> bool:
    """Whether ``eqn`` is one of the folded operations on small static values."""
    name = eqn.primitive.name
    if name not in _MOVES and name not in _ARITHMETIC or not eqn.invars:
        return False
    for var in (*eqn.invars, *eqn.outvars):
        aval = var.aval
        shape = getattr(aval, "shape", None)
        if shape is None or not all(isinstance(d, int) for d in shape):
            return False
        dtype = np.dtype(aval.dtype) if _plain_dtype(aval.dtype) else None
        if dtype is None or dtype.kind not in _KINDS or dtype.itemsize < 4 and dtype.kind == "f":
            return False
        if math.prod(shape) > LIMIT:
            return False
    return True


def _plain_dtype(dtype: Any) -> bool:
    try:
        np.dtype(dtype)
    except TypeError:
        return False
    return True


def fold(eqn: Any, arrays: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """The outputs of ``eqn`` on ``arrays``, or ``None`` when it must be lowered."""
    name = eqn.primitive.name
    moves = name in _MOVES
    fn = _MOVES[name] if moves else _ARITHMETIC[name]
    if not moves and any(_subnormal(a) for a in arrays):
        return None
    with np.errstate(all="ignore"):
        out = fn(*arrays, **eqn.params)
    if out is None:
        return None
    aval = eqn.outvars[0].aval
    result = np.asarray(out).astype(np.dtype(aval.dtype), copy=False)
    if result.shape != tuple(aval.shape) or not moves and _subnormal(result):
        return None
    return [np.array(result, order="C")]  # (ascontiguousarray would make a scalar 1-D)


def _subnormal(a: np.ndarray) -> bool:
    if a.dtype.kind != "f":
        return False
    tiny = np.finfo(a.dtype).tiny
    magnitude = np.abs(a)
    return bool(np.any((magnitude > 0) & (magnitude < tiny)))
