"""Orthogonal factorizations written in JAX, for the ``linalg_qr``/``linalg_eig`` lowerings.

* Householder QR in LAPACK's convention (``geqrf``'s reflectors ``H = I - tau v v^H``
  with ``v[0] = 1`` and ``beta = -sign(Re alpha) * ||x||``, larfg's ``tau``), so Q and
  R come out as JAX's CPU backend computes them, signs (phases) included, for real
  and complex matrices.
* Cyclic Jacobi for the symmetric eigenproblem and one-sided (Hestenes) Jacobi
  for the SVD. Each sweep visits all pairs in ``n - 1`` rounds of ``n / 2``
  disjoint rotations (a round-robin schedule, padded to even ``n`` with a row and
  column of zeros that no rotation ever touches; for a symbolic ``n`` the pairs of
  a round are computed from its index), applied at once by gathers. The
  sweeps run in one ``while_loop`` until the off-diagonal part is at rounding
  level (at most :data:`MAX_SWEEPS`). Jacobi computes eigen- and singular values
  to high relative accuracy; the vectors are the same subspaces LAPACK finds, but
  their signs (and bases of repeated values) are the algorithm's own.

See ``_linalg`` for the unrolling and masking conventions.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import is_symbolic
from jax2onnx_lax._linalg import (
    dim_max,
    dim_min,
    eye_mask,
    index,
    iota,
    repeat,
    swap_rows,
    tril_mask,
)

MAX_SWEEPS = 30  # Jacobi converges quadratically: a handful of sweeps in practice


# -- Householder QR -------------------------------------------------------------------


def _reflector(a, j, m):
    """The Householder vector of column ``j`` of packed ``a``: 1 at ``j``, ``a[j+1:, j]`` below."""
    rows = iota(m, j)
    return jnp.where(rows > j, index(a, j, -1), jnp.where(rows == j, 1, 0).astype(a.dtype))


def larfg(alpha: Any, x: Any, rows_below: Any) -> tuple[Any, Any, Any]:
    """LAPACK's larfg for ``(alpha, x)`` (``x`` read only where ``rows_below``).

    Returns ``(beta, tau, v_below)``: ``H^H (alpha; x) = (beta; 0)`` with
    ``H = I - tau v v^H``, ``v = (1; v_below)``, ``beta`` real. ``tau = 0``
    (``beta = alpha``) when ``x = 0`` and ``alpha`` is real. The norm is scaled
    by the largest entry.
    """
    x = jnp.where(rows_below, x, 0)
    big = jnp.maximum(jnp.max(jnp.abs(x), axis=-1), jnp.abs(alpha))
    big = jnp.where(big == 0, 1, big)
    xs = x / big[..., None].astype(x.dtype)
    xnorm2 = jnp.sum(jnp.real(xs * jnp.conj(xs)), axis=-1)
    ar, ai = jnp.real(alpha) / big, jnp.imag(alpha) / big
    trivial = (xnorm2 == 0) & (ai == 0)
    norm = big * jnp.sqrt(ar * ar + ai * ai + xnorm2)
    beta = jnp.where(trivial, jnp.real(alpha), jnp.where(ar >= 0, -norm, norm))
    safe_beta = jnp.where(trivial, 1, beta).astype(alpha.dtype)
    tau = jnp.where(trivial, 0, (safe_beta - alpha) / safe_beta)
    scale = 1 / jnp.where(trivial, 1, alpha - safe_beta)
    return beta, tau, jnp.where(rows_below, x * scale[..., None], 0)


def _householder_step_complex(a, taus, j):
    """:func:`_householder_step` for complex ``a``: larfg's reflector, ``H^H`` applied."""
    m, n = a.shape[-2:]
    rows, cols = iota(m, j), iota(n, j)
    x = index(a, j, -1)
    beta, tau, below = larfg(index(x, j, -1), x, rows > j)
    v = jnp.where(rows == j, jnp.ones((), a.dtype), below)
    w = jnp.einsum("...i,...ij->...j", jnp.conj(v), a) * jnp.conj(tau)[..., None]
    a = a - v[..., :, None] * jnp.where(cols > j, w, 0)[..., None, :]
    col = jnp.where(rows < j, x, jnp.where(rows == j, beta[..., None].astype(a.dtype), below))
    a = jnp.where((cols == j)[None, :], col[..., :, None], a)
    return a, jnp.where(iota(taus.shape[-1], j) == j, tau[..., None], taus)


