"""When a loop inside a loop body is written out step by step instead of as a nested Loop.

A nested ``Loop`` costs, per step of the enclosing one, its own call plus a
node run per body node per inner step. A short inner loop of a small body (the
stages of a Runge-Kutta step, a fixed number of Newton iterations) is cheaper
written out: no call, no per-step bookkeeping, and the step number becomes a
constant the lowerings fold with (a Butcher tableau's row read at a known
stage is a constant). The limit keeps graphs from exploding: at most
``STEPS`` steps and ``EQUATIONS`` equations in all (steps times the body's
equations, nested ones counted).

A ``scan`` has its number of steps in its parameters. A ``while`` has one only
when its condition reads carries that start as constants and that the body
computes from themselves and constants (a counter and its bound, as
Equinox's and Diffrax's bounded loops have): those are evaluated here, with
JAX, to count the steps. Any other loop, and any count above the limit, stays
a Loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jax2onnx.plugin import is_symbolic

STEPS = 8
EQUATIONS = 512


def equations(jaxpr: Any) -> int:
    """The equations of ``jaxpr``, those of nested jaxprs counted too."""
    count = 0
    for eqn in jaxpr.eqns:
        count += 1
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", None)
                if inner is not None:
                    count += equations(getattr(inner, "jaxpr", inner))
    return count


def within_limit(closed: Any, steps: Any) -> bool:
    """``steps`` steps of ``closed`` are few and small enough to write out."""
    if is_symbolic(steps) or not 0 <= steps <= STEPS:
        return False
    return steps * equations(closed.jaxpr) <= EQUATIONS


def _needed(jaxpr: Any, wanted: Sequence[bool]) -> tuple[list[bool], list[Any] | None]:
    """Which inputs ``jaxpr``'s wanted outputs read, and the equations that compute them
    (None when one of those has effects: it cannot be evaluated here)."""
    live = {v for v, w in zip(jaxpr.outvars, wanted, strict=True) if w and not _literal(v)}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        if not any(v in live for v in eqn.outvars):
            continue
        if eqn.effects:
            return [], None
        kept.append(eqn)
        live.update(v for v in eqn.invars if not _literal(v))
    return [v in live for v in jaxpr.invars], kept[::-1]


def _literal(var: Any) -> bool:
    return hasattr(var, "val")


def _known(value: Any) -> np.ndarray | None:
    if value is None or value.const_value is None or value.is_graph_input():
        return None
    return value.const_value.numpy()


def _evaluate(closed: Any, eqns: list[Any], inputs: Sequence[Any], wanted: Sequence[bool]):
    """The wanted outputs of ``closed`` from the given inputs (None where not needed)."""
    jaxpr = closed.jaxpr
    env = dict(zip(jaxpr.constvars, closed.consts, strict=True))
    env.update(
        (v, np.asarray(x, v.aval.dtype))
        for v, x in zip(jaxpr.invars, inputs, strict=True)
        if x is not None
    )

    def read(var):
        return var.val if _literal(var) else env[var]

    for eqn in eqns:
        bound = eqn.primitive.get_bind_params(eqn.params)  # (subfuns, params) before JAX 0.7
        subfuns, params = bound if isinstance(bound, tuple) else ((), bound)
        outs = eqn.primitive.bind(*subfuns, *map(read, eqn.invars), **params)
        outs = outs if eqn.primitive.multiple_results else [outs]
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) if w else None for v, w in zip(jaxpr.outvars, wanted, strict=True)]


def counted_while(cond: Any, body: Any, cond_consts, body_consts, carries) -> int | None:
    """The steps of a ``while`` whose steps do not depend on the data (see the module),
    or None: a condition reading anything else, or more steps than could be written out."""
    if cond.out_avals[0].shape:  # a batched predicate (vmap of a while)
        return None
    n_cond, n_body, n = len(cond_consts), len(body_consts), len(carries)
    cond_reads, cond_eqns = _needed(cond.jaxpr, [True])
    if cond_eqns is None:
        return None
    counters = {k for k in range(n) if cond_reads[n_cond + k]}
    while True:  # the carries the counters are computed from, until none is added
        body_reads, body_eqns = _needed(body.jaxpr, [k in counters for k in range(n)])
        if body_eqns is None:
            return None
        more = {k for k in range(n) if body_reads[n_body + k]} - counters
        if not more:
            break
        counters |= more
    cond_inputs = [_known(v) if r else None for v, r in zip(cond_consts, cond_reads)]
    body_inputs = [_known(v) if r else None for v, r in zip(body_consts, body_reads)]
    state = [_known(carries[k]) if k in counters else None for k in range(n)]
    unknown = [
        *(r and x is None for r, x in zip(cond_reads, cond_inputs)),
        *(r and x is None for r, x in zip(body_reads, body_inputs)),
        *(state[k] is None for k in counters),
    ]
    if any(unknown):
        return None
    if any(_extended(v.aval.dtype) for v in [*cond.jaxpr.invars, *body.jaxpr.invars]):
        return None  # key arrays are stored as their key data: not evaluated here
    wanted = [k in counters for k in range(n)]
    # steps beyond what could be written out are not evaluated (each is JAX work)
    most = min(STEPS, EQUATIONS // max(1, equations(body.jaxpr)))
    for steps in range(most + 1):
        (go,) = _evaluate(cond, cond_eqns, [*cond_inputs, *state], [True])
        if not bool(np.asarray(go)):
            return steps
        state = _evaluate(body, body_eqns, [*body_inputs, *state], wanted)
    return None


def _extended(dtype: Any) -> bool:
    return jax.dtypes.issubdtype(dtype, jax.dtypes.extended)
