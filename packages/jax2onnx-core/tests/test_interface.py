"""The model's interface: pytree inputs/outputs, NCHW adaptors, symbolic dim expressions."""

import dataclasses
import typing

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from jax2onnx import to_onnx

W = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)


def _run(model, feed):
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def _dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def policy(obs, scale):
    h = jnp.tanh(obs["joint_pos"] @ W) + obs["vel"][0]
    return {"logits": h * scale, "value": (h.sum(-1), obs["vel"][1])}


def test_pytree_inputs_and_outputs_are_named_by_key_path():
    model = to_onnx(policy, [{"joint_pos": ("B", 3), "vel": (("B", 4), ("B", 4))}, ()])
    assert [i.name for i in model.graph.input] == [
        "obs.joint_pos",
        "obs.vel.0",
        "obs.vel.1",
        "in_1",
    ]
    assert [o.name for o in model.graph.output] == ["logits", "value.0", "value.1"]
    rng = np.random.default_rng(0)
    obs = {
        "joint_pos": rng.standard_normal((5, 3)).astype(np.float32),
        "vel": tuple(rng.standard_normal((5, 4)).astype(np.float32) for _ in range(2)),
    }
    scale = np.asarray(0.5, np.float32)
    got = _run(
        model,
        {
            "obs.joint_pos": obs["joint_pos"],
            "obs.vel.0": obs["vel"][0],
            "obs.vel.1": obs["vel"][1],
            "in_1": scale,
        },
    )
    want = jax.tree_util.tree_leaves(policy(obs, scale))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class State:
    position: jax.Array
    velocity: jax.Array


def test_dataclass_pytree_input_and_tuple_outputs():
    def step(state):
        return state.position + 0.1 * state.velocity, {"speed": jnp.abs(state.velocity)}

    model = to_onnx(step, [State(position=("N", 2), velocity=("N", 2))])
    assert [i.name for i in model.graph.input] == ["state.position", "state.velocity"]
    assert [o.name for o in model.graph.output] == ["out_0", "out_1.speed"]
    p = np.ones((3, 2), np.float32)
    v = np.full((3, 2), -2.0, np.float32)
    got = _run(model, {"state.position": p, "state.velocity": v})
    np.testing.assert_allclose(got[0], p + 0.1 * v, rtol=1e-6)
    np.testing.assert_allclose(got[1], np.abs(v))


class Polar(typing.NamedTuple):
    radius: jax.Array
    angle: jax.Array


