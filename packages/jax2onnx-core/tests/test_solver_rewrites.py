"""Rewrites for solvers' loop bodies: arithmetic identities, Casts through layout ops,
integer Cast round trips, small products of constants.

Each test builds a small model, checks the rewrite happened (op counts), and compares
ONNX Runtime's outputs before and after on inputs with -0.0, inf and NaN.
"""

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from jax2onnx import to_onnx
from jax2onnx.passes import FoldConstantsPass, FoldIndexRangesPass, FusePatternsPass
from jax2onnx.values.ir import common, ir

SPECIAL = np.array([-0.0, 0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 3e38], np.float32)


def _run(proto: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _rewritten(proto: onnx.ModelProto, *passes) -> onnx.ModelProto:
    """The model after ``passes``, with shapes inferred first (as a conversion has them)."""
    model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(proto))
    for p in passes:
        p(model)
    out = ir.serde.serialize_model(model)
    onnx.checker.check_model(out, full_check=True)
    return out


def _ops(graph: onnx.GraphProto) -> list[str]:
    return [n.op_type for n in graph.node]


def _model(nodes, inputs, outputs, initializers=(), opset=18) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _binary(op: str, const: np.ndarray, *, const_first: bool, dtype=TensorProto.FLOAT, shape=(8,)):
    """``y = Neg(op(x, c))`` (or ``op(c, x)``): the Neg keeps a node after the op."""
    names = ["c", "x"] if const_first else ["x", "c"]
    return _model(
        [helper.make_node(op, names, ["y"]), helper.make_node("Neg", ["y"], ["out"])],
        [helper.make_tensor_value_info("x", dtype, list(shape))],
        [helper.make_tensor_value_info("out", dtype, list(shape))],
        [numpy_helper.from_array(const, "c")],
    )


def test_additive_and_multiplicative_identities_go():
    cases = [
        ("Add", np.float32(0.0), False),
        ("Add", np.zeros(8, np.float32), True),
        ("Sub", np.float32(0.0), False),
        ("Sub", np.float32(-0.0), False),
        ("Mul", np.float32(1.0), False),
        ("Mul", np.ones(8, np.float32), True),
        ("Div", np.float32(1.0), False),
        ("Max", np.float32(-np.inf), True),  # a clip to unbounded limits, NaN kept
        ("Min", np.full(8, np.inf, np.float32), False),
    ]
    for op, const, first in cases:
        proto = _binary(op, const, const_first=first)
        folded = _rewritten(proto, FusePatternsPass())
        assert _ops(folded.graph) == ["Neg"], (op, const, first)
        (want,) = _run(proto, {"x": SPECIAL})
        (got,) = _run(folded, {"x": SPECIAL})
        if op == "Add" or str(const) == "-0.0":  # -0.0 + 0.0 is +0.0: the rewrite keeps -0.0
            np.testing.assert_array_equal(got, want)
        else:
            assert got.tobytes() == want.tobytes(), op


def test_writes_and_broadcasts_that_move_nothing_go():
    f = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    i64 = lambda name, values, shape: numpy_helper.from_array(  # noqa: E731
        np.array(values, np.int64).reshape(shape), name
    )
    zeros = numpy_helper.from_array(np.zeros((2, 3), np.float32), "zeros")
    each = [[i, j] for i in range(2) for j in range(3)]  # a write per element, in order
    cases = [  # nodes, initializers, whether the node goes
        (["Expand", "x", "shape"], [i64("shape", [1, 3], [2])], True),
        (["Expand", "x", "shape"], [i64("shape", [3], [1])], True),
        (["Expand", "x", "shape"], [i64("shape", [2, 2, 3], [3])], False),  # a new axis
        (["ScatterND", "zeros", "rows", "x"], [zeros, i64("rows", [0, 1], [2, 1])], True),
        (["ScatterND", "zeros", "rows", "x"], [zeros, i64("rows", [1, 0], [2, 1])], False),
        (["ScatterND", "zeros", "at", "x"], [zeros, i64("at", each, [2, 3, 2])], True),
        (["ScatterND", "zeros", "rows", "x"], [zeros, i64("rows", [1, 1], [2, 1])], False),
    ]
    x = np.array([[-0.0, np.inf, np.nan], [1.5, -2.0, 3e38]], np.float32)
    for (op, *inputs), initializers, goes in cases:
        node = helper.make_node(
            op, inputs, ["y"], **({"reduction": "add"} if inputs[0] == "zeros" else {})
        )
        proto = _model(
            [node, helper.make_node("Neg", ["y"], ["out"])],
            [f("x", [2, 3])],
            [f("out", None)],
            initializers,
        )
        folded = _rewritten(proto, FusePatternsPass())
        assert (op not in _ops(folded.graph)) == goes, (op, inputs)
        np.testing.assert_array_equal(_run(folded, {"x": x})[0], _run(proto, {"x": x})[0])


