"""Hessenberg and tridiagonal reductions, the complex Schur form and eigenvectors, in JAX.

The lowerings of ``linalg_eig_general`` trace these functions with
``ctx.decompose``; on complex arrays the traced equations are complex ones,
lowered by the rules for complex values. See ``_linalg`` for the unrolling and
masking conventions (Python-int steps up to 16, one loop beyond).

* :func:`gehrd` and :func:`sytrd` are LAPACK's gehd2 and sytd2/hetd2 step for
  step: reflectors ``H = I - tau v v^H`` from larfg (``beta = -sign(Re alpha)
  ||(alpha, x)||``, ``tau = (beta - alpha) / beta``; ``tau = 0`` only when
  ``x = 0`` and ``alpha`` is real), applied as ``H^H A H``, stored in LAPACK's
  packed form. Their outputs equal LAPACK's to rounding.
* :func:`schur` is the complex Schur form by single-shift implicit QR on the
  Hessenberg form (see its docstring for the shifts, the deflation criterion
  and the iteration cap); :func:`eig` adds eigenvectors by substitution on the
  triangular factor.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import is_symbolic
from jax2onnx_lax._linalg import dim_max, eye_mask, index, iota, repeat, tril_mask
from jax2onnx_lax._linalg_orth import larfg as _larfg

# LAPACK's cap (zlahqr): 30 iterations per eigenvalue of the active block, at least 10 rows.
ITERATIONS_PER_EIGENVALUE = 30
EXCEPTIONAL_EVERY = 10  # an exceptional shift after this many iterations without deflation


def _real_dtype(dtype: Any) -> Any:
    return jnp.finfo(dtype).dtype


def _outer(u, w):
    return u[..., :, None] * w[..., None, :]


def _set_column(a, j, col):
    return jnp.where((iota(a.shape[-1], j) == j)[None, :], col[..., :, None], a)


def gehrd(a: Any) -> tuple[Any, Any]:
    """Householder reduction to upper Hessenberg form, LAPACK's gehd2: ``(packed, taus)``.

    Step ``j`` takes the reflector of ``a[j+1:, j]`` (``v[j+1] = 1``), applies it
    from the right to all rows and from the left (``H^H``) to columns ``> j``,
    and stores ``beta`` at ``(j+1, j)`` and ``v`` below it. ``taus`` has ``n - 1``
    entries; the last reflector is trivial for real matrices and makes the last
    subdiagonal entry real for complex ones, as in LAPACK.
    """
    n = a.shape[-1]
    taus = jnp.zeros((*a.shape[:-2], max(n - 1, 0)), a.dtype)

    def body(j, carry):
        a, taus = carry
        rows = iota(n, j)
        col = index(a, j, -1)
        beta, tau, below = _larfg(index(col, j + 1, -1), col, rows > j + 1)
        v = jnp.where(rows == j + 1, jnp.ones((), a.dtype), below)
        a = a - _outer(jnp.einsum("...ij,...j->...i", a, v) * tau[..., None], jnp.conj(v))
        w = jnp.einsum("...i,...ij->...j", jnp.conj(v), a) * jnp.conj(tau)[..., None]
        a = a - _outer(v, jnp.where(rows > j, w, 0))
        col = jnp.where(rows <= j, col, jnp.where(rows == j + 1, beta[..., None], below))
        a = _set_column(a, j, col.astype(a.dtype))
        return a, jnp.where(iota(n - 1, j) == j, tau[..., None], taus)

    return repeat(n - 1, body, (a, taus))


def _hermitian(a, lower):
    """The Hermitian matrix held in the ``lower`` (upper) triangle, the diagonal's real part."""
    n = a.shape[-1]
    half = a if lower else jnp.swapaxes(a, -1, -2)
    tri = tril_mask(n, k=-1)
    diag = jnp.real(a).astype(a.dtype)
    full = jnp.where(tri, half, jnp.conj(jnp.swapaxes(half, -1, -2)))
    full = jnp.where(tri.T, jnp.conj(jnp.swapaxes(half, -1, -2)), full)
    return jnp.where(eye_mask(n), diag, full)


