"""Binary arithmetic, comparisons, clamp and selection.

ONNX Runtime (CPU) has no kernel for some dtypes; those are computed in a
wider dtype where that is exact and cast back (``ctx.kernel_dtype``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case
from jax2onnx_lax._casedata import INTS, edges, int_cases, x64

family = Family("lax")
_BF16 = np.dtype(jnp.bfloat16)
_HALF = ["f32", "f64", "bf16", "f16"]


def _binary(ctx, op_type: str, x, y, dtype, **attrs):
    """One ``op_type`` node on operands of ``dtype``, widened where ORT has no kernel."""
    dtype = np.dtype(dtype)
    wide = ctx.kernel_dtype(op_type, dtype)
    if wide == dtype:
        return getattr(ctx.op, op_type)(x, y, **attrs)
    out = getattr(ctx.op, op_type)(ctx.cast(x, wide), ctx.cast(y, wide), **attrs)
    return out if op_type in _COMPARISONS else ctx.cast(out, dtype)


_COMPARISONS = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"}


def _op(op_type: str, **attrs):
    def lower(ctx, x, y, **_):
        return _binary(ctx, op_type, x, y, ctx.avals_in[0].dtype, **attrs)

    lower.__name__ = lower.__qualname__ = op_type.lower()
    lower.__doc__ = f"One {op_type} node (in a wider dtype where ONNX Runtime lacks the kernel)."
    return lower


for _prim, _op_type in (
    (lax.add_p, "Add"),
    (lax.sub_p, "Sub"),
    (lax.mul_p, "Mul"),
    (lax.eq_p, "Equal"),
    (lax.lt_p, "Less"),
    (lax.le_p, "LessOrEqual"),
    (lax.gt_p, "Greater"),
    (lax.ge_p, "GreaterOrEqual"),
):
    family.lowering(_prim)(_op(_op_type))


@family.lowering("add_any")
def add_any(ctx, x, y):
    """add_any (autodiff's sum of cotangents) -> Add; Or for bool, as XLA adds predicates."""
    if np.dtype(ctx.avals_in[0].dtype) == np.bool_:
        return ctx.op.Or(x, y)
    return _op("Add")(ctx, x, y)


@family.lowering(lax.ne_p)
def ne(ctx, x, y):
    """ne -> Not(Equal): ONNX has no NotEqual."""
    return ctx.op.Not(_op("Equal")(ctx, x, y))


@family.lowering(lax.max_p)
def max_(ctx, x, y):
    """max -> Max (propagates NaN like lax.max); Or for bool."""
    return ctx.maximum(x, y, ctx.avals_in[0].dtype)


@family.lowering(lax.min_p)
def min_(ctx, x, y):
    """min -> Min (propagates NaN like lax.min); And for bool."""
    return ctx.minimum(x, y, ctx.avals_in[0].dtype)


def _nonzero_constant(ctx, y, signed: bool) -> bool:
    """True when the divisor is a constant without 0 (and without -1 for signed ints)."""
    if y.const_value is None:
        return False
    values = y.const_value.numpy()
    return bool(np.all(values != 0) and (not signed or np.all(values != -1)))


def _safe_divisor(ctx, y, dtype):
    """``y`` with the divisors ORT's integer division fails on replaced by 1, and ``y == 0``.

    ORT raises on ``x / 0`` and idiv traps (SIGFPE) on ``INT_MIN / -1``, so -1 is
    replaced too for signed ints; the callers patch those elements afterwards.
    """
    is_zero = ctx.op.Equal(y, np.zeros((), dtype))
    bad = is_zero
    if dtype.kind == "i":
        bad = ctx.op.Or(is_zero, ctx.op.Equal(y, np.asarray(-1, dtype)))
    return ctx.where(bad, np.ones((), dtype), y, dtype), is_zero


@family.lowering(lax.div_p)
def div(ctx, x, y):
    """div -> Div; integers truncate toward zero in both. With a variable integer divisor,
    ``x / 0`` is -1 (all bits set, as XLA on CPU gives) and ``x / -1`` is ``0 - x`` with
    wraparound (``INT_MIN / -1 == INT_MIN``), patched in by Where."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    if dtype.kind not in "iu" or _nonzero_constant(ctx, y, dtype.kind == "i"):
        return _op("Div")(ctx, x, y)
    safe, is_zero = _safe_divisor(ctx, y, dtype)
    out = ctx.op.Div(x, safe)
    if dtype.kind == "i":
        minus_one = ctx.op.Equal(y, np.asarray(-1, dtype))
        out = ctx.where(minus_one, ctx.op.Sub(np.zeros((), dtype), x), out, dtype)
    return ctx.where(is_zero, np.asarray(-1).astype(dtype), out, dtype)


@family.lowering(lax.rem_p)
def rem(ctx, x, y):
    """rem -> Mod(fmod=1): the result has the sign of the dividend (C fmod / %), as in JAX.
    Integer ``x % 0`` is ``x`` as XLA on CPU gives, guarded like div."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    if dtype.kind not in "iu":
        return _op("Mod", fmod=1)(ctx, x, y)
    if _nonzero_constant(ctx, y, dtype.kind == "i"):
        return _int_rem(ctx, x, y, dtype)
    safe, is_zero = _safe_divisor(ctx, y, dtype)
    return ctx.where(is_zero, x, _int_rem(ctx, x, safe, dtype), dtype)


def _int_rem(ctx, x, y, dtype):
    """Truncated remainder; 64-bit as ``x - (x / y) * y``: ORT's 64-bit Mod goes through
    double and loses low bits."""
    if dtype.itemsize == 8:
        return ctx.op.Sub(x, ctx.op.Mul(ctx.op.Div(x, y), y))
    return ctx.op.Mod(x, y, fmod=1)


def _signbit(ctx, x):
    """True where the sign bit is set, -0.0 included (1 / -0.0 == -inf)."""
    return ctx.op.Or(ctx.op.Less(x, 0.0), ctx.op.Less(ctx.op.Reciprocal(x), 0.0))


def _atan_unit_f64(ctx, t):
    """atan(t) for t in [0, 1] in float64 (ORT has no float64 Atan).

    Two half-angle steps ``atan(t) = 2 atan(t / (1 + sqrt(1 + t^2)))`` bring t under
    tan(pi/16) ~ 0.199, where the Taylor series to t^23 is below float64 rounding.
    """
    for _ in range(2):
        t = ctx.op.Div(t, ctx.op.Add(ctx.op.Sqrt(ctx.op.Add(ctx.op.Mul(t, t), 1.0)), 1.0))
    w = ctx.op.Mul(t, t)
    poly = ctx.const(np.float64(-1.0 / 23.0))
    for k in range(10, 0, -1):
        poly = ctx.op.Add(ctx.op.Mul(poly, w), (-1.0) ** k / (2 * k + 1))
    poly = ctx.op.Add(ctx.op.Mul(poly, w), 1.0)
    return ctx.op.Mul(ctx.op.Mul(t, poly), 4.0)


@family.lowering(lax.atan2_p)
def atan2(ctx, y, x):
    """atan2 -> Atan of min(|x|,|y|) / max(|x|,|y|) in [0, 1], then quadrant fix-ups by
    Where (ONNX has no Atan2). Signed zeros and infinities follow C atan2 as JAX does:
    atan2(+-0, -0) = +-pi, atan2(+-inf, +-inf) = +-pi/4 or +-3pi/4. float64 uses a series
    (no float64 Atan kernel in ORT); float16/bfloat16 compute in float32 like XLA."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    if dtype.itemsize < 4:
        f32 = np.dtype(np.float32)
        return ctx.cast(_atan2(ctx, ctx.cast(y, f32), ctx.cast(x, f32), f32), dtype)
    return _atan2(ctx, y, x, dtype)


def _atan2(ctx, y, x, dtype):
    one, zero = np.ones((), dtype), np.zeros((), dtype)
    a, b = ctx.op.Abs(x), ctx.op.Abs(y)
    big, small = ctx.op.Max(a, b), ctx.op.Min(a, b)
    ratio = ctx.op.Div(small, ctx.op.Where(ctx.op.Equal(big, zero), one, big))
    ratio = ctx.op.Where(ctx.op.And(ctx.op.IsInf(a), ctx.op.IsInf(b)), one, ratio)
    theta = _atan_unit_f64(ctx, ratio) if dtype == np.float64 else ctx.op.Atan(ratio)
    right = ctx.op.Sub(np.asarray(np.pi / 2, dtype), theta)
    theta = ctx.op.Where(ctx.op.Greater(b, a), right, theta)
    theta = ctx.op.Where(_signbit(ctx, x), ctx.op.Sub(np.asarray(np.pi, dtype), theta), theta)
    return ctx.op.Where(_signbit(ctx, y), ctx.op.Neg(theta), theta)


@family.lowering(lax.clamp_p)
def clamp(ctx, lo, x, hi):
    """clamp -> Clip when both bounds are scalars that cannot be NaN (Clip ignores a NaN
    bound, lax.clamp propagates it), otherwise Min(Max(x, lo), hi)."""
    dtype = np.dtype(ctx.avals_in[1].dtype)
    scalar = ctx.avals_in[0].ndim == 0 and ctx.avals_in[2].ndim == 0
    numeric = dtype.kind in "iu" or jnp.issubdtype(dtype, jnp.floating)  # bfloat16 too
    if scalar and numeric and _not_nan(lo) and _not_nan(hi):
        wide = ctx.kernel_dtype("Clip", dtype)
        if wide == dtype:
            return ctx.op.Clip(x, lo, hi)
        return ctx.cast(ctx.op.Clip(*(ctx.cast(v, wide) for v in (x, lo, hi))), dtype)
    return ctx.minimum(ctx.maximum(x, lo, dtype), hi, dtype)


def _not_nan(v) -> bool:
    if v.dtype is not None and not v.dtype.is_floating_point():
        return True
    return v.const_value is not None and not np.any(np.isnan(v.const_value.numpy()))


@family.lowering(lax.select_n_p)
def select_n(ctx, which, *cases):
    """select_n -> Where (bool predicate) or a chain of Where(Equal(which, i)) for n > 2,
    in a wider dtype for the case dtypes ORT's Where lacks."""
    if len(cases) == 1:
        return ctx.op.Identity(cases[0])
    dtype = np.dtype(ctx.avals_out[0].dtype)
    wide = ctx.kernel_dtype("Where", dtype)
    if wide != dtype:
        cases = [ctx.cast(c, wide) for c in cases]
    which_dtype = ctx.avals_in[0].dtype
    if which_dtype == np.bool_ and _negative_zero(cases[1]):
        result = _signed_where(ctx, which, cases[1].const_value.numpy(), cases[0])
    elif which_dtype == np.bool_:
        result = ctx.op.Where(which, cases[1], cases[0])
    else:
        result = cases[-1]
        for i in range(len(cases) - 2, -1, -1):
            hit = ctx.op.Equal(which, np.asarray(i, which_dtype))
            result = ctx.op.Where(hit, cases[i], result)
    return result if wide == dtype else ctx.cast(result, dtype)


def _signed_where(ctx, which, x: np.ndarray, y):
    """``Where(which, x, y)`` for a constant ``x`` holding -0.0: ONNX Runtime's Where gives
    +0.0 for a -0.0 of its first branch, so the magnitudes are selected and the signs
    multiplied in (exact: ``|x| * -1`` is ``x``, ``y * 1`` is ``y``, NaN included)."""
    negative = np.signbit(x)
    magnitude = np.where(negative, -x, x).astype(x.dtype)
    sign = np.where(negative, -1, 1).astype(x.dtype)
    chosen = ctx.op.Where(which, ctx.const(magnitude), y)
    return ctx.op.Mul(chosen, ctx.op.Where(which, ctx.const(sign), np.ones((), x.dtype)))


def _negative_zero(value) -> bool:
    """Whether ``value`` is a float constant holding a -0.0."""
    array = None if value.const_value is None else value.const_value.numpy()
    if array is None or array.dtype.kind != "f":
        return False
    return bool(np.any((array == 0) & np.signbit(array)))


_F16 = [
    np.array([0.5, -1.25, 3.0, np.nan, 60000.0, -0.0], np.float16),
    np.array([2.0, 0.75, -3.0, 1.0, 60000.0, 0.0], np.float16),
]
_BOOLS = [np.array([True, True, False, False]), np.array([True, False, True, False])]
_NAN_PAIR = [np.array([np.nan, 1.0, 2.0], np.float32), np.array([0.0, np.nan, 1.0], np.float32)]
_SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-30, 3.5], np.float32)
_SPECIAL_PAIRS = [np.repeat(_SPECIAL, len(_SPECIAL)), np.tile(_SPECIAL, len(_SPECIAL))]


