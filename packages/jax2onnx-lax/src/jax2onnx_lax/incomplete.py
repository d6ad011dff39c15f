"""Incomplete gamma and beta functions: igamma, igammac, igamma_grad_a, betainc.

These are iterative: a power series and a continued fraction for the incomplete gamma
function, a continued fraction for the incomplete beta function. Each lowering decomposes
(through :func:`jax2onnx_lax.gamma.decompose_f64`, in float64) into one ONNX ``Loop``
that iterates until every element has converged to the output dtype's precision (relative
change below 2^-53 in float64, 2^-32 in float32), with a cap well above what the domain
needs; converged and invalid elements are carried along unchanged or on safe stand-in
values, so they never hold the loop open.

Iteration counts grow like ``sqrt(a)`` (``sqrt(max(a, b))`` for betainc) near the
transition point ``x ~ a``: about 9 sqrt(a) steps for float64, so the caps give full
precision for ``a`` (and ``a``, ``b``) up to about 2e5. The prefactors ``x^a e^-x /
Gamma(a)`` and ``x^a (1-x)^b / B(a, b)`` avoid the cancellation of the plain lgamma formula
for large parameters (Stirling's form, see ``_log_prefactor``); JAX's own float64 results
lose digits there (2e-10 relative at a = b = 1e4), so the cases keep parameters below.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case
from jax2onnx_lax.gamma import (
    HALF_LOG_2PI,
    SHIFT,
    decompose_f64,
    digamma,
    grad,
    lgamma,
    scipy_special,
    stirling_correction,
)

family = Family("lax")

_GAMMA_CAP = 4096  # loop iterations: series / continued fraction of the incomplete gamma
_BETA_CAP = 2048  # loop iterations (two partial numerators each) of the incomplete beta
_RESCALE = 2.0**256  # continued fraction recurrences are rescaled by powers of two


def tolerance(dtype: Any) -> float:
    """Relative change at which an iteration stops: below the output dtype's half ulp."""
    return 2.0**-53 if np.dtype(dtype).itemsize >= 8 else 2.0**-32


