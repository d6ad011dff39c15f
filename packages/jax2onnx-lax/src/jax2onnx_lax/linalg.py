"""Linear algebra (``jax.lax.linalg``): triangular solves, Cholesky, LU and friends.

ONNX has no linear-algebra ops beyond MatMul, so every primitive here is JAX
code of our own (``_linalg``) lowered with ``ctx.decompose`` through the lax
lowerings: masked row/column updates, MatMul, Gather, ArgMax. Loops over a
matrix dimension are unrolled up to ``_linalg.UNROLL_MAX`` (16) steps and
become one ONNX ``Loop`` beyond, as they do for a symbolic matrix dimension
(the trip count then comes from the input's shape). ``cholesky``,
``triangular_solve``, ``lu`` and ``lu_pivots_to_permutation`` (hence
``solve``, ``inv``, ``det``, ``slogdet``, ``cho_solve``, ``lu_solve``) take
symbolic matrix dimensions, as do ``symmetric_product``,
``cholesky_update`` and ``tridiagonal_solve``. Leading batch dimensions may be
symbolic everywhere.

What is reproduced (ONNX Runtime against JAX's CPU backend, LAPACK):

* ``cholesky`` -- exactly LAPACK's potrf as JAX returns it: the strict upper
  triangle is the input's, and a matrix that is not positive definite gives
  NaN everywhere.
* ``triangular_solve``, ``lu`` (same pivots: the first largest magnitude, as
  LAPACK), ``lu_pivots_to_permutation``, ``symmetric_product`` (the whole
  ``alpha A A^T + beta C``, as the CPU computes it), ``cholesky_update``
  (rotating whole rows, as JAX's own implementation) and ``tridiagonal_solve``
  (LAPACK gtsv's partial pivoting; a singular system gives NaN as in JAX).
* ``custom_linear_solve`` is its ``solve`` jaxpr, inlined.

Not reproduced: ``tridiagonal_solve(perturb_singular=True)`` on singular
systems (JAX scales its pivot perturbation by an undocumented factor; see the
xfail case). ``cholesky`` (``l l^H``), ``triangular_solve`` (with
``conjugate_a``), ``lu`` (pivots by ``|Re| + |Im|`` as LAPACK's zgetrf) and
``custom_linear_solve`` also take complex matrices, stored as real/imaginary
pairs (ONNX Runtime has no complex tensors), in complex arithmetic; the others
refuse them.
Results equal JAX's up to rounding, within the testkit's tolerances for
well-conditioned inputs; like LAPACK, ill-conditioned inputs amplify rounding.
The ``lu`` and ``lu_pivots_to_permutation`` lowerings are in ``linalg_lu``; QR, eigh and
SVD in ``linalg_qr`` and ``linalg_eig``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.lax import linalg as lax_linalg

from jax2onnx.plugin import Family, case, is_symbolic
from jax2onnx_lax import _linalg

family = Family("lax")


def scipy_linalg() -> Any:
    """``jax.scipy.linalg`` for the cases (importing it costs about 0.05 s, so not at load)."""
    import jax.scipy.linalg

    return jax.scipy.linalg


def refuse_complex(ctx: Any) -> None:
    """Refuse complex inputs, for the lowerings that take real matrices only."""
    for aval in ctx.avals_in:
        if np.issubdtype(aval.dtype, np.complexfloating):
            raise ctx.error(
                f"complex input {aval.str_short()} is not supported: ONNX Runtime has no "
                "complex tensor type. Keep complex numbers out of the exported function, e.g. "
                "solve the real 2n x 2n system [[Re A, -Im A], [Im A, Re A]] instead."
            )


def spd(x: Any) -> Any:
    """A well-conditioned symmetric (Hermitian) positive definite matrix from any square ``x``."""
    n = x.shape[-1]
    return x @ jnp.conj(jnp.swapaxes(x, -1, -2)) + n * jnp.eye(n, dtype=x.dtype)


def complex_case(name: str, fn: Any, shapes: Sequence[Any], **kw: Any) -> Any:
    """A case on complex64 (and complex128) inputs of the given shapes."""
    return case(name, fn, shapes, dtypes=[np.complex64] * len(shapes), **kw)


def pivoted(x: Any) -> Any:
    """A well-conditioned matrix whose LU must pivot: ``x`` plus ``n`` times the reversal."""
    n = x.shape[-1]
    if is_symbolic(n):
        return x + n * jnp.flip(jnp.eye(n, dtype=x.dtype), 0)
    return x + n * jnp.asarray(np.eye(n)[::-1], x.dtype)


def _tri(x: Any) -> Any:
    """Well-conditioned triangular solves: a dominant diagonal, the rest of ``x`` kept."""
    return x + x.shape[-1] * jnp.eye(x.shape[-1], dtype=x.dtype)


# -- cholesky -----------------------------------------------------------------------

_NOT_PD = np.array([[4.0, 2.0, 1.0], [2.0, 1.0, 0.5], [1.0, 0.5, 3.0]])


@family.lowering(
    lax_linalg.cholesky_p,
    values="any",
    cases=lambda: [
        case("linalg_cholesky", lambda x: lax_linalg.cholesky(spd(x)), [(4, 4)]),
        case(
            "linalg_cholesky_upper_kept",
            lambda x: lax_linalg.cholesky_p.bind(spd(x) + jnp.triu(x, 1)),
            [(4, 4)],
        ),
        case("linalg_cholesky_batched", lambda x: lax_linalg.cholesky(spd(x)), [("B", 3, 3)]),
        case("linalg_cholesky_not_pd", lax_linalg.cholesky_p.bind, [_NOT_PD]),
        case("linalg_cholesky_1x1", lambda x: lax_linalg.cholesky(spd(x)), [(1, 1)]),
        case(
            "linalg_cholesky_loop",
            lambda x: lax_linalg.cholesky(spd(x)),
            [(20, 20)],
            expect=["Loop"],
        ),
        case("jnp_linalg_cholesky", lambda x: jnp.linalg.cholesky(spd(x)), [("B", 4, 4)]),
        case(  # a symbolic matrix size: one Loop, run at n = 1 and 5
            "linalg_cholesky_symbolic",
            lambda x: lax_linalg.cholesky_p.bind(spd(x) + jnp.triu(x, 1)),
            [("N", "N")],
            dim_sizes={"N": (3, 1, 5)},
        ),
        complex_case("linalg_cholesky_complex", lambda x: lax_linalg.cholesky(spd(x)), [(4, 4)]),
        complex_case(
            "linalg_cholesky_complex_upper_kept",
            lambda x: lax_linalg.cholesky_p.bind(spd(x) + jnp.triu(x, 1)),
            [("B", 3, 3)],
        ),
        case(
            "jnp_linalg_cholesky_grad",
            jax.grad(
                lambda x: jnp.sum(jnp.linalg.cholesky(spd(x)) * jnp.arange(16.0).reshape(4, 4))
            ),
            [(4, 4)],
        ),
        case(
            "scipy_linalg_cho_factor_cho_solve",
            lambda x, b: scipy_linalg().cho_solve(scipy_linalg().cho_factor(spd(x)), b),
            [(4, 4), (4, 2)],
        ),
        complex_case(
            "scipy_linalg_cho_solve_complex_symbolic",
            lambda x, b: scipy_linalg().cho_solve(scipy_linalg().cho_factor(spd(x)), b),
            [("B", "N", "N"), ("B", "N", 2)],
        ),
        case(
            "scipy_linalg_cho_solve_lower_batched",
            lambda x, b: scipy_linalg().cho_solve(scipy_linalg().cho_factor(spd(x), lower=True), b),
            [("B", 3, 3), ("B", 3, 2)],
        ),
    ],
)
def cholesky(ctx, x, **_):
    """Decomposed: left-looking Cholesky, one column per step (no ONNX op for it).

    The strict upper triangle passes through and a failed factorization is NaN,
    as JAX's CPU result; complex matrices are factored as ``l l^H``.
    """
    return ctx.decompose(_linalg.cholesky, x)


# -- triangular_solve ---------------------------------------------------------------


def _all_forms(left_side: bool):
    def fn(a, b):
        a = _tri(a)
        return [
            lax_linalg.triangular_solve(
                a, b, left_side=left_side, lower=lo, transpose_a=tr, unit_diagonal=unit
            )
            for lo in (True, False)
            for tr in (True, False)
            for unit in (True, False)
        ]

    return fn


@family.lowering(
    lax_linalg.triangular_solve_p,
    values="any",
    cases=lambda: [
        case("linalg_triangular_solve_left", _all_forms(True), [(4, 4), (4, 3)]),
        case("linalg_triangular_solve_right", _all_forms(False), [(4, 4), (3, 4)]),
        case("linalg_triangular_solve_left_symbolic", _all_forms(True), [("N", "N"), ("N", 2)]),
        case("linalg_triangular_solve_right_symbolic", _all_forms(False), [("N", "N"), (2, "N")]),
        case(
            "linalg_triangular_solve_conjugate",
            lambda a, b: lax_linalg.triangular_solve(
                _tri(a), b, left_side=True, lower=True, transpose_a=True, conjugate_a=True
            ),
            [(3, 3), (3, 2)],
        ),
        complex_case("linalg_triangular_solve_complex_left", _all_forms(True), [(4, 4), (4, 3)]),
        complex_case("linalg_triangular_solve_complex_right", _all_forms(False), [(3, 3), (2, 3)]),
        complex_case(
            "linalg_triangular_solve_complex_conjugate",
            lambda a, b: [
                lax_linalg.triangular_solve(
                    _tri(a), b, left_side=side, lower=lo, transpose_a=tr, conjugate_a=True
                )
                for side in (True, False)
                for lo in (True, False)
                for tr in (True, False)
            ],
            [("B", 3, 3), ("B", 3, 3)],
        ),
        case(
            "linalg_triangular_solve_batched",
            lambda a, b: lax_linalg.triangular_solve(_tri(a), b, left_side=True, lower=True),
            [("B", 4, 4), ("B", 4, 2)],
        ),
        case(
            "linalg_triangular_solve_loop",
            lambda a, b: lax_linalg.triangular_solve(_tri(a), b, left_side=True, lower=False),
            [(20, 20), (20, 3)],
            expect=["Loop"],
        ),
        case(
            "scipy_linalg_solve_triangular",
            lambda a, b: scipy_linalg().solve_triangular(_tri(a), b, trans=1, lower=True),
            [(4, 4), (4, 2)],
        ),
        case(
            "scipy_linalg_solve_triangular_vector",
            lambda a, b: scipy_linalg().solve_triangular(_tri(a), b, unit_diagonal=True),
            [(5, 5), (5,)],
        ),
    ],
)
def triangular_solve(ctx, a, b, **params):
    """Decomposed: substitution one row at a time (MatMul with the solved rows).

    ``conjugate_a`` conjugates a complex ``a`` (nothing for real ones). The
    untouched triangle (and the diagonal with ``unit_diagonal``) is masked, never read.
    """
    return ctx.decompose(_linalg.triangular_solve, a, b, **params)


# -- custom_linear_solve -----------------------------------------------------------------


def _diagonal_solve(d, b):
    return lax.custom_linear_solve(lambda v: d * v, b, lambda mv, r: r / d, symmetric=True)


@family.lowering(
    "custom_linear_solve",
    values="any",
    cases=lambda: [
        case(
            "linalg_custom_linear_solve",
            lambda d, b: _diagonal_solve(d + 4.0, b),
            [("B", 4), ("B", 4)],
            input_range=(0.5, 2.0),
        ),
        case(
            "linalg_custom_linear_solve_grad",
            jax.grad(lambda d, b: jnp.sum(_diagonal_solve(d + 4.0, b) ** 2), argnums=(0, 1)),
            [(4,), (4,)],
        ),
    ],
)
def custom_linear_solve(ctx, *args, const_lengths, jaxprs):
    """The ``solve`` jaxpr inlined on its constants and the right-hand side: a forward
    pass never needs ``matvec`` (only JAX's differentiation rules do)."""
    start = const_lengths.matvec + const_lengths.vecmat
    consts = args[start : start + const_lengths.solve]
    rhs = args[sum(const_lengths) :]
    return ctx.inline(jaxprs.solve, [*consts, *rhs])


# -- symmetric_product, cholesky_update, tridiagonal_solve ----------------------------------


@family.lowering(
    lax_linalg.symmetric_product_p,
    cases=lambda: [
        case("linalg_symmetric_product", lax_linalg.symmetric_product, [(3, 2), (3, 3)]),
        case(
            "linalg_symmetric_product_scaled",
            lambda a, c: lax_linalg.symmetric_product(a, c, alpha=2.0, beta=-0.5),
            [("B", 4, 3), ("B", 4, 4)],
        ),
        case(
            "linalg_symmetric_product_symbolic",
            lax_linalg.symmetric_product,
            [("N", "K"), ("N", "N")],
        ),
        case(
            "linalg_symmetric_product_symmetrized",
            lambda a, c: lax_linalg.symmetric_product(a, c, beta=1.0, symmetrize_output=True),
            [(3, 5), (3, 3)],
        ),
    ],
)
def symmetric_product(ctx, a, c, *, alpha, beta, **_):
    """Decomposed: ``alpha * a @ a^T + beta * c`` (MatMul), the whole matrix as JAX's CPU."""
    refuse_complex(ctx)

    def fn(a, c):
        product = jnp.einsum("...ij,...kj->...ik", a, a)
        return jnp.asarray(alpha, a.dtype) * product + jnp.asarray(beta, a.dtype) * c

    return ctx.decompose(fn, a, c)


@family.lowering(
    lax_linalg.cholesky_update_p,
    cases=lambda: [
        case(
            "linalg_cholesky_update",
            lambda x, w: lax_linalg.cholesky_update(lax_linalg.cholesky(spd(x)).T, w),
            [(5, 5), (5,)],
        ),
        case(
            "linalg_cholesky_update_lower_garbage",
            lambda x, w: lax_linalg.cholesky_update(jnp.triu(spd(x)) + jnp.tril(x, -1), w),
            [(4, 4), (4,)],
        ),
        case(
            "linalg_cholesky_update_symbolic",
            lambda x, w: lax_linalg.cholesky_update(lax_linalg.cholesky(spd(x)).T, w),
            [("N", "N"), ("N",)],
        ),
        case(
            "linalg_cholesky_update_loop",
            lambda x, w: lax_linalg.cholesky_update(lax_linalg.cholesky(spd(x)).T, w),
            [(20, 20), (20,)],
            expect=["Loop"],
        ),
    ],
)
def cholesky_update(ctx, r, w, **_):
    """Decomposed: one Givens rotation of row ``k`` against ``w`` per step (whole rows)."""
    refuse_complex(ctx)
    return ctx.decompose(_linalg.cholesky_update, r, w)


# dl, d, du of a system that pivots (|dl| > |d| in rows 1 and 3) and is well conditioned
_TRI_PIVOTING = [
    np.array([0.0, 2.0, 0.3, -3.0, 0.2]),
    np.array([0.5, 1.0, 4.0, 0.4, 3.0]),
    np.array([1.5, -0.4, 0.6, 0.5, 0.0]),
    np.array([[1.0, -1.0], [2.0, 0.0], [0.5, 1.5], [-1.0, 2.0], [0.3, 0.3]]),
]
_TRI_SINGULAR = [
    np.array([0.0, 1.0, 0.0, 1.0]),
    np.array([2.0, 0.0, 1.0, 0.0]),
    np.array([1.0, 0.0, 2.0, 0.0]),
    np.array([[1.0], [2.0], [3.0], [4.0]]),
]
_TRI_ZERO_PIVOT = [  # singular: the first pivot is 0 and |du[0]| is not the largest entry
    np.array([0.0, 0.0, 0.0]),
    np.array([0.0, 0.9, 0.45]),
    np.array([-0.55, 0.6, 0.0]),
    np.array([[0.3], [0.03], [0.55]]),
]


def _dominant(dl, d, du, b, **params):
    return lax_linalg.tridiagonal_solve(dl, d + 4.0, du, b, **params)


@family.lowering(
    lax_linalg.tridiagonal_solve_p,
    cases=lambda: [
        case("linalg_tridiagonal_solve", lax_linalg.tridiagonal_solve, _TRI_PIVOTING),
        case(
            "linalg_tridiagonal_solve_batched",
            _dominant,
            [("B", 5), ("B", 5), ("B", 5), ("B", 5, 2)],
            input_range=(-1.0, 1.0),
        ),
        case(
            "linalg_tridiagonal_solve_loop",
            _dominant,
            [(20,), (20,), (20,), (20, 3)],
            input_range=(-1.0, 1.0),
            expect=["Loop"],
        ),
        case(  # a symbolic system size: two Loops of N - 1 steps, run at N = 1 (no step) to 7
            "linalg_tridiagonal_solve_symbolic",
            _dominant,
            [("B", "N"), ("B", "N"), ("B", "N"), ("B", "N", 2)],
            input_range=(-1.0, 1.0),
            dim_sizes={"B": (2, 1, 3, 2), "N": (5, 1, 2, 7)},
            no_unused_inputs=False,  # at N = 1, dl[0] and du[-1] are all there is
        ),
        case(
            "linalg_tridiagonal_solve_perturb_symbolic",
            lambda *xs: lax_linalg.tridiagonal_solve(*xs, perturb_singular=True),
            [("N",), ("N",), ("N",), ("N", 1)],
            input_range=(-1.0, 1.0),
            dim_sizes={"N": (4, 3, 6)},
        ),
        case(
            "linalg_tridiagonal_solve_1x1",
            _dominant,
            [(1,), (1,), (1,), (1, 2)],
            no_unused_inputs=False,  # dl[0] and du[-1] are outside the matrix: never read
        ),
        case("linalg_tridiagonal_solve_singular", lax_linalg.tridiagonal_solve, _TRI_SINGULAR),
        case(
            "linalg_tridiagonal_solve_perturb",
            lambda *xs: lax_linalg.tridiagonal_solve(*xs, perturb_singular=True),
            _TRI_PIVOTING,
        ),
        case(
            "linalg_tridiagonal_solve_perturb_singular",
            lambda *xs: lax_linalg.tridiagonal_solve(*xs, perturb_singular=True),
            _TRI_ZERO_PIVOT,
            xfail="JAX's CPU kernel perturbs zero pivots by eps times a maximum over U that "
            "it does not document (smaller than its docstring's eps * max|U|), so the huge "
            "solutions of a singular system differ by a constant factor",
        ),
    ],
)
def tridiagonal_solve(ctx, dl, d, du, b, *, perturb_singular=False):
    """Decomposed: LAPACK gtsv's elimination with partial pivoting, then back
    substitution, each a scan over the rows (unrolled up to 16 rows)."""
    refuse_complex(ctx)
    return ctx.decompose(_linalg.tridiagonal_solve, dl, d, du, b, perturb_singular=perturb_singular)


_C4 = [np.complex64] * 4


@family.lowering(
    lax_linalg.tridiagonal_solve_p,
    values="complex",
    cases=lambda: [
        case("complex_tridiagonal_solve", _dominant, [(5,), (5,), (5,), (5, 2)], dtypes=_C4),
        case(
            "complex_tridiagonal_solve_symbolic",
            _dominant,
            [("B", "N"), ("B", "N"), ("B", "N"), ("B", "N", 2)],
            dtypes=_C4,
            input_range=(-1.0, 1.0),
            dim_sizes={"B": (2, 1, 3), "N": (5, 1, 7)},
            no_unused_inputs=False,  # at N = 1, dl[0] and du[-1] are all there is
        ),
    ],
)
def complex_tridiagonal_solve(ctx, dl, d, du, b, *, perturb_singular=False):
    """The same elimination on complex values, pivoting on ``|Re| + |Im|`` like zgtsv."""
    if perturb_singular:
        raise ctx.error(
            "complex tridiagonal_solve(perturb_singular=True) is not supported; "
            "leave perturb_singular False or solve the real 2n x 2n system"
        )
    return ctx.decompose(_linalg.tridiagonal_solve, dl, d, du, b)


register = family.register
