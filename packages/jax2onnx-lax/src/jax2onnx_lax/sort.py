"""sort, top_k and the approximate top-k primitives.

All three become ONNX ``TopK`` over the whole axis (or ``k`` of it) followed by
``GatherElements``. ONNX's TopK breaks ties by the lower index (ONNX Runtime
honours this for ``largest`` 0 and 1), which gives JAX's stable order, but it
orders NaNs arbitrarily and only takes some dtypes. So each key becomes one or
more *levels*: tensors TopK compares correctly, whose lexicographic order is
JAX's order. Several levels (several sort keys, or a float64 key) are sorted
least significant first, one stable TopK pass each, composing the permutation.

Float keys (JAX's orders):

- ``sort`` -- ``-inf < ... < inf < NaN``, ``-0.0 == 0.0``, every NaN equal.
- ``top_k`` -- IEEE total order: ``-0.0 < 0.0`` and NaN above ``inf``.

A float16/bfloat16/float32 key widens exactly to float32/float64, where the
values beyond the narrow type's range encode the special cases in one level
(``inf`` -> the wide maximum, NaN -> ``inf``, and for ``top_k`` ``-0.0`` -> minus
the wide type's smallest subnormal). A float64 key has no wider type and uses
extra levels instead (a NaN flag, the value, and for ``top_k`` a sign-of-zero
flag).
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case

family = Family("lax")


_INT64_MIN = np.iinfo(np.int64).min
_BF16 = ["f32", "f64", "bf16"]  # the float cases given half-precision variants
_HALF = ["f32", "f64", "bf16", "f16"]
_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
# integer dtype -> dtype ONNX Runtime's TopK compares it in, with the same order
_INT_KEY = {
    np.dtype(np.bool_): np.uint8,
    np.dtype(np.uint16): np.int32,
    np.dtype(np.uint32): np.int64,
}
_WIDER = {
    np.dtype(np.float16): np.float32,
    _BFLOAT16: np.float32,
    np.dtype(np.float32): np.float64,
}


def _is_float(dtype) -> bool:
    return np.issubdtype(dtype, np.floating) or dtype == _BFLOAT16


def _levels(ctx, x, dtype, *, total_order: bool) -> list:
    """TopK-comparable tensors, most significant first, ordering ``x`` as JAX does."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        raise ctx.error("sorting complex numbers is not supported")
    if dtype == np.uint64:  # u - 2**63 keeps the order in int64 (wrapping add)
        return [ctx.op.Add(ctx.cast(x, np.int64), np.int64(_INT64_MIN))]
    if not _is_float(dtype):
        wide = _INT_KEY.get(dtype)
        return [x if wide is None else ctx.cast(x, wide)]
    wide = _WIDER.get(dtype)
    if wide is not None:
        return [_widened_key(ctx, x, np.dtype(wide), total_order)]
    nan = ctx.op.IsNaN(x)
    levels = [ctx.cast(nan, np.uint8), ctx.op.Where(nan, ctx.const(0, dtype), x)]
    if total_order:  # 1 for everything but -0.0, so -0.0 sorts below 0.0
        levels.append(ctx.cast(ctx.op.Not(_negative_zero(ctx, x, dtype)), np.uint8))
    return levels


def _widened_key(ctx, x, wide, total_order):
    w = ctx.cast(x, wide)
    top = ctx.const(np.finfo(wide).max, wide)
    key = ctx.op.Where(ctx.op.Equal(w, ctx.const(np.inf, wide)), top, w)
    key = ctx.op.Where(ctx.op.IsNaN(w), ctx.const(np.inf, wide), key)
    if total_order:
        tiny = ctx.const(-np.finfo(wide).smallest_subnormal, wide)
        key = ctx.op.Where(_negative_zero(ctx, w, wide), tiny, key)
    return key


def _negative_zero(ctx, x, dtype):
    zero = ctx.const(0, dtype)
    inverse = ctx.op.Div(ctx.const(1, dtype), x)
    return ctx.op.And(ctx.op.Equal(x, zero), ctx.op.Less(inverse, zero))


def _order(ctx, levels, axis, n, *, largest):
    """The stable permutation (int64) ordering ``levels`` lexicographically along ``axis``."""
    perm = None
    for level in reversed(levels):
        key = level if perm is None else ctx.op.GatherElements(level, perm, axis=axis)
        _, idx = ctx.op.TopK(key, n, axis=axis, largest=int(largest), sorted=1, _outputs=2)
        perm = idx if perm is None else ctx.op.GatherElements(perm, idx, axis=axis)
    return perm


