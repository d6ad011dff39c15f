"""``lax.reduce`` and ``lax.reduce_window`` with a reducer of the user's, variadic or
on complex values.

A reducer whose every output is one add/mul/max/min/and/or/xor of an operand and
its accumulator is a monoid: ``reduce`` becomes the matching ``reduce_*``
primitive combined once with the initial value (so the reduce_* lowerings, with
their kernel gaps and NaN semantics, apply), and ``reduce_window`` keeps its
pooling form (:mod:`jax2onnx_lax.windows`). Any other reducer (``a * b + b``,
an argmax carrying values and indices, two operands ...) is folded as XLA's CPU
backend folds it, since for a reducer that is not associative the order is the
result:

* a window: from the initial value, ``acc = f(acc, x)`` over the window's
  elements in row-major order of the window offsets; padding and base-dilation
  holes are skipped (they take no part, not even as the initial value);
* a reduction: ``acc = f(acc, x)`` over the reduced elements in row-major order
  of the reduced axes. A one-operand reduction with a reduced axis longer than
  32 is first cut into windows of ``min(n, 32)`` along every reduced axis
  (``"SAME"`` padding, each window folded as above) and the window results
  reduced again, as XLA's tree-reduction rewrite does. An axis of symbolic size
  is folded in one pass (XLA's cut depends on the run-time size), which is
  XLA's order up to 32 elements.

The reducer is the equation's scalar jaxpr applied elementwise (``jax.vmap``);
a fold of at most 8 steps is unrolled, a longer one is a ``lax.scan`` (an ONNX
``Loop``). Complex operands fold the same way, their arithmetic lowered by the
complex rules; complex sums over windows are the real window sum of both parts.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr, jaxpr_as_fun

from jax2onnx.plugin import Family, case, is_symbolic

family = Family("lax")

_TREE = 32  # XLA CPU's tree-reduction window
_UNROLL = 8  # longer folds are a Loop
_C = [np.complex64]
_HALF_VARIANTS = ["f32", "f64", "bf16"]


def _elementwise(closed, ndim):
    """The scalar reducer ``closed`` applied elementwise to arrays of rank ``ndim``."""
    fn = jaxpr_as_fun(closed)
    for _ in range(ndim):
        fn = jax.vmap(fn)
    return fn


def _step(body, accs, x, ok):
    new = body(*accs, *x)
    return new if ok is None else [jnp.where(ok, n, a) for n, a in zip(new, accs, strict=True)]


def _fold(body, accs, xs, valid=None):
    """``accs = body(*accs, *x)`` for each ``x`` along axis 0 of ``xs`` in order, kept
    only where ``valid`` (same leading axis) holds: unrolled up to 8 steps, else a scan."""
    m = xs[0].shape[0]
    if not is_symbolic(m) and m <= _UNROLL:
        steps = [[x[i] for x in xs] for i in range(m)]
        return _unrolled(body, accs, steps, None if valid is None else list(valid))

    def scanned(accs, item):
        x, ok = item
        return _step(body, accs, x, ok), None

    accs, _ = lax.scan(scanned, list(accs), (list(xs), valid))
    return accs


def _unrolled(body, accs, steps, valid=None):
    for i, x in enumerate(steps):
        accs = _step(body, accs, x, None if valid is None else valid[i])
    return list(accs)


def _no_pad(v) -> bool:
    return not is_symbolic(v) and v <= 0


def _padded(xs, padding, base):
    """The operands dilated and padded (a hole or pad holds zero) and the mask of real
    elements, None when there are no holes or pads."""
    config = [(lo, hi, b - 1) for (lo, hi), b in zip(padding, base, strict=True)]
    if all(not is_symbolic(v) and v == 0 for c in config for v in c):
        return list(xs), None
    padded = [lax.pad(x, jnp.zeros((), x.dtype), config) for x in xs]
    if all(_no_pad(lo) and _no_pad(hi) and i == 0 for lo, hi, i in config):
        return padded, None
    return padded, lax.pad(jnp.ones(xs[0].shape, np.bool_), np.False_, config)


def _window_fold(*args, body, out_shape, window, strides, padding, base, dilation):
    """reduce_window of operands ``args[:n]`` from initial values ``args[n:]``."""
    n = len(args) // 2
    xs, valid = _padded(args[:n], padding, base)
    offsets = list(itertools.product(*(range(w) for w in window)))

    def taken(a, k):
        starts = [j * d for j, d in zip(k, dilation, strict=True)]
        ends = [
            s if not is_symbolic(o) and o == 0 else s + (o - 1) * t + 1
            for s, o, t in zip(starts, out_shape, strides, strict=True)
        ]
        return lax.slice(a, starts, ends, strides)

    accs = [jnp.broadcast_to(i, out_shape) for i in args[n:]]
    steps = [[taken(x, k) for x in xs] for k in offsets]
    masks = None if valid is None else [taken(valid, k) for k in offsets]
    if len(offsets) <= _UNROLL:
        return _unrolled(body, accs, steps, masks)
    stacked = [jnp.stack(column) for column in zip(*steps, strict=True)]
    return _fold(body, accs, stacked, None if masks is None else jnp.stack(masks))


def _tiles(x, init, body, dims):
    """One step of XLA's tree reduction: windows of ``min(n, 32)`` with equal strides and
    "SAME" padding along the reduced ``dims``, each folded (a reshape into tiles)."""
    window = [min(d, _TREE) if a in dims else 1 for a, d in enumerate(x.shape)]
    pads = lax.padtype_to_pads(x.shape, window, window, "SAME")
    (x,), valid = _padded([x], pads, [1] * x.ndim)
    tiles = [x.shape[a] // w for a, w in enumerate(window)]
    split = [s for t, w in zip(tiles, window, strict=True) for s in (t, w)]
    order = [2 * a + 1 for a in range(x.ndim)] + [2 * a for a in range(x.ndim)]

    def arrange(a):
        return lax.transpose(a.reshape(split), order).reshape(math.prod(window), *tiles)

    mask = None if valid is None else arrange(valid)
    (out,) = _fold(body, [jnp.broadcast_to(init, tiles)], [arrange(x)], mask)
    return out


def _reduce_fold(*args, closed, dims):
    """reduce of operands ``args[:n]`` from initial values ``args[n:]`` (module docstring)."""
    n = len(args) // 2
    xs, inits = list(args[:n]), args[n:]
    shape = xs[0].shape
    dims = sorted(dims)
    static = not any(is_symbolic(shape[d]) for d in dims)
    while n == 1 and static and any(xs[0].shape[d] > _TREE for d in dims):
        xs = [_tiles(xs[0], inits[0], _elementwise(closed, xs[0].ndim), dims)]
    kept = [d for d in range(len(shape)) if d not in dims]
    kept_shape = tuple(xs[0].shape[d] for d in kept)
    size = math.prod(xs[0].shape[d] for d in dims)
    flat = [lax.transpose(x, (*dims, *kept)).reshape(size, *kept_shape) for x in xs]
    accs = [jnp.broadcast_to(i, kept_shape) for i in inits]
    return _fold(_elementwise(closed, len(kept_shape)), accs, flat)


# -- reduce ----------------------------------------------------------------------------

_MONOIDS = {
    "add": (lax.reduce_sum_p, lax.add),
    "mul": (lax.reduce_prod_p, lax.mul),
    "max": (lax.reduce_max_p, lax.max),
    "min": (lax.reduce_min_p, lax.min),
    "and": (lax.reduce_and_p, lax.bitwise_and),
    "or": (lax.reduce_or_p, lax.bitwise_or),
    "xor": (lax.reduce_xor_p, lax.bitwise_xor),
}
_NO_SHARDING = {lax.reduce_and_p, lax.reduce_or_p, lax.reduce_xor_p}


def _monoids(jaxpr, n):
    """The monoid of each operand when output k is ``op(acc_k, x_k)`` with one of
    ``_MONOIDS``' ops (either argument order), else None."""
    body = getattr(jaxpr, "jaxpr", jaxpr)
    produced = {id(v): e for e in body.eqns for v in e.outvars}
    names = []
    for k, out in enumerate(body.outvars):
        eqn = produced.get(id(out))
        wanted = {id(body.invars[k]), id(body.invars[n + k])}
        if eqn is None or eqn.primitive.name not in _MONOIDS:
            return None
        if {id(v) for v in eqn.invars} != wanted or len(eqn.invars) != 2:
            return None
        names.append(eqn.primitive.name)
    return names


