"""The plugin API's helpers: Family, frozen Rules, native dtypes and fallbacks, ctx moves."""

from __future__ import annotations

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from jax.interpreters import mlir

import jax2onnx
from jax2onnx.plugin import (
    Family,
    LoweringError,
    Rules,
    UnsupportedPrimitiveError,
    has_kernel,
    kernel_dtype,
    kernel_dtypes,
)


def _primitive(name, impl):
    prim = jax.extend.core.Primitive(name)
    prim.def_impl(impl)
    prim.def_abstract_eval(lambda *avals, **_: jax.core.ShapedArray(avals[0].shape, avals[0].dtype))
    mlir.register_lowering(prim, mlir.lower_fun(impl, multiple_results=False))
    return prim


def _run(model, *inputs):
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs)))


def _ops(model):
    return [n.op_type for n in model.graph.node]


# -- Family and Rules ----------------------------------------------------------------------


def test_a_family_replays_its_declarations_onto_each_new_rules():
    family = Family("fam")
    made = family.primitive("double", impl=lambda x: x * 2.0)

    @family.lowering(made, cases=(c for c in ()))
    def double(ctx, x):
        return ctx.op.Add(x, x)

    family.intercept("jax.numpy.tanh", made)
    first, second = Rules("fam"), Rules("fam")
    family.register(first)
    family.register(second)
    for rules in (first, second):
        assert [lw.primitive for lw in rules.lowerings] == ["fam.double"]
        assert rules.macros[0].primitive is made  # one primitive, made at declaration
        assert rules.interceptions[0].target == "jax.numpy.tanh"
    with pytest.raises(ValueError, match="family of plugin 'fam'"):
        family.register(Rules("other"))


def test_frozen_rules_refuse_changes_with_a_clear_message():
    rules = Rules("frozen_demo").freeze()
    with pytest.raises(RuntimeError, match=r"Rules\('frozen_demo'\) is frozen"):
        rules.elementwise({"sin": "Sin"})
    with pytest.raises(RuntimeError, match="frozen"):
        rules.primitive("x", impl=jnp.sin)


# -- native_dtypes and fallbacks ---------------------------------------------------------------

_cube_impl = lambda x: x * x * x  # noqa: E731
cube_p = _primitive("test_api_cube", _cube_impl)


def _cube_rules(**options) -> Rules:
    rules = Rules("cube_test")

    @rules.lowering(cube_p, **options)
    def cube(ctx, x):
        return ctx.op.Pow(x, 3.0)

    return rules


def test_native_dtypes_choose_the_rule_or_the_fallback():
    rules = _cube_rules(native_dtypes=[np.float32], fallback=_cube_impl)
    x32 = np.linspace(-2, 2, 6, dtype=np.float32)
    model = jax2onnx.to_onnx(cube_p.bind, [x32], extra_rules=rules)
    assert _ops(model) == ["Pow"]
    with jax.enable_x64(True):
        x64 = x32.astype(np.float64)
        model = jax2onnx.to_onnx(
            cube_p.bind, [x64], extra_rules=rules, enable_double_precision=True
        )
    assert _ops(model) == ["Mul", "Mul"]  # JAX's computation, inlined
    np.testing.assert_allclose(_run(model, x64)[0], x64**3)


def test_fallback_without_a_known_computation_names_what_to_do():
    rules = Rules("no_fallback")

    @rules.lowering(cube_p)
    def cube(ctx, x):
        return ctx.fallback()

    with pytest.raises(LoweringError, match="has no fallback; register the rule with fallback="):
        jax2onnx.to_onnx(cube_p.bind, [(3,)], extra_rules=rules)


def test_a_macro_primitive_falls_back_to_its_impl():
    rules = Rules("macro_fb")
    prim = rules.primitive("double", impl=lambda x: x * 2)

    @rules.lowering(prim, native_dtypes=kernel_dtypes("Gelu"))  # float32 only
    def double(ctx, x):
        return ctx.op.Add(x, x)

    x = np.arange(4, dtype=np.int32)
    assert _ops(jax2onnx.to_onnx(prim.bind, [x.astype(np.float32)], extra_rules=rules)) == ["Add"]
    model = jax2onnx.to_onnx(prim.bind, [x], extra_rules=rules)
    assert _ops(model) == ["Mul"]  # the impl, inlined
    np.testing.assert_array_equal(_run(model, x)[0], x * 2)