def _select(ctx, x, levels, axis, k, *, largest):
    """(values, int64 indices) of the first ``k`` of ``x`` in the order of ``levels``.

    One level is one TopK of ``k``; several take a full stable order, then Slice.
    """
    n = ctx.avals_in[0].shape[axis]
    if len(levels) == 1:
        values, idx = ctx.op.TopK(
            levels[0], ctx.dim(k), axis=axis, largest=int(largest), sorted=1, _outputs=2
        )
        if levels[0] is not x:
            values = ctx.op.GatherElements(x, idx, axis=axis)
        return values, idx
    idx = _order(ctx, levels, axis, ctx.dim(n), largest=largest)
    if str(k) != str(n):
        idx = ctx.op.Slice(idx, ctx.i64([0]), ctx.dim(k), ctx.i64([axis]))
    return ctx.op.GatherElements(x, idx, axis=axis), idx


def _sort_operands(num_keys):
    return lambda *xs: lax.sort(xs, num_keys=num_keys)


_NAN_ROWS = np.array(
    [[1.0, np.nan, -0.0, 3.0, np.inf, 0.0], [np.nan, -np.inf, 0.0, np.inf, -0.0, np.nan]]
)
_TIES = np.array([[2.0, 1.0, 2.0, 1.0, 0.0, 2.0], [3.0, 3.0, -1.0, -1.0, 3.0, 3.0]])
# for approx_top_k with k = 1: NaN first, in the middle, last; ties of equal values and of
# 0.0 with -0.0 after the last NaN
_NAN_TIES = np.array(
    [
        [np.nan, 1.0, 2.0, 2.0, 0.0, 0.0],
        [2.0, 2.0, np.nan, -0.0, 0.0, -0.0],
        [1.0, 2.0, 0.0, 3.0, -1.0, np.nan],
        [-np.inf, np.nan, -np.inf, 1.0, -np.inf, 1.0],
    ]
)


def _x64(dtype) -> dict:
    return {"variants": ["f64"]} if np.dtype(dtype).itemsize == 8 else {}


def _int_sort_cases():
    cases = []
    for dtype in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64):
        info = np.iinfo(dtype)
        row = np.array([info.max, info.min, 0, 1, info.max, info.min, 1], dtype)
        cases.append(
            case(f"sort_{np.dtype(dtype).name}", lambda x: jnp.sort(x), [row], **_x64(dtype))
        )
    return cases


@family.lowering(
    lax.sort_p,
    cases=lambda: [
        case("sort_last", jnp.sort, [("B", 5)], expect=["TopK", "GatherElements:Bx5"]),
        case("sort_axis0", lambda x: jnp.sort(x, axis=0), [(5, "B")]),
        case("sort_symbolic_axis", lambda x: jnp.sort(x, axis=0), [("B", 3)]),
        case("sort_descending", lambda x: jnp.sort(x, descending=True), [_NAN_ROWS]),
        case("argsort_descending", lambda x: jnp.argsort(x, descending=True), [_TIES]),
        case("sort_middle", lambda x: jnp.sort(x, axis=1), [(2, 4, 3)]),
        case("sort_nan", lambda x: jnp.sort(x, axis=-1), [_NAN_ROWS], variants=_BF16),
        case("sort_nan_axis0", lambda x: jnp.sort(x, axis=0), [_NAN_ROWS]),
        case("argsort", lambda x: jnp.argsort(x, axis=-1), [_TIES]),
        case("argsort_nan", lambda x: jnp.argsort(x, axis=-1), [_NAN_ROWS], variants=_BF16),
        case("argsort_symbolic", lambda x: jnp.argsort(x, axis=0), [(6, "B")], dtypes=[np.int32]),
        case("argsort_negated", lambda x: jnp.argsort(-x, axis=-1), [_NAN_ROWS]),
        case("sort_negated", lambda x: -jnp.sort(-x), [_TIES]),
        case("carry_operand", _sort_operands(1), [_TIES, _NAN_ROWS]),
        case("two_keys", _sort_operands(2), [_TIES, _NAN_ROWS], variants=_BF16),
        case(
            "three_keys_mixed",
            _sort_operands(3),
            [
                np.array([[1, 1, 0, 1, 0, 1], [2, 2, 2, 2, 2, 2]], np.int32),
                np.array([[1.0, 1.0, 2.0, 1.0, np.nan, 0.0], [0.0, -0.0, 0.0, 1.0, 1.0, 0.0]]),
                np.array([[True, False, True, False, True, False]] * 2),
                np.array([[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]], np.uint8),
            ],
        ),
        case("unstable", lambda x: lax.sort(x, is_stable=False), [("B", 4)]),
        case("sort_bool", jnp.sort, [np.array([[True, False, True, False]])]),
        case("sort_f16", jnp.sort, [_NAN_ROWS.astype(np.float16)], variants=["f32"]),
        *_int_sort_cases(),
    ],
)
def sort(ctx, *operands, dimension, is_stable, num_keys):
    """Stable TopK passes over the key levels (see the module), then GatherElements.

    ``is_stable=False`` is served by the stable order too. Extra operands are
    permuted with the keys by GatherElements.
    """
    del is_stable
    x = operands[0]
    n = ctx.avals_in[0].shape[dimension]
    levels = []
    for key, aval in zip(operands[:num_keys], ctx.avals_in):
        levels.extend(_levels(ctx, key, aval.dtype, total_order=False))
    values, perm = _select(ctx, x, levels, dimension, n, largest=False)
    return [values, *(ctx.op.GatherElements(y, perm, axis=dimension) for y in operands[1:])]


