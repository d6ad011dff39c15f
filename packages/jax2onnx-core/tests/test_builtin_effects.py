"""Core lowerings that emit no node: debug callbacks, annotations, one-device collectives."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest
from jax import lax
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import AxisType, PartitionSpec

from jax2onnx import to_onnx
from jax2onnx.values.errors import LoweringError


def _run(model, *arrays):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, arrays)))


def _op_types(model) -> list[str]:
    return [node.op_type for node in model.graph.node]


_X = PartitionSpec("x")


def _one_device(body, in_specs=_X, out_specs=_X):
    mesh = jax.make_mesh((1,), ("x",), axis_types=(AxisType.Auto,))
    return jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs)


def test_debug_callback_does_not_run_while_converting_or_in_the_model():
    seen = []

    def fn(x):
        jax.debug.callback(lambda v: seen.append(v), x, ordered=True)
        jax.debug.print("x = {}", x)
        return x * 2.0

    model = to_onnx(fn, [("B", 3)])
    assert _op_types(model) == ["Mul"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (out,) = _run(model, x)
    np.testing.assert_array_equal(out, x * 2.0)
    assert seen == []


@pytest.mark.parametrize(
    "annotate",
    [
        lambda x: checkpoint_name(x, "h"),
        lambda x: lax.with_sharding_constraint(
            x,
            jax.sharding.NamedSharding(jax.make_mesh((1,), ("x",)), PartitionSpec()),
        ),
    ],
    ids=["checkpoint_name", "sharding_constraint"],
)
def test_annotations_pass_the_value_through(annotate):
    model = to_onnx(lambda x: jnp.tanh(annotate(x * 2.0)), [(2, 3)])
    assert _op_types(model) == ["Mul", "Tanh"]


def test_pbroadcast_on_one_device_is_the_value():
    # JAX has no CPU lowering of pbroadcast, so no case compares with JAX; the value
    # a one-device broadcast from device 0 gives is the operand itself.
    fn = _one_device(lambda a: lax.pbroadcast(a * 2.0, "x", 0))
    model = to_onnx(fn, [("B", 3)])
    assert _op_types(model) == ["Mul"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(_run(model, x)[0], x * 2.0)


def test_platform_dependent_without_cpu_or_default_branch_is_refused():
    fn = lambda x: lax.platform_dependent(x, tpu=jnp.sin, cuda=jnp.cos)  # noqa: E731
    with pytest.raises(LoweringError, match="cpu=.*default="):
        to_onnx(fn, [(3,)])


def test_platform_dependent_keeps_only_the_cpu_branch_in_nested_code():
    def fn(x):
        y = jax.jit(lambda v: lax.platform_dependent(v, cpu=jnp.sin, default=jnp.cos))(x)
        return lax.platform_dependent(y, cuda=jnp.tanh, default=lambda v: v + 1.0)

    model = to_onnx(fn, [("B", 3)])
    assert _op_types(model) == ["Sin", "Add"]
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(_run(model, x)[0], np.sin(x) + 1.0, rtol=1e-6)


def test_collectives_in_one_device_shard_map_emit_no_node():
    def body(a, b):
        total = lax.psum(a, "x") + lax.pmax(b, "x") - lax.pmin(b, "x")
        return total * (lax.axis_index("x") + 1)

    fn = _one_device(body, in_specs=(_X, _X), out_specs=_X)
    model = to_onnx(fn, [("B", 3), ("B", 3)])
    # one device: the collectives are identities and axis_index + 1 is 1, so the Mul goes too
    assert sorted(_op_types(model)) == ["Add", "Sub"]
