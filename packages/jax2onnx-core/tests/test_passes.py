"""Our graph passes: constant, Reshape and Transpose folding, MatMul + Add -> Gemm, dedup.

Every test also checks the numbers are unchanged.
"""

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort

from jax2onnx import to_onnx
from jax2onnx_testkit import op_counts

W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
B = np.array([0.5, -1.0, 2.0], np.float32)


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _check(model, fn, x):
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"in_0": x})
    np.testing.assert_allclose(got, fn(x), rtol=1e-6, atol=1e-6)


def test_dense_layer_becomes_one_gemm():
    fn = lambda x: jnp.tanh(x @ W + B)
    model = to_onnx(fn, [("N", 4)])
    assert _ops(model) == ["Gemm", "Tanh"]
    _check(model, fn, np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))


def test_gemm_output_can_be_the_graph_output():
    fn = lambda x: x @ W + B
    model = to_onnx(fn, [(2, 4)])
    assert _ops(model) == ["Gemm"]
    _check(model, fn, np.ones((2, 4), np.float32))


def test_rank3_and_shared_products_stay_matmul():
    model = to_onnx(lambda x: x @ W + B, [("B", 2, 4)])
    assert _ops(model) == ["MatMul", "Add"]
    shared = lambda x: (x @ W + B, jax.nn.relu(x @ W))
    model = to_onnx(shared, [(2, 4)])
    assert "Gemm" not in _ops(model)


def test_integer_matmul_add_is_not_fused():
    w = np.arange(12, dtype=np.int32).reshape(4, 3)
    model = to_onnx(lambda x: x @ w + 1, [np.zeros((2, 4), np.int32)])
    assert "Gemm" not in _ops(model)