def _float_cases(name: str, fn, **kw) -> list:
    return [
        case(name, fn, [("B", 4), ("B", 4)], variants=["f32", "f64", "bf16"], **kw),
        case(f"{name}_special", fn, _SPECIAL_PAIRS, variants=["f32", "f64", "bf16"]),
        case(f"{name}_f16", fn, _F16, variants=["f32"]),
    ]


family.add_cases(
    lax.add_p,
    lambda: [
        case("add_scalar_literal", lambda x: x + 1.5, [("B", 3)]),
        *_float_cases("add", lax.add),
        *int_cases("add", lax.add),
    ],
)
family.add_cases(
    "add_any", lambda: [case("grad_fanout", jax.grad(lambda x: (jnp.tanh(x) * x).sum()), [(4,)])]
)
family.add_cases(lax.sub_p, lambda: [*_float_cases("sub", lax.sub), *int_cases("sub", lax.sub)])
family.add_cases(
    lax.mul_p,
    lambda: [
        case("mul_graph", lax.mul, [(2, 3), (2, 3)], expect=["Mul:2x3"]),
        *_float_cases("mul", lax.mul),
        *int_cases("mul", lax.mul),
    ],
)
family.add_cases(
    lax.div_p,
    lambda: [
        *_float_cases("div", lax.div, input_range=(0.5, 3.0)),
        case(
            "div_int_truncates",
            lax.div,
            [np.array([7, -7, 7, -7], np.int32), np.array([2, 2, -2, -2], np.int32)],
        ),
        case(
            "div_int_const",
            lambda x: lax.div(x, np.int32(3)),
            [(4,)],
            dtypes=[np.int32],
            counts={"Where": 0},
        ),
        *int_cases("div", lax.div),
    ],
)
family.add_cases(
    lax.rem_p,
    lambda: [
        *_float_cases("rem", lax.rem, input_range=(0.5, 3.0)),
        case("rem_signs", lax.rem, [np.array([5.5, -5.5, 5.5, -5.5]), np.array([2, 2, -2, -2.0])]),
        case(
            "rem_int_const",
            lambda x: lax.rem(x, np.int8(3)),
            [(4,)],
            dtypes=[np.int8],
            counts={"Where": 0},
        ),
        *int_cases("rem", lax.rem),
    ],
)


