"""Reductions over any set of axes, and argmax/argmin.

ONNX Runtime's reduce kernels cover few dtypes (ReduceSum/ReduceProd: f16, f32,
f64, i32, i64; ReduceMax/ReduceMin/ArgMax/ArgMin: also i8 and u8), so other
dtypes are computed in a wider type where that is exact and cast back. Its
ReduceMax/ReduceMin/ArgMax/ArgMin skip NaNs (unlike JAX), so float inputs get an
explicit NaN check. The generic ``lax.reduce`` (a reducer of the user's) is in
:mod:`jax2onnx_lax.folds`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case, is_symbolic

family = Family("lax")


_INT64_MIN = np.iinfo(np.int64).min
_HALF_VARIANTS = ["f32", "f64", "bf16"]  # the float cases given half-precision variants
_HALF = ["f32", "f64", "bf16", "f16"]

_ORDERED = {  # for max/min/argmax/argmin; uint64 is handled by a bias into int64
    np.dtype(np.bool_): np.uint8,
    np.dtype(np.int16): np.int32,
    np.dtype(np.uint16): np.int32,
    np.dtype(np.uint32): np.int64,
}


class _Reducer:
    """Emits ``ReduceX(x, axes, keepdims=0)`` in the form the target opset takes.

    ReduceSum takes its axes as an input since opset 13, ReduceMax/Min/Prod since 18.
    """

    def __init__(self, ctx, axes_as_input: bool) -> None:
        self.ctx = ctx
        self.axes_as_input = axes_as_input

    def __call__(self, op_type: str, x, axes):
        op = getattr(self.ctx.op, op_type)
        if not axes:
            return self.ctx.op.Identity(x)
        axes = [int(a) for a in axes]  # batching hands NumPy ints; attributes take Python ints
        if self.axes_as_input or op_type == "ReduceSum":
            return op(x, self.ctx.i64(axes), keepdims=0)
        return op(x, axes=axes, keepdims=0)


def _two_forms(primitive, cases):
    """Register ``rule(ctx, x, reduce, **params)`` for opset 18+ and for opsets 13-17."""

    def declare(rule):
        def axes_as_inputs(ctx, x, **params):
            return rule(ctx, x, _Reducer(ctx, True), **params)

        def axes_as_attributes(ctx, x, **params):
            return rule(ctx, x, _Reducer(ctx, False), **params)

        for fn in (axes_as_inputs, axes_as_attributes):
            fn.__name__ = fn.__qualname__ = f"{rule.__name__}_{fn.__name__}"
            fn.__doc__ = rule.__doc__
        family.lowering(primitive, min_opset=18, cases=cases)(axes_as_inputs)
        family.lowering(primitive, min_opset=13)(axes_as_attributes)
        return rule

    return declare


def _dtype(ctx):
    return np.dtype(ctx.avals_in[0].dtype)


def _is_float(dtype) -> bool:
    return np.issubdtype(dtype, np.floating) or dtype == np.dtype(ml_dtypes.bfloat16)


def _may_be_empty(ctx, axes) -> bool:
    shape = ctx.avals_in[0].shape
    return any(is_symbolic(shape[a]) or int(shape[a]) == 0 for a in axes)


def _ordered(ctx, x, dtype):
    """``x`` in a dtype ORT compares, with the same order; and the map back."""
    if dtype == np.uint64:  # u - 2**63 keeps the order in int64 (wrapping add)
        shifted = ctx.op.Add(ctx.cast(x, np.int64), np.int64(_INT64_MIN))
        return shifted, lambda y: ctx.cast(ctx.op.Sub(y, np.int64(_INT64_MIN)), dtype)
    wide = _ORDERED.get(dtype)
    if wide is None:
        return x, lambda y: y
    return ctx.cast(x, wide), lambda y: ctx.cast(y, dtype)


def _nan_flags(ctx, reduce, x, axes):
    """(bool: any NaN over ``axes``, uint8 NaN mask) for float ``x``."""
    mask = ctx.cast(ctx.op.IsNaN(x), np.uint8)
    return ctx.cast(reduce("ReduceMax", mask, axes), np.bool_), mask


def _extreme(ctx, reduce, op_type, x, axes):
    """ReduceMax/ReduceMin with JAX's NaN propagation and empty-axis identities."""
    dtype = _dtype(ctx)
    if not axes:
        return ctx.op.Identity(x)
    xc, back = _ordered(ctx, x, dtype)
    y = reduce(op_type, xc, axes)
    if _is_float(dtype):
        any_nan, _ = _nan_flags(ctx, reduce, x, axes)
        y = ctx.op.Where(any_nan, ctx.const(np.asarray(np.nan, y.dtype.numpy())), y)
    elif dtype in _ORDERED and dtype != np.bool_ and _may_be_empty(ctx, axes):
        info = np.iinfo(dtype)  # an empty reduction gives the wide type's identity
        wide = _ORDERED[dtype]
        if op_type == "ReduceMax":
            y = ctx.op.Max(y, np.asarray(info.min, wide))
        else:
            y = ctx.op.Min(y, np.asarray(info.max, wide))
    return back(y)