def test_transpose_pairs_fold_away():
    fn = lambda x: jnp.transpose(jnp.transpose(x, (1, 0, 2)) * 2.0, (1, 0, 2))
    model = to_onnx(fn, [(2, 3, 4)])
    assert _ops(model) == ["Mul"]  # the first Transpose sinks through Mul and they cancel
    _check(model, fn, np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    fn = lambda x: jnp.transpose(jnp.transpose(x, (1, 2, 0)), (2, 0, 1)) + 1.0
    model = to_onnx(fn, [(2, 3, 4)])
    assert "Transpose" not in _ops(model)
    _check(model, fn, np.ones((2, 3, 4), np.float32))


def test_normalisation_constants_are_computed_once():
    mean = np.array([0.1, -0.2, 0.3], np.float32)
    var = np.array([1.5, 0.5, 2.0], np.float32)
    scale = np.array([1.0, 2.0, 0.5], np.float32)
    fn = lambda x: (x - mean) * (jax.lax.rsqrt(var + 1e-5) * scale)[None, :] + B
    model = to_onnx(fn, [("N", 3)])
    assert _ops(model) == ["Sub", "Mul", "Add"]
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    # XLA's rsqrt and NumPy's 1/sqrt may differ in the last bit
    np.testing.assert_allclose(
        session.run(None, {"in_0": x})[0], np.asarray(fn(x)), rtol=1e-5, atol=1e-5
    )


def test_constant_lookup_folds_but_runtime_lookup_stays():
    table = np.arange(24, dtype=np.float32).reshape(6, 4)
    fn = lambda x: x + jnp.take(table, jnp.arange(3), axis=0)
    model = to_onnx(fn, [(3, 4)])
    assert _ops(model) == ["Add"]
    _check(model, fn, np.ones((3, 4), np.float32))
    ids = lambda i: jnp.take(table, i, axis=0)
    model = to_onnx(ids, [jax.ShapeDtypeStruct((3,), np.int32)])
    assert "Gather" in _ops(model)


def test_split_heads_and_merge_back_leaves_no_reshape():
    def fn(x):
        heads = jnp.tanh(x).reshape(x.shape[0], 5, 2, 3)
        return heads.reshape(x.shape[0], 5, 6) + 1.0

    model = to_onnx(fn, [("B", 5, 6)])
    assert "Reshape" not in _ops(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(2).standard_normal((2, 5, 6)).astype(np.float32)
    # tanh(x) + 1 cancels near x = -2: one float32 ulp of tanh is a relative 4e-6 there
    np.testing.assert_allclose(session.run(None, {"in_0": x})[0], fn(x), rtol=1e-6, atol=1e-6)


def test_reshape_chain_keeps_a_real_reshape():
    fn = lambda x: jnp.sin(x.reshape(-1, 2, 3).reshape(-1, 3, 2))
    model = to_onnx(fn, [("B", 6)])
    assert _ops(model).count("Reshape") == 1
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_allclose(session.run(None, {"in_0": x})[0], fn(x), rtol=1e-6)


def test_transposes_meet_through_elementwise_ops():
    def fn(x):
        y = jnp.maximum(jnp.transpose(x, (0, 2, 1)), 0.0)
        return jnp.transpose(jnp.tanh(y) * 2.0, (0, 2, 1))

    model = to_onnx(fn, [("B", 3, 4)])
    assert "Transpose" not in _ops(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(session.run(None, {"in_0": x})[0], fn(x), rtol=1e-6)


def test_transpose_stays_before_a_broadcasting_operand():
    row = np.arange(3, dtype=np.float32)
    fn = lambda x: jnp.transpose(x) + row
    model = to_onnx(fn, [(3, 3)])
    assert _ops(model) == ["Transpose", "Add"]
    _check(model, fn, np.arange(9, dtype=np.float32).reshape(3, 3))


def test_folded_scalar_constants_keep_rank_zero():
    fn = lambda x: x[:, 0] * 2.0
    model = to_onnx(fn, [("B", 17, 32)])
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(4).standard_normal((2, 17, 32)).astype(np.float32)
    np.testing.assert_allclose(session.run(None, {"in_0": x})[0], fn(x), rtol=1e-6)


def test_equal_weights_of_any_size_are_stored_once():
    big = np.zeros((64, 64), np.float32)  # above onnx_ir's own size limit
    other = np.zeros((64, 64), np.float32)
    near = big.copy()
    near[-1, -1] = 1.0  # equal in every sampled element but the last
    fn = lambda x: ((x @ big + 1.0) @ other + 2.0) @ near
    model = to_onnx(fn, [("B", 64)])
    sizes = sorted(onnx.numpy_helper.to_array(t).size for t in model.graph.initializer)
    assert sizes.count(64 * 64) == 2  # big and other merged; near kept
    x = np.random.default_rng(5).standard_normal((2, 64)).astype(np.float32)
    _check(model, fn, x)


def test_one_value_returned_twice_keeps_both_output_names():
    def fn(x):
        y = jnp.exp(x)
        return y, y

    model = to_onnx(fn, [("B", 3)], output_names=["first", "second"])
    onnx.checker.check_model(model, full_check=True)
    assert [o.name for o in model.graph.output] == ["first", "second"]
    assert _ops(model) == ["Exp", "Identity"]
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got in session.run(None, {"in_0": x}):
        np.testing.assert_allclose(got, np.exp(x), rtol=1e-6)


def test_a_transpose_pair_folded_at_the_output_keeps_its_shape():
    # vmap over the trailing axis wraps the scatter in Transpose pairs that cancel
    fn = jax.vmap(lambda x, v: x.at[1].set(v), in_axes=(1, 0), out_axes=1)
    model = to_onnx(fn, [(4, "B"), ("B",)])
    onnx.checker.check_model(model, full_check=True)
    assert _ops(model) == ["ScatterND"]
    dims = model.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value or d.dim_param for d in dims] == [4, "B"]
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    v = np.array([-1.0, -2.0, -3.0], np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"in_0": x, "in_1": v})
    np.testing.assert_array_equal(got, np.asarray(fn(x, v)))


def _loop_body(model: onnx.ModelProto) -> onnx.GraphProto:
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    return loop.attribute[0].g


def _run_loop(fn, x: np.ndarray) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    model = to_onnx(fn, [x])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return model, session.run(None, {session.get_inputs()[0].name: x})


def test_equal_subexpressions_merge_inside_a_loop_body():
    def fn(x):
        step = lambda i, c: c * 0.5 + jnp.sin(c) + jnp.sin(c) * x  # noqa: E731
        return jax.lax.fori_loop(0, (x.sum() > 0).astype(jnp.int32) + 20, step, x)

    x = np.linspace(0.1, 1.0, 4, dtype=np.float32)
    model, (got,) = _run_loop(fn, x)
    body_ops = [n.op_type for n in _loop_body(model).node]
    assert body_ops.count("Sin") == 1, body_ops
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-6)