def _monoid_reduce(x, init, *, prim, combine, axes):
    kw = {} if prim in _NO_SHARDING else {"out_sharding": None}
    return combine(prim.bind(x, axes=axes, **kw), init)


def _reduce(ctx, *operands, jaxpr, dimensions):
    n = len(operands) // 2
    names = _monoids(jaxpr, n)
    if names is None:
        return ctx.decompose(_reduce_fold, *operands, closed=jaxpr, dims=tuple(dimensions))
    outs = []
    for k, name in enumerate(names):
        prim, combine = _MONOIDS[name]
        fn = functools.partial(_monoid_reduce, prim=prim, combine=combine, axes=tuple(dimensions))
        closed = ctx.trace(fn, ctx.avals_in[k], ctx.avals_in[n + k])
        (out,) = ctx.inline(closed, [operands[k], operands[n + k]])
        outs.append(out)
    return outs


def _user(x, init, dims=(0,)):
    return lax.reduce(x, init, lambda a, b: a * b + b, dims)


def _argmax(x, i):
    """Values and indices reduced together: the larger value, the first index on ties."""

    def pick(a, b):
        take = (a[0] > b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))
        return lax.select(take, a[0], b[0]), lax.select(take, a[1], b[1])

    return lax.reduce((x, i), (-jnp.inf, np.int32(2**31 - 1)), pick, (1,))


