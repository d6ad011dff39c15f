"""Shape primitives: broadcast, reshape, transpose, squeeze, concatenate, slice, iota."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.dims import is_symbolic
from jax2onnx.dtypes import onnx_dtype
from jax2onnx.plugin import case
from jax2onnx_lax._rules import rules

_I64 = np.int64


def _axes(ctx, axes):
    return ctx.const(np.asarray(list(axes), dtype=_I64))


@rules.lowering(
    lax.broadcast_in_dim_p,
    cases=[
        case(
            "row_to_matrix",
            lambda x: lax.broadcast_in_dim(x, (2, 3), (1,)),
            [(3,)],
            expect=["Unsqueeze -> Expand:2x3"],
        ),
        case("scalar", lambda x: lax.broadcast_in_dim(x, (2, 2), ()), [()]),
        case("symbolic_batch", lambda x: jnp.broadcast_to(x, (x.shape[0], 4, 3)), [("B", 1, 3)]),
        case("expand_dims", lambda x: lax.expand_dims(x, (0, 2)), [("B", 3)], counts={"Expand": 0}),
    ],
)
def broadcast_in_dim(ctx, x, *dyn_shape, shape, broadcast_dimensions, **_):
    """Unsqueeze the new axes, then Expand where a size grows.

    A constant operand with a static result becomes a constant (a reshaped
    view, or a small broadcast copy), so biases need no runtime Unsqueeze.
    """
    in_shape = ctx.avals_in[0].shape
    folded = _fold_constant(ctx, x, in_shape, shape, broadcast_dimensions)
    if folded is not None:
        return folded
    missing = [i for i in range(len(shape)) if i not in broadcast_dimensions]
    y = ctx.op.Unsqueeze(x, _axes(ctx, missing)) if missing else x
    expanded = list(shape)
    unsqueezed = [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        unsqueezed[dst] = in_shape[src]
    if all(_same(a, b) for a, b in zip(unsqueezed, expanded)):
        return y if y is not x else ctx.op.Identity(x)
    return ctx.op.Expand(y, ctx.shape(expanded))


def _fold_constant(ctx, x, in_shape, shape, broadcast_dimensions):
    if x.const_value is None or any(is_symbolic(d) for d in shape):
        return None
    view = [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        view[dst] = int(in_shape[src])
    array = x.const_value.numpy().reshape(view)
    if tuple(view) == tuple(shape):
        return ctx.const(array)
    if int(np.prod(shape)) <= 1024:
        return ctx.const(np.broadcast_to(array, tuple(shape)).copy())
    return None


def _same(a, b) -> bool:
    if is_symbolic(a) or is_symbolic(b):
        return str(a) == str(b)
    return int(a) == int(b)


@rules.lowering(
    lax.reshape_p,
    cases=[
        case(
            "flatten",
            lambda x: x.reshape(x.shape[0], -1),
            [("B", 3, 4)],
            expect=["Reshape:Bx12"],
            counts={"Shape": 0},
        ),
        case("static", lambda x: lax.reshape(x, (6, 2)), [(3, 4)], counts={"Shape": 0}),
        case("merge_symbolic", lambda x: x.reshape(-1, 4), [("B", "T", 4)]),
    ],
)
def reshape(ctx, x, *dyn_shape, new_sizes, dimensions, **_):
    """One Reshape; a single symbolic size becomes -1, so no shape arithmetic is emitted."""
    if dimensions is not None:
        x = ctx.op.Transpose(x, perm=list(dimensions))
    symbolic = [i for i, d in enumerate(new_sizes) if is_symbolic(d)]
    if len(symbolic) == 1 and all(int(d) > 0 for d in new_sizes if not is_symbolic(d)):
        target = [-1 if is_symbolic(d) else int(d) for d in new_sizes]
        return ctx.op.Reshape(x, ctx.const(np.asarray(target, _I64)))
    allowzero = 1 if any(not is_symbolic(d) and int(d) == 0 for d in new_sizes) else None
    return ctx.op.Reshape(x, ctx.shape(new_sizes), allowzero=allowzero)


@rules.lowering(
    lax.transpose_p,
    cases=[
        case(
            "transpose",
            lambda x: lax.transpose(x, (2, 0, 1)),
            [("B", 3, 4)],
            expect=["Transpose:4xBx3"],
        )
    ],
)
def transpose(ctx, x, *, permutation):
    return ctx.op.Transpose(x, perm=list(permutation))


@rules.lowering(
    lax.squeeze_p,
    cases=[case("squeeze", lambda x: lax.squeeze(x, (1,)), [("B", 1, 3)], expect=["Squeeze:Bx3"])],
)
def squeeze(ctx, x, *, dimensions):
    return ctx.op.Squeeze(x, _axes(ctx, dimensions))


@rules.lowering(
    lax.concatenate_p,
    cases=[
        case(
            "concat",
            lambda a, b: lax.concatenate([a, b], 1),
            [("B", 2), ("B", 3)],
            expect=["Concat:Bx5"],
        ),
        case(
            "concat3_int",
            lambda a, b, c: jnp.concatenate([a, b, c]),
            [np.array([1], np.int32), np.array([2, 3], np.int32), np.array([4], np.int32)],
        ),
    ],
)
def concatenate(ctx, *xs, dimension):
    return ctx.op.Concat(*xs, axis=dimension)


@rules.lowering(
    lax.slice_p,
    cases=[
        case("slice", lambda x: lax.slice(x, (0, 1), (2, 4)), [(3, 5)], expect=["Slice:2x3"]),
        case("strided", lambda x: lax.slice(x, (1,), (8,), (3,)), [(9,)]),
        case("symbolic_batch", lambda x: lax.slice_in_dim(x, 1, 3, axis=1), [("B", 4)]),
    ],
)
def slice_(ctx, x, *, start_indices, limit_indices, strides):
    """One Slice over every axis the slice touches."""
    shape = ctx.avals_in[0].shape
    axes, starts, ends, steps = [], [], [], []
    for axis, (lo, hi) in enumerate(zip(start_indices, limit_indices)):
        step = 1 if strides is None else int(strides[axis])
        if _same(lo, 0) and _same(hi, shape[axis]) and step == 1:
            continue
        axes.append(axis)
        starts.append(lo)
        ends.append(hi)
        steps.append(step)
    if not axes:
        return ctx.op.Identity(x)
    return ctx.op.Slice(
        x, ctx.shape(starts), ctx.shape(ends), _axes(ctx, axes), ctx.const(np.asarray(steps, _I64))
    )


@rules.lowering(
    lax.iota_p,
    cases=[
        case("arange", lambda x: x + jnp.arange(5, dtype=jnp.float32), [(5,)]),
        case(
            "iota_2d",
            lambda x: x + lax.broadcasted_iota(np.int32, (3, 4), 1),
            [np.zeros((3, 4), np.int32)],
        ),
        case("symbolic", lambda x: x * jnp.arange(x.shape[0], dtype=x.dtype)[:, None], [("B", 3)]),
    ],
)
def iota(ctx, *dyn, dtype, shape, dimension, **_):
    """A constant when the shape is static; otherwise Range, Unsqueeze and Expand."""
    if not any(is_symbolic(d) for d in shape):
        ramp = np.arange(int(shape[dimension]), dtype=dtype)
        view = [1] * len(shape)
        view[dimension] = int(shape[dimension])
        return ctx.const(np.broadcast_to(ramp.reshape(view), tuple(int(d) for d in shape)).copy())
    compute = np.int64 if np.issubdtype(np.dtype(dtype), np.integer) else np.float32
    limit = ctx.op.Cast(ctx.op.Squeeze(ctx.dim(shape[dimension])), to=onnx_dtype(compute))
    ramp = ctx.op.Range(np.asarray(0, compute), limit, np.asarray(1, compute))
    if np.dtype(compute) != np.dtype(dtype):
        ramp = ctx.op.Cast(ramp, to=onnx_dtype(dtype))
    others = [i for i in range(len(shape)) if i != dimension]
    if others:
        ramp = ctx.op.Unsqueeze(ramp, _axes(ctx, others))
        ramp = ctx.op.Expand(ramp, ctx.shape(shape))
    return ramp