def _arithmetic(ctx, reduce, op_type, x, axes):
    """Floats: one ReduceSum/ReduceProd. Integers: exact int64 arithmetic, cast back.

    ORT's integer ReduceSum/ReduceProd accumulate in double: inexact past 2**53 and
    saturating where JAX wraps. So the reduced axes are moved last and flattened
    (Transpose, Reshape [0, .., -1]); a sum is a MatMul with ones, a product a
    halving fold of Mul (both wrap in int64, and casting back wraps like JAX).
    A product over a symbolic axis falls back to ReduceProd in int64 (exact while
    the product stays within 2**53).
    """
    dtype = _dtype(ctx)
    if not axes:
        return ctx.op.Identity(x)
    if _is_float(dtype):
        return reduce(op_type, x, axes)
    shape = ctx.avals_in[0].shape
    kept = [a for a in range(len(shape)) if a not in axes]
    flat = ctx.cast(x, np.int64)
    if kept + list(axes) != list(range(len(shape))):
        flat = ctx.op.Transpose(flat, perm=kept + list(axes))
    flat = ctx.op.Reshape(flat, ctx.i64([0] * len(kept) + [-1] if kept else [1, -1]))
    size = _product(shape[a] for a in axes)
    if op_type == "ReduceSum":
        ones = ctx.op.Expand(np.ones((1, 1), np.int64), ctx.shape([size, 1]))
        y = ctx.op.MatMul(flat, ones)
    elif is_symbolic(size) or size == 0:
        y = reduce("ReduceProd", flat, [max(len(kept), 1)])
    else:
        y = _mul_fold(ctx, flat, size, max(len(kept), 1))
    return ctx.cast(ctx.op.Reshape(y, ctx.i64([0] * len(kept))), dtype)


def _product(dims):
    total = 1
    for d in dims:
        total = total * d
    return total


def _mul_fold(ctx, flat, size, axis):
    """Product over the static last axis of ``flat`` by halving with Mul (log2 steps)."""
    while size > 1:
        half = size // 2
        lo = ctx.op.Slice(flat, ctx.i64([0]), ctx.i64([half]), ctx.i64([axis]))
        hi = ctx.op.Slice(flat, ctx.i64([half]), ctx.i64([2 * half]), ctx.i64([axis]))
        folded = ctx.op.Mul(lo, hi)
        if size % 2:
            rest = ctx.op.Slice(flat, ctx.i64([2 * half]), ctx.i64([size]), ctx.i64([axis]))
            folded = ctx.op.Concat(folded, rest, axis=axis)
        flat, size = folded, half + size % 2
    return flat