def test_a_sign_vector_after_a_constant_factor_joins_the_factor():
    f = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    x = np.stack([SPECIAL, SPECIAL[::-1]])  # [2, 8]
    cases = [  # the factor, the signs, whether the two products become one
        (np.float32(0.3), np.array([1, -1] * 4, np.float32), True),
        (np.linspace(-2, 2, 8, dtype=np.float32), np.float32(-1.0), True),
        (np.float32(0.3), np.array([1, -2] * 4, np.float32), False),  # not only signs
        (np.ones((3, 1, 8), np.float32), np.float32(-1.0), True),  # the factor broadcasts x
    ]
    for factor, signs, joins in cases:
        out = np.broadcast_shapes(x.shape, factor.shape, signs.shape)
        proto = _model(
            [
                helper.make_node("Mul", ["x", "c"], ["m"]),
                helper.make_node("Mul", ["s", "m"], ["y"]),
                helper.make_node("Neg", ["y"], ["out"]),
            ],
            [f("x", [2, 8])],
            [f("out", list(out))],
            [numpy_helper.from_array(factor, "c"), numpy_helper.from_array(signs, "s")],
        )
        folded = _rewritten(proto, FusePatternsPass())
        assert _ops(folded.graph).count("Mul") == (1 if joins else 2), (factor, signs)
        (got,), (want,) = _run(folded, {"x": x}), _run(proto, {"x": x})
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_a_selection_on_the_condition_around_it_is_decided():
    f = lambda name, shape, t=TensorProto.FLOAT: helper.make_tensor_value_info(name, t, shape)  # noqa: E731
    tril = numpy_helper.from_array(np.tril(np.ones((2, 2), bool)), "c")
    inputs = [f("x", [2, 2]), f("y", [2, 2]), f("k", [], TensorProto.BOOL)]
    cases = [  # the nodes, how many Wheres stay
        (  # the inner one reached through a Where on another condition
            [("Where", ["c", "x", "y"], "i"), ("Where", ["k", "i", "nan"], "m")]
            + [("Where", ["c", "m", "zero"], "w")],
            2,
        ),
        ([("Where", ["c", "x", "y"], "i"), ("Where", ["c", "zero", "i"], "w")], 1),  # else side
        (  # the inner one is read elsewhere too: it stays
            [("Where", ["c", "x", "y"], "i"), ("Where", ["c", "i", "zero"], "v")]
            + [("Add", ["v", "i"], "w")],
            2,
        ),
    ]
    constants = [
        tril,
        numpy_helper.from_array(np.full((2, 2), np.nan, np.float32), "nan"),
        numpy_helper.from_array(np.zeros((2, 2), np.float32), "zero"),
    ]
    rng = np.random.default_rng(5)
    for nodes, wheres in cases:
        graph = [helper.make_node(op, ins, [out]) for op, ins, out in nodes]
        proto = _model(
            [*graph, helper.make_node("Neg", ["w"], ["out"])], inputs, [f("out", [2, 2])], constants
        )
        folded = _rewritten(proto, FusePatternsPass())
        assert _ops(folded.graph).count("Where") == wheres, nodes
        for flag in (True, False):
            feeds = {
                "x": rng.standard_normal((2, 2)).astype(np.float32),
                "y": rng.standard_normal((2, 2)).astype(np.float32),
                "k": np.array(flag),
            }
            np.testing.assert_array_equal(_run(folded, feeds)[0], _run(proto, feeds)[0])


def test_a_factor_masked_twice_keeps_its_numbers():
    def fn(a):  # lax's Cholesky keeps the upper triangle; tril drops it again
        return jnp.tril(jax.lax.linalg.cholesky(a, symmetrize_input=False))

    a = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]], np.float32)
    bad = a.copy()
    bad[2, 2] = -1.0  # not positive definite: NaN everywhere
    model = to_onnx(fn, [a])
    onnx.checker.check_model(model, full_check=True)
    # two per column but the last (one), the kept triangle, the NaN; the second tril goes
    assert _ops(model.graph).count("Where") == 2 + 2 + 1 + 1 + 1
    for m in (a, bad):
        (got,) = _run(model, {"in_0": m})
        np.testing.assert_allclose(got, np.asarray(fn(m)), rtol=1e-6, atol=1e-6)