def _gamma_loop(a_s: Any, x_s: Any, a_f: Any, x_f: Any, tol: float, grad: bool):
    """The series (on ``a_s, x_s``) and the continued fraction (on ``a_f, x_f``), one loop.

    Series: ``P(a, x) Gamma(a + 1) / (x^a e^-x) = S = sum_n s_n``, ``s_n = x^n / ((a+1)
    ... (a+n))``; for the a-derivative also ``U = sum_n s_n h_n`` with ``h_n = sum_{j<=n}
    1/(a+j)`` (the derivative of ``log s_n`` is ``-h_n``). An element stops when the
    geometric bound ``s_n x / (a + n + 1 - x)`` of the remaining terms is below tolerance.

    Continued fraction (Legendre): ``Q(a, x) Gamma(a) / (x^a e^-x) = F = 1/(b_1 + c_2/(b_2
    + c_3/(b_3 + ...)))`` with ``b_n = x + 2n - 1 - a`` and ``c_{n+1} = -n (n - a)``, by the
    forward recurrences ``A_n = b_n A_{n-1} + c_n A_{n-2}`` (same for ``B``) and, for the
    a-derivative, their derivatives in ``a``; all are rescaled together by a power of two
    when ``B`` grows large (the ratios are unchanged). An element stops when ``F`` (and
    ``dF/da``) change by less than the tolerance.

    Returns ``(S, U, F, dF/da)`` (``U`` and ``dF/da`` are None without ``grad``).
    """
    zero = jnp.zeros_like(a_s)
    b1 = x_f + 1 - a_f
    # series: s_n, S (and h_n, U); fraction: A_{n-1}, A_n, B_{n-1}, B_n, F_n (and the
    # a-derivatives of the four, dF_n/da), all at n = 1
    series = (zero + 1, zero + 1) + ((zero, zero) if grad else ())
    frac = (zero, zero + 1, zero + 1, b1, 1 / b1)
    if grad:
        frac += (zero, zero, zero, zero - 1, 1 / (b1 * b1))

    def body(state):
        n, _, series, frac = state
        term = series[0] * x_s / (a_s + n)
        s = series[1] + term
        rest = term * x_s / (a_s + n + 1 - x_s)  # bounds the terms still to come
        busy = rest > tol * s
        new_series = (term, s)
        if grad:
            h = series[2] + 1 / (a_s + n)
            u = series[3] + term * h
            busy = busy | (rest * h > tol * jnp.abs(u))
            new_series += (h, u)
        b = x_f + 2 * n + 1 - a_f  # b_{n+1}
        c = n * (a_f - n)  # c_{n+1}
        a2, a1, q2, q1, f = frac[:5]
        kept = [a1, b * a1 + c * a2, q1, b * q1 + c * q2]
        if grad:
            da2, da1, dq2, dq1, df = frac[5:]
            kept += [da1, b * da1 - a1 + c * da2 + n * a2, dq1, b * dq1 - q1 + c * dq2 + n * q2]
        scale = jnp.where(jnp.abs(kept[3]) > _RESCALE, 1 / _RESCALE, 1.0)
        kept = [v * scale for v in kept]
        f_new = kept[1] / kept[3]
        busy = busy | (jnp.abs(f_new - f) > tol * jnp.abs(f_new))
        new_frac = (*kept[:4], f_new)
        if grad:
            df_new = (kept[5] - f_new * kept[7]) / kept[3]
            busy = busy | (jnp.abs(df_new - df) > tol * jnp.abs(df_new))
            new_frac += (*kept[4:], df_new)
        return n + 1, jnp.any(busy), new_series, new_frac

    def cond(state):
        return (state[0] < _GAMMA_CAP) & state[1]

    init = (jnp.ones((), a_s.dtype), jnp.asarray(True), series, frac)
    _, _, series, frac = lax.while_loop(cond, body, init)
    if grad:
        return series[1], series[3], frac[4], frac[9]
    return series[1], None, frac[4], None


def _gamma_parts(a: Any, x: Any, dtype: Any, grad: bool):
    """Shared set-up: which elements take the series (``x < a + 1``), the loop's results
    and the log-prefactors ``log(x^a e^-x / Gamma(a + 1))`` (series) and ``... / Gamma(a)``."""
    ok = (a > 0) & (x > 0) & jnp.isfinite(a) & jnp.isfinite(x)
    use_series = x < a + 1
    on_series, on_frac = ok & use_series, ok & ~use_series
    loop = _gamma_loop(
        jnp.where(on_series, a, 1.0),
        jnp.where(on_series, x, 0.0),  # stand-in: converged at once
        jnp.where(on_frac, a, 1.0),
        jnp.where(on_frac, x, 1.0),  # a = 1: c_2 = 0, exact at once
        tolerance(dtype),
        grad,
    )
    log_x = jnp.log(x)
    log_q = _log_prefactor(a, x, log_x)
    return use_series, loop, log_x, log_q - jnp.log(a), log_q


def _log_prefactor(a: Any, x: Any, log_x: Any) -> Any:
    """log(x^a e^-x / Gamma(a)).

    ``a log x - x - lgamma(a)`` loses about ``a log x`` ulps to cancellation; from
    ``a = 10`` Stirling's formula turns it into ``-a phi((x - a)/a) + log(a)/2 - log(2 pi)/2 -
    c(a)`` with ``phi(u) = u - log1p(u)`` and Stirling's correction ``c``, whose error is
    only about ``|x - a|`` ulps.
    """
    plain = a * log_x - x - lgamma(a)
    big = jnp.where(a >= SHIFT, a, SHIFT)
    u = (x - big) / big
    stirling = -big * (u - jnp.log1p(u)) + 0.5 * jnp.log(big) - HALF_LOG_2PI
    return jnp.where(a >= SHIFT, stirling - stirling_correction(big), plain)