_NAN_ROWS = np.array([[1.0, np.nan, 3.0], [np.nan, 2.0, np.inf], [-np.inf, 0.0, -0.0]])
_EDGE_INTS = {
    np.int8: [[-128, 127, 5], [100, 100, 3]],
    np.int16: [[-32768, 32767, 5], [300, 300, 3]],
    np.uint16: [[65535, 0, 9], [40000, 40000, 7]],
    np.uint32: [[4294967295, 0, 9], [3000000000, 3000000000, 7]],
    np.uint64: [[2**64 - 1, 0, 9], [2**63, 2**63 + 5, 7]],
    np.int64: [[-(2**63), 2**63 - 1, 5], [2**62, 2**62, 3]],
}


def _edge(dtype):
    return np.array(_EDGE_INTS[dtype], dtype)


def _x64(dtype) -> dict:
    return {"variants": ["f64"]} if np.dtype(dtype).itemsize == 8 else {}


def _int_cases(prefix, fn, dtypes):
    return [case(f"{prefix}_{np.dtype(d).name}", fn, [_edge(d)], **_x64(d)) for d in dtypes]


def _sum(axes):
    return lambda x: lax.reduce_sum_p.bind(x, axes=axes, out_sharding=None)


@family.lowering(
    lax.reduce_sum_p,
    min_opset=13,
    cases=lambda: [
        case(
            "sum_last",
            lambda x: jnp.sum(x, axis=-1),
            [("B", 4)],
            expect=["ReduceSum:B"],
            variants=_HALF,
        ),
        case("sum_all", jnp.sum, [(3, 4)]),
        case("sum_outer", lambda x: jnp.sum(x, axis=(0, 2)), [("B", 3, 4)]),
        case("sum_int", lambda x: jnp.sum(x, axis=0), [np.array([[1, 2], [3, 4]], np.int32)]),
        case("sum_no_axes", _sum(()), [(3,)]),
        case("sum_no_axes_int8", _sum(()), [_edge(np.int8)]),
        case("sum_empty_dim", _sum((1,)), [(3, 0)]),
        case("sum_opset17", _sum((0,)), [(3, 4)], opset=17),
        case("sum_f16", _sum((1,)), [(3, 4)], dtypes=[np.float16]),
        *_int_cases("sum", _sum((1,)), [np.int8, np.int16, np.uint16, np.uint32, np.uint64]),
        *_int_cases("sum", _sum((0, 1)), [np.int64]),
        case("sum_uint8", _sum((0,)), [(4, 3)], dtypes=[np.uint8], input_range=(200, 256)),
        case("sum_int32_wraps", _sum((1,)), [np.array([[2**30 + 1, 2**30, 2**30, 7]], np.int32)]),
        case("sum_int_symbolic_axis", _sum((0,)), [("B", 3)], dtypes=[np.int32]),
        case("sum_int_inner_axes", _sum((0, 2)), [(2, "B", 3)], dtypes=[np.int16]),
        case("sum_int_empty_dim", _sum((1,)), [(2, 0)], dtypes=[np.int32]),
    ],
)
def reduce_sum(ctx, x, *, axes, **_):
    """ReduceSum; 8/16-bit and unsigned ints summed in int32/int64 and cast back (wraps)."""
    return _arithmetic(ctx, _Reducer(ctx, True), "ReduceSum", x, axes)


def _prod(axes):
    return lambda x: lax.reduce_prod_p.bind(x, axes=axes, out_sharding=None)


