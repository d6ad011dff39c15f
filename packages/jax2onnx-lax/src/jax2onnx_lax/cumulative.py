"""cumsum, cumprod, cummax, cummin, cumlogsumexp.

cumsum is ONNX ``CumSum``. The others have no ONNX op and become a log-step
(Hillis-Steele) scan over the length ``n`` of the scanned axis: for
``s = 1, 2, 4, ... < n``, ``y = combine(y, y shifted by s)``, the shift being
one ``Pad`` that adds ``s`` identity elements at the front (the back when
``reverse``) and drops ``s`` at the other end (a negative pad). That is
``ceil(log2 n)`` steps of elementwise ops, exact for max/min and integer
products, and for floats a reassociation like JAX's own associative scan.
A static ``n`` unrolls the steps; a symbolic ``n`` runs the same step in an
ONNX ``Loop`` while ``s < n``, its pads computed from the carried ``s``.

float16/bfloat16 cumsum and cumprod along an axis of static length follow XLA's CPU
backend instead, whose roundings in the half type decide JAX's bits: each output a fold
in index order (a reduce_window over the whole axis), an axis longer than 16 in blocks
of 16 (:func:`_xla_scan`). Along a symbolic axis they compute as above (``CumSum`` in
float32, rounded once), within a few roundings of JAX.

ONNX Runtime's CumSum takes only int32/int64/float kernels and its Pad, Max and
Min lack int16/uint16, so narrow and unsigned integers are computed in a wider
integer and cast back, which is exact (a wrapped sum or product keeps its low
bits).

Complex cummax/cummin (``values="complex"``) run the same scan on the stored
array (parts on a trailing axis, shifted alike), combining with the
lexicographic max/min (real parts, then imaginary parts, as JAX orders complex
numbers) and shifting in parts of -inf (+inf). Complex cumsum/cumprod are in
:mod:`jax2onnx_lax.complex_layout` and :mod:`jax2onnx_lax.complex_reduce`.
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from jax.core import ShapedArray

from jax2onnx.plugin import Family, case, is_symbolic

family = Family("lax")


# exact stand-ins where ONNX Runtime has no CumSum kernel: wrapping sums in a wider int
_CUMSUM_WIDE = {
    np.dtype(np.int8): np.int32,
    np.dtype(np.uint8): np.int32,
    np.dtype(np.int16): np.int32,
    np.dtype(np.uint16): np.int32,
    np.dtype(np.uint32): np.int64,
    np.dtype(np.uint64): np.int64,
}
_SCAN_WIDE = {np.dtype(np.int16): np.int32, np.dtype(np.uint16): np.int32}


def _dtype(ctx):
    return np.dtype(ctx.avals_in[0].dtype)


def _scan(ctx, x, axis, reverse, combine, identity):
    """Inclusive scan of ``combine(c, a, b)`` along ``axis`` in ``ceil(log2 n)`` Pad steps.

    ``c`` is the context to emit with (the Loop body's, for a symbolic ``n``); ``x`` is
    taken as stored (a complex array has its parts on a trailing axis, padded alike).
    """
    stored = ctx.stored_aval(ctx.avals_in[0])
    shape, dtype = tuple(stored.shape), np.dtype(stored.dtype)
    n = shape[axis]
    wide = _SCAN_WIDE.get(dtype)
    y = x if wide is None else ctx.cast(x, wide)
    fill = ctx.const(identity, wide or dtype)
    rank = len(shape)
    if is_symbolic(n):
        y = _scan_loop(ctx, y, shape, axis, reverse, combine, fill, wide or dtype)
        return y if wide is None else ctx.cast(y, dtype)
    s = 1
    while s < int(n):
        pads = [0] * (2 * rank)
        pads[axis], pads[rank + axis] = (-s, s) if reverse else (s, -s)
        y = combine(ctx, y, ctx.op.Pad(y, ctx.i64(pads), fill))
        s *= 2
    return y if wide is None else ctx.cast(y, dtype)


def _scan_loop(ctx, y, shape, axis, reverse, combine, fill, dtype):
    """The log-step scan along an axis of symbolic size ``n``: a ``Loop`` while ``s < n``.

    The body carries the shift ``s`` (1, 2, 4, ...) and ``y``; its pads are
    ``s`` times a constant of +-1 at the scanned axis, so one Pad shifts by
    the run-time ``s``. No step runs when ``n <= 1``.
    """
    rank = len(shape)
    n = ctx.op.Squeeze(ctx.dim(shape[axis]), ctx.i64([0]))
    sign = np.zeros(2 * rank, np.int64)
    sign[axis], sign[rank + axis] = (-1, 1) if reverse else (1, -1)
    body = ctx.subgraph("cumulative_body")
    body.add_input(np.int64, ())  # the iteration number
    body.add_input(np.bool_, ())
    shift = body.add_input(np.int64, ())
    state = body.add_input(dtype, shape)
    pads = body.op.Mul(ctx.i64(sign), shift)
    new = combine(body.ctx, state, body.op.Pad(state, pads, fill))
    doubled = body.op.Mul(shift, ctx.i64(2))
    again = body.op.Less(doubled, n)
    scalar = ShapedArray((), np.int64)
    graph = body.finish(
        [again, doubled, new],
        [ShapedArray((), np.bool_), scalar, ShapedArray(shape, dtype)],
    )
    one = ctx.i64(1)
    _, result = ctx.op.Loop(None, ctx.op.Less(one, n), one, y, body=graph, _outputs=2)
    result.dtype = y.dtype  # the builder does not know Loop's output dtypes
    return result


# XLA's CPU compiler rewrites a cumulative reduce_window longer than this into blocks
_XLA_BLOCK = 16
_HALF_FLOATS = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _xla_scan(ctx, x, axis, reverse, combine, init):
    """cumsum/cumprod of a float16/bfloat16 axis of static length in XLA's order, rounding
    after every step as XLA's CPU backend does (JAX's bits; see the module docstring).

    JAX lowers these to a ``reduce_window`` whose window is the whole axis. On CPU each
    output is a fold from the initial value over its window in index order (``x[0] ..
    x[i]``; ``x[i] .. x[n-1]`` when ``reverse``), and an axis longer than 16 is first
    split into blocks of 16: scans within the blocks, an exclusive scan of the block
    totals (split again if there are more than 16 blocks), and one combine of the two.
    """
    rank = len(ctx.avals_in[0].shape)
    if ctx.avals_in[0].shape[axis] == 0:
        return ctx.op.Identity(x)
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]  # a swap: its own inverse
    y = ctx.transpose(x, perm)
    fill = ctx.const(init, ctx.avals_in[0].dtype)
    y = _blocked_scan(ctx, y, rank, int(ctx.avals_in[0].shape[axis]), reverse, combine, fill)
    return ctx.transpose(y, perm)


def _blocked_scan(ctx, y, rank, n, reverse, combine, fill):
    """Inclusive scan along the last axis (length ``n``) as XLA's ReduceWindowRewriter
    computes it: directly up to 16, else in blocks of 16 (the axis padded with ``fill``)."""
    if n <= _XLA_BLOCK:
        return _window_scan(ctx, y, rank, n, reverse, combine, fill)
    last = rank - 1
    blocks = -(-n // _XLA_BLOCK)
    padded = blocks * _XLA_BLOCK
    if padded != n:
        pads = [0] * (2 * rank)
        pads[rank + last] = padded - n
        y = ctx.op.Pad(y, ctx.i64(pads), fill)
    tiles = ctx.op.Reshape(y, ctx.i64([0] * last + [blocks, _XLA_BLOCK]))
    local = _window_scan(ctx, tiles, rank + 1, _XLA_BLOCK, reverse, combine, fill)
    edge = 0 if reverse else _XLA_BLOCK - 1
    totals = ctx.op.Slice(local, ctx.i64([edge]), ctx.i64([edge + 1]), ctx.i64([rank]))
    totals = ctx.op.Reshape(totals, ctx.i64([0] * last + [blocks]))
    carried = _blocked_scan(ctx, totals, rank, blocks, reverse, combine, fill)
    pads = [0] * (2 * rank)  # exclusive: every block gets the blocks before (after) it
    pads[last], pads[rank + last] = (-1, 1) if reverse else (1, -1)
    carried = ctx.op.Pad(carried, ctx.i64(pads), fill)
    out = combine(ctx, local, ctx.op.Unsqueeze(carried, ctx.i64([rank])))
    out = ctx.op.Reshape(out, ctx.i64([0] * last + [padded]))
    if padded != n:
        out = ctx.op.Slice(out, ctx.i64([0]), ctx.i64([n]), ctx.i64([last]))
    return out


def _window_scan(ctx, y, rank, m, reverse, combine, fill):
    """Each output a fold from ``fill`` over its window in index order, along the last axis
    (length ``m``): a running fold forwards; ``m`` shifted copies added up in reverse.
    Folding in ``fill`` (0 for sums, 1 for products) leaves a partial result unchanged,
    so the shifts may pad with it where XLA skips the padding."""
    last = rank - 1
    if not reverse:
        acc = None
        outs = []
        for i in range(m):
            col = ctx.op.Slice(y, ctx.i64([i]), ctx.i64([i + 1]), ctx.i64([last]))
            acc = combine(ctx, fill if acc is None else acc, col)
            outs.append(acc)
        return outs[0] if m == 1 else ctx.op.Concat(*outs, axis=last)
    acc = combine(ctx, fill, y)
    for k in range(1, m):
        pads = [0] * (2 * rank)
        pads[last], pads[rank + last] = -k, k
        acc = combine(ctx, acc, ctx.op.Pad(y, ctx.i64(pads), fill))
    return acc


def _in_xla_order(ctx, axis) -> bool:
    """Whether a cumsum/cumprod takes :func:`_xla_scan`: half precision, static length."""
    aval = ctx.avals_in[0]
    return np.dtype(aval.dtype) in _HALF_FLOATS and not is_symbolic(aval.shape[axis])


def _cum(prim, **kw):
    return lambda x: prim.bind(x, **kw)


def _int_edge(dtype):
    info = np.iinfo(dtype)
    return np.array([[info.max, 3, info.min, 1, info.max], [2, info.max, 5, info.min, 7]], dtype)


def _x64(dtype) -> dict:
    return {"variants": ["f64"]} if np.dtype(dtype).itemsize == 8 else {}


_INTS = (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64)


def _int_cases(prefix, prim):
    return [
        case(
            f"{prefix}_{np.dtype(d).name}",
            _cum(prim, axis=1, reverse=d in (np.int16, np.uint32)),
            [_int_edge(d)],
            **_x64(d),
        )
        for d in _INTS
    ]


def _common_cases(prefix, prim, expect, variants=("f32", "f64", "bf16")):
    return [
        case(
            f"{prefix}_last",
            lambda x: prim.bind(x, axis=1, reverse=False),
            [("B", 6)],
            expect=expect,
        ),
        case(f"{prefix}_axis0", lambda x: prim.bind(x, axis=0, reverse=False), [(5, "B")]),
        case(
            f"{prefix}_reverse",
            lambda x: prim.bind(x, axis=1, reverse=True),
            [("B", 7)],
            variants=list(variants),  # no graph patterns: half precision adds Casts
        ),
        case(f"{prefix}_middle", lambda x: prim.bind(x, axis=1, reverse=True), [(2, 9, 3)]),
        case(f"{prefix}_one", lambda x: prim.bind(x, axis=0, reverse=False), [(1, 3)]),
        *_symbolic_cases(prefix, prim),
    ]


# the scanned axis symbolic: converted once, run at lengths 1 (no step), 7 and 12 (3 and 4
# steps, neither a power of two), the static variant at 5
_SCANNED = {"T": (5, 1, 7, 12), "B": (2, 3, 1, 2)}


def _symbolic_cases(prefix, prim):
    return [
        case(
            f"{prefix}_symbolic_axis0",
            lambda x: prim.bind(x, axis=0, reverse=False),
            [("T", "B")],
            dim_sizes=_SCANNED,
        ),
        case(
            f"{prefix}_symbolic_reverse",
            lambda x: prim.bind(x, axis=1, reverse=True),
            [("B", "T", 2)],
            dim_sizes=_SCANNED,
        ),
    ]


def _symbolic_int_cases(prefix, prim):
    return [
        case(
            f"{prefix}_symbolic_{np.dtype(d).name}",
            lambda x, d=d: prim.bind(x, axis=1, reverse=d == np.int16),
            [("B", "T")],
            dtypes=[d],
            dim_sizes=_SCANNED,
        )
        for d in (np.int16, np.int32)
    ]


def _half_order_cases(prefix, prim, low, high):
    """float16/bfloat16 scans compared bit for bit (tolerance 0) with JAX: one of 40 (three
    blocks of 16) forwards along the last axis, one of 40 in reverse along the first."""
    values = np.random.default_rng(7).uniform(low, high, (3, 40))
    exact = {"bfloat16": (0.0, 0.0), "float16": (0.0, 0.0)}
    return [
        case(
            f"{prefix}_half_order",
            _cum(prim, axis=1, reverse=False),
            [values],
            variants=["bf16", "f16"],
            tolerances=exact,
        ),
        case(
            f"{prefix}_half_order_reverse",
            _cum(prim, axis=0, reverse=True),
            [values.T.copy()],
            variants=["bf16", "f16"],
            tolerances=exact,
        ),
    ]


_NAN_ROW = np.array([[1.0, -2.0, np.nan, 4.0, -np.inf, 0.5], [np.inf, 1.0, -np.inf, 2.0, 3.0, 0.0]])


@family.lowering(
    lax.cumsum_p,
    cases=lambda: [
        *_common_cases("cumsum", lax.cumsum_p, ["CumSum:Bx6"], ("f32", "f64", "bf16", "f16")),
        case("cumsum_jnp_int8", lambda x: jnp.cumsum(x, axis=0), [_int_edge(np.int8)]),
        case("cumsum_nan", _cum(lax.cumsum_p, axis=1, reverse=True), [_NAN_ROW]),
        case("cumsum_symbolic_axis", _cum(lax.cumsum_p, axis=0, reverse=True), [("B", 3)]),
        *_half_order_cases("cumsum", lax.cumsum_p, -2.0, 2.0),
        *_int_cases("cumsum", lax.cumsum_p),
    ],
)
def cumsum(ctx, x, *, axis, reverse):
    """CumSum; narrow and unsigned ints summed in int32/int64 and cast back (wraps as JAX);
    float16/bfloat16 of a static length in XLA's order and roundings (:func:`_xla_scan`)."""
    if _in_xla_order(ctx, axis):
        return _xla_scan(ctx, x, axis, reverse, lambda c, a, b: c.op.Add(a, b), 0)
    dtype = _dtype(ctx)
    wide = None if ctx.has_kernel("CumSum", dtype) else _CUMSUM_WIDE.get(dtype)
    y = x if wide is None else ctx.cast(x, wide)
    y = ctx.op.CumSum(y, ctx.i64(axis), reverse=1 if reverse else None)
    return y if wide is None else ctx.cast(y, dtype)