_TIED = np.array([[1.0, 3.0, 3.0, -2.0], [0.5, 0.5, 0.5, 0.5], [-1.0, 2.0, 7.0, 7.0]])
_ROW = np.arange(4, dtype=np.int32)[None].repeat(3, 0)


@family.lowering(
    "reduce",
    cases=lambda: [
        case("add_init_one", lambda x: lax.reduce(x, 1.0, lax.add, (0,)), [("B", 4)]),
        case(
            "max_and_sum_pair",
            lambda x, y: lax.reduce(
                (x, y),
                (-jnp.inf, np.int32(0)),
                lambda a, b: (lax.max(a[0], b[0]), lax.add(a[1], b[1])),
                (1,),
            ),
            [("B", 5), ("B", 5)],
            dtypes=[None, np.int32],
        ),
        case(
            "mul_int",
            lambda x: lax.reduce(x, np.int32(2), lax.mul, (0, 1)),
            [np.array([[1, 2], [3, -1]], np.int32)],
        ),
        case(
            "min_runtime_init",
            lambda x, i: lax.reduce(x, i, lax.min, (0,)),
            [(3, 4), ()],
            variants=_HALF_VARIANTS,
        ),
        case(
            "or_bool",
            lambda x: lax.reduce(x, False, lax.bitwise_or, (1,)),
            [np.array([[True, False], [False, False]])],
        ),
        case("user_reducer", lambda x: _user(x, 0.5), [(5, 3)], input_range=(-1.0, 1.0)),
        case(
            "user_reducer_half",
            lambda x: _user(x, jnp.asarray(0.5, x.dtype), (0, 2)),
            [(2, 3, 2)],
            variants=["bf16"],
            input_range=(-1.0, 1.0),
        ),
        case(
            "user_reducer_loop",
            lambda x: _user(x, 0.25, (1,)),
            [(2, 20)],
            input_range=(-1.0, 1.0),
            counts={"Loop": 1},
        ),
        case(
            "user_reducer_tree",  # axes over 32 are cut into windows of 32 first, as XLA does
            lambda x: _user(x, 0.25, (0, 2)),
            [(40, 2, 3)],
            input_range=(-1.0, 1.0),
        ),
        case(
            "user_reducer_symbolic",
            lambda x: _user(x, 0.25, (0,)),
            [("B", 3)],
            input_range=(-1.0, 1.0),
        ),
        case("user_reducer_empty", lambda x: _user(x, 0.5, (1,)), [(3, 0)], no_unused_inputs=False),
        case("user_argmax", _argmax, [_TIED, _ROW], variants=["f32", "f64"]),
    ],
)
def reduce(ctx, *operands, jaxpr, dimensions, **_):
    """Generic ``lax.reduce``: a monoid per operand (add, mul, max, min, and, or, xor) is
    the matching reduce_* primitive, combined once with the init value; any other reducer
    is folded in XLA's order (module docstring)."""
    return _reduce(ctx, *operands, jaxpr=jaxpr, dimensions=dimensions)


_TIES = np.array([[2 + 1j, -1 + 5j, 2 + 3j], [2 - 4j, 1 + 0j, -1 + 2j]], np.complex64)


