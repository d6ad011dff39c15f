"""Small helpers shared by the lax family modules."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

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