def test_integer_identities_go():
    x = np.array([0, -1, 7, np.iinfo(np.int32).max, np.iinfo(np.int32).min], np.int32)
    for op, const in (("Add", 0), ("Sub", 0), ("Mul", 1), ("Div", 1)):
        proto = _binary(op, np.int32(const), const_first=False, dtype=TensorProto.INT32, shape=(5,))
        folded = _rewritten(proto, FusePatternsPass())
        assert _ops(folded.graph) == ["Neg"], op
        np.testing.assert_array_equal(_run(folded, {"x": x})[0], _run(proto, {"x": x})[0])


def test_what_is_no_identity_stays():
    cases = [  # x * 0 (inf, NaN), 0 - x, 1 / x, a constant that broadcasts x, not all neutral
        ("Mul", np.float32(0.0), False, (8,)),
        ("Sub", np.float32(0.0), True, (8,)),
        ("Div", np.float32(1.0), True, (8,)),
        ("Add", np.zeros((2, 8), np.float32), False, (8,)),
        ("Mul", np.array([1, 1, 1, 1, 1, 1, 1, 2], np.float32), False, (8,)),
        ("Max", np.float32(np.inf), False, (8,)),
        ("Min", np.float32(3e38), True, (8,)),
    ]
    for op, const, first, shape in cases:
        proto = _binary(op, const, const_first=first, shape=shape)
        proto.graph.output[0].type.tensor_type.ClearField("shape")
        folded = _rewritten(proto, FusePatternsPass())
        assert op in _ops(folded.graph), (op, const, first)


def test_identities_go_inside_a_loop_body():
    def fn(x):
        def step(i, c):
            return jnp.sin(c) * 1.0 + 0.0 - 0.0

        return jax.lax.fori_loop(0, (x[0] > -10).astype(jnp.int32) * 3, step, x)

    x = np.array([0.5, -0.0, np.inf, np.nan], np.float32)
    model = to_onnx(fn, [x])
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    body = _ops(loop.attribute[0].g)
    assert body == ["Sin"], body  # the counter went too: the Loop has its trip count
    (got,) = _run(model, {model.graph.input[0].name: x})
    np.testing.assert_array_equal(got, np.asarray(jax.jit(fn)(x)))


def _index_chain(narrow: int, wide: int, *, length: int = 5) -> onnx.ModelProto:
    """``data[Squeeze(Cast(Unsqueeze(Cast(ArgMax(v), narrow)), wide))]``: an index
    narrowed, moved one axis up, widened back, and read with a Gather."""
    axes = numpy_helper.from_array(np.array([0, 1], np.int64), "axes")
    last = numpy_helper.from_array(np.array([-1], np.int64), "last")
    nodes = [
        helper.make_node("ArgMax", ["v"], ["i"], axis=0, keepdims=0),
        helper.make_node("Cast", ["i"], ["narrow"], to=narrow),
        helper.make_node("Unsqueeze", ["narrow", "axes"], ["up"]),
        helper.make_node("Cast", ["up"], ["wide"], to=wide),
        helper.make_node("Squeeze", ["wide", "last"], ["k"]),
        helper.make_node("Gather", ["data", "k"], ["out"], axis=0),
    ]
    return _model(
        nodes,
        [
            helper.make_tensor_value_info("v", TensorProto.FLOAT, [length]),
            helper.make_tensor_value_info("data", TensorProto.FLOAT, [length, 2]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2])],
        [axes, last],
    )


def test_an_index_cast_round_trip_through_layout_ops_goes():
    proto = _index_chain(TensorProto.INT32, TensorProto.INT64)
    folded = _rewritten(proto, FoldIndexRangesPass(), common.RemoveUnusedNodesPass())
    # the ArgMax lies in [0, 4]: int32 holds it; the Casts go, one Unsqueeze stays
    assert _ops(folded.graph) == ["ArgMax", "Unsqueeze", "Gather"], _ops(folded.graph)
    data = np.arange(10, dtype=np.float32).reshape(5, 2)
    for v in (SPECIAL[:5], np.array([1, 9, 3, 9, -1], np.float32)):
        feeds = {"v": v, "data": data}
        np.testing.assert_array_equal(_run(folded, feeds)[0], _run(proto, feeds)[0])


def test_a_narrowing_round_trip_stays_when_the_interval_does_not_fit():
    proto = _index_chain(TensorProto.INT8, TensorProto.INT64, length=300)
    folded = _rewritten(proto, FoldIndexRangesPass(), common.RemoveUnusedNodesPass())
    ops = _ops(folded.graph)
    assert ops.count("Cast") == 2 and "Squeeze" not in ops, ops  # the Casts commute only


