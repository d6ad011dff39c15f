"""Special functions: expm1/log1p, inverse trigonometric and hyperbolic functions, erf family.

ONNX Runtime has float32 kernels for Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh,
Atanh and Erf but no float64 ones; in float64 these lowerings decompose into float64
Exp, Log, Sqrt, Sin, Cos and arithmetic (never through float32). In float16/bfloat16,
asin, acos, acosh, asinh and atanh repeat XLA's own expansion, which rounds at every
step, to give JAX's bits (:mod:`jax2onnx_lax._half_inverse`).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case

from . import _half_inverse

family = Family("lax")


_LN2 = math.log(2.0)
_BIG = 1e8  # above this, asinh(x) = acosh(x) = log(2x) to double precision
_ERF_SPLIT = 2.5  # erf series below, erfc continued fraction above
# erf(a) = 2/sqrt(pi) a exp(-a^2) sum_n (2a^2)^n / (2n+1)!!: positive terms, no cancellation.
_ERF_SERIES = [float(Fraction(2**n) / math.prod(range(1, 2 * n + 2, 2))) for n in range(37)]
_ERFC_DEPTH = 40  # terms of erfc's continued fraction: full double precision from a = 2.5
_ATAN_SERIES = [(-1) ** n / (2 * n + 1) for n in range(13)]  # for |t| <= tan(pi/16)
# float32 erfc: 1 - Erf(z) below 0.5 (erf(z) <= 0.53 there: at most one bit lost),
# exp(-z^2) * P(z) / Q(z) from 0.5 on. P / Q is our minimax fit of erfcx(z) = exp(z^2) erfc(z)
# in relative error over [0.5, 10.5] (2.6e-8 in float64, 5e-8 with the coefficients rounded
# to float32); Q is monic. erfc(10.5) < 1e-48 is 0 in float32, so z is clamped there, which
# keeps z^4 finite.
_ERFC32_SPLIT = 0.5
_ERFC32_CLAMP = 10.5
# coefficients of z^0, z^1 ... (Q's z^4 coefficient is 1)
_ERFCX_P = (
    5.2052155407038505,
    5.460219306450373,
    2.6203096765525737,
    0.5640589137244042,
    3.33445933e-06,
)
_ERFCX_Q = (5.205662605575499, 11.330357113283197, 10.214340621949143, 4.640515876711266)


_BF16 = ["f32", "f64", "bf16"]  # the float cases given half-precision variants
_HALF = ["f32", "f64", "bf16", "f16"]


def _is_f64(ctx) -> bool:
    return ctx.avals_in[0].dtype == np.float64


def _k(ctx, dtype, value):
    """A constant of ``dtype`` (float64 stays float64 even outside x64 mode)."""
    return ctx.const(value, dtype)


def _dtype(ctx):
    return np.dtype(ctx.avals_in[0].dtype)


def _horner(ctx, t, coeffs, dt):
    """sum_n coeffs[n] t^n."""
    acc = _k(ctx, dt, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = ctx.op.Add(ctx.op.Mul(acc, t), _k(ctx, dt, c))
    return acc


def _odd(ctx, x, magnitude, dt):
    """sign(x) * magnitude, keeping NaN and -0.0."""
    return ctx.op.Where(ctx.op.Less(x, _k(ctx, dt, 0)), ctx.op.Neg(magnitude), magnitude)


def _log1p(ctx, x, dt):
    """log1p(x) = log(u) * x / (u - 1) with u = 1 + x (Kahan): exact for tiny |x|."""
    u = ctx.op.Add(x, _k(ctx, dt, 1))
    d = ctx.op.Sub(u, _k(ctx, dt, 1))
    direct = ctx.op.Or(ctx.op.Equal(d, _k(ctx, dt, 0)), ctx.op.IsInf(x, detect_negative=0))
    return ctx.op.Where(direct, x, ctx.op.Mul(ctx.op.Log(u), ctx.op.Div(x, d)))


def _expm1(ctx, x, dt):
    """expm1(x) = (u - 1) * x / log(u) with u = exp(x) (Kahan): exact for tiny |x|."""
    u = ctx.op.Exp(x)
    d = ctx.op.Sub(u, _k(ctx, dt, 1))
    general = ctx.op.Mul(d, ctx.op.Div(x, ctx.op.Log(u)))
    saturated = ctx.op.Or(ctx.op.Equal(d, _k(ctx, dt, -1)), ctx.op.IsInf(u))
    return ctx.op.Where(ctx.op.Equal(u, _k(ctx, dt, 1)), x, ctx.op.Where(saturated, d, general))


def _atan(ctx, x, dt):
    """atan in arithmetic: 1/x for |x| > 1, two half-angle steps, then the Taylor series."""
    a = ctx.op.Abs(x)
    inverted = ctx.op.Greater(a, _k(ctx, dt, 1))
    t = ctx.op.Where(inverted, ctx.op.Reciprocal(a), a)
    for _ in range(2):  # atan(t) = 2 atan(t / (1 + sqrt(1 + t^2)))
        t = ctx.op.Div(
            t, ctx.op.Add(ctx.op.Sqrt(ctx.op.Add(ctx.op.Mul(t, t), _k(ctx, dt, 1))), _k(ctx, dt, 1))
        )
    r = ctx.op.Mul(ctx.op.Mul(t, _horner(ctx, ctx.op.Mul(t, t), _ATAN_SERIES, dt)), _k(ctx, dt, 4))
    r = ctx.op.Where(inverted, ctx.op.Sub(_k(ctx, dt, math.pi / 2), r), r)
    return _odd(ctx, x, r, dt)


def _erf_parts(ctx, x, dt):
    """(erf(|x|), erfc(|x|)): series below 2.5, continued fraction above (float64)."""
    a = ctx.op.Abs(x)
    a2 = ctx.op.Mul(a, a)
    e = ctx.op.Exp(ctx.op.Neg(a2))
    series = _horner(ctx, a2, _ERF_SERIES, dt)
    erf_small = ctx.op.Mul(
        ctx.op.Mul(ctx.op.Mul(a, e), series), _k(ctx, dt, 2 / math.sqrt(math.pi))
    )
    frac = a
    for m in range(_ERFC_DEPTH, 0, -1):  # a + (1/2)/(a + 1/(a + (3/2)/(a + ...)))
        frac = ctx.op.Add(a, ctx.op.Div(_k(ctx, dt, m / 2), frac))
    erfc_large = ctx.op.Div(e, ctx.op.Mul(frac, _k(ctx, dt, math.sqrt(math.pi))))
    small = ctx.op.Less(a, _k(ctx, dt, _ERF_SPLIT))
    one = _k(ctx, dt, 1)
    erf = ctx.op.Where(small, erf_small, ctx.op.Sub(one, erfc_large))
    erfc = ctx.op.Where(small, ctx.op.Sub(one, erf_small), erfc_large)
    return erf, erfc


def _erf64(ctx, x, dt):
    return _odd(ctx, x, _erf_parts(ctx, x, dt)[0], dt)


def _erfc64(ctx, x, dt):
    erfc = _erf_parts(ctx, x, dt)[1]
    return ctx.op.Where(ctx.op.Less(x, _k(ctx, dt, 0)), ctx.op.Sub(_k(ctx, dt, 2), erfc), erfc)


def _erfc32(ctx, z, dt):
    """float32 erfc: ``1 - Erf(z)`` below 0.5, ``exp(-z^2) P(z) / Q(z)`` above.

    ``exp(-z^2)`` with ``z^2`` rounded would be off by ``z^2`` ulps (5e-6 at z = 9), so
    ``z^2 = h^2 + (z - h)(z + h)`` with ``h`` = z rounded down to 8 fraction bits: ``h^2``
    (12 bits squared) and ``z - h`` are exact, and the second term is below 0.09.
    """
    near = ctx.op.Sub(_k(ctx, dt, 1), ctx.op.Erf(z))
    c = ctx.op.Min(z, _k(ctx, dt, _ERFC32_CLAMP))
    h = ctx.op.Mul(ctx.op.Floor(ctx.op.Mul(c, _k(ctx, dt, 256))), _k(ctx, dt, 1 / 256))
    gauss = ctx.op.Mul(
        ctx.op.Exp(ctx.op.Neg(ctx.op.Mul(h, h))),
        ctx.op.Exp(ctx.op.Mul(ctx.op.Sub(h, c), ctx.op.Add(c, h))),
    )
    denominator = ctx.op.Add(c, _k(ctx, dt, _ERFCX_Q[-1]))  # Q is monic: c^4 + ...
    for q in reversed(_ERFCX_Q[:-1]):
        denominator = ctx.op.Add(ctx.op.Mul(denominator, c), _k(ctx, dt, q))
    tail = ctx.op.Mul(gauss, ctx.op.Div(_horner(ctx, c, _ERFCX_P, dt), denominator))
    return ctx.op.Where(ctx.op.Less(z, _k(ctx, dt, _ERFC32_SPLIT)), near, tail)


@family.lowering(
    lax.expm1_p,
    cases=lambda: [
        case("expm1", lax.expm1, [("B", 5)], input_range=(-3.0, 3.0), variants=_HALF),
        case("expm1_tiny", lax.expm1, [(6,)], input_range=(-1e-4, 1e-4)),
        case("expm1_tinier", lax.expm1, [(6,)], input_range=(-1e-9, 1e-9)),
        case(
            "expm1_special",
            lax.expm1,
            [np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -50.0, 100.0, 1e-30])],
        ),
    ],
)
def expm1(ctx, x, **_):
    """expm1 -> Kahan's (exp(x) - 1) * x / log(exp(x)): accurate for tiny |x|, no ONNX op."""
    return _expm1(ctx, x, _dtype(ctx))