@family.lowering(
    lax.cumprod_p,
    cases=lambda: [
        *_common_cases("cumprod", lax.cumprod_p, ["Pad -> Mul", "Mul:Bx6"]),
        case("cumprod_jnp_bool", lambda x: jnp.cumprod(x, axis=1), [(3, 5)], dtypes=[np.bool_]),
        case("cumprod_nan", _cum(lax.cumprod_p, axis=1, reverse=False), [_NAN_ROW]),
        *_half_order_cases("cumprod", lax.cumprod_p, 0.8, 1.25),
        *_int_cases("cumprod", lax.cumprod_p),
        *_symbolic_int_cases("cumprod", lax.cumprod_p),
    ],
)
def cumprod(ctx, x, *, axis, reverse):
    """Log-step scan with Mul (identity 1); see the module docstring. float16/bfloat16 of a
    static length in XLA's order and roundings (:func:`_xla_scan`)."""
    if _in_xla_order(ctx, axis):
        return _xla_scan(ctx, x, axis, reverse, lambda c, a, b: c.op.Mul(a, b), 1)
    return _scan(ctx, x, axis, reverse, lambda c, a, b: c.op.Mul(a, b), 1)


def _lowest(dtype):
    dtype = np.dtype(dtype)
    return -np.inf if jnp.issubdtype(dtype, jnp.floating) else np.iinfo(dtype).min