def test_namedtuple_outputs_are_named_by_field():
    def to_polar(xy):
        return Polar(jnp.hypot(xy[:, 0], xy[:, 1]), jnp.arctan2(xy[:, 1], xy[:, 0]))

    model = to_onnx(to_polar, [("N", 2)])
    assert [o.name for o in model.graph.output] == ["radius", "angle"]
    xy = np.array([[3.0, 4.0], [-1.0, 0.0]], np.float32)
    got = _run(model, {"in_0": xy})
    np.testing.assert_allclose(got[0], [5.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(got[1], np.arctan2(xy[:, 1], xy[:, 0]), rtol=1e-6)


def test_input_names_prefix_pytree_leaves():
    model = to_onnx(lambda d: d["a"] * 2.0, [{"a": (2,)}], input_names=["obs"])
    assert [i.name for i in model.graph.input] == ["obs.a"]


def test_nchw_input_folds_into_the_transpose_the_function_makes():
    f = lambda x: jnp.tanh(jnp.transpose(x, (0, 3, 1, 2)) * 2.0)  # NHWC in, NCHW inside
    model = to_onnx(f, [("B", 5, 6, 3)], inputs_as_nchw=[0])
    assert _dims(model.graph.input[0]) == ["B", 3, 5, 6]
    assert "Transpose" not in [n.op_type for n in model.graph.node]
    x = np.random.default_rng(1).random((2, 3, 5, 6)).astype(np.float32)
    np.testing.assert_allclose(_run(model, {"in_0": x})[0], np.tanh(2 * x), rtol=1e-6)


def test_nchw_output_by_name():
    f = lambda x: jax.lax.slice_in_dim(x, 0, 2, axis=3) * 3.0
    model = to_onnx(f, [("B", 4, 4, 3)], inputs_as_nchw=["in_0"], outputs_as_nchw=["out_0"])
    assert _dims(model.graph.output[0]) == ["B", 2, 4, 4]
    x = np.random.default_rng(2).random((2, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(_run(model, {"in_0": x})[0], x[:, :2] * 3.0, rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"inputs_as_nchw": ["nope"]}, "no graph input/output named 'nope'"),
        ({"inputs_as_nchw": [3]}, "not a name or a position"),
        ({"outputs_as_nchw": [0], "inputs": [(4, 3)]}, "rank 2"),
    ],
)
def test_nchw_arguments_are_checked(kwargs, pattern):
    inputs = kwargs.pop("inputs", [(1, 4, 4, 3)])
    with pytest.raises(ValueError, match=pattern):
        to_onnx(lambda x: x * 2.0, inputs, **kwargs)


def test_symbolic_dim_expressions_flow_to_outputs():
    def f(x, y):
        z = jnp.concatenate([x, x], axis=0)  # 2*B
        return z.reshape(-1, 2) + 1.0, jax.lax.slice_in_dim(y, 0, y.shape[0] // 2)

    model = to_onnx(f, [("B", 4), ("T",)])
    assert _dims(model.graph.output[0]) == ["4*B", 2]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.arange(7, dtype=np.float32)
    got = _run(model, {"in_0": x, "in_1": y})
    want = f(x, y)
    np.testing.assert_allclose(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1])


def test_static_reshape_has_no_shape_arithmetic():
    model = to_onnx(lambda x: x.reshape(6, 2) * 2.0, [(3, 4)])
    assert [n.op_type for n in model.graph.node] == ["Reshape", "Mul"]


def test_input_params_drive_control_flow_at_runtime():
    def f(x, *, deterministic, scale):
        y = jax.lax.cond(deterministic, lambda v: v, lambda v: v * 0.5, x)
        return jax.lax.fori_loop(0, 3, lambda i, v: v * scale, y)

    model = to_onnx(f, [("B", 3)], input_params={"deterministic": True, "scale": 2.0})
    assert [i.name for i in model.graph.input] == ["in_0", "deterministic", "scale"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for flag, scale in ((True, 2.0), (False, 1.5)):
        feed = {
            "in_0": x,
            "deterministic": np.asarray(flag),
            "scale": np.asarray(scale, np.float32),
        }
        (got,) = _run(model, feed)
        np.testing.assert_allclose(got, f(x, deterministic=flag, scale=scale), rtol=1e-6)


def test_bool_params_in_python_control_flow_become_an_if_per_flag():
    def fn(x, deterministic=True, double=False):
        y = x * 2 if deterministic else x + 100
        if double:
            y = y * 2
        return y

    model = to_onnx(fn, [(3,)], input_params={"deterministic": True, "double": False})
    assert [n.op_type for n in model.graph.node].count("If") == 1  # nested If in its branches
    x = np.arange(3, dtype=np.float32)
    for deterministic in (True, False):
        for double in (True, False):
            feed = {"in_0": x, "deterministic": np.array(deterministic), "double": np.array(double)}
            (got,) = _run(model, feed)
            np.testing.assert_array_equal(got, fn(x, deterministic, double))


def test_a_non_bool_param_in_python_control_flow_is_explained():
    def fn(x, scale=1.0):
        return x * 2 if scale > 0 else x

    with pytest.raises(TypeError, match=r"runtime parameter \(scale\) is used in Python control"):
        to_onnx(fn, [(3,)], input_params={"scale": 1.0})