@family.lowering(
    "reduce",
    values="complex",
    cases=lambda: [
        case("complex_user_reducer", lambda z: _user(z, 0j), [(4, 3)], dtypes=_C),
        case(
            "complex_user_reducer_loop",
            lambda z: _user(z, 0.5 + 0.25j, (1, 2)),
            [(2, 3, 4)],
            dtypes=_C,
            input_range=(-1.0, 1.0),
        ),
        case(
            "complex_user_reducer_tree",
            lambda z: _user(z, 0.25j, (0,)),
            [(35, 2)],
            dtypes=_C,
            input_range=(-1.0, 1.0),
        ),
        case(
            "complex_add_init", lambda z: lax.reduce(z, 1 - 2j, lax.add, (0,)), [(4, 3)], dtypes=_C
        ),
        case("complex_mul_init", lambda z: lax.reduce(z, 2j, lax.mul, (1,)), [(2, 5)], dtypes=_C),
        case(
            "complex_max_init",
            lambda z: lax.reduce(z, jnp.asarray(2, z.dtype), lax.max, (1,)),
            [_TIES],
        ),
    ],
)
def complex_reduce(ctx, *operands, jaxpr, dimensions, **_):
    """Complex ``lax.reduce``: as the real rule, the complex reduce_* or the fold."""
    return _reduce(ctx, *operands, jaxpr=jaxpr, dimensions=dimensions)


# -- reduce_window ---------------------------------------------------------------------


def _window_params(ctx, window_dimensions, window_strides, padding, base_dilation, **rest):
    return dict(
        out_shape=tuple(ctx.avals_out[0].shape),
        window=tuple(window_dimensions),
        strides=tuple(window_strides),
        padding=tuple(tuple(p) for p in padding),
        base=tuple(base_dilation),
        dilation=tuple(rest["window_dilation"]),
    )


def window_fold(ctx, *args, jaxpr, consts, **params):
    """reduce_window with the reducer ``jaxpr`` folded over each window (module docstring);
    the real rule's form for reducers that are not one ONNX op and for several operands."""
    closed = ClosedJaxpr(jaxpr, list(consts))
    body = _elementwise(closed, len(ctx.avals_out[0].shape))
    return ctx.decompose(_window_fold, *args, body=body, **_window_params(ctx, **params))


def _extremum_fold(x, *, largest, **params):
    init = jnp.asarray(-jnp.inf if largest else jnp.inf, x.dtype)
    combine = lax.max if largest else lax.min
    (out,) = _window_fold(x, init, body=lambda a, b: [combine(a, b)], **params)
    return out


def _bind(prim, window, strides, padding="VALID", **kw):
    def fn(x):
        pads = padding
        if isinstance(padding, str):
            pads = lax.padtype_to_pads(x.shape, window, strides, padding)
        return prim.bind(
            x,
            window_dimensions=tuple(window),
            window_strides=tuple(strides),
            padding=tuple(pads),
            base_dilation=tuple(kw.get("base", (1,) * len(window))),
            window_dilation=tuple(kw.get("dilation", (1,) * len(window))),
        )

    return fn


_WINDOW_TIES = np.array(
    [[2 + 1j, 2 + 3j, -1 + 5j, 2 - 4j, 1 + 0j], [-np.inf - 5j, 0j, 3 + 1j, 3 - 1j, 2j]],
    np.complex64,
)


def _extremum_cases(kind, prim):
    return [
        case(f"complex_{kind}", _bind(prim, (1, 2), (1, 1)), [("B", 5)], dtypes=_C),
        case(f"complex_{kind}_ties", _bind(prim, (2, 2), (1, 1), "SAME"), [_WINDOW_TIES]),
        case(
            f"complex_{kind}_dilated",
            _bind(prim, (2, 2), (1, 2), [(1, 0), (0, 2)], base=(2, 1), dilation=(1, 2)),
            [(3, 5)],
            dtypes=_C,
        ),
    ]


def _complex_extremum(largest):
    def rule(ctx, x, **params):
        params = _window_params(ctx, **params)
        return ctx.decompose(_extremum_fold, x, largest=largest, **params)

    rule.__name__ = f"complex_reduce_window_{'max' if largest else 'min'}"
    rule.__doc__ = (
        "The lexicographic maximum (minimum) folded over each window from -inf (+inf), as XLA does."
    )
    return rule


for _prim, _largest in ((lax.reduce_window_max_p, True), (lax.reduce_window_min_p, False)):
    family.lowering(
        _prim,
        values="complex",
        cases=lambda p=_prim, largest=_largest: _extremum_cases("max" if largest else "min", p),
    )(_complex_extremum(_largest))