_TOP_ROWS = np.array(
    [[1.0, np.nan, -0.0, 3.0, np.inf, 0.0, 3.0], [0.0, -np.inf, -0.0, np.inf, -0.0, np.nan, 0.0]]
)


@family.lowering(
    lax.top_k_p,
    cases=lambda: [
        case("top_k", lambda x: lax.top_k(x, 3), [("B", 6)], expect=["TopK", "GatherElements:Bx3"]),
        case("top_k_ties_nan", lambda x: lax.top_k(x, 5), [_TOP_ROWS], variants=_HALF),
        case("top_k_all", lambda x: lax.top_k(x, 7), [_TOP_ROWS]),
        case("top_k_axis0", lambda x: lax.top_k(x, 2, axis=0), [(4, "B")]),
        case("top_k_int8", lambda x: lax.top_k(x, 3), [(2, 6)], dtypes=[np.int8]),
        case("top_k_uint32", lambda x: lax.top_k(x, 3), [(2, 6)], dtypes=[np.uint32]),
        case(
            "top_k_uint64",
            lambda x: lax.top_k(x, 2),
            [np.array([2**64 - 1, 0, 2**63, 2**63 - 1, 2**64 - 1], np.uint64)],
            variants=["f64"],
        ),
        case("top_k_bool", lambda x: lax.top_k(x, 2), [np.array([False, True, False, True])]),
        case(
            "top_k_negative_nan",
            lambda x: lax.top_k(x, 3),
            [np.array([2.0, -np.nan, 1.0])],
            xfail="JAX orders a NaN with the sign bit set (x86's 0/0) below -inf; ONNX below "
            "opset 26 has no op that reads a NaN's sign, so every NaN ranks above inf",
        ),
    ],
)
def top_k(ctx, x, *, k, axis=-1, **_):
    """TopK (largest, lower index first on ties) on levels in IEEE total order.

    JAX's top_k ranks ``-0.0`` below ``0.0`` and NaN above ``inf``; see the module.
    Several levels (float64) take a full stable order, then Slice the first ``k``.
    """
    axis = axis % len(ctx.avals_in[0].shape)
    levels = _levels(ctx, x, ctx.avals_in[0].dtype, total_order=True)
    values, idx = _select(ctx, x, levels, axis, k, largest=True)
    return values, ctx.cast(idx, np.int32)


