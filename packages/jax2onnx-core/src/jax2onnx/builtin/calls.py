"""The core's own plugin: call-like and no-op primitives every model can contain.

Call-like primitives carry a sub-jaxpr and are inlined: the ONNX graph holds
the body's ops, not a call. ``custom_jvp_call``/``custom_vjp_call`` export
their primal computation; the custom derivative rules only matter to JAX's
autodiff, which has already run by the time a jaxpr reaches us. Debug
callbacks, placement annotations and collectives on a one-device mesh emit no
node, and ``platform_dependent`` exports the branch JAX runs on CPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap

from jax2onnx.builtin import fusion_cases
from jax2onnx.conversion.functions import onnx_function
from jax2onnx.registration.cases import case
from jax2onnx.registration.family import Family
from jax2onnx.registration.hookspecs import hookimpl
from jax2onnx.registration.rules import Rules

family = Family("core")


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


@family.lowering(
    "jit",
    "pjit",
    cases=lambda: [
        case("nested_jit", lambda x: jax.jit(lambda y: jnp.tanh(y) * 2.0)(x), [("B", 4)])
    ],
    values="any",
)
def jit(ctx, *args, jaxpr, **_):
    """The body of a nested ``jax.jit``, inlined."""
    return ctx.inline(jaxpr, args)


@family.lowering(
    "closed_call",
    "core_call",
    cases=lambda: [
        case("closed_call", lambda x: _closed_call(lambda y: jnp.tanh(y) + 1.0, x), [("B", 3)])
    ],
    values="any",
)
def closed_call(ctx, *args, call_jaxpr, **_):
    """Plain calls (``core.closed_call``), inlined."""
    return ctx.inline(call_jaxpr, args)


@family.lowering(
    "remat2",
    "checkpoint",
    cases=lambda: [case("checkpoint", lambda x: jax.checkpoint(lambda y: y * y)(x), [(2, 3)])],
    values="any",
)
def remat(ctx, *args, jaxpr, **_):
    """``jax.checkpoint``: rematerialisation means nothing at inference; inline the body."""
    return ctx.inline(jaxpr, args)


@family.lowering(
    "custom_jvp_call",
    cases=lambda: [
        case("custom_jvp", _softplus, [("B", 3)]),
        case("custom_jvp_grad", jax.grad(lambda x: _softplus(x).sum()), [(4,)]),
    ],
    values="any",
)
def custom_jvp_call(ctx, *args, call_jaxpr, **_):
    """A ``jax.custom_jvp`` function: its primal computation."""
    return ctx.inline(call_jaxpr, args)


@family.lowering(
    "custom_vjp_call",
    cases=lambda: [
        case("custom_vjp", _doubled, [(5,)]),
        case("custom_vjp_grad", jax.grad(lambda x: (_doubled(x) * x).sum()), [(5,)]),
    ],
    values="any",
)
def custom_vjp_call(ctx, *args, call_jaxpr, **_):
    """A ``jax.custom_vjp`` function: its primal computation."""
    return ctx.inline(call_jaxpr, args)


def _single_device_shard_map():
    from jax.sharding import PartitionSpec

    mesh = jax.make_mesh((1,), ("x",))
    body = lambda a: jnp.tanh(a) * 2.0  # noqa: E731
    return jax.shard_map(body, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec())


@family.lowering(
    "shard_map",
    cases=lambda: [case("single_device", _single_device_shard_map, [("B", 3)], factory=True)],
    values="any",
)
def shard_map(ctx, *args, jaxpr, mesh, **_):
    """``jax.shard_map`` on a one-device mesh is its body: inlined."""
    if mesh.size != 1:
        raise ctx.error(
            f"shard_map over a mesh of {mesh.size} devices has no ONNX form; export the "
            "function with a one-device mesh (jax.make_mesh((1,), names))"
        )
    return ctx.inline(jaxpr, args)


# -- calls whose body is the computation ------------------------------------------


@custom_vmap
def _vmapped_sin(x):
    return jnp.sin(x)


_vmapped_sin.def_vmap(lambda axis_size, in_batched, x: (jnp.sin(x), in_batched[0]))


@jax.custom_vjp
def _remat_sin(x):
    return jnp.sin(x)


_remat_sin.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x),), optimize_remat=True)


def _composite_gelu(x):
    body = lambda y: 0.5 * y * (1.0 + jnp.tanh(0.8 * (y + 0.044715 * y**3)))  # noqa: E731
    return jax.lax.composite(body, name="my.gelu")(x)


@family.lowering(
    "composite",
    cases=lambda: [
        case("composite", _composite_gelu, [("B", 3)], expect=["Tanh:Bx3 -> Add -> Mul:Bx3"])
    ],
    values="any",
)
def composite(ctx, *args, jaxpr, **_):
    """``jax.lax.composite``: its decomposition, inlined (name and version only guide XLA)."""
    return ctx.inline(jaxpr, args)


@family.lowering(
    "custom_vmap_call",
    cases=lambda: [case("custom_vmap", _vmapped_sin, [("B", 3)], expect=["Sin:Bx3"])],
    values="any",
)
def custom_vmap_call(ctx, *args, call, **_):
    """A ``jax.custom_batching.custom_vmap`` function: its unbatched computation."""
    return ctx.inline(call, args)


@family.lowering(
    "remat_opt",
    cases=lambda: [
        case(
            "custom_vjp_optimize_remat_grad",
            jax.grad(lambda x: (_remat_sin(x) * x).sum()),
            [("B", 3)],
        )
    ],
    values="any",
)
def remat_opt(ctx, *args, fwd_jaxpr, **_):
    """``custom_vjp`` with ``optimize_remat=True`` under ``jax.grad``: its forward pass."""
    return ctx.inline(fwd_jaxpr, args)


# -- effects and annotations that do not compute --------------------------------
# A lowering that returns its operands emits no node: the value passes through.


def _printing(x):
    jax.debug.print("x = {}", x)
    return x * 2.0


def _callback_in_scan(xs):
    def step(carry, x):
        jax.debug.callback(lambda v: None, x, ordered=True)
        return carry + x, carry

    return jax.lax.scan(step, jnp.zeros_like(xs[0]), xs)


_ONLY_MUL = {"Mul": 1, "Identity": 0, "Reshape": 0}


@family.lowering(
    "debug_print",
    "debug_callback",
    cases=lambda: [
        case("debug_print", _printing, [("B", 3)], expect=["Mul:Bx3"], counts=_ONLY_MUL),
        case(
            "debug_print_ordered_jit",
            jax.jit(lambda x: (jax.debug.print("{}", x, ordered=True), x * 2.0)[1]),
            [("B", 3)],
            counts=_ONLY_MUL,
        ),
        case(
            "debug_callback_ordered_in_scan",
            _callback_in_scan,
            [(4, "B")],
            expect=["Loop"],
        ),
    ],
    values="any",
)
def debug_effect(ctx, *args, **_):
    """``jax.debug.print``/``jax.debug.callback``: dropped.

    An ONNX model has no host callbacks, so the print or callback does not run
    when the model runs. The equation has no outputs, so dropping it changes no
    value; an ordered effect only orders callbacks among themselves.
    """
    return []


def _named(spec_mesh_axes=("x",)):
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.make_mesh((1,), spec_mesh_axes)
    sharding = NamedSharding(mesh, PartitionSpec())
    return lambda x: jax.lax.with_sharding_constraint(x * 2.0, sharding)


def _resharded():
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = NamedSharding(jax.make_mesh((1,), ("x",)), PartitionSpec())
    return lambda x: jax.sharding.reshard(x * 2.0, sharding)


def _layout_constrained(x):
    from jax.experimental.layout import Layout, with_layout_constraint

    return with_layout_constraint(x * 2.0, Layout(major_to_minor=(0, 1)))


def _checkpoint_named(x):
    from jax.ad_checkpoint import checkpoint_name

    return checkpoint_name(x * 2.0, "scaled")


@family.lowering(
    "sharding_constraint",
    "reshard",
    "layout_constraint",
    "name",
    cases=lambda: [case("sharding_constraint", _named, [("B", 3)], factory=True, counts=_ONLY_MUL)],
    values="any",
)
def passthrough(ctx, *args, **_):
    """Placement and naming annotations (sharding, memory layout, checkpoint names).

    They tell XLA where a value lives or how remat may treat it; the value
    itself is unchanged, so no node.
    """
    return list(args)


family.add_cases("reshard", lambda: [case("reshard", _resharded, [("B", 3)], factory=True)])
family.add_cases(
    "layout_constraint",
    lambda: [case("layout_constraint", jax.jit(_layout_constrained), [("B", 3)], counts=_ONLY_MUL)],
)
family.add_cases(
    "name", lambda: [case("checkpoint_name", _checkpoint_named, [("B", 3)], counts=_ONLY_MUL)]
)


def _cpu_or_default(x):
    return jax.lax.platform_dependent(x, cpu=jnp.sin, default=jnp.cos)


def _tpu_or_default(x):
    return jax.lax.platform_dependent(x, tpu=jnp.sin, cuda=jnp.tanh, default=jnp.cos)


@family.lowering(
    "platform_index",
    cases=lambda: [
        case("cpu_branch", _cpu_or_default, [("B", 3)], expect=["Sin"], counts={"If": 0}),
        case(
            "default_branch",
            _tpu_or_default,
            [("B", 3)],
            expect=["Cos"],
            counts={"If": 0, "Sin": 0, "Tanh": 0},
        ),
    ],
)
def platform_index(ctx, *, platforms):
    """``lax.platform_dependent``'s branch index: the branch JAX runs on CPU, as a constant.

    An ONNX model has no notion of JAX platforms; the export takes the CPU
    branch (else ``default``), which is what ``jax.jit`` of the same function
    computes on a CPU. The constant index lets the ``cond`` that follows keep
    only that branch.
    """
    index = next((i for i, names in enumerate(platforms) if names and "cpu" in names), None)
    if index is None:
        index = next((i for i, names in enumerate(platforms) if names is None), None)
    if index is None:
        shown = ", ".join(sorted({p for names in platforms if names for p in names}))
        raise ctx.error(
            f"lax.platform_dependent has branches for {shown} only; the ONNX export takes the "
            "'cpu' branch or the default one, so add cpu= or default="
        )
    return ctx.const(np.asarray(index, dtype=ctx.avals_out[0].dtype))


# -- collectives inside a one-device shard_map -----------------------------------
# ``shard_map`` is lowered only over a one-device mesh (above), so every mesh axis a
# collective in its body names has size 1: a reduction over one device is the value,
# a gather or scatter only inserts or drops axes of size 1, the device index is 0.


def _one_device(body, in_specs=None, out_specs=None, names=("x",)):
    from jax.sharding import AxisType, PartitionSpec

    mesh = jax.make_mesh((1,) * len(names), names, axis_types=(AxisType.Auto,) * len(names))
    in_specs = PartitionSpec(names) if in_specs is None else in_specs
    out_specs = PartitionSpec(names) if out_specs is None else out_specs
    return jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs)


def _reduced(reduce, **specs):
    from jax.sharding import PartitionSpec

    return lambda: _one_device(lambda a: reduce(a * 2.0, "x"), out_specs=PartitionSpec(), **specs)


def _mean_and_max():
    from jax.sharding import PartitionSpec

    def body(a, b):
        return jax.lax.pmean(a, "x") - jax.lax.pmax(b, "x") + jax.lax.pmin(b, "x")

    spec = PartitionSpec("x")
    return _one_device(body, in_specs=(spec, spec), out_specs=PartitionSpec())


def _replicated_plus_sharded():
    from jax.sharding import PartitionSpec

    spec = PartitionSpec("x")
    return _one_device(lambda a, b: a * 2.0 + b, in_specs=(spec, PartitionSpec()), out_specs=spec)


def _psum_two_axes():
    from jax.sharding import PartitionSpec

    return _one_device(
        lambda a: jax.lax.psum(a * 2.0, ("x", "y")),
        out_specs=PartitionSpec(),
        names=("x", "y"),
    )


@family.lowering(
    "psum",
    "psum_invariant",
    "pmax",
    "pmin",
    "pvary",
    "pbroadcast",
    cases=lambda: [
        case("psum", _reduced(jax.lax.psum), [("B", 3)], factory=True, counts=_ONLY_MUL),
        case("psum_two_axes", _psum_two_axes, [("B", 3)], factory=True, counts=_ONLY_MUL),
    ],
    values="any",
)
def one_device_reduction(ctx, *args, **params):
    """A reduction or broadcast over one device: every operand unchanged."""
    axes = params.get("axes", params.get("axis_name", ()))
    axes = axes if isinstance(axes, (tuple, list)) else (axes,)
    if any(isinstance(a, int) for a in axes):
        raise ctx.error(f"a collective over positional axes {axes} has no ONNX form")
    return list(args)


family.add_cases(
    "pmax",
    lambda: [
        case(
            "pmean_pmax_pmin",
            _mean_and_max,
            [("B", 3), ("B", 3)],
            factory=True,
            counts={"Identity": 0, "Reshape": 0},
        ),
        case(
            "pmax_int",
            _reduced(lambda a, n: jax.lax.pmax(a.astype(jnp.int32), n)),
            [("B", 3)],
            factory=True,
        ),
    ],
)
family.add_cases(
    "pvary",
    lambda: [case("pvary", _replicated_plus_sharded, [("B", 3), ("B", 3)], factory=True)],
)
# pbroadcast has no case: JAX cannot run it on CPU (no reference); see tests/test_builtin_effects.py


def _gathered(axis, tiled):
    from jax.sharding import PartitionSpec

    return lambda: _one_device(
        lambda a: jax.lax.all_gather(a * 2.0, "x", axis=axis, tiled=tiled),
        out_specs=PartitionSpec("x"),
    )


def _scattered(tiled):
    return lambda: _one_device(
        lambda a: jax.lax.psum_scatter(a[None] if not tiled else a, "x", tiled=tiled) * 2.0
    )


def _all_to_all():
    return _one_device(lambda a: jax.lax.all_to_all(a[None] * 2.0, "x", 0, 2).sum(0))


@family.lowering(
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    cases=lambda: [
        case("all_gather", _gathered(1, False), [("B", 3)], factory=True, expect=["Reshape"]),
        case("all_gather_tiled", _gathered(0, True), [("B", 3)], factory=True, counts=_ONLY_MUL),
    ],
)
def one_device_gather(ctx, x, **params):
    """all_gather/psum_scatter/all_to_all over one device: a Reshape adding or dropping 1s."""
    size = params.get("axis_size", 1)
    if size != 1:
        raise ctx.error(f"a collective over {size} devices has no ONNX form")
    shape = ctx.avals_out[0].shape
    if tuple(ctx.avals_in[0].shape) == tuple(shape):
        return x
    return ctx.reshape(x, shape)


family.add_cases(
    "reduce_scatter",
    lambda: [
        case("psum_scatter", _scattered(False), [("B", 3)], factory=True),
        case("psum_scatter_tiled", _scattered(True), [("B", 3)], factory=True),
    ],
)
family.add_cases("all_to_all", lambda: [case("all_to_all", _all_to_all, [("B", 3)], factory=True)])


def _permuted(perm):
    return lambda: _one_device(lambda a: jax.lax.ppermute(a * 2.0, "x", perm) + a)


@family.lowering(
    "ppermute",
    cases=lambda: [
        case("ppermute_self", _permuted([(0, 0)]), [("B", 3)], factory=True),
        case("ppermute_none", _permuted([]), [("B", 3)], factory=True, expect=["Add"]),
    ],
)
def ppermute(ctx, x, *, perm, **_):
    """ppermute on one device: the value when device 0 sends to itself, else zeros."""
    if tuple(map(tuple, perm)) == ((0, 0),):
        return x
    if perm:
        raise ctx.error(f"ppermute with perm {perm} needs more than one device")
    aval = ctx.avals_out[0]
    return ctx.op.Expand(ctx.const(np.zeros((), aval.dtype)), ctx.shape(aval.shape))


def _indexed(x):
    return x + jax.lax.axis_index("x")


@family.lowering(
    "axis_index",
    cases=lambda: [case("axis_index", lambda: _one_device(_indexed), [("B", 3)], factory=True)],
)
def axis_index(ctx, **_):
    """The device's index along a mesh axis of one device: 0."""
    return ctx.const(np.zeros((), dtype=ctx.avals_out[0].dtype))