def test_canonical_forms_and_fusions_apply_inside_a_loop_body():
    def fn(x):
        def step(i, c):
            centred = c - jnp.mean(c, axis=1, keepdims=True)
            return centred * 0.9 + jax.nn.relu(c) * 0.1

        return jax.lax.fori_loop(0, (x.sum() > 0).astype(jnp.int32) + 5, step, x)

    x = np.linspace(0.1, 1.0, 6, dtype=np.float32).reshape(2, 3)
    model, (got,) = _run_loop(fn, x)
    body_ops = [n.op_type for n in _loop_body(model).node]
    assert "ReduceMean" in body_ops and "ReduceSum" not in body_ops, body_ops
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-6)


def _dynamic_trips(x):
    """A trip count ONNX cannot know at conversion (a fori_loop of constant bounds is a scan)."""
    return (x.sum() > 0).astype(jnp.int32) + 6


def test_invariant_carries_leave_the_loop_and_invariant_nodes_move_out():
    def fn(x):
        def body(carry):
            i, c, w = carry
            # w never changes, tanh(w @ w.T) is the same every step: both leave the body
            return i + 1, jnp.tanh(w @ w.T) @ c + 0.1, w

        return jax.lax.while_loop(lambda k: k[0] < _dynamic_trips(x), body, (0, x, x * 0.5))[1:]

    x = np.linspace(-1.0, 1.0, 9, dtype=np.float32).reshape(3, 3)
    model, got = _run_loop(fn, x)
    onnx.checker.check_model(model, full_check=True)
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    body_ops = [n.op_type for n in _loop_body(model).node]
    assert "Tanh" not in body_ops and "Identity" not in body_ops, body_ops
    assert len(loop.input) == 2 + 1 and len(loop.output) == 1  # c carried (the count: a trip)
    for out, want in zip(got, jax.jit(fn)(x), strict=True):
        np.testing.assert_allclose(out, np.asarray(want), rtol=1e-5, atol=1e-6)


def test_invariant_work_of_a_nested_loop_moves_out_of_both():
    def fn(x):
        def inner(j, c):
            return c * jnp.cos(x).sum() + jnp.sin(c)

        def outer(i, c):
            return jax.lax.fori_loop(0, _dynamic_trips(c), inner, c)

        return jax.lax.fori_loop(0, _dynamic_trips(x), outer, x)

    x = np.linspace(0.1, 0.4, 4, dtype=np.float32)
    model, (got,) = _run_loop(fn, x)
    onnx.checker.check_model(model, full_check=True)
    main_ops = _ops(model)
    assert "Cos" in main_ops, main_ops  # cos(x).sum() runs once, not once per inner step
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-6)


def test_a_carry_shifted_into_another_is_returned_without_a_copy():
    def fn(x):
        def body(carry):  # b takes a's value: the body returns its input a for b
            i, a, b = carry
            return i + 1, jnp.sin(b) + a, a

        def scanned(c, _):  # a scan output equal to a body input keeps its copy
            return c * 0.5, c

        looped = jax.lax.while_loop(lambda k: k[0] < _dynamic_trips(x), body, (0, x, x * 2))[1:]
        return (*looped, *jax.lax.scan(scanned, x, None, length=12))

    x = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
    model, got = _run_loop(fn, x)
    onnx.checker.check_model(model, full_check=True)
    loops = [n for n in model.graph.node if n.op_type == "Loop"]
    body = next(n.attribute[0].g for n in loops if len(n.input) == 4)  # trips, cond, a, b
    inputs = [v.name for v in body.input]  # (the counter went: the Loop counts the trips)
    assert body.output[2].name == inputs[2], (inputs, [v.name for v in body.output])
    assert "Identity" not in [n.op_type for n in body.node]
    for out, want in zip(got, jax.jit(fn)(x), strict=True):
        np.testing.assert_allclose(out, np.asarray(want), rtol=1e-5, atol=1e-6)