@family.lowering(
    lax.approx_top_k_p,
    cases=lambda: [
        case(
            "approx_max_k",
            lambda x: lax.approx_max_k(x, 3),
            [("B", 8)],
            expect=["TopK", "GatherElements:Bx3"],
        ),
        case("approx_min_k", lambda x: lax.approx_min_k(x, 3), [("B", 8)]),
        case("approx_min_k_ties", lambda x: lax.approx_min_k(x, 4), [_TIES], variants=_BF16),
        case(
            "approx_max_k_dim0",
            lambda x: lax.approx_max_k(x, 2, reduction_dimension=0),
            [(6, "B")],
        ),
        case(
            "approx_max_k_unaggregated",
            lambda x: lax.approx_max_k(x, 2, aggregate_to_topk=False),
            [(3, 5)],
        ),
        case("approx_max_k_one_ties", lambda x: lax.approx_max_k(x, 1), [_TIES], variants=_HALF),
        case("approx_min_k_one_ties", lambda x: lax.approx_min_k(x, 1), [_TIES], variants=_HALF),
        case("approx_max_k_one_nan", lambda x: lax.approx_max_k(x, 1), [_NAN_TIES], variants=_HALF),
        case("approx_min_k_one_nan", lambda x: lax.approx_min_k(x, 1), [_NAN_TIES], variants=_HALF),
        case(
            "approx_min_k_one_dim0",
            lambda x: lax.approx_min_k(x, 1, reduction_dimension=0),
            [_NAN_TIES.T.copy()],
            variants=_HALF,
        ),
        case("approx_max_k_one_symbolic", lambda x: lax.approx_max_k(x, 1), [(3, "B")]),
    ],
)
def approx_top_k(ctx, x, *, k, reduction_dimension, is_max_k, **_):
    """The exact top-k, a valid answer for the approximate primitive (as JAX's CPU gives).

    The output size along the axis is taken from the result (``aggregate_to_topk=False``
    may keep more than ``k``). Keys compare as ``sort`` orders them (``-0.0 == 0.0``;
    NaN above ``inf``), equal keys in index order. JAX on CPU sorts with an unstable sort
    (C++ ``std::sort``): up to 16 elements that is an insertion sort, whose order of ties
    is this one; beyond, ties come in an order only that algorithm knows, and NaNs where
    its comparisons leave them. A single result (``k = 1``) is :func:`_approx_top_1`.
    """
    axis = reduction_dimension % len(ctx.avals_in[0].shape)
    size = ctx.avals_out[0].shape[axis]
    if k == 1 and size == 1:
        return _approx_top_1(ctx, x, axis, largest=is_max_k)
    levels = _levels(ctx, x, ctx.avals_in[0].dtype, total_order=False)
    values, idx = _select(ctx, x, levels, axis, size, largest=is_max_k)
    return values, ctx.cast(idx, np.int32)


def _approx_top_1(ctx, x, axis, *, largest):
    """approx_max_k/approx_min_k with ``k = 1``, as XLA's CPU computes it: a reduction
    that folds ``(value, index)`` pairs in index order, keeping the accumulator only where
    it compares strictly greater (less): the *last* of equal extremes wins (``-0.0 ==
    0.0``). A NaN is taken (nothing compares greater than it) and then dropped by the
    next element (it compares greater than nothing), so the result is the extreme of the
    elements after the last NaN, or that NaN when it is the last element.

    Here: the elements up to the last NaN become -inf (+inf for the minimum), the axis is
    reversed so that TopK's first-of-equals is the last, and the index is mapped back.
    """
    shape = ctx.avals_in[0].shape
    dtype = np.dtype(ctx.avals_in[0].dtype)
    key = x
    if _is_float(dtype):
        trailing = len(shape) - axis - 1
        pos = ctx.arange(shape[axis])
        if trailing:
            pos = ctx.op.Unsqueeze(pos, ctx.i64(list(range(1, trailing + 1))))
        nan_at = ctx.op.Where(ctx.op.IsNaN(x), pos, ctx.i64(-1))
        last_nan = ctx.op.ReduceMax(nan_at, ctx.i64([axis]), keepdims=1)
        beyond = ctx.const(-np.inf if largest else np.inf, dtype)
        key = ctx.where(ctx.op.Greater(pos, last_nan), x, beyond)
    backwards = ctx.op.Slice(
        key, ctx.i64([-1]), ctx.i64([_INT64_MIN]), ctx.i64([axis]), ctx.i64([-1])
    )
    levels = _levels(ctx, backwards, dtype, total_order=False)
    _, idx = _select(ctx, backwards, levels, axis, 1, largest=largest)
    idx = ctx.op.Sub(ctx.op.Sub(ctx.dim(shape[axis]), ctx.i64(1)), idx)
    return ctx.op.GatherElements(x, idx, axis=axis), ctx.cast(idx, np.int32)


register = family.register