@family.lowering(
    lax.log1p_p,
    cases=lambda: [
        case("log1p", lax.log1p, [("B", 5)], input_range=(-0.9, 5.0), variants=_HALF),
        case("log1p_tiny", lax.log1p, [(6,)], input_range=(-1e-4, 1e-4)),
        case("log1p_tinier", lax.log1p, [(6,)], input_range=(-1e-9, 1e-9)),
        case(
            "log1p_special",
            lax.log1p,
            [np.array([0.0, -0.0, -1.0, -2.0, np.inf, -np.inf, np.nan, 1e30, 1e-30])],
        ),
    ],
)
def log1p(ctx, x, **_):
    """log1p -> Kahan's log(1 + x) * x / ((1 + x) - 1): accurate for tiny |x|, no ONNX op."""
    return _log1p(ctx, x, _dtype(ctx))


def _native_or_f64(name, op_type, decompose, half, doc):
    """A lowering named ``name`` using ONNX ``op_type``, or ``decompose`` in float64, or
    ``half`` (XLA's own expansion, see :mod:`jax2onnx_lax._half_inverse`) in float16 and
    bfloat16 where there is one."""

    def lower(ctx, x, **_):
        if _is_f64(ctx):
            return decompose(ctx, x, _dtype(ctx))
        if half is not None and _half_inverse.is_half(_dtype(ctx)):
            return half(ctx, x, _dtype(ctx))
        return getattr(ctx.op, op_type)(x)

    lower.__name__ = lower.__qualname__ = name
    lower.__doc__ = doc
    return lower


