"""The fusion pass's driver and canonical forms (the fusions' own cases are in fusion_cases)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import onnxruntime as ort

from jax2onnx import to_onnx
from jax2onnx.builtin.fusion_cases.layer_norm import transformers_style


def ops(model):
    return [node.op_type for node in model.graph.node]


def run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


X = np.random.default_rng(0).standard_normal((3, 5, 32)).astype(np.float32)


def test_force_decomposed_keeps_a_written_out_layer_norm():
    fused = to_onnx(transformers_style, [("B", 5, 32)])
    kept = to_onnx(transformers_style, [("B", 5, 32)], normalization_mode="force_decomposed")
    assert ops(fused) == ["LayerNormalization"]
    assert "LayerNormalization" not in ops(kept) and "Sqrt" in ops(kept)
    want = np.asarray(transformers_style(X))
    np.testing.assert_allclose(run(fused, X), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run(kept, X), want, rtol=1e-5, atol=1e-5)


def test_a_mean_with_kept_dims_is_one_reduce_mean():
    fn = lambda x: x - jnp.mean(x, axis=-1, keepdims=True)
    model = to_onnx(fn, [("B", 5, 32)])
    assert ops(model) == ["ReduceMean", "Sub"]
    np.testing.assert_allclose(run(model, X), np.asarray(fn(X)), rtol=1e-6, atol=1e-6)


def test_a_sum_divided_by_another_count_stays_a_sum():
    fn = lambda x: jnp.sum(x, axis=-1, keepdims=True) / 7.0
    model = to_onnx(fn, [("B", 5, 32)])
    assert ops(model) == ["ReduceSum", "Div"]
    np.testing.assert_allclose(run(model, X), np.asarray(fn(X)), rtol=1e-6, atol=1e-6)


def test_a_broadcast_before_an_elementwise_op_is_dropped():
    bias = np.arange(32, dtype=np.float32)
    fn = lambda x: x + jnp.broadcast_to(bias, x.shape)
    model = to_onnx(fn, [("B", 5, 32)])
    assert ops(model) == ["Add"]
    np.testing.assert_allclose(run(model, X), np.asarray(fn(X)), rtol=1e-6, atol=1e-6)


def test_a_broadcast_that_sets_the_output_shape_stays():
    row = np.arange(32, dtype=np.float32)
    fn = lambda x: jnp.broadcast_to(row, (x.shape[0], 5, 32)) * 2.0
    model = to_onnx(fn, [("B", 5, 32)])
    assert "Expand" in ops(model)
    np.testing.assert_allclose(run(model, X), np.asarray(fn(X)), rtol=1e-6, atol=1e-6)


def test_fusing_twice_gives_the_same_bytes():
    first = to_onnx(transformers_style, [("B", 5, 32)]).SerializeToString()
    assert to_onnx(transformers_style, [("B", 5, 32)]).SerializeToString() == first