@family.lowering(
    lax.reduce_window_sum_p,
    values="complex",
    cases=lambda: [
        case("complex_sum", _bind(lax.reduce_window_sum_p, (1, 3), (1, 2)), [("B", 7)], dtypes=_C),
        case(
            "complex_sum_padded",
            _bind(lax.reduce_window_sum_p, (2, 2), (2, 1), "SAME", base=(1, 2), dilation=(2, 1)),
            [(5, 4)],
            dtypes=_C,
        ),
    ],
)
def complex_reduce_window_sum(ctx, x, **params):
    """Both parts summed by the real window sum: the parts axis is one more axis with a
    window of 1."""

    def summed(p):
        extended = {k: (*v, (0, 0) if k == "padding" else 1) for k, v in params.items()}
        return lax.reduce_window_sum_p.bind(p, **extended)

    return ctx.decompose(summed, x, stored=True)


def _generic(init, fn, window, strides, padding="VALID", **kw):
    return lambda x: lax.reduce_window(x, init, fn, window, strides, padding, **kw)


def _pool_argmax(x, i, window=(2, 2), strides=(2, 2), padding="VALID"):
    """Max pooling that carries each window's first largest value's index."""

    def pick(a, b):
        take = (a[0] > b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))
        return lax.select(take, a[0], b[0]), lax.select(take, a[1], b[1])

    init = (jnp.asarray(-jnp.inf, x.dtype), np.int32(-1))
    return lax.reduce_window((x, i), init, pick, window, strides, padding)


_GRID = np.arange(20, dtype=np.int32).reshape(4, 5)
_POOL = np.array(
    [[1.0, 3.0, 3.0, 0.0, 2.0], [3.0, -1.0, 2.0, 2.0, 5.0], [0.0, 0.0, 4.0, 4.0, 1.0], [1.0] * 5]
)


@family.lowering(
    lax.reduce_window_p,
    values="complex",
    cases=lambda: [
        case(
            "complex_user_reducer",
            _generic(0.5j, lambda a, b: a * b + b, (2, 2), (1, 1), "SAME"),
            [(3, 4)],
            dtypes=_C,
            input_range=(-1.0, 1.0),
        ),
        case(
            "complex_user_reducer_loop",
            _generic(1 + 0j, lambda a, b: a * b - a, (3, 3), (2, 1), [(1, 1), (0, 2)]),
            [("B", 5)],
            dtypes=_C,
            input_range=(-1.0, 1.0),
        ),
        case("complex_add_init", _generic(1 + 1j, lax.add, (2,), (1,)), [(5,)], dtypes=_C),
        case("complex_mul", _generic(1 + 0j, lax.mul, (1, 2), (1, 2)), [(2, 6)], dtypes=_C),
    ],
)
def complex_reduce_window(ctx, *args, jaxpr, consts, **params):
    """Complex reduce_window: its reducer folded over each window (module docstring)."""
    return window_fold(ctx, *args, jaxpr=jaxpr, consts=consts, **params)


family.add_cases(
    lax.reduce_window_p,
    lambda: [
        case(
            "user_reducer",
            lambda x: lax.reduce_window(
                x, jnp.asarray(0.5, x.dtype), lambda a, b: a * b + b, (3,), (1,), "SAME"
            ),
            [(6,)],
            input_range=(-1.0, 1.0),
            variants=_HALF_VARIANTS,
        ),
        case(
            "user_reducer_loop",
            _generic(0.5, lambda a, b: a * b + b, (3, 3), (1, 1), "SAME", base_dilation=(2, 1)),
            [(3, "B")],
            input_range=(-1.0, 1.0),
        ),
        case("variadic_argmax", _pool_argmax, [_POOL, _GRID], variants=["f32", "f64"]),
        case(
            "variadic_argmax_same",
            lambda x, i: _pool_argmax(x, i, (3, 3), (2, 2), "SAME"),
            [("B", 5), ("B", 5)],
            dtypes=[None, np.int32],
        ),
        case(
            "variadic_sum_and_max",
            lambda x, y: lax.reduce_window(
                (x, y),
                (0.0, -jnp.inf),
                lambda a, b: (a[0] + b[0], lax.max(a[1], b[1])),
                (2, 2),
                (1, 1),
                "VALID",
            ),
            [(3, 4), (3, 4)],
        ),
    ],
)


register = family.register