def _householder_step(a, taus, j):
    """Step ``j`` of Householder QR: the reflector of column ``j`` applied to the
    trailing columns, stored below the diagonal, its ``tau`` in ``taus[j]``.

    ``tau = 0`` when the column below the diagonal is already zero (as LAPACK's
    larfg); the column norm is scaled by its largest entry.
    """
    if jnp.iscomplexobj(a):
        return _householder_step_complex(a, taus, j)
    m, n = a.shape[-2:]
    rows, cols = iota(m, j), iota(n, j)
    x = index(a, j, -1)
    alpha = index(x, j, -1)
    below = jnp.where(rows > j, x, 0)
    big = jnp.max(jnp.abs(jnp.where(rows >= j, x, 0)), axis=-1)
    big = jnp.where(big == 0, 1, big)
    xnorm2 = jnp.sum(jnp.square(below / big[..., None]), axis=-1)
    h = big * jnp.sqrt(jnp.square(alpha / big) + xnorm2)
    trivial = xnorm2 == 0
    beta = jnp.where(trivial, alpha, jnp.where(alpha >= 0, -h, h))
    tau = jnp.where(trivial, 0, (beta - alpha) / jnp.where(trivial, 1, beta))
    scale = 1 / jnp.where(trivial, 1, alpha - beta)
    v = jnp.where(rows > j, x * scale[..., None], jnp.where(rows == j, 1, 0).astype(a.dtype))
    w = jnp.where(cols > j, jnp.einsum("...i,...ij->...j", v, a), 0) * tau[..., None]
    a = a - v[..., :, None] * w[..., None, :]
    col = jnp.where(rows < j, x, jnp.where(rows == j, beta[..., None], v))
    a = jnp.where((cols == j)[None, :], col[..., :, None], a)
    return a, jnp.where(iota(taus.shape[-1], j) == j, tau[..., None], taus)


def geqrf(a: Any) -> tuple[Any, Any]:
    """Householder QR of ``a`` into LAPACK's packed form: ``(a, taus)``."""
    k = dim_min(*a.shape[-2:])
    taus = jnp.zeros((*a.shape[:-2], k), a.dtype)
    return repeat(k, lambda j, carry: _householder_step(*carry, j), (a, taus))


def _swap_columns(a, j, p):
    return jnp.swapaxes(swap_rows(jnp.swapaxes(a, -1, -2), j, p), -1, -2)


def geqp3(a: Any, jpvt: Any) -> tuple[Any, Any, Any]:
    """Householder QR with column pivoting, as LAPACK's geqp3: ``(a, jpvt, taus)``.

    Columns with ``jpvt != 0`` are swapped to the front in order and factored
    first; then step ``j`` swaps in the remaining column of largest norm below
    row ``j`` (the first on ties). The norms are recomputed each step rather
    than downdated, so they agree with LAPACK's to rounding. ``jpvt`` out is
    1-based, as LAPACK's.
    """
    m, n = a.shape[-2:]
    k = dim_min(m, n)
    perm = jnp.broadcast_to(lax.iota(np.int32, n), jpvt.shape)
    fixed = jpvt != 0
    count = jnp.zeros(jpvt.shape[:-1], np.int32)

    def front(j, carry):
        a, perm, fixed, count = carry
        move = index(fixed, j, -1)
        target = jnp.where(move, count, j)
        a, perm = _swap_columns(a, j, target), swap_rows(perm, j, target)
        fixed = swap_rows(fixed, j, target)
        return a, perm, fixed, count + move.astype(np.int32)

    a, perm, _, count = repeat(n, front, (a, perm, fixed, count))

    def step(j, carry):
        a, perm, taus = carry
        rows, cols = iota(m, j), iota(n, j)
        below = jnp.where((rows >= j)[:, None], a, 0)
        norms = jnp.sum(jnp.real(below * jnp.conj(below)), axis=-2)
        p = jnp.argmax(jnp.where(cols >= j, norms, -1), axis=-1).astype(np.int32)
        p = jnp.where(j < count, j, p)
        a, perm = _swap_columns(a, j, p), swap_rows(perm, j, p)
        a, taus = _householder_step(a, taus, j)
        return a, perm, taus

    taus = jnp.zeros((*a.shape[:-2], k), a.dtype)
    a, perm, taus = repeat(k, step, (a, perm, taus))
    return a, perm + 1, taus