def _gamma_domain_error(a: Any, x: Any) -> Any:
    return jnp.isnan(a) | jnp.isnan(x) | (x < 0) | (a < 0) | ((a == 0) & (x == 0))


def igamma(a: Any, x: Any, dtype: Any) -> Any:
    """Regularized lower incomplete gamma P(a, x): the series below ``x = a + 1``, else
    ``1 - Q`` from the continued fraction. Special values as JAX: 0 at ``x = 0``, 1 at
    ``x = inf``, NaN outside the domain; at ``a = 0`` 1 for ``x >= 1`` and NaN below (JAX's
    series divides by ``a``), at ``a = inf`` 0 for ``x < 1`` and NaN above."""
    use_series, (s, _, f, _), _, log_p, log_q = _gamma_parts(a, x, dtype, grad=False)
    value = jnp.where(use_series, jnp.exp(log_p) * s, 1 - jnp.exp(log_q) * f)
    value = jnp.where(a == jnp.inf, jnp.where(x < 1, 0.0, jnp.nan), value)
    value = jnp.where(x == jnp.inf, 1.0, value)
    value = jnp.where(a == 0, jnp.where(x < 1, jnp.nan, 1.0), value)
    value = jnp.where(x == 0, 0.0, value)
    return jnp.where(_gamma_domain_error(a, x), jnp.nan, value)


def igammac(a: Any, x: Any, dtype: Any) -> Any:
    """Regularized upper incomplete gamma Q(a, x) = 1 - P(a, x): the continued fraction
    above ``x = a + 1``, else ``1 - P`` from the series; special values as JAX."""
    use_series, (s, _, f, _), _, log_p, log_q = _gamma_parts(a, x, dtype, grad=False)
    value = jnp.where(use_series, 1 - jnp.exp(log_p) * s, jnp.exp(log_q) * f)
    value = jnp.where(a == jnp.inf, jnp.where(x < 1, 1.0, jnp.nan), value)
    value = jnp.where(x == jnp.inf, 0.0, value)
    value = jnp.where(a == 0, 0.0, value)
    value = jnp.where(x == 0, 1.0, value)
    return jnp.where(_gamma_domain_error(a, x), jnp.nan, value)


def igamma_grad_a(a: Any, x: Any, dtype: Any) -> Any:
    """dP(a, x)/da. Series: ``e^log_p ((log x - psi(a + 1)) S - U)``; continued fraction:
    ``-e^log_q ((log x - psi(a)) F + dF/da)``. 0 at ``x = 0``; NaN for ``a <= 0``, at
    ``x = inf`` and at ``a = inf`` (as JAX)."""
    use_series, (s, u, f, df), log_x, log_p, log_q = _gamma_parts(a, x, dtype, grad=True)
    from_series = jnp.exp(log_p) * ((log_x - digamma(a + 1)) * s - u)
    from_frac = -jnp.exp(log_q) * ((log_x - digamma(a)) * f + df)
    value = jnp.where(use_series, from_series, from_frac)
    value = jnp.where(jnp.isinf(a) | jnp.isinf(x), jnp.nan, value)
    value = jnp.where(x == 0, 0.0, value)
    error = jnp.isnan(a) | jnp.isnan(x) | (x < 0) | (a <= 0)
    return jnp.where(error, jnp.nan, value)


_TINY = 1e-300  # Lentz: stand-in for a vanishing denominator


