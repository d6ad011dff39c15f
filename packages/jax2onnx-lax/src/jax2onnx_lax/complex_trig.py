"""Trigonometric and hyperbolic lax primitives (and their inverses) on complex values.

Like :mod:`jax2onnx_lax.complex_math`, each rule is registered with
``values="complex"`` and computes on the parts in real JAX code (Split -> real sines,
hyperbolic functions, atan2, asinh ... -> Concat). The inverse functions use Kahan's
principal-branch forms through complex square roots (products whose terms share one
sign, so nothing cancels); asin, acos, asinh and acosh count a zero of either sign as +0
as JAX does, atan and atanh follow the sign of a zero on their cuts as JAX does.
Infinite or nan inputs are not checked against JAX.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case
from jax2onnx_lax._complex import (
    c_asin,
    c_div,
    c_log,
    c_mul,
    c_sqrt,
    join,
    negative,
    parts,
    plus_zero,
    stored_rule,
    unary_rule,
)

family = Family("lax")
register = family.register

_C = [np.complex64]
# points on and next to the branch cuts, zeros of both signs
_CUTS = np.array(
    [
        2 + 0j,
        complex(2, -0.0),
        complex(-2, 0.0),
        complex(-2, -0.0),
        2j,
        complex(-0.0, 2),
        -2j,
        complex(-0.0, -2),
        0.5 + 0j,
        1e-9 + 1e-9j,
        -0.3 + 1e-7j,
    ]
)
# |imaginary part| beyond which tan's imaginary part is +-1 to the last bit
_FLAT = 20.0


def _cases(name, fn, **extra):
    return [
        case(f"complex_{name}", fn, [("B", 3)], dtypes=_C, **extra),
        case(f"complex_{name}_wide", fn, [(6,)], dtypes=_C, input_range=(-4.0, 4.0)),
        case(f"complex_{name}_cuts", fn, [_CUTS]),
    ]


def _tan(a, b):
    sa, ca = jnp.sin(a), jnp.cos(a)
    sh, ch = jnp.sinh(b), jnp.cosh(b)
    den = ca * ca + sh * sh
    re, im = sa * ca / den, sh * ch / den
    flat = jnp.abs(b) > _FLAT
    tail = 4 * sa * ca * jnp.exp(-2 * jnp.abs(b))
    one = jnp.where(b < 0, -jnp.ones_like(b), jnp.ones_like(b))
    return jnp.where(flat, tail, re), jnp.where(flat, one, im)


def _atanh(a, b):
    m = jnp.abs(a)  # atanh(-z) = -atanh(z): log1p of a positive ratio, no cancellation
    x = 1 - m
    re = 0.25 * jnp.log1p(4 * m / (x * x + b * b))
    re = jnp.where(negative(a), -re, re)
    return re, 0.5 * jnp.arctan2(2 * b, (1 - a) * (1 + a) - b * b)


def _times_i(fn):
    """f(z) = -i g(iz) (asinh from asin, atan from atanh, tanh from tan)."""

    def rotated(a, b):
        x, y = fn(-b, a)
        return y, -x

    return rotated


@family.lowering(lax.sin_p, values="complex", cases=lambda: _cases("sin", lax.sin))
@unary_rule
def sin(a, b):
    """sin -> sin a cosh b + i cos a sinh b."""
    return jnp.sin(a) * jnp.cosh(b), jnp.cos(a) * jnp.sinh(b)


@family.lowering(lax.cos_p, values="complex", cases=lambda: _cases("cos", lax.cos))
@unary_rule
def cos(a, b):
    """cos -> cos a cosh b - i sin a sinh b."""
    return jnp.cos(a) * jnp.cosh(b), -jnp.sin(a) * jnp.sinh(b)


@family.lowering(
    lax.tan_p,
    values="complex",
    cases=lambda: [
        *_cases("tan", lax.tan),
        case("complex_tan_flat", lax.tan, [np.array([1 + 30j, -2 - 50j, 0.3 + 400j])]),
    ],
)
@unary_rule
def tan(a, b):
    """tan -> (sin a cos a + i sinh b cosh b) / (cos^2 a + sinh^2 b): the denominator adds
    squares (cos 2a + cosh 2b cancels near the poles). For |b| > 20 the result is
    4 sin a cos a e^(-2|b|) +- i (no overflow of sinh^2)."""
    return _tan(a, b)


@family.lowering(lax.sinh_p, values="complex", cases=lambda: _cases("sinh", lax.sinh))
@unary_rule
def sinh(a, b):
    """sinh -> sinh a cos b + i cosh a sin b."""
    return jnp.sinh(a) * jnp.cos(b), jnp.cosh(a) * jnp.sin(b)


@family.lowering(lax.cosh_p, values="complex", cases=lambda: _cases("cosh", lax.cosh))
@unary_rule
def cosh(a, b):
    """cosh -> cosh a cos b + i sinh a sin b."""
    return jnp.cosh(a) * jnp.cos(b), jnp.sinh(a) * jnp.sin(b)


@family.lowering(
    lax.tanh_p,
    values="complex",
    cases=lambda: [
        *_cases("tanh", lax.tanh),
        case("complex_tanh_flat", lax.tanh, [np.array([30 + 1j, -50 - 2j, 400 + 0.3j])]),
    ],
)
@unary_rule
def tanh(a, b):
    """tanh(z) = -i tan(iz) (see tan: squares added in the denominator, +-1 beyond |a| > 20)."""
    return _times_i(_tan)(a, b)


@family.lowering(lax.asin_p, values="complex", cases=lambda: _cases("asin", lax.asin))
@unary_rule
def asin(a, b):
    """asin by Kahan's form (see ``_complex.c_asin``): atan2(a, Re(sqrt(1-z) sqrt(1+z)))
    + i asinh(Im(conj(sqrt(1-z)) sqrt(1+z)))."""
    return c_asin(a, b)


@family.lowering(lax.acos_p, values="complex", cases=lambda: _cases("acos", lax.acos))
@unary_rule
def acos(a, b):
    """acos by Kahan's form: 2 atan2(Re sqrt(1-z), Re sqrt(1+z))
    + i asinh(Im(conj(sqrt(1+z)) sqrt(1-z))); zeros count as +0 like JAX's."""
    a, b = plus_zero(a), plus_zero(b)
    p, q = c_sqrt(1 - a, -b)
    r, s = c_sqrt(1 + a, b)
    return 2 * jnp.arctan2(p, r), jnp.arcsinh(r * q - s * p)


