"""The real Schur form of a real matrix, in JAX: Francis double-shift QR.

``a = z t z^T`` with ``z`` orthogonal and ``t`` quasi-upper-triangular: 1x1
diagonal blocks for real eigenvalues, 2x2 blocks for complex-conjugate pairs in
the standard form ``[[p, b], [c, p]]`` with ``b c < 0`` (eigenvalues
``p +- i sqrt(-b c)``). Plain real arithmetic, so the lowering traces it with
``ctx.decompose`` through the real lowerings; the masking conventions are those
of ``_linalg`` (Python-int steps up to 16, one loop beyond).

1. Householder reduction to Hessenberg form (``_linalg_schur.gehrd``, ``z``
   from ``unghr``).
2. Implicit double-shift (Francis) QR steps in one ``while_loop``, each a
   chase of 3-element Householder reflectors down the active block (see
   :func:`schur` for the shifts, the deflation criterion and the cap).
3. Every remaining isolated 2x2 block is brought to the standard form by one
   rotation (:func:`_standard_2x2`), which splits a block with real
   eigenvalues into two 1x1 blocks.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import is_symbolic
from jax2onnx_lax._linalg import dim_max, eye_mask, index, iota, repeat, tril_mask
from jax2onnx_lax._linalg_orth import larfg
from jax2onnx_lax._linalg_schur import (
    EXCEPTIONAL_EVERY,
    ITERATIONS_PER_EIGENVALUE,
    _diagonal,
    _entry,
    _outer,
    _rotate_columns,
    _rotate_rows,
    _subdiagonal,
    gehrd,
    unghr,
)

# The exceptional shifts are the eigenvalues of [[w + 0.75 s, -0.4375 s], [s, w + 0.75 s]]
# (EISPACK's hqr constants), s the size of the last two subdiagonal entries of the block.
_EXCEPTIONAL_SHIFT = 0.75
_EXCEPTIONAL_SKEW = -0.4375


def _sign(x):
    """``+1`` for ``x >= 0``, else ``-1`` (no zero, unlike ``jnp.sign``)."""
    return jnp.where(x >= 0, 1, -1).astype(x.dtype)


def _deflate(h):
    """Negligible subdiagonal entries set to zero: ``(h, small)``, ``small[k]`` for
    ``h[k+1, k]``. Negligible: ``|h_k+1,k| <= eps (|h_kk| + |h_k+1,k+1|)`` or below the
    smallest normal number."""
    n = h.shape[-1]
    eps, tiny = jnp.finfo(h.dtype).eps, jnp.finfo(h.dtype).tiny
    d = jnp.abs(_diagonal(h))
    small = jnp.abs(_subdiagonal(h)) <= jnp.maximum(eps * (d[..., :-1] + d[..., 1:]), tiny)
    small_full = jnp.concatenate([jnp.zeros((*h.shape[:-2], 1), bool), small], axis=-1)
    return jnp.where(eye_mask(n, -1) & small_full[..., :, None], 0, h), small


def _active_block(small):
    """Rows ``lo .. hi`` of the last unreduced block of three or more rows, and whether
    there is one (``busy``); blocks of one or two rows are done."""
    ks = iota(small.shape[-1]) + 1
    if is_symbolic(small.shape[-1]):  # no n - 2 axis, which would be -1 for n = 1
        pad = jnp.ones((*small.shape[:-1], 1), bool)
        following = jnp.concatenate([small, pad], axis=-1)[..., 1:]
        triple = ~small & ~following  # rows r, r+1, r+2 in one block
    else:
        triple = ~small[..., :-1] & ~small[..., 1:]
    hi = jnp.max(jnp.where(triple, ks[: triple.shape[-1]] + 1, 0), axis=-1, initial=0)
    lo = jnp.max(jnp.where(small & (ks <= hi[..., None]), ks, 0), axis=-1, initial=0)
    return lo.astype(np.int32), hi.astype(np.int32), jnp.any(triple, axis=-1)


def _reflect(h, z, v, tau, vectors):
    """``P h P`` and ``z P`` for the reflector ``P = I - tau v v^T``."""
    t = tau[..., None]
    h = h - _outer(v * t, jnp.einsum("...i,...ij->...j", v, h))
    h = h - _outer(jnp.einsum("...ij,...j->...i", h, v) * t, v)
    if vectors:
        z = z - _outer(jnp.einsum("...ij,...j->...i", z, v) * t, v)
    return h, z


def _sweep(h, z, lo, hi, busy, shift_block, vectors):
    """One implicit double-shift QR step on rows/columns ``lo .. hi`` (where ``busy``).

    The shifts are the two eigenvalues of ``shift_block = (a, b, c, d)``; they enter
    only through their sum and product, so a complex pair stays real. The first
    reflector maps the first column of ``(H - s1)(H - s2)`` (three entries, scaled by
    the largest entry involved) to a multiple of ``e_lo``; the bulge it makes is
    chased down by reflectors of ``h[k:k+3, k-1]``, the last one of two entries.
    """
    n = h.shape[-1]
    entries = [_entry(h, lo + r, lo + c) for r, c in ((0, 0), (1, 0), (0, 1), (1, 1), (2, 1))]
    scale = jnp.max(jnp.abs(jnp.stack([*entries, *shift_block], axis=-1)), axis=-1)
    scale = jnp.where(scale == 0, 1, scale)
    h00, h10, h01, h11, h21 = (e / scale for e in entries)
    a, b, c, d = (e / scale for e in shift_block)
    total, product = a + d, a * d - b * c
    first = [h00 * (h00 - total) + h01 * h10 + product, h10 * (h00 + h11 - total), h10 * h21]
    rows_c = iota(n)
    start = sum(f[..., None] * (rows_c == lo[..., None] + r) for r, f in enumerate(first))

    def body(k, carry):
        h, z = carry
        rows = iota(n, k)
        previous = index(h, max(k - 1, 0) if isinstance(k, int) else jnp.maximum(k - 1, 0), -1)
        col = jnp.where((k == lo)[..., None], start, previous)
        below = (rows > k) & (rows <= jnp.minimum(k + 2, hi)[..., None])
        _, tau, v_below = larfg(index(col, k, -1), col, below)
        tau = jnp.where(busy & (k >= lo) & (k < hi), tau, 0)
        v = jnp.where(rows == k, jnp.ones((), h.dtype), v_below)
        return _reflect(h, z, v, tau, vectors)

    h, z = repeat(n - 1, body, (h, z))
    return jnp.where(tril_mask(n, k=-2), 0, h), z


def _iterate(h, z, vectors):
    """Double-shift QR steps until every unreduced block has at most two rows."""
    n = h.shape[-1]
    batch = h.shape[:-2]
    cap = ITERATIONS_PER_EIGENVALUE * dim_max(n, 10)

    def cond(carry):
        count, h = carry[0], carry[1]
        return (count < cap) & jnp.any(_active_block(_deflate(h)[1])[2])

    def body(carry):
        count, h, z, stall, last_hi = carry
        h, small = _deflate(h)
        lo, hi, busy = _active_block(small)
        stall = jnp.where(hi == last_hi, stall + 1, 0)
        block = [_entry(h, hi - 1 + r, hi - 1 + c) for r, c in ((0, 0), (0, 1), (1, 0), (1, 1))]
        size = jnp.abs(block[2]) + jnp.abs(_entry(h, hi - 1, hi - 2))
        diag = block[3] + _EXCEPTIONAL_SHIFT * size
        odd = [diag, _EXCEPTIONAL_SKEW * size, size, diag]
        exceptional = (stall % EXCEPTIONAL_EVERY) == EXCEPTIONAL_EVERY - 1
        block = [jnp.where(exceptional, o, s) for o, s in zip(odd, block, strict=True)]
        h, z = _sweep(h, z, lo, hi, busy, block, vectors)
        return count + 1, h, z, stall, hi

    start = (0, h, z, jnp.zeros(batch, np.int32), jnp.full(batch, -1, np.int32))
    return lax.while_loop(cond, body, start)[1:3]


def _standard_2x2(a, b, c, d):
    """``(cs, sn, (a', b', c', d'))``: the rotation ``Q = [[cs, -sn], [sn, cs]]`` and
    ``Q^T [[a, b], [c, d]] Q``, upper triangular if the eigenvalues are real, else with
    ``a' = d'`` and ``b' c' < 0``.

    With ``p = (a - d) / 2`` the eigenvalues are ``(a + d) / 2 +- sqrt(p^2 + b c)``.
    Real ones: ``Q``'s first column is the eigenvector ``(z, c)`` of ``d + z``,
    ``z = p + sign(p) sqrt(p^2 + b c)`` (no cancellation); the other eigenvalue is
    ``d - b c / z`` and ``b' = b - c`` (a rotation keeps ``b - c``). Complex ones: the
    angle ``theta`` with ``(a - d) cos 2 theta + (b + c) sin 2 theta = 0`` equalises the
    diagonal; then ``b' c' = p^2 + b c < 0`` by the invariance of the determinant.
    """
    p = (a - d) / 2
    scale = jnp.maximum(jnp.maximum(jnp.abs(p), jnp.abs(b)), jnp.abs(c))
    scale = jnp.where(scale == 0, 1, scale)
    disc = (p / scale) * p + (b / scale) * c  # (p^2 + b c) / scale, its sign decides
    real = disc >= 0
    zr = p + _sign(p) * jnp.sqrt(scale) * jnp.sqrt(jnp.where(real, disc, 0))
    norm = jnp.hypot(zr, c)
    cs_r = jnp.where(norm == 0, 1, zr / jnp.where(norm == 0, 1, norm))
    sn_r = jnp.where(norm == 0, 0, c / jnp.where(norm == 0, 1, norm))
    other = d - jnp.where(zr == 0, 0, b * c / jnp.where(zr == 0, 1, zr))
    zero = jnp.zeros_like(a)
    real_block = (d + zr, b - c, zero, other)

    sigma = b + c
    tau = jnp.hypot(sigma, 2 * p)
    safe = jnp.where(tau == 0, 1, tau)
    cos2 = jnp.where(tau == 0, 1, jnp.abs(sigma) / safe)
    sin2 = jnp.where(tau == 0, 0, -2 * p * _sign(sigma) / safe)
    cs_c = jnp.sqrt((1 + cos2) / 2)
    sn_c = sin2 / (2 * cs_c)
    mean = (a + d) / 2
    b_c = cs_c * (b * cs_c - a * sn_c) + sn_c * (d * cs_c - c * sn_c)
    c_c = cs_c * (c * cs_c + d * sn_c) - sn_c * (a * cs_c + b * sn_c)
    complex_block = (mean, b_c, c_c, mean)

    block = tuple(jnp.where(real, r, x) for r, x in zip(real_block, complex_block, strict=True))
    return jnp.where(real, cs_r, cs_c), jnp.where(real, sn_r, sn_c), block


def _standardise(h, z, vectors):
    """Each isolated 2x2 block (nonzero subdiagonal entry, zero neighbours) rotated to
    the standard form; the rotations touch disjoint row/column pairs."""
    n = h.shape[-1]
    h, small = _deflate(h)
    pad = jnp.ones((*h.shape[:-2], 1), bool)
    small = jnp.concatenate([pad, small, pad], axis=-1)
    isolated = ~small[..., 1:-1] & small[..., :-2] & small[..., 2:]

    def body(k, carry):
        h, z = carry
        a, b = index(index(h, k, -2), k, -1), index(index(h, k, -2), k + 1, -1)
        c, d = index(index(h, k + 1, -2), k, -1), index(index(h, k + 1, -2), k + 1, -1)
        cs, sn, block = _standard_2x2(a, b, c, d)
        on = index(isolated, k, -1)
        cs, sn = jnp.where(on, cs, 1), jnp.where(on, sn, 0)
        h = _rotate_columns(_rotate_rows(h, k, cs, sn), k, cs, sn)
        rows, cols = iota(n, k)[:, None], iota(n, k)[None, :]
        for (r, c_), value in zip(((0, 0), (0, 1), (1, 0), (1, 1)), block, strict=True):
            spot = (rows == k + r) & (cols == k + c_)
            h = jnp.where(spot & on[..., None, None], value[..., None, None], h)
        return h, _rotate_columns(z, k, cs, sn) if vectors else z

    return repeat(n - 1, body, (h, z))


def schur(a: Any, *, vectors: bool = True) -> tuple[Any, Any]:
    """Real Schur form ``a = z t z^T`` of a real matrix (``z`` zeros if not ``vectors``).

    * deflation: a subdiagonal entry with ``|h_k+1,k| <= eps (|h_kk| + |h_k+1,k+1|)``
      (or below the smallest normal number) is set to zero; the active block is the
      last unreduced one of three or more rows, ``lo .. hi`` (blocks of one or two rows
      are converged);
    * shifts: Francis's pair, the eigenvalues of the active block's trailing 2x2; after
      every :data:`EXCEPTIONAL_EVERY` iterations without deflation at the bottom, an
      exceptional pair (see ``_EXCEPTIONAL_SHIFT``) breaks cycles;
    * cap: ``ITERATIONS_PER_EIGENVALUE * max(n, 10)`` double-shift steps in all (as
      LAPACK's dlahqr); a matrix not reduced by then keeps its last iterate, and its
      unreduced blocks of more than two rows are left as they are;
    * finally each 2x2 block is standardised (:func:`_standard_2x2`).
    """
    n = a.shape[-1]
    packed, taus = gehrd(a)
    h = jnp.where(tril_mask(n, k=-2), 0, packed)
    z = unghr(packed, taus) if vectors else jnp.zeros_like(a)
    symbolic = is_symbolic(n)  # then both run (no step is taken where n is too small)
    if symbolic or n >= 3:
        h, z = _iterate(h, z, vectors)
    if symbolic or n >= 2:
        h, z = _standardise(h, z, vectors)
    return h, z
