"""The primitives of ``equinox.internal`` with the meaning they have in an exported model.

Equinox binds its own primitives inside ``eqx.internal.while_loop``,
``eqx.error_if``, ``eqx.filter_vmap`` helpers, and so inside every diffrax,
optimistix and lineax solve. Each is lowered as it behaves outside ``vmap``;
under ``vmap`` JAX's batching rules have already rewritten them (a batched
``select_if_vmap`` is a ``select_n``, a batched ``maybe_set`` is a ``vprim``):

- ``unvmap_any``/``unvmap_all``/``unvmap_max``: ``jnp.any``/``all``/``max`` over
  every axis of the operand (one reduction; the batch axes are part of it);
- ``nonbatchable``, ``nondifferentiable_backward``, ``nontraceable``: the
  identity (their only job is to fail a transformation at trace time);
- ``select_if_vmap(pred, x, y)``: ``x`` (an unbatched predicate is true by
  Equinox's contract: the loop only runs steps it takes);
- ``maybe_set``: the buffer update ``xs.at[i].set(x)`` of a loop step, with the
  select of the old value when the loop ``makes_false_steps``; ``vprim`` (the
  vmapped form): JAX's vmap of that update;
- ``noinline``: the function it keeps out of line, inlined (ONNX has no
  calls to share; a ``@onnx_function`` keeps a function out of line);
- ``announce_jaxpr`` (``eqx.debug.announce_transform``): the identity (it
  announces at trace time, not at run time).

The names are the primitives' own strings, so importing this module does not
import Equinox.
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


# -- reductions over the batch -------------------------------------------------------


@family.lowering("unvmap_any")
def unvmap_any(ctx, x):
    """``jnp.any`` over every axis (decomposed: a bool ``ReduceMax`` needs a Cast)."""
    return ctx.decompose(jnp.any, x)


@family.lowering("unvmap_all")
def unvmap_all(ctx, x):
    """``jnp.all`` over every axis (decomposed: a bool ``ReduceMin`` needs a Cast)."""
    return ctx.decompose(jnp.all, x)


@family.lowering("unvmap_max")
def unvmap_max(ctx, x):
    """``jnp.max`` over every axis: one ``ReduceMax`` (a Cast where no kernel exists)."""
    return ctx.decompose(jnp.max, x)


# -- identities -----------------------------------------------------------------------


@family.lowering("nonbatchable", "nondifferentiable_backward", "nontraceable", values="any")
def identity(ctx, x, **_):
    """The operand itself: these primitives only guard transformations at trace time."""
    return x


@family.lowering("announce_jaxpr", values="any")
def announce(ctx, *xs, **_):
    """Every operand unchanged (the announcement happens while JAX traces)."""
    return list(xs)


@family.lowering("select_if_vmap", values="any")
def select_if_vmap(ctx, pred, x, y):
    """``x``: outside ``vmap`` Equinox guarantees the predicate holds."""
    return x


# -- buffer updates of eqx.internal.while_loop -----------------------------------------


def _impl(name: str):
    """Equinox's own implementation of one of its buffer primitives."""
    from equinox.internal._loop.common import maybe_set_p

    return {"maybe_set": maybe_set_p}[name].impl


@family.lowering("maybe_set", values="any")
def maybe_set(ctx, *operands, **params):
    """``xs.at[i].set(x)`` (a ScatterND or a slice update): Equinox's implementation
    decomposed; its ``select_if_vmap`` of the old value is the identity here."""
    return ctx.decompose(_impl("maybe_set"), *operands, **params)


def _vprim(*operands, prim, params, **batching):
    """Equinox's ``vprim`` implementation: JAX's vmap of the primitive's own."""
    impl = functools.partial(prim.impl, **dict(params))
    return jax.vmap(impl, in_axes=batching["__batch_axes"], axis_size=batching["__axis_size"])(
        *operands
    )


@family.lowering("vprim", values="any")
def vprim(ctx, *operands, **params):
    """A vmapped Equinox primitive (``maybe_set`` under ``vmap``): JAX's vmap of its
    implementation, decomposed (the update and a ``select_n`` of the old value for batch
    elements whose loop has stopped)."""
    return ctx.decompose(_vprim, *operands, **params)


# -- noinline ---------------------------------------------------------------------------


@family.lowering("noinline", values="any")
def noinline(ctx, index, *operands, treedef, static, flatten):
    """The function ``eqx.internal.noinline`` keeps out of line, inlined here."""
    value = ctx.inputs[0].const_value
    if value is None:
        raise ctx.error(
            "eqx.internal.noinline: the function index is not a constant, so the function "
            "cannot be chosen at conversion time; call the function directly instead"
        )
    from equinox.internal._noinline import noinline_p

    concrete = np.asarray(value.numpy())

    def call(*rest):
        return noinline_p.impl(concrete, *rest, treedef=treedef, static=static, flatten=flatten)

    closed = ctx.trace(call, *ctx.avals_in[1:])
    return ctx.inline(closed, list(operands))


