"""The core's call-like primitives at every dtype JAX accepts, on small and zero-size arrays.

Each probe wraps ``lax.rev`` (defined for every dtype) in one call-like
primitive, so the sweep checks that the call carries bool, integer, half,
float64 and complex operands and results through (see
`jax2onnx_testkit.sweep` and the lax plugin's sweep). The core's other
lowerings return their operands unchanged on a one-device mesh or emit no node;
``NOT_SWEPT`` says so for each, and ``test_every_lowering_is_swept`` keeps the
two lists complete.
"""

from __future__ import annotations

import jax
import pytest
from jax import lax

from jax2onnx import onnx_function
from jax2onnx.builtin.calls import jax2onnx_rules
from jax2onnx_testkit.sweep import Probe, check_complete, check_sweep


def _rev(x):
    return lax.rev(x, (1,))


@jax.custom_jvp
def _jvp_rev(x):
    return _rev(x)


_jvp_rev.defjvp(lambda p, t: (_rev(p[0]), _rev(t[0])))


@jax.custom_vjp
def _vjp_rev(x):
    return _rev(x)


_vjp_rev.defvjp(lambda x: (_rev(x), None), lambda _, g: (_rev(g),))


@onnx_function
def _function_rev(x):
    return _rev(x)


def _closed_call(x):
    from jax._src.lax.eval_jaxpr import eval_jaxpr_p  # stages a closed_call equation

    return eval_jaxpr_p.bind(x, jaxpr=jax.make_jaxpr(_rev)(x))[0]


def _custom_vmap(x):
    from jax.custom_batching import custom_vmap

    f = custom_vmap(_rev)
    f.def_vmap(lambda size, batched, y: (jax.vmap(_rev)(y), batched[0]))
    return f(x)


def _printed(x):
    jax.debug.print("{}", x)
    return _rev(x)


def _called_back(x):
    jax.debug.callback(lambda _: None, x)
    return _rev(x)


def P(primitive, fn, **kw):
    return Probe(primitive, fn, ((2, 3),), ((0, 3),), **kw)


PROBES = [
    P("jit", jax.jit(_rev), contains=("jit", "pjit")),
    P("closed_call", _closed_call),
    P("checkpoint", jax.checkpoint(_rev), contains=("checkpoint", "remat2")),
    P("custom_jvp_call", _jvp_rev),
    P("custom_vjp_call", _vjp_rev),
    P("custom_vmap_call", _custom_vmap),
    P("composite", lax.composite(_rev, name="sweep.rev")),
    P("platform_index", lambda x: lax.platform_dependent(x, cpu=_rev, default=lambda y: y)),
    P("onnx_function", _function_rev, eager=True),  # the primitive exists while to_onnx traces
    P("debug_print", _printed),
    P("debug_callback", _called_back),
]

_PASS_THROUGH = (
    "on a one-device mesh an identity of any dtype (values='any'; axis_index a constant 0), "
    "which its cases check"
)
NOT_SWEPT = {
    "pjit": "the name older JAX gives jit (swept as jit)",
    "core_call": "not staged by JAX 0.10 (closed_call is swept)",
    "remat2": "the name older JAX gives checkpoint (swept as checkpoint)",
    "remat_opt": "only in custom_vjp gradients under optimize_remat (its cases)",
    **dict.fromkeys(
        (
            "shard_map",
            "sharding_constraint",
            "reshard",
            "layout_constraint",
            "name",
            "psum",
            "psum_invariant",
            "pmax",
            "pmin",
            "pvary",
            "pbroadcast",
            "all_gather",
            "reduce_scatter",
            "all_to_all",
            "ppermute",
            "axis_index",
        ),
        _PASS_THROUGH,
    ),  # fmt: skip
}


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_dtype_sweep(probe):
    check_sweep(probe)


def test_every_lowering_is_swept():
    lowered = {lowering.primitive for lowering in jax2onnx_rules().lowerings}
    check_complete(lowered, PROBES, NOT_SWEPT)