@_two_forms(
    lax.reduce_prod_p,
    cases=lambda: [
        case("prod_last", lambda x: jnp.prod(x, axis=-1), [("B", 4)], expect=["ReduceProd:B"]),
        case("prod_all", jnp.prod, [(2, 3)], input_range=(0.5, 1.5), variants=_HALF_VARIANTS),
        case("prod_opset17", _prod((0,)), [(3, 4)], opset=17),
        case("prod_no_axes", _prod(()), [(3,)]),
        case("prod_empty_dim", _prod((0,)), [(0, 3)]),
        case("prod_nan", _prod((1,)), [_NAN_ROWS]),
        case("prod_int32_wraps", _prod((1,)), [np.array([[65536, 65536, 3]], np.int32)]),
        *_int_cases("prod", _prod((1,)), [np.int8, np.int16, np.uint16, np.uint32, np.uint64]),
        case("prod_uint8", _prod((0,)), [(4, 3)], dtypes=[np.uint8], input_range=(1, 256)),
        case("prod_int_odd_fold", _prod((0, 2)), [(7, "B", 3)], dtypes=[np.int32]),
        case("prod_int_all", _prod((0, 1)), [(5, 3)], dtypes=[np.int8]),
        case("prod_int_symbolic_axis", _prod((0,)), [("B", 3)], dtypes=[np.int32]),
        case("prod_int_empty_dim", _prod((1,)), [(2, 0)], dtypes=[np.int32]),
        case("prod_vmap_opset17", jax.vmap(jnp.prod), [("B", 3)], opset=17),
    ],
)
def reduce_prod(ctx, x, reduce, *, axes, **_):
    """ReduceProd; 8/16-bit and unsigned ints multiplied in int32/int64 and cast back (wraps)."""
    return _arithmetic(ctx, reduce, "ReduceProd", x, axes)


def _extreme_cases(name, fn, prim_fn):
    def bind(axes):
        return lambda x: prim_fn.bind(x, axes=axes, out_sharding=None)

    return [
        case(
            f"{name}_last",
            lambda x: fn(x, axis=-1),
            [("B", 4)],
            expect=[f"Reduce{name} -> Where:B"],
            variants=_HALF_VARIANTS,
        ),
        case(f"{name}_all", fn, [(3, 4)]),
        case(f"{name}_opset17", lambda x: fn(x, axis=0), [(3, 4)], opset=17),
        case(f"{name}_int", lambda x: fn(x, axis=1), [np.array([[1, 5], [3, -4]], np.int32)]),
        case(f"{name}_nan", bind((1,)), [_NAN_ROWS], variants=_HALF_VARIANTS),
        case(f"{name}_nan_columns", bind((0,)), [_NAN_ROWS]),
        case(f"{name}_nan_opset17", bind((1,)), [_NAN_ROWS], opset=17),
        case(f"{name}_no_axes", bind(()), [(3,)]),
        case(f"{name}_empty_dim", bind((1,)), [(2, 0)]),
        case(f"{name}_f16", bind((0,)), [(3, 4)], dtypes=[np.float16]),
        case(f"{name}_bool", bind((1,)), [("B", 4)], dtypes=[np.bool_]),
        case(f"{name}_bool_empty", bind((1,)), [(2, 0)], dtypes=[np.bool_]),
        case(f"{name}_uint8", bind((0, 1)), [(3, 4)], dtypes=[np.uint8]),
        *_int_cases(name, bind((1,)), list(_EDGE_INTS)),
        *[
            case(f"{name}_empty_{np.dtype(d).name}", bind((1,)), [(2, 0)], dtypes=[d], **_x64(d))
            for d in (np.int8, np.int16, np.uint16, np.uint32, np.uint64)
        ],
        case(f"{name}_empty_symbolic", bind((1,)), [(2, "B")], dtypes=[np.int16]),
        # vmap hands NumPy-int axes: the opset-17 form puts them in an attribute
        case(f"{name}_vmap_opset17", jax.vmap(fn), [("B", 4)], opset=17),
    ]


@_two_forms(lax.reduce_max_p, cases=lambda: _extreme_cases("Max", jnp.max, lax.reduce_max_p))
def reduce_max(ctx, x, reduce, *, axes, **_):
    """ReduceMax, made to propagate NaN like JAX (Where over an IsNaN check)."""
    return _extreme(ctx, reduce, "ReduceMax", x, axes)


@_two_forms(lax.reduce_min_p, cases=lambda: _extreme_cases("Min", jnp.min, lax.reduce_min_p))
def reduce_min(ctx, x, reduce, *, axes, **_):
    """ReduceMin, made to propagate NaN like JAX (Where over an IsNaN check)."""
    return _extreme(ctx, reduce, "ReduceMin", x, axes)