def _beta_fraction(p: Any, q: Any, z: Any, tol: float) -> Any:
    """``K = 1 + d_1/(1 + d_2/(1 + ...))`` by Lentz's method, where I_z(p, q) =
    z^p (1-z)^q / (p B(p, q) K) with d_{2m+1} = -(p+m)(p+q+m) z / ((p+2m)(p+2m+1)) and
    d_{2m} = m (q-m) z / ((p+2m-1)(p+2m)). One loop iteration takes d_{2m} and d_{2m+1}."""

    def step(k, c, d, d_n):
        d = 1 + d_n * d
        d = 1 / jnp.where(jnp.abs(d) < _TINY, _TINY, d)
        c = 1 + d_n / c
        c = jnp.where(jnp.abs(c) < _TINY, _TINY, c)
        return k * c * d, c, d, jnp.abs(c * d - 1) > tol

    one = jnp.ones_like(z)
    k, c, d, _ = step(one, one, jnp.zeros_like(z), -(p + q) * z / (p + 1))

    def body(state):
        m, _, k, c, d = state
        even = m * (q - m) * z / ((p + 2 * m - 1) * (p + 2 * m))
        odd = -(p + m) * (p + q + m) * z / ((p + 2 * m) * (p + 2 * m + 1))
        k, c, d, busy_even = step(k, c, d, even)
        k, c, d, busy_odd = step(k, c, d, odd)
        return m + 1, jnp.any(busy_even | busy_odd), k, c, d

    def cond(state):
        return (state[0] < _BETA_CAP) & state[1]

    init = (jnp.ones((), z.dtype), jnp.asarray(True), k, c, d)
    return lax.while_loop(cond, body, init)[2]


def _log_beta_prefactor(a: Any, b: Any, x: Any, p: Any, q: Any) -> Any:
    """log(x^a (1 - x)^b / (p B(a, b))), ``p`` being ``a`` or ``b`` after the swap.

    Directly: ``a log x + b log1p(-x) - lgamma(p + 1) - lgamma(q) + lgamma(p + q)``, whose
    lgammas lose about ``a + b`` ulps for large parameters. When both are at least 10,
    Stirling's formula gives ``-a phi(u) - b phi(v) + log(ab/(a+b))/2 - log(2 pi)/2 - c(a)
    - c(b) + c(a + b) - log p`` with ``phi(t) = t - log1p(t)``, ``u = x/mu - 1``, ``v = (1 -
    x)/(1 - mu) - 1``, ``mu = a/(a + b)`` (``a u + b v = 0``, so nothing large cancels).
    """
    plain = a * jnp.log(x) + b * jnp.log1p(-x) - (lgamma(p + 1) + lgamma(q) - lgamma(p + q))
    big = (a >= SHIFT) & (b >= SHIFT)
    a, b = jnp.where(big, a, SHIFT), jnp.where(big, b, SHIFT)
    total = a + b
    u = (x - a / total) * total / a
    v = (a / total - x) * total / b
    stirling = (
        a * (jnp.log1p(u) - u)
        + b * (jnp.log1p(v) - v)
        + 0.5 * jnp.log(a * b / total)
        - HALF_LOG_2PI
        - stirling_correction(a)
        - stirling_correction(b)
        + stirling_correction(total)
    )
    return jnp.where(big, stirling - jnp.log(p), plain)


def betainc(a: Any, b: Any, x: Any, dtype: Any) -> Any:
    """Regularized incomplete beta I_x(a, b): the continued fraction for
    ``x < (a + 1)/(a + b + 2)``, else ``1 - I_{1-x}(b, a)``; special values as JAX."""
    ok = (a > 0) & (b > 0) & jnp.isfinite(a) & jnp.isfinite(b) & (x >= 0) & (x <= 1)
    swap = x >= (a + 1) / (a + b + 2)
    p = jnp.where(ok, jnp.where(swap, b, a), 1.0)
    q = jnp.where(ok, jnp.where(swap, a, b), 1.0)
    z = jnp.where(ok, jnp.where(swap, 1 - x, x), 0.5)
    k = _beta_fraction(p, q, z, tolerance(dtype))
    part = jnp.exp(_log_beta_prefactor(a, b, x, p, q)) / k
    value = jnp.where(swap, 1 - part, part)
    a_zero = (a == 0) | (b == jnp.inf)
    b_zero = (b == 0) | (a == jnp.inf)
    value = jnp.where((b_zero & (x != 1)) | (a_zero & (x == 0)), 0.0, value)
    value = jnp.where((a_zero & (x != 0)) | (b_zero & (x == 1)), 1.0, value)
    error = jnp.isnan(a) | jnp.isnan(b) | jnp.isnan(x) | (a < 0) | (b < 0) | (x < 0) | (x > 1)
    return jnp.where(error | (a_zero & b_zero), jnp.nan, value)