@family.lowering(lax.atan_p, values="complex", cases=lambda: _cases("atan", lax.atan))
@unary_rule
def atan(a, b):
    """atan(z) = -i atanh(iz) (see atanh)."""
    return _times_i(_atanh)(a, b)


@family.lowering(lax.asinh_p, values="complex", cases=lambda: _cases("asinh", lax.asinh))
@unary_rule
def asinh(a, b):
    """asinh(z) = -i asin(iz) (Kahan's asin, see ``_complex.c_asin``)."""
    return _times_i(c_asin)(a, b)


@family.lowering(lax.acosh_p, values="complex", cases=lambda: _cases("acosh", lax.acosh))
@unary_rule
def acosh(a, b):
    """acosh by Kahan's form: asinh(Re(conj(sqrt(z-1)) sqrt(z+1)))
    + 2i atan2(Im sqrt(z-1), Re sqrt(z+1)); zeros count as +0 like JAX's."""
    a, b = plus_zero(a), plus_zero(b)
    p, q = c_sqrt(a - 1, b)
    r, s = c_sqrt(a + 1, b)
    return jnp.arcsinh(p * r + q * s), 2 * jnp.arctan2(q, r)


@family.lowering(
    lax.atanh_p,
    values="complex",
    cases=lambda: [
        *_cases("atanh", lax.atanh),
        case(
            "complex_atanh_vmap_grad",
            jax.vmap(jax.grad(lambda x: jnp.abs(jnp.arctanh(x * 1j)))),
            [(3,)],
        ),
    ],
)
@unary_rule
def atanh(a, b):
    """atanh -> +-log1p(4|a| / ((1-|a|)^2 + b^2)) / 4 (sign of a) + i atan2(2b, (1-a)(1+a)
    - b^2) / 2: the halves of log1p(z) - log1p(-z) merged, so nothing cancels near 0 or
    near -1 (odd symmetry keeps the log1p argument positive); the cut |a| > 1 follows the
    sign of a zero b, as JAX does."""
    return _atanh(a, b)


def _atan2(y, x):
    (a, b), (c, d) = parts(y), parts(x)
    sq = c_mul(a, b, a, b)
    s = c_sqrt(*(u + v for u, v in zip(c_mul(c, d, c, d), sq, strict=True)))
    w = c_log(*c_div(c - b, d + a, *s))
    return join(w[1], -w[0])


@family.lowering(
    lax.atan2_p,
    values="complex",
    cases=lambda: [
        case("complex_atan2", lax.atan2, [("B", 3), ("B", 3)], dtypes=[np.complex64] * 2)
    ],
)
@stored_rule
def atan2(y, x, **_):
    """atan2 on complex values -> -i log((x + iy) / sqrt(x^2 + y^2)), XLA's definition (complex
    square root and log); where x^2 + y^2 cancels the result is as inexact as XLA's."""
    return _atan2(y, x)
