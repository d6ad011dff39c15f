"""asin, acos, acosh, asinh and atanh of float16/bfloat16 operands, rounded as JAX rounds.

JAX lowers these five to CHLO ops, which XLA expands into elementary steps *in the
operand's type* (``asin(x) = 2 atan2(x, 1 + sqrt((1 - x)(1 + x)))`` ...). On CPU each
half-precision step is computed in float32 and rounded back, so JAX's result is not the
correctly rounded function: it is a bfloat16/float16 step away on up to one input in
six (float16 asinh; bfloat16 asinh: one in eleven). The formulas here repeat XLA's
steps: the arithmetic is emitted in the half type (the precision step computes each op
in float32 and rounds it, as XLA does), and XLA's one-op transcendentals (``atan2``,
``log``, ``log1p``: float32, rounded once) are computed in float64 and rounded to
float32, then to the half type. Every float16 input, and every bfloat16 input of
magnitude 2^-124 or more, gives JAX's bits (tests/test_half_precision.py). Below that,
XLA's CPU flushes subnormal float32 operands and results to zero, ONNX Runtime does not.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def is_half(dtype) -> bool:
    return np.dtype(dtype) in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _k(ctx, dt, value):
    """``value`` rounded to ``dt`` once (float64 -> dt), as XLA folds the constant."""
    return ctx.const(np.asarray(np.float64(value)).astype(dt), dt)


def _log1p64(ctx, x):
    """float64 log1p: x * log(u) / (u - 1) with u = 1 + x (Kahan), x itself where u == 1
    or x = inf. The factor is selected, not the result: ONNX Runtime's ``Where`` loses the
    sign of a -0.0 it takes from its first value input."""
    one = ctx.const(1, _F64)
    u = ctx.op.Add(x, one)
    d = ctx.op.Sub(u, one)
    direct = ctx.op.Or(ctx.op.Equal(d, ctx.const(0, _F64)), ctx.op.IsInf(x, detect_negative=0))
    return ctx.op.Mul(x, ctx.op.Where(direct, one, ctx.op.Div(ctx.op.Log(u), d)))


def _log1p(ctx, x, dt):
    """XLA's one-op log1p of a half value: float32, rounded to ``dt``. XLA's float32 log1p
    is its own approximation (not correctly rounded); computed in float64 and rounded to
    float32, the result rounds to ``dt`` as JAX's does on every input (in float32
    arithmetic one float16 atanh input came out a step away)."""
    return ctx.cast(ctx.cast(_log1p64(ctx, ctx.cast(x, _F64)), _F32), dt)


def _log(ctx, x, dt):
    """XLA's one-op log of a half value: float64, rounded to float32 and to ``dt``."""
    return ctx.cast(ctx.cast(ctx.op.Log(ctx.cast(x, _F64)), _F32), dt)


def _one_minus_square(ctx, x, dt):
    """(1 - x) * (1 + x), each step rounded to ``dt``."""
    one = _k(ctx, dt, 1)
    return ctx.op.Mul(ctx.op.Sub(one, x), ctx.op.Add(x, one))


def _sign(ctx, w):
    """float32 -1 where ``w`` (float32) has its sign bit set (w < 0, or 1 / w < 0 for -0.0),
    else 1 (NaN too). ONNX Runtime's Sign(-0.0) is +0.0, and a Where that picks a -0.0
    from its first value input gives +0.0: the sign is multiplied in instead."""
    zero = ctx.const(0, _F32)
    negative = ctx.op.Or(ctx.op.Less(w, zero), ctx.op.Less(ctx.op.Reciprocal(w), zero))
    return ctx.op.Where(negative, ctx.const(-1, _F32), ctx.const(1, _F32))


def _atan32(ctx, ratio, atan):
    """float32 atan of a float32 ratio, as C's atanf: ``atan`` in float64, rounded once.

    ONNX Runtime's float32 Atan is not one function: its vectorised loop and its scalar
    tail round differently, so where a value sits in the tensor decides its last bit."""
    return ctx.cast(atan(ctx, ctx.cast(ratio, _F64), _F64), _F32)