def _sytd2_lower(s):
    """LAPACK's sytd2/hetd2 with ``uplo = 'L'`` on the full Hermitian ``s``:
    ``(vectors below the subdiagonal, d, e, taus)``."""
    n = s.shape[-1]
    batch = s.shape[:-2]
    rdt = _real_dtype(s.dtype)
    vs = jnp.zeros_like(s)
    e = jnp.zeros((*batch, max(n - 1, 0)), rdt)
    taus = jnp.zeros((*batch, max(n - 1, 0)), s.dtype)

    def body(j, carry):
        s, vs, e, taus = carry
        rows = iota(n, j)
        col = index(s, j, -1)
        beta, tau, below = _larfg(index(col, j + 1, -1), col, rows > j + 1)
        v = jnp.where(rows == j + 1, jnp.ones((), s.dtype), below)
        x = jnp.einsum("...ij,...j->...i", s, v) * tau[..., None]
        x = jnp.where(rows > j, x, 0)
        alpha = -0.5 * tau * jnp.sum(jnp.conj(x) * v, axis=-1)
        w = x + alpha[..., None] * v
        s = s - _outer(v, jnp.conj(w)) - _outer(w, jnp.conj(v))
        if jnp.issubdtype(s.dtype, jnp.complexfloating):  # her2 keeps the diagonal real
            s = jnp.where(eye_mask(n), jnp.real(s).astype(s.dtype), s)
        new_col = jnp.where(rows == j + 1, beta[..., None], jnp.where(rows == j, col, 0))
        s = _set_column(s, j, new_col.astype(s.dtype))
        s = jnp.swapaxes(_set_column(jnp.swapaxes(s, -1, -2), j, jnp.conj(new_col)), -1, -2)
        vs = _set_column(vs, j, below)
        e = jnp.where(iota(n - 1, j) == j, beta[..., None].astype(rdt), e)
        return s, vs, e, jnp.where(iota(n - 1, j) == j, tau[..., None], taus)

    s, vs, e, taus = repeat(n - 1, body, (s, vs, e, taus))
    d = jnp.real(jnp.sum(jnp.where(eye_mask(n), s, 0), axis=-1)).astype(rdt)
    return vs, d, e, taus


def sytrd(a: Any, *, lower: bool) -> tuple[Any, Any, Any, Any]:
    """Reduction of a symmetric (Hermitian) matrix to tridiagonal form, LAPACK's
    sytd2/hetd2: ``(packed, d, e, taus)`` with ``d``, ``e`` real.

    The upper form (``lower=False``) is the lower one of the reversed matrix
    ``P A P`` (its upper triangle becomes the lower one, and the reflectors run in
    the same order), with every output reversed back. The packed matrix keeps the
    other triangle of the input, ``d``/``e`` on the diagonal/off-diagonal and the
    reflector vectors beyond it.
    """
    n = a.shape[-1]
    flip = (lambda m: jnp.flip(m, (-2, -1))) if not lower else (lambda m: m)
    b = flip(a)
    vs, d, e, taus = _sytd2_lower(_hermitian(b, True))
    rows, cols = iota(n)[:, None], iota(n)[None, :]
    packed = jnp.where(rows == cols, _band(d, n, 0, a.dtype), vs)
    packed = jnp.where(rows == cols + 1, _band(e, n, -1, a.dtype), packed)
    packed = jnp.where(rows < cols, b, packed)
    if not lower:
        return flip(packed), jnp.flip(d, -1), jnp.flip(e, -1), jnp.flip(taus, -1)
    return packed, d, e, taus


def _band(values, n, k, dtype):
    """The ``n x n`` matrix with ``values`` on its diagonal (``k = 0``) or subdiagonal (``-1``)."""
    if k:
        values = jnp.concatenate([jnp.zeros((*values.shape[:-1], 1), values.dtype), values], -1)
    return (values[..., :, None] * eye_mask(n, k)).astype(dtype)


