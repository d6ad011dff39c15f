"""Shape primitives: broadcast, reshape, transpose, squeeze, concatenate, stack, unstack,
split, slice, pad, rev, iota."""

from __future__ import annotations

import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case, is_symbolic, onnx_dtype

family = Family("lax")
_BF16 = ["f32", "f64", "bf16"]  # the float cases given half-precision variants
_HALF = ["f32", "f64", "bf16", "f16"]


_I64 = np.int64


def _axes(ctx, axes):
    return ctx.const(np.asarray(list(axes), dtype=_I64))


@family.lowering(
    lax.broadcast_in_dim_p,
    cases=lambda: [
        case(
            "row_to_matrix",
            lambda x: lax.broadcast_in_dim(x, (2, 3), (1,)),
            [(3,)],
            expect=["Unsqueeze -> Expand:2x3"],
        ),
        case("scalar", lambda x: lax.broadcast_in_dim(x, (2, 2), ()), [()]),
        case(
            "symbolic_batch",
            lambda x: jnp.broadcast_to(x, (x.shape[0], 4, 3)),
            [("B", 1, 3)],
            variants=_BF16,
        ),
        case("expand_dims", lambda x: lax.expand_dims(x, (0, 2)), [("B", 3)], counts={"Expand": 0}),
        case("jnp_expand_dims", lambda x: jnp.expand_dims(x, -1), [(2, 3)], expect=["Unsqueeze"]),
        case("int8", lambda x: jnp.broadcast_to(x, (2, 3)), [(3,)], dtypes=[np.int8]),
        case("bool", lambda x: lax.broadcast_in_dim(x, (3, 2), (0,)), [(3,)], dtypes=[np.bool_]),
        case(
            "pad_edge_zero_width",
            lambda x: jnp.pad(x, [(0, 0), (1, 2)], mode="edge"),
            [("B", 5)],
            counts={"Expand": 1},  # the zero-width edge is a constant, the 2-wide one an Expand
        ),
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
    if any(not is_symbolic(d) and int(d) == 0 for d in shape) and not any(map(is_symbolic, shape)):
        # an empty result (jnp.pad's zero-width edge): ONNX Runtime's Expand keeps a 1 where
        # the target says 0, so the empty array is a constant
        return ctx.const(np.zeros(tuple(int(d) for d in shape), ctx.avals_out[0].dtype))
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


@family.lowering(
    lax.reshape_p,
    cases=lambda: [
        case(
            "flatten",
            lambda x: x.reshape(x.shape[0], -1),
            [("B", 3, 4)],
            expect=["Reshape:Bx12"],
            counts={"Shape": 0},
        ),
        case("static", lambda x: lax.reshape(x, (6, 2)), [(3, 4)], counts={"Shape": 0}),
        case("merge_symbolic", lambda x: x.reshape(-1, 4), [("B", "T", 4)]),
        case(
            "keep_symbolic",
            lambda x: x.reshape(x.shape[0], x.shape[1], 2, 2),
            [("B", "T", 4)],
            counts={"Shape": 0},
        ),
        case("dimensions", lambda x: lax.reshape(x, (4, 6), (2, 0, 1)), [(2, 3, 4)]),
        case(
            "dimensions_symbolic", lambda x: lax.reshape(x, (x.shape[0] * 3,), (1, 0)), [("B", 3)]
        ),
        case("int", lambda x: lax.reshape(x, (3, 2)), [(2, 3)], dtypes=[np.int32]),
        case("bool", lambda x: lax.reshape(x, (6,)), [(2, 3)], dtypes=[np.bool_]),
        case("to_scalar", lambda x: lax.reshape(x, ()), [(1, 1)], counts={"Shape": 0}),
    ],
)
def reshape(ctx, x, *dyn_shape, new_sizes, dimensions, **_):
    """One Reshape with a constant target where it can be: a symbolic size equal to the
    input's size at the same axis is copied (0), one other symbolic size becomes -1;
    only more symbolic sizes need shape arithmetic. ``dimensions`` is a Transpose first."""
    in_shape = ctx.avals_in[0].shape
    if dimensions is not None:
        x = ctx.op.Transpose(x, perm=list(dimensions))
        in_shape = [in_shape[d] for d in dimensions]
    if any(not is_symbolic(d) and int(d) == 0 for d in new_sizes):
        return ctx.reshape(x, new_sizes)
    target = [
        0 if is_symbolic(d) and i < len(in_shape) and _same(d, in_shape[i]) else d
        for i, d in enumerate(new_sizes)
    ]
    symbolic = [i for i, d in enumerate(target) if is_symbolic(d)]
    if len(symbolic) > 1:
        return ctx.reshape(x, new_sizes)
    target = [-1 if is_symbolic(d) else int(d) for d in target]
    return ctx.op.Reshape(x, ctx.const(np.asarray(target, _I64)))


@family.lowering(
    lax.transpose_p,
    cases=lambda: [
        case(
            "transpose",
            lambda x: lax.transpose(x, (2, 0, 1)),
            [("B", 3, 4)],
            expect=["Transpose:4xBx3"],
        ),
        case("int8", lambda x: x.T, [(2, 3)], dtypes=[np.int8]),
        case("bool", lambda x: lax.transpose(x, (1, 0, 2)), [(2, 3, 1)], dtypes=[np.bool_]),
    ],
)
def transpose(ctx, x, *, permutation):
    return ctx.op.Transpose(x, perm=list(permutation))


@family.lowering(
    lax.squeeze_p,
    cases=lambda: [
        case("squeeze", lambda x: lax.squeeze(x, (1,)), [("B", 1, 3)], expect=["Squeeze:Bx3"]),
        case("squeeze_all", lambda x: lax.squeeze(x, (0, 1)), [(1, 1)], dtypes=[np.int32]),
        case("squeeze_bool", lambda x: jnp.squeeze(x, -1), [(2, 1)], dtypes=[np.bool_]),
    ],
)
def squeeze(ctx, x, *, dimensions):
    return ctx.op.Squeeze(x, _axes(ctx, dimensions))


@family.lowering(
    lax.concatenate_p,
    cases=lambda: [
        case(
            "concat",
            lambda a, b: lax.concatenate([a, b], 1),
            [("B", 2), ("B", 3)],
            expect=["Concat:Bx5"],
            variants=_BF16,
        ),
        case(
            "concat3_int",
            lambda a, b, c: jnp.concatenate([a, b, c]),
            [np.array([1], np.int32), np.array([2, 3], np.int32), np.array([4], np.int32)],
        ),
        case(
            "concat_bool_symbolic",
            lambda a, b: lax.concatenate([a, b], 0),
            [("B", 2), (1, 2)],
            dtypes=[np.bool_, np.bool_],
        ),
        case("concat_uint8", lambda a: jnp.concatenate([a, a], -1), [(2, 3)], dtypes=[np.uint8]),
    ],
)
def concatenate(ctx, *xs, dimension):
    return ctx.op.Concat(*xs, axis=int(dimension))


@family.lowering(
    lax.stack_p,
    cases=lambda: [
        case(
            "stack_axis1",
            lambda a, b: jnp.stack([a, b], 1),
            [("B", 3), ("B", 3)],
            expect=["Unsqueeze -> Concat:Bx2x3"],
        ),
        case(
            "stack_int",
            lambda a, b, c: jnp.stack([a, b, c]),
            [(2,), (2,), (2,)],
            dtypes=[np.int8, np.int8, np.int8],
        ),
    ],
)
def stack(ctx, *xs, axis):
    """Unsqueeze every operand at ``axis``, then one Concat."""
    axes = ctx.i64([int(axis)])
    return ctx.op.Concat(*(ctx.op.Unsqueeze(x, axes) for x in xs), axis=int(axis))


@family.lowering(
    "unstack",
    cases=lambda: [
        case("unstack", jnp.unstack, [(3, "B")], expect=["Split -> Squeeze:B"]),
        case("unstack_axis1", lambda x: lax.unstack(x, axis=1), [("B", 2, 4)]),
        case("unstack_single", lambda x: jnp.unstack(x, axis=1), [("B", 1)], counts={"Split": 0}),
        case("unstack_bool", jnp.unstack, [(2, 3)], dtypes=[np.bool_]),
    ],
)
def unstack(ctx, x, *, axis):
    """``jnp.unstack``/``lax.unstack``: one Split into pieces of 1, a Squeeze of each."""
    count = ctx.avals_in[0].shape[axis]
    axes = _axes(ctx, [axis])
    if count == 1:
        return [ctx.op.Squeeze(x, axes)]
    pieces = ctx.op.Split(x, ctx.const(np.ones(count, _I64)), axis=int(axis), _outputs=count)
    return [ctx.op.Squeeze(piece, axes) for piece in pieces]


@family.lowering(
    lax.slice_p,
    cases=lambda: [
        case(
            "slice",
            lambda x: lax.slice(x, (0, 1), (2, 4)),
            [(3, 5)],
            expect=["Slice:2x3"],
            variants=_BF16,
        ),
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


@family.lowering(
    lax.split_p,
    min_opset=13,
    cases=lambda: [
        case("split", lambda x: lax.split(x, (1, 2, 1), axis=1), [("B", 4)], expect=["Split"]),
        case("split_first", lambda x: jnp.split(x, 2), [(4, 3)]),
        case("split_empty_piece", lambda x: lax.split(x, (0, 3), axis=0), [(3,)]),
        case("split_int8", lambda x: lax.split(x, (2, 1), axis=1), [(2, 3)], dtypes=[np.int8]),
        case("split_bool", lambda x: lax.split(x, (2, 1), axis=0), [(3, 2)], dtypes=[np.bool_]),
    ],
)
def split(ctx, x, *, sizes, axis):
    """One Split with the sizes as an input (opset 13 and newer)."""
    if len(sizes) == 1:
        return [ctx.op.Identity(x)]
    return list(ctx.op.Split(x, ctx.shape(sizes), axis=axis, _outputs=len(sizes)))


def _pad_case(name, value, config, dtype):
    return case(name, lambda x: lax.pad(x, value, config), [(2,) * len(config)], dtypes=[dtype])


@family.lowering(
    lax.pad_p,
    cases=lambda: [
        case(
            "pad",
            lambda x: jnp.pad(x, ((1, 2), (0, 1))),
            [("B", 3)],
            expect=["Pad"],
            variants=_HALF,
        ),
        case(
            "crop",
            lambda x: lax.pad(x, 0.0, ((-1, 1, 0), (2, -2, 0))),
            [(4, 5)],
            counts={"Reshape": 0},
        ),
        case(
            "interior",
            lambda x: lax.pad(x, np.asarray(-1.0, x.dtype), ((1, 2, 2), (0, 0, 1))),
            [("B", 4)],
            variants=_BF16,
        ),
        case("interior_crop", lambda x: lax.pad(x, 0.0, ((-2, -1, 3), (-1, 0, 1))), [(3, 4)]),
        case(
            "value_operand",
            lambda x, v: lax.pad(x, v, ((0, 1, 1),)),
            [(3,), ()],
            variants=_BF16,
        ),
        _pad_case("int8", np.int8(7), ((1, 0, 1),), np.int8),
        _pad_case("int16", np.int16(7), ((1, -1, 2),), np.int16),
        _pad_case("uint16", np.uint16(7), ((2, 1, 0),), np.uint16),
        _pad_case("bool", True, ((1, 1, 1), (0, 0, 0)), np.bool_),
        case("empty", lambda x: lax.pad(x, 1.0, ((1, 1, 2),)), [(0,)]),
    ],
)
def pad(ctx, x, value, *, padding_config):
    """Interior padding first, then one Pad whose negative pads crop.

    ONNX Pad has no interior padding: each axis with interior ``i`` gets a new axis
    of size 1 after it (Unsqueeze), padded high by ``i`` with the padding value
    (one Pad for all such axes), then merged back (Reshape). That leaves ``i``
    extra values at the end of the axis, which the final Pad removes with its
    negative high pad together with JAX's own low/high padding.
    """
    dtype = np.dtype(ctx.avals_in[0].dtype)
    wide = ctx.kernel_dtype("Pad", dtype) if dtype.kind in "iu" else dtype
    if wide != dtype:  # int16/uint16: padded in int32, exact
        x = ctx.op.Cast(x, to=onnx_dtype(wide))
        value = ctx.op.Cast(value, to=onnx_dtype(wide))
    shape = ctx.avals_in[0].shape
    lows, highs, spread = [], [], []
    for axis, (lo, hi, interior) in enumerate(padding_config):
        grows = interior > 0 and (is_symbolic(shape[axis]) or int(shape[axis]) > 0)
        spread.append(axis if grows else None)
        lows.append(lo)
        highs.append(hi - interior if grows else hi)
    spread = [a for a in spread if a is not None]
    if spread:
        x = _interior(ctx, x, value, shape, spread, padding_config)
    amounts = lows + highs
    if any(is_symbolic(a) for a in amounts):  # jnp.pad(x, (0, x.shape[0])): computed pads
        x = ctx.op.Pad(x, ctx.shape(amounts), value)
    elif any(amounts):
        x = ctx.op.Pad(x, ctx.const(np.asarray(amounts, _I64)), value)
    elif not spread:
        x = ctx.op.Identity(x)
    return x if wide == dtype else ctx.op.Cast(x, to=onnx_dtype(dtype))


def _interior(ctx, x, value, shape, spread, padding_config):
    rank = len(shape)
    positions = [a + 1 + k for k, a in enumerate(spread)]
    y = ctx.op.Unsqueeze(x, _axes(ctx, positions))
    pads = [0] * (2 * (rank + len(spread)))
    for k, a in enumerate(spread):
        pads[rank + len(spread) + positions[k]] = padding_config[a][2]
    y = ctx.op.Pad(y, ctx.const(np.asarray(pads, _I64)), value)
    merged = [d * (1 + padding_config[a][2]) if a in spread else d for a, d in enumerate(shape)]
    symbolic = [d for d in merged if is_symbolic(d)]
    if len(symbolic) > 1:
        return ctx.reshape(y, merged)
    target = [-1 if is_symbolic(d) else int(d) for d in merged]
    return ctx.op.Reshape(y, ctx.const(np.asarray(target, _I64)))


@family.lowering(
    lax.rev_p,
    cases=lambda: [
        case("rev", lambda x: lax.rev(x, (0, 1)), [("B", 3)], expect=["Slice"], variants=_BF16),
        case("rev_last", lambda x: jnp.flip(x, -1), [(2, 3, 4)], counts={"Shape": 0}),
        case("rev_int", lambda x: lax.rev(x, (0,)), [(5,)], dtypes=[np.int32]),
        case("rev_bool", lambda x: lax.rev(x, (1,)), [(2, 3)], dtypes=[np.bool_]),
        case("rev_none", lambda x: lax.rev(x, ()), [(3,)]),
    ],
)
def rev(ctx, x, *, dimensions):
    """One Slice with step -1 from the last element (-1) past the first (int64 min)."""
    if not dimensions:
        return ctx.op.Identity(x)
    n = len(dimensions)
    starts = ctx.const(np.full(n, -1, _I64))
    ends = ctx.const(np.full(n, np.iinfo(_I64).min, _I64))
    return ctx.op.Slice(x, starts, ends, _axes(ctx, dimensions), ctx.const(np.full(n, -1, _I64)))


_IOTA_DTYPES = [np.int8, np.uint8, np.int16, np.uint32, np.float16, ml_dtypes.bfloat16]


@family.lowering(
    lax.iota_p,
    cases=lambda: [
        case("arange", lambda x: x + jnp.arange(5, dtype=jnp.float32), [(5,)]),
        case(
            "iota_2d",
            lambda x: x + lax.broadcasted_iota(np.int32, (3, 4), 1),
            [np.zeros((3, 4), np.int32)],
        ),
        case(
            "symbolic",
            lambda x: x * jnp.arange(x.shape[0], dtype=x.dtype)[:, None],
            [("B", 3)],
            variants=_HALF,
        ),
        case(
            "symbolic_middle",
            lambda x: x + lax.broadcasted_iota(np.int32, (2, x.shape[1], 3), 1),
            [(2, "B", 3)],
            dtypes=[np.int32],
        ),
        case("symbolic_int64", lambda x: x + jnp.arange(x.shape[0]), [("B",)], variants=["f64"]),
        *[
            case(
                f"iota_{np.dtype(d).name}",
                lambda x, d=d: x + lax.broadcasted_iota(d, (2, 300), 1).astype(np.float32),
                [(2, 300)],
                variants=["f32"],
            )
            for d in _IOTA_DTYPES
        ],
        *[
            case(
                f"symbolic_{np.dtype(d).name}",
                lambda x, d=d: x + lax.broadcasted_iota(d, (x.shape[0], 2), 0).astype(np.float32),
                [("B", 2)],
                variants=["f32"],
            )
            for d in _IOTA_DTYPES
        ],
    ],
)
def iota(ctx, *dyn, dtype, shape, dimension, **_):
    """A constant when the shape is static; otherwise Range, Unsqueeze, Expand, Cast.

    Everything runs in int64 (ORT has no Expand for bfloat16) and the final Cast
    converts like JAX (int8 wraps, floats round to nearest).
    """
    if not any(is_symbolic(d) for d in shape):
        ramp = np.arange(int(shape[dimension]), dtype=np.int64).astype(dtype)
        view = [1] * len(shape)
        view[dimension] = int(shape[dimension])
        return ctx.const(np.broadcast_to(ramp.reshape(view), tuple(int(d) for d in shape)).copy())
    limit = ctx.op.Squeeze(ctx.dim(shape[dimension]))
    ramp = ctx.op.Range(np.asarray(0, _I64), limit, np.asarray(1, _I64))
    others = [i for i in range(len(shape)) if i != dimension]
    if others:
        ramp = ctx.op.Unsqueeze(ramp, _axes(ctx, others))
        ramp = ctx.op.Expand(ramp, ctx.shape(shape))
    if np.dtype(dtype) != np.int64:
        ramp = ctx.op.Cast(ramp, to=onnx_dtype(dtype))
    return ramp


@family.lowering(
    "dim_as_value",
    cases=lambda: [
        case("mean_over_batch", lambda x: jnp.mean(x, axis=0), [("B", 3)]),
        case("scale_by_size", lambda x: x * x.shape[0], [("B", 2)]),
        case("expression", lambda x: x + (2 * x.shape[0] + 1), [("B",)], dtypes=[np.int32]),
    ],
)
def dim_as_value(ctx, *, dim):
    """A (symbolic) dimension used as a number: its int64 value, squeezed and cast."""
    value = ctx.op.Squeeze(ctx.dim(dim), ctx.i64([0]))
    return ctx.op.Cast(value, to=onnx_dtype(ctx.avals_out[0].dtype))


register = family.register
