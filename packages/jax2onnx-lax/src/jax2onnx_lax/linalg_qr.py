"""QR (``jnp.linalg.qr``, ``jax.scipy.linalg.qr``) and its Householder primitives.

``qr``, ``geqrf``, ``geqp3`` (column pivoting), ``householder_product`` and
``ormqr`` decompose into our own Householder QR in JAX (``_linalg_orth``),
lowered through the lax lowerings: one reflector per step, as masked rank-one
updates (MatMul, Where), unrolled up to 16 steps and one ONNX ``Loop`` beyond.

The reflectors follow LAPACK's convention (larfg: ``beta = -sign(Re alpha)
||x||``, ``tau = 0`` for a column already reduced), so ``q``, ``r``, the packed
factors and ``taus`` equal JAX's CPU results up to rounding, signs (complex
phases) included; column pivoting picks the same columns (largest remaining
norm, the first on ties) unless two norms tie to rounding. Complex matrices
(stored as real/imaginary pairs, ONNX Runtime having no complex tensors) take
the same code in complex arithmetic (``H = I - tau v v^H``; ``ormqr``'s
``transpose`` is the conjugate transpose). Matrix dims may be symbolic, also
unrelated ones (``M x N``): the number of reflectors is then ``min(M, N)``,
computed in the graph, and the steps run in one ``Loop``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax.lax import linalg as lax_linalg

from jax2onnx.plugin import Family, case
from jax2onnx_lax import _linalg_orth
from jax2onnx_lax.linalg import complex_case, scipy_linalg

family = Family("lax")


_TALL_WIDE = {"M": (4, 5, 2), "N": (3, 3, 4)}  # static 4x3, then 5x3 and 2x4


def _raw(x):
    """``geqrf`` as ``jnp.linalg.qr(mode="raw")`` reaches it: (packed^T, taus)."""
    return tuple(jnp.linalg.qr(x, mode="raw"))


def _qr(mode):
    return lambda x: tuple(
        jnp.linalg.qr(x, mode=mode)
    )  # the converter cannot name NamedTuple outputs


@family.lowering(
    lax_linalg.qr_p,
    values="any",
    cases=lambda: [
        case("jnp_linalg_qr_reduced_square", _qr("reduced"), [(4, 4)]),
        case("jnp_linalg_qr_reduced_tall", _qr("reduced"), [(5, 3)]),
        case("jnp_linalg_qr_reduced_wide", _qr("reduced"), [(3, 5)]),
        case("jnp_linalg_qr_complete_square", _qr("complete"), [(4, 4)]),
        case("jnp_linalg_qr_complete_tall", _qr("complete"), [(5, 3)]),
        case("jnp_linalg_qr_complete_wide", _qr("complete"), [(3, 5)]),
        case("jnp_linalg_qr_r", lambda x: jnp.linalg.qr(x, mode="r"), [(5, 4)]),
        case("jnp_linalg_qr_batched", _qr("reduced"), [("B", 4, 3)]),
        case("jnp_linalg_qr_reduced_symbolic", _qr("reduced"), [("M", "N")], dim_sizes=_TALL_WIDE),
        case(
            "jnp_linalg_qr_complete_symbolic", _qr("complete"), [("M", "N")], dim_sizes=_TALL_WIDE
        ),
        case("jnp_linalg_qr_loop", _qr("reduced"), [(20, 18)], expect=["Loop"]),
        case(
            "jnp_linalg_qr_zero_column",  # exactly reduced columns: tau = 0, as LAPACK
            _qr("complete"),
            [np.array([[1.0, 0.0, 2.0, 0.0], [2.0, 0.0, 1.0, 0.0], [3.0, 0.0, 0.0, 1.0]])],
        ),
        case(
            "scipy_linalg_qr_pivoting",
            lambda x: tuple(scipy_linalg().qr(x, pivoting=True)),
            [(5, 4)],
        ),
        case(
            "scipy_linalg_qr_pivoting_economic",
            lambda x: tuple(scipy_linalg().qr(x, pivoting=True, mode="economic")),
            [("B", 3, 5)],
        ),
        case(
            "scipy_linalg_qr_pivoting_symbolic",
            lambda x: tuple(scipy_linalg().qr(x, pivoting=True, mode="economic")),
            [("M", "N")],
            dim_sizes=_TALL_WIDE,
        ),
        complex_case("jnp_linalg_qr_complex_tall", _qr("reduced"), [(5, 3)]),
        complex_case("jnp_linalg_qr_complex_symbolic", _qr("complete"), [("N", "N")]),
        complex_case("jnp_linalg_qr_complex_wide", _qr("complete"), [("B", 3, 4)]),
        complex_case(
            "scipy_linalg_qr_pivoting_complex",
            lambda x: tuple(scipy_linalg().qr(x, pivoting=True)),
            [(4, 4)],
        ),
        case(  # JAX's pivots of a matrix without rows are all 0, not 0 .. n - 1
            "scipy_linalg_qr_pivoting_empty",
            lambda *xs: tuple(
                out
                for x in xs
                for mode in ("full", "economic")
                for out in scipy_linalg().qr(x, pivoting=True, mode=mode)
            ),
            [(0, 3), (2, 0, 4), (4, 0), (0, 0)],
            no_unused_inputs=False,  # no entries to read
        ),
    ],
)
def qr(ctx, x, *, full_matrices, pivoting=False, **_):
    """Decomposed: Householder QR (geqrf, or geqp3 when pivoting), the Householder
    product for ``q`` and the upper triangle for ``r``, as JAX's own expansion."""
    return ctx.decompose(_linalg_orth.qr, x, full_matrices=full_matrices, pivoting=pivoting)


