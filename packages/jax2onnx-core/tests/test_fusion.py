"""The fusion pass's driver and canonical forms (the fusions' own cases are in fusion_cases)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import onnx
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


def _layout_then_mul(layout: str, source: list[int], target: list[int], other: list[int]):
    """``Mul(layout(a), b)``: ``a`` of shape ``source`` brought to ``target`` by ``layout``."""
    from onnx import TensorProto, helper

    float_input = lambda name, shape: helper.make_tensor_value_info(  # noqa: E731
        name, TensorProto.FLOAT, shape
    )
    if layout == "Reshape":
        argument = helper.make_tensor("arg", TensorProto.INT64, [len(target)], target)
    else:  # the axes the Unsqueeze adds or the Squeeze drops
        axes = [i for i, d in enumerate(target if layout == "Unsqueeze" else source) if d == 1]
        axes = axes[: abs(len(target) - len(source))]
        argument = helper.make_tensor("arg", TensorProto.INT64, [len(axes)], axes)
    graph = helper.make_graph(
        [helper.make_node(layout, ["a", "arg"], ["t"]), helper.make_node("Mul", ["t", "b"], ["y"])],
        "layout",
        [float_input("a", source), float_input("b", other)],
        [float_input("y", list(np.broadcast_shapes(target, other)))],
        initializer=[argument],
        value_info=[float_input("t", target)],  # shapes as the converter records them
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_leading_unit_axes_before_a_broadcasting_op_go_where_they_change_nothing():
    from jax2onnx.passes import FusePatternsPass
    from jax2onnx.values.ir import ir

    cases = [  # layout, a's shape, its new shape, b's shape, whether the layout op stays
        ("Unsqueeze", [2, 3], [1, 2, 3], [3, 1, 3], False),  # a stack of lanes, broadcast
        ("Squeeze", [1, 1, 2, 3], [2, 3], [5, 4, 2, 3], False),
        ("Squeeze", [1, 1, 2, 3], [2, 3], [4, 2, 3], True),  # the output would gain an axis
        ("Reshape", [1, 6], [1, 1, 6], [2, 1, 6], False),
        ("Unsqueeze", [2, 3], [1, 2, 3], [3], True),  # the unit axis is the output's
        ("Unsqueeze", [2, 3], [2, 3, 1], [2, 3, 3], True),  # trailing: broadcasts otherwise
    ]
    rng = np.random.default_rng(1)
    for layout, source, target, other, stays in cases:
        proto = _layout_then_mul(layout, source, target, other)
        model = ir.serde.deserialize_model(proto)
        FusePatternsPass()(model)
        fused = ir.serde.serialize_model(model)
        onnx.checker.check_model(fused, full_check=True)
        assert (layout in [n.op_type for n in fused.graph.node]) == stays, (layout, source)
        feeds = {
            "a": rng.standard_normal(source).astype(np.float32),
            "b": rng.standard_normal(other).astype(np.float32),
        }
        got, want = (
            ort.InferenceSession(p.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                None, feeds
            )[0]
            for p in (fused, proto)
        )
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_fusing_twice_gives_the_same_bytes():
    first = to_onnx(transformers_style, [("B", 5, 32)]).SerializeToString()
    assert to_onnx(transformers_style, [("B", 5, 32)]).SerializeToString() == first


_CPU = ["CPUExecutionProvider"]


def test_a_matrix_times_a_vector_multiplies_the_vector_first():
    rng = np.random.default_rng(1)
    weights = jnp.asarray(rng.standard_normal((6, 5)).astype(np.float32))
    for shapes, fn, want_ops in (
        ([(5,)], lambda v: weights @ v, ["MatMul"]),  # stored transposed: v @ w^T
        ([(16, 16), (16,)], jnp.matmul, ["Unsqueeze", "MatMul", "Squeeze"]),
        ([(4, 4), (4,)], jnp.matmul, ["MatMul"]),  # too small for two more nodes to pay off
    ):
        model = to_onnx(fn, shapes)
        onnx.checker.check_model(model, full_check=True)
        assert ops(model) == want_ops, ops(model)
        if len(shapes) == 1:  # the vector multiplies the stored weights [5, 6]
            assert model.graph.node[0].input[0] == "in_0"
        args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        (got,) = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), args)})
        np.testing.assert_allclose(got, np.asarray(fn(*args)), rtol=1e-5, atol=1e-5)
