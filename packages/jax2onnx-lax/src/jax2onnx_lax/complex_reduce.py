"""Products, extrema, clamps and sorts of complex values (``values="complex"``).

Complex arrays are stored as float ``[..., 2]`` (real, imaginary). Sums act on
each part and are in ``complex_layout``; products mix the parts:

* ``reduce_prod`` over axes of static size is a pairwise tree of complex
  products along each reduced axis (``ceil(log2 n)`` levels of one half times
  the other), so zeros, signs and rounding behave as in a sequence of complex
  multiplications. A reduced axis of symbolic size cannot be halved at
  conversion time: there the product is taken in polar form, the moduli
  multiplied and the angles (``atan2``) added, which rounds the angle sum
  differently from JAX's products (relative error a few ulps times the length).
* ``cumprod`` along a static axis is a Hillis-Steele scan of complex products
  (``ceil(log2 n)`` steps, each multiplying by the array shifted by ``2**k``
  with ones shifted in); along a symbolic axis, the polar form with the moduli's
  running product as ``exp(cumsum(log r))`` (a zero gives ``log 0 = -inf`` and
  stays zero), again a few ulps from JAX's products.
* ``cumlogsumexp`` is JAX's own associative scan of its complex ``logaddexp``
  (what XLA computes on CPU, up to the order of the additions), along a static axis.
* ``sort`` orders complex keys lexicographically by real, then imaginary part
  (JAX's order, NaNs last in each part): each complex operand becomes two real
  operands (its parts) and each complex key two keys of the real sort.
* ``reduce_max``/``reduce_min`` are lexicographic too: the extreme real part,
  then the extreme imaginary part among the elements that have it. With NaNs
  JAX's own result depends on the order of the elements; those are not matched.
  ``cummax``/``cummin`` are in :mod:`jax2onnx_lax.cumulative`, ``lax.reduce`` and
  ``reduce_window`` in :mod:`jax2onnx_lax.folds`, complex ``scatter-min``/``scatter-max``
  in :mod:`jax2onnx_lax.complex_scatter`; ``argmax``/``argmin`` (JAX fails on complex at
  run time) have no complex rule.
* ``clamp`` is XLA's, which compares real parts only (not the lexicographic order).
"""

from __future__ import annotations

import functools
import itertools

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case, is_symbolic
from jax2onnx_lax._complex import join, parts

family = Family("lax")

_C = [np.complex64]


def _cmul(a, b):
    (ar, ai), (br, bi) = a, b
    return ar * br - ai * bi, ar * bi + ai * br


def _cut(pair, start, stop, axis):
    return tuple(lax.slice_in_dim(p, start, stop, axis=axis) for p in pair)


def _tree_product(pair, axis):
    """The product along ``axis`` (kept, size 1) by halving, ``ceil(log2 n)`` levels."""
    size = pair[0].shape[axis]
    if size == 0:
        shape = list(pair[0].shape)
        shape[axis] = 1
        return jnp.ones(shape, pair[0].dtype), jnp.zeros(shape, pair[0].dtype)
    while size > 1:
        half = size // 2
        prod = _cmul(_cut(pair, 0, half, axis), _cut(pair, half, 2 * half, axis))
        if size % 2:
            rest = _cut(pair, 2 * half, size, axis)
            prod = tuple(lax.concatenate([p, r], axis) for p, r in zip(prod, rest, strict=True))
        pair, size = prod, half + size % 2
    return pair


def _polar(re, im):
    return jnp.sqrt(re * re + im * im), jnp.arctan2(im, re)


def _from_polar(r, t):
    return join(r * jnp.cos(t), r * jnp.sin(t))


def _reduce_prod(x, *, axes, static, **_):
    re, im = parts(x)
    if not static:
        r, t = _polar(re, im)
        return _from_polar(jnp.prod(r, axis=axes), jnp.sum(t, axis=axes))
    pair = (re, im)
    for axis in axes:
        pair = _tree_product(pair, axis)
    return join(*(lax.squeeze(p, axes) for p in pair))


