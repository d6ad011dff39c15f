"""cond, while and scan as If and Loop.

Every branch or loop body is a jaxpr lowered into an ONNX subgraph. Operands
and constants of the enclosing graph are read inside bodies through ONNX's
outer scope, so only loop-carried values pass through a body's inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.core import ShapedArray

from jax2onnx.plugin import Family, case, is_symbolic, stored_type
from jax2onnx_lax import _unroll

family = Family("lax")


_SCALAR_BOOL = ShapedArray((), np.bool_)


def _branch_graph(parent: Any, name: str, closed: Any, operands: Sequence[Any], avals: Any):
    """One If branch: ``closed`` lowered on operands read from the outer scope."""
    body = parent.subgraph(name)
    return body.finish(body.inline(closed, list(operands)), avals)


def _select_branch(ctx: Any, index: Any, first: int, branches, operands, avals) -> list[Any]:
    """``branches[first:]`` chosen by ``index``: If(index == first) nested in the else branch.

    Any index outside ``[first, n - 1)`` runs the last branch, like XLA's
    ``case`` (``lax.switch`` clamps before it gets here).
    """
    if first == len(branches) - 1:
        return list(ctx.inline(branches[first], list(operands)))
    then_graph = _branch_graph(ctx, f"branch{first}", branches[first], operands, avals)
    else_scope = ctx.subgraph(f"branches{first + 1}_")
    rest = _select_branch(else_scope.ctx, index, first + 1, branches, operands, avals)
    else_graph = else_scope.finish(rest, avals)
    pred = ctx.op.Equal(index, np.asarray(first, np.int32))
    outs = ctx.op.If(pred, then_branch=then_graph, else_branch=else_graph, _outputs=len(avals))
    return list(outs) if len(avals) > 1 else [outs]


@family.lowering(lax.cond_p, values="any")
def cond(ctx, index, *operands, branches, **_):
    """cond -> If; more than two branches nest Ifs, one equality test per level.

    Each branch is its own subgraph, so only the taken branch runs (a Where
    over all branches would evaluate every one of them). A constant index
    (``platform_dependent``'s) inlines the one branch it selects.
    """
    avals = ctx.avals_out
    if not avals:  # nothing flows out: a branch without results has no effect to export
        return []
    if len(branches) == 1:
        return ctx.inline(branches[0], list(operands))
    if index.const_value is not None:
        i = int(index.const_value.numpy())
        return ctx.inline(branches[i if 0 <= i < len(branches) else -1], list(operands))
    if ctx.avals_in[0].dtype != np.int32:
        index = ctx.cast(index, np.int32)  # a bool index takes branch 1 on True
    return _select_branch(ctx, index, 0, branches, operands, avals)


def _body_inputs(body: Any, avals: Sequence[Any]) -> tuple[Any, Any, list[Any]]:
    """A Loop body's iteration number, its condition and its carries, fully typed."""
    iteration = body.add_input(np.int64, ())
    condition = body.add_input(np.bool_, ())
    return iteration, condition, [body.add_input(a.dtype, a.shape) for a in avals]


def _any(ctx: Any, pred: Any) -> Any:
    """A batched predicate reduced to one bool (``reduce_or``, False when empty)."""
    count = ctx.op.ReduceSum(ctx.cast(pred, np.int32), keepdims=0)
    return ctx.cast(count, np.bool_)


@family.lowering(lax.while_p, values="any")
def while_(ctx, *args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    """while -> one Loop without a trip count.

    The condition is evaluated once before the Loop and again at the end of
    the body on the new carries. A batched predicate (``jax.vmap`` of a
    while) is carried along: the Loop runs while any element is true and the
    body updates only the carries whose predicate holds, as JAX's own
    lowering does. Inside a loop body, a while whose number of steps is
    known at conversion (a counter from a constant to a bound, as in
    Equinox's bounded loops) and small is written out step by step instead
    (:mod:`jax2onnx_lax._unroll`).
    """
    cond_consts = list(args[:cond_nconsts])
    body_consts = list(args[cond_nconsts : cond_nconsts + body_nconsts])
    carries = list(args[cond_nconsts + body_nconsts :])
    if ctx.in_body:
        steps = _unroll.counted_while(cond_jaxpr, body_jaxpr, cond_consts, body_consts, carries)
        if steps is not None and _unroll.within_limit(body_jaxpr, steps):
            for _ in range(steps):
                carries = list(ctx.inline(body_jaxpr, body_consts + carries))
            return carries
    avals = list(ctx.avals_in[cond_nconsts + body_nconsts :])
    pred_aval = cond_jaxpr.out_avals[0]
    batched = bool(pred_aval.shape)

    (first,) = ctx.inline(cond_jaxpr, cond_consts + carries)
    body = ctx.subgraph("while_body")
    _, _, state = _body_inputs(body, [pred_aval, *avals] if batched else avals)
    new = body.inline(body_jaxpr, body_consts + state[batched:])
    if batched:
        active, state = state[0], state[1:]
        new = [_where_active(body.ctx, active, a, n, s) for a, n, s in zip(avals, new, state)]
    (again,) = body.inline(cond_jaxpr, cond_consts + new)
    if batched:
        outputs, out_avals = [_any(body.ctx, again), again, *new], [_SCALAR_BOOL, pred_aval]
        start, loop_in = _any(ctx, first), [first, *carries]
    else:
        outputs, out_avals = [again, *new], [_SCALAR_BOOL]
        start, loop_in = first, carries
    graph = body.finish(outputs, [*out_avals, *avals])
    outs = ctx.op.Loop(None, start, *loop_in, body=graph, _outputs=len(loop_in))
    outs = list(outs) if len(loop_in) > 1 else [outs]
    return outs[batched:]


def _where_active(ctx: Any, active: Any, aval: Any, new: Any, old: Any) -> Any:
    """The new carry where the (leading-axes) predicate holds, the old one elsewhere."""
    rank = len(active.shape)
    ndim = len(stored_type(aval.dtype, aval.shape)[1])  # a key carry is stored as its key data
    if ndim > rank:
        active = ctx.op.Unsqueeze(active, ctx.i64(list(range(rank, ndim))))
    return ctx.op.Where(active, new, old)


@family.lowering(lax.scan_p, values="any")
def scan(ctx, *args, jaxpr, length, reverse, num_consts, num_carry, **_):
    """scan -> Loop with trip count ``length``; ys are the Loop's scan outputs.

    Step ``i`` reads ``xs[i]`` (``xs[length - 1 - i]`` when ``reverse``) with
    a Gather on the iteration number; a reverse scan's stacked ys come out in
    iteration order and are flipped with one Slice of step -1. Inside a loop
    body (or a branch), a short scan of a small body (the limits of
    :mod:`jax2onnx_lax._unroll`, as Runge-Kutta stages and fixed Newton
    iterations are) is unrolled instead: no nested Loop to run per step of
    the enclosing one. JAX's ``unroll`` parameter only tunes XLA.
    """
    consts = list(args[:num_consts])
    carries = list(args[num_consts : num_consts + num_carry])
    xs = list(args[num_consts + num_carry :])
    if ctx.in_body and _unroll.within_limit(jaxpr, length) and length > 0:
        return _unroll_scan(ctx, jaxpr, length, reverse, consts, carries, xs, num_carry)
    carry_avals = ctx.avals_in[num_consts : num_consts + num_carry]
    y_avals = [ShapedArray(a.shape[1:], a.dtype) for a in ctx.avals_out[num_carry:]]
    trips = ctx.op.Squeeze(ctx.dim(length)) if is_symbolic(length) else ctx.i64(length)

    body = ctx.subgraph("scan_body")
    iteration, keep_going, state = _body_inputs(body, carry_avals)
    step = iteration
    if reverse and xs:
        step = body.op.Sub(ctx.op.Sub(trips, np.asarray(1, np.int64)), iteration)
    x_t = [body.op.Gather(x, step, axis=0) for x in xs]
    outs = body.inline(jaxpr, consts + state + x_t)
    graph = body.finish([keep_going, *outs], [_SCALAR_BOOL, *carry_avals, *y_avals])
    n_out = num_carry + len(y_avals)
    # a Loop needs its condition input when nothing is carried (empty trailing inputs drop)
    keep = None if carries else ctx.const(np.array(True))
    results = ctx.op.Loop(trips, keep, *carries, body=graph, _outputs=n_out)
    results = list(results) if n_out > 1 else [results]
    if reverse:
        results[num_carry:] = [_flip(ctx, y) for y in results[num_carry:]]
    return results


def _unroll_scan(ctx, closed, length, reverse, consts, carries, xs, num_carry):
    """The scan's body inlined once per step; ys stacked with one Concat each."""
    steps = range(length - 1, -1, -1) if reverse else range(length)
    stacked: dict[int, list[Any]] = {}
    for t in steps:
        x_t = [ctx.op.Gather(x, np.asarray(t, np.int64), axis=0) for x in xs]
        outs = ctx.inline(closed, consts + carries + x_t)
        carries = outs[:num_carry]
        stacked[t] = [ctx.op.Unsqueeze(y, ctx.i64([0])) for y in outs[num_carry:]]
    ys = [
        ctx.op.Concat(*(stacked[t][k] for t in range(length)), axis=0)
        for k in range(len(stacked[0]))
    ]
    return [*carries, *ys]


def _flip(ctx: Any, y: Any) -> Any:
    """Reverse axis 0 with one Slice of step -1."""
    start, end = ctx.i64([-1]), ctx.i64([np.iinfo(np.int64).min])
    return ctx.op.Slice(y, start, end, ctx.i64([0]), ctx.i64([-1]))


# -- cases -------------------------------------------------------------------

_W = np.linspace(-0.5, 0.5, 9, dtype=np.float32).reshape(3, 3)


def _both_ways(x):
    """The same cond once with a predicate and once with its opposite: both branches run."""

    def yes(v):
        return jnp.tanh(v)

    def no(v):
        return v * 2.0 + 1.0

    return lax.cond(x.sum() > 0, yes, no, x), lax.cond(x.sum() <= 0, yes, no, x)


def _switch_all(i, x):
    branches = [lambda v: v * 2.0, jnp.tanh, lambda v: v - 1.0]
    return [lax.switch(i[k], branches, x) for k in range(i.shape[0])]


def _pytree_cond(p, x):
    def yes(v):
        return {"a": v @ _W, "b": (v + 1.0, v.sum())}

    def no(v):
        return {"a": v * 3.0, "b": (v, -v.sum())}

    return lax.cond(p.sum() > 0, yes, no, x)


def _nested_cond(x):
    def outer(v):
        return lax.cond(v.sum() > 1.0, lambda u: u * 2.0, jnp.tanh, v)

    return lax.cond(x.sum() > 0, outer, lambda v: v - 1.0, x)


_INDEX = np.array([-1, 0, 1, 2, 7], np.int32)


def _raw_cond(i, x):
    """cond bound directly: an index outside the branches takes the last one, as in XLA."""
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    branches = tuple(jax.make_jaxpr(f)(spec) for f in (lambda v: v * 2.0, jnp.tanh, jnp.negative))
    index = [lax.index_in_dim(i, k, keepdims=False) for k in range(i.shape[0])]
    return [lax.cond_p.bind(j, x, branches=branches)[0] for j in index]


family.add_cases(
    lax.cond_p,
    lambda: [
        case(
            "cond_both_branches",
            _both_ways,
            [("B", 3)],
            expect=["If:Bx3"],
        ),
        case("switch_clamps_index", _switch_all, [_INDEX, ("B", 3)], counts={"If": 10}),
        case("out_of_range_index", _raw_cond, [_INDEX, ("B", 3)]),
        case("pytree_and_constants", _pytree_cond, [(3,), ("B", 3)]),
        case(
            "two_operands_int",
            lambda x, n: lax.cond(
                n.sum() > 2, lambda a, b: (a * 2.0, b + 1), lambda a, b: (a, b * 3), x, n
            ),
            [("B", 2), np.array([1, 2], np.int32)],
        ),
        case("nested", _nested_cond, [("B", 3)], counts={"If": 2}),
        case(  # a branch output listed twice must stay two ONNX outputs (an Identity)
            "branch_returns_one_value_twice",
            lambda x: (lambda ab: ab[0] * 2.0 + ab[1])(
                lax.cond(
                    x.sum() > 0,
                    lambda v: (jnp.exp(v),) * 2,
                    lambda v: (jnp.sin(v), jnp.cos(v)),
                    x,
                )
            ),
            [("B", 3)],
        ),
        case(
            "vmap_batched_predicate",
            jax.vmap(lambda x: lax.cond(x.sum() > 0, jnp.tanh, lambda v: v * 2.0, x)),
            [("B", 3)],
            counts={"If": 0},
        ),
        case(
            "vmap_shared_predicate",
            lambda p, x: jax.vmap(lambda r: lax.cond(p.sum() > 0, jnp.tanh, lambda v: -v, r))(x),
            [(3,), ("B", 3)],
            counts={"If": 1},
        ),
    ],
)


def _count_to_ten(x):
    return lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.1), (0, x))


