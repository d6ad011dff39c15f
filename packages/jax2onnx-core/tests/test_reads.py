"""Reads by constant indices in fewer nodes (jax2onnx.passes.fusion.reads): same bits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from jax2onnx import to_onnx
from jax2onnx.passes import FusePatternsPass
from jax2onnx.values.ir import common, ir


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _run(model, *args):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(session.get_inputs(), args, strict=True)}
    return session.run(None, feeds)[0]


X = np.random.default_rng(3).standard_normal((3, 4, 5)).astype(np.float32)


def test_a_gather_reading_every_element_in_place_is_its_input():
    def fn(x):  # a permutation of a static order that turned out to be the identity
        return x[jnp.array([0, 1, 2])] * 2.0, x[:, jnp.array([0, 2, 1, 3])] + 1.0

    model = to_onnx(fn, [X.shape])
    onnx.checker.check_model(model, full_check=True)
    assert _ops(model) == ["Mul", "Gather", "Add"], _ops(model)  # the real permutation stays
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip(session.run(None, {"in_0": X}), fn(X), strict=True):
        np.testing.assert_array_equal(got, np.asarray(want))


def test_gather_elements_in_place_goes_and_a_permuting_one_stays():
    for indices, goes in (([[0, 0], [1, 1], [2, 2]], True), ([[0, 1], [1, 0], [2, 2]], False)):
        graph = helper.make_graph(
            [
                helper.make_node("GatherElements", ["x", "i"], ["g"], axis=0),
                helper.make_node("Neg", ["g"], ["y"]),
            ],
            "elements",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
            initializer=[helper.make_tensor("i", TensorProto.INT64, [3, 2], sum(indices, []))],
        )
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        model = ir.serde.deserialize_model(proto)
        FusePatternsPass()(model)
        rewritten = ir.serde.serialize_model(model)
        assert ("GatherElements" not in _ops(rewritten)) == goes
        x = np.arange(6, dtype=np.float32).reshape(3, 2)
        np.testing.assert_array_equal(_run(rewritten, x), _run(proto, x))


def test_an_entry_cut_by_slices_and_squeezed_is_one_gather():
    cases = {  # an entry of each matrix in a batch, one element of a row, a cut that stays
        lambda x: jnp.squeeze(x[:, 1:2, 3:4], (1, 2)) * 2.0: ("Reshape", "Gather", "Mul"),
        lambda x: jnp.squeeze(x[:, :, -1:], 2) + 1.0: ("Gather", "Add"),
        lambda x: jnp.squeeze(x[:, 1:2, 1:4], 1) - 1.0: ("Slice", "Squeeze", "Sub"),
    }
    for fn, ops in cases.items():
        model = to_onnx(fn, [("B", 4, 5)])
        onnx.checker.check_model(model, full_check=True)
        assert tuple(op for op in _ops(model) if op in ops) == ops, _ops(model)
        for x in (X, X[:1]):
            got, want = _run(model, x), np.asarray(fn(x))
            assert got.shape == want.shape
            np.testing.assert_array_equal(got, want)


def test_entries_of_a_transposed_factor_read_the_factor():
    def fn(a, b):  # a Cholesky solve: the second substitution reads the factor transposed
        low = jax.lax.linalg.cholesky(a, symmetrize_input=False)
        return jax.scipy.linalg.cho_solve((low, True), b)

    a = np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)
    b = np.array([1.0, -2.0], np.float32)
    model = to_onnx(fn, [a, b])
    onnx.checker.check_model(model, full_check=True)
    assert "Transpose" not in _ops(model), _ops(model)
    np.testing.assert_allclose(_run(model, a, b), np.asarray(fn(a, b)), rtol=1e-6, atol=1e-6)


def _rewritten(nodes, inputs, output, initializers, passes=(FusePatternsPass,)):
    graph = helper.make_graph(nodes, "g", inputs, [output], initializer=initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(proto))
    for each in passes:
        each()(model)
    rewritten = ir.serde.serialize_model(model)
    onnx.checker.check_model(rewritten, full_check=True)
    return proto, rewritten


def _i64(name, values):
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def test_a_slice_cutting_out_one_stacked_piece_is_the_piece():
    f = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    for start, end, goes in ((2, 5, True), (0, 2, True), (1, 5, False), (2, 4, False)):
        nodes = [
            helper.make_node("Concat", ["a", "b"], ["ab"], axis=1),
            helper.make_node("Slice", ["ab", "s", "e", "x"], ["y"]),
            helper.make_node("Neg", ["y"], ["out"]),
        ]
        inits = [_i64("s", [start]), _i64("e", [end]), _i64("x", [1])]
        proto, rewritten = _rewritten(
            nodes, [f("a", [3, 2]), f("b", [3, 3])], f("out", None), inits
        )
        assert ("Slice" not in _ops(rewritten)) == goes, (start, end)
        a, b = X[0, :3, :2].copy(), X[1, :3, :3].copy()
        np.testing.assert_array_equal(_run(rewritten, a, b), _run(proto, a, b))


def test_a_slice_inside_one_piece_cuts_that_piece():
    # a substitution's rows stacked one by one, read back from the last stack
    f = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    for start, end, slices in ((2, 5, 0), (0, 2, 0), (3, 5, 1), (5, 7, 0), (4, 6, 1)):
        nodes = [
            helper.make_node("Concat", ["a", "b"], ["ab"], axis=1),
            helper.make_node("Concat", ["ab", "c"], ["abc"], axis=1),
            helper.make_node("Slice", ["abc", "s", "e", "x"], ["y"]),
            helper.make_node("Neg", ["y"], ["out"]),
        ]
        inits = [_i64("s", [start]), _i64("e", [end]), _i64("x", [1])]
        proto, rewritten = _rewritten(
            nodes, [f("a", [3, 2]), f("b", [3, 3]), f("c", [3, 2])], f("out", None), inits
        )
        assert _ops(rewritten).count("Slice") == slices, (start, end, _ops(rewritten))
        a, b, c = X[0, :3, :2].copy(), X[1, :3, :3].copy(), X[2, :3, :2].copy()
        np.testing.assert_array_equal(_run(rewritten, a, b, c), _run(proto, a, b, c))


def test_empty_pieces_of_a_concat_and_reshapes_of_reshapes_go():
    f = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    nodes = [
        helper.make_node("Concat", ["none", "a", "none"], ["c"], axis=0),  # is a
        helper.make_node("Unsqueeze", ["c", "zero"], ["u"]),  # [1, 4, 2]
        helper.make_node("Reshape", ["u", "shape"], ["r"]),  # back to [4, 2]
        helper.make_node("Neg", ["r"], ["out"]),
    ]
    inits = [
        helper.make_tensor("none", TensorProto.FLOAT, [0, 2], []),
        _i64("zero", [0]),
        _i64("shape", [4, 2]),
    ]
    passes = (FusePatternsPass, common.RemoveUnusedNodesPass)
    proto, rewritten = _rewritten(nodes, [f("a", [4, 2])], f("out", [4, 2]), inits, passes)
    assert _ops(rewritten) == ["Neg"], _ops(rewritten)
    a = X[0, :4, :2].copy()
    np.testing.assert_array_equal(_run(rewritten, a), _run(proto, a))


def test_a_transpose_moving_only_unit_axes_is_a_reshape_or_nothing():
    from jax2onnx.passes.fusion import AFTER_GATHERS

    f = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    late = lambda: FusePatternsPass(groups=AFTER_GATHERS)  # noqa: E731
    cases = [  # perm, input shape, what is left
        ([1, 0, 2], [1, 1, 3], ["Neg"]),
        ([1, 0], [4, 1], ["Reshape", "Neg"]),
        ([2, 0, 1], [1, 3, 2], ["Transpose", "Neg"]),  # 3 and 2 change places
    ]
    for perm, shape, left in cases:
        nodes = [
            helper.make_node("Transpose", ["a"], ["t"], perm=perm),
            helper.make_node("Neg", ["t"], ["out"]),
        ]
        proto, rewritten = _rewritten(nodes, [f("a", shape)], f("out", None), [], (late,))
        assert _ops(rewritten) == left, (perm, shape)
        a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        got, want = _run(rewritten, a), _run(proto, a)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_a_stack_of_stacks_is_one_concat_and_a_reshape():
    def fn(v):  # a 3x3 matrix per row of v, built entry by entry, each its own way
        c = [v[:, k] for k in range(9)]
        entries = [jnp.sin(c[0]), c[1] * c[2], c[3] - c[4], jnp.cos(c[5]), c[6] + 1.0]
        entries += [jnp.exp(c[7]), c[8] * c[0], c[2] - 3.0, jnp.tanh(c[4])]
        rows = [jnp.stack(entries[3 * i : 3 * i + 3], axis=1) for i in range(3)]
        return jnp.stack(rows, axis=1)

    v = X.reshape(3, 20)[:, :9].copy()
    model = to_onnx(fn, [v])
    onnx.checker.check_model(model, full_check=True)
    ops = _ops(model)
    np.testing.assert_array_equal(_run(model, v), np.asarray(fn(v)))
    assert ops.count("Concat") == 1 and ops.count("Reshape") == 1, ops


def test_a_padded_scatter_cut_back_writes_the_rows_themselves():
    f = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    cases = [  # rows written, whether the pad and the cut go
        ([1, 2], True),
        ([3, 0], True),
        ([4, 1], False),  # the pad row itself is written: it stays
    ]
    for rows, goes in cases:
        nodes = [
            helper.make_node("Slice", ["x", "zero", "one"], ["pad"]),
            helper.make_node("Concat", ["x", "pad"], ["padded"], axis=0),
            helper.make_node("ScatterND", ["padded", "rows", "u"], ["written"]),
            helper.make_node("Slice", ["written", "zero", "four"], ["cut"]),
            helper.make_node("Neg", ["cut"], ["out"]),
        ]
        inits = [
            _i64("zero", [0]),
            _i64("one", [1]),
            _i64("four", [4]),
            helper.make_tensor("rows", TensorProto.INT64, [2, 1], rows),
        ]
        proto, rewritten = _rewritten(
            nodes,
            [f("x", [4, 2]), f("u", [2, 2])],
            f("out", [4, 2]),
            inits,
            (FusePatternsPass, common.RemoveUnusedNodesPass),
        )
        assert (_ops(rewritten) == ["ScatterND", "Neg"]) == goes, (rows, _ops(rewritten))
        x, u = X[0, :4, :2].copy(), X[1, :2, :2].copy()
        np.testing.assert_array_equal(_run(rewritten, x, u), _run(proto, x, u))


def test_a_matrix_product_written_out_term_by_term_is_one_matmul():
    def fn(a, b):  # three 3x3 products written as MJX's matmul_unroll writes them
        rows = []
        for i in range(3):
            rows.append(
                jnp.stack(
                    [sum(a[:, i, k] * b[:, k, j] for k in range(3)) for j in range(3)], axis=1
                )
            )
        return jnp.stack(rows, axis=1)

    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal((4, 3, 3)).astype(np.float32) for _ in range(2))
    model = to_onnx(fn, [a, b])
    onnx.checker.check_model(model, full_check=True)
    assert _ops(model) == ["MatMul"], _ops(model)
    np.testing.assert_allclose(_run(model, a, b), np.asarray(fn(a, b)), rtol=1e-6, atol=1e-6)


def test_gathers_read_int32_indices_without_a_cast():
    def fn(x):  # JAX's indices are int32: Gather and GatherElements take them as they are
        i = jnp.argmax(x[:, :3], axis=1)  # int32, in range
        return x.at[i].get(mode="promise_in_bounds"), jnp.take_along_axis(x, i[:, None], axis=1)

    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    model = to_onnx(fn, [x.shape])
    onnx.checker.check_model(model, full_check=True)
    made_by = {out: n.op_type for n in model.graph.node for out in n.output}
    gathers = [n for n in model.graph.node if n.op_type in ("Gather", "GatherElements")]
    assert len(gathers) == 2 and all(made_by.get(n.input[1]) != "Cast" for n in gathers)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip(session.run(None, {"in_0": x}), fn(jnp.asarray(x)), strict=True):
        np.testing.assert_array_equal(got, np.asarray(want))