def test_a_carry_set_to_a_constant_each_step_is_a_constant_of_the_body():
    def fn(x):
        def body(carry):  # the flag is reset every step: a constant, not a copy per step
            i, a, flag = carry
            a = jax.lax.cond(flag, lambda v: v * 0.5, lambda v: jnp.sin(v), a)
            return i + 1, a + x, jnp.bool_(False)

        return jax.lax.while_loop(lambda k: k[0] < _dynamic_trips(x), body, (0, x, True))[1:]

    x = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
    model, got = _run_loop(fn, x)
    onnx.checker.check_model(model, full_check=True)
    body = _loop_body(model)
    assert "Identity" not in [n.op_type for n in body.node], [n.op_type for n in body.node]
    assert {v.name for v in body.output} & {t.name for t in body.initializer}
    for out, want in zip(got, jax.jit(fn)(x), strict=True):
        np.testing.assert_allclose(out, np.asarray(want), rtol=1e-5, atol=1e-6)


def _one_carry_body(nodes, carry, initializers=()):
    """A Loop body (step, condition, one carry ``c_in`` -> ``c_out``) of ``nodes``, its
    condition passed on; ``carry`` is the carry's value info maker."""
    from onnx import TensorProto, helper

    return helper.make_graph(
        [*nodes, helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            carry("c_in"),
        ],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), carry("c_out")],
        initializer=list(initializers),
    )


def test_a_body_reads_the_main_graph_constant_equal_to_its_own():
    from onnx import TensorProto, helper

    from jax2onnx.passes import DeduplicateWeightsPass
    from jax2onnx.values.ir import ir

    vector = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])  # noqa: E731
    body = _one_carry_body(
        [helper.make_node("Mul", ["c_in", "two_in_body"], ["c_out"])],
        vector,
        [helper.make_tensor("two_in_body", TensorProto.FLOAT, [2], [2.0, 2.0])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "two"], ["y"]),
            helper.make_node("Loop", ["n", "go", "y"], ["out"], body=body),
        ],
        "main",
        [helper.make_tensor_value_info("n", TensorProto.INT64, []), vector("x")],
        [vector("out")],
        initializer=[
            helper.make_tensor("go", TensorProto.BOOL, [], [True]),
            helper.make_tensor("two", TensorProto.FLOAT, [2], [2.0, 2.0]),
        ],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model = ir.serde.deserialize_model(proto)
    DeduplicateWeightsPass()(model)
    deduplicated = ir.serde.serialize_model(model)
    onnx.checker.check_model(deduplicated, full_check=True)
    assert not deduplicated.graph.node[1].attribute[0].g.initializer
    feeds = {"n": np.array(3, np.int64), "x": np.array([0.5, -1.0], np.float32)}
    run = lambda p: ort.InferenceSession(  # noqa: E731
        p.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, feeds)[0]
    np.testing.assert_array_equal(run(deduplicated), run(proto))


