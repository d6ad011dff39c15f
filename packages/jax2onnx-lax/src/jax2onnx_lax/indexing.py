"""dynamic_slice and dynamic_update_slice, and the start-index helpers gather shares.

JAX clamps every start index so the whole window lies inside the operand:
``start = clamp(start, 0, dim - size)``. The lowerings clamp the same way, so
out-of-range and (after JAX's own normalisation) negative starts give JAX's
numbers. Axes the window covers whole need no start at all: their clamped start
is always 0.
"""

from __future__ import annotations

import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case, is_symbolic

family = Family("lax")


_I64 = np.int64
_END = np.iinfo(np.int64).max


def same_dim(a, b) -> bool:
    """``a == b`` for ints and symbolic dimension expressions."""
    if is_symbolic(a) or is_symbolic(b):
        return str(a) == str(b)
    return int(a) == int(b)


def constant(x):
    """The NumPy value of a constant ONNX value, else ``None``."""
    return None if x.const_value is None else x.const_value.numpy()


def as_int64(ctx, x):
    """An index value as int64 (constants converted at conversion time)."""
    value = constant(x)
    if value is not None:
        return ctx.const(value.astype(_I64))
    if x.dtype is not None and x.dtype.numpy() == np.dtype(_I64):
        return x
    return ctx.cast(x, _I64)


def clamp_starts(ctx, starts, upper):
    """``clamp(starts, 0, upper)`` over the last axis (one bound per component).

    A constant ``starts`` with static bounds is clamped now; a single static
    bound is one ``Clip``; otherwise ``Max`` then ``Min`` with a bound vector.
    """
    static = not any(is_symbolic(u) for u in upper)
    value = constant(starts)
    if value is not None and static:
        return ctx.const(np.clip(value, 0, np.asarray([int(u) for u in upper], _I64)))
    if value is not None and all(
        _at_most(c, u) for c, u in zip(np.moveaxis(value, -1, 0), upper, strict=True)
    ):
        return starts  # x[:4], x[1:] with a symbolic size: constant starts inside the bounds
    if static and len(set(int(u) for u in upper)) == 1:
        return ctx.op.Clip(starts, ctx.const(_I64(0)), ctx.const(_I64(int(upper[0]))))
    return ctx.op.Min(ctx.op.Max(starts, ctx.const(_I64(0))), ctx.shape(upper))


def _at_most(starts, bound) -> bool:
    """Whether every start is in ``[0, bound]`` for every size the dimensions can take."""
    if np.any(starts < 0):
        return False
    try:
        return bool(bound >= int(np.max(starts, initial=0)))
    except Exception:  # InconclusiveDimensionOperation: JAX cannot tell
        return False


def _start_pieces(ctx, starts, axes):
    """The scalar starts of ``axes`` as int64 ``[1]`` values (constants where known)."""
    pieces = []
    for axis in axes:
        start = as_int64(ctx, starts[axis])
        value = constant(start)
        if value is not None:
            pieces.append(ctx.const(value.reshape(1)))
        else:
            pieces.append(ctx.op.Unsqueeze(start, ctx.i64([0])))
    return pieces


def _start_vector(ctx, starts, axes, upper):
    """The scalar starts of ``axes`` as one clamped int64 vector."""
    pieces = _start_pieces(ctx, starts, axes)
    if all(constant(p) is not None for p in pieces):
        vector = ctx.const(np.concatenate([constant(p) for p in pieces]))
    else:
        vector = pieces[0] if len(pieces) == 1 else ctx.op.Concat(*pieces, axis=0)
    return clamp_starts(ctx, vector, upper)


def _add(ctx, a, b):
    """``a + b`` for int64 vectors, folded when both are constants."""
    if constant(a) is not None and constant(b) is not None:
        return ctx.const(constant(a) + constant(b))
    return ctx.op.Add(a, b)


_Z = np.int32(0)


def _slice_p(x, *starts, sizes):
    """dynamic_slice bound directly: lax.dynamic_slice binds dim_as_value for symbolic axes."""
    return lax.dynamic_slice_p.bind(x, *starts, slice_sizes=sizes)


def _update_p(x, update, *starts):
    return lax.dynamic_update_slice_p.bind(x, update, *starts)