def _tan64(ctx, x, dt):
    return ctx.op.Div(ctx.op.Sin(x), ctx.op.Cos(x))


def _asin64(ctx, x, dt):
    one = _k(ctx, dt, 1)
    return _atan(
        ctx, ctx.op.Div(x, ctx.op.Sqrt(ctx.op.Mul(ctx.op.Sub(one, x), ctx.op.Add(x, one)))), dt
    )


def _acos64(ctx, x, dt):
    one = _k(ctx, dt, 1)
    ratio = ctx.op.Div(ctx.op.Sub(one, x), ctx.op.Add(x, one))
    return ctx.op.Mul(_atan(ctx, ctx.op.Sqrt(ratio), dt), _k(ctx, dt, 2))


def _sinh64(ctx, x, dt):
    a = ctx.op.Abs(x)
    u = _expm1(ctx, a, dt)
    moderate = ctx.op.Mul(
        ctx.op.Add(u, ctx.op.Div(u, ctx.op.Add(u, _k(ctx, dt, 1)))), _k(ctx, dt, 0.5)
    )
    large = ctx.op.Exp(ctx.op.Sub(a, _k(ctx, dt, _LN2)))
    return _odd(ctx, x, ctx.op.Where(ctx.op.Greater(a, _k(ctx, dt, 20)), large, moderate), dt)