def _widening_round_trip() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Cast", ["x"], ["wide"], to=TensorProto.INT64),
        helper.make_node("Unsqueeze", ["wide", "axes"], ["up"]),
        helper.make_node("Cast", ["up"], ["back"], to=TensorProto.INT32),
        helper.make_node("Squeeze", ["back", "axes"], ["y"]),
        helper.make_node("Neg", ["y"], ["out"]),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.INT32, [4])],
        [helper.make_tensor_value_info("out", TensorProto.INT32, [4])],
        [numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )


def test_a_widening_round_trip_always_goes():
    proto = _widening_round_trip()
    folded = _rewritten(proto, FoldIndexRangesPass(), common.RemoveUnusedNodesPass())
    assert _ops(folded.graph) == ["Neg"], _ops(folded.graph)
    x = np.array([0, -7, np.iinfo(np.int32).max, np.iinfo(np.int32).min], np.int32)
    np.testing.assert_array_equal(_run(folded, {"x": x})[0], _run(proto, {"x": x})[0])


def test_an_argmax_index_in_a_loop_body_reads_without_casts():
    def fn(x):
        def step(i, c):
            k = jnp.argmax(jnp.abs(c)).astype(jnp.int32)
            return c.at[k].multiply(0.5)

        return jax.lax.fori_loop(0, (x[0] > -10).astype(jnp.int32) * 3, step, x)

    x = np.array([0.5, -4.0, 2.0, 1.0], np.float32)
    model = to_onnx(fn, [x])
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    casts = [n for n in loop.attribute[0].g.node if n.op_type == "Cast"]
    to = [helper.get_attribute_value(n.attribute[0]) for n in casts]
    assert TensorProto.INT32 not in to and TensorProto.INT64 not in to, to
    for value in (x, np.array([np.nan, -0.0, np.inf, 1.0], np.float32)):
        (got,) = _run(model, {model.graph.input[0].name: value})
        np.testing.assert_array_equal(got, np.asarray(jax.jit(fn)(value)))


def _const_model(nodes, initializers, dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    return _model(nodes, [], [helper.make_tensor_value_info("out", dtype, None)], initializers)


def test_a_chain_from_a_product_of_constants_folds_completely():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(4, 5)).astype(np.float32)
    scale = np.array([[2.0], [np.inf], [-0.0]], np.float32).reshape(1, 3, 1)
    proto = _const_model(
        [
            helper.make_node("Einsum", ["a", "b"], ["ab"], equation="ij,jk->ik"),
            helper.make_node("Unsqueeze", ["ab", "axes"], ["up"]),
            helper.make_node("Mul", ["up", "scale"], ["y"]),
            helper.make_node("Identity", ["y"], ["out"]),
        ],
        [
            numpy_helper.from_array(a, "a"),
            numpy_helper.from_array(b, "b"),
            numpy_helper.from_array(np.array([0], np.int64), "axes"),
            numpy_helper.from_array(scale, "scale"),
        ],
    )
    folded = _rewritten(proto, FoldConstantsPass())
    assert _ops(folded.graph) == ["Identity"], _ops(folded.graph)
    got, want = _run(folded, {})[0], _run(proto, {})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)[None] * scale
    np.testing.assert_array_equal(got, exact)  # rounded once from float64


def test_matmul_and_gemm_of_constants_fold():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=(2, 3)).astype(np.float32)
    c = np.array([-0.0, np.nan], np.float32)
    inits = [numpy_helper.from_array(v, n) for v, n in ((a, "a"), (b, "b"), (c, "c"))]
    for node in (
        helper.make_node("MatMul", ["a", "bt"], ["out"]),
        helper.make_node("Gemm", ["a", "b", "c"], ["out"], transB=1, alpha=0.5, beta=2.0),
    ):
        bt = numpy_helper.from_array(b.T.copy(), "bt")
        proto = _const_model([node], [*inits, bt])
        proto.graph.node.append(helper.make_node("Identity", ["out"], ["res"]))
        proto.graph.output[0].name = "res"
        folded = _rewritten(proto, FoldConstantsPass())
        assert _ops(folded.graph) == ["Identity"], node.op_type
        got, want = _run(folded, {})[0], _run(proto, {})[0]
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_integer_products_fold_exactly_or_not_at_all():
    small = np.array([[3, -4], [5, 6]], np.int32)
    big = np.full((2, 2), 2**30, np.int32)
    for a, folds in ((small, True), (big, False)):
        proto = _const_model(
            [
                helper.make_node("MatMul", ["a", "a"], ["y"]),
                helper.make_node("Identity", ["y"], ["out"]),
            ],
            [numpy_helper.from_array(a, "a")],
            TensorProto.INT32,
        )
        folded = _rewritten(proto, FoldConstantsPass())
        assert ("MatMul" not in _ops(folded.graph)) == folds
        if folds:
            np.testing.assert_array_equal(_run(folded, {})[0], _run(proto, {})[0])


