"""Exponentially scaled modified Bessel functions: bessel_i0e, bessel_i1e.

``i0e(x) = exp(-|x|) I0(x)`` and ``i1e(x) = exp(-|x|) I1(x)`` have no ONNX op; they
decompose (through :func:`jax2onnx_lax.gamma.decompose_f64`, in float64) into two fixed
polynomials and a Where:

- ``|x| < 22``: the power series ``I_nu(x) = (x/2)^nu sum_k (x^2/4)^k / (k! (k + nu)!)``,
  all terms positive (no cancellation); 38 terms leave a relative remainder below 1e-17
  at ``|x| = 22``.
- ``|x| >= 22``: Hankel's asymptotic expansion ``exp(-x) I_nu(x) ~ (2 pi x)^(-1/2)
  sum_k (-1)^k a_k(nu) / x^k``, ``a_k(nu) = prod_{j<=k} (4 nu^2 - (2j - 1)^2) / (k! 8^k)``;
  24 terms: the first omitted one is below 1e-17 from ``x = 22`` on.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case
from jax2onnx_lax.gamma import decompose_f64, grad, horner, scipy_special

family = Family("lax")

_SPLIT = 22.0
_SERIES_TERMS = 38
_ASYMPTOTIC_TERMS = 24


def _series(nu: int) -> tuple[float, ...]:
    """Coefficients of the power series in ``u = x^2 / 256``: ``64^k / (k! (k + nu)!)``.

    The factor 64^k keeps every coefficient above 1e-20: ONNX Runtime's no-op elimination
    drops an ``Add`` of a float64 scalar that rounds to 0 in float32 (below 7e-46), which
    the plain coefficients ``1/(k! (k + nu)!)`` are from k = 23 on.
    """
    return tuple(
        float(Fraction(64**k, math.factorial(k) * math.factorial(k + nu)))
        for k in range(_SERIES_TERMS)
    )


def _asymptotic(nu: int) -> tuple[float, ...]:
    coeffs, c = [], Fraction(1)
    for k in range(_ASYMPTOTIC_TERMS):
        coeffs.append(float(c))
        c *= Fraction(-(4 * nu * nu - (2 * k + 1) ** 2), (k + 1) * 8)
    return tuple(coeffs)


_I0_SERIES, _I1_SERIES = _series(0), _series(1)
_I0_ASYMPTOTIC, _I1_ASYMPTOTIC = _asymptotic(0), _asymptotic(1)


def _scaled(x: Any, series: tuple[float, ...], asymptotic: tuple[float, ...]) -> Any:
    """exp(-|x|) I_nu(|x|) / (|x|/2)^nu below the split, exp(-|x|) I_nu(|x|) above it."""
    a = jnp.abs(x)
    small = jnp.exp(-a) * horner(a * a * (1 / 256), series)
    large = horner(1 / a, asymptotic) / jnp.sqrt((2 * math.pi) * a)
    return a < _SPLIT, small, large


def bessel_i0e(x: Any, dtype: Any = None) -> Any:
    """exp(-|x|) I0(x)."""
    below, small, large = _scaled(x, _I0_SERIES, _I0_ASYMPTOTIC)
    return jnp.where(below, small, large)


def bessel_i1e(x: Any, dtype: Any = None) -> Any:
    """exp(-|x|) I1(x), odd in x (keeps -0.0)."""
    below, small, large = _scaled(x, _I1_SERIES, _I1_ASYMPTOTIC)
    return jnp.where(below, 0.5 * x * small, jnp.where(x < 0, -large, large))


_EDGES = np.array(
    [0.0, -0.0, 1e-30, -1e-30, 1e-8, np.inf, -np.inf, np.nan, 22.0, -22.0, 21.999998]
    + [8.0, -8.0, 500.0, 700.0, 1e30, -3e38]
)


@family.lowering(
    lax.bessel_i0e_p,
    cases=lambda: [
        case("bessel_i0e", lax.bessel_i0e, [("B", 20)], input_range=(-40.0, 40.0)),
        case("bessel_i0e_split", lax.bessel_i0e, [(40,)], input_range=(18.0, 26.0)),
        case("bessel_i0e_large", lax.bessel_i0e, [(40,)], input_range=(-1e6, 1e6)),
        case("bessel_i0e_edges", lax.bessel_i0e, [_EDGES]),
        case("i0e", scipy_special().i0e, [("B", 8)], input_range=(-30.0, 30.0)),
        case("i0", scipy_special().i0, [("B", 8)], input_range=(-30.0, 30.0)),
        case("i0e_grad", grad(scipy_special().i0e), [("B", 8)], input_range=(-30.0, 30.0)),
    ],
)
def lower_bessel_i0e(ctx: Any, x: Any, **_: Any) -> Any:
    """bessel_i0e (no ONNX op) -> float64 power series below |x| = 22, asymptotic expansion
    above, one Where (see the module docstring)."""
    return decompose_f64(ctx, bessel_i0e, x)


@family.lowering(
    lax.bessel_i1e_p,
    cases=lambda: [
        case("bessel_i1e", lax.bessel_i1e, [("B", 20)], input_range=(-40.0, 40.0)),
        case("bessel_i1e_split", lax.bessel_i1e, [(40,)], input_range=(-26.0, -18.0)),
        case("bessel_i1e_large", lax.bessel_i1e, [(40,)], input_range=(-1e6, 1e6)),
        case("bessel_i1e_edges", lax.bessel_i1e, [_EDGES]),
        case("i1e", scipy_special().i1e, [("B", 8)], input_range=(-30.0, 30.0)),
        case("i1", scipy_special().i1, [("B", 8)], input_range=(-30.0, 30.0)),
        case("i1e_grad", grad(scipy_special().i1e), [("B", 8)], input_range=(-30.0, 30.0)),
    ],
)
def lower_bessel_i1e(ctx: Any, x: Any, **_: Any) -> Any:
    """bessel_i1e (no ONNX op) -> float64 power series below |x| = 22, asymptotic expansion
    above, one Where (see the module docstring)."""
    return decompose_f64(ctx, bessel_i1e, x)


register = family.register
