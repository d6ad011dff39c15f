"""Complex values in the core: how they are stored, dispatched, checked and reported."""

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from jax import lax
from jax.extend.core import Primitive

from jax2onnx import allclose, onnx_function, to_onnx
from jax2onnx.plugin import Rules, complex_array, stored_array, stored_type
from jax2onnx.values.errors import UnsupportedPrimitiveError

C64 = np.complex64
RNG = np.random.default_rng(0)


def _z(*shape, dtype=C64):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def _run(model, *args):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, map(stored_array, args), strict=True)))


def _dims(value_info):
    return [d.dim_value or d.dim_param for d in value_info.type.tensor_type.shape.dim]


def test_stored_type_of_complex_is_float_with_a_parts_axis():
    assert stored_type(np.dtype(np.complex64), (3, 4)) == (np.dtype(np.float32), (3, 4, 2))
    assert stored_type(np.dtype(np.complex128), ()) == (np.dtype(np.float64), (2,))
    assert stored_type(np.dtype(np.float32), (3,)) == (np.dtype(np.float32), (3,))
    z = _z(2, 3)
    parts = stored_array(z)
    assert parts.dtype == np.float32 and parts.shape == (2, 3, 2)
    np.testing.assert_array_equal(complex_array(parts, C64), z)


def test_complex_inputs_and_outputs_are_float_tensors_with_a_trailing_axis_of_two():
    spec = jax.ShapeDtypeStruct((2, 3), C64)
    model = to_onnx(lambda z, w: z + w, [spec, spec])
    onnx.checker.check_model(model, full_check=True)
    (inp, _), (out,) = model.graph.input, model.graph.output
    assert inp.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert _dims(inp) == [2, 3, 2] and _dims(out) == [2, 3, 2]
    z, w = _z(2, 3), _z(2, 3)
    (got,) = _run(model, z, w)
    np.testing.assert_allclose(complex_array(got, C64), z + w, rtol=1e-6)


def test_symbolic_dims_and_complex128():
    with jax.enable_x64(True):
        model = to_onnx(
            lambda z: z * (2 - 1j),
            [jax.ShapeDtypeStruct((3,), np.complex128)],
            enable_double_precision=True,
        )
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
    z = _z(3, dtype=np.complex128)
    (got,) = _run(model, z)
    np.testing.assert_allclose(complex_array(got, np.complex128), z * (2 - 1j), rtol=1e-14)
    model = to_onnx(
        lambda z: z + z, [jax.ShapeDtypeStruct((jax.export.symbolic_shape("N")[0],), C64)]
    )
    assert _dims(model.graph.input[0]) == ["N", 2]


def test_complex_constants_and_literals_are_stored_as_parts():
    table = _z(4)
    model = to_onnx(lambda z: z * table + 1j, [jax.ShapeDtypeStruct((4,), C64)])
    z = _z(4)
    (got,) = _run(model, z)
    np.testing.assert_allclose(complex_array(got, C64), z * table + 1j, rtol=1e-5, atol=1e-6)
    stored = [i for i in model.graph.initializer if list(i.dims) == [4, 2]]
    assert stored and all(i.data_type == onnx.TensorProto.FLOAT for i in stored)


def test_real_function_with_complex_intermediates():
    fn = lambda x: jnp.real(x * jnp.exp(1j * x))  # noqa: E731
    model = to_onnx(fn, [("B", 5)])
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    (got,) = _run(model, x)
    np.testing.assert_allclose(got, fn(x), rtol=1e-5, atol=1e-6)


def test_control_flow_carries_complex_values():
    def rotate(z):
        return lax.fori_loop(0, 5, lambda i, c: c * (0.6 + 0.8j), z)

    model = to_onnx(rotate, [jax.ShapeDtypeStruct((3,), C64)])
    z = _z(3)
    (got,) = _run(model, z)
    np.testing.assert_allclose(complex_array(got, C64), rotate(z), rtol=1e-5, atol=1e-6)


def test_onnx_function_boundary_takes_and_returns_complex_values():
    @onnx_function
    def twist(z):
        return z * 1j + z

    fn = lambda z: twist(twist(z))  # noqa: E731
    model = to_onnx(fn, [jax.ShapeDtypeStruct((2, 3), C64)])
    (function,) = model.functions
    assert len([n for n in model.graph.node if n.op_type == function.name]) == 2
    z = _z(2, 3)
    (got,) = _run(model, z)
    np.testing.assert_allclose(complex_array(got, C64), fn(z), rtol=1e-5, atol=1e-6)


