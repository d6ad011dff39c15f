"""scatter and its reductions: everything ``x.at[idx].set/add/subtract/multiply/min/max`` emits.

XLA's scatter is general; every form lowers to one ``ScatterND`` (``reduction``
none, add, mul, min or max) on the operand transposed to (indexed axes, the
rest):

* the *indexed* axes are the batching axes, the inserted axes and window axes
  narrower than the operand; their element indices are the start indices (a
  zero column where XLA has no start for the axis, an iota for batching axes)
  plus a constant offset grid for the windows wider than one element;
* the *rest* are window axes the updates cover whole, left to ``ScatterND``'s
  slice updates.

Out-of-bounds windows follow XLA on CPU: ``CLIP`` clamps each start so the
window lies inside the operand; ``FILL_OR_DROP`` and ``PROMISE_IN_BOUNDS`` skip
the whole window. Skipped windows are redirected to a scratch block appended to
the operand and sliced off afterwards, which is exact for every reduction and
dtype (no neutral element needed). ``scatter_sub`` adds the negated updates
(``a - b == a + -b`` exactly, integers wrap alike). ONNX Runtime's min/max
reductions drop NaN, so a second ``ScatterND`` marks where XLA propagates one;
bool min/max run in uint8. Before opset 18 ``ScatterND`` has no min/max: a
``Loop`` applies the update slices one at a time (``GatherND``, ``Min``/``Max``,
``ScatterND``), which repeated indices need.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.core import ShapedArray
from jax.lax import GatherScatterMode, ScatterDimensionNumbers

from jax2onnx.plugin import Family, case, is_symbolic
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
        raise ctx.error("scatter without an indexed or inserted operand axis is not supported")
    smap = list(dn.scatter_dims_to_operand_dims)
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
            ctx.const(window_grid(ctx, sizes, group, grid)),
        )
    scatter_axes = [u for u in range(len(ushape)) if u not in dn.update_window_dims]
    to_update = dict(zip(window_dims, dn.update_window_dims))
    updates = ctx.transpose(updates, scatter_axes + [to_update[d] for d in grid + rest])
    if reduction is _loop_min or reduction is _loop_max:
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
        if not np.issubdtype(dtype, np.floating):
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


def _loop_min(ctx, x, y, dtype):
    return ctx.minimum(x, y, dtype)


def _loop_max(ctx, x, y, dtype):
    return ctx.maximum(x, y, dtype)


def _loop(ctx, x, index, updates, combine, count, carry, depth):
    """One Loop step per update slice: read it back, combine, write it (opset 17 min/max)."""
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
    return ctx.op.Loop(trips, None, x, body=graph)


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


# -- cases -------------------------------------------------------------------------

_ROWS = np.array([3, -1, 9, 0], _I32)  # -1 is row 4 (jnp normalises it); row 9 is dropped
_COLS = np.array([0, 5, -2, -9], _I32)  # -9 stays negative after normalising: dropped


def _raw(kind, window, inserted, to_operand, batching=((), ()), mode=None):
    dn = ScatterDimensionNumbers(
        update_window_dims=window,
        inserted_window_dims=inserted,
        scatter_dims_to_operand_dims=to_operand,
        operand_batching_dims=batching[0],
        scatter_indices_batching_dims=batching[1],
    )
    fn = getattr(lax, kind)
    return lambda x, i, u: fn(x, i, u, dn, mode=mode)


def _at(x):
    return jnp.asarray(x).at


def _vmapped(method):
    return jax.vmap(lambda x, i, u: getattr(_at(x)[i], method)(u))


_SET_CASES = [
    case(
        "rows",
        lambda x, u: _at(x)[_ROWS].set(u),
        [(5, 3), (4, 3)],
        expect=["Concat -> ScatterND -> Slice:5x3"],  # the clamped row indices fold
    ),
    case(
        "columns_symbolic",
        lambda x, u: _at(x)[:, _COLS].set(u),
        [("B", 6), ("B", 4)],
        expect=["Transpose -> Concat -> ScatterND -> Slice -> Transpose:Bx6"],
    ),
    case(
        "constant_point",
        lambda x, u: _at(x)[2, 1].set(u),
        [(4, 3), ()],
        expect=["Where -> ScatterND -> Slice:4x3"],
    ),
    case(
        "constant_indices",
        lambda x, u: _raw("scatter", (1,), (0,), (0,))(x, np.array([[2], [0]], _I32), u),
        [(4, "B"), (2, "B")],
        expect=["ScatterND:4xB"],
        counts={"Where": 0, "Concat": 0, "Slice": 0, "Cast": 0},
    ),
    case(
        "point_arrays",
        lambda x, i, j, u: _at(x)[i, j].set(u),
        [(4, 5, 2), (), (), (2,)],
        dtypes=[None, _I32, _I32, None],
        input_range=(-6, 7),
    ),
    case("slice", lambda x, u: _at(x)[1:4].set(u), [(5, "B"), (3, "B")]),
    case(
        "strided_slice_and_array",
        lambda x, u: _at(x)[::2, np.array([2, 0])].set(u),
        [(5, 3), (3, 2)],
    ),
    case(
        "vmap",
        lambda x, i, u: _vmapped("set")(x, i[:, None], u),
        [("B", 5, 4), ("B",), ("B", 1, 4)],
        dtypes=[None, _I32, None],
        input_range=(-7, 7),
    ),
    case(
        "window_clip",
        _raw("scatter", (1,), (0,), (0, 1), mode=GatherScatterMode.CLIP),
        [(5, 6), np.array([[1, 5], [-3, 2]], _I32), (2, 3)],
    ),
    case(
        "window_drop",
        _raw("scatter", (1,), (0,), (0, 1), mode=GatherScatterMode.FILL_OR_DROP),
        [(5, 6), np.array([[1, 4], [3, 3], [0, -1]], _I32), (3, 3)],
    ),
    case(
        "clip_mode",
        lambda x, u: _at(x)[np.array([1, 9]), 1:].set(u, mode="clip"),
        [(5, 3), (2, 2)],
    ),
    case(
        "fori_loop",
        lambda x: lax.fori_loop(0, 3, lambda k, y: _at(y)[k + 1].set(y[k] * 2.0), x),
        [(5, 2)],
    ),
    case(
        "opset17",
        lambda x, u: _at(x)[:, _COLS].set(u),
        [(3, 6), (3, 4)],
        opset=17,
    ),
    *(
        case(
            f"rows_{np.dtype(t).name}",
            lambda x, u: _at(x)[_ROWS].set(u),
            [(5, 3), (4, 3)],
            dtypes=[t, t],
            variants=["f64"] if np.dtype(t).itemsize == 8 else None,
        )
        for t in (np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint64, np.bool_)
    ),
]

_ADD_CASES = [
    case(
        "duplicates",
        lambda x, i, u: _at(x)[i].add(u),
        [(5, 3), (8,), (8, 3)],
        dtypes=[None, _I32, None],  # random in [-5, 6): repeated, negative and dropped rows
        expect=["Where -> ScatterND -> Slice:5x3"],
    ),
    case(
        "columns_symbolic",
        lambda x, i, u: _at(x)[:, i].add(u),
        [("B", 4), (6,), ("B", 6)],
        dtypes=[None, _I32, None],
    ),
    case(
        "grad_of_gather",
        jax.grad(lambda x, i: jnp.sum(jnp.sin(x[i]))),
        [(5, 3), (7,)],
        dtypes=[None, _I32],
        input_range=(-5, 5),
    ),
    case(
        "vmap",
        lambda x, i, u: _vmapped("add")(x, i, u),
        [("B", 4), ("B", 6), ("B", 6)],
        dtypes=[None, _I32, None],
    ),
    case(
        "scan",
        lambda x, i: lax.scan(lambda c, j: (_at(c)[j].add(1.0), None), x, i)[0],
        [(4, 3), (6,)],
        dtypes=[None, _I32],
    ),
    case(
        "clip_mode",
        lambda x, i, u: _at(x)[i].add(u, mode="clip"),
        [(5,), (9,), (9,)],
        dtypes=[None, _I32, None],
        input_range=(-9, 9),
    ),
    case(
        "opset17",
        lambda x, i, u: _at(x)[i, 1:3].add(u),
        [(5, 4), (6,), (6, 2)],
        dtypes=[None, _I32, None],
        opset=17,
    ),
    *(
        case(
            f"duplicates_{np.dtype(t).name}",
            lambda x, i, u: _at(x)[i].add(u),
            [(4, 2), (7,), (7, 2)],
            dtypes=[t, _I32, t],
            variants=["f64"] if np.dtype(t).itemsize == 8 else None,
        )
        for t in (np.int8, np.uint8, np.int32, np.int64)
    ),
]

_SUB_CASES = [
    case(
        "duplicates",
        lambda x, i, u: _at(x)[i].subtract(u),
        [(5, "B"), (8,), (8, "B")],
        dtypes=[None, _I32, None],
    ),
    *(
        case(
            f"duplicates_{np.dtype(t).name}",
            lambda x, i, u: _at(x)[i].subtract(u),
            [(4, 2), (7,), (7, 2)],
            dtypes=[t, _I32, t],
            variants=["f64"] if np.dtype(t).itemsize == 8 else None,
        )
        for t in (np.int8, np.uint8, np.int32, np.uint32, np.uint64)
    ),
]

_MUL_CASES = [
    case(
        "duplicates",
        lambda x, i, u: _at(x)[i].multiply(u),
        [(5, "B"), (8,), (8, "B")],
        dtypes=[None, _I32, None],
    ),
    case(
        "vmap",
        lambda x, i, u: _vmapped("multiply")(x, i, u),
        [(3, 4), (3, 5), (3, 5)],
        dtypes=[None, _I32, None],
    ),
    *(
        case(
            f"duplicates_{np.dtype(t).name}",
            lambda x, i, u: _at(x)[i].multiply(u),
            [(4, 2), (7,), (7, 2)],
            dtypes=[t, _I32, t],
        )
        for t in (np.int8, np.uint8, np.int32)
    ),
]

_NANS = np.array([[np.nan, 1.0], [2.0, 0.5], [3.0, -1.0], [4.0, -0.5]], np.float32)
_NAN_UPDATES = np.array([[1, 2], [np.nan, 0], [2, 7], [5, np.nan], [np.nan] * 2], np.float32)


def _extremum_cases(method):
    return [
        case(
            "duplicates",
            lambda x, i, u: getattr(_at(x)[i], method)(u),
            [(5, "B"), (8,), (8, "B")],
            dtypes=[None, _I32, None],
        ),
        case(
            "nan",
            lambda x, u: getattr(_at(x)[np.array([0, 1, 1, 2, 9])], method)(u),
            [_NANS, _NAN_UPDATES],
        ),
        case(
            "window_drop",
            _raw(f"scatter_{method}", (1,), (0,), (0, 1), mode=GatherScatterMode.FILL_OR_DROP),
            [(5, 6), (4, 2), (4, 3)],
            dtypes=[None, _I32, None],
            input_range=(-1, 6),
        ),
        case(
            "batching",
            _raw(f"scatter_{method}", (2,), (1,), (1,), batching=((0,), (0,))),
            [("B", 5, 3), ("B", 4, 1), ("B", 4, 3)],
            dtypes=[None, _I32, None],
        ),
        case(
            "opset17",
            lambda x, i, u: getattr(_at(x)[:, i], method)(u),
            [("B", 5, 2), (6,), ("B", 6, 2)],
            dtypes=[None, _I32, None],
            opset=17,
            expect=["Loop"],
        ),
        case(
            "opset17_nan",
            lambda x, u: getattr(_at(x)[np.array([0, 1, 1, 2, 9])], method)(u),
            [_NANS, _NAN_UPDATES],
            opset=17,
        ),
        *(
            case(
                f"opset17_{np.dtype(t).name}",
                _raw(f"scatter_{method}", (1,), (0,), (0, 1), mode=GatherScatterMode.CLIP),
                [(5, 6), (4, 2), (4, 3)],
                dtypes=[t, _I32, t],
                input_range=(-1, 6),
                opset=17,
            )
            for t in (np.int16, np.uint8, np.bool_)
        ),
        *(
            case(
                f"duplicates_{np.dtype(t).name}",
                lambda x, i, u: getattr(_at(x)[i], method)(u),
                [(4, 2), (7,), (7, 2)],
                dtypes=[t, _I32, t],
            )
            for t in (np.int8, np.uint8, np.int32, np.bool_)
        ),
    ]


_lowering(
    lax.scatter_p,
    _set,
    11,
    _SET_CASES,
    "scatter -> ScatterND on the operand transposed to (indexed axes, the rest).",
)
_lowering(
    lax.scatter_add_p,
    _reduce("add"),
    16,
    _ADD_CASES,
    "scatter-add -> ScatterND(reduction='add'), which accumulates repeated indices.",
)
_lowering(
    lax.scatter_sub_p,
    _sub,
    16,
    _SUB_CASES,
    "scatter-sub -> ScatterND(reduction='add') of the negated updates: ONNX has no 'sub'.",
)
_lowering(
    lax.scatter_mul_p,
    _reduce("mul"),
    16,
    _MUL_CASES,
    "scatter-mul -> ScatterND(reduction='mul').",
)
_lowering(
    lax.scatter_min_p,
    _extremum("min"),
    18,
    _extremum_cases("min"),
    "scatter-min -> ScatterND(reduction='min'); NaN marked by a second ScatterND (max).",
)
_lowering(
    lax.scatter_min_p,
    _loop_min,
    17,
    [],
    "scatter-min -> Loop of GatherND, Min, ScatterND: ScatterND has no 'min' before opset 18.",
)
_lowering(
    lax.scatter_max_p,
    _loop_max,
    17,
    [],
    "scatter-max -> Loop of GatherND, Max, ScatterND: ScatterND has no 'max' before opset 18.",
)
_lowering(
    lax.scatter_max_p,
    _extremum("max"),
    18,
    _extremum_cases("max"),
    "scatter-max -> ScatterND(reduction='max'); NaN marked by a second ScatterND (max).",
)


register = family.register