def _cosh64(ctx, x, dt):
    half = ctx.op.Exp(ctx.op.Sub(ctx.op.Abs(x), _k(ctx, dt, _LN2)))  # exp(|x|) / 2
    return ctx.op.Add(half, ctx.op.Div(_k(ctx, dt, 0.25), half))


def _asinh64(ctx, x, dt):
    a = ctx.op.Abs(x)
    a2 = ctx.op.Mul(a, a)
    root = ctx.op.Add(ctx.op.Sqrt(ctx.op.Add(a2, _k(ctx, dt, 1))), _k(ctx, dt, 1))
    moderate = _log1p(ctx, ctx.op.Add(a, ctx.op.Div(a2, root)), dt)
    large = ctx.op.Add(ctx.op.Log(a), _k(ctx, dt, _LN2))
    return _odd(ctx, x, ctx.op.Where(ctx.op.Greater(a, _k(ctx, dt, _BIG)), large, moderate), dt)


def _acosh64(ctx, x, dt):
    t = ctx.op.Sub(x, _k(ctx, dt, 1))
    root = ctx.op.Sqrt(ctx.op.Mul(t, ctx.op.Add(t, _k(ctx, dt, 2))))
    moderate = _log1p(ctx, ctx.op.Add(t, root), dt)
    large = ctx.op.Add(ctx.op.Log(x), _k(ctx, dt, _LN2))
    return ctx.op.Where(ctx.op.Greater(x, _k(ctx, dt, _BIG)), large, moderate)


def _atanh64(ctx, x, dt):
    a = ctx.op.Abs(x)
    ratio = ctx.op.Div(ctx.op.Mul(a, _k(ctx, dt, 2)), ctx.op.Sub(_k(ctx, dt, 1), a))
    return _odd(ctx, x, ctx.op.Mul(_log1p(ctx, ratio, dt), _k(ctx, dt, 0.5)), dt)


_HALF_ASIN = functools.partial(_half_inverse.asin, atan=_atan)
_HALF_ACOS = functools.partial(_half_inverse.acos, atan=_atan)
_EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e30])
_UNIT_EDGES = np.array([0.0, -0.0, 1.0, -1.0, 1.5, -1.5, np.nan, 1e-30, 0.999999])
_TABLE = [
    # primitive, fn, ONNX op, f64 decomposition, half-precision form, input range, edge values
    (lax.tan_p, lax.tan, "Tan", _tan64, None, (-1.4, 1.4), None),
    (lax.asin_p, lax.asin, "Asin", _asin64, _HALF_ASIN, (-1.0, 1.0), _UNIT_EDGES),
    (lax.acos_p, lax.acos, "Acos", _acos64, _HALF_ACOS, (-1.0, 1.0), _UNIT_EDGES),
    (lax.atan_p, lax.atan, "Atan", _atan, None, (-20.0, 20.0), _EDGES),
    (lax.sinh_p, lax.sinh, "Sinh", _sinh64, None, (-5.0, 5.0), _EDGES[:-1]),
    (lax.cosh_p, lax.cosh, "Cosh", _cosh64, None, (-5.0, 5.0), _EDGES[:-1]),
    (lax.asinh_p, lax.asinh, "Asinh", _asinh64, _half_inverse.asinh, (-50.0, 50.0), _EDGES),
    (
        lax.acosh_p,
        lax.acosh,
        "Acosh",
        _acosh64,
        _half_inverse.acosh,
        (1.0, 50.0),
        np.array([1.0, 0.5, np.inf, 1e30]),
    ),
    (lax.atanh_p, lax.atanh, "Atanh", _atanh64, _half_inverse.atanh, (-0.99, 0.99), _UNIT_EDGES),
]


