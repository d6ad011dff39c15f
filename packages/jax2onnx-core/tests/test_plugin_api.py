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
    CaseError,
    Family,
    LoweringError,
    Rules,
    UnsupportedPrimitiveError,
    UsageError,
    case,
    has_kernel,
    kernel_dtype,
    kernel_dtypes,
    native_kernel,
    new_dimension,
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


def test_case_functions_run_only_when_the_cases_are_read():
    calls = []

    def tanh_cases():
        calls.append("tanh")
        return [case("tanh", jnp.tanh, [(3,)])]

    family = Family("lazy")

    @family.lowering("tanh", cases=tanh_cases)
    def tanh(ctx, x, **_):
        return ctx.op.Tanh(x)

    family.add_cases("model", lambda: [case("model", jnp.sin, [(2,)])])
    rules = Rules("lazy")
    family.register(rules)
    rules.freeze()
    assert calls == []  # declared, replayed, frozen: nothing built
    assert [(component, c.name) for component, c in rules.cases] == [
        ("tanh", "tanh"),
        ("model", "model"),
    ]
    assert rules.cases is rules.cases and calls == ["tanh"]  # built once


def test_cases_given_as_objects_and_cases_added_after_a_read():
    rules = Rules("open")
    rules.add_cases("a", lambda: [case("a", jnp.sin, [(2,)])])
    assert [c.name for _, c in rules.cases] == ["a"]
    rules.add_cases("b", [case("b", jnp.cos, [(2,)])])
    assert [c.name for _, c in rules.cases] == ["a", "b"]


def test_a_case_function_returning_something_else_is_named():
    rules = Rules("wrong")
    rules.add_cases("component", lambda: [("not", "a case")])
    message = (
        r"plugin 'wrong': the cases of 'component' \(declared at .*test_plugin_api:\d+\) must "
        r"all be case\(\.\.\.\) objects, got tuple"
    )
    with pytest.raises(CaseError, match=message):
        rules.cases  # noqa: B018 - reading the property builds the cases
    with pytest.raises(TypeError, match="a list of case"):
        rules.add_cases("component", case("one", jnp.sin, [(2,)]))


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
    mystery_p = jax.extend.core.Primitive("test_api_mystery")  # no implementation to inline
    mystery_p.def_abstract_eval(lambda x: jax.core.ShapedArray(x.shape, x.dtype))
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
    # half precision: emitted as it is, computed in float32 after the lowering
    assert kernel_dtype("Add", jnp.bfloat16) == jnp.bfloat16
    assert not native_kernel("Add", jnp.bfloat16) and native_kernel("Reshape", jnp.bfloat16)
    assert not native_kernel("Pad", jnp.bfloat16, opset=19) and native_kernel("Pad", jnp.bfloat16)
    halves = {np.dtype(jnp.bfloat16), np.dtype(np.float16)}
    assert kernel_dtypes("Gelu") == {np.dtype(np.float32), *halves}
    assert kernel_dtypes("Relu", "Gelu") == {np.dtype(np.float32), *halves}
    assert kernel_dtypes("Max", "Where") & halves == halves


# -- the report -----------------------------------------------------------------------------


def test_convert_returns_the_model_and_a_report():
    w = np.ones((3, 4), np.float32)
    result = jax2onnx.convert(lambda x: jax.nn.relu(x @ w), [("B", 3)])
    assert [n.op_type for n in result.model.graph] == ["MatMul", "Relu"]
    assert list(result.report.timings) == ["plugins", "prepare", "trace", "lower", "passes"]
    assert all(t >= 0 for t in result.report.timings.values())
    assert result.report.emitted_ops["dot_general"] == {"MatMul"}
    assert result.report.emitted_ops["nn.relu"] == {"Relu"}


# -- new_dimension: data-dependent output sizes ------------------------------------------------


def _positives_primitive():
    prim = jax.extend.core.Primitive("test_api_positives")
    prim.def_abstract_eval(lambda x, *, size: jax.core.ShapedArray((size,), x.dtype))
    rules = Rules("dimtest")

    @rules.lowering(prim)
    def positives(ctx, x, *, size):
        return ctx.op.Compress(x, ctx.op.Greater(x, 0.0), axis=0)

    return prim, rules