def _highest(dtype):
    dtype = np.dtype(dtype)
    return np.inf if jnp.issubdtype(dtype, jnp.floating) else np.iinfo(dtype).max


@family.lowering(
    lax.cummax_p,
    cases=lambda: [
        *_common_cases("cummax", lax.cummax_p, ["Pad -> Max", "Max:Bx6"]),
        case("cummax_nan", _cum(lax.cummax_p, axis=1, reverse=False), [_NAN_ROW]),
        *_int_cases("cummax", lax.cummax_p),
        *_symbolic_int_cases("cummax", lax.cummax_p),
    ],
)
def cummax(ctx, x, *, axis, reverse):
    """Log-step scan with Max (identity: the dtype's lowest value); Max propagates NaN as JAX."""
    return _scan(ctx, x, axis, reverse, lambda c, a, b: c.op.Max(a, b), _lowest(_dtype(ctx)))


@family.lowering(
    lax.cummin_p,
    cases=lambda: [
        *_common_cases("cummin", lax.cummin_p, ["Pad -> Min", "Min:Bx6"]),
        case("cummin_nan", _cum(lax.cummin_p, axis=1, reverse=True), [_NAN_ROW]),
        *_int_cases("cummin", lax.cummin_p),
        *_symbolic_int_cases("cummin", lax.cummin_p),
    ],
)
def cummin(ctx, x, *, axis, reverse):
    """Log-step scan with Min (identity: the dtype's highest value); Min propagates NaN as JAX."""
    return _scan(ctx, x, axis, reverse, lambda c, a, b: c.op.Min(a, b), _highest(_dtype(ctx)))