def _bool_fold(ctx, reduce, kind, b, axes):
    """and -> ReduceMin, or -> ReduceMax over uint8; xor -> parity of a ReduceSum."""
    if kind == "xor":
        count = reduce("ReduceSum", ctx.cast(b, np.int64), axes)
        return ctx.cast(ctx.op.Mod(count, np.int64(2)), np.bool_)
    op_type = "ReduceMin" if kind == "and" else "ReduceMax"
    return ctx.cast(reduce(op_type, ctx.cast(b, np.uint8), axes), np.bool_)


def _logical(ctx, reduce, kind, x, axes):
    """Bool: one reduction (see ``_bool_fold``). Integers: bit planes.

    An integer is cast to uint64 (sign-extending), split into its ``n`` bits along a
    new last axis (BitShift, Mod 2), each bit plane folded as a bool, and the bits
    summed back with their two's-complement weights by a MatMul in int64 (the top
    bit of a signed type weighs ``-2**(n-1)``). Loop-free and exact for every int dtype.
    """
    dtype = _dtype(ctx)
    if not axes:
        return ctx.op.Identity(x)
    if dtype == np.bool_:
        return _bool_fold(ctx, reduce, kind, x, axes)
    n = dtype.itemsize * 8
    rank = len(ctx.avals_in[0].shape)
    wide = ctx.op.Unsqueeze(ctx.cast(x, np.uint64), ctx.i64([rank]))
    shifted = ctx.op.BitShift(wide, np.arange(n, dtype=np.uint64), direction="RIGHT")
    planes = ctx.cast(ctx.op.Mod(shifted, np.uint64(2)), np.bool_)
    folded = _bool_fold(ctx, reduce, kind, planes, axes)
    weights = [1 << b for b in range(n)]
    if np.issubdtype(dtype, np.signedinteger) or n == 64:
        weights[-1] = -(1 << (n - 1))
    value = ctx.op.MatMul(ctx.cast(folded, np.int64), np.asarray(weights, np.int64))
    return ctx.cast(value, dtype)


_BOOLS = np.array([[True, True, False], [True, True, True], [False, False, False]])


def _logical_cases(kind, prim):
    def bind(axes):
        return lambda x: prim.bind(x, axes=axes)

    return [
        case(f"{kind}_bool", bind((1,)), [("B", 4)], dtypes=[np.bool_]),
        case(f"{kind}_bool_rows", bind((1,)), [_BOOLS]),
        case(f"{kind}_bool_all", bind((0, 1)), [(3, 4)], dtypes=[np.bool_]),
        case(f"{kind}_bool_opset17", bind((0,)), [_BOOLS], opset=17),
        case(f"{kind}_bool_empty_dim", bind((1,)), [(2, 0)], dtypes=[np.bool_]),
        case(f"{kind}_no_axes", bind(()), [_BOOLS]),
        case(f"{kind}_int32_symbolic", bind((0,)), [("B", 3)], dtypes=[np.int32]),
        case(f"{kind}_uint8", bind((1,)), [(3, 5)], dtypes=[np.uint8], input_range=(0, 256)),
        case(f"{kind}_int_opset17", bind((1,)), [_edge(np.int16)], opset=17),
        case(f"{kind}_int_empty_dim", bind((1,)), [(2, 0)], dtypes=[np.int32]),
        *_int_cases(kind, bind((1,)), list(_EDGE_INTS)),
    ]


@_two_forms(lax.reduce_and_p, cases=lambda: _logical_cases("and", lax.reduce_and_p))
def reduce_and(ctx, x, reduce, *, axes, **_):
    """Logical/bitwise and; see ``_logical``."""
    return _logical(ctx, reduce, "and", x, axes)


@_two_forms(lax.reduce_or_p, cases=lambda: _logical_cases("or", lax.reduce_or_p))
def reduce_or(ctx, x, reduce, *, axes, **_):
    """Logical/bitwise or; see ``_logical``."""
    return _logical(ctx, reduce, "or", x, axes)


