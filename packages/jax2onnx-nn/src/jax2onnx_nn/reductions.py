"""``jax.nn.logmeanexp`` as the macro primitive ``nn.logmeanexp``.

``logmeanexp(x) = logsumexp(x) - log(n)`` with ``n`` the number of reduced
elements. The lowering is JAX's max-shifted log-sum-exp (the same graph as
``nn.logsumexp``: ONNX ``ReduceLogSumExp`` is not shifted in ONNX Runtime and
overflows where JAX does not) minus ``log(n)``: a constant for static reduced
axes, ``Log(Cast(n))`` of the runtime dims for symbolic ones.

Batching is explicit (batch axis to the front, ``axis`` renumbered, the same
primitive bound again); the JVP is JAX's derivative of the original function.
Calls with ``where=`` (an array) are not intercepted: they run the original
function and convert through its decomposition.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from jax2onnx.plugin import Family, batch_at_front, case, is_symbolic
from jax2onnx_nn._util import FLOATS, canonical_axes, macro, shifted_axis
from jax2onnx_nn.softmax import shifted_logsumexp

family = Family("nn")
register = family.register

_logmeanexp = jax.nn.logmeanexp  # the original, captured before the interception patches it


def _hashable_axis(axis: Any) -> bool:
    return axis is None or isinstance(axis, (int, tuple))


def _logmeanexp_batching(args, dims, *, axis, where, keepdims):
    """Batch axis to the front, ``axis`` renumbered, the same primitive bound again."""
    (x,) = batch_at_front(args, dims)
    axis = shifted_axis(axis, x.ndim - 1)
    return logmeanexp_p.bind(x, axis=axis, where=where, keepdims=keepdims), 0


logmeanexp_p = macro(
    family,
    "logmeanexp",
    _logmeanexp,
    ["jax.nn.logmeanexp"],
    batching=_logmeanexp_batching,
    jvp="fallback",
    accept=lambda a: a["where"] is None and _hashable_axis(a["axis"]),
)

_EDGES = np.array(
    [[0.0, 1.0, 2.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, 1.0], [np.nan, 0.0, 1.0]]
    + [[1e30, 1e30, 0.0], [-1e30, -1e30, -1e30], [100.0, 0.0, -100.0]]
)
_MASK = np.array([[True, False, True, True], [False, False, True, False], [True] * 4])


@family.lowering(
    logmeanexp_p,
    min_opset=18,
    native_dtypes=FLOATS,
    cases=lambda: [
        case(
            "logmeanexp",
            lambda x: jax.nn.logmeanexp(x, axis=-1),
            [("B", 5)],
            expect=["ReduceMax -> Where -> Sub -> Exp -> ReduceSum -> Log -> Add -> Sub:B"],
        ),
        case(
            "logmeanexp_all",
            lambda x: jax.nn.logmeanexp(x),
            [("B", 3)],
            expect=["Log -> Add -> Sub"],
            counts={"ReduceMax": 1},
        ),
        case(
            "logmeanexp_keepdims",
            lambda x: jax.nn.logmeanexp(x, axis=(0, 2), keepdims=True),
            [(2, "B", 4)],
            counts={"ReduceMax": 1},
        ),
        case(
            "logmeanexp_symbolic_axis",
            lambda x: jax.nn.logmeanexp(x, axis=0),
            [("B", 4)],
            counts={"ReduceMax": 1},
        ),
        case(
            "logmeanexp_edges",
            lambda x: jax.nn.logmeanexp(x, axis=1),
            [_EDGES],
            variants=["f32", "f64", "bf16"],
        ),
        case(
            "logmeanexp_where",
            lambda x: jax.nn.logmeanexp(x, axis=1, where=_MASK),
            [(3, 4)],
        ),
        case(
            "logmeanexp_where_input",
            lambda x, m: jax.nn.logmeanexp(x, where=m > 0),
            [("B", 4), ("B", 4)],
        ),
        case(
            "logmeanexp_int",
            lambda x: jax.nn.logmeanexp(x, axis=1),
            [(3, 4)],
            dtypes=[np.int32],
        ),
        case(
            "logmeanexp_f16",
            lambda x: jax.nn.logmeanexp(x, axis=1),
            [(3, 4)],
            dtypes=[np.float16],
        ),
        case(
            "logmeanexp_vmap",
            jax.vmap(lambda x: jax.nn.logmeanexp(x, axis=0)),
            [("B", 3, 4)],
            counts={"ReduceMax": 1, "Transpose": 0},
        ),
        case(
            "logmeanexp_vmap_axis1",
            jax.vmap(lambda x: jax.nn.logmeanexp(x), in_axes=1),
            [(4, "B")],
            counts={"ReduceMax": 1},
        ),
        case(
            "logmeanexp_grad",
            jax.grad(lambda x: jax.nn.logmeanexp(x, axis=-1).sum()),
            [("B", 5)],
        ),
        case(
            "logmeanexp_opset17",
            lambda x: jax.nn.logmeanexp(x, axis=-1),
            [("B", 5)],
            opset=17,
            expect=["Exp -> ReduceSum -> Abs -> Log -> Add -> Sub"],
        ),
    ],
)
def logmeanexp(ctx, x, *, axis, where, keepdims):
    """``nn.logsumexp``'s max-shifted graph minus ``log(n)`` (float32/float64).

    ``log(n)`` is a constant for static reduced dims (rounded once from the
    exact value) and ``Log(Cast(n))`` of the runtime dims when one is
    symbolic. Empty axis sets and other dtypes inline JAX's decomposition.
    """
    shape = ctx.avals_in[0].shape
    axes = canonical_axes(axis, len(shape))
    if not axes:
        return ctx.fallback()
    dt = np.dtype(ctx.avals_in[0].dtype)
    lse = shifted_logsumexp(ctx, x, axes, keepdims)
    dims = [shape[a] for a in axes]
    if any(is_symbolic(d) for d in dims):
        count = ctx.dim(dims[0])
        for d in dims[1:]:
            count = ctx.op.Mul(count, ctx.dim(d))
        log_n = ctx.op.Log(ctx.cast(ctx.op.Squeeze(count), dt))
    else:
        n = math.prod(int(d) for d in dims)
        log_n = np.asarray(math.log(n) if n else -math.inf, dt)
    return ctx.op.Sub(lse, log_n)


@family.lowering(logmeanexp_p)
def _logmeanexp_decomposed(ctx, x, **params):
    """JAX's decomposition of jax.nn.logmeanexp, inlined (opsets < 18: ReduceMax takes
    its axes as an attribute there, which the lax reductions handle)."""
    return ctx.fallback()
