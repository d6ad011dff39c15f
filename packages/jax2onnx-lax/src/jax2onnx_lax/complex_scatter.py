"""Scatter primitives on complex values (``values="complex"``).

``scatter``, ``scatter-add`` and ``scatter-sub`` act on each part alike: the
same primitive on the stored arrays (complex ``[..., 2]``), the parts axis one
more window axis of the updates. ``scatter-mul`` does not (a complex product
mixes the parts) and is written out, see its rule.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case
from jax2onnx_lax._complex import join, mul, parts

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


register = family.register
