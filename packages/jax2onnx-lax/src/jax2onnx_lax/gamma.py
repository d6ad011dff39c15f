"""Gamma family: lgamma, digamma, Hurwitz zeta and polygamma.

ONNX has none of these, so each lowering decomposes into elementwise float64 arithmetic
(Log, Exp, Pow, Sin, Cos, Floor, Round, Where). The algorithms are written below as plain
JAX functions and traced on the equation's shapes by :func:`decompose_f64`: float64 inputs
are computed in float64, float32 (and narrower) inputs are widened exactly, computed in
float64 and rounded back once. Float64 results carry a few ulps of rounding error (an
absolute 1e-15 next to the zeros of lgamma and digamma, where the shifted or reflected
terms cancel), float32 results are the correctly rounded value nearly always.

- ``lgamma``/``digamma``: arguments below ``SHIFT`` are moved up by the recurrences
  ``Gamma(z + 1) = z Gamma(z)`` and ``psi(z + 1) = psi(z) + 1/z`` (at most ``SHIFT`` fixed,
  masked steps), then Stirling's asymptotic series with 9 Bernoulli terms, whose first
  omitted term is below 3e-19 at ``z = 10``; negative arguments use the reflection formulas.
- ``zeta(s, q)``: Euler-Maclaurin summation, ``_ZETA_TERMS`` direct terms and
  ``_ZETA_TAIL`` Bernoulli corrections at ``w = q + _ZETA_TERMS``. The first omitted
  correction is about ``2 (s)_25 (s - 1) / (2 pi w)^26`` of the tail integral, below 1e-19
  for ``s <= 2``, ``w >= 10``; for larger ``s`` the direct terms outweigh the tail by
  ``(w/q)^s``, so float64 precision holds for all ``q > -5`` (JAX's own zeta is accurate
  there and loses its digits for ``q < -5``, where ``q + 9`` is no longer large).
- ``polygamma(m, x) = (-1)^(m+1) m! zeta(m + 1, x)``, ``digamma`` for ``m = 0``.

Special values follow JAX (XLA): lgamma is +inf at the poles and at +-inf, digamma is NaN
at the poles, zeta is +inf at ``s = 1`` and at the poles ``q = 0, -1, ...`` for even
integer ``s`` (NaN for other ``s``), NaN for ``s < 1``, for ``q = inf`` and for negative
non-integer ``q`` with non-integer ``s``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case

family = Family("lax")


F64 = np.dtype(np.float64)


def _stats() -> Any:
    """``jax.scipy.stats``, imported by the cases that use it (it costs 0.1 s to import)."""
    import jax.scipy.stats

    return jax.scipy.stats


def scipy_special() -> Any:
    """``jax.scipy.special``, imported by the cases that use it (not while the plugin loads)."""
    import jax.scipy.special

    return jax.scipy.special


def decompose_f64(ctx: Any, fn: Callable[..., Any], *inputs: Any, **params: Any) -> Any:
    """Inline ``fn(*inputs, dtype=..., **params)`` traced in float64 on this equation's shapes.

    Float64 inputs are used as they are; narrower float inputs are widened to float64
    (exact) and the result is rounded back to the output dtype once. ``fn`` receives the
    output dtype as ``dtype`` so iterative algorithms can stop at that dtype's precision.
    Tracing runs with x64 enabled, so float64 stays float64 whatever the conversion's mode.
    """
    out_dtype = np.dtype(ctx.avals_out[0].dtype)
    avals = ctx.avals_in[: len(inputs)]
    wide = [ctx.cast(v, F64) for v in inputs]
    specs = [jax.ShapeDtypeStruct(a.shape, F64) for a in avals]
    with jax.enable_x64(True):
        closed = ctx.trace(fn, *specs, dtype=out_dtype, **params)
        (out,) = ctx.inline(closed, wide)
    return out if out_dtype == F64 else ctx.cast(out, out_dtype)


def bernoulli(n: int) -> list[Fraction]:
    """The Bernoulli numbers B_0 .. B_n, exactly (B_m = -1/(m+1) sum_k C(m+1, k) B_k)."""
    b = [Fraction(1)]
    for m in range(1, n + 1):
        b.append(-sum((math.comb(m + 1, k) * b[k] for k in range(m)), Fraction(0)) / (m + 1))
    return b


_B = tuple(bernoulli(26))
SHIFT = 10  # lgamma/digamma: shift arguments up to this before the asymptotic series
# log Gamma(z) ~ (z - 1/2) log z - z + log(2 pi)/2 + sum_k B_2k / (2k (2k - 1) z^(2k - 1))
_STIRLING = tuple(float(_B[2 * k] / (2 * k * (2 * k - 1))) for k in range(1, 10))
# psi(z) ~ log z - 1/(2z) - sum_k B_2k / (2k z^2k)
_PSI = tuple(float(_B[2 * k] / (2 * k)) for k in range(1, 10))
_ZETA_TERMS = 16
_ZETA_TAIL = 12
_ZETA_COEFFS = tuple(float(_B[2 * j] / math.factorial(2 * j)) for j in range(1, _ZETA_TAIL + 1))
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def horner(t: Any, coeffs: tuple[float, ...]) -> Any:
    """sum_n coeffs[n] t^n (at least two coefficients).

    Beware ONNX Runtime's no-op elimination: it drops ``Add(x, c)`` for a float64 scalar
    ``c`` that rounds to 0 in float32 (below 7e-46), so coefficients must stay above that.
    """
    acc = t * coeffs[-1] + coeffs[-2]
    for c in reversed(coeffs[:-2]):
        acc = acc * t + c
    return acc


def _nonpositive_integer(x: Any) -> Any:
    return (x <= 0) & (x == jnp.floor(x))


def _sin_cos_pi(x: Any) -> tuple[Any, Any]:
    """(sin(pi x), cos(pi x)) after exact reduction to ``|r| <= 1/2`` (sign up to period 2)."""
    r = x - jnp.round(x)
    return jnp.sin(math.pi * r), jnp.cos(math.pi * r)


def stirling_correction(z: Any) -> Any:
    """log Gamma(z) - ((z - 1/2) log z - z + log(2 pi)/2), to float64 precision for z >= 10."""
    inv = 1 / z
    return horner(inv * inv, _STIRLING) * inv


def _lgamma_positive(y: Any) -> Any:
    """log Gamma(y) for y > 0 (finite): up-shift below ``SHIFT``, then Stirling."""
    z, prod = y, jnp.ones_like(y)
    for _ in range(SHIFT):
        low = z < SHIFT
        prod = jnp.where(low, prod * z, prod)
        z = jnp.where(low, z + 1, z)
    lz = jnp.log(z)
    return z * (lz - 1) - 0.5 * lz + HALF_LOG_2PI + stirling_correction(z) - jnp.log(prod)


def lgamma(x: Any, dtype: Any = None) -> Any:
    """log |Gamma(x)|; reflection ``log(pi / |sin(pi x)|) - lgamma(1 - x)`` below 0."""
    negative = x < 0
    value = _lgamma_positive(jnp.where(negative, 1 - x, x))
    sin, _ = _sin_cos_pi(x)
    value = jnp.where(negative, math.log(math.pi) - jnp.log(jnp.abs(sin)) - value, value)
    return jnp.where(_nonpositive_integer(x) | jnp.isinf(x), jnp.inf, value)


def _digamma_positive(y: Any) -> Any:
    """psi(y) for y > 0: up-shift below ``SHIFT``, then the asymptotic series."""
    z, acc = y, jnp.zeros_like(y)
    for _ in range(SHIFT):
        low = z < SHIFT
        acc = jnp.where(low, acc + 1 / z, acc)
        z = jnp.where(low, z + 1, z)
    inv2 = 1 / (z * z)
    return jnp.log(z) - 0.5 / z - inv2 * horner(inv2, _PSI) - acc


def digamma(x: Any, dtype: Any = None) -> Any:
    """psi(x); reflection ``psi(1 - x) - pi cot(pi x)`` below 0, NaN at the poles."""
    negative = x < 0
    value = _digamma_positive(jnp.where(negative, 1 - x, x))
    sin, cos = _sin_cos_pi(x)
    value = jnp.where(negative, value - math.pi * cos / sin, value)
    return jnp.where(_nonpositive_integer(x), jnp.nan, value)


def _is_integer(x: Any) -> Any:
    return jnp.isfinite(x) & (x == jnp.floor(x))


def zeta(s: Any, q: Any, dtype: Any = None) -> Any:
    """Hurwitz zeta sum_k (q + k)^-s by Euler-Maclaurin (see the module docstring)."""
    total = jnp.zeros_like(q)
    for k in range(_ZETA_TERMS):
        total = total + (q + k) ** -s
    w = q + _ZETA_TERMS
    w_s = w**-s
    total = total + w ** (1 - s) / (s - 1) + 0.5 * w_s
    factor = s * w_s / w  # s (s+1) ... (s+2j-2) w^(-s-2j+1)
    for j, c in enumerate(_ZETA_COEFFS, start=1):
        total = total + c * factor
        factor = factor * ((s + 2 * j - 1) * (s + 2 * j)) / (w * w)
    integer = _is_integer(s)
    even = integer & (0.5 * s == jnp.floor(0.5 * s))
    nan = (s < 1) | (q == jnp.inf) | (s == jnp.inf) | ((q < 0) & ~integer)
    value = jnp.where(nan, jnp.nan, total)
    value = jnp.where(_nonpositive_integer(q), jnp.where(even, jnp.inf, jnp.nan), value)
    return jnp.where(s == 1, jnp.inf, value)


def polygamma(m: Any, x: Any, dtype: Any = None) -> Any:
    """psi^(m)(x) = (-1)^(m+1) m! zeta(m + 1, x); digamma at m = 0, NaN unless m is in N."""
    valid = _is_integer(m) & (m >= 0)
    odd = m - 2 * jnp.floor(0.5 * m) == 1
    factorial = jnp.exp(lgamma(m + 1))
    value = jnp.where(odd, factorial, -factorial) * zeta(m + 1, x)
    value = jnp.where(m == 0, digamma(x), value)
    return jnp.where(valid, value, jnp.nan)


# -- lowerings ------------------------------------------------------------------------


def grad(fn: Callable[..., Any], argnum: int = 0) -> Callable[..., Any]:
    """Elementwise derivative of ``fn`` in argument ``argnum`` (the gradient of a sum)."""
    return jax.grad(lambda *args: jnp.sum(fn(*args)), argnums=argnum)


_LGAMMA_EDGES = np.array(
    [0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -2.5, -1e-30, 1e-30, np.inf, -np.inf, np.nan, 1e30]
    + [-1e10, -1e10 - 0.5, 4.5e15, -4.5e15, 0.5, 1e-8, -0.5, 3e38, 4e36, -2.4570247]
)


@family.lowering(
    lax.lgamma_p,
    cases=lambda: [
        case("lgamma", lax.lgamma, [("B", 20)], input_range=(-12.0, 25.0)),
        case("lgamma_small", lax.lgamma, [(40,)], input_range=(0.0, 3.0)),
        case("lgamma_large", lax.lgamma, [(40,)], input_range=(10.0, 1e7)),
        case("lgamma_negative", lax.lgamma, [(40,)], input_range=(-1e4, 0.0)),
        case("lgamma_edges", lax.lgamma, [_LGAMMA_EDGES]),
        case("gammaln", scipy_special().gammaln, [("B", 8)], input_range=(0.01, 30.0)),
        case("gammaln_grad", grad(scipy_special().gammaln), [("B", 8)], input_range=(-5.0, 30.0)),
        case(
            "multigammaln",
            lambda a: scipy_special().multigammaln(a, 3),
            [("B", 6)],
            input_range=(1.5, 40),
        ),
        case(
            "gamma_logpdf",
            lambda x, a: _stats().gamma.logpdf(x, a),
            [("B", 8), ("B", 8)],
            input_range=(0.05, 6.0),
        ),
        case(
            "beta_logpdf",
            lambda x, a, b: _stats().beta.logpdf(x, 8 * a, 8 * b),
            [("B", 8), ("B", 8), ("B", 8)],
            input_range=(0.02, 0.98),
        ),
    ],
)
def lower_lgamma(ctx: Any, x: Any, **_: Any) -> Any:
    """lgamma (no ONNX op) -> float64 Stirling series after at most 10 masked up-shifts,
    reflection for negative x (see the module docstring)."""
    return decompose_f64(ctx, lgamma, x)


_DIGAMMA_EDGES = np.array(
    [0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -2.5, -1e-30, 1e-30, np.inf, -np.inf, np.nan, 1e30]
    + [-1e10, -1e10 - 0.5, 0.5, 1e-8, -0.5, 3e38, 1.4616321, -0.50408300]
)


@family.lowering(
    lax.digamma_p,
    cases=lambda: [
        case("digamma", lax.digamma, [("B", 20)], input_range=(-12.0, 25.0)),
        case("digamma_small", lax.digamma, [(40,)], input_range=(0.0, 3.0)),
        case("digamma_large", lax.digamma, [(40,)], input_range=(10.0, 1e7)),
        case("digamma_edges", lax.digamma, [_DIGAMMA_EDGES]),
        case("jsp_digamma", scipy_special().digamma, [("B", 8)], input_range=(0.01, 30.0)),
        case("digamma_grad", grad(scipy_special().digamma), [("B", 8)], input_range=(-5.0, 30.0)),
    ],
)
def lower_digamma(ctx: Any, x: Any, **_: Any) -> Any:
    """digamma (no ONNX op) -> float64 asymptotic series after at most 10 masked up-shifts,
    reflection ``psi(1 - x) - pi cot(pi x)`` for negative x (see the module docstring)."""
    return decompose_f64(ctx, digamma, x)


# (s, q) pairs with the values JAX (XLA) gives special meaning: s = 1, s < 1, poles of
# q for even and odd s, q = +-inf, negative q with integer and non-integer s, overflow.
# fmt: off
_ZETA_EDGES = np.array(
    [
        (1.0, 1.0), (1.0, np.nan), (2.0, 0.0), (3.0, 0.0), (2.0, -0.0), (2.0, -1.0), (3.0, -2.0),
        (4.0, -np.inf), (0.0, 0.0), (-2.0, 1.0), (0.5, 1.0), (2.0, np.inf), (np.inf, 2.0),
        (np.nan, 1.0), (2.0, np.nan), (1.5, -2.5), (2.0, -1.5), (3.0, -0.5), (2.0, 1e-30),
        (3.0, -1e-30), (1.0000001, 1.0), (1.0000001, 1e30), (50.0, 0.5), (200.0, 3.0), (2.0, 1e30),
        (20.0, 1e-3), (1.5, 0.25), (100.0, 1.0),
    ]
)
# fmt: on
# Negative q needs integer s. For larger s the terms (q + k)^-s on either side of zero
# cancel and JAX's float32 zeta loses digits (3e-5 relative at s = 9, q = -1.4999), so
# these orders stay at s <= 4.
# fmt: off
_ZETA_NEGATIVE = np.array(
    [
        (2.0, -0.3), (2.0, -1.7), (2.0, -2.2), (2.0, -3.9), (2.0, -4.6), (3.0, -0.3), (3.0, -1.2),
        (3.0, -2.8), (3.0, -4.1), (4.0, -0.7), (4.0, -1.1), (4.0, -2.6), (2.0, -1e-3),
        (3.0, -3.999), (4.0, -0.5), (2.0, -0.5),
    ]
)
# fmt: on


@family.lowering(
    lax.zeta_p,
    cases=lambda: [
        case("zeta", lax.zeta, [("B", 20), ("B", 20)], input_range=(1.05, 12.0)),
        case(
            "zeta_small_q",
            lambda s, q: lax.zeta(s + 1, q),
            [(40,), (40,)],
            input_range=(0.002, 3.0),
        ),
        case("zeta_large_q", lax.zeta, [(40,), (40,)], input_range=(2.0, 1e5)),
        case("zeta_large_s", lambda s, q: lax.zeta(s * 16, q), [(40,), (40,)], input_range=(1, 8)),
        case("zeta_negative_q", lax.zeta, list(_ZETA_NEGATIVE.T)),
        case("zeta_edges", lax.zeta, list(_ZETA_EDGES.T)),
        case("jsp_zeta", scipy_special().zeta, [("B", 8), ("B", 8)], input_range=(1.5, 9.0)),
    ],
)
def lower_zeta(ctx: Any, s: Any, q: Any, **_: Any) -> Any:
    """zeta (Hurwitz, no ONNX op) -> float64 Euler-Maclaurin: 16 Pow terms, the integral
    and 12 Bernoulli corrections (see the module docstring)."""
    return decompose_f64(ctx, zeta, s, q)


_ORDERS = np.arange(6.0)
# fmt: off
_POLYGAMMA_EDGES = np.array(
    [
        (0.0, -2.0), (1.0, 0.0), (2.0, 0.0), (1.0, -0.0), (2.0, -1.0), (3.0, -3.0), (1.5, 1.0),
        (-1.0, 1.0), (np.inf, 1.0), (np.nan, 1.0), (1.0, np.nan), (1.0, np.inf), (0.0, np.inf),
        (3.0, -1.5), (4.0, 1e-3), (20.0, 10.0), (2.0, -0.5), (1.0, 1e30), (2.0, 1e-30), (0.0, 1.0),
        (1.0, 1.0), (6.0, 0.25), (30.0, 2.0),
    ]
)
# fmt: on


@family.lowering(
    lax.polygamma_p,
    cases=lambda: [
        case(
            "polygamma",
            lambda m, x: lax.polygamma(jnp.floor(m), x),
            [("B", 20), ("B", 20)],
            input_range=(0.0, 7.0),
        ),
        case(
            "polygamma_orders",
            lambda x: lax.polygamma(jnp.broadcast_to(_ORDERS.astype(x.dtype), x.shape), x),
            [("B", 6)],
            input_range=(-4.5, 12.0),
        ),
        case("polygamma_edges", lax.polygamma, list(_POLYGAMMA_EDGES.T)),
        case(
            "jsp_polygamma",
            lambda x: scipy_special().polygamma(2, x),
            [("B", 8)],
            input_range=(0.1, 9.0),
        ),
        case(
            "trigamma_grad",
            grad(lambda x: scipy_special().polygamma(1, x)),
            [(8,)],
            input_range=(0.1, 9),
        ),
    ],
)
def lower_polygamma(ctx: Any, m: Any, x: Any, **_: Any) -> Any:
    """polygamma (no ONNX op) -> float64 ``(-1)^(m+1) exp(lgamma(m + 1)) zeta(m + 1, x)``,
    digamma at ``m = 0``, NaN unless m is a non-negative integer."""
    return decompose_f64(ctx, polygamma, m, x)


register = family.register