def unghr(packed: Any, taus: Any) -> Any:
    """The unitary ``Q = H_0 ... H_{n-2}`` of :func:`gehrd`'s packed reflectors (``v[j+1] = 1``),
    accumulated backwards from the identity (LAPACK's orghr/unghr)."""
    n = packed.shape[-1]
    q = jnp.broadcast_to(jnp.eye(n, dtype=packed.dtype), packed.shape)

    def body(j, q):
        rows = iota(n, j)
        v = jnp.where(rows > j + 1, index(packed, j, -1), 0)
        v = jnp.where(rows == j + 1, jnp.ones((), packed.dtype), v)
        w = jnp.einsum("...i,...ij->...j", jnp.conj(v), q) * index(taus, j, -1)[..., None]
        return q - _outer(v, w)

    return repeat(n - 1, body, q, reverse=True)


def _entry(h, r, c):
    """``h[..., r, c]`` for per-batch indices ``r``, ``c`` (one-hot masks and a sum)."""
    n = h.shape[-1]
    mask = (iota(n)[:, None] == r[..., None, None]) & (iota(n) == c[..., None, None])
    return jnp.sum(jnp.where(mask, h, 0), axis=(-2, -1))


def _givens(x, y):
    """``(c, s)``, ``c`` real, with ``[[c, s], [-conj(s), c]] (x; y) = (r; 0)``."""
    ax, ay = jnp.abs(x), jnp.abs(y)
    big = jnp.maximum(ax, ay)
    safe = jnp.where(big == 0, 1, big)
    norm = safe * jnp.sqrt(jnp.square(ax / safe) + jnp.square(ay / safe))
    phase = jnp.where(ax == 0, 1, x / jnp.where(ax == 0, 1, ax).astype(x.dtype))
    c = jnp.where(big == 0, 1, ax / norm)
    s = jnp.where(big == 0, 0, phase * jnp.conj(y) / norm.astype(x.dtype))
    return c.astype(x.dtype), s


def _rotate_rows(h, k, c, s):
    """Rows ``k``, ``k + 1`` of ``h`` multiplied by ``[[c, s], [-conj(s), c]]``."""
    n = h.shape[-2]
    rk, rk1 = index(h, k, -2), index(h, k + 1, -2)
    c, s = c[..., None], s[..., None]
    new_k, new_k1 = c * rk + s * rk1, c * rk1 - jnp.conj(s) * rk
    rows = iota(n, k)[:, None]
    h = jnp.where(rows == k, new_k[..., None, :], h)
    return jnp.where(rows == k + 1, new_k1[..., None, :], h)


def _rotate_columns(h, k, c, s):
    """Columns ``k``, ``k + 1`` of ``h`` multiplied by ``[[c, s], [-conj(s), c]]^H``."""
    return jnp.conj(jnp.swapaxes(_rotate_rows(jnp.conj(jnp.swapaxes(h, -1, -2)), k, c, s), -1, -2))


def _wilkinson(a, b, c, d):
    """The eigenvalue of ``[[a, b], [c, d]]`` closer to ``d`` (``d`` if undefined)."""
    p = (a - d) / 2
    bc = b * c
    root = jnp.sqrt(p * p + bc)
    plus, minus = p + root, p - root
    den = jnp.where(jnp.abs(plus) >= jnp.abs(minus), plus, minus)
    return d - bc / jnp.where(den == 0, 1, den) * (den != 0)


def _subdiagonal(h):
    n = h.shape[-1]
    return jnp.sum(jnp.where(eye_mask(n, -1), h, 0), axis=-1)[..., 1:]


def _diagonal(h):
    return jnp.sum(jnp.where(eye_mask(h.shape[-1]), h, 0), axis=-1)