def test_a_body_and_its_parent_never_share_a_value_name():
    from onnx import TensorProto, helper

    from jax2onnx.passes import UniqueNamesPass
    from jax2onnx.values.ir import common, ir

    vector = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])  # noqa: E731
    body = _one_carry_body(  # the body names a value "twice" ...
        [
            helper.make_node("Add", ["c_in", "c_in"], ["twice"]),
            helper.make_node("Identity", ["twice"], ["c_out"]),
        ],
        vector,
    )
    graph = helper.make_graph(  # ... and so does the graph around it, after the Loop
        [
            helper.make_node("Loop", ["n", "go", "x"], ["looped"], body=body),
            helper.make_node("Mul", ["looped", "looped"], ["twice"]),
            helper.make_node("Neg", ["twice"], ["out"]),
        ],
        "main",
        [helper.make_tensor_value_info("n", TensorProto.INT64, []), vector("x")],
        [vector("out")],
        initializer=[helper.make_tensor("go", TensorProto.BOOL, [], [True])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model = ir.serde.deserialize_model(proto)
    UniqueNamesPass()(model)
    common.NameFixPass()(model)
    named = ir.serde.serialize_model(model)
    onnx.checker.check_model(named, full_check=True)
    inner = [o for n in named.graph.node[0].attribute[0].g.node for o in n.output]
    outer = [o for n in named.graph.node for o in n.output]
    assert not set(inner) & set(outer) and [o.name for o in named.graph.output] == ["out"]
    session = ort.InferenceSession(named.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"n": np.array(2, np.int64), "x": np.array([1.0, -2.0], np.float32)})
    np.testing.assert_array_equal(got, -np.array([16.0, 64.0], np.float32))


def test_integer_division_stays_in_a_loop_that_may_not_run():
    """ONNX Runtime fails on an integer Div by zero: in front of a Loop of no steps it would."""
    from onnx import TensorProto, helper

    from jax2onnx.passes import HoistLoopInvariantsPass
    from jax2onnx.values.ir import ir

    int_vector = lambda name: helper.make_tensor_value_info(name, TensorProto.INT32, [2])  # noqa: E731
    body = _one_carry_body(
        [
            helper.make_node("Div", ["a", "b"], ["q"]),
            helper.make_node("Add", ["c_in", "q"], ["c_out"]),
        ],
        int_vector,
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "go", "a"], ["out"], body=body)],
        "main",
        [helper.make_tensor_value_info("n", TensorProto.INT64, []), *map(int_vector, "ab")],
        [int_vector("out")],
        initializer=[helper.make_tensor("go", TensorProto.BOOL, [], [True])],
    )
    model = ir.serde.deserialize_model(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    )
    HoistLoopInvariantsPass()(model)
    proto = ir.serde.serialize_model(model)
    onnx.checker.check_model(proto, full_check=True)
    assert [n.op_type for n in proto.graph.node] == ["Loop"]
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    a, zero = np.array([7, 9], np.int32), np.zeros(2, np.int32)
    (got,) = session.run(None, {"n": np.array(0, np.int64), "a": a, "b": zero})
    np.testing.assert_array_equal(got, a)
    b = np.array([2, 3], np.int32)
    (got,) = session.run(None, {"n": np.array(2, np.int64), "a": a, "b": b})
    np.testing.assert_array_equal(got, a + 2 * (a // b))


def _folded_against_runtime(op: str, inputs: list, outputs: int = 1, opset=18, **attributes):
    """``op`` on constant ``inputs`` (None: an omitted optional input), before and after
    FoldConstantsPass: the folded model returns ONNX Runtime's exact bits (every one of
    the op's ``outputs``), without ``op``."""
    from onnx import helper, numpy_helper

    from jax2onnx.passes import FoldConstantsPass
    from jax2onnx.values.ir import ir

    names = ["" if a is None else f"c{i}" for i, a in enumerate(inputs)]
    initializers = [numpy_helper.from_array(a, n) for a, n in zip(inputs, names) if a is not None]
    results = [f"y{k}" for k in range(outputs)]
    graph = helper.make_graph(
        [
            helper.make_node(op, names, results, **attributes),
            *(helper.make_node("Identity", [y], [f"out{y}"]) for y in results),
        ],
        "fold",
        [],
        [helper.make_empty_tensor_value_info(f"out{y}") for y in results],
        initializer=initializers,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    run = lambda p: ort.InferenceSession(  # noqa: E731
        p.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {})
    model = ir.serde.deserialize_model(proto)
    FoldConstantsPass()(model)
    folded = ir.serde.serialize_model(model)
    assert [n.op_type for n in folded.graph.node] == ["Identity"] * outputs, op
    for got, want in zip(run(folded), run(proto), strict=True):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
    return folded


I64 = lambda *v: np.array(v, np.int64)  # noqa: E731


def test_constant_folding_gives_the_runtimes_bits_for_every_folded_op():
    x = np.linspace(-3.0, 3.0, 12, dtype=np.float32).reshape(3, 4)
    n = np.array([[7, -7, 5], [-5, 9, 0]], np.int32)
    _folded_against_runtime("Slice", [x, I64(1, -3), I64(99, -1), I64(0, 1), I64(1, 2)])
    _folded_against_runtime("Slice", [x, I64(-1), I64(np.iinfo(np.int64).min), I64(1), I64(-2)])
    _folded_against_runtime("Slice", [x, I64(0), I64(2), None, None])
    _folded_against_runtime("Concat", [x[:1], x, x[:2]], axis=0)
    _folded_against_runtime("Expand", [x[:, :1], I64(2, 3, 4)])
    _folded_against_runtime("Mod", [n, np.array([3, -4, 2], np.int32)])
    _folded_against_runtime("Mod", [n, np.array([3, -4, 2], np.int32)], fmod=1)
    _folded_against_runtime("Max", [x, x[::-1], np.float32(0.5)])
    _folded_against_runtime("Min", [n, n[::-1]])
    _folded_against_runtime("Abs", [n])
    _folded_against_runtime("Sign", [x])
    _folded_against_runtime("GatherElements", [x, I64(0, -1, 2, 1).reshape(1, 4)], axis=0)
    _folded_against_runtime("ScatterND", [x, I64(2, 0).reshape(2, 1), x[:2] * 10])
    _folded_against_runtime("ReduceSum", [n, I64(1)], keepdims=0)
    _folded_against_runtime("ReduceSum", [n, None])
    _folded_against_runtime("ReduceSum", [x[:1], I64(0)], keepdims=0)  # one term: exact
    _folded_against_runtime("ReduceSum", [np.zeros((2, 0), np.float32), I64(1)], keepdims=0)
    _folded_against_runtime("ScatterND", [n, I64(1, 0).reshape(2, 1), n * 3], reduction="add")
    _folded_against_runtime("ScatterND", [x, I64(2).reshape(1, 1), x[:1]], reduction="max")
    _folded_against_runtime("Pad", [x, I64(1, 0, 0, 2), np.float32(-1.5)])
    _folded_against_runtime("Pad", [n, I64(0, 1, 1, 0), None, I64(1, 0)])
    _folded_against_runtime("Pow", [x, np.float32(2.0)])
    _folded_against_runtime("Pow", [x, np.float32(1.0)])
    _folded_against_runtime("Pow", [x[:1], np.ones((2, 1), np.float32)])  # broadcasts
    _folded_against_runtime("Tile", [n, I64(2, 1)])
    _folded_against_runtime("CumSum", [n, np.int32(1)])
    _folded_against_runtime("CumSum", [n, I64(0)], exclusive=1, reverse=1)
    _folded_against_runtime("CumSum", [np.array([2**31 - 1, 1], np.int32), I64(0)])  # wraps
    ties = np.array([[3, 1, 3, 2, 1], [0, 0, 0, 5, -1]], np.int64)
    for largest in (0, 1):
        _folded_against_runtime("TopK", [ties, I64(3)], outputs=2, largest=largest)
        _folded_against_runtime("TopK", [ties.T, I64(2)], outputs=2, axis=0, largest=largest)
        _folded_against_runtime("TopK", [x[::-1], I64(4)], outputs=2, largest=largest)
    _folded_against_runtime("TopK", [np.array([[-0.0, 0.0, -0.0]], np.float32), I64(3)], 2)
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -1.0], np.float32)
    _folded_against_runtime("IsNaN", [special])
    _folded_against_runtime("IsInf", [special])
    _folded_against_runtime("IsInf", [special], detect_positive=0)
    _folded_against_runtime("IsInf", [special.astype(np.float64)], detect_negative=0)
    _folded_against_runtime("ReduceMax", [x, I64(1)], keepdims=0)
    _folded_against_runtime("ReduceMin", [x, None])
    _folded_against_runtime("ReduceMax", [n, I64(-1, 0)])
    _folded_against_runtime("ReduceMin", [np.abs(x), I64(0)], keepdims=0)  # zeros of one sign
    _folded_against_runtime("ReduceMax", [special[:2], None], keepdims=0)
    flags = np.array([[True, False], [False, False]])
    _folded_against_runtime("ReduceMax", [flags, I64(1)], opset=20, keepdims=0)
    _folded_against_runtime("ReduceMin", [flags, None], opset=20)
    _folded_against_runtime("ReduceMax", [x, I64()], noop_with_empty_axes=1)


def test_folding_leaves_what_the_runtime_decides_to_the_runtime():
    from onnx import helper, numpy_helper

    from jax2onnx.passes import FoldConstantsPass
    from jax2onnx.values.ir import ir

    x = np.array([1.0, np.nan, 3.0], np.float32)
    cases = [  # float sums (order), NaN extrema, division by zero, repeated scatter indices
        ("ReduceSum", [x], {}),
        ("Max", [x, x[::-1].copy()], {}),
        ("Mod", [np.array([3, 4], np.int32), np.array([0, 2], np.int32)], {}),
        ("ScatterND", [x, I64(0, 0).reshape(2, 1), np.ones(2, np.float32)], {}),
        ("ScatterND", [x, I64(0).reshape(1, 1), x[:1]], {"reduction": "max"}),  # NaN data
        ("Pow", [x, np.float32(3.0)], {}),  # not correctly rounded in general
        ("CumSum", [x, I64(0)], {}),  # float sums: the order of additions
        ("TopK", [x, I64(2)], {}),  # NaN's place in the order
        ("ReduceMax", [x, I64(0)], {}),  # NaN extrema
        ("ReduceMin", [np.array([0.0, -0.0], np.float32)], {}),  # which zero wins
        ("ReduceMax", [np.zeros((0, 2), np.float32), I64(0)], {}),  # an empty set
    ]
    for op, inputs, attributes in cases:
        names = [f"c{i}" for i in range(len(inputs))]
        graph = helper.make_graph(
            [
                helper.make_node(op, names, ["y", "i"][: 2 if op == "TopK" else 1], **attributes),
                helper.make_node("Neg", ["y"], ["out"]),
            ],
            "keep",
            [],
            [helper.make_empty_tensor_value_info("out")],
            initializer=[numpy_helper.from_array(a, n) for a, n in zip(inputs, names)],
        )
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        model = ir.serde.deserialize_model(proto)
        FoldConstantsPass()(model)
        assert op in [n.op_type for n in model.graph], op


def test_an_element_read_is_one_gather_in_the_main_graph_and_in_loop_bodies():
    def rhs(q):  # a state vector's elements, read one by one as ODE right-hand sides do
        return jnp.stack([q[1] * q[2], -q[0] + q[2], q[0] * q[1] - q[2]])

    def fn(q):
        return rhs(q), jax.lax.fori_loop(0, _dynamic_trips(q), lambda i, c: c + 0.01 * rhs(c), q)

    q = np.array([0.3, -0.2, 0.5], np.float32)
    model, got = _run_loop(fn, q)
    onnx.checker.check_model(model, full_check=True)
    for ops in (_ops(model), [n.op_type for n in _loop_body(model).node]):
        assert ops.count("Gather") == 3 and "Squeeze" not in ops and "Slice" not in ops, ops
    for out, want in zip(got, jax.jit(fn)(q), strict=True):
        np.testing.assert_allclose(out, np.asarray(want), rtol=1e-6, atol=1e-6)


def test_what_a_reduction_over_one_leaf_leaves_behind_goes():
    def fn(x):
        ok = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x))]))  # a tree_all over one leaf
        big = jnp.logical_not(jnp.logical_not(jnp.any(x > 2.0)))
        return jnp.where(ok & ~big, x, 0.0)

    x = np.array([1.0, np.inf, 3.0], np.float32)
    model = to_onnx(fn, [x])
    ops = _ops(model)
    assert ops.count("Not") == 1 and "Concat" not in ops and "IsNaN" not in ops, ops
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for value in (x, np.array([1.0, 0.5, -2.0], np.float32), np.array([1.0, 3.0, 0.0], np.float32)):
        (got,) = session.run(None, {"in_0": value})
        np.testing.assert_array_equal(got, np.asarray(jax.jit(fn)(value)))


