"""LU: ``lu`` and ``lu_pivots_to_permutation`` (``jnp.linalg.solve``/``det``/``inv``/
``slogdet``, ``jax.scipy.linalg.lu``/``lu_factor``/``lu_solve``, lineax's LU).

``lu`` decomposes into our right-looking LU with partial pivoting in JAX
(``_linalg.lu``): the pivot is the first largest magnitude of the column, as
LAPACK's getrf (``|Re| + |Im|`` for complex entries), a swap is one gather of
the rows by a row order, unrolled up to 16 steps and one ONNX ``Loop`` beyond
or for symbolic sizes. ``lu_pivots_to_permutation`` replays the swaps, unless
its pivots come from an ``lu`` of as many rows: then it reads the permutation
that ``lu`` computed with them.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.lax import linalg as lax_linalg

from jax2onnx.plugin import Family, case
from jax2onnx_lax import _linalg
from jax2onnx_lax.linalg import complex_case, pivoted, refuse_complex, scipy_linalg

family = Family("lax")

# the pivot search of ``lu`` as one primitive, so it lowers to a plain ArgMax
lu_pivot_p = family.primitive("lu_pivot", impl=_linalg.first_largest, jvp=None)

_MAGNITUDES = np.array([[1.0, np.nan, 5.0, -2.0], [np.nan, np.nan, -2.0, 0.0], [-2, 3, 3, 1]])


@family.lowering(
    lu_pivot_p,
    cases=lambda: [
        case("lu_pivot", lu_pivot_p.bind, [_MAGNITUDES]),
        case("lu_pivot_batched_f64", lu_pivot_p.bind, [("B", 5)], variants=["f64"]),
        case("lu_pivot_f16", lu_pivot_p.bind, [_MAGNITUDES.astype(np.float16)]),
    ],
)
def lu_pivot(ctx, mag):
    """``ArgMax`` of the magnitudes with NaN entries made -1 (IsNaN, Where): three nodes
    where JAX's NaN-first ``argmax`` takes seven."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    if dtype not in (np.float32, np.float64):
        mag, dtype = ctx.cast(mag, np.float32), np.dtype(np.float32)
    key = ctx.op.Where(ctx.op.IsNaN(mag), ctx.const(np.array(-1, dtype)), mag)
    return ctx.cast(ctx.op.ArgMax(key, axis=-1, keepdims=0, select_last_index=0), np.int32)


# -- LU -------------------------------------------------------------------------------

_SINGULAR = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])


@family.lowering(
    lax_linalg.lu_p,
    values="any",
    cases=lambda: [
        case("linalg_lu", lax_linalg.lu, [(5, 5)]),
        case("linalg_lu_wide", lax_linalg.lu, [(3, 5)]),
        case("linalg_lu_tall", lax_linalg.lu, [(5, 3)]),
        case("linalg_lu_batched", lax_linalg.lu, [("B", 4, 4)]),
        case(  # tall at the static size and the first dynamic one, wide at the second
            "linalg_lu_symbolic",
            lax_linalg.lu,
            [("M", "N")],
            dim_sizes={"M": (4, 5, 2), "N": (3, 3, 4)},
        ),
        case(
            "jnp_linalg_solve_det_inv_slogdet_symbolic",
            lambda a, b: (
                jnp.linalg.solve(pivoted(a), b),
                jnp.linalg.det(pivoted(a)),
                jnp.linalg.inv(pivoted(a)),
                *jnp.linalg.slogdet(pivoted(a)),
            ),
            [("N", "N"), ("N", 2)],
        ),
        complex_case("linalg_lu_complex_symbolic", lax_linalg.lu, [("N", "N")]),
        case("linalg_lu_singular", lax_linalg.lu, [_SINGULAR]),
        case("linalg_lu_loop", lambda x: lax_linalg.lu(pivoted(x)), [(20, 20)], expect=["Loop"]),
        case("jnp_linalg_solve", lambda a, b: jnp.linalg.solve(pivoted(a), b), [(4, 4), (4, 2)]),
        case(
            "jnp_linalg_solve_batched",
            lambda a, b: jnp.linalg.solve(pivoted(a), b),
            [("B", 3, 3), ("B", 3, 1)],
        ),
        case("jnp_linalg_inv", lambda a: jnp.linalg.inv(pivoted(a)), [("B", 4, 4)]),
        case("jnp_linalg_det", lambda a: jnp.linalg.det(pivoted(a)), [("B", 4, 4)]),
        case("jnp_linalg_det_singular", jnp.linalg.det, [_SINGULAR]),
        case(
            "jnp_linalg_slogdet",  # tuple(): the converter cannot name NamedTuple outputs
            lambda a: tuple(jnp.linalg.slogdet(pivoted(a))),
            [(2, 5, 5)],
        ),
        case(
            "jnp_linalg_matrix_power_negative",
            lambda a: jnp.linalg.matrix_power(pivoted(a), -3),
            [(3, 3)],
        ),
        case(
            "jnp_linalg_solve_grad",
            jax.grad(lambda a, b: jnp.sum(jnp.linalg.solve(pivoted(a), b) ** 2), argnums=(0, 1)),
            [(3, 3), (3,)],
        ),
        case(
            "jnp_linalg_inv_grad",
            jax.grad(lambda a: jnp.sum(jnp.sin(jnp.linalg.inv(pivoted(a))))),
            [(3, 3)],
        ),
        case(
            "scipy_linalg_lu_factor_lu_solve",
            lambda a, b: scipy_linalg().lu_solve(scipy_linalg().lu_factor(pivoted(a)), b),
            [(4, 4), (4, 3)],
        ),
        case(
            "scipy_linalg_lu_factor_lu_solve_trans",
            lambda a, b: scipy_linalg().lu_solve(scipy_linalg().lu_factor(pivoted(a)), b, trans=1),
            [(4, 4), (4,)],
        ),
        case("scipy_linalg_lu", lambda a: scipy_linalg().lu(a), [(4, 3)]),
        complex_case("linalg_lu_complex", lax_linalg.lu, [(5, 5)]),
        complex_case("linalg_lu_complex_wide", lax_linalg.lu, [("B", 3, 4)]),
        complex_case(
            "jnp_linalg_solve_complex",
            lambda a, b: jnp.linalg.solve(pivoted(a), b),
            [(4, 4), (4, 2)],
        ),
        complex_case("jnp_linalg_inv_complex", lambda a: jnp.linalg.inv(pivoted(a)), [("B", 3, 3)]),
        complex_case("jnp_linalg_det_complex", lambda a: jnp.linalg.det(pivoted(a)), [(4, 4)]),
    ],
)
def lu(ctx, x, **_):
    """Decomposed: right-looking LU with partial pivoting (ArgMax of the column
    magnitudes picks the pivot, a Gather swaps rows, one rank-one update per step).
    Complex pivots are chosen by ``|Re| + |Im|``, as LAPACK's zgetrf. A NaN entry
    is passed over when a column has a number to pivot on (LAPACK's factors of
    such a matrix are NaN whichever row it picks, and which it picks varies with
    the BLAS build).

    The pivots remember the permutation computed with them, so a
    ``lu_pivots_to_permutation`` of them (``jax.scipy.linalg.lu_solve``, lineax's LU)
    reads it instead of replaying the swaps."""
    factors, pivots, permutation = ctx.decompose(_linalg.lu, x, pivot=lu_pivot_p.bind)
    pivots.meta[_PERMUTATION] = (ctx.avals_in[0].shape[-2], permutation)
    return factors, pivots, permutation