# inputs on which JAX's half-precision results are not the correctly rounded function
# (XLA rounds every step of its expansion), compared exactly (tolerance 0), with the
# precisions to do it in: the suite's XLA flags (conftest.py) change JAX's own float16
# log1p, so acosh, asinh and atanh compare float16 bit for bit only in
# tests/test_half_precision.py (every float16 and bfloat16 value, XLA's default flags)
_HALF_GRIDS = {
    lax.asin_p: (np.linspace(-1.0, 1.0, 401), ["bf16", "f16"]),
    lax.acos_p: (np.linspace(-1.0, 1.0, 401), ["bf16", "f16"]),
    lax.acosh_p: (np.linspace(1.0, 60.0, 401), ["bf16"]),
    lax.asinh_p: (np.linspace(-60.0, 60.0, 401), ["bf16"]),
    lax.atanh_p: (np.linspace(-0.999, 0.999, 401), ["bf16"]),
}
_EXACT = {"bfloat16": (0.0, 0.0), "float16": (0.0, 0.0)}


def _table_cases(prim, fn, op, input_range, edges):
    cases = [
        case(prim.name, fn, [("B", 5)], input_range=input_range, variants=_BF16),
        case(
            f"{prim.name}_f32_op",
            fn,
            [(4,)],
            input_range=input_range,
            variants=["f32"],
            expect=[op],
        ),
    ]
    if prim in (lax.sinh_p, lax.asinh_p, lax.atanh_p, lax.tan_p, lax.asin_p, lax.atan_p):
        cases.append(case(f"{prim.name}_tiny", fn, [(6,)], input_range=(-1e-4, 1e-4)))
    if edges is not None:
        cases.append(case(f"{prim.name}_edges", fn, [edges]))
    if prim in _HALF_GRIDS:
        grid, exact = _HALF_GRIDS[prim]
        cases.append(
            case(f"{prim.name}_half_rounding", fn, [grid], variants=exact, tolerances=_EXACT)
        )
        if edges is not None:
            cases.append(
                case(f"{prim.name}_half_edges", fn, [edges], variants=exact, tolerances=_EXACT)
            )
    return cases


for _prim, _fn, _op, _f64, _half, _range, _edges in _TABLE:
    _cases = functools.partial(_table_cases, _prim, _fn, _op, _range, _edges)
    _doc = (
        f"{_prim.name} -> {_op}; float64 has no ONNX Runtime kernel, so there it "
        f"decomposes into float64 Exp/Log/Sqrt/Sin/Cos arithmetic."
    )
    if _half is not None:
        _doc += " float16/bfloat16 follow XLA's expansion, rounding where JAX rounds."
    family.lowering(_prim, cases=_cases)(_native_or_f64(_prim.name, _op, _f64, _half, _doc))


@family.lowering(
    lax.erf_p,
    cases=lambda: [
        case("erf", lax.erf, [("B", 5)], input_range=(-4.0, 4.0), variants=_HALF),
        case("erf_tiny", lax.erf, [(6,)], input_range=(-1e-4, 1e-4)),
        case("erf_f32_op", lax.erf, [(4,)], variants=["f32"], expect=["Erf"]),
        case(
            "erf_edges", lax.erf, [np.array([0.0, -0.0, 2.5, -2.5, 6.0, np.inf, -np.inf, np.nan])]
        ),
    ],
)
def erf(ctx, x, **_):
    """erf -> Erf; in float64 (no ONNX Runtime kernel) a positive series below |x| = 2.5 and
    1 - erfc's continued fraction above, both in float64."""
    if _is_f64(ctx):
        return _erf64(ctx, x, _dtype(ctx))
    return ctx.op.Erf(x)