@family.lowering(
    lax.cumlogsumexp_p,
    cases=lambda: [
        *_common_cases("cumlogsumexp", lax.cumlogsumexp_p, ["Pad -> Sub -> Abs", "Where:Bx6"]),
        case("cumlogsumexp_inf_nan", _cum(lax.cumlogsumexp_p, axis=1, reverse=False), [_NAN_ROW]),
        case(
            "cumlogsumexp_large",
            _cum(lax.cumlogsumexp_p, axis=0, reverse=True),
            [(8, 3)],
            input_range=(-300.0, 300.0),
        ),
    ],
)
def cumlogsumexp(ctx, x, *, axis, reverse):
    """Log-step scan with a stable logaddexp (identity -inf), as JAX's ``logaddexp``.

    ``combine(a, b) = max(a, b) + log1p(exp(-|a - b|))``, and ``a + b`` where
    ``a - b`` is NaN (both infinite of one sign, or a NaN). ONNX has no Log1p:
    ``log1p(u) = log(w) * u / (w - 1)`` with ``w = 1 + u`` (exact to rounding),
    and ``u`` where ``w == 1``.
    """
    dtype = _dtype(ctx)
    one = ctx.const(1, dtype)

    zero = ctx.const(0, dtype)

    def logaddexp(c, a, b):
        op = c.op
        delta = op.Sub(a, b)
        u = op.Exp(op.Neg(op.Abs(delta)))
        w = op.Add(one, u)
        spread = op.Sub(w, one)
        log1p = op.Where(op.Equal(spread, zero), u, op.Div(op.Mul(op.Log(w), u), spread))
        finite = op.Add(op.Max(a, b), log1p)
        return op.Where(op.IsNaN(delta), op.Add(a, b), finite)

    return _scan(ctx, x, axis, reverse, logaddexp, -np.inf)


