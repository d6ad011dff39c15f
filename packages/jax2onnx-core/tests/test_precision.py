"""The precision step: bfloat16 models run in ONNX Runtime CPU with JAX's numbers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from jax import lax

import jax2onnx
from jax2onnx.plugin import native_kernel, run_session
from jax2onnx.values.kernels import HALF_KERNELS

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    onnx.checker.check_model(model, full_check=True)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _run(model: onnx.ModelProto, *args: np.ndarray) -> list[np.ndarray]:
    session = _session(model)
    names = [i.name for i in session.get_inputs()]
    return run_session(session, dict(zip(names, args)))


def _x(shape=(4, 8), dtype=F32, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _bf16_inputs(model: onnx.ModelProto) -> list[str]:
    """The nodes of every graph that read a bfloat16 value ONNX Runtime has no kernel for."""
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    types.update({v.name: v.type.tensor_type.elem_type for v in inferred.graph.input})
    types.update({i.name: i.data_type for i in inferred.graph.initializer})
    bad = []
    for node in inferred.graph.node:
        reads = [types.get(name) for name in node.input if name]
        if onnx.TensorProto.BFLOAT16 in reads and not native_kernel(node.op_type, BF16, opset):
            bad.append(node.op_type)
    return bad


def test_a_bfloat16_chain_rounds_where_jax_does():
    def fn(x):
        y = x.astype(jnp.bfloat16)
        return jnp.tanh(jnp.exp(y) * y + y).astype(jnp.float32)

    x = _x((256,))
    model = jax2onnx.to_onnx(fn, [x])
    assert _bf16_inputs(model) == []
    (got,) = _run(model, x)
    want = np.asarray(fn(x))  # op by op: each result rounded to bfloat16
    # float32 exp/tanh may differ in the last float32 bit, which can flip a rounding
    assert np.mean(got == want) > 0.97
    np.testing.assert_allclose(got, want, rtol=2**-7)
    ops = [n.op_type for n in model.graph.node]
    # x rounded to bfloat16 and widened; exp, mul, add, tanh each rounded and widened
    assert ops.count("Cast") == 10


def test_native_half_precision_keeps_the_bfloat16_ops():
    fn = lambda x: jnp.exp(x) * 2  # noqa: E731
    x = _x(dtype=BF16)
    native = jax2onnx.to_onnx(fn, [x], native_half_precision=True)
    assert [n.op_type for n in native.graph.node] == ["Exp", "Mul"]
    assert _bf16_inputs(native) == ["Exp", "Mul"]
    with pytest.raises(Exception, match="NOT_IMPLEMENTED|implementation"):
        _session(native)
    default = jax2onnx.to_onnx(fn, [x])
    assert _bf16_inputs(default) == []
    (got,) = _run(default, x)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.astype(F32), np.asarray(jax.jit(fn)(x)).astype(F32))


def test_native_half_precision_must_be_a_bool():
    with pytest.raises(TypeError, match="native_half_precision must be a bool"):
        jax2onnx.to_onnx(jnp.exp, [(3,)], native_half_precision="yes")


def test_ops_with_bfloat16_kernels_stay_bfloat16():
    def fn(x, w):
        y = jnp.transpose(x).reshape(2, -1)  # Transpose, Reshape: ORT has bf16 kernels
        return jnp.concatenate([y, y], axis=1) @ w

    x, w = _x((4, 8), BF16), _x((32, 3), BF16, seed=1)
    model = jax2onnx.to_onnx(fn, [x, w])
    types = {
        n.op_type: [i.type.tensor_type.elem_type for i in model.graph.input]
        for n in model.graph.node
    }
    assert "Transpose" in types and "Reshape" in types
    (got,) = _run(model, x, w)
    want = np.asarray(jax.jit(fn)(x, w))
    np.testing.assert_allclose(got.astype(F32), want.astype(F32), rtol=1e-2, atol=1e-2)


def test_exact_cast_pairs_fold_and_rounding_pairs_stay():
    def exact(x):  # neg, abs, max of bfloat16 numbers are bfloat16 numbers: one Cast in
        y = x.astype(jnp.bfloat16)
        return jnp.exp(jnp.maximum(-y, jnp.abs(y))).astype(jnp.float32)

    model = jax2onnx.to_onnx(exact, [_x((16,))])
    ops = [n.op_type for n in model.graph.node]
    # the user's two Casts; one widening for neg, abs, max and exp; exp's rounding
    assert ops == ["Cast", "Cast", "Neg", "Abs", "Max", "Exp", "Cast", "Cast"]
    x = _x((16,))
    (got,) = _run(model, x)
    np.testing.assert_allclose(got, np.asarray(exact(x)), rtol=2**-7)

    def widen_narrow(x):  # bfloat16 -> float32 -> bfloat16 gives x back
        return jnp.exp(x.astype(jnp.float32).astype(jnp.bfloat16))

    model = jax2onnx.to_onnx(widen_narrow, [_x(dtype=BF16)])
    assert [n.op_type for n in model.graph.node] == ["Cast", "Exp", "Cast"]

    def rounds(x):  # float32 -> bfloat16 -> float32 rounds: the pair stays
        return jnp.exp(x).astype(jnp.bfloat16).astype(jnp.float32) * 3

    model = jax2onnx.to_onnx(rounds, [_x()])
    assert [n.op_type for n in model.graph.node] == ["Exp", "Cast", "Cast", "Mul"]


def test_bfloat16_inside_loop_and_if_bodies():
    def fn(x):
        def step(c, _):
            return jnp.sin(c) * c + 1, None

        c, _ = lax.scan(step, x.astype(jnp.bfloat16), None, length=3)
        c = lax.cond(c.sum() > 0, jnp.exp, jnp.tanh, c)
        return c.astype(jnp.float32)

    x = _x((8,))
    model = jax2onnx.to_onnx(fn, [x])
    (got,) = _run(model, x)
    # the model rounds every op to bfloat16 as JAX does op by op; a float32 sin one bit
    # apart (XLA's and ORT's kernels differ by CPU) can flip one rounding in the loop, which
    # exp makes two bfloat16 ulps: hence the suite's bfloat16 tolerance
    np.testing.assert_allclose(got, np.asarray(fn(x)), rtol=2e-2, atol=1e-2)


def test_bfloat16_inside_an_onnx_function():
    @jax2onnx.onnx_function
    def block(x):
        return jax.nn.gelu(x) * x

    x = _x((3, 5), BF16)
    model = jax2onnx.to_onnx(lambda x: block(block(x)), [x])
    assert model.functions
    (got,) = _run(model, x)
    want = np.asarray(jax.jit(lambda x: block(block(x)))(x))
    np.testing.assert_allclose(got.astype(F32), want.astype(F32), rtol=2e-2, atol=1e-2)


def test_bfloat16_graph_outputs_keep_their_names_and_dtype():
    x = _x(dtype=BF16)
    model = jax2onnx.to_onnx(
        lambda x: (jnp.exp(x), jnp.sin(x).astype(jnp.float32)),
        [x],
        input_names=["x"],
        output_names=["e", "s"],
    )
    assert [o.name for o in model.graph.output] == ["e", "s"]
    e, s = _run(model, x)
    assert e.dtype == BF16 and s.dtype == np.float32


def test_allclose_and_verify_take_bfloat16_inputs(tmp_path):
    fn = lambda x: jax.nn.softmax(x) * 2  # noqa: E731
    x = _x(dtype=BF16)
    path = jax2onnx.to_onnx(fn, [x], return_mode="file", output_path=tmp_path / "m.onnx")
    ok, message = jax2onnx.allclose(fn, path, [x], rtol=2e-2, atol=1e-2)
    assert ok, message
    report = jax2onnx.verify(fn, [x])
    assert report.ok, report.summary()


def test_float16_rounds_between_ops_as_jax_does():
    """ORT would widen float16 itself, without rounding between ops: the step rounds."""
    fn = jax.grad(lambda x: jnp.clip(x + 1, 0, 2).sum())
    x = np.array([-1.5, 0.3, 0.7], np.float16)  # clip's gradient compares the rounded x + 1
    (got,) = _run(jax2onnx.to_onnx(fn, [x]), x)
    np.testing.assert_array_equal(got, np.asarray(fn(x)))
    g = lambda x: jnp.tanh(jnp.exp(x) * x + x)  # noqa: E731
    xs = _x((512,), np.float16)
    model = jax2onnx.to_onnx(g, [xs])
    (got,) = _run(model, xs)
    assert np.mean(got == np.asarray(g(xs))) > 0.99
    native = jax2onnx.to_onnx(g, [xs], native_half_precision=True)
    assert [n.op_type for n in native.graph.node] == ["Exp", "Mul", "Add", "Tanh"]


def test_native_mode_widens_ops_the_onnx_schema_lacks_the_half_type_for():
    fn = lambda x: jax.nn.celu(x)  # noqa: E731  ONNX Celu: float32 only
    model = jax2onnx.to_onnx(fn, [_x(dtype=np.float16)], native_half_precision=True)
    onnx.checker.check_model(model, full_check=True)


def _registry() -> dict:
    from onnxruntime.capi import _pybind_state

    found: dict = {}
    for d in _pybind_state.get_all_opkernel_def():
        if d.provider != "CPUExecutionProvider" or d.domain not in ("", "ai.onnx"):
            continue
        for name, dtype in (("tensor(bfloat16)", BF16), ("tensor(float16)", np.dtype(np.float16))):
            if any(name in types for types in d.type_constraints.values()):
                first = found.setdefault(dtype, {}).get(d.op_name, 10**6)
                found[dtype][d.op_name] = min(first, d.version_range[0])
    return found


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)], ids=["bfloat16", "float16"])
def test_the_half_precision_table_is_onnx_runtimes(dtype):
    """Every op in the table has the kernel from that opset on; ops the converter emits
    that are missing from the table have none (opsets 17-26)."""
    registry = _registry()[dtype]
    table = HALF_KERNELS[dtype]
    for op, first in table.items():
        assert op in registry and registry[op] <= first, op
    emitted = ["Add", "Mul", "Exp", "MatMul", "Gemm", "Where", "Softmax", "Gelu", "Sqrt", "Erf"]
    emitted += ["ReduceSum", "ReduceMax", "Conv", "Tanh", "Sigmoid", "Neg", "Expand", "Clip"]
    for op in emitted:
        if op not in table:
            assert registry.get(op, 10**6) > 26, f"ONNX Runtime now has {op} for {dtype}"


def test_an_untyped_result_of_a_widened_op_is_cast_back():
    """A rule may leave an output untyped: the schema says it has its inputs' type."""
    from jax2onnx.passes import FoldCastsPass, WidenHalfPrecisionPass
    from jax2onnx.values.ir import ir

    x = ir.Value(name="x", shape=ir.Shape([3]), type=ir.TensorType(ir.DataType.BFLOAT16))
    exp = ir.Node("", "Exp", [x], num_outputs=1)
    exp.outputs[0].name = "e"  # no dtype
    flip = ir.Node("", "Neg", [exp.outputs[0]], num_outputs=1)
    y = flip.outputs[0]
    y.name, y.dtype, y.shape = "y", ir.DataType.BFLOAT16, ir.Shape([3])
    graph = ir.Graph([x], [y], nodes=[exp, flip], opset_imports={"": 23}, name="g")
    model = ir.Model(graph, ir_version=10)
    WidenHalfPrecisionPass()(model)
    FoldCastsPass()(model)
    proto = ir.serde.serialize_model(model)
    ops = [n.op_type for n in proto.graph.node]
    assert ops == ["Cast", "Exp", "Cast", "Cast", "Neg", "Cast"], ops
    xb = np.array([0.5, -1.0, 2.0], BF16)
    (got,) = _run(proto, xb)
    want = -np.exp(xb.astype(F32)).astype(BF16)
    np.testing.assert_array_equal(got.astype(F32), want.astype(F32))