@family.lowering(
    lax.dynamic_slice_p,
    cases=lambda: [
        case(
            "rows",
            lambda x, i: lax.dynamic_slice_in_dim(x, i, 2, axis=0),
            [(5, 4), ()],
            dtypes=[None, np.int32],
            expect=["Clip -> Slice:2x4"],
        ),
        case(
            "index_in_dim",
            lambda x, i: lax.dynamic_index_in_dim(x, i, axis=1, keepdims=False),
            [(4, 5), ()],
            dtypes=[None, np.int32],
            expect=["Clip -> Gather:4"],
            counts={"Squeeze": 0, "Slice": 0, "Cast": 0},
        ),
        case(
            "element_int64_index",
            lambda x, i: lax.dynamic_index_in_dim(x, i, axis=0, keepdims=True),
            [(5, "B"), ()],
            dtypes=[None, np.int64],
            input_range=(-9, 10),
            expect=["Clip -> Gather -> Unsqueeze:1xB"],
            variants=["f64"],
        ),
        case(
            "element_int16_index",
            lambda x, i: lax.dynamic_index_in_dim(x, i, axis=1, keepdims=False),
            [(3, 4), ()],
            dtypes=[None, np.int16],
            input_range=(-9, 10),
        ),
        case(
            "symbolic_batch",
            lambda x, i: _slice_p(x, _Z, i, sizes=(x.shape[0], 3)),
            [("B", 7), ()],
            dtypes=[None, np.int32],
            input_range=(-9, 10),
            expect=["Slice:Bx3"],
        ),
        case(
            "symbolic_axis",
            lambda x, i: _slice_p(x, i, _Z, sizes=(1, 3)),
            [("B", 3), ()],
            dtypes=[None, np.int32],
            input_range=(-9, 10),
        ),
        case(
            "every_axis",
            lambda x, i, j, k: lax.dynamic_slice(x, (i, j, k), (2, 3, 1)),
            [(4, 5, 3), (), (), ()],
            dtypes=[None, np.int32, np.int32, np.int32],
            counts={"Slice": 1},
        ),
        case(
            "int64_start",
            lambda x, i: lax.dynamic_slice_in_dim(x, i, 2, axis=1),
            [(3, 6), ()],
            dtypes=[None, np.int64],
            variants=["f64"],
        ),
        case(
            "constant_start",
            lambda x: lax.dynamic_slice(x, (np.int32(7), np.int32(1)), (2, 3)),
            [(4, 5)],
            counts={"Clip": 0, "Max": 0, "Concat": 0},
        ),
        *(
            case(
                f"operand_{np.dtype(t).name}",
                lambda x, i: lax.dynamic_slice_in_dim(x, i, 2),
                [(5, 3), ()],
                dtypes=[t, np.int32],
            )
            for t in (np.int8, np.int16, np.uint16, np.int32, np.bool_)
        ),
    ],
)
def dynamic_slice(ctx, x, *dynamic, slice_sizes):
    """Clamped starts (only on the axes the window does not cover whole), then one Slice.

    One element along one axis (``x[i]`` of a state vector or a table row, in
    solver steps) is a Clip of the index in its own type and a Gather: the
    Unsqueeze keeping the axis cancels with the Squeeze that usually follows.
    """
    shape = ctx.avals_in[0].shape
    starts = dynamic[: len(shape)]
    axes = [a for a in range(len(shape)) if not same_dim(slice_sizes[a], shape[a])]
    if not axes:
        return ctx.op.Identity(x)
    if len(axes) == 1 and slice_sizes[axes[0]] == 1 and not is_symbolic(shape[axes[0]]):
        read = _one_element(ctx, x, starts[axes[0]], axes[0], shape[axes[0]])
        if read is not None:
            return read
    begin = _start_vector(ctx, starts, axes, [shape[a] - slice_sizes[a] for a in axes])
    end = _add(ctx, begin, ctx.shape([slice_sizes[a] for a in axes]))
    return ctx.op.Slice(x, begin, end, ctx.i64(axes))