def _halve_until_small(x):
    def body(c):
        v, steps, _ = c
        v = v * 0.5
        return v, steps + 1, (v * v).sum() >= 1.0

    return lax.while_loop(lambda c: c[2], body, (x, 0, True))


def _recurrent(h):
    def body(c):
        i, h, acc = c
        h = jnp.tanh(h @ _W + 0.1)
        return i + 1, h, acc + h

    return lax.while_loop(lambda c: c[0] < 3, body, (0, h, jnp.zeros_like(h)))


def _inner_while(start: int, stop: int):
    """A while counting from ``start`` to ``stop`` inside a loop of data-dependent length."""

    def fn(x):
        def inner(c):
            k, v = c
            return k + 1, jnp.tanh(v * 1.5 + k.astype(v.dtype))

        def outer(i, v):
            begin = start if start is not None else i  # None: the counter starts at the step
            return lax.while_loop(lambda c: c[0] < stop, inner, (begin, v))[1]

        return lax.fori_loop(0, (x.sum() > -100).astype(jnp.int32) + 2, outer, x)

    return fn


family.add_cases(
    lax.while_p,
    lambda: [
        case("counter_and_float", _count_to_ten, [("B", 3)], expect=["Loop"], counts={"Loop": 1}),
        case(
            "fori_dynamic_trip_count",
            lambda n, x: lax.fori_loop(0, n, lambda i, c: c * 0.9 + 1.0, x),
            [np.array(4, np.int32), ("B", 3)],
            counts={"Loop": 1},
        ),
        case(
            "int64_trip_count",
            lambda n, x: lax.fori_loop(jnp.int64(0), n, lambda i, c: c * 0.5 + i, x),
            [np.array(3, np.int64), (2,)],
            variants=["f64"],
        ),
        case("bool_carry_data_dependent", _halve_until_small, [("B", 3)], input_range=(1.0, 9.0)),
        case("several_arrays_and_consts", _recurrent, [("B", 3)]),
        case(
            "vmap_batched_predicate",
            jax.vmap(lambda x: lax.while_loop(lambda c: c < 5.0, lambda c: c * 1.5 + 0.1, x)),
            [("B",)],
            input_range=(0.1, 4.0),
        ),
        # a counted while inside a loop body is written out: 4 steps; with 0 steps the
        # outer body returns its carry unchanged and no Loop is left at all
        case("counted_inner_unrolled", _inner_while(0, 4), [("B", 3)], counts={"Loop": 1}),
        case("counted_inner_no_steps", _inner_while(5, 3), [("B", 3)], counts={"Loop": 0}),
        case("uncounted_inner_stays", _inner_while(None, 4), [("B", 3)], counts={"Loop": 2}),
        case(
            "vmap_batched_trip_count",
            jax.vmap(lambda n, x: lax.fori_loop(0, n, lambda i, c: c * 0.5 + i, x)),
            [np.array([0, 3, 1, 5], np.int32), (4, 2)],
        ),
    ],
)