def _static(ctx, axes) -> bool:
    shape = ctx.avals_in[0].shape
    return not any(is_symbolic(shape[a]) for a in axes)


@family.lowering(
    lax.reduce_prod_p,
    values="complex",
    cases=lambda: [
        case(
            "complex_prod", lambda z: jnp.prod(z, axis=1), [("B", 5)], dtypes=_C, counts={"Atan": 0}
        ),
        case("complex_prod_axes", lambda z: jnp.prod(z, axis=(0, 2)), [(3, 2, 4)], dtypes=_C),
        case("complex_prod_all", jnp.prod, [(2, 3)], dtypes=_C),
        case(
            "complex_prod_zeros",
            lambda z: jnp.prod(z, axis=0),
            [np.array([[1 + 2j, 0, 3j], [2 - 1j, 1 + 1j, -2], [0, 0.5j, 1]], np.complex64)],
        ),
        # the empty product is 1 whatever the input holds: the input is unused
        case(
            "complex_prod_empty",
            lambda z: jnp.prod(z, axis=1),
            [(3, 0)],
            dtypes=_C,
            no_unused_inputs=False,
        ),
        case(
            "complex_prod_symbolic",
            lambda z: jnp.prod(z, axis=0),
            [("N", 3)],
            dtypes=_C,
            input_range=(0.5, 1.0),
        ),
    ],
)
def reduce_prod(ctx, x, *, axes, **params):
    """Complex products (module docstring): a pairwise tree over axes of static size,
    the polar form over a symbolic one."""
    return ctx.decompose(_reduce_prod, x, stored=True, axes=axes, static=_static(ctx, axes))


def _shifted(pair, step, axis):
    """``pair`` shifted by ``step`` along ``axis``, the complex one shifted in."""
    size = pair[0].shape[axis]
    head = list(pair[0].shape)
    head[axis] = step
    ones = (jnp.ones(head, pair[0].dtype), jnp.zeros(head, pair[0].dtype))
    body = _cut(pair, 0, size - step, axis)
    return tuple(lax.concatenate([o, b], axis) for o, b in zip(ones, body, strict=True))


def _cumprod(x, *, axis, reverse, static):
    if reverse:
        x = lax.rev(x, (axis,))
    re, im = parts(x)
    if static:
        pair, step = (re, im), 1
        while step < re.shape[axis]:
            pair = _cmul(pair, _shifted(pair, step, axis))
            step *= 2
        out = join(*pair)
    else:
        r, t = _polar(re, im)
        out = _from_polar(jnp.exp(lax.cumsum(jnp.log(r), axis)), lax.cumsum(t, axis))
    return lax.rev(out, (axis,)) if reverse else out


@family.lowering(
    lax.cumprod_p,
    values="complex",
    cases=lambda: [
        case("complex_cumprod", lambda z: jnp.cumprod(z, axis=1), [("B", 6)], dtypes=_C),
        case(
            "complex_cumprod_reverse",
            lambda z: lax.cumprod(z, 0, reverse=True),
            [(5, 2)],
            dtypes=_C,
        ),
        case(
            "complex_cumprod_zero",
            jnp.cumprod,
            [np.array([1 + 1j, 2j, 0, 3 - 1j, 1j], np.complex64)],
        ),
        case(
            "complex_cumprod_symbolic",
            lambda z: jnp.cumprod(z, axis=0),
            [("N", 2)],
            dtypes=_C,
            input_range=(0.5, 1.0),
        ),
    ],
)
def cumprod(ctx, x, *, axis, reverse):
    """Complex products (module docstring): a Hillis-Steele scan along a static axis,
    the polar form along a symbolic one."""
    static = _static(ctx, (axis,))
    return ctx.decompose(_cumprod, x, stored=True, axis=axis, reverse=reverse, static=static)


def _cumlogsumexp(x, *, axis, reverse):
    from jax._src.lax.other import logaddexp  # the combine function of JAX's cumlogsumexp

    return lax.associative_scan(logaddexp, x, axis=axis, reverse=reverse)