@family.lowering(
    lax.erfc_p,
    cases=lambda: [
        case("erfc", lax.erfc, [("B", 5)], input_range=(-3.0, 9.0), variants=_BF16),
        case("erfc_tail", lax.erfc, [(6,)], input_range=(3.0, 25.0)),
        case(
            "erfc_edges",
            lax.erfc,
            [np.array([0.0, -0.0, 2.5, -2.5, 10.0, 30.0, np.inf, -np.inf, np.nan])],
        ),
        case(
            "erfc_f32_form",
            lax.erfc,
            [("B", 5)],
            input_range=(-4.0, 11.0),
            variants=["f32"],
            counts={"Erf": 1, "Exp": 2, "Cast": 0},
        ),
        case(
            "erfc_f32_relative",  # every normal float32 result to 1e-5 relative (JAX's: 4e-6)
            lax.erfc,
            [np.linspace(-12.0, 9.1, 8001, dtype=np.float32)],
            variants=["f32"],
            tolerances={"float32": (1e-5, 0.0)},
        ),
        case("erfc_f16", lax.erfc, [(6,)], dtypes=[np.float16], input_range=(-2.0, 4.0)),
    ],
)
def erfc(ctx, x, **_):
    """erfc: 1 - Erf loses all relative accuracy in the tail. float64: a float64 series /
    continued fraction; float32: 1 - Erf below 0.5 and exp(-x^2) times a rational function
    above (float16 and bfloat16 compute in float32 and round back once)."""
    dt = _dtype(ctx)
    if dt == np.float64:
        return _erfc64(ctx, x, dt)
    if dt == np.float32:
        return _erfc32(ctx, x, dt)
    f32 = np.dtype(np.float32)
    return ctx.cast(_erfc32(ctx, ctx.cast(x, f32), f32), dt)


@family.lowering(
    lax.erf_inv_p,
    cases=lambda: [
        case("erf_inv", lax.erf_inv, [("B", 5)], input_range=(-0.99, 0.99), variants=_HALF),
        case("erf_inv_tiny", lax.erf_inv, [(6,)], input_range=(-1e-4, 1e-4)),
        case(
            "erf_inv_edges",
            lax.erf_inv,
            [np.array([0.0, -0.0, 1.0, -1.0, 1.5, np.nan, 0.999, -0.5, 1e-30])],
        ),
    ],
)
def erf_inv(ctx, x, **_):
    """erf_inv (no ONNX op) -> Winitzki's closed-form estimate refined by two Halley steps
    on erf (Erf, or the float64 erf series), exact at 0 and +-inf at +-1."""
    dt = _dtype(ctx)
    k = 0.147
    one = _k(ctx, dt, 1)
    log = ctx.op.Log(ctx.op.Mul(ctx.op.Sub(one, x), ctx.op.Add(x, one)))
    b = ctx.op.Add(ctx.op.Mul(log, _k(ctx, dt, 0.5)), _k(ctx, dt, 2 / (math.pi * k)))
    inner = ctx.op.Sub(ctx.op.Mul(b, b), ctx.op.Div(log, _k(ctx, dt, k)))
    y = ctx.op.Sqrt(ctx.op.Sub(ctx.op.Sqrt(inner), b))
    a = ctx.op.Abs(x)
    # below 0.01 the estimate cancels; sqrt(pi)/2 x is within 3e-5 there
    y = ctx.op.Where(
        ctx.op.Less(a, _k(ctx, dt, 0.01)), ctx.op.Mul(a, _k(ctx, dt, math.sqrt(math.pi) / 2)), y
    )
    y = _odd(ctx, x, y, dt)
    for _ in range(2):
        value = _erf64(ctx, y, dt) if dt == np.float64 else ctx.op.Erf(y)
        slope = ctx.op.Mul(
            ctx.op.Exp(ctx.op.Neg(ctx.op.Mul(y, y))), _k(ctx, dt, 2 / math.sqrt(math.pi))
        )
        step = ctx.op.Div(ctx.op.Sub(value, x), slope)
        y = ctx.op.Sub(y, ctx.op.Div(step, ctx.op.Add(ctx.op.Mul(y, step), one)))
    y = ctx.op.Where(ctx.op.Greater(a, one), _k(ctx, dt, np.nan), y)
    return ctx.op.Where(ctx.op.Equal(a, one), ctx.op.Mul(x, _k(ctx, dt, np.inf)), y)


register = family.register
