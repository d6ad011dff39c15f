"""Scatter primitives on complex values (``values="complex"``).

``scatter``, ``scatter-add`` and ``scatter-sub`` act on each part alike: the
same primitive on the stored arrays (complex ``[..., 2]``), the parts axis one
more window axis of the updates. ``scatter-mul`` does not (a complex product
mixes the parts) and is written out, see its rule.

``scatter-max`` and ``scatter-min`` keep JAX's lexicographic order (real parts,
then imaginary parts) with the complex ``max``/``min`` rule of
:mod:`jax2onnx_lax.complex_math`: the element becomes ``max(element, update)``
for each update in turn, so ties and NaN parts give the later update, as XLA's
scatter does. Indices promised unique take one gather, ``max`` and scatter;
others apply the updates one index at a time, in order, in a loop.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case
from jax2onnx_lax._complex import join, mul, parts
from jax2onnx_lax.complex_math import _pick

family = Family("lax")

_I32 = np.int32
_ROWS = lax.ScatterDimensionNumbers(
    update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
)


def _window_dnums(ctx, dimension_numbers):
    """Scatter dimension numbers with the parts axis one more (last) window axis."""
    last = len(ctx.avals_in[2].shape)
    return dimension_numbers._replace(
        update_window_dims=(*dimension_numbers.update_window_dims, last)
    )


def _scatter_with(fn):
    def rule(ctx, x, indices, updates, *, dimension_numbers, update_jaxpr, update_consts, **kw):
        dnums = _window_dnums(ctx, dimension_numbers)
        return ctx.decompose(fn, x, indices, updates, stored=True, dimension_numbers=dnums, **kw)

    return rule


_SCATTER_IN = [(5, 3), (2,), (2, 3)]
_SCATTER_T = [np.complex64, _I32, np.complex64]
_UNIQUE = np.array([3, 0], _I32)


def _scatter_case(name, fn, inputs=_SCATTER_IN, dtypes=_SCATTER_T, **kw):
    return case(name, fn, inputs, dtypes=dtypes, input_range=(0, 5), **kw)


for _prim, _fn, _cases in [
    (
        lax.scatter_p,
        lax.scatter,
        lambda: [
            _scatter_case("complex_at_set", lambda z, i, w: jnp.asarray(z).at[i].set(w)),
            _scatter_case(
                "complex_at_set_scalar",
                lambda z, w: jnp.asarray(z).at[1, 2].set(w),
                [("B", 3), ()],
                [np.complex64, np.complex64],
            ),
        ],
    ),
    (
        lax.scatter_add_p,
        lax.scatter_add,
        lambda: [
            _scatter_case("complex_at_add", lambda z, i, w: jnp.asarray(z).at[i].add(w)),
            _scatter_case(
                "complex_at_add_grad",
                jax.grad(lambda z, w: jnp.sum(jnp.abs(jnp.asarray(z)[2:4] * w) ** 2)),
                [(5,), (2,)],
                [np.complex64, np.complex64],
            ),
        ],
    ),
    (
        lax.scatter_sub_p,
        lax.scatter_sub,
        lambda: [
            _scatter_case("complex_at_subtract", lambda z, i, w: jnp.asarray(z).at[i].subtract(w))
        ],
    ),
]:
    _rule = _scatter_with(_fn)
    _rule.__name__ = _rule.__qualname__ = f"complex_{_prim.name.replace('-', '_')}"
    _rule.__doc__ = "The parts axis is one more (last) window axis of the updates."
    family.lowering(_prim, values="complex", cases=_cases)(_rule)


def _gather_dnums(dn):
    return lax.GatherDimensionNumbers(
        offset_dims=dn.update_window_dims,
        collapsed_slice_dims=dn.inserted_window_dims,
        start_index_map=dn.scatter_dims_to_operand_dims,
        operand_batching_dims=dn.operand_batching_dims,
        start_indices_batching_dims=dn.scatter_indices_batching_dims,
    )


def _window_sizes(dn, operand_shape, updates_shape):
    """The gather slice sizes that read back the windows a scatter writes."""
    window = iter(updates_shape[d] for d in dn.update_window_dims)
    skipped = (*dn.inserted_window_dims, *dn.operand_batching_dims)
    return tuple(1 if d in skipped else next(window) for d in range(len(operand_shape)))


def _scatter_mul_unique(z, indices, w, *, dimension_numbers, mode, **kw):
    """Each element hit at most once: read it, multiply, write it back."""
    sizes = _window_sizes(dimension_numbers, z.shape, w.shape)
    old = lax.gather(z, indices, _gather_dnums(dimension_numbers), sizes, mode=mode)
    return lax.scatter(z, indices, mul(old, w), dimension_numbers, mode=mode, **kw)


def _scatter_mul_polar(z, indices, w, *, dimension_numbers, **kw):
    """Any number of hits: the product of the updates in polar form, the moduli
    multiplied (scatter-mul onto ones) and the angles added (scatter-add onto
    zeros), then one complex product with the operand."""
    re, im = parts(w)
    modulus = jnp.sqrt(re * re + im * im)
    angle = jnp.arctan2(im, re)
    ones = jnp.ones(z.shape[:-1] + (1,), z.dtype)
    r = lax.scatter_mul(ones, indices, modulus, dimension_numbers, **kw)
    t = lax.scatter_add(jnp.zeros_like(ones), indices, angle, dimension_numbers, **kw)
    return mul(z, join(r * jnp.cos(t), r * jnp.sin(t)))


@family.lowering(
    lax.scatter_mul_p,
    values="complex",
    cases=lambda: [
        _scatter_case(
            "complex_at_multiply_unique",
            lambda z, w: jnp.asarray(z).at[1].multiply(w),
            [(5, 3), (3,)],
            [np.complex64, np.complex64],
        ),
        _scatter_case(
            "complex_at_multiply_unique_rows",
            lambda z, w: lax.scatter_mul(z, _UNIQUE[:, None], w, _ROWS, unique_indices=True),
            [(5, 3), (2, 3)],
            [np.complex64, np.complex64],
        ),
        _scatter_case(
            "complex_at_multiply_repeated",
            lambda z, i, w: jnp.asarray(z).at[i].multiply(w),
            [(5, 3), (4,), (4, 3)],
            _SCATTER_T,
        ),
    ],
)
def scatter_mul(ctx, x, indices, updates, *, dimension_numbers, unique_indices, **kw):
    """Complex products do not act per part. Unique indices: gather, multiply, scatter
    (exact). Otherwise the updates landing on one element are multiplied in polar form
    (moduli by scatter-mul, angles by scatter-add; rounding of the angle sum is the only
    difference from JAX's sequential products), then multiplied into the operand."""
    kw.pop("update_jaxpr"), kw.pop("update_consts")
    dnums = _window_dnums(ctx, dimension_numbers)
    fn = _scatter_mul_unique if unique_indices else _scatter_mul_polar
    return ctx.decompose(fn, x, indices, updates, stored=True, dimension_numbers=dnums, **kw)


# -- scatter-max and scatter-min: JAX's lexicographic order -------------------------


def _extremum_unique(z, indices, w, *, dimension_numbers, mode, larger, **kw):
    """Each element hit at most once: read it, take the extremum, write it back."""
    sizes = _window_sizes(dimension_numbers, z.shape, w.shape)
    old = lax.gather(z, indices, _gather_dnums(dimension_numbers), sizes, mode=mode)
    return lax.scatter(z, indices, _pick(old, w, larger), dimension_numbers, mode=mode, **kw)


def _unbatched(indices, dn):
    """Indices and dimension numbers without batching dimensions: each pair of an operand
    batching dimension and an indices batching dimension becomes one more index column
    (the position along that indices dimension) into one more inserted window dimension."""
    if not dn.operand_batching_dims:
        return indices, dn
    shape = (*indices.shape[:-1], 1)
    columns = [
        lax.broadcasted_iota(indices.dtype, shape, d) for d in dn.scatter_indices_batching_dims
    ]
    return jnp.concatenate([indices, *columns], axis=-1), lax.ScatterDimensionNumbers(
        update_window_dims=dn.update_window_dims,
        inserted_window_dims=tuple(sorted((*dn.inserted_window_dims, *dn.operand_batching_dims))),
        scatter_dims_to_operand_dims=(*dn.scatter_dims_to_operand_dims, *dn.operand_batching_dims),
    )


def _extremum_in_order(z, indices, w, *, dimension_numbers, mode, larger, **_):
    """Any number of hits: the updates applied one scatter index at a time, in the row-major
    order of the indices' batch dimensions (XLA's order), each as in
    :func:`_extremum_unique`. The indices become one ``(n, index)`` list and the updates
    ``(n, *window)``, their scatter dimensions moved first."""
    indices, dn = _unbatched(indices, dimension_numbers)
    windows = dn.update_window_dims
    scattered = [d for d in range(w.ndim) if d not in windows]
    n = math.prod(indices.shape[:-1])
    w = jnp.transpose(w, (*scattered, *windows))
    w = w.reshape((n, *w.shape[len(scattered) :]))
    indices = indices.reshape((n, indices.shape[-1]))
    flat = dn._replace(update_window_dims=tuple(range(1, 1 + len(windows))))

    def one(k, acc):
        index = lax.dynamic_slice_in_dim(indices, k, 1, axis=0)
        update = lax.dynamic_slice_in_dim(w, k, 1, axis=0)
        return _extremum_unique(
            acc, index, update, dimension_numbers=flat, mode=mode, larger=larger
        )

    return lax.fori_loop(0, n, one, z)


def _extremum_rule(larger):
    def rule(ctx, x, indices, updates, *, dimension_numbers, unique_indices, mode, **kw):
        kw.pop("update_jaxpr"), kw.pop("update_consts")
        dnums = _window_dnums(ctx, dimension_numbers)
        fn = _extremum_unique if unique_indices else _extremum_in_order
        return ctx.decompose(
            fn,
            x,
            indices,
            updates,
            stored=True,
            dimension_numbers=dnums,
            mode=mode,
            larger=larger,
            unique_indices=unique_indices,
            **kw,
        )

    return rule


_NAN = float("nan")
# a tie of equal parts, NaN parts, signed zeros: each target takes several updates
_TIES_Z = np.array([2 + 2j, complex(_NAN, 1), 1 + 1j, 0j, 3 - 1j], np.complex64)
_TIES_I = np.array([0, 0, 1, 2, 2, 3, 3, 4, 0, 4, 4], _I32)
_TIES_W = np.array(
    [
        complex(2, _NAN),
        2 + 2j,
        5 + 0j,
        complex(_NAN, 1),
        1 + 1j,
        complex(-0.0, 0.0),
        complex(0.0, -0.0),
        3 - 1j,
        complex(2, 3),
        complex(3, _NAN),
        3 - 2j,
    ],
    np.complex64,
)
# every pair of odd values (NaN, infinite, signed zero parts), both ways round
_ODD = "nan+1j 1+nanj nan+nanj inf+0j -inf+1j 1+infj 1-infj 1+2j 1+3j 2-1j 0j -0+0j 0-0j -0-0j"


def _extremum_cases(name):
    """Cases of ``x.at[i].<name>(w)``, the results compared by the bits of their parts."""

    def at(z, i, w, **kw):
        return getattr(jnp.asarray(z).at[i], name)(w, **kw)

    def bits(fn):
        def compared(*args):
            z = fn(*args)
            ints = np.int32 if z.dtype == np.complex64 else np.int64
            return tuple(lax.bitcast_convert_type(p(z), ints) for p in (lax.real, lax.imag))

        return compared

    odd = np.array([complex(v) for v in _ODD.split()], np.complex64)
    every_pair = [
        np.repeat(odd, odd.size),
        np.arange(odd.size**2, dtype=_I32),
        np.tile(odd, odd.size),
    ]
    in_turn = [odd, np.repeat(np.arange(odd.size, dtype=_I32), odd.size), np.tile(odd, odd.size)]
    return [
        _scatter_case(f"complex_at_{name}", at, [(5, 3), (4,), (4, 3)], expect=["Loop"]),
        case(f"complex_at_{name}_ties", bits(at), [_TIES_Z, _TIES_I, _TIES_W]),
        case(f"complex_at_{name}_every_pair", bits(at), every_pair),
        case(f"complex_at_{name}_in_turn", bits(at), in_turn),
        _scatter_case(  # the scatter dimension after the window dimension of the updates
            f"complex_at_{name}_columns_symbolic",
            lambda z, i, w: getattr(jnp.asarray(z).at[:, i], name)(w),
            [("B", 3), (4,), ("B", 4)],
        ),
        _scatter_case(  # operand and indices batching dimensions
            f"complex_at_{name}_vmap_symbolic",
            jax.vmap(at),
            [("B", 5), ("B", 4), ("B", 4)],
        ),
        _scatter_case(
            f"complex_at_{name}_clip",
            lambda z, i, w: at(z, i, w, mode="clip"),
            [(4, 2), (5,), (5, 2)],
        ),
        _scatter_case(
            f"complex_at_{name}_unique",
            lambda z, w: at(z, _UNIQUE, w, unique_indices=True),
            [(5, 3), (2, 3)],
            [np.complex64, np.complex64],
            counts={"Loop": 0, "Scan": 0},
        ),
    ]


for _prim, _name, _larger in [(lax.scatter_max_p, "max", True), (lax.scatter_min_p, "min", False)]:
    _rule = _extremum_rule(_larger)
    _rule.__name__ = _rule.__qualname__ = f"complex_scatter_{_name}"
    _rule.__doc__ = (
        f"JAX's lexicographic {_name} of the element and each update in turn (ties and NaN "
        "parts give the update): unique indices in one gather and scatter, others one "
        "scatter index at a time in a loop."
    )
    family.lowering(_prim, values="complex", cases=functools.partial(_extremum_cases, _name))(_rule)


register = family.register