def _qr_sweep(h, z, lo, hi, mu):
    """One implicit single-shift QR step on rows/columns ``lo .. hi`` of each matrix:
    the first rotation from ``(h_lo,lo - mu, h_lo+1,lo)``, then the bulge chased down.
    Rotations act on whole rows and columns (the Schur form of the whole matrix)."""
    n = h.shape[-1]

    def body(k, carry):
        h, z = carry
        col = index(h, k, -1) - mu[..., None] * (iota(n, k) == k)
        first = k == lo
        x = jnp.where(first, index(col, k, -1), index(index(h, k - 1, -1), k, -1))
        y = jnp.where(first, index(col, k + 1, -1), index(index(h, k - 1, -1), k + 1, -1))
        if isinstance(k, int) and k == 0:
            x, y = index(col, 0, -1), index(col, 1, -1)
        active = (k >= lo) & (k < hi)
        c, s = _givens(x, y)
        c, s = jnp.where(active, c, 1), jnp.where(active, s, 0)
        h = _rotate_columns(_rotate_rows(h, k, c, s), k, c, s)
        return h, _rotate_columns(z, k, c, s)

    return repeat(n - 1, body, (h, z))


def schur(a: Any, *, vectors: bool = True) -> tuple[Any, Any]:
    """Complex Schur form ``a = z t z^H`` (``t`` upper triangular, ``z`` unitary).

    Householder reduction to Hessenberg form (:func:`gehrd`, ``z`` from
    :func:`unghr`), then implicit single-shift QR steps in one ``while_loop``:

    * deflation: a subdiagonal entry with ``|h_k+1,k| <= eps (|h_kk| + |h_k+1,k+1|)``
      (or below the smallest normal number) is set to zero; the active block is
      the last unreduced one, rows ``lo .. hi``;
    * shift: Wilkinson's, the eigenvalue of the active block's trailing 2x2 closer
      to its last diagonal entry; after every :data:`EXCEPTIONAL_EVERY` iterations
      without deflation an exceptional shift ``h_hi,hi + 0.75 |h_hi,hi-1|`` breaks
      cycles;
    * cap: :data:`ITERATIONS_PER_EIGENVALUE` times ``max(n, 10)`` steps in all (as
      LAPACK's zlahqr); a matrix not reduced by then keeps its last iterate.
    """
    n = a.shape[-1]
    batch = a.shape[:-2]
    packed, taus = gehrd(a)
    h = jnp.where(tril_mask(n, k=-2), 0, packed)
    z = unghr(packed, taus) if vectors else jnp.zeros_like(a)
    if not is_symbolic(n) and n < 2:  # a symbolic n = 1 runs no iteration (hi = 0)
        return h, z
    eps = jnp.finfo(a.dtype).eps
    tiny = jnp.finfo(a.dtype).tiny
    ks = iota(n - 1)
    sub_mask = eye_mask(n, -1)
    cap = ITERATIONS_PER_EIGENVALUE * dim_max(n, 10)

    def deflate(h):
        d = jnp.abs(_diagonal(h))
        sub = _subdiagonal(h)
        small = jnp.abs(sub) <= jnp.maximum(eps * (d[..., :-1] + d[..., 1:]), tiny)
        small_full = jnp.concatenate([jnp.zeros((*batch, 1), bool), small], axis=-1)
        h = jnp.where(sub_mask & small_full[..., :, None], 0, h)
        hi = jnp.max(jnp.where(small, 0, ks + 1), axis=-1, initial=0)
        lo = jnp.max(jnp.where(small & (ks + 1 < hi[..., None]), ks + 1, 0), axis=-1, initial=0)
        return h, lo.astype(np.int32), hi.astype(np.int32)

    def cond(carry):
        count, h, _, _, _ = carry
        return (count < cap) & (jnp.max(deflate(h)[2], initial=0) > 0)  # 0 for no matrices

    def body(carry):
        count, h, z, stall, last_hi = carry
        h, lo, hi = deflate(h)
        stall = jnp.where(hi == last_hi, stall + 1, 0)
        a_, b_ = _entry(h, hi - 1, hi - 1), _entry(h, hi - 1, hi)
        c_, d_ = _entry(h, hi, hi - 1), _entry(h, hi, hi)
        mu = _wilkinson(a_, b_, c_, d_)
        exceptional = (stall % EXCEPTIONAL_EVERY) == EXCEPTIONAL_EVERY - 1
        mu = jnp.where(exceptional, d_ + 0.75 * jnp.abs(c_), mu)
        h, z = _qr_sweep(h, z, lo, hi, mu)
        return count + 1, h, z, stall, hi

    start = (0, h, z, jnp.zeros(batch, np.int32), jnp.full(batch, -1, np.int32))
    _, h, z, _, _ = lax.while_loop(cond, body, start)
    h = deflate(h)[0]
    return jnp.where(tril_mask(n, k=-1), 0, h), z