@family.lowering(
    "geqrf",
    values="any",
    cases=lambda: [
        case("linalg_geqrf_tall", _raw, [(5, 3)]),
        case("linalg_geqrf_wide", _raw, [(3, 5)]),
        case("linalg_geqrf_batched", _raw, [("B", 4, 4)]),
        case("linalg_geqrf_symbolic", _raw, [("M", "N")], dim_sizes=_TALL_WIDE),
        complex_case("linalg_geqrf_complex", _raw, [(4, 3)]),
        case(
            "linalg_geqrf_zero_column",  # tau = 0 where the column is already reduced
            _raw,
            [np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 2.0]])],
        ),
    ],
)
def geqrf(ctx, x, **_):
    """Decomposed: Householder QR in LAPACK's packed form (reflectors below the
    diagonal, ``r`` on and above it, ``taus``)."""
    return ctx.decompose(_linalg_orth.geqrf, x)


def _geqp3(x, jpvt):
    from jax._src.lax import linalg as private  # geqp3 has no public wrapper

    return private.geqp3(x, jpvt)


@family.lowering(
    "geqp3",
    values="any",
    cases=lambda: [
        case("linalg_geqp3", _geqp3, [(4, 5), np.zeros(5, np.int32)]),
        case("linalg_geqp3_fixed_columns", _geqp3, [(5, 4), np.array([0, 1, 0, 1], np.int32)]),
        case(  # jpvt drawn from {0, 1}: some columns fixed in front
            "linalg_geqp3_symbolic",
            _geqp3,
            [("M", "N"), ("N",)],
            dtypes=[None, np.int32],
            dim_sizes=_TALL_WIDE,
            input_range=(0, 2),
        ),
        case(
            "linalg_geqp3_batched",
            _geqp3,
            [(2, 4, 3), np.array([[0, 0, 0], [0, 0, 7]], np.int32)],
        ),
    ],
)
def geqp3(ctx, x, jpvt, **_):
    """Decomposed: Householder QR with column pivoting, LAPACK's geqp3 (1-based ``jpvt``;
    nonzero entries of the ``jpvt`` operand mark columns factored first, unpivoted)."""
    return ctx.decompose(_linalg_orth.geqp3, x, jpvt)


def _product(x):
    packed, taus = jnp.linalg.qr(x, mode="raw")
    return lax_linalg.householder_product(jnp.swapaxes(packed, -1, -2), taus)


def _ormqr(left, transpose):
    def fn(x, c):
        packed, taus = jnp.linalg.qr(x, mode="raw")
        return lax_linalg.ormqr(
            jnp.swapaxes(packed, -1, -2), taus, c, left=left, transpose=transpose
        )

    return fn


@family.lowering(
    lax_linalg.householder_product_p,
    values="any",
    cases=lambda: [
        case("linalg_householder_product", _product, [(5, 3)]),
        case("linalg_householder_product_batched", _product, [("B", 4, 4)]),
        case("linalg_householder_product_symbolic", _product, [("N", "N")]),
        complex_case("linalg_householder_product_complex", _product, [(5, 3)]),
        case(
            "linalg_householder_product_fewer_taus",
            lambda a, t: lax_linalg.householder_product(a, t),
            [(5, 4), (2,)],
        ),
    ],
)
def householder_product(ctx, a, taus, **_):
    """Decomposed: ``H_0 ... H_{k-1}`` accumulated backwards from the identity (as orgqr)."""
    return ctx.decompose(_linalg_orth.householder_product, a, taus)


@family.lowering(
    lax_linalg.ormqr_p,
    values="any",
    cases=lambda: [
        case("linalg_ormqr_left", _ormqr(True, False), [(5, 3), (5, 2)]),
        case("linalg_ormqr_left_transpose", _ormqr(True, True), [(5, 3), (5, 2)]),
        case("linalg_ormqr_right", _ormqr(False, False), [(4, 4), (3, 4)]),
        case("linalg_ormqr_right_transpose", _ormqr(False, True), [("B", 4, 2), ("B", 3, 4)]),
        case(
            "linalg_ormqr_symbolic",
            lambda x, c, d: (_ormqr(True, True)(x, c), _ormqr(False, False)(x, d)),
            [("M", "N"), ("M", 2), (2, "M")],
            dim_sizes=_TALL_WIDE,
        ),
        complex_case("linalg_ormqr_complex_left", _ormqr(True, False), [(5, 3), (5, 2)]),
        complex_case("linalg_ormqr_complex_left_transpose", _ormqr(True, True), [(4, 4), (4, 2)]),
        complex_case("linalg_ormqr_complex_right", _ormqr(False, False), [(4, 3), (2, 4)]),
        complex_case("linalg_ormqr_complex_right_transpose", _ormqr(False, True), [(4, 4), (3, 4)]),
        case(
            "scipy_linalg_qr_multiply",
            lambda x, c: tuple(scipy_linalg().qr_multiply(x, c)),
            [(5, 3), (5,)],
        ),
    ],
)
def ormqr(ctx, a, taus, c, *, left, transpose, **_):
    """Decomposed: the reflectors applied to ``c`` one at a time, in the order the
    product ``Q`` (or ``Q^T``) needs, never forming ``Q``."""
    return ctx.decompose(_linalg_orth.ormqr, a, taus, c, left=left, transpose=transpose)


register = family.register