@_two_forms(lax.reduce_xor_p, cases=lambda: _logical_cases("xor", lax.reduce_xor_p))
def reduce_xor(ctx, x, reduce, *, axes, **_):
    """Logical/bitwise xor (parity); see ``_logical``."""
    return _logical(ctx, reduce, "xor", x, axes)


def _arg(ctx, reduce, op_type, x, axes, index_dtype):
    """ArgMax/ArgMin (first index on ties); the first NaN wins, as in JAX."""
    dtype = _dtype(ctx)
    axis = int(axes[0])  # a NumPy int under vmap: attributes take Python ints
    xc, _ = _ordered(ctx, x, dtype)
    index = getattr(ctx.op, op_type)(xc, axis=axis, keepdims=0, select_last_index=0)
    if _is_float(dtype):
        any_nan, mask = _nan_flags(ctx, reduce, x, axes)
        first_nan = ctx.op.ArgMax(mask, axis=axis, keepdims=0, select_last_index=0)
        index = ctx.op.Where(any_nan, first_nan, index)
    if np.dtype(index_dtype) != np.int64:
        index = ctx.cast(index, index_dtype)
    return index


_TIES = np.array([[2.0, 7.0, 7.0, 1.0], [-0.0, 0.0, -1.0, -1.0], [np.nan, 1.0, np.nan, 9.0]])


def _arg_cases(name, op_type, fn, prim):
    def bind(axis, index_dtype=np.int32):
        return lambda x: prim.bind(x, axes=(axis,), index_dtype=index_dtype)

    return [
        case(
            f"{name}_last",
            lambda x: fn(x, axis=-1),
            [("B", 4)],
            expect=[op_type],
            variants=_HALF_VARIANTS,
        ),
        case(f"{name}_first", lambda x: fn(x, axis=0), [("B", 4)]),
        case(f"{name}_opset17", bind(1), [(3, 4)], opset=17),
        case(f"{name}_nan", bind(1), [_NAN_ROWS]),
        case(f"{name}_nan_columns", bind(0), [_NAN_ROWS]),
        case(f"{name}_ties", bind(1), [_TIES], variants=_HALF_VARIANTS),
        case(f"{name}_index_int64", bind(1, np.int64), [_TIES], variants=["f64"]),
        case(f"{name}_f16", bind(1), [(3, 4)], dtypes=[np.float16]),
        case(f"{name}_bool", bind(1), [_BOOLS]),
        case(f"{name}_bool_columns", bind(0), [("B", 4)], dtypes=[np.bool_]),
        case(f"{name}_bool_vmap", jax.vmap(lambda x: fn(x > 0)), [(3, 5)]),
        case(f"{name}_bool_vmap_opset17", jax.vmap(lambda x: fn(x > 0)), [("B", 5)], opset=17),
        case(f"{name}_vmap_axis", jax.vmap(lambda x: fn(x, axis=0), in_axes=1), [(4, "B")]),
        case(f"{name}_int32", bind(0), [("B", 3)], dtypes=[np.int32]),
        case(f"{name}_uint8", bind(1), [(3, 5)], dtypes=[np.uint8], input_range=(0, 4)),
        *_int_cases(name, bind(1), list(_EDGE_INTS)),
    ]


@_two_forms(lax.argmax_p, cases=lambda: _arg_cases("argmax", "ArgMax", jnp.argmax, lax.argmax_p))
def argmax(ctx, x, reduce, *, axes, index_dtype):
    """ArgMax, with a Where picking the first NaN (ArgMax of an IsNaN mask) like JAX."""
    return _arg(ctx, reduce, "ArgMax", x, axes, index_dtype)


@_two_forms(lax.argmin_p, cases=lambda: _arg_cases("argmin", "ArgMin", jnp.argmin, lax.argmin_p))
def argmin(ctx, x, reduce, *, axes, index_dtype):
    """ArgMin, with a Where picking the first NaN (ArgMax of an IsNaN mask) like JAX."""
    return _arg(ctx, reduce, "ArgMin", x, axes, index_dtype)


register = family.register