def _denominator(den, w, eps, tiny):
    """``den`` moved away from zero to ``max(eps |w|, tiny)`` (as LAPACK's trevc)."""
    smin = jnp.maximum(eps * jnp.abs(w), tiny)
    return jnp.where(jnp.abs(den) < smin, smin.astype(den.dtype), den)


def _right_vectors(t):
    """Columns ``x_k`` with ``t x_k = t_kk x_k``, ``x_k[k] = 1``, zero below: back substitution."""
    n = t.shape[-1]
    w = _diagonal(t)
    eps, tiny = jnp.finfo(t.dtype).eps, jnp.finfo(t.dtype).tiny
    x = jnp.broadcast_to(jnp.eye(n, dtype=t.dtype), t.shape)

    def body(j, x):
        cols = iota(n, j)
        row = jnp.where(cols > j, index(t, j, -2), 0)
        den = _denominator(index(w, j, -1)[..., None] - w, w, eps, tiny)
        xj = -jnp.einsum("...i,...ik->...k", row, x) / den
        xj = jnp.where(cols > j, xj, jnp.where(cols == j, 1, 0).astype(t.dtype))
        return jnp.where((cols == j)[:, None], xj[..., None, :], x)

    return repeat(n - 1, body, x, reverse=True)


def _left_vectors(t):
    """Columns ``y_k`` with ``y_k^H t = t_kk y_k^H``, ``y_k[k] = 1``, zero above: forward
    substitution on ``conj(y)``."""
    n = t.shape[-1]
    w = _diagonal(t)
    eps, tiny = jnp.finfo(t.dtype).eps, jnp.finfo(t.dtype).tiny
    y = jnp.broadcast_to(jnp.eye(n, dtype=t.dtype), t.shape)

    def body(j, y):
        rows = iota(n, j)
        col = jnp.where(rows < j, index(t, j, -1), 0)
        den = _denominator(index(w, j, -1)[..., None] - w, w, eps, tiny)
        yj = -jnp.einsum("...i,...ik->...k", col, y) / den
        yj = jnp.where(rows < j, yj, jnp.where(rows == j, 1, 0).astype(t.dtype))
        return jnp.where((rows == j)[:, None], yj[..., None, :], y)

    return jnp.conj(repeat(n, body, y))


def normalize(v: Any) -> Any:
    """Columns scaled to unit 2-norm with their largest-magnitude entry (the first on
    ties) real and positive: LAPACK geev's normalisation."""
    n = v.shape[-2]
    if not is_symbolic(n) and n == 0:  # no entries, nothing to scale
        return v
    mag = jnp.real(v * jnp.conj(v))
    v = v / jnp.sqrt(jnp.sum(mag, axis=-2, keepdims=True)).astype(v.dtype)
    top = jnp.argmax(mag, axis=-2)
    pivot = jnp.sum(jnp.where(iota(n)[:, None] == top[..., None, :], v, 0), axis=-2)
    phase = jnp.conj(pivot) / jnp.abs(pivot).astype(v.dtype)
    return v * phase[..., None, :]


def eig(a: Any, *, left: bool, right: bool) -> tuple[Any, ...]:
    """``w`` and, as asked, ``vl`` and ``vr`` (LAPACK's geev outputs) of a complex matrix.

    ``w`` is the diagonal of the Schur form ``a = z t z^H`` (:func:`schur`), in
    the order the QR iteration leaves it (not LAPACK's); ``vr = z x`` and
    ``vl = z y`` with ``x``, ``y`` the eigenvectors of ``t``, each normalised by
    :func:`normalize`.
    """
    t, z = schur(a, vectors=left or right)
    outs = [_diagonal(t)]
    if left:
        outs.append(normalize(z @ _left_vectors(t)))
    if right:
        outs.append(normalize(z @ _right_vectors(t)))
    return tuple(outs)