def asin(ctx, x, dt, *, atan):
    """2 atan2(x, 1 + sqrt((1 - x)(1 + x))); the atan2 in float32 (its second operand is
    at least 1, or NaN where |x| > 1), rounded once, and doubled exactly. ``atan`` is a
    float64 arctangent ``atan(ctx, x, dtype)``."""
    t = ctx.op.Add(ctx.op.Sqrt(_one_minus_square(ctx, x, dt)), _k(ctx, dt, 1))
    w = ctx.cast(x, _F32)
    a = _atan32(ctx, ctx.op.Div(ctx.op.Abs(w), ctx.cast(t, _F32)), atan)
    a = ctx.cast(ctx.op.Mul(a, _sign(ctx, w)), dt)  # atan is odd; asin(-0.0) is -0.0
    return ctx.op.Add(a, a)


def acos(ctx, x, dt, *, atan):
    """atan2(sqrt((1 - x)(1 + x)), x), the atan2 in float32 as C's atan2f and rounded once:
    z = atan(t / |x|) (pi/2 at x = +-0), and pi - z where x < 0, with pi in two float32
    parts (``pi_hi - (z - pi_lo)``)."""
    t = ctx.cast(ctx.op.Sqrt(_one_minus_square(ctx, x, dt)), _F32)
    w = ctx.cast(x, _F32)
    z = _atan32(ctx, ctx.op.Div(t, ctx.op.Abs(w)), atan)
    pi_hi = np.float32(math.pi)
    pi_lo = np.float32(math.pi - float(pi_hi))
    flipped = ctx.op.Sub(ctx.const(pi_hi, _F32), ctx.op.Sub(z, ctx.const(pi_lo, _F32)))
    z = ctx.op.Where(ctx.op.Less(w, ctx.const(0, _F32)), flipped, z)
    return ctx.cast(z, dt)


def acosh(ctx, x, dt):
    """log(x) + ln 2 from half the type's largest value on, else
    log1p(sqrt(x - 1) * (sqrt(x + 1) + sqrt(x - 1)))."""
    one = _k(ctx, dt, 1)
    large = ctx.op.Add(_log(ctx, x, dt), _k(ctx, dt, math.log(2)))
    below = ctx.op.Sqrt(ctx.op.Sub(x, one))
    above = ctx.op.Sqrt(ctx.op.Add(x, one))
    moderate = _log1p(ctx, ctx.op.Mul(below, ctx.op.Add(above, below)), dt)
    big = _k(ctx, dt, float(ml_dtypes.finfo(dt).max) / 2)
    return ctx.op.Where(ctx.op.GreaterOrEqual(x, big), large, moderate)


def asinh(ctx, x, dt):
    """sign(x) * (log(|x|) + ln 2 from sqrt(largest value) on, else
    log1p(|x| + x^2 / (sqrt(x^2 + 1) + 1)))."""
    one = _k(ctx, dt, 1)
    a = ctx.op.Abs(x)
    square = ctx.op.Mul(x, x)
    root = ctx.op.Add(ctx.op.Sqrt(ctx.op.Add(square, one)), one)
    moderate = _log1p(ctx, ctx.op.Add(a, ctx.op.Div(square, root)), dt)
    large = ctx.op.Add(_log(ctx, a, dt), _k(ctx, dt, math.log(2)))
    big = _k(ctx, dt, math.sqrt(float(ml_dtypes.finfo(dt).max)))
    magnitude = ctx.op.Where(ctx.op.GreaterOrEqual(a, big), large, moderate)
    # XLA's sign(x) * magnitude (asinh(-0.0) is -0.0)
    return ctx.op.Mul(ctx.cast(_sign(ctx, ctx.cast(x, _F32)), dt), magnitude)


def atanh(ctx, x, dt):
    """(log1p(x) - log1p(-x)) * 0.5, NaN where |x| > 1."""
    value = ctx.op.Sub(_log1p(ctx, x, dt), _log1p(ctx, ctx.op.Neg(x), dt))
    value = ctx.op.Mul(value, _k(ctx, dt, 0.5))
    outside = ctx.op.Greater(ctx.op.Abs(x), _k(ctx, dt, 1))
    return ctx.op.Where(outside, _k(ctx, dt, np.nan), value)