def test_native_half_precision_widens_only_what_onnx_has_no_bfloat16_for():
    x = _x((4, 5), BF16)
    fn = lambda x: jnp.einsum("ij,kj->ik", jnp.exp(x), x)  # noqa: E731
    model = jax2onnx.to_onnx(fn, [x], native_half_precision=True)
    onnx.checker.check_model(model, full_check=True)  # valid ONNX, whatever the runtime
    bf16_ops = [n.op_type for n in model.graph.node if n.op_type != "Cast"]
    assert "Exp" in bf16_ops
    topk = lambda x: lax.top_k(x, 2)[0]  # noqa: E731
    model = jax2onnx.to_onnx(topk, [x], native_half_precision=True, opset=23)
    onnx.checker.check_model(model, full_check=True)


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)], ids=["bfloat16", "float16"])
def test_a_kernel_that_refuses_an_attribute_is_widened(dtype):
    """ORT registers half-precision ScatterND but refuses a reduction on it at run time."""
    assert native_kernel("ScatterND", dtype) and native_kernel(
        "ScatterND", dtype, attributes={"reduction": "none"}
    )
    assert not native_kernel("ScatterND", dtype, attributes={"reduction": "add"})
    x, u = np.ones((5, 3), dtype), np.full((4, 3), 0.5, dtype)
    rows = np.array([0, 1, 1, 4], np.int32)
    fn = lambda x, i, u: jnp.asarray(x).at[i].add(u)  # noqa: E731
    (got,) = _run(jax2onnx.to_onnx(fn, [x, rows, u]), x, rows, u)
    np.testing.assert_array_equal(got.astype(F32), np.asarray(fn(x, rows, u)).astype(F32))