def _extremum_cases(prim, fn):
    return [
        *_float_cases(prim.name, fn),
        case(f"{prim.name}_nan", fn, _NAN_PAIR),
        case(f"{prim.name}_bool", fn, _BOOLS),
        *int_cases(prim.name, fn),
    ]


def _comparison_cases(prim, fn):
    return [
        *_float_cases(prim.name, fn),
        case(f"{prim.name}_bool", fn, _BOOLS),
        *int_cases(prim.name, fn),
    ]


for _prim, _fn in ((lax.max_p, lax.max), (lax.min_p, lax.min)):
    family.add_cases(_prim, functools.partial(_extremum_cases, _prim, _fn))
for _prim, _fn in (
    (lax.eq_p, lax.eq),
    (lax.ne_p, lax.ne),
    (lax.lt_p, lax.lt),
    (lax.le_p, lax.le),
    (lax.gt_p, lax.gt),
    (lax.ge_p, lax.ge),
):
    family.add_cases(_prim, functools.partial(_comparison_cases, _prim, _fn))
family.add_cases(
    lax.atan2_p,
    lambda: [
        case("atan2", lax.atan2, [("B", 5), ("B", 5)], variants=["f32", "f64", "bf16"]),
        case("atan2_special", lax.atan2, _SPECIAL_PAIRS),
        case(
            "atan2_wide_range",
            lax.atan2,
            [
                np.geomspace(1e-300, 1e300, 41) * np.tile([1, -1], 21)[:41],
                np.geomspace(1e300, 1e-300, 41),
            ],
            variants=["f64"],
        ),
        case("atan2_f16", lax.atan2, _F16, variants=["f32"]),
    ],
)