def test_allclose_feeds_and_compares_complex_values(tmp_path):
    fn = lambda z, x: (z * x, jnp.abs(z))  # noqa: E731
    specs = [jax.ShapeDtypeStruct((3,), C64), jax.ShapeDtypeStruct((3,), np.float32)]
    path = to_onnx(fn, specs, return_mode="file", output_path=str(tmp_path / "c.onnx"))
    z, x = _z(3), RNG.standard_normal(3).astype(np.float32)
    ok, message = allclose(fn, path, [z, x])
    assert ok, message
    ok, message = allclose(lambda z, x: (z * x + 1e-3, jnp.abs(z)), path, [z, x])
    assert not ok and "output 0" in message


def _custom_primitive(name):
    prim = Primitive(name)
    prim.def_abstract_eval(lambda x: x)
    return prim


def test_a_complex_rule_gets_the_stored_values_and_a_real_rule_never_sees_them():
    flip_p = _custom_primitive("flip_parts")
    seen = []
    rules = Rules("flips")

    @rules.lowering(flip_p)
    def real_rule(ctx, x):
        seen.append(("real", ctx.avals_in[0].dtype))
        return ctx.op.Neg(x)

    @rules.lowering(flip_p, values="complex")
    def complex_rule(ctx, x):
        seen.append(("complex", tuple(x.shape)))
        # conj(z) written on the stored parts
        return ctx.decompose(lambda p: p * jnp.array([1.0, -1.0], p.dtype), x, stored=True)

    model = to_onnx(
        lambda z: flip_p.bind(z), [jax.ShapeDtypeStruct((3,), C64)], extra_rules=[rules]
    )
    z = _z(3)
    (got,) = _run(model, z)
    np.testing.assert_array_equal(complex_array(got, C64), np.conj(z))
    to_onnx(lambda x: flip_p.bind(x), [(3,)], extra_rules=[rules])
    assert seen == [("complex", (3, 2)), ("real", np.dtype(np.float32))]


def test_values_argument_is_checked():
    with pytest.raises(ValueError, match="values must be one of"):
        Rules("bad").lowering(lax.tanh_p, values="complex64")


def test_a_macro_primitive_without_a_complex_rule_inlines_its_fallback():
    rules = Rules("twice")
    twice_p = rules.primitive("twice", impl=lambda x: x + x)
    rules.lowering(twice_p)(lambda ctx, x: ctx.op.Add(x, x))
    rules.intercept("jax.numpy.positive", twice_p)  # patched only while converting
    fn = lambda z: jnp.positive(z)  # noqa: E731
    model = to_onnx(fn, [jax.ShapeDtypeStruct((2,), C64)], extra_rules=[rules])
    z = _z(2)
    (got,) = _run(model, z)
    np.testing.assert_allclose(complex_array(got, C64), z + z, rtol=1e-6)


def test_a_primitive_without_a_complex_rule_is_reported_with_the_users_line():
    half_p = _custom_primitive("half_real_only")
    rules = Rules("halves")
    rules.lowering(half_p)(lambda ctx, x: ctx.op.Mul(x, 0.5))
    with pytest.raises(UnsupportedPrimitiveError) as info:
        to_onnx(
            lambda z: half_p.bind(z * 2), [jax.ShapeDtypeStruct((3,), C64)], extra_rules=[rules]
        )
    message = str(info.value)
    assert "'half_real_only (on complex values)' on (complex64[3])" in message
    assert "test_complex.py" in message and "values='complex'" in message


def test_channels_first_complex_input_and_output_keep_the_parts_axis_last(tmp_path):
    fn = lambda z: z * (1 - 2j) + 1  # noqa: E731
    spec = jax.ShapeDtypeStruct((1, 4, 5, 3), C64)
    path = to_onnx(
        fn,
        [spec],
        inputs_as_nchw=[0],
        outputs_as_nchw=[0],
        return_mode="file",
        output_path=str(tmp_path / "nchw.onnx"),
    )
    model = onnx.load(path)
    assert _dims(model.graph.input[0]) == [1, 3, 4, 5, 2]
    assert _dims(model.graph.output[0]) == [1, 3, 4, 5, 2]
    z = _z(1, 4, 5, 3)
    ok, message = allclose(fn, path, [z], inputs_as_nchw=[0], outputs_as_nchw=[0])
    assert ok, message
