"""scatter and its reductions: everything ``x.at[idx].set/add/subtract/multiply/min/max`` emits.

XLA's scatter is general; every form lowers to one ``ScatterND`` (``reduction``
none, add, mul, min or max) on the operand transposed to (indexed axes, the
rest):

* the *indexed* axes are the batching axes, the inserted axes and window axes
  narrower than the operand; their element indices are the start indices (a
  zero column where XLA has no start for the axis, an iota for batching axes)
  plus a constant offset grid for the windows wider than one element;
* the *rest* are window axes the updates cover whole, left to ``ScatterND``'s
  slice updates. When every axis is such a window (``x.at[()].set(u)``), the
  scatter is rewritten onto ``operand[None]`` with the new axis indexed at 0.

Out-of-bounds windows follow XLA on CPU: ``CLIP`` clamps each start so the
window lies inside the operand; ``FILL_OR_DROP`` and ``PROMISE_IN_BOUNDS`` skip
the whole window. Skipped windows are redirected to a scratch block appended to
the operand and sliced off afterwards, which is exact for every reduction and
dtype (no neutral element needed). ``scatter_sub`` adds the negated updates
(``a - b == a + -b`` exactly, integers wrap alike). ONNX Runtime's min/max
reductions drop NaN, so a second ``ScatterND`` marks where XLA propagates one;
bool min/max run in uint8.

``ScatterND`` has no ``reduction`` before opset 16 and no min/max before 18.
There a ``Loop`` applies the update slices one at a time, in XLA's order: read
the slice back (``GatherND``), combine (``Add``, ``Sub``, ``Mul``, or ``lax.min``/
``lax.max`` with NaN winning), write it (``ScatterND``). Repeated indices need
the steps (one ``ScatterND`` would keep only one of them), and summing in
order keeps float results exact: a one-hot ``MatMul`` or a sort would reorder
the sums of repeated indices.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.core import ShapedArray
from jax.lax import GatherScatterMode

from jax2onnx.plugin import Family, is_symbolic, onnx_dtype
from jax2onnx_lax._scatter_cases import (
    extremum_cases,
    scatter_add_cases,
    scatter_mul_cases,
    scatter_set_cases,
    scatter_sub_cases,
)
from jax2onnx_lax.gather import in_bounds, window_grid
from jax2onnx_lax.indexing import as_int64, clamp_starts, constant, same_dim

family = Family("lax")

_I64 = np.int64
_I32 = np.int32
_U8 = np.uint8


def _scatter(ctx, operand, indices, updates, dn, mode, reduction):
    """``ScatterND`` of ``updates`` into ``operand`` (see the module docstring)."""
    shape = ctx.avals_in[0].shape
    ishape = ctx.avals_in[1].shape
    ushape = ctx.avals_in[2].shape
    rank, n = len(shape), len(ishape) - 1
    batching = dict(zip(dn.operand_batching_dims, dn.scatter_indices_batching_dims))
    inserted = set(dn.inserted_window_dims) | set(batching)
    window_dims = [d for d in range(rank) if d not in inserted]
    window = {d: ushape[u] for d, u in zip(window_dims, dn.update_window_dims)}
    rest = [d for d in window_dims if same_dim(window[d], shape[d])]
    group = [d for d in range(rank) if d not in rest]
    if not group:
        return ctx.decompose(_on_new_axis, operand, indices, updates, eqn=ctx.eqn)
    smap = list(dn.scatter_dims_to_operand_dims)
    where_type = np.dtype(ctx.avals_in[0].dtype) in _WHERE_TYPES and ctx.opset >= 12
    if reduction is _set and where_type and _one_slice(shape, ishape, smap, group, window):
        return _slice_set(ctx, operand, indices, updates, smap[0], mode)
    starts = as_int64(ctx, indices)
    keep = None
    if smap:
        upper = [shape[d] - window.get(d, 1) for d in smap]
        if GatherScatterMode.from_any(mode) == GatherScatterMode.CLIP:
            starts = clamp_starts(ctx, starts, upper)
        else:
            keep = in_bounds(ctx, starts, upper)
    index = _group_starts(ctx, starts, smap, group, batching, ishape[:-1])
    x = ctx.transpose(operand, group + rest)
    if keep is not None:
        scratch = ctx.shape([shape[group[0]]] + [0] * (len(group) - 1))
        index = ctx.op.Where(ctx.op.Unsqueeze(keep, ctx.i64([-1])), index, scratch)
        size = window.get(group[0], 1)
        x = ctx.op.Concat(x, ctx.op.Slice(x, ctx.i64([0]), ctx.dim(size), ctx.i64([0])), axis=0)
    grid = [d for d in group if d in window]
    if grid:
        sizes = [window[d] for d in grid]
        index = ctx.op.Add(
            ctx.op.Unsqueeze(index, ctx.i64(list(range(n, n + len(grid))))),
            window_grid(ctx, sizes, group, grid),
        )
    scatter_axes = [u for u in range(len(ushape)) if u not in dn.update_window_dims]
    to_update = dict(zip(window_dims, dn.update_window_dims))
    updates = ctx.transpose(updates, scatter_axes + [to_update[d] for d in grid + rest])
    if reduction in _LOOPED:
        count = math.prod([*ishape[:-1], *(window[d] for d in grid)])
        extended = [shape[d] for d in group]
        if keep is not None:
            extended[0] = extended[0] + window.get(group[0], 1)
        carry = ShapedArray(tuple(extended + [shape[d] for d in rest]), ctx.avals_in[0].dtype)
        result = _loop(ctx, x, index, updates, reduction, count, carry, len(group))
    else:
        result = reduction(ctx, x, index, updates)
    if keep is not None:
        result = ctx.op.Slice(result, ctx.i64([0]), ctx.dim(shape[group[0]]), ctx.i64([0]))
    order = group + rest
    return ctx.transpose(result, [order.index(d) for d in range(rank)])


# integer types with a Where kernel: ONNX Runtime's Where drops the sign of a -0.0 from
# its first branch, so float scatters keep ScatterND (which copies every bit)
_WHERE_TYPES = frozenset(np.dtype(t) for t in ("int8", "int32", "int64", "uint8", "uint32"))


def _one_slice(shape, ishape, smap, group, window) -> bool:
    """One update of one whole slice across one axis (``x.at[i].set(row)``)."""
    if len(smap) != 1 or group != smap or window.get(smap[0], 1) != 1:
        return False
    if any(is_symbolic(d) or d != 1 for d in ishape) or len(ishape) > len(shape):
        return False
    return not is_symbolic(shape[smap[0]])


def _slice_set(ctx, operand, indices, updates, axis, mode):
    """``Where(iota == i, update, x)`` over the axis, for integer operands: two nodes
    where ScatterND of a bounds-checked index takes ten. An index out of range matches
    no slice: the update is dropped (``FILL_OR_DROP``, ``PROMISE_IN_BOUNDS``), after a
    Clip under ``CLIP``."""
    shape, ushape = ctx.avals_in[0].shape, ctx.avals_in[2].shape
    index_type = np.dtype(ctx.avals_in[1].dtype)
    if index_type not in (np.dtype(np.int32), np.dtype(np.int64)):
        indices, index_type = as_int64(ctx, indices), np.dtype(_I64)
    n = shape[axis]
    if GatherScatterMode.from_any(mode) == GatherScatterMode.CLIP:
        low, high = ctx.const(index_type.type(0)), ctx.const(index_type.type(n - 1))
        indices = ctx.op.Clip(indices, low, high)
    rows = np.arange(n, dtype=index_type).reshape(
        [n if d == axis else 1 for d in range(len(shape))]
    )
    target = [1 if d == axis else shape[d] for d in range(len(shape))]
    if tuple(ushape) != tuple(target):
        updates = ctx.op.Reshape(updates, ctx.shape(target))
    return ctx.op.Where(ctx.op.Equal(ctx.const(rows), indices), updates, operand)


def _on_new_axis(operand, indices, updates, *, eqn):
    """The scatter on ``operand[None]`` with the new axis inserted and indexed at 0.

    When the updates cover every operand axis whole (``x.at[()].set(u)``, indices
    ``[..., 0]`` or starts that can only be 0), no axis is left for ``ScatterND`` to
    index: the new leading axis of size 1 is that axis, so every scatter variant,
    mode and batch of updates (applied in turn) keeps its lowering.
    """
    dn = eqn.params["dimension_numbers"]
    smap = tuple(int(d) + 1 for d in dn.scatter_dims_to_operand_dims)
    params = dict(eqn.params)
    params["dimension_numbers"] = dn._replace(
        inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0, *smap)
    )
    batch = indices.shape[:-1]
    if smap:  # a start of 0 for the new axis in front of the given ones
        zero_first = [(0, 0, 0)] * len(batch) + [(1, 0, 0)]
        indices = lax.pad(indices, np.zeros((), indices.dtype), zero_first)
    else:  # only the new axis's start, always 0: no window can be out of bounds
        params["mode"] = GatherScatterMode.CLIP
        if any(is_symbolic(d) for d in batch):
            indices = lax.full((*batch, 1), 0, indices.dtype)
        else:
            indices = np.zeros((*batch, 1), indices.dtype)
    out = eqn.primitive.bind(lax.expand_dims(operand, (0,)), indices, updates, **params)
    return lax.squeeze(out, (0,))


def _group_starts(ctx, starts, smap, group, batching, batch_shape):
    """The start index of each ``group`` axis, int64 ``[*batch_shape, len(group)]``.

    Axes without a start index start at 0 (a zero column added by Pad); a
    batching axis starts at the position along its index batching axis (an iota).
    """
    n = len(batch_shape)
    cols = [smap.index(d) if d in smap else len(smap) for d in group]
    value = constant(starts)
    if len(smap) in cols:
        if value is not None:
            value = np.concatenate([value, np.zeros((*value.shape[:-1], 1), _I64)], axis=-1)
        else:
            starts = ctx.op.Pad(starts, ctx.i64([0] * (2 * n + 1) + [1]))
    if value is not None:
        starts = ctx.const(value[..., cols])
    elif cols != list(range(len(smap))):
        starts = ctx.op.Gather(starts, ctx.i64(cols), axis=n)
    for j, d in enumerate(group):
        if d not in batching:
            continue
        axis, size = batching[d], batch_shape[batching[d]]
        view = [1] * (n + 1)
        view[axis] = size
        column = np.zeros(len(group), _I64)
        column[j] = 1
        if is_symbolic(size):
            end = ctx.op.Squeeze(ctx.dim(size), ctx.i64([0]))
            iota = ctx.op.Range(ctx.const(_I64(0)), end, ctx.const(_I64(1)))
            others = [a for a in range(n + 1) if a != axis]
            iota = ctx.op.Mul(ctx.op.Unsqueeze(iota, ctx.i64(others)), ctx.const(column))
        else:
            iota = ctx.const(np.arange(int(size), dtype=_I64).reshape(view) * column)
        starts = ctx.op.Add(starts, iota)
    return starts


# -- the combiners ---------------------------------------------------------------


def _set(ctx, x, index, updates):
    return ctx.op.ScatterND(x, index, updates)


def _reduce(kind):
    def combine(ctx, x, index, updates):
        return ctx.op.ScatterND(x, index, updates, reduction=kind)

    return combine


def _sub(ctx, x, index, updates):
    """Adds the negated updates; unsigned ints are negated (mod 2**bits) through int64."""
    dtype = np.dtype(ctx.avals_out[0].dtype)
    if np.issubdtype(dtype, np.unsignedinteger):
        negated = ctx.cast(ctx.op.Neg(ctx.cast(updates, _I64)), dtype)
    else:
        negated = ctx.op.Neg(updates)
    return ctx.op.ScatterND(x, index, negated, reduction="add")


def _extremum(kind):
    def combine(ctx, x, index, updates):
        dtype = np.dtype(ctx.avals_out[0].dtype)
        if dtype == np.bool_:  # no bool kernel with min/max: uint8 is exact
            combined = ctx.op.ScatterND(
                ctx.cast(x, _U8), index, ctx.cast(updates, _U8), reduction=kind
            )
            return ctx.cast(combined, dtype)
        combined = ctx.op.ScatterND(x, index, updates, reduction=kind)
        if not jnp.issubdtype(dtype, jnp.floating):  # bfloat16 too
            return combined
        # ONNX Runtime's min/max drop NaN; XLA's propagate it from operand and updates.
        nan = ctx.op.ScatterND(
            ctx.cast(ctx.op.IsNaN(x), _U8),
            index,
            ctx.cast(ctx.op.IsNaN(updates), _U8),
            reduction="max",
        )
        return ctx.where(ctx.cast(nan, np.bool_), np.asarray(np.nan, dtype), combined, dtype)

    return combine


# Loop combiners: (current slice, update slice) -> the new slice, as XLA combines them.


def _loop_add(ctx, x, y, dtype):
    return ctx.op.Add(x, y)


def _loop_sub(ctx, x, y, dtype):
    return ctx.op.Sub(x, y)


def _loop_mul(ctx, x, y, dtype):
    return ctx.op.Mul(x, y)


def _loop_min(ctx, x, y, dtype):
    return ctx.minimum(x, y, dtype)


def _loop_max(ctx, x, y, dtype):
    return ctx.maximum(x, y, dtype)


_LOOPED = frozenset({_loop_add, _loop_sub, _loop_mul, _loop_min, _loop_max})


def _loop(ctx, x, index, updates, combine, count, carry, depth):
    """One Loop step per update slice: read it back, combine, write it (no reduction needed)."""
    tail = list(carry.shape[depth:])
    index = ctx.op.Reshape(index, ctx.i64([-1, depth]))
    if any(is_symbolic(d) for d in tail):
        spec = ctx.op.Concat(ctx.i64([-1]), ctx.shape(tail), axis=0)
    else:
        spec = ctx.i64([-1] + [int(d) for d in tail])
    updates = ctx.op.Reshape(updates, spec)
    trips = ctx.op.Squeeze(ctx.dim(count)) if is_symbolic(count) else ctx.i64(count)
    body = ctx.subgraph("scatter_body")
    step = body.add_input(np.int64, ())
    keep_going = body.add_input(np.bool_, ())
    state = body.add_input(carry.dtype, carry.shape)
    where_to = body.op.Unsqueeze(body.op.Gather(index, step, axis=0), ctx.i64([0]))
    value = body.op.Gather(updates, body.op.Unsqueeze(step, ctx.i64([0])), axis=0)
    current = body.op.GatherND(state, where_to)
    new = body.op.ScatterND(state, where_to, combine(body.ctx, current, value, carry.dtype))
    graph = body.finish([keep_going, new], [ShapedArray((), np.bool_), carry])
    result = ctx.op.Loop(trips, None, x, body=graph)
    result.dtype = onnx_dtype(carry.dtype)  # the builder does not know Loop's output dtypes
    return result


def _lowering(prim, combine, min_opset, cases, doc):
    def lower(ctx, operand, indices, updates, *, dimension_numbers, mode, update_jaxpr=None, **_):
        if combine is _set and update_jaxpr is not None:
            raise ctx.error(
                "scatter with an update computation (x.at[i].apply(f)) is not supported; "
                "use x.at[i].set(f(x[i])) with unique indices"
            )
        return _scatter(ctx, operand, indices, updates, dimension_numbers, mode, combine)

    lower.__name__ = lower.__qualname__ = prim.name.replace("-", "_")
    lower.__doc__ = doc
    return family.lowering(prim, min_opset=min_opset, cases=cases)(lower)


_lowering(
    lax.scatter_p,
    _set,
    11,
    scatter_set_cases,
    "scatter -> ScatterND on the operand transposed to (indexed axes, the rest).",
)
_lowering(
    lax.scatter_add_p,
    _loop_add,
    13,
    [],
    "scatter-add -> Loop of GatherND, Add, ScatterND: ScatterND has no reduction before 16.",
)
_lowering(
    lax.scatter_add_p,
    _reduce("add"),
    16,
    scatter_add_cases,
    "scatter-add -> ScatterND(reduction='add'), which accumulates repeated indices.",
)
_lowering(
    lax.scatter_sub_p,
    _loop_sub,
    13,
    [],
    "scatter-sub -> Loop of GatherND, Sub, ScatterND: ScatterND has no reduction before 16.",
)
_lowering(
    lax.scatter_sub_p,
    _sub,
    16,
    scatter_sub_cases,
    "scatter-sub -> ScatterND(reduction='add') of the negated updates: ONNX has no 'sub'.",
)
_lowering(
    lax.scatter_mul_p,
    _loop_mul,
    13,
    [],
    "scatter-mul -> Loop of GatherND, Mul, ScatterND: ScatterND has no reduction before 16.",
)
_lowering(
    lax.scatter_mul_p,
    _reduce("mul"),
    16,
    scatter_mul_cases,
    "scatter-mul -> ScatterND(reduction='mul').",
)
_lowering(
    lax.scatter_min_p,
    _loop_min,
    13,
    [],
    "scatter-min -> Loop of GatherND, Min, ScatterND: ScatterND has no 'min' before opset 18.",
)
_lowering(
    lax.scatter_min_p,
    _extremum("min"),
    18,
    lambda: extremum_cases("min"),
    "scatter-min -> ScatterND(reduction='min'); NaN marked by a second ScatterND (max).",
)
_lowering(
    lax.scatter_max_p,
    _loop_max,
    13,
    [],
    "scatter-max -> Loop of GatherND, Max, ScatterND: ScatterND has no 'max' before opset 18.",
)
_lowering(
    lax.scatter_max_p,
    _extremum("max"),
    18,
    lambda: extremum_cases("max"),
    "scatter-max -> ScatterND(reduction='max'); NaN marked by a second ScatterND (max).",
)


register = family.register