def _clamp_scalar(x):
    return lax.clamp(np.asarray(-0.5, x.dtype), x, np.asarray(0.5, x.dtype))


family.add_cases(
    lax.clamp_p,
    lambda: [
        case("clamp_scalar", _clamp_scalar, [("B", 4)], expect=["Clip"], variants=_HALF),
        case("clamp_scalar_nan_x", _clamp_scalar, [_SPECIAL]),
        case(
            "clamp_arrays",
            lax.clamp,
            [(2, 3), (2, 3), (2, 3)],
            counts={"Clip": 0},
            variants=["f32", "f64", "bf16"],
        ),
        case("clamp_lo_above_hi", lambda x: lax.clamp(1.0, x, -1.0), [(5,)]),
        case("clamp_variable_bounds", lax.clamp, [(), ("B", 3), ()], counts={"Clip": 0}),
        case(
            "clamp_nan_bound",
            lambda x: lax.clamp(np.asarray(np.nan, x.dtype), x, np.asarray(1, x.dtype)),
            [(3,)],
        ),
        case(
            "clamp_f16",
            lambda x: lax.clamp(np.float16(-1), x, np.float16(1)),
            [_F16[0]],
            variants=["f32"],
        ),
        *[
            case(
                f"clamp_{np.dtype(d).name}",
                lambda lo, x, hi: lax.clamp(lo, x, hi),
                [edges(d)[1:2].reshape(()), edges(d), edges(d)[-3:-2].reshape(())],
                variants=x64(d),
            )
            for d in INTS
        ],
        *[
            case(
                f"clamp_arrays_{np.dtype(d).name}",
                lax.clamp,
                [
                    np.full(len(edges(d)), edges(d)[1]),
                    edges(d),
                    np.full(len(edges(d)), edges(d)[-3]),
                ],
                variants=x64(d),
            )
            for d in (np.int16, np.uint16, np.uint64)
        ],
    ],
)
family.add_cases(
    lax.select_n_p,
    lambda: [
        case(
            "select_bool",
            lambda p, a, b: lax.select_n(p, a, b),
            [np.array([True, False, True]), (3,), (3,)],
        ),
        case(
            "select_int3",
            lambda p, a, b, c: lax.select_n(p, a, b, c),
            [np.array([0, 1, 2, 1], np.int32), (4,), (4,), (4,)],
        ),
        case(
            "relu_like",
            lambda x: lax.select_n(x > 0, -x, x),
            [("B", 3)],
            variants=["f32", "f64", "bf16"],
        ),
        case("select_bool_cases", lambda p, a, b: lax.select_n(p, a, b), [_BOOLS[0], *_BOOLS]),
        case(  # a -0.0 constant keeps its sign (compared by bits)
            "where_negative_zero",
            lambda c, y: lax.bitcast_convert_type(
                jnp.where(c, -0.0, y), jnp.int32 if y.dtype == np.float32 else jnp.int64
            ),
            [np.array([True, False, True, False]), np.array([1.0, -0.0, 0.0, 2.0], np.float32)],
        ),
        *[
            case(
                f"select_{np.dtype(d).name}",
                lambda p, a, b, c: lax.select_n(p, a, b, c),
                [
                    np.array([0, 1, 2, 0, 1, 2, 2, 0, 1, 0, 1], np.int32)[: len(edges(d))],
                    edges(d),
                    edges(d)[::-1],
                    edges(d) // 2,
                ],
                variants=x64(d),
            )
            for d in INTS
        ],
    ],
)


