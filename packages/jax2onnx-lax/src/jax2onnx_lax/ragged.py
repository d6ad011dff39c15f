"""ragged_dot_general (``jax.lax.ragged_dot``, mixture-of-experts layers) as a masked dot.

Rows of the ragged dimension belong to consecutive groups whose sizes are a
runtime input. The export builds, from the running sum of the group sizes, a
mask saying which group each position belongs to, zeroes the other groups'
copies of the operand and contracts the group axis like any other contracting
axis: one ``dot_general`` (a MatMul) over ``g`` times the data. That is exact
(out-of-group terms are exact zeros, rows outside every group are zero, as in
JAX), needs no Loop and no data-dependent shapes, and costs ``g`` times a plain
product: reasonable for the tens of experts such layers have.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case, is_symbolic
from jax2onnx_lax._complex import join, parts

family = Family("lax")


def _in_group(ctx, sizes: Any, rank: int, size_axes: Sequence[int], ragged: Any, group: int):
    """Bool mask, broadcastable to rank ``rank``: "the position along ``ragged`` is in the group".

    ``sizes`` (its aval is the equation's third input) has its leading axes along
    ``size_axes`` and its groups along ``group``; ``ragged`` is ``(axis, size)``.
    Group ``j`` holds positions ``[end_j - size_j, end_j)`` with ``end`` the
    running sum of the sizes, computed in int64.
    """
    aval = ctx.avals_in[2]
    if np.dtype(aval.dtype) != np.int64:
        sizes = ctx.cast(sizes, np.int64)
    ends = ctx.op.CumSum(sizes, np.asarray(aval.ndim - 1, np.int64))
    starts = ctx.op.Sub(ends, sizes)
    targets = [*size_axes, group]
    order = [int(i) for i in np.argsort(targets)]
    missing = [i for i in range(rank) if i not in targets]
    bounds = []
    for v in (starts, ends):
        v = ctx.transpose(v, order)
        bounds.append(ctx.op.Unsqueeze(v, ctx.i64(missing)) if missing else v)
    axis, size = ragged
    spread = [size if i == axis else 1 for i in range(rank)]
    if is_symbolic(size):
        count = ctx.op.Squeeze(ctx.dim(size), ctx.i64([0]))
        pos = ctx.op.Range(0, count, 1)
        pos = ctx.op.Unsqueeze(pos, ctx.i64([i for i in range(rank) if i != axis]))
    else:
        pos = ctx.const(np.arange(size, dtype=np.int64).reshape(spread))
    return ctx.op.And(ctx.op.LessOrEqual(bounds[0], pos), ctx.op.Less(pos, bounds[1]))


def _grouped(ctx, x, aval, sizes, group: int, size_axes: Sequence[int], ragged: int):
    """``x`` with a group axis at ``group``: copy ``j`` keeps group ``j``'s rows, zeros elsewhere.

    ``size_axes`` and ``ragged`` are axes of ``x``. Returns the value and its shape.
    """
    up = lambda a: a + (a >= group)  # noqa: E731
    shape = list(aval.shape)
    shape.insert(group, ctx.avals_in[2].shape[-1])
    mask = _in_group(
        ctx, sizes, len(shape), [up(a) for a in size_axes], (up(ragged), aval.shape[ragged]), group
    )
    expanded = ctx.op.Unsqueeze(x, ctx.i64([group]))
    zero = np.zeros((), aval.dtype)
    return ctx.where(mask, expanded, zero, aval.dtype), shape


def _dot(ctx, a, a_spec, b, b_spec, dims, preferred_element_type):
    """``lax.dot_general`` of two values, lowered by the loaded dot_general rule."""
    specs = [jax.ShapeDtypeStruct(tuple(shape), dtype) for shape, dtype in (a_spec, b_spec)]
    product = lambda x, y: lax.dot_general(  # noqa: E731
        x, y, dims, preferred_element_type=preferred_element_type
    )
    (out,) = ctx.inline(ctx.trace(product, *specs), [a, b])
    return out


def _moe(x, experts, sizes):
    return lax.ragged_dot(x, experts, sizes)


def _grads(x, experts, sizes):
    loss = lambda a, b: (lax.ragged_dot(a, b, sizes) ** 2).sum()  # noqa: E731
    return jax.grad(loss, argnums=(0, 1))(x, experts)


def _ragged_contracting(x, y, sizes):
    dims = lax.RaggedDotDimensionNumbers((((0,), (0,)), ((), ())), (0,), ())
    return lax.ragged_dot_general(x, y, sizes, dims)


def _ragged_batch(x, y, sizes):
    dims = lax.RaggedDotDimensionNumbers((((2,), (1,)), ((0,), (0,))), (0,), ())
    return lax.ragged_dot_general(x, y, sizes, dims)


def _transposed_lhs(x, experts, sizes):  # lhs as [k, m], experts as [k, g, n]
    dims = lax.RaggedDotDimensionNumbers((((0,), (0,)), ((), ())), (1,), (1,))
    return lax.ragged_dot_general(x, experts, sizes, dims)


_SIZES = np.array([2, 0, 3], np.int32)  # an empty group; rows past 5 are in none
_M = {"M": (6, 4, 9)}


@family.lowering(
    "ragged_dot_general",
    cases=lambda: [
        case(
            "ragged_dot",
            _moe,
            [("M", 4), (3, 4, 5), _SIZES],
            dim_sizes=_M,
            expect=["Where -> Reshape -> MatMul:Mx5"],
            counts={"Einsum": 0, "Loop": 0},
        ),
        case(
            "ragged_dot_int64_sizes",
            _moe,
            [(7, 4), (4, 4, 2), np.array([0, 3, 3, 0], np.int64)],
            variants=["f64"],
        ),
        case(
            "ragged_dot_all_empty",
            _moe,
            [(3, 4), (2, 4, 5), np.array([0, 0], np.int32)],
        ),
        case(
            "ragged_dot_overfull",  # the sizes add up past m: the last group is cut off
            _moe,
            [("M", 4), (2, 4, 5), np.array([1, 9], np.int32)],
        ),
        case(
            "ragged_dot_int32",
            _moe,
            [(5, 4), (3, 4, 2), _SIZES],
            dtypes=[np.int32, np.int32, None],
            input_range=(-50, 50),
        ),
        case("ragged_dot_f16", _moe, [(5, 4), (3, 4, 2), _SIZES], dtypes=[np.float16] * 2 + [None]),
        case(
            "ragged_dot_int8_to_int32",
            lambda x, w, g: lax.ragged_dot(x, w, g, preferred_element_type=jnp.int32),
            [(5, 8), (3, 8, 2), _SIZES],
            dtypes=[np.int8, np.int8, None],
            input_range=(-128, 128),
        ),
        case("ragged_dot_grads", _grads, [("M", 4), (3, 4, 5), _SIZES], dim_sizes=_M),
        case(
            "ragged_contracting",
            _ragged_contracting,
            [("M", 4), ("M", 5), _SIZES],
            dim_sizes=_M,
            expect=["Where -> MatMul:3x4x5"],
        ),
        case(
            "ragged_batch",
            _ragged_batch,
            [(3, 2, 4), (3, 4, 5), _SIZES],
            expect=["MatMul:3x2x5"],
            no_unused_inputs=False,  # JAX ignores the sizes of a ragged batch axis
        ),
        case("transposed_lhs", _transposed_lhs, [(4, "M"), (4, 3, 5), _SIZES], dim_sizes=_M),
        case(
            "vmapped",
            jax.vmap(_moe),
            [(2, 6, 4), (2, 3, 4, 5), np.array([[2, 0, 3], [0, 6, 0]], np.int32)],
        ),
    ],
)
def ragged_dot_general(
    ctx, lhs, rhs, sizes, *, ragged_dot_dimension_numbers, preferred_element_type=None, **params
):
    """ragged_dot_general -> group mask (CumSum, LessOrEqual, Less, And) + Where + a MatMul.

    The masked operand gets a group axis (broadcast by Where, no Expand), placed
    next to the contracting axes so the product, lowered by the dot_general
    rule, is one MatMul over ``g * k`` (ragged non-contracting axis:
    ``ragged_dot``) or a MatMul batched over groups (ragged contracting axis: the
    experts' gradient). A ragged batch axis is a plain dot_general, as in JAX.
    """
    if params.get("group_offset") is not None:
        raise ctx.error("ragged_dot_general with group_offset is not supported (nor by JAX on CPU)")
    dims = ragged_dot_dimension_numbers
    if len(dims.lhs_ragged_dimensions) != 1:
        raise ctx.error("ragged_dot_general needs exactly one lhs ragged dimension")
    (lc, rc), (lb, rb) = (tuple(map(list, p)) for p in dims.dot_dimension_numbers)
    (ragged,) = dims.lhs_ragged_dimensions
    lhs_aval, rhs_aval, sizes_aval = ctx.avals_in
    many = sizes_aval.ndim > 1  # sizes per batch/outer position, else shared
    free = [a for a in range(lhs_aval.ndim) if a not in lc and a not in lb]
    pet = preferred_element_type
    rhs_spec = (rhs_aval.shape, rhs_aval.dtype)
    if ragged in free:  # [b.., m.., k..] x [g, b.., k.., n..] -> [b.., m.., n..]
        group = min(lc) if lc else lhs_aval.ndim  # next to k: no Transpose before the MatMul
        prefix = lb + free[: free.index(ragged)] if many else []
        masked, shape = _grouped(ctx, lhs, lhs_aval, sizes, group, prefix, ragged)
        up = lambda axes: [a + (a >= group) for a in axes]  # noqa: E731
        (rg,) = dims.rhs_group_dimensions
        product = (([group, *up(lc)], [rg, *rc]), (up(lb), rb))
        return _dot(ctx, masked, (shape, lhs_aval.dtype), rhs, rhs_spec, product, pet)
    if ragged in lc:  # [b.., m.., k..] x [b.., k.., n..] -> [g, b.., m.., n..]
        i = lc.index(ragged)
        a, a_shape = _grouped(ctx, lhs, lhs_aval, sizes, 0, lb + lc[:i] if many else [], ragged)
        b, b_shape = _grouped(ctx, rhs, rhs_aval, sizes, 0, rb + rc[:i] if many else [], rc[i])
        up = lambda axes: [a + 1 for a in axes]  # noqa: E731
        product = ((up(lc), up(rc)), ([0, *up(lb)], [0, *up(rb)]))
        return _dot(ctx, a, (a_shape, lhs_aval.dtype), b, (b_shape, rhs_aval.dtype), product, pet)
    # a ragged batch axis: JAX computes the plain product and ignores the sizes
    lhs_spec = (lhs_aval.shape, lhs_aval.dtype)
    return _dot(ctx, lhs, lhs_spec, rhs, rhs_spec, ((lc, rc), (lb, rb)), pet)


def _complex_ragged(x, y, sizes, *, dims, preferred_element_type):
    """Four real ragged products of the parts (stored arrays ``[..., 2]`` in and out)."""
    (xr, xi), (yr, yi) = ([jnp.squeeze(p, -1) for p in parts(a)] for a in (x, y))
    dot = lambda a, b: lax.ragged_dot_general(  # noqa: E731
        a, b, sizes, dims, preferred_element_type=preferred_element_type
    )
    re, im = dot(xr, yr) - dot(xi, yi), dot(xr, yi) + dot(xi, yr)
    return join(re[..., None], im[..., None])


@family.lowering(
    "ragged_dot_general",
    values="complex",
    cases=lambda: [
        case(
            "complex_ragged_dot",
            _moe,
            [("M", 4), (3, 4, 5), _SIZES],
            dtypes=[np.complex64, np.complex64, None],
            dim_sizes=_M,
        ),
        case(
            "complex_ragged_contracting",
            _ragged_contracting,
            [("M", 4), ("M", 5), _SIZES],
            dtypes=[np.complex64, np.complex64, None],
            dim_sizes=_M,
        ),
    ],
)
def complex_ragged_dot_general(
    ctx, lhs, rhs, sizes, *, ragged_dot_dimension_numbers, preferred_element_type=None, **params
):
    """Complex parts multiplied as ``(a + ib)(c + id)``: four real ragged_dot_generals."""
    if params.get("group_offset") is not None:
        raise ctx.error("ragged_dot_general with group_offset is not supported (nor by JAX on CPU)")
    if preferred_element_type is not None:
        preferred_element_type = np.finfo(preferred_element_type).dtype
    return ctx.decompose(
        _complex_ragged,
        lhs,
        rhs,
        sizes,
        stored=True,
        dims=ragged_dot_dimension_numbers,
        preferred_element_type=preferred_element_type,
    )


register = family.register