@family.lowering(
    lax.cumlogsumexp_p,
    values="complex",
    cases=lambda: [
        case(
            "complex_cumlogsumexp",
            lambda z: lax.cumlogsumexp(z, 1),
            [("B", 7)],
            dtypes=_C,
            variants=("f32", "f64"),
        ),
        case(
            "complex_cumlogsumexp_reverse",
            lambda z: lax.cumlogsumexp(z, 0, reverse=True),
            [(5, 2)],
            dtypes=_C,
        ),
        case(
            "complex_cumlogsumexp_edges",
            lambda z: lax.cumlogsumexp(z, 0),
            [np.array([0, -np.inf, 1j, 40 + 2j, np.inf, 1 + np.nan * 1j, 2], np.complex64)],
        ),
    ],
)
def cumlogsumexp(ctx, x, *, axis, reverse):
    """JAX's associative scan of its complex logaddexp, lowered by the complex rules."""
    if is_symbolic(ctx.avals_in[0].shape[axis]):
        raise ctx.error(
            "complex cumlogsumexp along an axis of symbolic size is not supported; "
            "give that axis a static size"
        )
    return ctx.decompose(_cumlogsumexp, x, axis=axis, reverse=reverse)


def _sort(*operands, complex_, num_keys, **params):
    flat, keys = [], 0
    for i, (x, is_c) in enumerate(zip(operands, complex_, strict=True)):
        if is_c:
            re, im = parts(x)
            flat += [lax.squeeze(re, (x.ndim - 1,)), lax.squeeze(im, (x.ndim - 1,))]
        else:
            flat.append(x)
        keys += (2 if is_c else 1) if i < num_keys else 0
    out = iter(lax.sort(flat, num_keys=keys, **params))
    result = []
    for is_c in complex_:
        if is_c:
            re, im = next(out), next(out)
            result.append(jnp.stack([re, im], axis=-1))
        else:
            result.append(next(out))
    return result


_NAN = np.nan
_SORT_EDGE = np.array(
    [
        complex(_NAN, 1),
        complex(1, _NAN),
        1 + 1j,
        complex(_NAN, _NAN),
        1 - 1j,
        complex(_NAN, 0),
        -0.0,
        2j,
    ],
    np.complex64,
)


@family.lowering(
    lax.sort_p,
    values="complex",
    cases=lambda: [
        case("complex_sort", lambda z: jnp.sort(z, axis=1), [("B", 5)], dtypes=_C),
        case("complex_sort_edges", jnp.sort, [_SORT_EDGE]),
        case(
            "complex_sort_ties",
            jnp.sort,
            [np.array([2 + 1j, 1 + 3j, 2 - 1j, 1 + 3j, 1 - 3j, 2 + 0j], np.complex64)],
        ),
        case("complex_argsort", lambda z: jnp.argsort(z, axis=0), [(6, 2)], dtypes=_C),
        case(
            "complex_sort_values",
            lambda k, v: lax.sort((k, v), num_keys=1),
            [(5,), (5,)],
            dtypes=[np.float32, np.complex64],
        ),
    ],
)
def sort(ctx, *operands, num_keys, **params):
    """Each complex operand as its two parts; each complex key as two keys (real, then
    imaginary: JAX's lexicographic order)."""
    complex_ = tuple(np.dtype(a.dtype).kind == "c" for a in ctx.avals_in)
    return ctx.decompose(
        _sort, *operands, stored=True, complex_=complex_, num_keys=num_keys, **params
    )


def _reduce_extremum(x, *, axes, largest, **_):
    """Lexicographic: the extreme real part, then the extreme imaginary part among the
    elements that have it."""
    reduce, worst = (jnp.max, -jnp.inf) if largest else (jnp.min, jnp.inf)
    re, im = parts(x)
    best = reduce(re, axis=axes, keepdims=True)
    tied = jnp.where(re == best, im, jnp.asarray(worst, im.dtype))
    return join(lax.squeeze(best, axes), reduce(tied, axis=axes))