# the ``meta`` key of ``lu``'s pivots: (rows, the permutation ``lu`` computed with them)
_PERMUTATION = "jax2onnx_lax.lu_permutation"


@family.lowering(
    lax_linalg.lu_pivots_to_permutation_p,
    cases=lambda: [
        case(
            "linalg_lu_pivots_to_permutation",
            lambda p: lax_linalg.lu_pivots_to_permutation(p, 6),
            [np.array([[3, 1, 5, 4], [0, 0, 2, 3]], np.int32)],
        ),
        case(
            "linalg_lu_pivots_to_permutation_batched",
            lambda p: lax_linalg.lu_pivots_to_permutation(p, 5),
            [("B", 5)],
            dtypes=[np.int32],
            input_range=(0, 5),
        ),
        case(  # negative pivots count from the end
            "linalg_lu_pivots_to_permutation_negative",
            lambda p: lax_linalg.lu_pivots_to_permutation(p, 4),
            [np.array([[-1, 2, -3], [-4, -2, 3]], np.int32)],
        ),
        case(  # symbolic pivot count and permutation size
            "linalg_lu_pivots_to_permutation_symbolic",
            lambda p: lax_linalg.lu_pivots_to_permutation(p, p.shape[-1] + 1),
            [("B", "K")],
            dtypes=[np.int32],
            input_range=(0, 3),
        ),
        case(
            "linalg_lu_pivots_to_permutation_loop",
            lambda p: lax_linalg.lu_pivots_to_permutation(p, 20),
            [(20,)],
            dtypes=[np.int32],
            input_range=(0, 20),
            expect=["Loop"],
        ),
    ],
)
def lu_pivots_to_permutation(ctx, pivots, *, permutation_size):
    """Decomposed: the row swaps applied in order to ``arange`` (Gather/Where per swap);
    the pivots of an ``lu`` of as many rows give the permutation it computed."""
    refuse_complex(ctx)
    rows, permutation = _lu_permutation(pivots)
    if permutation is not None and _same_dim(rows, permutation_size):
        return permutation
    return ctx.decompose(_linalg.pivots_to_permutation, pivots, permutation_size=permutation_size)


def _lu_permutation(pivots) -> tuple[Any, Any]:
    """(rows, permutation) that ``lu`` noted on ``pivots``, also through the Identity
    nodes a jit's or stop_gradient's outputs pass; (None, None) for other pivots."""
    value = pivots
    for _ in range(8):
        if _PERMUTATION in value.meta:
            return value.meta[_PERMUTATION]
        producer = value.producer()
        if producer is None or producer.op_type != "Identity" or producer.domain != "":
            break
        value = producer.inputs[0]
    return None, None


def _same_dim(a, b) -> bool:
    """Whether two dimensions (ints or symbolic) are known equal."""
    try:
        return bool(a == b)
    except Exception:  # an inconclusive symbolic comparison
        return False


register = family.register