def _first(xs):
    return lax.index_in_dim(xs, 0, keepdims=False)


def _several(c, xs):
    def step(carry, x):
        a, b = carry
        a = a + x["u"]
        b = b * 0.9 + x["v"].sum()
        return (a, b), {"s": a * b, "t": x["v"] - a[0]}

    return lax.scan(step, (c, 0.0), xs)


def _heat(u):
    """Explicit heat equation: 40 Euler steps of u += r * laplacian(u), ends held at zero."""

    def step(_, u):
        inner = u[1:-1] + 0.2 * (u[2:] - 2.0 * u[1:-1] + u[:-2])
        zero = jnp.zeros((1,), u.dtype)
        return jnp.concatenate([zero, inner, zero])

    return lax.fori_loop(0, 40, step, u)


def _particles(x, v):
    """Leapfrog for unit masses on springs to the origin, 30 steps of dt = 0.05."""

    def step(_, state):
        x, v = state
        v = v - 0.025 * x
        x = x + 0.05 * v
        return x, v - 0.025 * x

    return lax.fori_loop(0, 30, step, (x, v))


def _scan_in_cond(x):
    def cumulative(v):
        return lax.scan(lambda c, r: (c + r, c * r), jnp.zeros(v.shape[1:], v.dtype), v)[1]

    return lax.cond(x.sum() > 0, cumulative, lambda v: v * 2.0, x)