def test_ctx_trace_reports_a_missing_lowering_at_the_users_line():
    mystery_p = _primitive("test_api_mystery", lambda x: x)
    rules = Rules("tracing_demo")

    @rules.lowering(cube_p)
    def cube(ctx, x):
        closed = ctx.trace(lambda v: mystery_p.bind(v) * v, *ctx.avals_in)
        return ctx.inline(closed, [x])[0]

    def user_function(x):
        return cube_p.bind(x) + 1.0

    with pytest.raises(UnsupportedPrimitiveError) as info:
        jax2onnx.to_onnx(user_function, [(3,)], extra_rules=rules)
    line = next(x for x in str(info.value).splitlines() if "test_api_mystery" in x)
    user_line = f"test_plugin_api.py:{user_function.__code__.co_firstlineno + 1}"
    assert line.index(user_line) < line.index("in a lowering's decomposition at")


# -- ctx moves -------------------------------------------------------------------------------


def _convert_with(rule, *inputs, dtype=np.float32):
    rules = Rules("moves")
    rules.lowering(cube_p)(rule)
    return jax2onnx.to_onnx(cube_p.bind, list(inputs), extra_rules=rules)


def test_cast_and_transpose_add_no_node_when_nothing_changes():
    x = np.ones((2, 3), np.float32)
    model = _convert_with(
        lambda ctx, v: ctx.op.Mul(ctx.cast(v, np.float32), ctx.transpose(v, [0, 1])), x
    )
    assert _ops(model) == ["Mul"]


def test_cast_and_transpose_of_a_constant_are_constants():
    table = np.arange(6, dtype=np.int32).reshape(2, 3)

    def rule(ctx, v):
        folded = ctx.transpose(ctx.cast(ctx.const(table), np.float32), [1, 0])
        return ctx.op.Add(v, ctx.op.Reshape(folded, ctx.i64([2, 3])))

    x = np.zeros((2, 3), np.float32)
    model = _convert_with(rule, x)
    assert "Cast" not in _ops(model) and "Transpose" not in _ops(model)
    np.testing.assert_array_equal(_run(model, x)[0], table.T.reshape(2, 3))


@pytest.mark.parametrize("dtype", [np.int16, np.uint16, np.bool_, np.float32])
def test_where_and_extrema_widen_only_where_onnx_runtime_lacks_the_kernel(dtype):
    a = np.array([[0, 1, 3], [2, 0, 1]], dtype)
    b = np.array([[1, 1, 0], [3, 2, 0]], dtype)
    maximum_p = jax.extend.core.Primitive("test_api_max")
    maximum_p.def_abstract_eval(lambda x, y: jax.core.ShapedArray(x.shape, x.dtype))
    rules = Rules("where_demo")

    @rules.lowering(maximum_p)
    def maximum(ctx, x, y):
        bigger = ctx.maximum(x, y)
        return ctx.where(ctx.op.Equal(x, y), ctx.minimum(x, y), bigger)

    model = jax2onnx.to_onnx(maximum_p.bind, [a, b], extra_rules=rules)
    widened = not has_kernel("Where", dtype)
    assert ("Cast" in _ops(model)) == (widened or not has_kernel("Max", dtype))
    assert _run(model, a, b)[0].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(_run(model, a, b)[0], np.maximum(a, b))


def test_kernel_table_answers():
    assert has_kernel("Where", np.float32) and not has_kernel("Where", np.int16)
    assert kernel_dtype("Where", np.int16) == np.int32
    assert kernel_dtype("Max", np.bool_) == np.uint8
    assert kernel_dtype("Add", jnp.bfloat16) == np.float32
    assert kernel_dtypes("Gelu") == {np.dtype(np.float32)}
    assert kernel_dtypes("Relu", "Gelu") == {np.dtype(np.float32)}


# -- the report -----------------------------------------------------------------------------


def test_convert_returns_the_model_and_a_report():
    w = np.ones((3, 4), np.float32)
    result = jax2onnx.convert(lambda x: jax.nn.relu(x @ w), [("B", 3)])
    assert [n.op_type for n in result.model.graph] == ["MatMul", "Relu"]
    assert list(result.report.timings) == ["plugins", "prepare", "trace", "lower", "passes"]
    assert all(t >= 0 for t in result.report.timings.values())
    assert result.report.emitted_ops["dot_general"] == {"MatMul"}
    assert result.report.emitted_ops["nn.relu"] == {"Relu"}
