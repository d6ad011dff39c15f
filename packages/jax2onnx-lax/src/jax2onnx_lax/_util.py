"""Small helpers shared by the lax family modules."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from jax2onnx.dims import is_symbolic
from jax2onnx.dtypes import onnx_dtype


def i64(ctx, values: Sequence[int] | int) -> Any:
    """An int64 constant (axes, starts, pads ...)."""
    return ctx.const(np.asarray(values, dtype=np.int64))


def cast(ctx, x: Any, dtype: Any) -> Any:
    """Cast ``x`` to a NumPy/JAX dtype."""
    return ctx.op.Cast(x, to=onnx_dtype(dtype))


def computed_in(ctx, compute_dtype: Any, fn: Callable[..., Any], *xs: Any) -> Any:
    """``fn(*xs)`` evaluated in ``compute_dtype`` and cast back to the output dtype.

    For ops ONNX Runtime has no kernel for in the output dtype. Use it only
    where the round trip is exact (e.g. int8 -> int32 arithmetic that cannot
    overflow, bool -> int32 -> bool); never narrow float64 to float32.
    """
    out_dtype = ctx.avals_out[0].dtype
    return cast(ctx, fn(*(cast(ctx, x, compute_dtype) for x in xs)), out_dtype)


# -- ONNX Runtime kernel gaps --------------------------------------------------

BF16 = np.dtype(jnp.bfloat16)
# Exact stand-ins: ints widen by value (uint64 -> int64 keeps the bits, which is
# all Where needs), bool -> uint8, bfloat16 -> float32 (one rounding back, like XLA).
_WIDER = {
    np.dtype(np.bool_): np.dtype(np.uint8),
    np.dtype(np.int16): np.dtype(np.int32),
    np.dtype(np.uint16): np.dtype(np.int32),
    np.dtype(np.uint64): np.dtype(np.int64),
    BF16: np.dtype(np.float32),
}
_GAPS = {
    "Where": {np.bool_, np.int16, np.uint16, np.uint64},
    "Max": {np.bool_, np.int16, np.uint16},
    "Less": {np.bool_},
    "Clip": {np.int16, np.uint16},
}
_GAPS["Min"] = _GAPS["Max"]
_GAPS.update(dict.fromkeys(("LessOrEqual", "Greater", "GreaterOrEqual"), _GAPS["Less"]))


def kernel_dtype(op_type: str, dtype) -> np.dtype:
    """The dtype ONNX Runtime computes ``op_type`` in for operands of ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype == BF16 or dtype.type in _GAPS.get(op_type, ()):
        return _WIDER[dtype]
    return dtype


def where(ctx, cond, a, b, dtype):
    """``Where(cond, a, b)`` for operands of ``dtype``, widened where ORT has no kernel."""
    wide = kernel_dtype("Where", dtype)
    if wide == np.dtype(dtype):
        return ctx.op.Where(cond, a, b)
    a, b = (
        np.asarray(v, dtype).astype(wide) if _is_number(v) else cast(ctx, v, wide) for v in (a, b)
    )
    return cast(ctx, ctx.op.Where(cond, a, b), dtype)


def _is_number(v) -> bool:
    return isinstance(v, (int, float, bool, np.generic, np.ndarray))


# -- layout helpers that fold constants -----------------------------------------


def to_dtype(ctx, x, src, dst):
    """``x`` cast from ``src`` to ``dst``; constants are converted at conversion time."""
    if np.dtype(src) == np.dtype(dst):
        return x
    if x.const_value is not None:
        return ctx.const(x.const_value.numpy().astype(dst))
    return cast(ctx, x, dst)


def permute(ctx, x, perm):
    """Transpose ``x``; constants are permuted at conversion time (no Transpose node)."""
    perm = [int(p) for p in perm]
    if perm == list(range(len(perm))):
        return x
    if x.const_value is not None:
        return ctx.const(np.transpose(x.const_value.numpy(), perm))
    return ctx.op.Transpose(x, perm=perm)


def reshape(ctx, x, dims, keep=0):
    """Reshape to ``dims``; the first ``keep`` axes are unchanged (copied with 0 when symbolic)."""
    dims = list(dims)
    if not any(is_symbolic(d) for d in dims):
        return ctx.op.Reshape(x, i64(ctx, dims), allowzero=1 if 0 in dims else None)
    tail = dims[keep:]
    if not any(is_symbolic(d) for d in tail) and 0 not in tail:
        return ctx.op.Reshape(x, i64(ctx, [0] * keep + [int(d) for d in tail]))
    if sum(is_symbolic(d) for d in tail) == 1 and 0 not in tail:
        spec = [0] * keep + [-1 if is_symbolic(d) else int(d) for d in tail]
        return ctx.op.Reshape(x, i64(ctx, spec))
    return ctx.op.Reshape(x, ctx.shape(dims))