def test_a_large_product_of_constants_stays():
    a = np.ones((20, 20), np.float32)  # a 400-element result: above the limit
    proto = _const_model(
        [helper.make_node("MatMul", ["a", "a"], ["y"]), helper.make_node("Neg", ["y"], ["out"])],
        [numpy_helper.from_array(a, "a")],
    )
    folded = _rewritten(proto, FoldConstantsPass())
    assert "MatMul" in _ops(folded.graph)


def _body_ops(model: onnx.ModelProto) -> list[str]:
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    return _ops(next(a.g for a in loop.attribute if a.name == "body"))


def test_a_scatter_into_a_row_a_bounded_counter_names_writes_the_row_itself():
    """A Runge-Kutta stage loop stores stage ``i`` in row ``i`` of a buffer: the counter is
    bounded by the loop, so the pad row for out-of-bounds writes (and its Slice) goes."""

    def stages(y):
        def body(carry):
            i, k = carry
            return i + 1, k.at[i].set(jnp.sin(y * (i + 1.0)))

        return jax.lax.while_loop(lambda c: c[0] < 7, body, (0, jnp.zeros((7, 3))))[1]

    y = np.array([0.5, -0.0, 2.0], np.float32)
    model = to_onnx(stages, [y])
    onnx.checker.check_model(model, full_check=True)
    ops = _body_ops(model)
    assert ops.count("ScatterND") == 1 and "Concat" not in ops and "Slice" not in ops, ops
    (got,) = _run(model, {"in_0": y})
    np.testing.assert_allclose(got, np.asarray(jax.jit(stages)(y)), rtol=1e-6, atol=1e-7)


def test_an_unbounded_scatter_keeps_its_pad_row():
    def writes(y, start):  # the row index comes from the input: it may be out of bounds
        body = lambda i, k: k.at[start + i].set(y * i)
        return jax.lax.fori_loop(0, 3, body, jnp.zeros((4, 3)))

    y = np.array([0.5, -1.0, 2.0], np.float32)
    model = to_onnx(writes, [y, np.array(0, np.int32)])
    assert "Concat" in _body_ops(model)
    for start in (0, 2, 5, -7):
        (got,) = _run(model, {"in_0": y, "in_1": np.array(start, np.int32)})
        np.testing.assert_array_equal(got, np.asarray(jax.jit(writes)(y, np.int32(start))))


def test_constants_fold_inside_loop_bodies_and_after_decided_comparisons():
    def fn(x):
        def body(i, c):
            flag = jnp.logical_and(i >= 0, jnp.array([True, True]))  # decided: always true
            scale = jnp.array([2.0, 3.0]) * jnp.array([0.5, 1.0 / 3.0])  # constants only
            return jnp.where(flag, c * scale, -c)

        return jax.lax.fori_loop(0, x.shape[0] + 3, body, x)

    x = np.array([0.25, -4.0], np.float32)
    model = to_onnx(fn, [x])
    ops = _body_ops(model) if any(n.op_type == "Loop" for n in model.graph.node) else []
    assert "And" not in ops and "Where" not in ops and "GreaterOrEqual" not in ops, ops
    (got,) = _run(model, {"in_0": x})
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-6)


def test_an_any_over_one_flag_in_a_loop_body_is_the_flag():
    """``jnp.any`` of a scalar made a vector (a pytree reduction over one leaf): the
    Cast to uint8, the ReduceMax over its one element and the Cast back go."""

    def fn(x):
        def body(i, c):
            bad = jnp.any(jnp.isnan(jnp.atleast_1d(jnp.sum(c))))
            return jnp.where(bad, c, c * 0.5 + i)

        return jax.lax.fori_loop(0, 4, body, x)

    x = np.array([0.25, -4.0], np.float32)
    model = to_onnx(fn, [x])
    onnx.checker.check_model(model, full_check=True)
    ops = _body_ops(model)
    assert "ReduceMax" not in ops and ops.count("Cast") == 1, ops  # the counter's Cast stays
    for value in (x, np.array([np.nan, 1.0], np.float32)):
        (got,) = _run(model, {"in_0": value})
        np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(value)), rtol=1e-6)