# -- complex cummax / cummin -------------------------------------------------------------


def _lexicographic(larger):
    """``combine`` picking, of two stored complex arrays, the one with the larger (smaller)
    real part, then the larger (smaller) imaginary part: JAX's order of complex numbers."""

    def combine(c, a, b):
        op = c.op
        first, second, last = c.i64([0]), c.i64([1]), c.i64([-1])
        end = c.i64([2])
        (ar, ai), (br, bi) = [
            (op.Slice(v, first, second, last), op.Slice(v, second, end, last)) for v in (a, b)
        ]
        beyond = op.Greater if larger else op.Less
        wins = op.Or(beyond(br, ar), op.And(op.Equal(br, ar), beyond(bi, ai)))
        return op.Where(wins, b, a)

    return combine


def _complex_cases(prefix, prim):
    c = [np.complex64]
    return [
        case(f"complex_{prefix}", _cum(prim, axis=1, reverse=False), [("B", 6)], dtypes=c),
        case(f"complex_{prefix}_reverse", _cum(prim, axis=0, reverse=True), [(5, 2)], dtypes=c),
        case(f"complex_{prefix}_ties", _cum(prim, axis=1, reverse=False), [_COMPLEX_TIES]),
        case(f"complex_{prefix}_ties_reverse", _cum(prim, axis=1, reverse=True), [_COMPLEX_TIES]),
        case(
            f"complex_{prefix}_symbolic",
            _cum(prim, axis=0, reverse=True),
            [("T", "B")],
            dtypes=c,
            dim_sizes=_SCANNED,
        ),
    ]


_COMPLEX_TIES = np.array(
    [[1 + 2j, 1 + 5j, 3 - 1j, 3 - 4j, 3 + 0j, -2 + 9j], [2j, -1j, 0j, 1j, 1j, -np.inf + 1j]],
    np.complex64,
)


@family.lowering(
    lax.cummax_p, values="complex", cases=lambda: _complex_cases("cummax", lax.cummax_p)
)
def complex_cummax(ctx, x, *, axis, reverse):
    """Log-step scan of the lexicographic maximum (real parts, then imaginary parts), as
    JAX orders complex numbers; the identity has both parts -inf. Inputs with NaN are not
    matched (JAX's result then depends on its scan's order)."""
    return _scan(ctx, x, axis, reverse, _lexicographic(True), -np.inf)


@family.lowering(
    lax.cummin_p, values="complex", cases=lambda: _complex_cases("cummin", lax.cummin_p)
)
def complex_cummin(ctx, x, *, axis, reverse):
    """Log-step scan of the lexicographic minimum (see :func:`complex_cummax`)."""
    return _scan(ctx, x, axis, reverse, _lexicographic(False), np.inf)


register = family.register