def householder_product(a: Any, taus: Any, ncols: int | None = None) -> Any:
    """The first ``ncols`` columns of ``H_0 H_1 ... H_{k-1}`` (reflectors from packed ``a``).

    Accumulated backwards from the identity, as LAPACK's orgqr (ungqr), each
    ``H_j = I - tau_j v_j v_j^H``.
    """
    m = a.shape[-2]
    ncols = a.shape[-1] if ncols is None else ncols
    k = taus.shape[-1]
    q = jnp.broadcast_to(jnp.eye(m, ncols, dtype=a.dtype), (*a.shape[:-2], m, ncols))

    def body(j, q):
        v = _reflector(a, j, m)
        w = jnp.einsum("...i,...ij->...j", jnp.conj(v), q) * index(taus, j, -1)[..., None]
        return q - v[..., :, None] * w[..., None, :]

    return repeat(k, body, q, reverse=True)


def ormqr(a: Any, taus: Any, c: Any, *, left: bool, transpose: bool) -> Any:
    """``Q c``, ``Q^H c``, ``c Q`` or ``c Q^H`` (``Q = H_0 ... H_{k-1}``), a reflector a step
    (``transpose`` is the conjugate transpose for complex matrices, as LAPACK's unmqr)."""
    m = a.shape[-2]
    k = taus.shape[-1]

    def body(j, c):
        v = _reflector(a, j, m)
        tau = index(taus, j, -1)[..., None]
        tau = jnp.conj(tau) if transpose else tau
        if left:
            w = jnp.einsum("...i,...ij->...j", jnp.conj(v), c) * tau
            return c - v[..., :, None] * w[..., None, :]
        w = jnp.einsum("...ij,...j->...i", c, v) * tau
        return c - w[..., :, None] * jnp.conj(v)[..., None, :]

    return repeat(k, body, c, reverse=left != transpose)


def qr(a: Any, *, full_matrices: bool, pivoting: bool = False) -> tuple[Any, ...]:
    """``(q, r)`` (and the 0-based column permutation ``p`` when ``pivoting``) as JAX's
    QR: geqrf (geqp3), then the Householder product, then the upper triangle."""
    m, n = a.shape[-2:]
    k = dim_min(m, n)
    if pivoting:
        packed, jpvt, taus = geqp3(a, jnp.zeros((*a.shape[:-2], n), np.int32))
    else:
        packed, taus = geqrf(a)
    q = householder_product(packed, taus, m if full_matrices else k)
    r = packed[..., : m if full_matrices else k, :]
    r = jnp.where(~tril_mask(*r.shape[-2:], -1), r, 0)
    if not pivoting:
        return q, r
    if not is_symbolic(m) and m == 0:  # JAX's pivots of a matrix without rows: all 0
        return q, r, jnp.zeros_like(jpvt)
    return q, r, jpvt - 1


# -- Jacobi ----------------------------------------------------------------------------