@pytest.mark.parametrize("dtype", [BF16, F32])
def test_run_session_keeps_scalars_0d_with_bfloat16_about(dtype):
    # a 0-d array fed beside (or as) bfloat16 goes through OrtValues: still a scalar
    x = np.asarray(1.2345, BF16)
    y = np.asarray(2.0, dtype)
    model = jax2onnx.to_onnx(lambda a, b: (a * 2, b + 1), [x, y])
    got_x, got_y = _run(model, x, y)
    assert got_x.shape == () and got_y.shape == ()
    assert got_x == x * 2 and got_y == y + 1


@pytest.mark.parametrize("native", [False, True], ids=["default", "native"])
def test_a_bfloat16_compress_computes_in_float32(native):
    """ONNX's Compress has no bfloat16 (ONNX Runtime registers one): the op is widened."""
    fn = lambda c, x: jnp.compress(c, x, axis=1)  # noqa: E731
    c = np.array([True, False, True])
    x = _x((2, 3), BF16)
    model = jax2onnx.to_onnx(fn, [c, x], native_half_precision=native)
    assert [n.op_type for n in model.graph.node] == ["Cast", "Compress", "Cast"]
    (got,) = _run(model, c, x)  # full check, then ONNX Runtime
    want = np.asarray(fn(c, x))
    assert got.dtype == BF16 and got.shape == want.shape
    np.testing.assert_array_equal(got.astype(F32), want.astype(F32))


