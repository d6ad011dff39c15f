"""Shared helpers of the rules for complex values (``values="complex"``).

A complex array is stored as a float array with a trailing axis of 2 (real,
imaginary): ``complex64[3, 4]`` is ``float32[3, 4, 2]``. The rules write
complex arithmetic as real JAX code on that form and inline it with
``ctx.decompose(fn, *inputs, stored=True)``; the real lowerings then emit the
ONNX ops (``Split`` into parts, arithmetic, ``Concat`` back).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jax import lax


def parts(x: Any) -> tuple[Any, Any]:
    """The real and imaginary parts of a stored complex array, each ``[..., 1]``."""
    re, im = lax.split(x, (1, 1), axis=x.ndim - 1)
    return re, im


def join(re: Any, im: Any) -> Any:
    """The stored complex array of parts ``[..., 1]`` (one ``Concat``)."""
    return lax.concatenate([re, im], re.ndim - 1)


def mul(x: Any, y: Any) -> Any:
    """The complex product of two stored complex arrays of one shape."""
    a, b = parts(x)
    c, d = parts(y)
    return join(a * c - b * d, a * d + b * c)


def stored_rule(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A lowering that inlines ``fn(*stored_inputs, **params)`` (real JAX code).

    ``fn`` takes the equation's inputs as stored (complex ones ``[..., 2]``)
    and its parameters, and returns the outputs in the same form.
    """

    @functools.wraps(fn)
    def rule(ctx: Any, *inputs: Any, **params: Any) -> Any:
        return ctx.decompose(fn, *inputs, stored=True, **params)

    return rule


# Complex arithmetic on parts. Each function takes real and imaginary parts
# (real JAX arrays of one shape, usually the ``[..., 1]`` halves from ``parts``)
# and returns the parts of the result; the rules join them back.


def unary_rule(fn: Callable[[Any, Any], tuple[Any, Any]]) -> Callable[..., Any]:
    """A complex -> complex lowering from ``fn(re, im) -> (re, im)`` (Split, math, Concat)."""

    def lowered(x: Any, **_: Any) -> Any:
        return join(*fn(*parts(x)))

    lowered.__doc__ = fn.__doc__
    return stored_rule(lowered)


def negative(x: Any) -> Any:
    """``x < 0`` with -0.0 counted negative (the sign bit without a bit cast): 1/-0 = -inf."""
    return (x < 0) | (1 / x < 0)


def plus_zero(x: Any) -> Any:
    """``x`` with -0.0 replaced by +0.0 (JAX's sqrt and inverse sines ignore the zero's sign)."""
    return jnp.where(x == 0, jnp.zeros_like(x), x)


def c_mul(a: Any, b: Any, c: Any, d: Any) -> tuple[Any, Any]:
    """(a + ib)(c + id)."""
    return a * c - b * d, a * d + b * c


def c_div(a: Any, b: Any, c: Any, d: Any) -> tuple[Any, Any]:
    """(a + ib) / (c + id) by Smith's method: divide by the larger of |c|, |d| first, so no
    square of the divisor overflows or underflows. A zero divisor gives (a, b) * inf with
    the sign of c (nan for 0/0), as JAX does."""
    wide = jnp.abs(c) >= jnp.abs(d)
    one = jnp.ones_like(c)
    big, small = jnp.where(wide, c, d), jnp.where(wide, d, c)
    ratio = small / jnp.where(big == 0, one, big)
    den = big + small * ratio
    re = jnp.where(wide, a + b * ratio, a * ratio + b) / den
    im = jnp.where(wide, b - a * ratio, b * ratio - a) / den
    zero = (c == 0) & (d == 0)
    inf = jnp.where(negative(c), -jnp.inf, jnp.inf).astype(c.dtype)
    return jnp.where(zero, a * inf, re), jnp.where(zero, b * inf, im)


def c_abs(a: Any, b: Any) -> Any:
    """|a + ib| = m * sqrt(1 + (n/m)^2) with m = max(|a|, |b|), n = min: no overflow or
    underflow of a square; 0 for 0, inf when a part is infinite (nan when the other is nan,
    as JAX gives: max(inf, nan) is nan)."""
    x, y = jnp.abs(a), jnp.abs(b)
    m, n = jnp.maximum(x, y), jnp.minimum(x, y)
    q = n / jnp.where(m == 0, jnp.ones_like(m), m)
    return jnp.where(jnp.isinf(m), m, m * jnp.sqrt(1 + q * q))


def c_sqrt(a: Any, b: Any) -> tuple[Any, Any]:
    """Principal square root: t = sqrt((|a| + |z|) / 2) (no cancellation), then
    (t, b / 2t) for a >= 0 and (|b| / 2t, +-t with the sign of b, -0.0 included) for a < 0;
    sqrt(+-0 + ib) with b = +-0 is (0, b)."""
    r = c_abs(a, b)
    t = jnp.sqrt(0.5 * jnp.abs(a) + 0.5 * r)
    half = b / jnp.where(t == 0, jnp.ones_like(t), 2 * t)
    left = a < 0
    re = jnp.where(left, jnp.abs(half), t)
    im = jnp.where(left, jnp.where(negative(b), -t, t), half)
    return jnp.where(t == 0, jnp.zeros_like(t), re), jnp.where(t == 0, b, im)


def c_exp(a: Any, b: Any) -> tuple[Any, Any]:
    """e^a (cos b + i sin b), as e^(a/2) cos b e^(a/2): finite wherever the result is (e^a
    alone overflows first), as JAX computes it."""
    h = jnp.exp(0.5 * a)
    return h * jnp.cos(b) * h, h * jnp.sin(b) * h


def c_log(a: Any, b: Any) -> tuple[Any, Any]:
    """log|z| + i atan2(b, a), log|z| = log(m) + log1p((n/m)^2)/2 (m, n: the larger and
    smaller of |a|, |b|): accurate near |z| = 1 and free of overflow."""
    x, y = jnp.abs(a), jnp.abs(b)
    m, n = jnp.maximum(x, y), jnp.minimum(x, y)
    q = n / jnp.where(m == 0, jnp.ones_like(m), m)
    re = jnp.log(m) + 0.5 * jnp.log1p(q * q)
    re = jnp.where(jnp.isinf(m), m, re)
    return re, jnp.arctan2(b, a)


def c_log1p(a: Any, b: Any) -> tuple[Any, Any]:
    """log(1 + z): near 0 the real part is log1p(a (2 + a) + b^2) / 2 (no loss for small
    z); elsewhere log|1 + z|. The imaginary part is atan2(b, 1 + a)."""
    small = jnp.abs(a) + jnp.abs(b) < 0.5
    s = jnp.where(small, a, jnp.zeros_like(a))
    t = jnp.where(small, b, jnp.zeros_like(b))
    near = 0.5 * jnp.log1p(s * (2 + s) + t * t)
    far, im = c_log(1 + a, b)
    return jnp.where(small, near, far), im


def c_asin(a: Any, b: Any) -> tuple[Any, Any]:
    """Kahan's form: asin z = atan2(a, Re(sqrt(1 - z) sqrt(1 + z)))
    + i asinh(Im(conj(sqrt(1 - z)) sqrt(1 + z))); the products add terms of one sign, so
    nothing cancels. Zeros of either sign count as +0 (as JAX's branch cuts do)."""
    a, b = plus_zero(a), plus_zero(b)
    p, q = c_sqrt(1 - a, -b)
    r, s = c_sqrt(1 + a, b)
    return jnp.arctan2(a, p * r - q * s), jnp.arcsinh(p * s - q * r)