def _schedule(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Round-robin pairs for even ``n``: ``(p, q, inverse)``, each ``[n - 1, ...]`` int32.

    Round ``r`` pairs ``p[r, i] < q[r, i]``; ``inverse[r]`` undoes the order
    ``concatenate([p[r], q[r]])``. Every pair meets once per sweep.
    """
    players = list(range(n))
    ps, qs = [], []
    for _ in range(n - 1):
        pairs = [sorted((players[i], players[n - 1 - i])) for i in range(n // 2)]
        ps.append([p for p, _ in pairs])
        qs.append([q for _, q in pairs])
        players = [players[0], players[-1], *players[1:-1]]
    p, q = np.array(ps, np.int32), np.array(qs, np.int32)
    return p, q, np.argsort(np.concatenate([p, q], axis=1), axis=1).astype(np.int32)


def _round_indices(tables: Any, r: Any) -> tuple[Any, ...]:
    """Round ``r``'s rows of the schedule: constants for an int ``r``, gathers otherwise;
    computed in the graph when ``tables`` is a symbolic (even) size."""
    if is_symbolic(tables):
        return _symbolic_round(tables, r)
    if isinstance(r, int):
        return tuple(t[r] for t in tables)
    return tuple(lax.dynamic_index_in_dim(jnp.asarray(t), r, 0, keepdims=False) for t in tables)


def _symbolic_round(size: Any, r: Any) -> tuple[Any, ...]:
    """Round ``r`` of a round-robin schedule for a symbolic even ``size``, by formula.

    With ``m = size - 1`` (odd), round ``r`` pairs player ``m`` with ``r`` and
    ``r + k`` with ``r - k`` (mod ``m``) for ``k = 1 .. size / 2 - 1``: every pair
    meets once in ``m`` rounds (``x, y`` in round ``(x + y) / 2 mod m``).
    """
    m = jnp.asarray(size - 1, np.int32)
    k = lax.iota(np.int32, size // 2)
    a, b = (r + k) % m, jnp.where(k == 0, m, (r - k) % m)
    p, q = jnp.minimum(a, b), jnp.maximum(a, b)
    x = lax.iota(np.int32, size)
    d = (x - r) % m
    kx = jnp.where(x == m, 0, jnp.where(2 * d < m, d, m - d))
    partner = jnp.where(x == m, r, jnp.where(x == r, m, (2 * r - x) % m))
    inverse = jnp.where(x < partner, kx, kx + size // 2)
    return p, q, inverse


def _rotation(app, aqq, apq):
    """``(c, s)`` of the Jacobi rotation zeroing ``apq`` of ``[[app, apq], [apq, aqq]]``."""
    zero = apq == 0
    theta = (aqq - app) / (2 * jnp.where(zero, 1, apq))
    t = jnp.where(theta >= 0, 1, -1) / (jnp.abs(theta) + jnp.sqrt(1 + theta * theta))
    t = jnp.where(zero, 0, t)
    c = lax.rsqrt(1 + t * t)
    return c, t * c


def _abs2(x):
    """``|x|^2``, real (``x * conj(x)`` for complex ``x``)."""
    return jnp.real(x * jnp.conj(x)) if jnp.iscomplexobj(x) else jnp.square(x)


def _phase(x):
    """``x / |x|`` (1 where ``x = 0``) of complex ``x``; ``None`` for real ``x``."""
    if not jnp.iscomplexobj(x):
        return None
    mag = jnp.abs(x)
    return jnp.where(mag == 0, 1, x / jnp.where(mag == 0, 1, mag).astype(x.dtype))


def _rotate(x, p, q, inverse, c, s, axis, phase=None):
    """Rotate the pairs of rows (``axis=-2``) or columns (``axis=-1``): ``x_p, x_q`` become
    ``c x_p - s x_q, s x_p + c x_q``.

    With a complex ``phase`` (``e^{i phi}`` of the entry ``a_pq`` to zero), the unitary
    rotation ``U = [[c, s e^{i phi}], [-s e^{-i phi}, c]]``: columns become ``x U``
    and rows ``U^H x``, which zeroes ``a_pq`` of a Hermitian ``a`` whose real
    rotation ``(c, s)`` zeroes ``[[a_pp, |a_pq|], [|a_pq|, a_qq]]``.
    """
    if axis == -2:
        c, s = c[..., :, None], s[..., :, None]
        phase = None if phase is None else phase[..., :, None]
    else:
        c, s = c[..., None, :], s[..., None, :]
        phase = None if phase is None else jnp.conj(phase[..., None, :])
    xp, xq = jnp.take(x, p, axis=axis, mode="clip"), jnp.take(x, q, axis=axis, mode="clip")
    if phase is None:
        both = jnp.concatenate([c * xp - s * xq, s * xp + c * xq], axis=axis)
    else:
        c, s = c.astype(x.dtype), s.astype(x.dtype)
        new_p, new_q = c * xp - s * phase * xq, s * jnp.conj(phase) * xp + c * xq
        both = jnp.concatenate([new_p, new_q], axis=axis)
    return jnp.take(both, inverse, axis=axis, mode="clip")


def _pad_even(x, axes):
    """``x`` with a zero row/column appended along ``axes`` when the matrix size is odd."""
    n = x.shape[-1]
    if is_symbolic(n):  # a zero-size block when n is even
        for axis in axes:
            shape = list(x.shape)
            shape[axis] = 2 * ((n + 1) // 2) - n
            x = jnp.concatenate([x, jnp.zeros(shape, x.dtype)], axis=axis)
        return x
    if n % 2 == 0:
        return x
    widths = [(0, 0)] * x.ndim
    for axis in axes:
        widths[axis % x.ndim] = (0, 1)
    return jnp.pad(x, widths)


def _size(n: Any, dtype: Any) -> Any:
    """A dimension as a number of ``dtype`` (computed from the shape when symbolic)."""
    return jnp.asarray(n, np.int32).astype(dtype) if is_symbolic(n) else n


def _tables(size: Any) -> Any:
    """The static schedule's tables, or the symbolic size itself (``_round_indices``)."""
    return size if is_symbolic(size) else _schedule(size)


def _sweeps(converged, sweep, state):
    """Run ``sweep`` until ``converged(state)`` for every matrix (or :data:`MAX_SWEEPS`)."""

    def cond(carry):
        count, state = carry
        return (count < MAX_SWEEPS) & ~jnp.all(converged(state))

    return lax.while_loop(cond, lambda carry: (carry[0] + 1, sweep(carry[1])), (0, state))[1]


def _diagonal(a):
    return jnp.sum(jnp.where(eye_mask(a.shape[-1]), a, 0), axis=-1)


def eigh(a: Any, *, lower: bool) -> tuple[Any, Any]:
    """``(v, w)``: eigenvectors (columns) and ascending eigenvalues of the symmetric
    (Hermitian) matrix held in the ``lower`` (or upper) triangle of ``a``, by cyclic
    Jacobi (complex rotations for a complex ``a``, whose diagonal's real part is used)."""
    n = a.shape[-1]
    if not is_symbolic(n) and n == 0:  # no eigenpairs (and no rounds to schedule)
        return jnp.zeros_like(a), jnp.zeros(a.shape[:-1], jnp.finfo(a.dtype).dtype)
    tri = tril_mask(n, k=-1)
    half = a if lower else jnp.conj(jnp.swapaxes(a, -1, -2))
    sym = jnp.where(tri, half, 0) + jnp.where(tri.T, jnp.conj(jnp.swapaxes(half, -1, -2)), 0)
    diag = jnp.real(a).astype(a.dtype) if jnp.iscomplexobj(a) else a
    sym = sym + jnp.where(eye_mask(n), diag, 0)
    sym = _pad_even(sym, (-2, -1))
    size = sym.shape[-1]
    eye = eye_mask(size)
    v = jnp.broadcast_to(eye.astype(a.dtype), sym.shape)
    tables = _tables(size)
    eps = jnp.finfo(a.dtype).eps
    tol = (_size(size, eps.dtype) * eps) ** 2 * jnp.sum(_abs2(sym), axis=(-2, -1))

    def round_(r, state):
        a, v = state
        p, q, inverse = _round_indices(tables, r)
        rows_p, rows_q = jnp.take(a, p, axis=-2, mode="clip"), jnp.take(a, q, axis=-2, mode="clip")
        at = lambda rows, idx: jnp.sum(jnp.where(idx[:, None] == iota(size, r), rows, 0), -1)  # noqa: E731
        apq = at(rows_p, q)
        phase = _phase(apq)
        if phase is None:
            c, s = _rotation(at(rows_p, p), at(rows_q, q), apq)
        else:
            c, s = _rotation(jnp.real(at(rows_p, p)), jnp.real(at(rows_q, q)), jnp.abs(apq))
        a = _rotate(a, p, q, inverse, c, s, -2, phase)
        a = _rotate(a, p, q, inverse, c, s, -1, phase)
        return a, _rotate(v, p, q, inverse, c, s, -1, phase)

    def converged(state):
        return jnp.sum(_abs2(jnp.where(eye, 0, state[0])), axis=(-2, -1)) <= tol

    sym, v = _sweeps(converged, lambda state: repeat(size - 1, round_, state), (sym, v))
    w = jnp.real(_diagonal(sym)[..., :n])
    order = jnp.argsort(w, axis=-1, stable=True)
    w = jnp.take_along_axis(w, order, axis=-1, mode="clip")
    v = jnp.take_along_axis(v[..., :n, :n], order[..., None, :], axis=-1, mode="clip")
    return v, w


def _one_sided_jacobi(x, *, vectors):
    """``(sigma, u, v)`` of a tall-or-square ``x`` by one-sided Jacobi (unsorted; ``u``,
    ``v`` only when ``vectors``). Columns of zero norm give zero columns of ``u``."""
    n = x.shape[-1]
    w = _pad_even(x, (-1,))
    size = w.shape[-1]
    eye = eye_mask(size)
    v = jnp.broadcast_to(eye.astype(x.dtype), (*x.shape[:-2], size, size))
    tables = _tables(size)
    eps = jnp.finfo(x.dtype).eps
    tol = (_size(size, eps.dtype) * eps) ** 2

    def round_(r, state):
        w, v = state
        p, q, inverse = _round_indices(tables, r)
        cols_p, cols_q = jnp.take(w, p, axis=-1, mode="clip"), jnp.take(w, q, axis=-1, mode="clip")
        alpha = jnp.sum(_abs2(cols_p), axis=-2)
        beta = jnp.sum(_abs2(cols_q), axis=-2)
        gamma = jnp.sum(jnp.conj(cols_p) * cols_q, axis=-2)
        phase = _phase(gamma)
        c, s = _rotation(alpha, beta, gamma if phase is None else jnp.abs(gamma))
        w = _rotate(w, p, q, inverse, c, s, -1, phase)
        return w, _rotate(v, p, q, inverse, c, s, -1, phase) if vectors else v

    def converged(state):
        gram = jnp.einsum("...ki,...kj->...ij", jnp.conj(state[0]), state[0])
        d = jnp.real(_diagonal(gram))
        off = jnp.where(eye, 0, _abs2(gram)) > tol * d[..., :, None] * d[..., None, :]
        return ~jnp.any(off, axis=(-2, -1))

    w, v = _sweeps(converged, lambda state: repeat(size - 1, round_, state), (w, v))
    sigma = jnp.sqrt(jnp.sum(_abs2(w), axis=-2))[..., :n]
    if not vectors:
        return sigma, None, None
    u = w[..., :n] / jnp.where(sigma == 0, 1, sigma)[..., None, :].astype(w.dtype)
    return sigma, u, v[..., :n, :n]


def svd(a: Any, *, full_matrices: bool, compute_uv: bool) -> tuple[Any, ...]:
    """``(s,)`` or ``(s, u, vt)`` with descending ``s``, as ``lax.linalg.svd``.

    A wide matrix is handled as its conjugate transpose, a tall or square one by
    :func:`_tall_svd`. Symbolic dimensions of which neither is known to be the
    larger take :func:`_svd_either`.
    """
    m, n = a.shape[-2:]
    if any(not is_symbolic(d) and d == 0 for d in (m, n)):
        return _no_singular_values(a, full_matrices=full_matrices, compute_uv=compute_uv)
    try:
        wide = m < n
    except jax.errors.InconclusiveDimensionOperation:
        return _svd_either(a, full_matrices=full_matrices, compute_uv=compute_uv)
    x = jnp.conj(jnp.swapaxes(a, -1, -2)) if wide else a
    rows, cols = x.shape[-2:]
    found = _tall_svd(x, full_matrices, compute_uv, reduce=rows > cols)
    if not compute_uv:
        return found
    sigma, u, v = found
    if wide:
        u, v = v, u
    return sigma, u, jnp.conj(jnp.swapaxes(v, -1, -2))


def _no_singular_values(a: Any, *, full_matrices: bool, compute_uv: bool) -> tuple[Any, ...]:
    """:func:`svd` of ``m x 0`` or ``0 x n`` matrices, as JAX's: no singular values; the
    reduced factors are empty, the full ones ``u = I_m`` and ``vt = I_n``."""
    m, n = a.shape[-2:]
    batch = a.shape[:-2]
    sigma = jnp.zeros((*batch, 0), jnp.finfo(a.dtype).dtype)
    if not compute_uv:
        return (sigma,)
    rows, cols = (m, n) if full_matrices else (0, 0)
    u = jnp.broadcast_to(jnp.eye(m, rows, dtype=a.dtype), (*batch, m, rows))
    return sigma, u, jnp.broadcast_to(jnp.eye(cols, n, dtype=a.dtype), (*batch, cols, n))


def _tall_svd(x: Any, full_matrices: bool, compute_uv: bool, *, reduce: bool) -> tuple[Any, ...]:
    """``(s,)`` or ``(s, u, v)`` of a tall or square ``x``, ``s`` descending.

    With ``reduce`` ``x`` is first reduced to its ``R`` by Householder QR, and
    ``u`` is ``Q`` times the Jacobi vectors of ``R`` (the rest of ``Q``
    completes ``u`` when ``full_matrices``); otherwise ``x`` is square.
    """
    rows, cols = x.shape[-2:]
    packed = taus = None
    if reduce:
        packed, taus = geqrf(x)
        x = jnp.where(~tril_mask(cols, k=-1), packed[..., :cols, :], 0)
    sigma, u, v = _one_sided_jacobi(x, vectors=compute_uv)
    order = jnp.argsort(-sigma, axis=-1, stable=True)
    sigma = jnp.take_along_axis(sigma, order, axis=-1, mode="clip")
    if not compute_uv:
        return (sigma,)
    u = jnp.take_along_axis(u, order[..., None, :], axis=-1, mode="clip")
    v = jnp.take_along_axis(v, order[..., None, :], axis=-1, mode="clip")
    if reduce:
        q = householder_product(packed, taus, rows if full_matrices else cols)
        u = jnp.concatenate([q[..., :cols] @ u, q[..., cols:]], axis=-1)
    return sigma, u, v


def _fit(x: Any, rows: Any, cols: Any) -> Any:
    """``x``'s last two axes cut or zero-padded at their ends to ``rows x cols``."""
    r, c = x.shape[-2:]
    config = [(0, 0, 0)] * (x.ndim - 2) + [(0, rows - r, 0), (0, cols - c, 0)]
    return lax.pad(x, jnp.zeros((), x.dtype), config)


def _svd_either(a: Any, *, full_matrices: bool, compute_uv: bool) -> tuple[Any, ...]:
    """:func:`svd` of an ``m x n`` matrix whose orientation is known at run time only.

    The tall one of ``a`` and ``a^H`` (chosen by a select on ``m < n``) is cut or
    padded to ``max(m, n) x min(m, n)`` -- an exact fit for the chosen one --
    and goes :func:`_tall_svd` with its QR. The factors are fitted back to
    JAX's shapes the same way and swapped by the same select, so both
    orientations are one graph.
    """
    m, n = a.shape[-2:]
    big, small = dim_max(m, n), dim_min(m, n)
    wide = jnp.asarray(m, np.int32) < jnp.asarray(n, np.int32)
    at = jnp.conj(jnp.swapaxes(a, -1, -2))
    x = jnp.where(wide, _fit(at, big, small), _fit(a, big, small))
    found = _tall_svd(x, full_matrices, compute_uv, reduce=True)
    if not compute_uv:
        return found
    sigma, u, v = found  # u: big x (big or small), v: small x small
    left, right = (m, n) if full_matrices else (small, small)
    u_a = jnp.where(wide, _fit(v, m, left), _fit(u, m, left))
    v_a = jnp.where(wide, _fit(u, n, right), _fit(v, n, right))
    return sigma, u_a, jnp.conj(jnp.swapaxes(v_a, -1, -2))