# -- cases ------------------------------------------------------------------------------


def _eqxi():
    import equinox.internal as eqxi

    return eqxi


def _unvmap_any(x):
    return jnp.where(_eqxi().unvmap_any(x > 1.0), x, -x)


def _unvmap_all(x):
    return jnp.where(_eqxi().unvmap_all(x > -3.0), x + 1, x)


def _unvmap_max(x):
    return x + _eqxi().unvmap_max(jnp.round(x).astype(jnp.int32)).astype(x.dtype)


def _vmapped_unvmap(x):
    # the batch axis is part of the reduction: one answer for the whole batch
    return jax.vmap(lambda row: row * _eqxi().unvmap_any(row > 1.5))(x)


def _guards(x):
    eqxi = _eqxi()
    y = eqxi.nonbatchable(x)
    y = eqxi.nondifferentiable_backward(y, name="guard")
    y = eqxi.nontraceable(y)
    return y * 2


def _announced(x):
    import equinox as eqx

    return eqx.debug.announce_transform(x, announce=lambda _: None) + 1


def _while(kind: str, buffers: bool = False):
    """``y -> y`` halved while its norm exceeds 1, at most 8 steps; with ``buffers`` the
    iterates are written into a buffer (``maybe_set``)."""

    def fn(y):
        eqxi = _eqxi()
        if buffers:
            init = (0, y, jnp.zeros((8, *y.shape), y.dtype))

            def body(carry):
                i, v, buf = carry
                return i + 1, v * 0.5, buf.at[i].set(v * 0.5)

            def cond(carry):
                return jnp.sum(carry[1] ** 2) > 1.0

            return eqxi.while_loop(
                cond, body, init, max_steps=8, kind=kind, buffers=lambda c: c[2]
            )[2]

        def halve(v):
            return v * 0.5

        return eqxi.while_loop(lambda v: jnp.sum(v**2) > 1.0, halve, y, max_steps=8, kind=kind)

    return fn


def _noinline(x):
    eqxi = _eqxi()
    return eqxi.noinline(lambda v: jnp.sin(v) * 2)(x) + 1


family.add_cases(
    "unvmap_any",
    lambda: [
        case("eqx_unvmap_any", with_equinox(_unvmap_any), [("B", 3)], factory=True),
        case("eqx_unvmap_any_vmapped", with_equinox(_vmapped_unvmap), [("B", 3)], factory=True),
    ],
)
family.add_cases(
    "unvmap_all",
    lambda: [case("eqx_unvmap_all", with_equinox(_unvmap_all), [(2, 3)], factory=True)],
)
family.add_cases(
    "unvmap_max", lambda: [case("eqx_unvmap_max", with_equinox(_unvmap_max), [(4,)], factory=True)]
)
family.add_cases(
    "nonbatchable",
    lambda: [
        case(
            "eqx_guards",
            with_equinox(_guards),
            [("B", 3)],
            factory=True,
            expect=["Mul:Bx3"],
            counts={"Identity": 0},
        )
    ],
)
family.add_cases(
    "announce_jaxpr", lambda: [case("eqx_announce", with_equinox(_announced), [(3,)], factory=True)]
)
family.add_cases(
    "select_if_vmap",
    lambda: [
        case(
            "eqx_while_lax",
            with_equinox(_while("lax")),
            [(3,)],
            factory=True,
            input_range=(-4.0, 4.0),
        ),
        case(
            "eqx_while_checkpointed",
            with_equinox(_while("checkpointed")),
            [(3,)],
            factory=True,
            input_range=(-4.0, 4.0),
        ),
        case(
            "eqx_while_bounded",
            with_equinox(_while("bounded")),
            [(3,)],
            factory=True,
            input_range=(-4.0, 4.0),
        ),
        case(
            "eqx_while_checkpointed_vmapped",
            with_equinox(jax.vmap(_while("checkpointed"))),
            [("B", 3)],
            factory=True,
            input_range=(-4.0, 4.0),
        ),
    ],
)
family.add_cases(
    "maybe_set",
    lambda: [
        case(
            "eqx_while_buffers_checkpointed",
            with_equinox(_while("checkpointed", buffers=True)),
            [(3,)],
            factory=True,
            input_range=(-4.0, 4.0),
        ),
        case(
            "eqx_while_buffers_bounded",
            with_equinox(_while("bounded", buffers=True)),
            [(3,)],
            factory=True,
            input_range=(-4.0, 4.0),
        ),
    ],
)
family.add_cases(
    "vprim",
    lambda: [
        case(
            "eqx_while_buffers_vmapped",
            with_equinox(jax.vmap(_while("checkpointed", buffers=True))),
            [("B", 3)],
            factory=True,
            input_range=(-4.0, 4.0),
        )
    ],
)
family.add_cases(
    "noinline", lambda: [case("eqx_noinline", with_equinox(_noinline), [("B", 3)], factory=True)]
)