# -- lowerings ------------------------------------------------------------------------

_EDGES = np.array([0.0, -0.0, 1e-30, 0.5, 1.0, 2.0, 30.0, np.inf, -1.0, np.nan])
_A_EDGES, _X_EDGES = (v.ravel() for v in np.meshgrid(_EDGES, _EDGES, indexing="ij"))


def _near_transition(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Large shapes a with x within 3 sqrt(a) of a, where the loop runs longest."""
    rng = np.random.default_rng(seed)
    a = np.exp(rng.uniform(np.log(30.0), np.log(1e4), 24))
    return a, a + np.sqrt(a) * rng.uniform(-3.0, 3.0, 24)


# JAX's float32 igamma loses about a log(x) ulps in its prefactor (1e-4 relative at
# a = 1000), so cases with large a compare in float64 only: in float32 they would measure
# JAX's rounding error, not ours.
_LARGE = dict(inputs=list(_near_transition(0)), variants=["f64"])


def _gamma_cases(name: str, fn: Any) -> list[Any]:
    return [
        case(name, fn, [("B", 20), ("B", 20)], input_range=(0.05, 12.0)),
        case(f"{name}_small", fn, [(40,), (40,)], input_range=(1e-3, 1.5)),
        case(f"{name}_large", fn, **_LARGE),
        case(f"{name}_edges", fn, [_A_EDGES, _X_EDGES]),
    ]


@family.lowering(
    lax.igamma_p,
    cases=lambda: [
        *_gamma_cases("igamma", lax.igamma),
        case("gammainc", scipy_special().gammainc, [("B", 8), ("B", 8)], input_range=(0.05, 12.0)),
        case(
            "gammainc_grad_x",
            grad(scipy_special().gammainc, 1),
            [("B", 8), ("B", 8)],
            input_range=(0.1, 12.0),
        ),
        case(
            "gammainc_grad_a",
            grad(scipy_special().gammainc, 0),
            [("B", 8), ("B", 8)],
            input_range=(0.1, 12.0),
        ),
    ],
)
def lower_igamma(ctx: Any, a: Any, x: Any, **_: Any) -> Any:
    """igamma (no ONNX op) -> float64 power series (x < a + 1) or 1 - continued fraction, in
    one Loop until converged (see the module docstring), times a float64 prefactor."""
    return decompose_f64(ctx, igamma, a, x)


@family.lowering(
    lax.igammac_p,
    cases=lambda: [
        *_gamma_cases("igammac", lax.igammac),
        case(
            "gammaincc", scipy_special().gammaincc, [("B", 8), ("B", 8)], input_range=(0.05, 12.0)
        ),
        case(
            "gammaincc_grad_x",
            grad(scipy_special().gammaincc, 1),
            [("B", 8), ("B", 8)],
            input_range=(0.1, 12.0),
        ),
    ],
)
def lower_igammac(ctx: Any, a: Any, x: Any, **_: Any) -> Any:
    """igammac (no ONNX op) -> float64 continued fraction (x >= a + 1) or 1 - power series,
    in one Loop until converged, times a float64 prefactor."""
    return decompose_f64(ctx, igammac, a, x)


@family.lowering(
    lax.igamma_grad_a_p, cases=lambda: _gamma_cases("igamma_grad_a", lax.igamma_grad_a)
)
def lower_igamma_grad_a(ctx: Any, a: Any, x: Any, **_: Any) -> Any:
    """igamma_grad_a (no ONNX op) -> the igamma series and continued fraction carried with
    their derivatives in a, one float64 Loop until both have converged."""
    return decompose_f64(ctx, igamma_grad_a, a, x)


def _gamma_sample_grad(alpha: Any) -> Any:
    """d sample / d alpha of ``jax.random.gamma`` (its implicit reparameterization)."""
    return grad(lambda a: jax.random.gamma(jax.random.key(42), a))(alpha)


# Not a primitive in JAX 0.10: lax.random_gamma_grad (the gradient of jax.random.gamma) is
# JAX's own while loops around lgamma and digamma, so these cases test those lowerings.
family.add_cases(
    "random_gamma_grad",
    lambda: [
        case(
            "random_gamma_grad",
            lax.random_gamma_grad,
            [("B", 8), ("B", 8)],
            input_range=(0.1, 12.0),
        ),
        case(
            "gamma_sample_grad",
            _gamma_sample_grad,
            [("B", 8)],
            input_range=(0.2, 12.0),
        ),
    ],
)

_BETA_EDGES = np.array([0.0, 0.5, 2.0, np.inf, -1.0, np.nan])
_X01_EDGES = np.array([0.0, -0.0, 1e-30, 0.3, 0.7, 1.0, 1.5, -0.5, np.nan])
_BETA_GRID = [v.ravel() for v in np.meshgrid(_BETA_EDGES, _BETA_EDGES, _X01_EDGES, indexing="ij")]
# a or b near zero: JAX's float32 betainc is off by up to 2e-5 there (I_0.7(0.5, 1e-30) is
# 2e-15, JAX float32 gives 1.9e-5), so these compare in float64 only.
_TINY_AB = np.array([1e-30, 1e-300, 1e-3, 0.5])
_TINY_GRID = [v.ravel() for v in np.meshgrid(_TINY_AB, _TINY_AB, _X01_EDGES[2:6], indexing="ij")]


def _beta_large(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = np.exp(rng.uniform(np.log(20.0), np.log(5e3), (2, 24)))
    mean = a / (a + b)
    return [
        a,
        b,
        np.clip(mean + rng.uniform(-3, 3, 24) * np.sqrt(mean * (1 - mean) / (a + b)), 0, 1),
    ]


@family.lowering(
    lax.regularized_incomplete_beta_p,
    cases=lambda: [
        case(
            "betainc",
            lambda a, b, x: lax.betainc(8 * a, 8 * b, x),
            [("B", 20), ("B", 20), ("B", 20)],
            input_range=(0.02, 0.98),
        ),
        case("betainc_small", lax.betainc, [(40,), (40,), (40,)], input_range=(0.01, 1.0)),
        # float64 only, for the reason given at _LARGE
        case("betainc_large", lax.betainc, _beta_large(1), variants=["f64"]),
        case("betainc_edges", lax.betainc, _BETA_GRID),
        case("betainc_tiny", lax.betainc, _TINY_GRID, variants=["f64"]),
        case(
            "jsp_betainc",
            lambda a, b, x: scipy_special().betainc(4 * a, 4 * b, x),
            [("B", 8), ("B", 8), ("B", 8)],
            input_range=(0.02, 0.98),
        ),
        case(
            "betainc_grad_x",
            grad(lambda a, b, x: scipy_special().betainc(4 * a, 4 * b, x), 2),
            [("B", 8), ("B", 8), ("B", 8)],
            input_range=(0.02, 0.98),
        ),
    ],
)
def lower_betainc(ctx: Any, a: Any, b: Any, x: Any, **_: Any) -> Any:
    """regularized_incomplete_beta (no ONNX op) -> float64 continued fraction by Lentz's
    method in one Loop until converged, after the symmetry swap, times a float64 prefactor."""
    return decompose_f64(ctx, betainc, a, b, x)


register = family.register
