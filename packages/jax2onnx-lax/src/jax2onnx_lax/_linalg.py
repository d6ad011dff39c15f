"""Direct linear-algebra algorithms written in JAX, for the ``linalg`` lowerings.

Each function here is plain JAX code on batches of matrices (leading dims,
symbolic ones included). The lowerings trace them with ``ctx.decompose``, so
they become ONNX through the existing lax lowerings. Loops over a matrix
dimension are unrolled in Python up to :data:`UNROLL_MAX` steps (a compact
straight-line graph) and become one ``lax.fori_loop``/``lax.scan`` (one ONNX
``Loop``) above it, or when the dimension is symbolic (the trip count is then
computed from the input's shape in the graph).

Each step works on whole rows/columns with masks (``iota == j``) instead of
updating slices in place, so the same code serves a Python int step (unrolled,
the masks are constants) and a traced one (inside a loop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import is_symbolic

# Matrix dims up to this are unrolled: a straight-line graph, fastest in ONNX Runtime, growing
# linearly with the size (a 16x16 LU is ~1200 nodes). Larger ones run one Loop of constant size.
UNROLL_MAX = 16


def unrolled(n: Any) -> bool:
    """Whether a loop of ``n`` steps is unrolled: a static ``n`` up to :data:`UNROLL_MAX`."""
    return not is_symbolic(n) and n <= UNROLL_MAX


def repeat(n: Any, body: Callable[[Any, Any], Any], state: Any, *, reverse: bool = False) -> Any:
    """``state = body(j, state)`` for ``j`` in ``range(n)`` (reversed if asked).

    Unrolled with Python ints up to :data:`UNROLL_MAX` steps, else one fori_loop
    (also for a symbolic ``n``).
    """
    if unrolled(n):
        for j in reversed(range(n)) if reverse else range(n):
            state = body(j, state)
        return state
    if reverse:
        return lax.fori_loop(0, n, lambda i, s: body(n - 1 - i, s), state)
    return lax.fori_loop(0, n, body, state)


def scan(
    body: Callable[[Any, Any], Any], carry: Any, xs: Any, n: int, *, reverse: bool = False
) -> Any:
    """``lax.scan`` over the leading axis of ``xs`` (length ``n``), unrolled when small."""
    if not unrolled(n):
        return lax.scan(body, carry, xs, reverse=reverse)
    ys = [None] * n
    for j in reversed(range(n)) if reverse else range(n):
        carry, ys[j] = body(carry, [x[j] for x in xs])
    return carry, [jnp.stack([y[k] for y in ys]) for k in range(len(ys[0]))]


def iota(n: Any, j: Any = None) -> Any:
    """``arange(n)``: a NumPy constant when ``j`` is a Python int (or None) and ``n``
    static, else an int32 iota."""
    if (isinstance(j, int) or j is None) and not is_symbolic(n):
        return np.arange(n)
    return lax.iota(np.int32, n)


def dim_min(a: Any, b: Any) -> Any:
    """``min(a, b)`` of two dimensions, static or symbolic (a symbolic ``min`` expression)."""
    if is_symbolic(a):
        return a.min(b)
    return b.rmin(a) if is_symbolic(b) else min(a, b)


def eye_mask(n: Any, k: int = 0) -> Any:
    """``n x n`` boolean mask of diagonal ``k`` (``col == row + k``, as ``np.eye(n, k=k)``)."""
    return iota(n)[None, :] == iota(n)[:, None] + k


def dim_max(a: Any, b: Any) -> Any:
    """``max(a, b)`` of two dimensions, static or symbolic (a symbolic ``max`` expression)."""
    if is_symbolic(a):
        return a.max(b)
    return b.rmax(a) if is_symbolic(b) else max(a, b)


def tril_mask(m: Any, n: Any = None, k: int = 0) -> Any:
    """``m x n`` (``n x n`` if ``n`` is None) boolean mask of the lower triangle
    ``col <= row + k``: a NumPy constant for static sizes."""
    n = m if n is None else n
    return iota(n)[None, :] <= iota(m)[:, None] + k


def index(x: Any, j: Any, axis: int) -> Any:
    """``x`` indexed at ``j`` along ``axis`` (the axis dropped), for an int or traced ``j``."""
    axis = axis % x.ndim
    if isinstance(j, int):
        return lax.index_in_dim(x, j, axis, keepdims=False)
    if _maybe_empty(x.shape[axis]):  # a slice of size 1 needs a size JAX knows is >= 1
        hit = lax.broadcasted_iota(np.int32, x.shape, axis) == j
        return jnp.sum(jnp.where(hit, x, 0), axis=axis, dtype=x.dtype)
    return lax.dynamic_index_in_dim(x, j, axis, keepdims=False)


def _maybe_empty(d: Any) -> bool:
    """Whether ``d`` is symbolic and not known to be at least 1 (``N - 1``)."""
    if not is_symbolic(d):
        return False
    try:
        return not d >= 1
    except jax.errors.InconclusiveDimensionOperation:
        return True


def pick(x: Any, p: Any, *, in_range: bool = False) -> Any:
    """``x[..., p, ...]`` with a per-batch index ``p`` into the axis right after its dims.

    ``in_range``: ``p`` is known to lie in the axis (an ArgMax): no wrap-around of
    negative indices (the gather still clamps)."""
    axis = p.ndim
    idx = jnp.expand_dims(p, tuple(range(p.ndim, x.ndim)))
    mode = "promise_in_bounds" if in_range else "clip"
    return jnp.squeeze(jnp.take_along_axis(x, idx, axis=axis, mode=mode), axis)


def swap_rows(x: Any, j: Any, p: Any, *, in_range: bool = False) -> Any:
    """Rows ``j`` (same for every batch) and ``p`` (per batch) of ``x`` exchanged.

    ``x`` is ``[..., m]`` (swapping entries) or ``[..., m, n]`` (swapping rows);
    ``in_range`` as for :func:`pick`.
    """
    vec = x.ndim == p.ndim + 1
    axis = p.ndim
    rows = iota(x.shape[axis], j)
    xj, xp = index(x, j, axis), pick(x, p, in_range=in_range)
    is_j, is_p = rows == j, rows == p[..., None]
    if vec:
        xj, xp = xj[..., None], xp[..., None]
    else:
        is_j, is_p, xj, xp = is_j[:, None], is_p[..., None], xj[..., None, :], xp[..., None, :]
    return jnp.where(is_j, xp, jnp.where(is_p, xj, x))


# -- triangular solve ---------------------------------------------------------


def triangular_solve(
    a: Any,
    b: Any,
    *,
    left_side: bool,
    lower: bool,
    transpose_a: bool,
    unit_diagonal: bool,
    conjugate_a: bool = False,
    **_: Any,
) -> Any:
    """Solve ``op(a) x = b`` or ``x op(a) = b`` by substitution, one row at a time.

    Both forms become ``m y = c`` with ``m`` triangular: ``x op(a) = b`` is
    ``op(a)^T x^T = b^T``. Row ``i`` of ``y`` is ``(c_i - m[i, solved] y) / m[i, i]``
    with the unsolved rows of ``y`` still zero; the other triangle of ``a`` (and
    its diagonal when ``unit_diagonal``) is masked out, never read. ``conjugate_a``
    conjugates ``a`` first (``op(a) = a^H`` with ``transpose_a``).
    """
    a = jnp.conj(a) if conjugate_a else a
    flip = transpose_a != (not left_side)  # m = a^T
    m = jnp.swapaxes(a, -1, -2) if flip else a
    forward = lower != flip  # m is lower triangular: solve top-down
    c = b if left_side else jnp.swapaxes(b, -1, -2)
    n = m.shape[-1]
    if unrolled(n):
        y = _substitute(m, c, n, forward=forward, unit_diagonal=unit_diagonal)
        return y if left_side else jnp.swapaxes(y, -1, -2)

    def body(i, y):
        cols = iota(n, i)
        solved = cols < i if forward else cols > i
        row = jnp.where(solved, index(m, i, -2), 0)
        yi = index(c, i, -2) - jnp.einsum("...j,...jk->...k", row, y)
        if not unit_diagonal:
            yi = yi / index(index(m, i, -2), i, -1)[..., None]
        return jnp.where((cols == i)[:, None], yi[..., None, :], y)

    y = repeat(n, body, jnp.zeros_like(c), reverse=not forward)
    return y if left_side else jnp.swapaxes(y, -1, -2)


def _substitute(m: Any, c: Any, n: int, *, forward: bool, unit_diagonal: bool) -> Any:
    """``m y = c`` for a static ``n``: each row of ``y`` from slices of the rows solved
    before it, which are stacked as they come (no masks, no products with zeros)."""
    solved = None  # the rows solved so far, in order
    for i in range(n) if forward else reversed(range(n)):
        yi = c[..., i : i + 1, :]
        if solved is not None:
            known = m[..., i : i + 1, :i] if forward else m[..., i : i + 1, i + 1 :]
            yi = yi - jnp.matmul(known, solved)
        if not unit_diagonal:
            yi = yi / m[..., i : i + 1, i : i + 1]
        if solved is None:
            solved = yi
        else:
            solved = jnp.concatenate([solved, yi] if forward else [yi, solved], axis=-2)
    return solved


# -- Cholesky -------------------------------------------------------------------


def cholesky(a: Any) -> Any:
    """Left-looking Cholesky ``a = l l^H``, one column per step, from the lower triangle.

    Like LAPACK's potrf as JAX calls it, the strict upper triangle of the result
    is the input's, and a matrix that is not positive definite (a pivot that is
    not > 0, or NaN) gives NaN everywhere. For complex ``a`` the pivots are the
    real parts of the diagonal entries (as zpotrf).
    """
    n = a.shape[-1]
    batch = a.shape[:-2]

    def body(j, carry):
        # rows above the diagonal get what they get (the upper triangle is the input's
        # in the end): the products below read only columns left of j, rows below it
        low, ok = carry
        rows = iota(n, j)
        col = index(a, j, -1) - jnp.einsum("...ik,...k->...i", low, jnp.conj(index(low, j, -2)))
        d = jnp.real(index(col, j, -1))
        root = jnp.sqrt(d)[..., None].astype(a.dtype)
        if isinstance(j, int) and j == n - 1:  # nothing below the last pivot
            col = root[..., None]
        else:
            col = jnp.where(rows == j, root, col / root)[..., :, None]
        return jnp.where((rows == j)[None, :], col, low), ok & (d > 0)

    low, ok = repeat(n, body, (jnp.zeros_like(a), jnp.ones(batch, bool)))
    out = jnp.where(tril_mask(n), low, a)
    return jnp.where(ok[..., None, None], out, jnp.asarray(np.nan, a.dtype))


def cholesky_update(r: Any, w: Any) -> Any:
    """Rank-one update of an upper Cholesky factor by Givens rotations of whole rows.

    Step ``k`` rotates row ``k`` of ``r`` against ``w`` so that ``w[k]`` vanishes
    (``c = r_kk / h``, ``s = w_k / h``, ``h = hypot(r_kk, w_k)``). Like JAX's own
    update, the rotation runs over every column, so a nonzero strict lower
    triangle is rotated too rather than ignored.
    """
    n = r.shape[-1]

    def body(k, carry):
        r, w = carry
        row = index(r, k, -2)
        rkk, wk = index(row, k, -1), index(w, k, -1)
        h = jnp.sqrt(rkk * rkk + wk * wk)
        c, s = rkk / h, wk / h
        new_row = c * row + s * w
        w = c * w - s * row
        return jnp.where((iota(n, k) == k)[:, None], new_row[None, :], r), w

    return repeat(n, body, (r, w))[0]


# -- LU ------------------------------------------------------------------------


def lu(a: Any, pivot: Callable[[Any], Any]) -> tuple[Any, Any, Any]:
    """LU with partial pivoting (the first largest ``|a_ij|`` of the column, as LAPACK;
    for complex entries ``|Re a_ij| + |Im a_ij|``, as BLAS's izamax).

    Right-looking: step ``j`` swaps the pivot row up, scales the column below it
    (not when the pivot is 0, as LAPACK) and subtracts the rank-one update from
    the trailing rows. Returns ``(lu, pivots, permutation)``, int32 indices.

    ``pivot(mag)`` picks the pivot row from the column's magnitudes, ``-2`` on rows
    already pivoted (:func:`first_largest`, bound as one primitive). A swap is a
    row order (:func:`swap_order`) that gathers the rows of ``a`` and of the
    permutation alike. An unrolled step on the last row only records its
    pivot: the row is its own pivot and nothing lies below it; unrolled steps'
    pivots are stacked once at the end (one write each in a loop).
    """
    m, n = a.shape[-2:]
    k = dim_min(m, n)
    batch = a.shape[:-2]
    perm = jnp.broadcast_to(lax.iota(np.int32, m), (*batch, m))
    if unrolled(k) and not is_symbolic(m):  # the steps' pivots stacked once at the end
        found = []
        for j in range(k):
            if j == m - 1:  # the last row is its own pivot, nothing lies below it
                found.append(jnp.full(batch, j, np.int32))
                continue
            a, p, perm = _lu_step(a, perm, j, pivot)
            found.append(p)
        pivots = jnp.stack(found, axis=-1) if found else jnp.zeros((*batch, 0), np.int32)
        return a, pivots, perm

    def body(j, carry):
        a, pivots, perm = carry
        a, p, perm = _lu_step(a, perm, j, pivot)
        return a, jnp.where(iota(k, j) == j, p[..., None], pivots), perm

    pivots = jnp.zeros((*batch, k), np.int32)
    return repeat(k, body, (a, pivots, perm))


def _lu_step(a: Any, perm: Any, j: Any, pivot: Callable[[Any], Any]) -> tuple[Any, Any, Any]:
    """Step ``j`` of :func:`lu`: the factors so far, the pivot row and the permutation."""
    m, n = a.shape[-2:]
    rows, cols = iota(m, j), iota(n, j)
    col = index(a, j, -1)
    size = jnp.abs(jnp.real(col)) + jnp.abs(jnp.imag(col)) if jnp.iscomplexobj(a) else jnp.abs(col)
    p = pivot(jnp.where(rows >= j, size, -2))
    order = swap_order(m, j, p)
    a = in_order(a, order)
    perm = order if isinstance(j, int) and j == 0 else in_order(perm, order)
    top = index(a, j, -2)
    head = index(top, j, -1)
    head = jnp.where(head == 0, jnp.ones_like(head), head)
    low = jnp.where(rows > j, index(a, j, -1) / head[..., None], 0)
    upper = jnp.where(cols > j, top, 0)
    a = a - low[..., :, None] * upper[..., None, :]
    a = jnp.where((rows > j)[:, None] & (cols == j)[None, :], low[..., :, None], a)
    return a, p, perm


def first_largest(mag: Any) -> Any:
    """The first index of the largest ``mag`` along the last axis, a NaN counting as -1:
    below every magnitude, above the -2 that marks rows already pivoted."""
    return jnp.argmax(jnp.where(jnp.isnan(mag), -1, mag), axis=-1).astype(np.int32)


def swap_order(m: Any, j: Any, p: Any) -> Any:
    """``arange(m)`` with entries ``j`` (same for every batch) and ``p`` (per batch, an
    index in range) exchanged: the row order of a swap, int32 ``[..., m]``."""
    rows = iota(m, j)
    at = p if p.ndim == 0 else p[..., None]
    return jnp.where(rows == j, at, jnp.where(rows == at, j, rows)).astype(np.int32)


def in_order(x: Any, order: Any) -> Any:
    """The rows of ``x`` (``[..., m]`` entries or ``[..., m, n]`` rows) in ``order``
    (``[..., m]``, indices in range): one gather."""
    if order.ndim == 1:
        return x.at[order].get(mode="promise_in_bounds")
    idx = order if x.ndim == order.ndim else order[..., None]
    return jnp.take_along_axis(x, idx, axis=order.ndim - 1, mode="promise_in_bounds")


def pivots_to_permutation(pivots: Any, *, permutation_size: int) -> Any:
    """The permutation made by applying the row swaps ``i <-> pivots[i]`` to ``arange``;
    a negative pivot counts from the end, as JAX indexes."""
    k = pivots.shape[-1]
    batch = pivots.shape[:-1]
    perm = jnp.broadcast_to(lax.iota(np.int32, permutation_size), (*batch, permutation_size))
    # every pivot wrapped once, before the swaps: each swap then reads an index in range
    pivots = pivots.astype(np.int32)
    pivots = jnp.where(pivots < 0, pivots + permutation_size, pivots)

    def body(i, perm):
        return swap_rows(perm, i, index(pivots, i, -1), in_range=True)

    return repeat(k, body, perm)


# -- tridiagonal solve --------------------------------------------------------------


def _pivots(pivots, band, perturb):
    """The pivots (system axis first) to divide by, and which systems fail (get NaN).

    Without ``perturb`` a zero pivot fails the system (JAX returns NaN). With it,
    pivots smaller than ``eps * max|U|`` become that size, keeping their sign
    (also a zero's), as JAX's ``perturb_singular`` documents. JAX's CPU kernel
    uses a smaller, undocumented scale, so on singular systems the huge results
    differ by a constant factor (nonsingular ones agree).
    """
    if not perturb:
        return pivots, jnp.any(pivots == 0, axis=0)
    info = jnp.finfo(pivots.dtype)
    tiny = jnp.maximum(info.eps * jnp.max(jnp.abs(jnp.concatenate(band)), axis=0), info.tiny)
    negative = (pivots < 0) | ((pivots == 0) & (1 / pivots < 0))
    fixed = jnp.where(jnp.abs(pivots) < tiny, jnp.where(negative, -tiny, tiny), pivots)
    return fixed, jnp.zeros(pivots.shape[1:], bool)


def _cabs1(x: Any) -> Any:
    """LAPACK's pivoting magnitude: ``|x|``, and ``|Re x| + |Im x|`` for complex ``x``."""
    if jnp.iscomplexobj(x):
        return jnp.abs(jnp.real(x)) + jnp.abs(jnp.imag(x))
    return jnp.abs(x)


def tridiagonal_solve(dl: Any, d: Any, du: Any, b: Any, *, perturb_singular: bool = False) -> Any:
    """Gaussian elimination with partial pivoting on the band, then back substitution.

    Step ``i`` keeps row ``i`` when ``|d_i| >= |dl_{i+1}|`` and otherwise swaps it
    with row ``i + 1`` (which brings a second superdiagonal in), the scheme of
    LAPACK's gtsv that JAX's CPU backend calls (complex systems compare
    ``|Re| + |Im|``, as cgtsv/zgtsv do). ``dl[0]`` and ``du[-1]`` are
    ignored. Rows are scanned along the system axis (the scan's leading axis),
    also for a symbolic system size (two ``Loop``s of ``n - 1`` steps).
    """
    n = d.shape[-1]
    dl = jnp.where(iota(n) == 0, 0, dl)
    du = jnp.where(iota(n) == n - 1, 0, du)
    dl, d, du = (jnp.moveaxis(x, -1, 0) for x in (dl, d, du))
    rows_b = jnp.moveaxis(b, -2, 0)

    def eliminate(carry, nxt):
        di, ui, bi = carry  # row i as modified so far: d, du and the right-hand side
        li, dn, un, bn = nxt  # row i + 1 as given
        keep = _cabs1(di) >= _cabs1(li)
        num, den = jnp.where(keep, li, di), jnp.where(keep, di, li)
        f = num / jnp.where(den == 0, 1, den)  # a zero column (singular) eliminates nothing
        row = (
            jnp.where(keep, di, li),
            jnp.where(keep, ui, dn),
            jnp.where(keep, 0, un),
            jnp.where(keep[..., None], bi, bn),
        )
        nd = jnp.where(keep, dn - f * ui, ui - f * dn)
        nu = jnp.where(keep, un, -f * un)
        nb = jnp.where(keep[..., None], bn - f[..., None] * bi, bi - f[..., None] * bn)
        return (nd, nu, nb), row

    d_last, b_last, rows = d[0], rows_b[0], None
    if is_symbolic(n) or n > 1:  # a symbolic n: scans of n - 1 >= 0 steps
        (d_last, _, b_last), rows = scan(
            eliminate, (d[0], du[0], rows_b[0]), [dl[1:], d[1:], du[1:], rows_b[1:]], n - 1
        )
    band = [d_last[None]] if rows is None else [rows[0], d_last[None], rows[1], rows[2]]
    pivots, failed = _pivots(jnp.concatenate(band[:2]), band, perturb_singular)
    x_last = b_last / pivots[-1][..., None]
    x = x_last[None]
    if rows is not None:

        def substitute(carry, row):
            x1, x2 = carry  # x_{i+1}, x_{i+2}
            di, ui, wi, bi = row
            xi = (bi - ui[..., None] * x1 - wi[..., None] * x2) / di[..., None]
            return (xi, x1), [xi]

        start = (x_last, jnp.zeros_like(x_last))
        _, (xs,) = scan(substitute, start, [pivots[:-1], *rows[1:]], n - 1, reverse=True)
        x = jnp.concatenate([xs, x], axis=0)
    return jnp.where(failed[..., None, None], jnp.asarray(np.nan, b.dtype), jnp.moveaxis(x, 0, -2))
