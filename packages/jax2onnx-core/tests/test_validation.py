"""``allclose``: every argument jax2onnx 0.17's has, and a mismatch it reports."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax2onnx import allclose, to_onnx

K = np.linspace(-1.0, 1.0, 3 * 4, dtype=np.float32).reshape(3, 4)


def conv_like(x):
    """Channels-last in and out: (N, H, W, 3) -> (N, H, W, 4)."""
    return jnp.tanh(x @ K)


def _file(tmp_path, fn, inputs, **kwargs):
    return to_onnx(fn, inputs, return_mode="file", output_path=str(tmp_path / "m.onnx"), **kwargs)


def test_channels_first_inputs_and_outputs(tmp_path):
    path = _file(tmp_path, conv_like, [("B", 5, 6, 3)], inputs_as_nchw=[0], outputs_as_nchw=[0])
    x = np.random.default_rng(0).standard_normal((2, 5, 6, 3)).astype(np.float32)
    ok, message = allclose(conv_like, path, [x], inputs_as_nchw=[0], outputs_as_nchw=[0])
    assert ok, message
    ok, message = allclose(conv_like, path, [x])  # without them the layouts do not line up
    assert not ok


def test_double_precision(tmp_path):
    fn = lambda x: jnp.exp(x) * (1 + 1e-12)  # noqa: E731
    with jax.enable_x64(True):
        spec = jax.ShapeDtypeStruct((3,), jnp.float64)
    path = _file(tmp_path, fn, [spec], enable_double_precision=True)
    x = np.array([0.1, 0.2, 0.3])
    ok, message = allclose(fn, path, [x], rtol=1e-14, atol=0, enable_double_precision=True)
    assert ok, message


def test_pytree_inputs_and_params(tmp_path):
    def fn(obs, scale):
        return obs["a"] * scale + obs["b"]

    path = _file(tmp_path, fn, [{"a": (2,), "b": (2,)}], input_params={"scale": 2.0})
    obs = {"a": np.ones(2, np.float32), "b": np.arange(2, dtype=np.float32)}
    ok, message = allclose(fn, path, [obs], input_params={"scale": 3.0})
    assert ok, message


@pytest.mark.parametrize("kind", ["float", "int"])
def test_mismatch_is_reported(tmp_path, kind):
    dtype = np.float32 if kind == "float" else np.int32
    path = _file(tmp_path, lambda x: x + 1, [jax.ShapeDtypeStruct((3,), dtype)])
    ok, message = allclose(lambda x: x + 2, path, [np.zeros(3, dtype)])
    assert not ok
    assert "output 0" in message


def test_wrong_number_of_inputs_is_named(tmp_path):
    path = _file(tmp_path, lambda x, y: x + y, [(3,), (3,)])
    ok, message = allclose(lambda x, y: x + y, path, [np.zeros(3, np.float32)])
    assert not ok
    assert "takes 2 positional input(s)" in message


def test_numpy_inputs_reach_fn_as_jax_arrays_of_their_dtype(tmp_path):
    seen = []

    def fn(x, idx, *, scale):
        seen.append((type(x), x.dtype, type(idx), idx.dtype, type(scale)))
        return x.at[idx].set(scale), idx.at[0].add(1)  # .at exists on JAX arrays only

    specs = [jax.ShapeDtypeStruct((3,), np.float32), jax.ShapeDtypeStruct((1,), np.int32)]
    path = _file(tmp_path, fn, specs, input_params={"scale": np.float32(0.0)})
    x, idx = np.array([1.0, 2.0, 3.0], np.float32), np.array([1], np.int32)
    ok, message = allclose(fn, path, [x, idx], input_params={"scale": np.array(5.0, np.float32)})
    assert ok, message
    kind_x, dtype_x, kind_idx, dtype_idx, kind_scale = seen[-1]
    assert issubclass(kind_x, jax.Array) and dtype_x == np.float32
    assert issubclass(kind_idx, jax.Array) and dtype_idx == np.int32
    assert issubclass(kind_scale, jax.Array)


def test_shape_tuples_draw_float64_data_with_double_precision(tmp_path):
    seen = []

    def fn(x):
        seen.append(x.dtype)
        return jnp.sin(x) * (1 + 1e-12)

    path = _file(tmp_path, fn, [("B", 3)], enable_double_precision=True)
    ok, message = allclose(fn, path, [("B", 3)], rtol=1e-14, atol=0, enable_double_precision=True)
    assert ok, message
    assert seen[-1] == np.float64
    # without double precision shape tuples stay float32, as to_onnx exports them
    path = _file(tmp_path, fn, [("B", 3)])
    ok, message = allclose(fn, path, [("B", 3)])
    assert ok, message
    assert seen[-1] == np.float32


def _model_with_an_op_ort_lacks(path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="org.example.j2o")],
        "lacking",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    opsets = [helper.make_opsetid("", 23), helper.make_opsetid("org.example.j2o", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets, ir_version=11), path)
    return path


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p, "File doesn't exist"),
        (lambda p: p.write_bytes(b"not a model") and p, "Protobuf parsing failed"),
        (_model_with_an_op_ort_lacks, "Frobnicate"),
    ],
    ids=["missing", "corrupt", "unknown-op"],
)
def test_a_model_onnx_runtime_cannot_load_is_a_failed_check(tmp_path, make, reason):
    path = make(tmp_path / "bad.onnx")
    ok, message = allclose(jnp.sin, path, [(3,)])
    assert not ok
    assert str(tmp_path / "bad.onnx") in message
    assert reason in message
