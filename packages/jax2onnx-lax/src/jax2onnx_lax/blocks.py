"""Lowering building blocks other plugins use: public, documented, stable.

A plugin that lowers a module into the same ONNX form as a lax primitive
(Flax's pooling and transposed convolutions) calls these instead of copying
them. They take the lowering context like a rule does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_INT64_MIN = np.iinfo(np.int64).min

__all__ = ["conv_transpose_kernel", "nan_exact_max_pool"]


def nan_exact_max_pool(ctx: Any, x: Any, dtype: Any, **attrs: Any) -> Any:
    """``MaxPool(x, **attrs)`` with JAX's results for NaN and -inf (float32/float64, NCHW).

    ONNX Runtime's MaxPool skips NaNs and starts each window from the lowest
    finite float; JAX's max propagates NaN and gives -inf for a window of
    -infs. A second MaxPool over a flag (2: NaN, 1: other, 0: -inf) tells
    which windows to patch. ``attrs`` are MaxPool's attributes
    (``kernel_shape``, ``strides``, ``pads``, ``dilations``); ``dtype`` is
    ``x``'s dtype.
    """
    y = ctx.op.MaxPool(x, **attrs)
    neg_inf = ctx.op.IsInf(x, detect_positive=0)
    flag = ctx.op.Where(ctx.op.IsNaN(x), np.asarray(2, dtype), np.asarray(1, dtype))
    flag = ctx.op.MaxPool(ctx.op.Where(neg_inf, np.asarray(0, dtype), flag), **attrs)
    y = ctx.op.Where(ctx.op.Less(flag, np.asarray(0.5, dtype)), np.asarray(-np.inf, dtype), y)
    return ctx.op.Where(ctx.op.Greater(flag, np.asarray(1.5, dtype)), np.asarray(np.nan, dtype), y)


def conv_transpose_kernel(ctx: Any, w: Any, kernel_shape: Sequence[int], groups: int) -> Any:
    """A ``Conv`` weight (O, I/G, K...) as the ``ConvTranspose`` weight (I, O/G, K...).

    The spatial axes are flipped too: a transposed convolution is the
    gradient of a convolution, which correlates with the flipped kernel. A
    constant kernel is rearranged at conversion time (no node).
    """
    o, i_g, spatial = kernel_shape[0], kernel_shape[1], list(kernel_shape[2:])
    n_sp = len(spatial)
    if w.const_value is not None:
        arr = w.const_value.numpy().reshape(groups, o // groups, i_g, *spatial)
        arr = arr.transpose(0, 2, 1, *range(3, 3 + n_sp)).reshape(
            groups * i_g, o // groups, *spatial
        )
        return ctx.const(np.flip(arr, axis=tuple(range(2, 2 + n_sp))).copy())
    if groups == 1:
        w = ctx.op.Transpose(w, perm=[1, 0, *range(2, 2 + n_sp)])
    else:
        w = ctx.op.Reshape(w, ctx.i64([groups, o // groups, i_g, *spatial]))
        w = ctx.op.Transpose(w, perm=[0, 2, 1, *range(3, 3 + n_sp)])
        w = ctx.op.Reshape(w, ctx.i64([groups * i_g, o // groups, *spatial]))
    axes = list(range(2, 2 + n_sp))
    n = len(axes)
    return ctx.op.Slice(
        w, ctx.i64([-1] * n), ctx.i64([_INT64_MIN] * n), ctx.i64(axes), ctx.i64([-1] * n)
    )
