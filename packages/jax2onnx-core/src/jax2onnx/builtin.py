"""The core's own plugin: call-like primitives every model contains.

They carry a sub-jaxpr and are inlined: the ONNX graph holds the body's ops,
not a call. ``custom_jvp_call``/``custom_vjp_call`` export their primal
computation; the custom derivative rules only matter to JAX's autodiff, which
has already run by the time a jaxpr reaches us.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.cases import case
from jax2onnx.functions import onnx_function
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


def _function_key(body, op_type, domain, instance):
    return (domain, op_type, instance, str(body.jaxpr))


@onnx_function(type="ScaledTanh")
def _scaled_tanh(x, w):
    return jnp.tanh(x @ w) * 0.5


_W = np.linspace(-1.0, 1.0, 16, dtype=np.float32).reshape(4, 4)


@rules.lowering(
    "onnx_function",
    cases=[
        case(
            "shared_function",
            lambda x: _scaled_tanh(_scaled_tanh(x, _W), _W.T),
            [("B", 4)],
            counts={"ScaledTanh": 2},
        )
    ],
)
def onnx_function_call(ctx, *args, body, op_type, domain, instance, n_params):
    """A call of an ``@onnx_function``: one node calling a shared ONNX function.

    The function is built once per body structure (``unique=True`` adds the
    instance to the key); the first ``n_params`` operands are the call's
    weights, which stay initializers of the calling graph.
    """
    import onnx_ir as ir

    from jax2onnx.lowering import GraphScope, finish_outputs

    conversion = ctx.scope.conversion
    key = _function_key(body, op_type, domain, instance)
    function = conversion.functions.get(key)
    if function is None:
        taken = {f.name for f in conversion.functions.values() if f.domain == domain}
        name = (
            op_type
            if op_type not in taken
            else next(
                f"{op_type}_{k}" for k in range(2, len(taken) + 3) if f"{op_type}_{k}" not in taken
            )
        )
        scope = GraphScope(conversion, is_function=True)
        inputs = [
            scope.add_input(
                f"{'param' if i < n_params else 'in'}_{i if i < n_params else i - n_params}",
                aval.dtype,
                aval.shape,
            )
            for i, aval in enumerate(body.in_avals)
        ]
        outs = scope.lower_jaxpr(body, inputs)
        outs = finish_outputs(scope, outs, body.out_avals, [f"out_{i}" for i in range(len(outs))])
        imports = {"": conversion.opset}
        nested = {node.domain for node in scope.nodes} - {"", "ai.onnx"}
        imports.update(dict.fromkeys(nested, 1))
        graph = ir.Graph(inputs, outs, nodes=scope.nodes, opset_imports=imports, name=name)
        function = ir.Function(domain, name, graph=graph, attributes=[])
        conversion.functions[key] = function
    outs = getattr(ctx.op, function.name)(*args, _domain=domain, _outputs=len(body.out_avals))
    return list(outs) if isinstance(outs, tuple) else [outs]