def _nested_scan(xs):
    def row(c, r):
        inner, ys = lax.scan(lambda a, e: (a * 0.5 + e, a + e), c, r)
        return inner, ys.sum()

    return lax.scan(row, 0.0, xs)


family.add_cases(
    lax.scan_p,
    lambda: [
        case(
            "forward",
            lambda xs: lax.scan(lambda c, x: (c + x, c * x), jnp.zeros(xs.shape[1:], xs.dtype), xs),
            [("B", 3)],
            expect=["Loop"],
        ),
        case(
            "reverse",
            lambda xs: lax.scan(lambda c, x: (c * 0.5 + x, c - x), _first(xs), xs, reverse=True),
            [("B", 3)],
        ),
        case(  # nothing carried: the Loop still gets its condition input
            "no_carry",
            lambda xs: lax.scan(lambda c, x: (c, jnp.sin(x) * 2.0), None, xs)[1],
            [("B", 3)],
            expect=["Loop"],
        ),
        case(
            "pytree_carries_xs_ys",
            lambda c, u, v: _several(c, {"u": u, "v": v}),
            [(3,), ("B", 3), ("B", 2)],
        ),
        case(
            "length_without_xs",
            lambda x: lax.scan(lambda c, _: (c * 2.0 - 1.0, c), x, None, length=4),
            [("B", 2)],
        ),
        case(
            "unroll",
            lambda xs: lax.scan(lambda c, x: (jnp.tanh(c + x), c), _first(xs) * 0, xs, unroll=2),
            [(6, "B")],
        ),
        case("nested", _nested_scan, [(4, 12)], counts={"Loop": 2}),
        # a short inner scan inside a loop body is unrolled: no Loop per outer step
        case("nested_short_inner_unrolled", _nested_scan, [("B", 3)], counts={"Loop": 1}),
        case(
            "nested_short_inner_reverse",
            lambda xs: lax.scan(
                lambda c, r: lax.scan(lambda a, e: (a * 0.5 + e, a - e), c, r, reverse=True),
                0.0,
                xs,
            ),
            [("B", 4)],
            counts={"Loop": 1},
        ),
        case("scan_in_cond", _scan_in_cond, [("B", 3)]),
        case(
            "cond_in_scan",
            lambda xs: lax.scan(
                lambda c, x: (lax.cond(x.sum() > 0, jnp.tanh, lambda v: v - c, c + x), c), xs[0], xs
            ),
            [(5, 3)],
        ),
        case(
            "grad_of_scan",
            jax.grad(lambda xs: lax.scan(lambda c, x: (jnp.tanh(c * x), c * x), 1.0, xs)[1].sum()),
            [(5,)],
            counts={"Loop": 2},
        ),
        case(
            "fori_static_int_carry",
            lambda x: lax.fori_loop(0, 5, lambda i, c: (c[0] + i, c[1] * 2.0), (0, x)),
            [("B", 2)],
        ),
        case("heat_equation", _heat, [(16,)], input_range=(0.0, 1.0)),
        case("particles", _particles, [("B", 3), ("B", 3)]),
    ],
)


register = family.register
