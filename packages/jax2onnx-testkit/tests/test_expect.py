"""``expect_graph`` and ``op_counts`` on small exported models."""

from __future__ import annotations

import jax.numpy as jnp
import onnx
import pytest
from onnx import TensorProto, helper

from jax2onnx import to_onnx
from jax2onnx_testkit import expect_graph, op_counts


def _dense(x, w, b):
    return jnp.tanh(x @ w + b) * 2


@pytest.fixture(scope="module")
def dynamic():
    return to_onnx(_dense, [("B", 4), (4, 5), (5,)])


@pytest.fixture(scope="module")
def static():
    return to_onnx(_dense, [(3, 4), (4, 5), (5,)])


def test_paths(dynamic):
    expect_graph(dynamic, ["Gemm", "Gemm -> Tanh -> Mul", "Tanh -> Mul"])


def test_path_must_be_connected(dynamic):
    with pytest.raises(AssertionError, match="no path 'Gemm -> Mul'"):
        expect_graph(dynamic, ["Gemm -> Mul"])
    with pytest.raises(AssertionError, match="no path 'Relu'"):
        expect_graph(dynamic, ["Relu"])


def test_path_with_shapes(dynamic):
    expect_graph(dynamic, ["Gemm:Bx5", "Gemm:Bx5 -> Tanh:Bx5 -> Mul", "Mul:Bx5"])
    with pytest.raises(AssertionError, match="no path 'Gemm:Bx4'"):
        expect_graph(dynamic, ["Gemm:Bx4"])
    with pytest.raises(AssertionError, match="no path 'Gemm:3x5'"):
        expect_graph(dynamic, ["Gemm:3x5"])


def test_symbols_substituted_in_static_variants(static):
    with pytest.raises(AssertionError, match="no path 'Gemm:Bx5'"):
        expect_graph(static, ["Gemm:Bx5"])
    expect_graph(static, ["Gemm:Bx5 -> Tanh: B x 5"], subs={"B": 3})
    expect_graph(static, ["Gemm:3x5"], subs={"B": 3})
    with pytest.raises(AssertionError, match="no path 'Gemm:Bx5'"):
        expect_graph(static, ["Gemm:Bx5"], subs={"B": 2})


def test_failure_lists_every_problem_and_the_graph(dynamic):
    with pytest.raises(AssertionError) as info:
        expect_graph(dynamic, ["Relu", "Conv"], counts={"Gemm": 2})
    message = str(info.value)
    assert "no path 'Relu'; no path 'Conv'; expected 2 Gemm node(s), found 1" in message
    assert "Gemm(in_0, in_1, " in message and ":Bx5" in message


def test_counts(dynamic):
    assert op_counts(dynamic) == {"Gemm": 1, "Tanh": 1, "Mul": 1}  # the bias as it is
    expect_graph(dynamic, counts={"Gemm": 1, "Transpose": 0, "Tanh": 1})
    with pytest.raises(AssertionError, match="expected 0 Tanh node"):
        expect_graph(dynamic, counts={"Tanh": 0})


def test_no_unused_inputs():
    model = to_onnx(lambda x, y: jnp.tanh(x), [(3, 4), (2,)])
    expect_graph(model, ["Tanh:3x4"])
    with pytest.raises(AssertionError, match=r"unused graph inputs \['in_1'\]"):
        expect_graph(model, no_unused_inputs=True)
    expect_graph(to_onnx(_dense, [(3, 4), (4, 5), (5,)]), no_unused_inputs=True)


def test_input_shapes(dynamic):
    expect_graph(dynamic, input_shapes={"in_0": "Bx4", "in_1": "4x5", "out_0": "Bx5"})
    with pytest.raises(AssertionError, match="'in_0' has shape Bx4, expected 3x4"):
        expect_graph(dynamic, input_shapes={"in_0": "3x4"})


def test_nodes_in_subgraphs_and_functions():
    then = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
            helper.make_node("MyFn", ["y"], ["z"], domain="local"),
        ],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
    )
    function = helper.make_function(
        "local",
        "MyFn",
        ["a"],
        ["b"],
        [helper.make_node("Sigmoid", ["a"], ["b"])],
        [helper.make_opsetid("", 18)],
    )
    model = helper.make_model(graph, functions=[function])
    assert op_counts(model) == {"If": 1, "MyFn": 1, "Relu": 1, "Neg": 1, "Sigmoid": 1}
    # ``x`` is only read inside the branches: it is used
    expect_graph(model, ["Relu", "Neg", "If -> MyFn"], no_unused_inputs=True)
    assert isinstance(model, onnx.ModelProto)


def test_unknown_dims_are_not_zero():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 0])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 0])],
    )
    model = helper.make_model(graph)
    expect_graph(model, ["Relu:?x0"])
    with pytest.raises(AssertionError, match="no path 'Relu:0x0'"):
        expect_graph(model, ["Relu:0x0"])