def _function_key(body, op_type, domain, instance):
    return (domain, op_type, instance, str(body.jaxpr))


@onnx_function(type="ScaledTanh")
def _scaled_tanh(x, w):
    return jnp.tanh(x @ w) * 0.5


_W = np.linspace(-1.0, 1.0, 16, dtype=np.float32).reshape(4, 4)


@family.lowering(
    "onnx_function",
    cases=lambda: [
        case(
            "shared_function",
            lambda x: _scaled_tanh(_scaled_tanh(x, _W), _W.T),
            [("B", 4)],
            counts={"ScaledTanh": 2},
        )
    ],
    values="any",
)
def onnx_function_call(ctx, *args, body, op_type, domain, instance, n_params):
    """A call of an ``@onnx_function``: one node calling a shared ONNX function.

    The function is built once per body structure (``unique=True`` adds the
    instance to the key); the first ``n_params`` operands are the call's
    weights, which stay initializers of the calling graph.
    """
    import onnx_ir as ir

    from jax2onnx.conversion.lowering import GraphScope

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
        scope.label = name  # the module path its equations' nodes carry
        inputs = [
            scope.add_input(
                f"{'param' if i < n_params else 'in'}_{i if i < n_params else i - n_params}",
                aval.dtype,
                aval.shape,
            )
            for i, aval in enumerate(body.in_avals)
        ]
        outs = scope.lower_jaxpr(body, inputs)
        outs = scope.finish_outputs(outs, body.out_avals, [f"out_{i}" for i in range(len(outs))])
        imports = {"": conversion.opset}
        nested = {node.domain for node in scope.nodes} - {"", "ai.onnx"}
        imports.update(dict.fromkeys(nested, 1))
        graph = ir.Graph(inputs, outs, nodes=scope.nodes, opset_imports=imports, name=name)
        function = ir.Function(domain, name, graph=graph, attributes=[])
        conversion.functions[key] = function
    emit = ctx.op._emitter(function.name)  # a Python name like _helper is an op name too
    outs = emit(*args, _domain=domain, _outputs=len(body.out_avals))
    return list(outs) if isinstance(outs, tuple) else [outs]


@hookimpl
def jax2onnx_rules() -> Rules:
    rules = Rules("core")
    family.register(rules)
    fusion_cases.register(rules)  # the fusion pass's cases
    return rules
