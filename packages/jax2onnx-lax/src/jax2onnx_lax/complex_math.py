"""Elementwise lax primitives on complex values: construction, parts, arithmetic, powers,
exponentials and logarithms, comparisons.

Every rule is registered with ``values="complex"`` and works on the stored form (a float
array with a trailing axis of 2, see :mod:`jax2onnx_lax._complex`): it splits the parts,
computes in real JAX code that the real lowerings inline, and joins the result (Split ->
arithmetic -> Concat). Trigonometric and hyperbolic functions live in
:mod:`jax2onnx_lax.complex_trig`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case
from jax2onnx_lax._complex import (
    c_abs,
    c_div,
    c_exp,
    c_log,
    c_log1p,
    c_mul,
    c_sqrt,
    join,
    parts,
    plus_zero,
    stored_rule,
    unary_rule,
)

family = Family("lax")
register = family.register

_C = [np.complex64]
_C2 = [np.complex64, np.complex64]
_EDGES = np.array([0j, complex(-0.0, -0.0), 1e30 + 1e-30j, -2.5 + 1e-30j, 3 - 4j, -1e-30 - 1e30j])


def _squeeze(x):
    return lax.squeeze(x, (x.ndim - 1,))


def _expand(x):
    return lax.expand_dims(x, (x.ndim,))


def _part_dtype(dtype):
    """The dtype of the parts of a complex dtype (complex64 -> float32)."""
    return np.finfo(dtype).dtype


# construction and parts


@family.lowering(
    lax.complex_p,
    values="complex",
    cases=lambda: [
        case("complex", lax.complex, [("B", 3), ("B", 3)], expect=["Concat:Bx3x2"]),
        case("complex_scalar_imag", lambda x: lax.complex(x, 0.5), [(2, 3)]),
        case("complex_grad", jax.grad(lambda x, y: jnp.abs(lax.complex(x, y) ** 3)), [(), ()]),
    ],
)
@stored_rule
def complex_(x, y, **_):
    """complex -> the parts (a scalar broadcast), each with a new last axis, Concat."""
    x, y = jnp.broadcast_arrays(x, y)
    return join(_expand(x), _expand(y))


@family.lowering(
    lax.real_p,
    values="complex",
    cases=lambda: [case("complex_real", lax.real, [("B", 3)], dtypes=_C, counts={"Split": 1})],
)
@stored_rule
def real(x, **_):
    """real -> the first part (Split, Reshape)."""
    return _real(x)


def _real(x):
    return _squeeze(parts(x)[0])


@family.lowering(
    lax.imag_p,
    values="complex",
    cases=lambda: [
        case("complex_imag", lax.imag, [(3,)], dtypes=_C),
        case("complex_imag_symbolic", lax.imag, [("B", "T")], dtypes=_C),
    ],
)
@stored_rule
def imag(x, **_):
    """imag -> the second part (Split, Reshape)."""
    return _squeeze(parts(x)[1])


@family.lowering(
    lax.conj_p,
    values="complex",
    cases=lambda: [
        case("complex_conj", lax.conj, [(2, 3)], dtypes=_C),
        case("complex_conj_of_real", lax.conj, [(4,)]),
        case("complex_conj_symbolic", lax.conj, [("B", 3)], dtypes=_C),
        # bound directly, without the input_dtype lax.conj passes
        case("complex_conj_bound", lambda z: lax.conj_p.bind(z), [(2, 3)], dtypes=_C),
        case("complex_conj_bound_real", lambda x: lax.conj_p.bind(x), [(2, 3)]),
    ],
)
def conj(ctx, x, *, input_dtype=None, **_):
    """conj -> (re, -im); a real input (JAX's ``input_dtype``, else the operand's dtype)
    becomes (x, 0)."""
    if input_dtype is None:
        input_dtype = ctx.avals_in[0].dtype
    if np.issubdtype(input_dtype, np.complexfloating):
        return ctx.decompose(lambda z: join(*_conj(*parts(z))), x, stored=True)
    part = _part_dtype(ctx.avals_out[0].dtype)
    return ctx.decompose(lambda v: _from_real(v, part), x, stored=True)


def _conj(a, b):
    return a, -b


def _from_real(x, part):
    re = _expand(lax.convert_element_type(x, part))
    return join(re, jnp.zeros_like(re))


@family.lowering(
    lax.convert_element_type_p,
    values="complex",
    cases=lambda: [
        case("complex_from_real", lambda x: lax.convert_element_type(x, np.complex64), [(3,)]),
        case(
            "complex_from_int",
            lambda x: lax.convert_element_type(x, np.complex64),
            [(4,)],
            dtypes=[np.int32],
        ),
        case(
            "complex_to_real", lambda z: lax.convert_element_type(z, np.float32), [(3,)], dtypes=_C
        ),
        case("complex_to_int", lambda z: lax.convert_element_type(z, np.int32), [(5,)], dtypes=_C),
        case("complex_to_bool", lambda z: lax.convert_element_type(z, np.bool_), [_EDGES]),
        case(
            "complex_widen",
            lambda z: lax.convert_element_type(z, np.complex128),
            [np.array([1.5 + 2j, -1e-3 + 7j], np.complex64)],
            variants=["f64"],
        ),
        case(
            "complex_narrow",
            lambda z: lax.convert_element_type(z, np.complex64),
            [(3,)],
            dtypes=_C,
            variants=["f64"],
        ),
    ],
)
def convert_element_type(ctx, x, *, new_dtype, **_):
    """convert_element_type with complex values: real -> complex is (Cast(x), 0), complex ->
    complex casts the stored parts, complex -> real/int/bool converts the real part (as JAX
    does; float -> int saturation and bool as for real values)."""
    src, dst = np.dtype(ctx.avals_in[0].dtype), np.dtype(new_dtype)
    if src.kind != "c":
        part = _part_dtype(dst)
        return ctx.decompose(lambda v: _from_real(v, part), x, stored=True)
    if dst.kind == "c":
        part = _part_dtype(dst)
        return ctx.decompose(lambda z: lax.convert_element_type(z, part), x, stored=True)
    return ctx.decompose(lambda z: lax.convert_element_type(_real(z), dst), x, stored=True)


# arithmetic


@family.lowering(
    lax.add_p,
    "add_any",
    values="complex",
    cases=lambda: [
        case("complex_add", lax.add, [("B", 3), ("B", 3)], dtypes=_C2, expect=["Add:Bx3x2"]),
        case("complex_add_vmap", jax.vmap(lambda z, w: z + w), [(2, 3), (2, 3)], dtypes=_C2),
    ],
)
def add(ctx, x, y, **_):
    """add (and add_any) -> Add on the stored parts."""
    return ctx.op.Add(x, y)


family.add_cases(
    "add_any",
    lambda: [
        case(
            "complex_add_any",
            jax.grad(lambda x: jnp.abs(jnp.exp(1j * x) * x) ** 2),
            [()],
        )
    ],
)


@family.lowering(
    lax.sub_p,
    values="complex",
    cases=lambda: [case("complex_sub", lax.sub, [(3,), (3,)], dtypes=_C2, expect=["Sub:3x2"])],
)
def sub(ctx, x, y, **_):
    """sub -> Sub on the stored parts."""
    return ctx.op.Sub(x, y)


@family.lowering(
    lax.neg_p, values="complex", cases=lambda: [case("complex_neg", lax.neg, [(3,)], dtypes=_C)]
)
def neg(ctx, x, **_):
    """neg -> Neg on the stored parts."""
    return ctx.op.Neg(x)


def _real_imag(z):
    return lax.real(z), lax.imag(z)


_DIV_EDGES = [
    np.array([1 + 1j, 1e30 + 1e30j, 2 - 3j, 1e-30 + 2e-30j, 0j, -1 + 1j]),
    np.array([3 - 4j, 1e30 - 1e30j, 1e-30 + 1e-31j, 1e-30 - 3e-30j, 2 + 0j, 0j]),
]


@family.lowering(
    lax.div_p,
    values="complex",
    cases=lambda: [
        case("complex_div", lax.div, [("B", 4), ("B", 4)], dtypes=_C2),
        # parts compared as real outputs: infinite parts (zero divisors) compare exactly
        case("complex_div_scaled", lambda x, y: _real_imag(lax.div(x, y)), _DIV_EDGES),
        case("complex_div_scalar", lambda x: lax.div(x, 2 - 1j), [("B", 3)], dtypes=_C),
    ],
)
@stored_rule
def div(x, y, **_):
    """div by Smith's method (see ``_complex.c_div``): parts up to the dtype's range do not
    overflow or underflow. Infinite numerators or denominators may differ from JAX (nan
    where JAX gives an infinity or zero)."""
    return join(*c_div(*parts(x), *parts(y)))


@family.lowering(
    lax.square_p,
    values="complex",
    cases=lambda: [case("complex_square", lax.square, [(4,)], dtypes=_C)],
)
@unary_rule
def square(a, b):
    """square -> (a^2 - b^2, 2ab)."""
    return c_mul(a, b, a, b)


def _integer_pow(a, b, y):
    if y == 0:
        return jnp.ones_like(a), jnp.zeros_like(b)
    acc, n = None, abs(y)
    while n:
        if n & 1:
            acc = (a, b) if acc is None else c_mul(*acc, a, b)
        n >>= 1
        if n:
            a, b = c_mul(a, b, a, b)
    return c_div(jnp.ones_like(a), jnp.zeros_like(b), *acc) if y < 0 else acc


@family.lowering(
    lax.integer_pow_p,
    values="complex",
    cases=lambda: [
        case("complex_integer_pow", lambda z: lax.integer_pow(z, 5), [("B", 3)], dtypes=_C),
        case("complex_integer_pow_neg", lambda z: lax.integer_pow(z, -3), [(4,)], dtypes=_C),
        case(
            "complex_integer_pow_0",
            lambda z: lax.integer_pow(z, 0),
            [(2,)],
            dtypes=_C,
            no_unused_inputs=False,  # z ** 0 is 1 whatever z is
        ),
    ],
)
@stored_rule
def integer_pow(x, *, y, **_):
    """integer_pow by repeated squaring (complex products, as JAX does); a negative power is
    the reciprocal (Smith's division) of the positive one."""
    return join(*_integer_pow(*parts(x), y))


def _pow(a, b, c, d):
    la, lb = c_log(a, b)
    re, im = c_exp(*c_mul(c, d, la, lb))
    # 0 ** y as JAX gives it: 1 for y = 0, 0 for real y > 0, nan otherwise
    base0, real_y = (a == 0) & (b == 0), d == 0
    zero_re = jnp.where(real_y & (c == 0), 1.0, jnp.where(real_y & (c > 0), 0.0, jnp.nan))
    zero_re = zero_re.astype(a.dtype)
    zero_im = jnp.where(jnp.isnan(zero_re), zero_re, jnp.zeros_like(zero_re))
    return jnp.where(base0, zero_re, re), jnp.where(base0, zero_im, im)


def _pow_stored(x, y, complex_y):
    if complex_y:
        c, d = parts(y)
    else:
        c = _expand(y).astype(x.dtype)
        d = jnp.zeros_like(c)
    return join(*_pow(*parts(x), c, d))


@family.lowering(
    lax.pow_p,
    values="complex",
    cases=lambda: [
        case("complex_pow", lax.pow, [("B", 3), ("B", 3)], dtypes=_C2, input_range=(-2.0, 2.0)),
        case(
            "complex_pow_int",
            lax.pow,
            [(4,), np.array([3, -2, 0, 1], np.int32)],
            dtypes=[np.complex64, None],
        ),
        case("complex_pow_scalar", lambda z: lax.pow(z, 2.5 - 0.5j), [("B", 3)], dtypes=_C),
        case("complex_pow_int_scalar", lambda z: lax.pow(z, 3), [(3,)], dtypes=_C),
        case(
            "complex_pow_zero_base",
            lax.pow,
            [np.zeros(5, complex), np.array([2 + 0j, 2 + 1j, 0j, -1 + 0j, 1j])],
        ),
    ],
)
def pow_(ctx, x, y, **_):
    """pow -> exp(y log x) (complex log and exp, as XLA); an integer exponent counts as
    complex. 0 ** y is 1 for y = 0, 0 for real y > 0 and nan otherwise (as JAX gives)."""
    complex_y = np.dtype(ctx.avals_in[1].dtype).kind == "c"
    return ctx.decompose(_pow_stored, x, y, stored=True, complex_y=complex_y)


# absolute value, exponentials and logarithms


@family.lowering(
    lax.abs_p,
    values="complex",
    cases=lambda: [
        case("complex_abs", lax.abs, [("B", 3)], dtypes=_C),
        case("complex_abs_scaled", lax.abs, [_EDGES]),
        case("complex_abs_vmap_grad", jax.vmap(jax.grad(lambda z: jnp.abs(z * z))), [(3,)]),
    ],
)
@stored_rule
def abs_(x, **_):
    """abs -> max(|a|, |b|) * sqrt(1 + (min / max)^2) (see ``_complex.c_abs``): no overflow
    or underflow of squares; 0 at 0."""
    return _squeeze(c_abs(*parts(x)))


@family.lowering(
    lax.sign_p,
    values="complex",
    cases=lambda: [
        case("complex_sign", lax.sign, [(4,)], dtypes=_C),
        case("complex_sign_edges", lax.sign, [_EDGES]),
    ],
)
@unary_rule
def sign(a, b):
    """sign -> z / |z| (scaled |z|), 0 at 0."""
    r = c_abs(a, b)
    r = jnp.where(r == 0, jnp.ones_like(r), r)
    return a / r, b / r


@family.lowering(
    lax.exp_p,
    values="complex",
    cases=lambda: [
        case("complex_exp", lax.exp, [("B", 3)], dtypes=_C, expect=["Exp -> Mul -> Mul -> Concat"]),
        case("complex_exp_large", lax.exp, [np.array([89.05 - 166.6j, 88.8 + 0.8j, -120 + 2j])]),
    ],
)
@unary_rule
def exp(a, b):
    """exp -> e^a (cos b + i sin b)."""
    return c_exp(a, b)


@family.lowering(
    lax.exp2_p, values="complex", cases=lambda: [case("complex_exp2", lax.exp2, [(4,)], dtypes=_C)]
)
@unary_rule
def exp2(a, b):
    """exp2 -> exp(z log 2)."""
    return c_exp(a * math.log(2), b * math.log(2))


@family.lowering(
    lax.expm1_p,
    values="complex",
    cases=lambda: [
        case("complex_expm1", lax.expm1, [(4,)], dtypes=_C),
        case("complex_expm1_small", lax.expm1, [np.array([1e-9 + 1e-9j, -1e-7 + 2e-8j, 1e-20j])]),
    ],
)
@unary_rule
def expm1(a, b):
    """expm1 -> (expm1(a) cos b - 2 sin^2(b/2), e^a sin b): accurate for small z."""
    h = jnp.sin(0.5 * b)
    return jnp.expm1(a) * jnp.cos(b) - 2 * h * h, jnp.exp(a) * jnp.sin(b)


_LOG_EDGES = np.array(
    [2 + 0j, complex(2, -0.0), complex(-2, 0.0), complex(-2, -0.0), 1e-30j, 1 + 1e-9j, 0j]
)


@family.lowering(
    lax.log_p,
    values="complex",
    cases=lambda: [
        case("complex_log", lax.log, [("B", 3)], dtypes=_C),
        case("complex_log_edges", lax.log, [_LOG_EDGES]),
    ],
)
@unary_rule
def log(a, b):
    """log -> log|z| + i atan2(b, a), log|z| scaled (see ``_complex.c_log``). The cut on the
    negative real axis follows the sign of a zero imaginary part, as JAX does."""
    return c_log(a, b)


@family.lowering(
    lax.log1p_p,
    values="complex",
    cases=lambda: [
        case("complex_log1p", lax.log1p, [(5,)], dtypes=_C),
        case("complex_log1p_small", lax.log1p, [np.array([1e-9 + 1e-9j, -1e-7 + 2e-8j, 1e-20j])]),
    ],
)
@unary_rule
def log1p(a, b):
    """log1p -> (log1p(a (2 + a) + b^2) / 2 near 0, else log|1 + z|) + i atan2(b, 1 + a)."""
    return c_log1p(a, b)


@family.lowering(
    lax.sqrt_p,
    values="complex",
    cases=lambda: [
        case("complex_sqrt", lax.sqrt, [("B", 3)], dtypes=_C),
        case("complex_sqrt_edges", lax.sqrt, [_LOG_EDGES]),
    ],
)
@unary_rule
def sqrt(a, b):
    """sqrt, principal branch, by t = sqrt((|a| + |z|) / 2) (see ``_complex.c_sqrt``). A
    zero imaginary part counts as +0 (JAX's sqrt(-4 - 0j) is +2j)."""
    return c_sqrt(a, plus_zero(b))


@family.lowering(
    lax.rsqrt_p,
    values="complex",
    cases=lambda: [case("complex_rsqrt", lax.rsqrt, [(4,)], dtypes=_C)],
)
@unary_rule
def rsqrt(a, b):
    """rsqrt -> 1 / sqrt(z) (Smith's division)."""
    re, im = c_sqrt(a, plus_zero(b))
    return c_div(jnp.ones_like(re), jnp.zeros_like(im), re, im)


@family.lowering(
    lax.logistic_p,
    values="complex",
    cases=lambda: [case("complex_logistic", lax.logistic, [(4,)], dtypes=_C)],
)
@unary_rule
def logistic(a, b):
    """logistic -> 1 / (1 + exp(-z)), as JAX computes it."""
    re, im = c_exp(-a, -b)
    return c_div(jnp.ones_like(re), jnp.zeros_like(im), 1 + re, im)


# comparisons and lexicographic order


def _equal(x, y):
    (a, b), (c, d) = parts(x), parts(y)
    return _squeeze((a == c) & (b == d))


@family.lowering(
    lax.eq_p,
    values="complex",
    cases=lambda: [
        case("complex_eq", lambda z: lax.eq(z, lax.conj(z)), [np.array([1 + 0j, 1 + 1j, -0j])]),
    ],
)
@stored_rule
def eq(x, y, **_):
    """eq -> both parts equal."""
    return _equal(x, y)


@family.lowering(
    lax.ne_p,
    values="complex",
    cases=lambda: [
        case("complex_ne", lambda z: lax.ne(z, lax.conj(z)), [np.array([1 + 0j, 1 + 1j, -0j])]),
    ],
)
@stored_rule
def ne(x, y, **_):
    """ne -> not both parts equal."""
    return ~_equal(x, y)


def _pick(x, y, larger):
    """JAX's complex max (min): x where ``re x == re y ? im x > im y : re x > re y`` (``<``
    for min), else y, so ties and NaN parts give y. Magnitudes and signs (-1 where the sign
    bit is set: ``1 / -0.0 < 0``; 1 for NaN) are selected apart and multiplied, as ORT's
    Where drops the sign of a -0.0 from its first branch; NaNs pass unchanged."""
    (a, b), (c, d) = parts(x), parts(y)
    beats = jnp.greater if larger else jnp.less
    first = jnp.where(a == c, beats(b, d), beats(a, c))
    sx, sy = (jnp.where((v < 0) | (1 / v < 0), -1, 1).astype(v.dtype) for v in (x, y))
    return jnp.where(first, x * sx, y * sy) * jnp.where(first, sx, sy)


_ORDERED = [
    np.array([1 + 2j, -1 - 1j, 3 + 0j, 0j, 2 + 2j, 3j, 1 - 3j]),
    np.array([1 + 3j, -2 + 1j, 3 - 1j, 1j, 2 + 2j, 0j, 1 + 0j]),
]
# NaN and infinite parts, equal real parts, signed zeros: the cases take every pair
_ODD = "nan+1j 1+nanj nan+nanj inf+0j -inf+1j 1+infj 1-infj 1+2j 1+3j 2-1j 0j -0+0j 0-0j -0-0j"


def _extremum_cases(name, fn):
    """The ordered pairs; and every pair of ``_ODD`` both ways round, compared by the bits
    of the parts (signs of zeros; below opset 26 a bitcast gives every NaN as jnp.nan)."""

    def bits(x, y):
        z, ints = fn(x, y), np.int32 if x.dtype == np.complex64 else np.int64
        return tuple(lax.bitcast_convert_type(p(z), ints) for p in (lax.real, lax.imag))

    odd = np.array([complex(z) for z in _ODD.split()])
    pairs = [np.repeat(odd, odd.size), np.tile(odd, odd.size)]
    return [case(f"complex_{name}", fn, _ORDERED), case(f"complex_{name}_edges", bits, pairs)]


@family.lowering(lax.max_p, values="complex", cases=lambda: _extremum_cases("max", lax.max))
@stored_rule
def max_(x, y, **_):
    """max -> the lexicographic maximum (real parts, then imaginary parts), JAX's rule bit
    for bit: the second operand on ties and where a compared part is NaN."""
    return _pick(x, y, True)


@family.lowering(lax.min_p, values="complex", cases=lambda: _extremum_cases("min", lax.min))
@stored_rule
def min_(x, y, **_):
    """min -> the lexicographic minimum (see max)."""
    return _pick(x, y, False)
