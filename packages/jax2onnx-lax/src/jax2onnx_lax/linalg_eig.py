"""Symmetric eigendecomposition (``eigh``) and SVD (``svd``) by Jacobi iteration.

Both decompose into our own JAX code (``_linalg_orth``) lowered through the
lax lowerings: ``eigh`` is cyclic Jacobi on the symmetric matrix, ``svd`` is
one-sided (Hestenes) Jacobi, after a Householder QR for tall matrices (a wide
one is handled as its transpose). Every sweep applies ``n - 1`` rounds of
``n / 2`` disjoint rotations (Gather, arithmetic), and the sweeps run in one
ONNX ``Loop`` until the off-diagonal part is at rounding level (at most 30).

What is reproduced, and what is not:

* Eigenvalues (ascending) and singular values (descending) match JAX's
  LAPACK results (syevd, gesdd) to rounding: Jacobi is backward stable and
  accurate to high relative precision.
* Eigen- and singular vectors span the same spaces and are orthonormal, so
  every sign-invariant function of them matches: reconstructions
  ``v diag(w) v^T`` and ``u diag(s) v^T``, projectors ``v_i v_i^T``, ``abs(v)``
  for distinct values, ``pinv``, ``lstsq``. Their signs are Jacobi's own, not
  LAPACK's (which no algorithm short of LAPACK's reproduces); for repeated
  values any orthonormal basis of the eigenspace is as valid as LAPACK's; for
  ``full_matrices=True`` the columns of ``u`` beyond ``min(m, n)`` are another
  orthonormal basis of the same complement. Cases therefore compare only
  sign-invariant functions of the vectors.
* For a rank-deficient matrix, the columns of ``u`` belonging to zero
  singular values are zero instead of a completing orthonormal basis (``pinv``
  and ``lstsq`` never use them).

Complex (Hermitian) matrices, stored as real/imaginary pairs since ONNX Runtime
has no complex tensors, take the same Jacobi iterations with unitary rotations
(a phase ``e^{i phi}`` of the entry to zero, then the real rotation); their
vectors are unique only up to a unit phase per column (LAPACK's phases are its
own), so complex cases compare phase-invariant functions (reconstructions,
projectors ``v_i v_i^H``, ``abs(v)``).

Matrix dimensions may be symbolic: the rounds of a sweep then run in an ONNX
``Loop`` and each round's pairs come from a formula (the round-robin schedule
is a constant table for static sizes); an odd size gets its zero row and
column from the shape. ``svd`` of dimensions that compare (``N x N``,
``(N + 2) x N``) takes the tall or the wide path as for static sizes; with
unrelated symbols (``M x N``) a select on ``M < N`` picks ``a`` or ``a^H`` at
run time, fitted to ``max x min``, and one tall path serves both orientations.

``eigh`` with ``subset_by_index=(lo, hi)`` computes every eigenpair and keeps
the ``lo``-th to ``hi - 1``-th smallest (JAX's CPU backend does not implement
the subset itself; ``tests/test_eigh_subset.py`` checks it against the full
``eigh`` sliced). ``svd`` with ``subset_by_index=(lo, hi)`` likewise computes every
singular triplet and keeps the ``lo``-th to ``hi - 1``-th largest (``s[lo:hi]``, the
columns ``lo:hi`` of ``u``, the rows ``lo:hi`` of ``vt``), for ``0 <= lo <= hi <=
min(m, n)`` (``tests/test_svd_subset.py``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax.lax import linalg as lax_linalg

from jax2onnx.plugin import Family, case
from jax2onnx_lax import _linalg_orth
from jax2onnx_lax._linalg import dim_min
from jax2onnx_lax.linalg import complex_case

family = Family("lax")


def _orthogonal(n: int, seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))
    return q * np.sign(np.diag(r))


_Q5 = _orthogonal(5, 0)
_SPREAD = (_Q5 * np.array([-2.0, -0.5, 1.0, 2.5, 4.0])) @ _Q5.T  # eigenvalues well apart
_REPEATED = (_Q5 * np.array([1.0, 1.0, 3.0, 3.0, 3.0])) @ _Q5.T
_SINGULAR_SPREAD = (_orthogonal(5, 1)[:, :3] * np.array([3.0, 1.5, 0.5])) @ _orthogonal(3, 2).T
_RANK2 = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])


def _h(m):
    return jnp.conj(jnp.swapaxes(m, -1, -2))


def _reconstruct_eigh(x):
    w, v = jnp.linalg.eigh(x)
    return w, (v * w[..., None, :]) @ _h(v), _h(v) @ v


def _projectors(x):
    w, v = jnp.linalg.eigh(x)
    return w, jnp.abs(v), jnp.einsum("...ik,...jk->...kij", v, jnp.conj(v))


_EMPTY = {"no_unused_inputs": False}  # an empty matrix has no entries to read


def _each(fn):
    """``fn`` of every input, its outputs in one flat tuple."""
    return lambda *xs: tuple(out for x in xs for out in fn(x))


def _eigh_both(x):
    return (*lax_linalg.eigh(x), *lax_linalg.eigh(x, lower=False))


_CQ4 = np.linalg.qr(
    np.random.default_rng(3).standard_normal((4, 4))
    + 1j * np.random.default_rng(4).standard_normal((4, 4))
)[0]
_HERMITIAN_SPREAD = (_CQ4 * np.array([-2.0, -0.5, 1.0, 3.0])) @ _CQ4.conj().T


@family.lowering(
    lax_linalg.eigh_p,
    values="any",
    cases=lambda: [
        case(
            "linalg_eigh_values", lambda x: lax_linalg.eigh(x, symmetrize_input=False)[1], [(4, 4)]
        ),
        case(
            "linalg_eigh_upper_values",
            lambda x: lax_linalg.eigh(x, lower=False, symmetrize_input=False)[1],
            [(5, 5)],
        ),
        case("jnp_linalg_eigh_reconstruct", _reconstruct_eigh, [("B", 4, 4)]),
        case("jnp_linalg_eigh_odd", _reconstruct_eigh, [(5, 5)]),
        case("jnp_linalg_eigh_1x1", _reconstruct_eigh, [(1, 1)]),
        case("jnp_linalg_eigh_distinct_vectors", _projectors, [_SPREAD]),
        case("jnp_linalg_eigh_repeated", _reconstruct_eigh, [_REPEATED]),
        case("jnp_linalg_eigh_zero", _reconstruct_eigh, [np.zeros((3, 3))]),
        case("jnp_linalg_eigvalsh", jnp.linalg.eigvalsh, [("B", 6, 6)]),
        case("jnp_linalg_eigh_loop", _reconstruct_eigh, [(20, 20)], expect=["Loop"]),
        case(  # odd sizes get a zero row and column (computed in the graph), even ones not
            "jnp_linalg_eigh_symbolic",
            _reconstruct_eigh,
            [("N", "N")],
            dim_sizes={"N": (3, 1, 4)},
        ),
        case(
            "linalg_eigh_upper_values_symbolic",
            lambda x: lax_linalg.eigh(x, lower=False, symmetrize_input=False)[1],
            [("B", "N", "N")],
        ),
        complex_case("jnp_linalg_eigh_complex", _reconstruct_eigh, [(4, 4)]),
        complex_case("jnp_linalg_eigh_complex_odd_batched", _reconstruct_eigh, [("B", 5, 5)]),
        complex_case(
            "linalg_eigh_complex_upper",
            lambda x: lax_linalg.eigh(x, lower=False, symmetrize_input=False)[1],
            [(3, 3)],
        ),
        case("jnp_linalg_eigh_complex_vectors", _projectors, [_HERMITIAN_SPREAD]),
        complex_case("jnp_linalg_eigvalsh_complex", jnp.linalg.eigvalsh, [(6, 6)]),
        complex_case("jnp_linalg_eigh_complex_symbolic", _reconstruct_eigh, [("N", "N")]),
        # no eigenpairs: empty v and w, as JAX (inputs unused), an empty batch too
        case("linalg_eigh_empty", _each(_eigh_both), [(0, 0), (3, 0, 0), (0, 4, 4)], **_EMPTY),
        complex_case("linalg_eigh_empty_complex", _each(_eigh_both), [(0, 0), (2, 0, 0)], **_EMPTY),
    ],
)
def eigh(ctx, x, *, lower, subset_by_index=None, **_):
    """Decomposed: cyclic Jacobi on the symmetric matrix of the ``lower`` (upper)
    triangle, sweeps in a while loop, eigenvalues sorted ascending (TopK). A
    ``subset_by_index=(lo, hi)`` slices eigenpairs ``lo .. hi - 1`` of all of them.
    Hermitian matrices take unitary rotations."""
    everything = (0, ctx.avals_in[0].shape[-1])
    if subset_by_index is None or tuple(subset_by_index) == everything:
        return ctx.decompose(_linalg_orth.eigh, x, lower=lower)
    lo, hi = (int(i) for i in subset_by_index)
    return ctx.decompose(_eigh_subset, x, lower=lower, lo=lo, hi=hi)


def _eigh_subset(a, *, lower, lo, hi):
    v, w = _linalg_orth.eigh(a, lower=lower)
    return v[..., lo:hi], w[..., lo:hi]


def _svd_parts(full_matrices):
    def fn(x):
        u, s, vt = jnp.linalg.svd(x, full_matrices=full_matrices)
        k = s.shape[-1]
        rebuilt = (u[..., :, :k] * s[..., None, :]) @ vt[..., :k, :]
        return s, rebuilt, _h(u) @ u, vt @ _h(vt), u @ _h(u)

    return fn


def _svd_all(x):
    """Singular values alone, then the reduced and the full factors."""
    reduced, full = lax_linalg.svd(x, full_matrices=False), lax_linalg.svd(x, full_matrices=True)
    return lax_linalg.svd(x, compute_uv=False), *reduced, *full


def _svd_abs(x):
    u, s, vt = jnp.linalg.svd(x, full_matrices=False)
    return s, jnp.abs(u), jnp.abs(vt)


@family.lowering(
    lax_linalg.svd_p,
    values="any",
    cases=lambda: [
        case(
            "linalg_svd_values",
            lambda x: lax_linalg.svd(x, compute_uv=False),
            [("B", 4, 3)],
        ),
        case("jnp_linalg_svd_values_wide", lambda x: jnp.linalg.svd(x, compute_uv=False), [(3, 5)]),
        case("jnp_linalg_svd_square", _svd_parts(True), [(4, 4)]),
        case("jnp_linalg_svd_odd", _svd_parts(False), [(5, 5)]),
        case("jnp_linalg_svd_tall_full", _svd_parts(True), [(5, 3)]),
        case("jnp_linalg_svd_tall_reduced", _svd_parts(False), [("B", 5, 3)]),
        case("jnp_linalg_svd_wide_full", _svd_parts(True), [(3, 5)]),
        case("jnp_linalg_svd_wide_reduced", _svd_parts(False), [(2, 4)]),
        case("jnp_linalg_svd_distinct_vectors", _svd_abs, [_SINGULAR_SPREAD]),
        case("jnp_linalg_svd_loop", _svd_parts(False), [(20, 18)], expect=["Loop"]),
        case("jnp_linalg_svd_symbolic", _svd_parts(True), [("N", "N")], dim_sizes={"N": (3, 1, 4)}),
        case(  # tall by a known margin: the QR path, with a symbolic min(M, N) = N
            "jnp_linalg_svd_tall_symbolic",
            _svd_parts(False),
            [("N + 2", "N")],
        ),
        case("jnp_linalg_pinv_wide_symbolic", jnp.linalg.pinv, [("N", "N + 1")]),
        case(  # unrelated M and N: the orientation chosen at run time, tall, wide and square
            "jnp_linalg_svd_either_symbolic",
            _svd_parts(False),
            [("B", "M", "N")],
            dim_sizes={"B": (2, 1, 2, 1, 3), "M": (5, 3, 4, 1, 6), "N": (3, 5, 4, 6, 1)},
        ),
        case(
            "jnp_linalg_svd_either_full_symbolic",
            _svd_parts(True),
            [("M", "N")],
            dim_sizes={"M": (3, 5, 2, 4), "N": (5, 3, 2, 1)},
        ),
        case("jnp_linalg_svd_either_abs_symbolic", _svd_abs, [("M", "N")]),
        case("jnp_linalg_pinv", jnp.linalg.pinv, [("B", 4, 3)]),
        case("jnp_linalg_pinv_wide", jnp.linalg.pinv, [(2, 5)]),
        case(
            "jnp_linalg_lstsq",
            lambda a, b: tuple(jnp.linalg.lstsq(a, b)),
            [(6, 3), (6,)],
        ),
        case(
            "jnp_linalg_lstsq_rank_deficient",
            lambda a, b: tuple(jnp.linalg.lstsq(a, b)),
            [_RANK2, (4, 2)],
        ),
        case("jnp_linalg_matrix_rank", jnp.linalg.matrix_rank, [_RANK2]),
        case(
            "jnp_linalg_norm_2", lambda x: jnp.linalg.norm(x, ord=2, axis=(-2, -1)), [("B", 3, 4)]
        ),
        case("jnp_linalg_norm_nuc", lambda x: jnp.linalg.norm(x, ord="nuc"), [(4, 3)]),
        case("jnp_linalg_cond", jnp.linalg.cond, [(4, 4)]),
        complex_case("jnp_linalg_svd_complex_square", _svd_parts(True), [(4, 4)]),
        complex_case("jnp_linalg_svd_complex_tall", _svd_parts(False), [("B", 5, 3)]),
        complex_case("jnp_linalg_svd_complex_wide_full", _svd_parts(True), [(3, 5)]),
        complex_case(
            "jnp_linalg_svd_complex_values", lambda x: jnp.linalg.svd(x, compute_uv=False), [(4, 6)]
        ),
        complex_case("jnp_linalg_pinv_complex", jnp.linalg.pinv, [(4, 3)]),
        complex_case("jnp_linalg_svd_complex_symbolic", _svd_parts(False), [("N", "N")]),
        complex_case(
            "jnp_linalg_svd_complex_either_symbolic",
            _svd_parts(True),
            [("M", "N")],
            dim_sizes={"M": (4, 2, 3), "N": (2, 3, 3)},
        ),
        # no singular values; the full factors of an m x 0 (0 x n) matrix are u = I (vt = I)
        case("linalg_svd_empty", _each(_svd_all), [(0, 0), (3, 0, 0), (0, 2, 3)], **_EMPTY),
        case("linalg_svd_no_columns", _each(_svd_all), [(4, 0), (2, 3, 0)], **_EMPTY),
        case("linalg_svd_no_rows", _each(_svd_all), [(0, 3), (2, 0, 4)], **_EMPTY),
        complex_case(
            "linalg_svd_empty_complex", _each(_svd_all), [(0, 0), (4, 0), (2, 0, 3)], **_EMPTY
        ),
    ],
)
def svd(ctx, x, *, full_matrices, compute_uv, subset_by_index=None, **_):
    """Decomposed: one-sided Jacobi (after a Householder QR when tall; a wide matrix
    as its conjugate transpose), singular values sorted descending (TopK). Complex
    matrices take unitary rotations. A ``subset_by_index=(lo, hi)`` slices triplets
    ``lo .. hi - 1`` (in descending order) of all of them."""
    m, n = ctx.avals_in[0].shape[-2:]
    rank = dim_min(m, n)
    if subset_by_index is None or tuple(subset_by_index) == (0, rank):
        return ctx.decompose(
            _linalg_orth.svd, x, full_matrices=full_matrices, compute_uv=compute_uv
        )
    lo, hi = _svd_subset_bounds(ctx, subset_by_index, rank)
    return ctx.decompose(_svd_subset, x, compute_uv=compute_uv, lo=lo, hi=hi)


def _svd_subset_bounds(ctx, subset_by_index, rank):
    """``(lo, hi)`` of a range of singular values (``0 <= lo <= hi <= rank``; an empty
    one gives empty outputs); a LoweringError naming the problem for any other."""
    lo, hi = (int(i) for i in subset_by_index)
    if not 0 <= lo <= hi:
        raise ctx.error(
            f"subset_by_index={(lo, hi)} is not a range of singular values: it needs "
            "0 <= lo <= hi (the lo-th to (hi - 1)-th largest)."
        )
    try:
        fits = hi <= rank
    except Exception:  # InconclusiveDimensionOperation: symbolic sizes
        raise ctx.error(
            f"subset_by_index={(lo, hi)} needs min(m, n) = {rank} >= {hi}, which the "
            f"symbolic sizes do not promise: declare it with jax.export constraints "
            f"(symbolic_shape(..., constraints=['... >= {hi}'])) or use static sizes."
        ) from None
    if not fits:
        raise ctx.error(
            f"subset_by_index={(lo, hi)} asks for more singular values than the "
            f"{rank} of a {ctx.avals_in[0].shape[-2]} x {ctx.avals_in[0].shape[-1]} matrix: "
            f"hi must be at most {rank}."
        )
    return lo, hi


def _svd_subset(a, *, compute_uv, lo, hi):
    found = _linalg_orth.svd(a, full_matrices=False, compute_uv=compute_uv)
    if not compute_uv:
        return (found[0][..., lo:hi],)
    s, u, vt = found
    return s[..., lo:hi], u[..., :, lo:hi], vt[..., lo:hi, :]


register = family.register