def test_an_element_of_a_vector_just_stacked_is_the_element_itself():
    def fn(q, flag):
        stacked = jnp.stack([q[0] * 2.0, q[1] + 1.0, jnp.sin(q[2])])
        keep = jnp.logical_and(flag, True) | False  # a flag and constants: the flag
        return jnp.where(keep, stacked * stacked[1] - stacked[-1], q)

    q = np.array([0.3, -0.2, 0.5], np.float32)
    model = to_onnx(fn, [q, np.array(True)])
    onnx.checker.check_model(model, full_check=True)
    ops = _ops(model)
    assert ops.count("Gather") == 3 and "And" not in ops and "Or" not in ops, ops
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for flag in (True, False):
        (got,) = session.run(None, {"in_0": q, "in_1": np.array(flag)})
        np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(q, flag)), rtol=1e-6, atol=1e-7)


_TABLE = np.linspace(-1.0, 1.0, 15, dtype=np.float32).reshape(5, 3)


def _table_walk(step, go_on):
    """A while over a table's rows: the row index is a counter bounded by the condition."""

    def fn(x):
        def body(carry):
            i, acc = carry
            return i + step, acc * 0.5 + jnp.asarray(_TABLE)[i] * x

        more = x.sum() > -100.0  # not constant: the while stays a Loop
        return jax.lax.while_loop(lambda c: more & go_on(c[0]), body, (0, x))[1]

    return fn


