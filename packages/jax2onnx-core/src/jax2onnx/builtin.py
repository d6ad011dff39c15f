"""The core's own plugin: call-like primitives every model contains.

They carry a sub-jaxpr and are inlined: the ONNX graph holds the body's ops,
not a call. ``custom_jvp_call``/``custom_vjp_call`` export their primal
computation; the custom derivative rules only matter to JAX's autodiff, which
has already run by the time a jaxpr reaches us.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax2onnx.cases import case
from jax2onnx.hookspecs import hookimpl
from jax2onnx.rules import Rules

rules = Rules("core")


@jax.custom_jvp
def _softplus(x):
    return jnp.log(1.0 + jnp.exp(x))


_softplus.defjvp(lambda p, t: (_softplus(p[0]), t[0] * jax.nn.sigmoid(p[0])))


@jax.custom_vjp
def _doubled(x):
    return x * 2.0


_doubled.defvjp(lambda x: (x * 2.0, None), lambda _, g: (g * 2.0,))


def _closed_call(fn, *args):
    from jax._src.lax.eval_jaxpr import eval_jaxpr_p  # stages a closed_call equation

    return eval_jaxpr_p.bind(*args, jaxpr=jax.make_jaxpr(fn)(*args))[0]


@rules.lowering(
    "jit",
    "pjit",
    cases=[case("nested_jit", lambda x: jax.jit(lambda y: jnp.tanh(y) * 2.0)(x), [("B", 4)])],
)
def jit(ctx, *args, jaxpr, **_):
    """The body of a nested ``jax.jit``, inlined."""
    return ctx.inline(jaxpr, args)


@rules.lowering(
    "closed_call",
    "core_call",
    cases=[case("closed_call", lambda x: _closed_call(lambda y: jnp.tanh(y) + 1.0, x), [("B", 3)])],
)
def closed_call(ctx, *args, call_jaxpr, **_):
    """Plain calls (``core.closed_call``), inlined."""
    return ctx.inline(call_jaxpr, args)


@rules.lowering(
    "remat2",
    "checkpoint",
    cases=[case("checkpoint", lambda x: jax.checkpoint(lambda y: y * y)(x), [(2, 3)])],
)
def remat(ctx, *args, jaxpr, **_):
    """``jax.checkpoint``: rematerialisation means nothing at inference; inline the body."""
    return ctx.inline(jaxpr, args)


@rules.lowering(
    "custom_jvp_call",
    cases=[
        case("custom_jvp", _softplus, [("B", 3)]),
        case("custom_jvp_grad", jax.grad(lambda x: _softplus(x).sum()), [(4,)]),
    ],
)
def custom_jvp_call(ctx, *args, call_jaxpr, **_):
    """A ``jax.custom_jvp`` function: its primal computation."""
    return ctx.inline(call_jaxpr, args)


@rules.lowering(
    "custom_vjp_call",
    cases=[
        case("custom_vjp", _doubled, [(5,)]),
        case("custom_vjp_grad", jax.grad(lambda x: (_doubled(x) * x).sum()), [(5,)]),
    ],
)
def custom_vjp_call(ctx, *args, call_jaxpr, **_):
    """A ``jax.custom_vjp`` function: its primal computation."""
    return ctx.inline(call_jaxpr, args)


def _single_device_shard_map():
    from jax.sharding import PartitionSpec

    mesh = jax.make_mesh((1,), ("x",))
    body = lambda a: jnp.tanh(a) * 2.0  # noqa: E731
    return jax.shard_map(body, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec())


@rules.lowering(
    "shard_map",
    cases=[case("single_device", _single_device_shard_map, [("B", 3)], factory=True)],
)
def shard_map(ctx, *args, jaxpr, mesh, **_):
    """``jax.shard_map`` on a one-device mesh is its body: inlined."""
    if mesh.size != 1:
        raise ctx.error(
            f"shard_map over a mesh of {mesh.size} devices has no ONNX form; export the "
            "function with a one-device mesh (jax.make_mesh((1,), names))"
        )
    return ctx.inline(jaxpr, args)


@hookimpl
def jax2onnx_rules() -> Rules:
    return rules
