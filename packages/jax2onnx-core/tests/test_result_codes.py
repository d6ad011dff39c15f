"""Result codes (``passes/fusion/selects.py``): a solver's int32 code set by Wheres,
tested against constants and mapped through a table, in fewer nodes, the same values."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from jax2onnx import to_onnx
from jax2onnx.passes import FusePatternsPass
from jax2onnx.values.ir import ir


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})


def _codes(x):
    """A solver's result code: set on NaN, tested, escalated, mapped through a table."""
    s = jnp.sum(x)
    code = jnp.where(jnp.isnan(s), jnp.int32(3), jnp.int32(0))
    failed = code == 3
    code = jnp.where(failed | (s > 1), jnp.int32(2), code)
    mapped = jnp.array([0, 5, 6, 7], jnp.int32)[code]
    return jnp.where(mapped != 0, mapped, 0), failed


def test_result_codes_are_tested_and_mapped_without_reading_them_back():
    model = to_onnx(_codes, [("B",)])
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    # code == 3 is the NaN test itself; the table read is a Where over mapped constants;
    # where(mapped != 0, mapped, 0) is mapped
    assert "Equal" not in ops and "Gather" not in ops and ops.count("Where") == 2, ops
    for x in ([0.1, 0.2], [0.5, 0.6, 0.7], [np.nan, 0.1, 0.2], [0.1, -0.2, 0.05]):
        x = np.asarray(x, np.float32)
        for got, want in zip(_run(model, x), jax.jit(_codes)(x), strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_table_read_of_one_entry_codes_keeps_their_shape():
    # Where(c, [3], [0]) on a scalar test is [1]-shaped: so is the table's entry that replaces it
    nodes = [
        helper.make_node("Where", ["c", "three", "zero"], ["code"]),
        helper.make_node("Gather", ["table", "code"], ["entry"]),
        helper.make_node("Neg", ["entry"], ["out"]),
    ]
    inits = [
        helper.make_tensor("three", TensorProto.INT64, [1], [3]),
        helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
        helper.make_tensor("table", TensorProto.INT64, [4], [0, 5, 6, 7]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", TensorProto.INT64, None)],
        initializer=inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(proto))
    FusePatternsPass()(model)
    rewritten = ir.serde.serialize_model(model)
    onnx.checker.check_model(rewritten, full_check=True)
    assert "Gather" not in [n.op_type for n in rewritten.graph.node]
    for flag in (True, False):
        c = np.array(flag)
        (want,) = ort.InferenceSession(proto.SerializeToString()).run(None, {"c": c})
        (got,) = ort.InferenceSession(rewritten.SerializeToString()).run(None, {"c": c})
        assert got.shape == want.shape == (1,)
        np.testing.assert_array_equal(got, want)


def _tests(x, first):
    """A step counter's start picked by a flag and tested against a stage (diffrax's
    first-stage guard), a code tree tested once, and flags selected by constants."""
    start = jnp.where(first, 0, 1)
    late = jnp.where(first, 1, 4)
    code = jnp.where(x[0] > 0, jnp.int32(1), jnp.where(x[1] > 0, jnp.int32(2), jnp.int32(3)))
    tests = (start <= 0, 2 < late, late >= 4, 0 > start, start < 1, code == 2)
    flag = x[2] > 0
    picks = (
        jnp.where(first, True, flag),
        jnp.where(first, False, flag),
        jnp.where(first, flag, True),
        jnp.where(first, flag, False),
    )
    return jnp.stack([*tests, *picks])


def test_tests_of_picked_constants_and_picks_of_flags_are_logic():
    model = to_onnx(_tests, [np.zeros(3, np.float32), np.array(True)])
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    # no Where, no comparison of a Where, no round trip through uint8: Not/And/Or of the flags
    assert "Where" not in ops and "Cast" not in ops and "Equal" not in ops, ops
    assert not {"Less", "LessOrEqual", "GreaterOrEqual"} & set(ops), ops
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for signs in ((1, 1, 1), (-1, 1, -1), (-1, -1, 1), (1, -1, -1)):
        x = np.asarray(signs, np.float32)
        for first in (True, False):
            (got,) = session.run(None, {"in_0": x, "in_1": np.array(first)})
            np.testing.assert_array_equal(got, jax.jit(_tests)(x, first))


def _escalated(x):
    """A code picked twice (NaN: 2; NaN and a bad sign too: 6), tested for success and
    also returned: ``code != 0`` is the NaN flag itself."""
    nan = jnp.isnan(jnp.sum(x))
    both = nan & (x[0] > 0)
    code = jnp.where(both, jnp.int32(6), jnp.where(nan, jnp.int32(2), jnp.int32(0)))
    return code != 0, jnp.where(code != 0, code, jnp.int32(8))


def test_a_code_read_twice_is_tested_by_the_flags_that_picked_it():
    model = to_onnx(_escalated, [np.zeros(3, np.float32)])
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    # Not(Equal(code, 0)) is Or(both, nan) = nan (both implies nan): no test of the code
    assert "Equal" not in ops and "Not" not in ops and "Or" not in ops, ops
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in ([1.0, 2.0, 3.0], [np.nan, 1.0, 0.0], [-1.0, np.nan, 0.0], [1.0, np.nan, 0.0]):
        x = np.asarray(x, np.float32)
        for got, want in zip(session.run(None, {"in_0": x}), jax.jit(_escalated)(x), strict=True):
            np.testing.assert_array_equal(got, want)