def test_a_bounded_counter_indexes_without_wrap_around_or_bounds_checks():
    fn = _table_walk(1, lambda i: i < 5)
    x = np.array([0.5, -1.0, 2.0], np.float32)
    model, (got,) = _run_loop(fn, x)
    onnx.checker.check_model(model, full_check=True)
    body = [n.op_type for n in _loop_body(model).node]
    # i < 0 ? i + 5 : i and the clamp to [0, 4] are decided: i lies in [0, 4] in the body
    assert "Where" not in body and "Clip" not in body, body
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-6, atol=1e-6)


def test_a_counter_that_may_wrap_keeps_its_checks():
    fn = _table_walk(-1, lambda i: i > -4)  # negative rows: JAX wraps them around the table
    x = np.array([0.5, -1.0, 2.0], np.float32)
    model, (got,) = _run_loop(fn, x)
    body = [n.op_type for n in _loop_body(model).node]
    assert "Where" in body or "Clip" in body, body
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-6, atol=1e-6)


def test_a_counters_remainder_needs_no_sign_fix():
    """``(i + 1) % 3`` of a counter from 0 is C's remainder: Python's sign fix-up
    (Less, Add, Where, And) and the branch index's Cast/Equal go; the If branches on
    the remainder's test itself."""

    def fn(x):
        def body(i, c):
            return jax.lax.cond((i + 1) % 3 == 0, lambda v: v * 0.5, lambda v: v + 1.0, c)

        return jax.lax.fori_loop(0, (x.sum() > 0).astype(jnp.int32) + 7, body, x)

    x = np.linspace(0.1, 1.0, 4, dtype=np.float32)
    model, (got,) = _run_loop(fn, x)
    onnx.checker.check_model(model, full_check=True)
    body = [n.op_type for n in _loop_body(model).node]
    assert "Mod" in body and "If" in body, body
    assert not {"Where", "And", "Cast", "Not", "Less"} & set(body), body
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-6, atol=1e-6)


def test_a_loops_start_condition_bounds_a_counter_passed_between_loops():
    """An outer carry advanced by an inner while loop that runs only while it is below
    a limit stays non-negative: indexing by it needs no wrap-around in either body."""
    table = jnp.asarray(np.arange(12, dtype=np.float32).reshape(6, 2))

    def fn(x):
        def inner(carry):
            j, acc = carry
            return j + 1, acc + table[j]

        def outer(carry):
            k, j, acc = carry
            go = (j < 6) & (acc.sum() < 200.0)
            j, acc = jax.lax.while_loop(
                lambda c: (c[0] < 6) & (c[1][0] < 10.0 * (k + 1)), inner, (j, acc)
            )
            return k + 1, j, acc + table[jnp.minimum(j, 5)] * go

        return jax.lax.while_loop(lambda c: c[0] < 4, outer, (0, 0, x))[2]

    x = np.array([0.5, -1.0], np.float32)
    model, (got,) = _run_loop(fn, x)
    onnx.checker.check_model(model, full_check=True)
    ops = op_counts(model)
    # j < 0 ? j + 6 : j is decided in both bodies: j starts at 0 and only grows
    assert "Where" not in ops and "Clip" not in ops, ops
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-6, atol=1e-6)