_TIES = np.array([[2 + 1j, -1 + 5j, 2 + 3j], [2 - 4j, 1 + 0j, -1 + 2j]], np.complex64)


@family.lowering(
    lax.reduce_max_p,
    values="complex",
    cases=lambda: [
        case("complex_max", lambda z: jnp.max(z, axis=1), [("B", 4)], dtypes=_C),
        case("complex_max_ties", lambda z: jnp.max(z, axis=1), [_TIES]),
        case("complex_max_ties_all", jnp.max, [_TIES]),
    ],
)
def reduce_max(ctx, x, *, axes, **_):
    """JAX orders complex numbers lexicographically: the largest real part, then the
    largest imaginary part among those (two reductions). Inputs with NaN are not
    matched: JAX's own result then depends on the order of the elements."""
    return ctx.decompose(_reduce_extremum, x, stored=True, axes=axes, largest=True)


@family.lowering(
    lax.reduce_min_p,
    values="complex",
    cases=lambda: [
        case("complex_min", lambda z: jnp.min(z, axis=(0, 1)), [(3, "B", 2)], dtypes=_C),
        case("complex_min_ties", lambda z: jnp.min(z, axis=0), [_TIES]),
    ],
)
def reduce_min(ctx, x, *, axes, **_):
    """The lexicographic minimum, as :func:`reduce_max` (NaN inputs not matched)."""
    return ctx.decompose(_reduce_extremum, x, stored=True, axes=axes, largest=False)


def _clamp(lo, x, hi):
    """XLA's complex clamp compares real parts only: ``lo`` where ``lo.re >= x.re``, then
    ``hi`` where the result's real part is not ``<= hi.re`` (so a NaN real part gives
    ``hi``); imaginary parts only come along."""
    low = jnp.where(parts(lo)[0] >= parts(x)[0], lo, x)
    return jnp.where(parts(low)[0] <= parts(hi)[0], low, hi)


def _clamp_grid():
    """Every (lo, x, hi) over a grid with ties and NaNs in both parts."""
    grid = [-1.0, 1.0, np.nan]
    values = [complex(a, b) for a in grid for b in grid]
    triples = np.array(list(itertools.product(values, repeat=3)), np.complex64)
    return [triples[:, 0], triples[:, 1], triples[:, 2]]


@functools.cache
def _clamp_xfail() -> str | None:
    """Why JAX gives no reference here: XLA's classic CPU emitters (the suite's fast-compile
    ``--xla_cpu_use_fusion_emitters=false``) have no complex clamp; None where JAX runs it."""
    try:
        lax.clamp(np.complex64(0), np.zeros(1, np.complex64), np.complex64(1)).block_until_ready()
    except Exception as err:  # jax.errors.JaxRuntimeError: UNIMPLEMENTED
        return f"JAX cannot run a complex clamp under these XLA flags ({err}); XLA's defaults can"
    return None


@family.lowering(
    lax.clamp_p,
    values="complex",
    cases=lambda: [
        case(
            "complex_clamp",
            lax.clamp,
            [("B", 4), ("B", 4), ("B", 4)],
            dtypes=_C * 3,
            xfail=_clamp_xfail(),
        ),
        case(
            "complex_clamp_scalar_bounds",
            lambda x: lax.clamp(jnp.asarray(-0.5 + 1j, x.dtype), x, jnp.asarray(0.5, x.dtype)),
            [(3, 4)],
            dtypes=_C,
            xfail=_clamp_xfail(),
        ),
        case("complex_clamp_ties_nan", lax.clamp, _clamp_grid(), xfail=_clamp_xfail()),
    ],
)
def clamp(ctx, lo, x, hi):
    """As JAX on CPU with XLA's default (fusion) emitters: bounds compared by real parts
    only (see ``_clamp``), not JAX's lexicographic max/min; a scalar bound broadcasts."""
    return ctx.decompose(_clamp, lo, x, hi, stored=True)


register = family.register
