"""``jnp.compress`` and ``jnp.unique`` of complex values (``values="complex"``): sizes from data.

A complex array is stored as float ``[..., 2]`` (real, imaginary parts on a
trailing axis), so ``Compress`` along a logical axis is the same ``Compress``
on the stored array. ``unique`` keys each element as JAX orders complex
numbers: ``(isnan, real, imaginary)``, where an element is NaN when either part
is (those sort last and, with ``equal_nan=True``, are one value), ``-0.0``
counts as ``0.0`` in each part, and a NaN's parts are ``0`` (or its position
when ``equal_nan=False``). JAX returns every NaN it keeps as ``nan+0j``; so
does the export.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, case
from jax2onnx_lax.dynamic import _int64, compress_p, unique_p

family = Family("lax")

_C = np.complex64
_EDGES = np.array(
    [np.nan + 1j, 1 + np.nan * 1j, 1 + 1j, 1 - 1j, 0j, -0.0 + 0j, 1 + 1j, 2 + 0.5j, np.nan],
    _C,
)


@family.lowering(
    compress_p,
    values="complex",
    cases=lambda: [
        case(
            "complex_compress",
            lambda c, z: jnp.compress(c, z, axis=1),
            [(4,), ("B", 4)],
            dtypes=[np.bool_, _C],
        ),
        case("complex_extract", lambda z: jnp.extract(jnp.real(z) > 0, z), [(3, 4)], dtypes=[_C]),
    ],
)
def compress(ctx, condition, arr, *, axis, size):
    """One Compress of the stored array along the same axis."""
    return ctx.op.Compress(arr, condition, axis=axis)


def _unique_cases():
    fn = lambda z: jnp.unique(z, return_index=True, return_inverse=True, return_counts=True)  # noqa: E731
    return [
        case("complex_unique", fn, [np.round(_EDGES * 2) / 2]),
        case("complex_unique_nan", fn, [_EDGES]),
        case("complex_unique_nan_apart", lambda z: jnp.unique(z, equal_nan=False), [_EDGES]),
        case("complex_unique_values", jnp.unique_values, [(3, 4)], dtypes=[_C]),
        case(
            "complex_unique_rows",
            lambda z: jnp.unique(z, axis=0, return_counts=True),
            [np.array([[1 + 1j, 2], [1 + 1j, 2], [0, 1j]], _C)],
        ),
    ]


def _either_nan(ctx, stored):
    """Per element of a stored complex array: is either part NaN (``[..., 1]`` bools)."""
    count = ctx.op.ReduceSum(ctx.cast(ctx.op.IsNaN(stored), np.float32), ctx.i64([-1]), keepdims=1)
    return ctx.op.Greater(count, np.zeros((), np.float32))


@family.lowering(unique_p, values="complex", cases=_unique_cases)
def unique(ctx, x, *, axis, equal_nan, return_inverse, return_counts, size, dtype):
    """One sorted Unique over rows of ``(isnan, real, imaginary)`` keys (module docstring)."""
    aval = ctx.avals_in[0]
    rank, n = len(aval.shape), aval.shape[axis]
    rest = [aval.shape[i] for i in range(rank) if i != axis]
    wide = np.dtype(np.float64 if aval.dtype == np.complex128 or not equal_nan else np.float32)
    stored = ctx.transpose(x, [axis, *(i for i in range(rank) if i != axis), rank])
    stored = ctx.cast(stored, wide)
    nan = _either_nan(ctx, stored)
    zero = ctx.const(np.zeros((), wide), wide)
    stored = ctx.where(ctx.op.Equal(stored, zero), zero, stored)  # -0.0 as 0.0
    fill = zero
    if not equal_nan:  # every NaN its own key, in the order of appearance
        limit = ctx.op.Squeeze(ctx.dim(n), ctx.i64([0]))
        positions = _int64(ctx.op.Range(np.int64(0), limit, np.int64(1)))
        fill = ctx.op.Reshape(ctx.cast(positions, wide), ctx.i64([-1] + [1] * (len(rest) + 1)))
    stored = ctx.where(nan, fill, stored)
    keys = ctx.op.Concat(ctx.cast(nan, wide), stored, axis=-1)
    keys = ctx.reshape(keys, (n, 3 * math.prod(rest)))
    outs = ctx.op.Unique(keys, axis=0, sorted=1, _outputs=4)
    values = ctx.op.Gather(x, _int64(outs[1]), axis=axis)
    part = np.finfo(aval.dtype).dtype
    values = ctx.where(_either_nan(ctx, values), np.array([np.nan, 0], part), values)
    wanted = [outs[1]]
    wanted += [outs[2]] if return_inverse else []
    wanted += [outs[3]] if return_counts else []
    return [values, *(ctx.cast(_int64(v), dtype) for v in wanted)]


register = family.register