def _loops(p, x):
    def step(c, _):
        return c * 2 + 1, c

    c, ys = lax.scan(step, x, None, length=3)
    c = lax.cond(p, lambda c: c * 2, lambda c: c + 1, c)
    n = lax.while_loop(lambda s: s[0] < 2, lambda s: (s[0] + 1, s[1] * 3), (0, c))[1]
    return n, ys


def test_bfloat16_loop_and_if_below_opset_16_carry_float32():
    """Loop and If have no bfloat16 before opset 16: the bodies read and give float32."""
    x = _x((4,), BF16)
    for p in (np.array(True), np.array(False)):
        model = jax2onnx.to_onnx(_loops, [p, x], opset=15)
        got = _run(model, p, x)  # full check, then ONNX Runtime
        for g, w in zip(got, _loops(p, x), strict=True):
            assert g.dtype == BF16
            np.testing.assert_array_equal(g.astype(F32), np.asarray(w).astype(F32))
    # what a Loop carries is always a bfloat16 number: its body does not round it again
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    body = loop.attribute[0].g
    (mul,) = [n for n in body.node if n.op_type == "Mul"]
    assert mul.input[0] == body.input[2].name


def test_native_half_precision_widens_loop_and_if_below_opset_16():
    """Their bodies keep computing in bfloat16; only what they carry is float32."""
    model = jax2onnx.to_onnx(
        _loops, [np.array(True), _x((4,), BF16)], opset=15, native_half_precision=True
    )
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model)
    body = next(n for n in inferred.graph.node if n.op_type == "Loop").attribute[0].g
    types = {v.name: v.type.tensor_type.elem_type for v in body.value_info}
    (mul,) = [n for n in body.node if n.op_type == "Mul"]
    assert types[mul.input[0]] == onnx.TensorProto.BFLOAT16  # the body's op stays bfloat16
    interface = [v.type.tensor_type.elem_type for v in [*body.input, *body.output]]
    assert onnx.TensorProto.BFLOAT16 not in interface


@pytest.mark.parametrize("native", [False, True], ids=["default", "native"])
def test_a_bfloat16_constant_of_shape_below_opset_20_is_widened(native):
    """ConstantOfShape has bfloat16 from opset 20: before, it fills float32, Cast back."""
    from jax2onnx.passes import FoldCastsPass, WidenHalfPrecisionPass
    from jax2onnx.values.ir import ir

    shape = ir.Value(name="shape", shape=ir.Shape([2]), type=ir.TensorType(ir.DataType.INT64))
    fill = ir.Tensor(np.array([1.5], BF16))
    node = ir.Node("", "ConstantOfShape", [shape], [ir.AttrTensor("value", fill)])
    y = node.outputs[0]
    y.name, y.dtype, y.shape = "y", ir.DataType.BFLOAT16, ir.Shape([None, None])
    graph = ir.Graph([shape], [y], nodes=[node], opset_imports={"": 19}, name="g")
    model = ir.Model(graph, ir_version=9)
    WidenHalfPrecisionPass(native=native)(model)
    FoldCastsPass()(model)
    proto = ir.serde.serialize_model(model)
    assert [n.op_type for n in proto.graph.node] == ["ConstantOfShape", "Cast"]
    (got,) = _run(proto, np.array([2, 3], np.int64))
    np.testing.assert_array_equal(got, np.full((2, 3), 1.5, BF16))