positives_p, _positives_rules = _positives_primitive()


def _positives(x):
    """The positive entries of a 1-D ``x``: a size known only at run time."""
    return positives_p.bind(x, size=new_dimension("picked"))


def _dims(model):
    return [
        [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
        for o in model.graph.output
    ]


def test_new_dimension_outside_a_conversion_is_a_usage_error():
    with pytest.raises(UsageError, match="outside a conversion"):
        new_dimension("picked")
    with pytest.raises(UsageError):
        _positives(jnp.ones(3))


def test_new_dimensions_are_unique_and_skip_the_inputs_names():
    def fn(x):
        a, b = _positives(x), _positives(-x)
        pairs = jnp.concatenate([a, a]).reshape(2, -1)  # 2*picked_1, then (2, picked_1)
        return a * 2.0, b, pairs, jnp.sum(b)

    model = jax2onnx.to_onnx(fn, [("picked_0",)], extra_rules=_positives_rules)
    assert _dims(model) == [["picked_1"], ["picked_2"], [2, "picked_1"], []]
    x = np.array([1.0, -2.0, 3.0, -4.0, -5.0], np.float32)
    a2, b, pairs, total = _run(model, x)
    np.testing.assert_array_equal(a2, [2.0, 6.0])
    np.testing.assert_array_equal(b, [2.0, 4.0, 5.0])
    np.testing.assert_array_equal(pairs, [[1.0, 3.0], [1.0, 3.0]])
    assert total == 11.0
    again = jax2onnx.to_onnx(fn, [("picked_0",)], extra_rules=_positives_rules)
    assert _dims(again) == _dims(model)  # names count per conversion: deterministic


def test_a_new_dimension_inside_a_loop_body_is_computed_there():
    def fn(xs):
        def body(carry, x):
            picked = _positives(x)
            return carry + jnp.sum(picked.reshape(1, -1)), picked.shape[0] * 1.0

        return jax.lax.scan(body, 0.0, xs)

    model = jax2onnx.to_onnx(fn, [("B", 4)], extra_rules=_positives_rules)
    xs = np.array([[1.0, -1.0, 2.0, 3.0], [-1.0, -2.0, 0.5, -3.0]], np.float32)
    total, counts = _run(model, xs)
    assert total == 6.5
    np.testing.assert_array_equal(counts, [3.0, 1.0])


def test_new_dimension_belongs_to_the_converting_thread():
    import threading

    tracing, checked = threading.Event(), threading.Event()
    seen = []

    def fn(x):
        tracing.set()
        checked.wait(30)
        return _positives(x)

    def elsewhere():
        tracing.wait(30)
        try:
            new_dimension("picked")
        except UsageError:
            seen.append("UsageError")
        finally:
            checked.set()

    other = threading.Thread(target=elsewhere)
    other.start()
    model = jax2onnx.to_onnx(fn, [(4,)], extra_rules=_positives_rules)
    other.join()
    assert seen == ["UsageError"]
    assert _dims(model) == [["picked_0"]]


def test_tracing_context_wraps_each_trace_and_is_left_on_errors():
    import contextlib

    events = []

    @contextlib.contextmanager
    def watching():
        events.append("enter")
        try:
            yield
        finally:
            events.append("exit")

    rules = Rules("watcher")
    rules.tracing_context(watching)
    rules.tracing_context(lambda: None)  # nothing to do: skipped
    jax2onnx.to_onnx(lambda x: x * 2, [(3,)], extra_rules=[rules])
    assert events == ["enter", "exit"]

    def fails(x):
        assert events[-1] == "enter", "the function runs inside the context"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        jax2onnx.to_onnx(fails, [(3,)], extra_rules=[rules])
    assert events[-1] == "exit"
    with pytest.raises(TypeError, match="callable"):
        Rules("x").tracing_context(None)
    rules.freeze()
    with pytest.raises(RuntimeError, match="tracing context"):
        rules.tracing_context(watching)
    with pytest.raises(ValueError, match="give a binder"):
        Rules("y").intercept("math.sqrt", None)