# -- total-order comparisons (lax.eq_to / le_to / lt_to) ----------------------------


def _total_order(ctx, x, y, kind):
    """JAX's total order on floats: -0.0 < +0.0 and NaN above +inf (all NaNs equal).

    ``a < b`` on non-NaN values, with a tie between zeros broken by the sign bit;
    a NaN is above every number. ONNX cannot read a NaN's sign below opset 26, so
    a negative NaN (which JAX orders below -inf) counts as positive here.
    Integers and bools use the plain comparison.
    """
    dtype = np.dtype(ctx.avals_in[0].dtype)
    plain = {"lt": "Less", "le": "LessOrEqual", "eq": "Equal"}[kind]
    if dtype.kind not in "f" and dtype != _BF16:
        return _binary(ctx, plain, x, y, dtype)
    x_nan, y_nan = ctx.op.IsNaN(x), ctx.op.IsNaN(y)
    sx, sy = _signbit(ctx, x), _signbit(ctx, y)
    equal = ctx.op.And(ctx.op.Equal(x, y), ctx.op.Equal(sx, sy))
    eq = ctx.op.Or(equal, ctx.op.And(x_nan, y_nan))
    if kind == "eq":
        return eq
    zeros_in_order = ctx.op.And(ctx.op.Equal(x, y), ctx.op.And(sx, ctx.op.Not(sy)))
    less = ctx.op.Or(ctx.op.Less(x, y), zeros_in_order)
    lt = ctx.op.Or(ctx.op.And(ctx.op.Not(x_nan), less), ctx.op.And(ctx.op.Not(x_nan), y_nan))
    return lt if kind == "lt" else ctx.op.Or(lt, eq)


_ORDER_EDGES = np.array([-np.inf, -1.0, -0.0, 0.0, 1e-30, 1.0, np.inf, np.nan], np.float32)
_ORDER_PAIRS = [np.repeat(_ORDER_EDGES, 8), np.tile(_ORDER_EDGES, 8)]


def _total_order_cases(kind, prim):
    return [
        case(f"{kind}_to_edges", prim.bind, _ORDER_PAIRS, variants=_HALF),
        case(f"{kind}_to", prim.bind, [("B", 4), ("B", 4)]),
        case(f"{kind}_to_int", prim.bind, [(5,), (5,)], dtypes=[np.int32, np.int32]),
    ]


for _kind, _prim in (("lt", lax.lt_to_p), ("le", lax.le_to_p), ("eq", lax.eq_to_p)):
    family.lowering(_prim, cases=functools.partial(_total_order_cases, _kind, _prim))(
        functools.partial(_total_order, kind=_kind)
    )


register = family.register
