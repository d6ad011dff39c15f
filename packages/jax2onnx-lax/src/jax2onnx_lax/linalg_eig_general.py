"""General eigenproblems: ``eig``, ``schur``, ``hessenberg`` and ``tridiagonal``.

Each decomposes into our own JAX code (``_linalg_schur``) traced on the
equation's values; on complex values the traced equations are complex ones,
lowered by the complex rules (ONNX Runtime has no complex tensors: they are
real/imaginary pairs in the graph).

* ``hessenberg`` and ``tridiagonal`` are LAPACK's gehd2 and sytd2/hetd2 step
  for step (Householder reflectors in larfg's convention, packed as LAPACK
  stores them), so every output equals JAX's CPU result to rounding.
* ``eig`` and ``schur`` (complex input): Hessenberg reduction, then implicit
  single-shift QR iterations in complex arithmetic in one ``while_loop``
  (ONNX ``Loop``). Convergence: a subdiagonal entry with ``|h_k+1,k| <= eps
  (|h_kk| + |h_k+1,k+1|)`` is set to zero (deflation) and the iteration works
  on the last block not yet reduced, with Wilkinson shifts and an exceptional
  shift after every 10 iterations without deflation; at most ``30 * max(n,
  10)`` iterations (LAPACK zlahqr's cap), after which the last iterate is
  returned. Eigenvectors come from substitution on the triangular factor
  (tiny pivots moved to ``eps |lambda|`` as LAPACK's trevc), transformed by
  the Schur vectors; left ones satisfy ``u^H A = lambda u^H`` as in LAPACK.
* A real matrix is converted to complex for ``eig`` (single shifts in complex
  arithmetic converge to complex eigenvalues directly, without the 2x2 blocks
  of a real double-shift iteration), so the imaginary parts of real
  eigenvalues are at rounding level rather than exactly zero.
* ``schur`` of a real matrix is the real Schur form (``_linalg_real_schur``):
  the same Hessenberg reduction, then Francis double-shift QR iterations in
  real arithmetic in one ``while_loop`` (LAPACK dhseqr/dlahqr's method; same
  deflation criterion and cap as above, the active block being the last
  unreduced one of three or more rows), and every remaining 2x2 block rotated
  to LAPACK's standard form (equal diagonal entries, off-diagonal product
  negative; real eigenvalues split into two 1x1 blocks, as dlanv2 does).

Gauge freedoms, which cases must not compare: the order of the eigenvalues
(and of the Schur form's diagonal) is the QR iteration's, not LAPACK's; each
eigenvector is normalised as LAPACK's geev does (unit 2-norm, the entry of
largest magnitude real and positive), which for complex inputs fixes it
uniquely for distinct eigenvalues, but for a real input LAPACK keeps the sign
of a real eigenvector and its own phase of complex pairs; the Schur vectors
of a complex matrix are unique only up to a unit phase per column (given the
order), those of a real one up to the order of the blocks and a sign per
column (and a rotation within a 2x2 block). The cases therefore compare
order- and phase-invariant functions: power sums ``sum(w**k)`` (``trace(T^k)``
for the real Schur form), residuals ``A v - v w``, reconstructions, sorted
magnitudes (sorted real parts and ``|imaginary parts|`` from the real form's
blocks), the block structure, and the gauge itself (the imaginary part of
each vector's largest entry). Matrix dimensions may be symbolic (every loop
then runs as an ONNX ``Loop`` and the iteration cap is computed from the
shape); so may batch dimensions.

Not done: ``schur`` with ``sort_eig_vals``/``select_callable``; ``hessenberg`` of ``0 x 0``
matrices (JAX's own ``taus`` shape is ``(..., -1)``, which no backend runs).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.lax import linalg as lax_linalg

from jax2onnx.plugin import Family, case, is_symbolic
from jax2onnx_lax import _linalg_real_schur, _linalg_schur
from jax2onnx_lax._linalg import eye_mask, tril_mask
from jax2onnx_lax.linalg import scipy_linalg

family = Family("lax")

# Real matrices with well-separated eigenvalues (0.3 +- 0.6i, -0.5 +- 0.15i, 0.9, -0.9),
# perturbed by 0.04 times the input: the eigenvalues stay apart, so the eigenvectors are well
# conditioned, and a spectral radius near 1 keeps the power sums free of cancellation in float32.
_REAL_BASE = np.array(
    [
        [0.3, 0.6, 0.0, 0.0, 0.0, 0.0],
        [-0.6, 0.3, 0.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.9, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, -0.5, 0.15, 0.0],
        [0.0, 0.0, 0.0, -0.15, -0.5, 0.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, -0.9],
    ]
)
_COMPLEX_DIAG = np.array([0.3 + 0.3j, -0.6 + 0.15j, 0.75 - 0.3j, -0.15 - 0.6j, 0.9j, -0.9])


def _spread(x):
    """``x`` scaled down and added to a matrix with well-separated eigenvalues
    (a symbolic ``n`` needs the constraint ``n <= 6``)."""
    n = x.shape[-1]
    if is_symbolic(n):
        base = np.diag(_COMPLEX_DIAG) if jnp.iscomplexobj(x) else _REAL_BASE
        return 0.04 * x + jnp.asarray(base, x.dtype)[:n, :n]
    base = np.diag(_COMPLEX_DIAG[:n]) if jnp.iscomplexobj(x) else _REAL_BASE[:n, :n]
    return 0.04 * x + jnp.asarray(base, x.dtype)


def _h(m):
    return jnp.conj(jnp.swapaxes(m, -1, -2))


def _power_sums(w, count=None):
    """``sum_i w_i^k`` for ``k = 1 .. count`` (default ``n``): the traces of ``A^k``,
    order-invariant. Cases of symbolic size give a fixed ``count``."""
    count = w.shape[-1] if count is None else count
    return jnp.stack([jnp.sum(w**k, axis=-1) for k in range(1, count + 1)], axis=-1)


def _gauge(v):
    """The imaginary part of each column's largest-magnitude entry (zero in LAPACK's gauge)."""
    top = jnp.argmax(jnp.abs(v), axis=-2)
    return jnp.imag(jnp.take_along_axis(v, top[..., None, :], axis=-2))


def _eig_invariants(x, powers=None):
    a = _spread(x)
    w, vl, vr = lax_linalg.eig(a)
    return (
        _power_sums(w, powers),
        jnp.sort(jnp.abs(w), axis=-1),
        a @ vr - vr * w[..., None, :],  # right residuals
        _h(vl) @ a - w[..., :, None] * _h(vl),  # left residuals
        jnp.linalg.norm(vr, axis=-2),
        jnp.linalg.norm(vl, axis=-2),
        _gauge(vr),
        _gauge(vl),
    )


def _eig_right(x):
    a = _spread(x)
    w, vr = lax_linalg.eig(a, compute_left_eigenvectors=False)
    return _power_sums(w), a @ vr - vr * w[..., None, :], _gauge(vr)


def _eig_left(x):
    a = _spread(x)
    w, vl = lax_linalg.eig(a, compute_right_eigenvectors=False)
    return _power_sums(w), _h(vl) @ a - w[..., :, None] * _h(vl), _gauge(vl)


def _eigvals(x):
    w = jnp.linalg.eigvals(_spread(x))
    return _power_sums(w), jnp.sort(jnp.abs(w), axis=-1)


def _eig_reconstruct(x):
    """``V diag(w) V^-1`` is the matrix, whatever the order and phases of the pairs."""
    w, v = jnp.linalg.eig(_spread(x))
    return (v * w[..., None, :]) @ jnp.linalg.inv(v)


def _eig_all(x):
    """Every form of ``eig``: with both, either or neither kind of eigenvector."""
    flags = [(True, True), (True, False), (False, True), (False, False)]
    return tuple(
        out
        for left, right in flags
        for out in lax_linalg.eig(
            x, compute_left_eigenvectors=left, compute_right_eigenvectors=right
        )
    )


def _schur_both(x):
    return (*lax_linalg.schur(x), *lax_linalg.schur(x, compute_schur_vectors=False))


def _each(fn):
    """``fn`` of every input, its outputs in one flat tuple."""
    return lambda *xs: tuple(out for x in xs for out in fn(x))


_EMPTY = {"no_unused_inputs": False}  # an empty matrix has no entries to read


def _complex_cases(name, fn, shapes, **kw):
    return case(name, fn, shapes, dtypes=[np.complex64] * len(shapes), input_range=(-1, 1), **kw)


_ROOTS_COEFFS = np.poly(np.array([0.8, -0.4, 0.2 + 0.6j, 0.2 - 0.6j, -0.9])).real


def _roots(c):
    r = jnp.roots(c, strip_zeros=False)
    return _power_sums(r), jnp.sort(jnp.abs(r)), jnp.polyval(c.astype(r.dtype), r)


@family.lowering(
    lax_linalg.eig_p,
    values="complex",
    cases=lambda: [
        case("linalg_eig_real", _eig_invariants, [(4, 4)], input_range=(-1, 1)),
        case("linalg_eig_real_2x2", _eig_invariants, [(2, 2)], input_range=(-1, 1)),
        case("linalg_eig_real_6x6", _eig_invariants, [(6, 6)], input_range=(-1, 1)),
        _complex_cases("linalg_eig_complex", _eig_invariants, [(5, 5)]),
        _complex_cases("linalg_eig_complex_3x3", _eig_invariants, [(3, 3)]),
        case("linalg_eig_right", _eig_right, [(5, 5)], input_range=(-1, 1)),
        _complex_cases("linalg_eig_left", _eig_left, [(4, 4)]),
        case("linalg_eig_vmap", jax.vmap(_eig_invariants), [(3, 4, 4)], input_range=(-1, 1)),
        _complex_cases("linalg_eig_batched", _eig_invariants, [("B", 3, 3)]),
        case("jnp_linalg_eigvals", _eigvals, [(5, 5)], input_range=(-1, 1)),
        _complex_cases("jnp_linalg_eigvals_complex", _eigvals, [(6, 6)]),
        case("jnp_linalg_eig_reconstruct", _eig_reconstruct, [(4, 4)], input_range=(-1, 1)),
        case("jnp_roots", _roots, [_ROOTS_COEFFS]),
        case(
            "linalg_eig_symbolic",
            lambda x: _eig_invariants(x, 4),
            [("N", "N")],
            input_range=(-1, 1),
            constraints=["N <= 6"],
        ),
        _complex_cases(
            "linalg_eig_complex_symbolic",
            lambda x: _eig_invariants(x, 4),
            [("N", "N")],
            dim_sizes={"N": (3, 1, 4)},
            constraints=["N <= 6"],
        ),
        # no eigenvalues: empty w, vl and vr as JAX gives them, and an empty batch
        case("linalg_eig_empty", _each(_eig_all), [(0, 0), (3, 0, 0)], **_EMPTY),
        case("linalg_eig_empty_batch", _each(_eig_all), [(0, 4, 4)], **_EMPTY),
        _complex_cases("linalg_eig_empty_complex", _each(_eig_all), [(0, 0), (0, 3, 3)], **_EMPTY),
    ],
)
def eig(ctx, x, *, compute_left_eigenvectors, compute_right_eigenvectors, **_):
    """Decomposed: complex Schur form by Hessenberg reduction and shifted QR (a
    ``while_loop``), eigenvectors by substitution on the triangular factor, LAPACK's
    normalisation (``_linalg_schur.eig``). A real input is converted to complex first."""
    dtype = ctx.avals_out[0].dtype

    def fn(a):
        return _linalg_schur.eig(
            a.astype(dtype), left=compute_left_eigenvectors, right=compute_right_eigenvectors
        )

    return ctx.decompose(fn, x)


def _schur_invariants(x, powers=None):
    a = _spread(x)
    t, z = lax_linalg.schur(a)
    n = a.shape[-1]
    return (
        z @ t @ _h(z),
        _h(z) @ z,
        jnp.abs(jnp.where(tril_mask(n, k=-1), t, 0)),
        _power_sums(jnp.diagonal(t, axis1=-2, axis2=-1), powers),
        jnp.sort(jnp.abs(jnp.diagonal(t, axis1=-2, axis2=-1)), axis=-1),
    )


# Real Schur cases: Q (B + eps x) Q^T with B block diagonal (pairs r +- i w as [[r, w], [-w, r]]
# and real eigenvalues, spread over [-0.9, 0.9]; its top-left 6x6 is _REAL_BASE) and Q a fixed
# orthogonal matrix, so the iteration has real work and the eigenvalues stay well separated.
_PAIRS = [(0.3, 0.6), (-0.5, 0.15), (0.6, 0.3), (-0.2, 0.7), (0.0, 0.4), (-0.7, 0.5)]
_REALS = [0.9, -0.9, 0.75, -0.35, 0.15, 0.45]
_SCHUR_BASE = np.zeros((18, 18))
for _j, ((_r, _w), _v) in enumerate(zip(_PAIRS, _REALS, strict=True)):
    _SCHUR_BASE[3 * _j : 3 * _j + 2, 3 * _j : 3 * _j + 2] = [[_r, _w], [-_w, _r]]
    _SCHUR_BASE[3 * _j + 2, 3 * _j + 2] = _v
_SPLIT_BASE = np.array([[0.7, 0.5], [0.0, -0.4]])  # real eigenvalues: the 2x2 block splits


def _orthogonal(n):
    return np.linalg.qr(np.random.default_rng(n).standard_normal((n, n)))[0]


def _real_matrix(x, base=None, eps=0.04):
    n = x.shape[-1]
    q = _orthogonal(n)
    b = _SCHUR_BASE[:n, :n] if base is None else base
    return jnp.asarray(q, x.dtype) @ (eps * x + jnp.asarray(b, x.dtype)) @ q.T.astype(x.dtype)


def _real_schur_form(t):
    """Invariants of a real Schur form ``t``, whatever its block order: the entries
    below the subdiagonal, for each 2x2 block the difference of its diagonal entries,
    whether every block has ``b c < 0``, whether blocks are apart, the number of blocks,
    ``trace(t^k)`` for ``k = 1 .. n``, and the sorted real and ``|imaginary|`` parts of
    the eigenvalues read from the blocks."""
    n = t.shape[-1]
    d = jnp.diagonal(t, axis1=-2, axis2=-1)
    if n == 1:
        return d, jnp.zeros_like(d)
    sub = jnp.diagonal(t, offset=-1, axis1=-2, axis2=-1)
    sup = jnp.diagonal(t, offset=1, axis1=-2, axis2=-1)
    block = sub != 0
    im = jnp.sqrt(jnp.abs(jnp.where(block, sub * sup, 0)))
    zero = jnp.zeros_like(d[..., :1])
    im = jnp.concatenate([im, zero], -1) + jnp.concatenate([zero, im], -1)
    powers, p = [], t
    for _ in range(n):
        powers.append(jnp.trace(p, axis1=-2, axis2=-1))
        p = p @ t
    return (
        jnp.abs(jnp.where(np.tril(np.ones((n, n), bool), -2), t, 0)),
        jnp.where(block, d[..., :-1] - d[..., 1:], 0),
        jnp.all(jnp.where(block, sub * sup < 0, True), axis=-1),
        ~jnp.any(block[..., :-1] & block[..., 1:], axis=-1),
        jnp.sum(block, axis=-1),
        jnp.stack(powers, axis=-1),
        jnp.sort(d, axis=-1),
        jnp.sort(im, axis=-1),
    )


def _real_schur_invariants(x, base=None, eps=0.04, schur=lax_linalg.schur):
    a = _real_matrix(x, base, eps)
    t, z = schur(a)
    zt = jnp.swapaxes(z, -1, -2)
    return (z @ t @ zt - a, zt @ z, *_real_schur_form(t))


def _real_schur_values(x):
    (t,) = lax_linalg.schur(_real_matrix(x), compute_schur_vectors=False)
    return _real_schur_form(t)


def _real_schur_symbolic(x):
    """Invariants of the real Schur form of a matrix of symbolic size ``n <= 18``:
    the residual, ``Z^T Z``, the entries below the subdiagonal, ``trace(t^k)`` for
    ``k = 1 .. 4``, the standard form of each 2x2 block (equal diagonal entries,
    ``b c < 0``), the number of blocks and the sorted diagonal."""
    n = x.shape[-1]
    a = 0.04 * x + jnp.asarray(_SCHUR_BASE, x.dtype)[:n, :n]
    t, z = lax_linalg.schur(a)
    zt = jnp.swapaxes(z, -1, -2)
    d = jnp.diagonal(t, axis1=-2, axis2=-1)
    shift = eye_mask(n, -1).astype(t.dtype)  # row r picks column r - 1
    sub, sup = jnp.sum(shift * t, axis=-1), jnp.sum(shift.T * t, axis=-2)  # t[r, r-1], t[r-1, r]
    block = sub != 0
    powers = [jnp.trace(jnp.linalg.matrix_power(t, k), axis1=-2, axis2=-1) for k in (1, 2, 3, 4)]
    return (
        z @ t @ zt - a,
        zt @ z,
        jnp.abs(jnp.where(tril_mask(n, k=-2), t, 0)),
        jnp.stack(powers, axis=-1),
        jnp.where(block, shift @ d - d, 0),
        jnp.all(jnp.where(block, sub * sup < 0, True), axis=-1),
        jnp.sum(block, axis=-1),
        jnp.sort(d, axis=-1),
    )


def _real_cases(name, fn, shapes, **kw):
    return case(name, fn, shapes, input_range=(-1, 1), **kw)


@family.lowering(
    lax_linalg.schur_p,
    values="any",
    cases=lambda: [
        _complex_cases("linalg_schur_complex", _schur_invariants, [(4, 4)]),
        _complex_cases("linalg_schur_complex_2x2", _schur_invariants, [(2, 2)]),
        _complex_cases("linalg_schur_batched", _schur_invariants, [("B", 5, 5)]),
        _complex_cases(
            "scipy_linalg_schur",
            lambda x: _schur_invariants(x)[:2],
            [(3, 3)],
        ),
        *[
            _real_cases(f"linalg_schur_real_{n}x{n}", _real_schur_invariants, [(n, n)])
            for n in range(1, 7)
        ],
        _real_cases(
            "linalg_schur_real_split",
            lambda x: _real_schur_invariants(x, _SPLIT_BASE),
            [(2, 2)],
        ),
        _real_cases(
            "linalg_schur_real_18x18",
            lambda x: _real_schur_invariants(x, eps=0.01),
            [(18, 18)],
            # trace(t^k) up to k = 18 in float32: JAX's own float32 values are 9e-6 from
            # the float64 ones (ours 3e-6 to 7e-6), so the float32 default atol of 1e-5 is
            # below JAX's own error there
            tolerances={"float32": (1e-5, 3e-5)},
        ),
        _real_cases("linalg_schur_real_values", _real_schur_values, [(5, 5)]),
        _real_cases("linalg_schur_real_vmap", jax.vmap(_real_schur_invariants), [(3, 4, 4)]),
        _real_cases("linalg_schur_real_batched", _real_schur_invariants, [("B", 5, 5)]),
        _real_cases(
            "scipy_linalg_schur_real",
            lambda x: _real_schur_invariants(x, schur=scipy_linalg().schur),
            [(3, 3)],
        ),
        _real_cases(  # sizes 1 and 2 take no double-shift step, 5 does
            "linalg_schur_real_symbolic",
            _real_schur_symbolic,
            [("N", "N")],
            dim_sizes={"N": (4, 1, 2, 5)},
            constraints=["N <= 18"],
        ),
        _complex_cases(
            "linalg_schur_complex_symbolic",
            lambda x: _schur_invariants(x, 4),
            [("N", "N")],
            dim_sizes={"N": (3, 1, 5)},
            constraints=["N <= 6"],
        ),
        _complex_cases(  # an empty batch (that one crashed), and 0 x 0 matrices
            "linalg_schur_empty_batch_complex",
            _each(_schur_both),
            [(0, 4, 4), (0, 0), (3, 0, 0)],
            **_EMPTY,
        ),
    ],
)
def schur(ctx, x, *, compute_schur_vectors, sort_eig_vals=False, select_callable=None, **_):
    """Decomposed: Hessenberg reduction, then QR iterations in a ``while_loop``:
    single-shift in complex arithmetic for a complex matrix (``_linalg_schur``),
    Francis double-shift in real arithmetic with standardised 2x2 blocks for a real
    one (``_linalg_real_schur``)."""
    if sort_eig_vals or select_callable is not None:
        raise ctx.error(
            "schur with sort_eig_vals/select_callable is not supported: compute the "
            "unsorted Schur form and reorder it outside the exported function."
        )
    real = not np.issubdtype(ctx.avals_in[0].dtype, np.complexfloating)
    fn = _linalg_real_schur.schur if real else _linalg_schur.schur
    t, z = ctx.decompose(fn, x, vectors=compute_schur_vectors)
    return [t, z] if compute_schur_vectors else t


@family.lowering(
    lax_linalg.hessenberg_p,
    values="any",
    cases=lambda: [
        case("linalg_hessenberg", lax_linalg.hessenberg, [(5, 5)]),
        case("linalg_hessenberg_2x2", lax_linalg.hessenberg, [(2, 2)]),
        case("linalg_hessenberg_batched", lax_linalg.hessenberg, [("B", 4, 4)]),
        _complex_cases("linalg_hessenberg_complex", lax_linalg.hessenberg, [(4, 4)]),
        _complex_cases("linalg_hessenberg_complex_batched", lax_linalg.hessenberg, [("B", 3, 3)]),
        case(  # N - 1 reflectors, none for N = 1
            "scipy_linalg_hessenberg_q_symbolic",
            lambda x: scipy_linalg().hessenberg(x, calc_q=True),
            [("N", "N")],
            dim_sizes={"N": (3, 1, 5)},
        ),
        case(
            "scipy_linalg_hessenberg_q",
            lambda x: scipy_linalg().hessenberg(x, calc_q=True),
            [(6, 6)],
        ),
        _complex_cases(
            "scipy_linalg_hessenberg_q_complex",
            lambda x: scipy_linalg().hessenberg(x, calc_q=True),
            [(4, 4)],
        ),
    ],
)
def hessenberg(ctx, x):
    """Decomposed: LAPACK gehd2's Householder reduction step for step (masked
    rank-one updates), reflectors packed below the subdiagonal with their ``taus``."""
    if ctx.avals_in[0].shape[-1] == 0:
        raise ctx.error(
            "hessenberg of 0 x 0 matrices is not supported: JAX gives their taus the shape "
            f"{ctx.avals_out[1].str_short()}, which no backend can run (JAX's CPU fails too)."
        )
    return ctx.decompose(_linalg_schur.gehrd, x)


def _tridiagonal(lower):
    return lambda x: lax_linalg.tridiagonal(x, lower=lower)


@family.lowering(
    lax_linalg.tridiagonal_p,
    values="any",
    cases=lambda: [
        case("linalg_tridiagonal_lower", _tridiagonal(True), [(5, 5)]),
        case("linalg_tridiagonal_upper", _tridiagonal(False), [(4, 4)]),
        case("linalg_tridiagonal_2x2", _tridiagonal(True), [(2, 2)]),
        case("linalg_tridiagonal_batched", _tridiagonal(False), [("B", 6, 6)]),
        _complex_cases("linalg_tridiagonal_complex_lower", _tridiagonal(True), [(4, 4)]),
        _complex_cases("linalg_tridiagonal_complex_upper", _tridiagonal(False), [(5, 5)]),
        case(
            "linalg_tridiagonal_symbolic",
            lambda x: (*_tridiagonal(True)(x), *_tridiagonal(False)(x)),
            [("N", "N")],
            dim_sizes={"N": (3, 1, 4)},
        ),
        _complex_cases(
            "linalg_tridiagonal_complex_symbolic",
            lambda x: (*_tridiagonal(True)(x), *_tridiagonal(False)(x)),
            [("N", "N")],
        ),
    ],
)
def tridiagonal(ctx, x, *, lower):
    """Decomposed: LAPACK sytd2/hetd2 step for step (one reflector and a Hermitian
    rank-two update per column); the upper form as the lower one of the reversed matrix."""
    return ctx.decompose(_linalg_schur.sytrd, x, lower=lower)


register = family.register
