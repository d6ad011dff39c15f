"""``eqx.error_if`` and ``eqx.branched_error_if`` in an exported model.

JAX raises these errors from a host callback (``pure_callback``) inside a
``lax.cond``; an ONNX model has no way to raise. The check is exported as
Equinox's own ``on_error="nan"`` behaviour: when the predicate holds, the
checked values come out *poisoned* (NaN for floating arrays, the largest value
for integers, True for booleans), so a failed check is visible in the outputs
and everything computed from them, and a passing one costs one ``Where`` per
checked array. ``on_error="off"`` (per call, or ``EQX_ON_ERROR=off`` in the
environment, Equinox's own switch) drops the check from the graph.

A predicate JAX can decide while tracing is Equinox's business and never
reaches the graph: a false one returns ``x``, a true one raises
``EquinoxTracetimeError`` at conversion, as it does under ``jax.jit``.

The stand-in replaces ``equinox._errors._error``, the function every error
check of Equinox calls once the predicate is known to be traced.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, case
from jax2onnx_equinox._util import with_equinox

family = Family("equinox")
register = family.register


def _poisoned(a):
    dtype = np.dtype(a.dtype)
    if np.issubdtype(dtype, np.inexact):
        return np.array(np.nan, dtype)
    if np.issubdtype(dtype, np.integer):
        return np.array(np.iinfo(dtype).max, dtype)
    if dtype == np.bool_:
        return np.array(True)
    return None  # keys and other extended dtypes pass unchecked


def _checked(x, pred):
    def one(a):
        bad = _poisoned(a)
        if bad is None:
            return a
        return jnp.where(pred, bad, a)

    return jax.tree_util.tree_map(one, x)


def _error_binder(original):
    # ``_error`` is a filter_custom_jvp object whose signature is ``(*args, **kwargs)``;
    # Equinox calls it as ``_error(x, pred, index, msgs=..., on_error=..., stack=...)``
    @functools.wraps(original)
    def check(*args, **kwargs):
        x, pred = args[0], args[1]
        if kwargs.get("on_error") == "off":
            return x
        return _checked(x, pred)

    return check


family.intercept("equinox._errors._error", None, binder=_error_binder)


# -- cases ------------------------------------------------------------------------------


def _error_if(x):
    import equinox as eqx

    y = eqx.error_if(x, ~jnp.isfinite(x), "x must be finite")
    return jnp.sin(y)


def _branched(x):
    import equinox as eqx

    index = jnp.where(jnp.any(x > 1e6), 1, 0)
    return eqx.branched_error_if(x * 2, jnp.any(jnp.abs(x) > 1e6), index, ["big", "huge"])


def _error_if_off(x):
    import equinox as eqx

    return eqx.error_if(x, x > 1e6, "too big", on_error="off") + 1


def _error_if_ints(x):
    import equinox as eqx

    n = (x * 10).astype(jnp.int32)
    return eqx.error_if((n, x > 0), jnp.any(n > 100), "too big")


def _error_if_vmapped(x):
    import equinox as eqx

    return jax.vmap(lambda row: eqx.error_if(row, jnp.any(row > 1e6), "too big") * 2)(x)


def _error_if_grad(x):
    import equinox as eqx

    return jax.grad(lambda v: jnp.sum(eqx.error_if(v, ~jnp.isfinite(v), "nan") ** 2))(x)


# The checks hold on the random inputs (JAX would raise otherwise); tests/test_prepare.py
# feeds inputs that fail them.
family.add_cases(
    "error_if",
    lambda: [
        case(
            "eqx_error_if",
            with_equinox(_error_if),
            [("B", 3)],
            factory=True,
            expect=["Where -> Sin:Bx3"],
        ),
        case("eqx_branched_error_if", with_equinox(_branched), [("B", 3)], factory=True),
        case(
            "eqx_error_if_off",
            with_equinox(_error_if_off),
            [("B", 3)],
            factory=True,
            counts={"Where": 0},
        ),
        case(
            "eqx_error_if_ints",
            with_equinox(_error_if_ints),
            [(4,)],
            factory=True,
            counts={"ReduceMax": 1},
        ),
        case(
            "eqx_error_if_vmapped",
            with_equinox(_error_if_vmapped),
            [("B", 3)],
            factory=True,
            counts={"Where": 1},
        ),
        case("eqx_error_if_grad", with_equinox(_error_if_grad), [(3,)], factory=True),
    ],
)
