"""The gradients of window reductions: select_and_scatter_add, select_and_gather_add.

Max and min pooling differentiate into these: a running selection over the
window offsets (strided Slices, as in :mod:`jax2onnx_lax.windows`) decides which
operand element each window picks, as XLA selects it; the JVP gathers the
tangent there, the VJP scatter-adds the cotangent there: ScatterElements
(reduction="add") from opset 16, below it one Pad and Add per window offset
(ScatterElements has no reduction before 16). Both add each element's sources
in XLA's window order, so float results are exact. Symbolic sizes along the
windowed axes (pools over images of any size, SAME padding computed from
them) take the Pad-and-Add form at every opset.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case, is_symbolic
from jax2onnx_lax.windows import (
    EDGES,
    NHWC,
    TIES,
    dilate,
    generic_window,
    max_pool,
    min_pool,
    pad,
    pad_computed,
    strided_slice,
    window_end,
)

family = Family("lax")


def _window_slices(ctx, shape, out_shape, windows, strides, dilations):
    """(offset index, slicer) for each window offset, in row-major order."""
    axes = [a for a in range(len(shape)) if windows[a] > 1 or strides[a] > 1]
    steps = [strides[a] for a in axes]
    for n, ks in enumerate(itertools.product(*(range(windows[a]) for a in axes))):
        starts = [k * dilations[a] for k, a in zip(ks, axes)]
        ends = [window_end(k, dilations[a], strides[a], out_shape[a]) for k, a in zip(ks, axes)]

        def take(x, starts=starts, ends=ends):
            return strided_slice(ctx, x, starts, ends, axes, steps) if axes else x

        yield n, ks, take


def _symbolic(*dims) -> bool:
    return any(is_symbolic(d) for d in dims)


def _pad(ctx, x, shape, padding, fill):
    """:func:`pad`, or one ``Pad`` of computed amounts when they depend on symbolic sizes
    (``"SAME"`` pools with a stride: XLA's padding, never negative)."""
    if _symbolic(*(d for pair in padding for d in pair)):
        return pad_computed(ctx, x, shape, padding, fill)
    return pad(ctx, x, shape, [(int(lo), int(hi)) for lo, hi in padding], fill)


def _unpad(ctx, y, pshape, padding, fill):
    """The operand's part of the padded ``y`` (``padding`` undone)."""
    if not _symbolic(*(d for pair in padding for d in pair)):
        return pad(ctx, y, pshape, [(-int(lo), -int(hi)) for lo, hi in padding], fill)[0]
    axes = list(range(len(pshape)))
    starts = [lo for lo, _ in padding]
    ends = [d - hi for d, (_, hi) in zip(pshape, padding, strict=True)]
    return ctx.op.Slice(y, ctx.shape(starts), ctx.shape(ends), ctx.i64(axes))


def _keep(ctx, select_prim):
    if select_prim is lax.ge_p:
        return ctx.op.GreaterOrEqual
    if select_prim is lax.le_p:
        return ctx.op.LessOrEqual
    raise ctx.error(f"select_prim {select_prim} is not supported (only ge and le)")


def _select_fill(select_prim, dtype, work=None):
    """The padding value of the selection, as XLA pads: the identity of max (ge) or min
    (le) of ``dtype`` (-inf, the lowest integer, False ...), in the ``work`` dtype.
    A window whose values all equal it selects the padding first, dropping its source."""
    dtype = np.dtype(dtype)
    ge = select_prim is lax.ge_p
    if dtype == np.bool_:
        value = not ge
    elif np.issubdtype(dtype, np.integer):
        value = np.iinfo(dtype).min if ge else np.iinfo(dtype).max
    else:
        value = -np.inf if ge else np.inf
    return np.asarray(value, work or dtype)


# select_and_scatter_add on narrow integers and bool: selected and summed in a wider
# integer (order and wrap-around sums kept; bool sums are "any"), then cast back
_WORK = {
    np.dtype(np.bool_): np.dtype(np.int32),
    np.dtype(np.int8): np.dtype(np.int32),
    np.dtype(np.uint8): np.dtype(np.int32),
    np.dtype(np.int16): np.dtype(np.int32),
    np.dtype(np.uint16): np.dtype(np.int32),
    np.dtype(np.uint32): np.dtype(np.int64),
}


def _widened(rule):
    """``rule(ctx, source, operand, dtype=..., **params)`` run in the work dtype of the
    operands (see ``_WORK``), its result cast back."""

    def lower(ctx, source, operand, **params):
        dtype = np.dtype(ctx.avals_in[1].dtype)
        work = _WORK.get(dtype, dtype)
        if work == dtype:
            return rule(ctx, source, operand, dtype=dtype, **params)
        source, operand = ctx.cast(source, work), ctx.cast(operand, work)
        return ctx.cast(rule(ctx, source, operand, dtype=work, **params), dtype)

    lower.__name__, lower.__doc__ = rule.__name__, rule.__doc__
    return lower


def select_and_gather_add(
    ctx,
    tangents,
    operand,
    *,
    select_prim,
    window_dimensions,
    window_strides,
    padding,
    base_dilation,
    window_dilation,
):
    """Per window, the tangent at the operand's selected (max for ge, min for le) element.

    XLA's pair reduction from the initial (-inf or inf, 0): a running selection
    over the window offsets (strided Slices) that moves on where ``not
    select(best, v)``, carrying the tangent along with Where; the first extremum
    wins ties, NaN is taken as JAX takes it.
    """
    keep = _keep(ctx, select_prim)
    fill = _select_fill(select_prim, ctx.avals_in[1].dtype)
    if fill.dtype == np.bool_:  # ONNX compares no bools: False < True as 0 < 1
        operand, fill = ctx.cast(operand, np.uint8), fill.astype(np.uint8)
    dtype = np.dtype(ctx.avals_in[0].dtype)
    work = np.dtype(np.uint8) if dtype == np.bool_ else dtype  # ORT has no bool Where
    tangents = ctx.cast(tangents, work)
    zero = np.asarray(0, work)
    shape = list(ctx.avals_in[1].shape)
    out_shape = list(ctx.avals_out[0].shape)
    v, pshape = dilate(ctx, operand, shape, base_dilation, fill)
    v, pshape = _pad(ctx, v, pshape, padding, fill)
    t, tshape = dilate(ctx, tangents, shape, base_dilation, zero)
    t, _ = _pad(ctx, t, tshape, padding, zero)
    best_v, best_t = ctx.const(fill), ctx.const(zero)
    for _, _, take in _window_slices(
        ctx, pshape, out_shape, window_dimensions, window_strides, window_dilation
    ):
        vk, tk = take(v), take(t)
        moved = ctx.op.Not(keep(best_v, vk))
        best_v, best_t = ctx.op.Where(moved, vk, best_v), ctx.op.Where(moved, tk, best_t)
    return ctx.cast(best_t, dtype)


def _selection(ctx, operand, select_prim, windows, strides, padding, dtype):
    """XLA's selection per window: the offset number it picks, padded shape, offsets, axes.

    The window's first element, then move on where ``not select(best, v)``: a
    running Where over strided Slices of the padded operand, recording the
    number of the window offset (row-major) it stands on.
    """
    keep = _keep(ctx, select_prim)
    fill = _select_fill(select_prim, ctx.avals_in[1].dtype, dtype)
    shape = list(ctx.avals_in[1].shape)
    out_shape = list(ctx.avals_in[0].shape)
    v, pshape = _pad(ctx, operand, shape, padding, fill)
    axes = [a for a in range(len(shape)) if windows[a] > 1 or strides[a] > 1]
    best = index = None
    offsets = []
    for n, ks, take in _window_slices(ctx, pshape, out_shape, windows, strides, [1] * len(shape)):
        vk = take(v)
        offsets.append(ks)
        if best is None:
            best, index = vk, ctx.op.Expand(np.int64(0), ctx.shape(out_shape))
            continue
        moved = ctx.op.Not(keep(best, vk))
        best, index = ctx.where(moved, vk, best, dtype), ctx.op.Where(moved, np.int64(n), index)
    return index, pshape, offsets, axes


def select_and_scatter_add(
    ctx, source, operand, *, select_prim, window_dimensions, window_strides, padding, dtype
):
    """Each window's source value added at the operand's selected element.

    The selection (see ``_selection``) gives each window's offset; the offset
    becomes a flat index into the padded windowed axes (moved last and
    flattened), and ScatterElements(reduction="add") adds the source there, in
    window order. Padding is sliced off the result. Symbolic sizes along the
    windowed axes take the by-offset form, whose pads the graph computes.
    """
    windowed = [a for a, (w, s) in enumerate(zip(window_dimensions, window_strides)) if w * s > 1]
    sizes = [ctx.avals_in[i].shape[a] for i in (0, 1) for a in windowed]
    if _symbolic(*sizes, *(d for pair in padding for d in pair)):
        return select_and_scatter_add_by_offset(
            ctx,
            source,
            operand,
            select_prim=select_prim,
            window_dimensions=window_dimensions,
            window_strides=window_strides,
            padding=padding,
            dtype=dtype,
        )
    strides = window_strides
    padding = [(int(lo), int(hi)) for lo, hi in padding]
    index, pshape, offsets, axes = _selection(
        ctx, operand, select_prim, window_dimensions, strides, padding, dtype
    )
    out_shape = list(ctx.avals_in[0].shape)
    lead = [a for a in range(len(pshape)) if a not in axes]
    perm = lead + axes
    padded = [int(pshape[a]) for a in axes]
    outs = [int(out_shape[a]) for a in axes]
    pstrides = [int(np.prod(padded[i + 1 :])) for i in range(len(axes))]
    flat_offsets = np.asarray([np.dot(ks, pstrides) for ks in offsets], np.int64)
    grid = np.indices(outs).reshape(len(axes), -1) if axes else np.zeros((0, 1), np.int64)
    steps = np.asarray([strides[a] * st for a, st in zip(axes, pstrides)], np.int64)
    base = (grid * steps[:, None]).sum(axis=0).astype(np.int64)
    keep_lead = [0] * len(lead)
    if perm != sorted(perm):
        source, index = ctx.op.Transpose(source, perm=perm), ctx.op.Transpose(index, perm=perm)
    flat_shape = ctx.i64(keep_lead + [int(np.prod(outs))])
    source, index = ctx.op.Reshape(source, flat_shape), ctx.op.Reshape(index, flat_shape)
    position = ctx.op.Add(ctx.op.Gather(ctx.const(flat_offsets), index), ctx.const(base))
    zeros = ctx.op.Expand(
        np.asarray(0, dtype), ctx.shape([pshape[a] for a in lead] + [int(np.prod(padded))])
    )
    y = ctx.op.ScatterElements(zeros, position, source, axis=len(lead), reduction="add")
    y = ctx.op.Reshape(y, ctx.i64(keep_lead + padded))
    if perm != sorted(perm):
        y = ctx.op.Transpose(y, perm=[int(i) for i in np.argsort(perm)])
    y, _ = pad(ctx, y, pshape, [(-lo, -hi) for lo, hi in padding], np.asarray(0, dtype))
    return y


def select_and_scatter_add_by_offset(
    ctx, source, operand, *, select_prim, window_dimensions, window_strides, padding, dtype
):
    """select_and_scatter_add without ScatterElements' reduction (opsets 13..15), exact.

    Per window offset ``k`` the windows that selected ``k`` write to distinct
    elements, on a strided grid: the source and the selected offsets are
    dilated by the strides once (fill 0 and -1), then per offset the source
    where the offset is ``k`` (Where) is Padded into place (``k`` before, the
    rest after) and added. The offsets are added last to first: for one
    operand element, a later window reaches it with a smaller offset, so this
    adds each element's sources in window order, from 0, as XLA does.
    """
    zero = np.asarray(0, dtype)
    index, pshape, offsets, axes = _selection(
        ctx, operand, select_prim, window_dimensions, window_strides, padding, dtype
    )
    out_shape = list(ctx.avals_in[0].shape)
    source, dshape = dilate(ctx, source, out_shape, window_strides, zero)
    index, _ = dilate(ctx, index, out_shape, window_strides, np.int64(-1))
    y = None
    for n in reversed(range(len(offsets))):
        before = [0] * len(pshape)
        for a, k in zip(axes, offsets[n]):
            before[a] = k
        after = [
            0 if a not in axes else pshape[a] - dshape[a] - before[a] for a in range(len(pshape))
        ]
        part = ctx.where(ctx.op.Equal(index, np.int64(n)), source, zero, dtype)
        part = ctx.op.Pad(part, ctx.shape(before + after), zero)
        y = ctx.op.Add(part, zero) if y is None else ctx.op.Add(y, part)  # 0 + x: -0 is +0
    return _unpad(ctx, y, pshape, padding, zero)


def _max_pool_grad(pool=max_pool):
    return lambda x: jax.grad(lambda y: (pool(y) ** 2).sum())(x)


def _jvp(pool):
    return lambda x, t: jax.jvp(pool, (x,), (t,))[1]


def _pool_1d(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (3,), (2,), ((2, 1),))


def _weighted_grad(x, w):
    """Overlapping windows on many ties: up to 12 different weights added at one element."""
    pool = lambda y: lax.reduce_window(y, -jnp.inf, lax.max, (4, 3), (1, 2), ((2, 1), (0, 2)))  # noqa: E731
    return jax.vjp(pool, x)[1](w)[0]


def _scatter_bound(select_prim=lax.ge_p):
    """select_and_scatter_add bound directly (JAX defines it for every dtype; only float
    gradients reach it through jax.grad): overlapping windows, padding on one side."""
    return lambda t, x: lax.select_and_scatter_add_p.bind(
        t,
        x,
        select_prim=select_prim,
        window_dimensions=(1, 3),
        window_strides=(1, 2),
        padding=((0, 0), (1, 0)),
    )


_TIES_INT = (np.arange(14) * 7 % 5).reshape(2, 7)  # repeated values: ties pick the first


def _int_scatter_cases(opset=None):
    prefix = "opset13_" if opset else ""
    cases = [
        case(
            f"{prefix}scatter_{np.dtype(d).name}",
            _scatter_bound(lax.le_p if d == np.uint32 else lax.ge_p),
            [_TIES_INT.astype(d)[:, :3] * 40, _TIES_INT.astype(d)],  # int8 sums wrap
            opset=opset,
        )
        for d in (np.int8, np.uint8, np.int16, np.uint32, np.int32)
    ]
    bools = [_TIES_INT[:, :3] % 2 == 0, _TIES_INT % 3 == 0]
    return [*cases, case(f"{prefix}scatter_bool", _scatter_bound(), bools, opset=opset)]


# symbolic image sizes: the static variant at 6 x 6, then odd, even and 1
_BHW = ("B", "H", "W", 3)
_SIZES = {"B": (2, 1, 2, 3), "H": (6, 7, 4, 1), "W": (6, 5, 8, 3)}
_RNG = np.random.default_rng(7)
_TIED = _RNG.integers(0, 3, (9, 7)).astype(np.float64)
_WEIGHTS = _RNG.standard_normal((9, 4)) * 10.0 ** _RNG.uniform(-3, 3, (9, 4))
# sums in another order than XLA's (window order) differ in the last bits: compared exactly
_SUM_ORDER = dict(inputs=[_TIED, _WEIGHTS], tolerances={"float32": (0, 0), "float64": (0, 0)})


family.lowering(
    lax.select_and_scatter_add_p,
    min_opset=13,
    cases=lambda: [
        case(
            "opset13_max_pool_grad",
            _max_pool_grad(),
            [NHWC],
            opset=13,
            expect=["Pad -> Add"],
            counts={"ScatterElements": 0},
        ),
        case(
            "opset13_max_pool_grad_overlap",
            _max_pool_grad(lambda y: max_pool(y, strides=(1,) * 4)),
            [np.tile(TIES[None, :, :, None], (2, 1, 1, 3))],
            opset=13,
        ),
        case("opset13_min_pool_grad", _max_pool_grad(min_pool), [NHWC], opset=13),
        case("opset13_max_pool_grad_edges", _max_pool_grad(_pool_1d), [EDGES], opset=13),
        case("opset13_sum_order", _weighted_grad, opset=13, **_SUM_ORDER),
        *_int_scatter_cases(opset=13),
        case(
            "opset13_max_pool_grad_symbolic",
            _max_pool_grad(),
            [_BHW],
            opset=13,
            dim_sizes=_SIZES,
        ),
    ],
)(_widened(select_and_scatter_add_by_offset))

family.lowering(
    lax.select_and_scatter_add_p,
    min_opset=16,
    cases=lambda: [
        case("max_pool_grad", _max_pool_grad(), [NHWC], expect=["ScatterElements"]),
        case(
            "max_pool_grad_overlap",
            _max_pool_grad(lambda y: max_pool(y, strides=(1,) * 4)),
            [np.tile(TIES[None, :, :, None], (2, 1, 1, 3))],
        ),
        case("min_pool_grad", _max_pool_grad(min_pool), [NHWC]),
        case("max_pool_grad_1d", _max_pool_grad(_pool_1d), [(8,)]),
        case("max_pool_grad_edges", _max_pool_grad(_pool_1d), [EDGES]),
        case("sum_order", _weighted_grad, **_SUM_ORDER),
        *_int_scatter_cases(),
        # images of any size: SAME padding computed from H and W (odd and even), by offset
        case("max_pool_grad_symbolic", _max_pool_grad(), [_BHW], dim_sizes=_SIZES),
        case(
            "max_pool_grad_valid_symbolic",
            _max_pool_grad(lambda y: max_pool(y, window=(1, 2, 2, 1), padding="VALID")),
            [_BHW],
            dim_sizes=_SIZES,
        ),
        case("min_pool_grad_symbolic", _max_pool_grad(min_pool), [_BHW], dim_sizes=_SIZES),
    ],
)(_widened(select_and_scatter_add))

family.lowering(
    lax.select_and_gather_add_p,
    cases=lambda: [
        case("max_pool_jvp", _jvp(max_pool), [NHWC, NHWC]),
        case("min_pool_jvp", _jvp(min_pool), [NHWC, NHWC]),
        case(
            "jvp_ties",
            _jvp(lambda y: max_pool(y, strides=(1,) * 4)),
            [TIES[None, :, :, None], TIES[None, :, :, None] + 10.0],
        ),
        case("jvp_edges", _jvp(_pool_1d), [EDGES, np.arange(10.0)]),
        case("max_pool_jvp_symbolic", _jvp(max_pool), [_BHW, _BHW], dim_sizes=_SIZES),
        case(
            "jvp_dilated",
            _jvp(
                generic_window(
                    -jnp.inf,
                    lax.max,
                    (2, 2),
                    (1, 2),
                    [(1, 0), (0, 2)],
                    base_dilation=(2, 1),
                    window_dilation=(1, 2),
                )
            ),
            [(4, 6), (4, 6)],
        ),
    ],
)(select_and_gather_add)


register = family.register