def _one_element(ctx, x, start, axis, size):
    index_type = None if start.dtype is None else start.dtype.numpy()
    if constant(start) is not None or index_type not in _GATHER_INDEX or ctx.opset < 12:
        return None  # a constant start is one constant Slice; other index types are cast
    low, high = ctx.const(index_type.type(0)), ctx.const(index_type.type(size - 1))
    element = ctx.op.Gather(x, ctx.op.Clip(start, low, high), axis=axis)
    return ctx.op.Unsqueeze(element, ctx.i64([axis]))


_GATHER_INDEX = (np.dtype(np.int32), np.dtype(np.int64))


@family.lowering(
    lax.dynamic_update_slice_p,
    cases=lambda: [
        case(
            "kv_cache",
            lambda cache, new, t: _update_p(cache, new, _Z, t, _Z),
            [("B", 6, 4), ("B", 1, 4), ()],
            dtypes=[None, None, np.int32],
            input_range=(-8, 9),
            expect=["Slice -> Concat:Bx6x4"],
            counts={"Where": 0, "Pad": 0},
        ),
        case(
            "two_axes",
            lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)),
            [(5, 6), (2, 3), (), ()],
            dtypes=[None, None, np.int32, np.int32],
        ),
        case(
            "three_axes_symbolic",
            lambda x, u, i, j: _update_p(x, u, i, np.int64(1), j),
            [(4, "2*B", 5), (2, "B", 2), (), ()],
            dtypes=[None, None, np.int64, np.int64],
            variants=["f64"],
        ),
        case(
            "two_axes_opset17",
            lambda x, u, i: _update_p(x, u, i, i),
            [(5, "B"), (3, 1), ()],
            dtypes=[None, None, np.int32],
            opset=17,
        ),
        case(
            "whole",
            lambda x, u, i: _update_p(x, u, i, i),
            [("B", 3), ("B", 3), ()],
            dtypes=[None, None, np.int32],
            counts={"Concat": 0},
            no_unused_inputs=False,  # the update covers the operand: x and i are not read
        ),
        case(
            "constant_start",
            lambda x, u: lax.dynamic_update_slice(x, u, (np.int32(1), np.int32(9))),
            [(4, 5), (2, 1)],
            counts={"Clip": 0, "Max": 0},
        ),
        *(
            case(
                f"operand_{np.dtype(t).name}",
                lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)),
                [(4, 4), (2, 2), (), ()],
                dtypes=[t, t, np.int32, np.int32],
            )
            for t in (np.int8, np.int16, np.uint16, np.int32, np.bool_)
        ),
        case(
            "operand_uint64",
            lambda x, u, i: lax.dynamic_update_slice_in_dim(x, u, i, 0),
            [np.array([[2**64 - 1, 1], [2, 3], [4, 5]], np.uint64), (1, 2), ()],
            dtypes=[None, np.uint64, np.int64],
            variants=["f64"],
        ),
    ],
)
def dynamic_update_slice(ctx, x, update, *starts):
    """Slices around the clamped window and Concat, one axis at a time.

    For each axis the update does not cover whole, the operand splits into the
    part before the window, the window's strip and the part after it; the strip
    is updated along the next such axis, and Concat puts the three back. Slice
    and Concat copy every dtype exactly, so no Where, Pad or widening is needed.
    """
    shape = ctx.avals_in[0].shape
    sizes = ctx.avals_in[1].shape
    axes = [a for a in range(len(shape)) if not same_dim(sizes[a], shape[a])]
    if not axes:
        return ctx.op.Identity(update)
    window = []
    for axis, start in zip(axes, _start_pieces(ctx, starts, axes)):
        begin = clamp_starts(ctx, start, [shape[axis] - sizes[axis]])
        window.append((axis, begin, _add(ctx, begin, ctx.dim(sizes[axis]))))
    return _splice(ctx, x, update, window)


def _splice(ctx, x, update, window):
    (axis, begin, end), inner = window[0], window[1:]
    axes = ctx.i64([axis])
    if inner:
        update = _splice(ctx, ctx.op.Slice(x, begin, end, axes), update, inner)
    before = ctx.op.Slice(x, ctx.i64([0]), begin, axes)
    after = ctx.op.Slice(x, end, ctx.i64([_END]), axes)
    return ctx.op.Concat(before, update, after, axis=axis)


register = family.register
