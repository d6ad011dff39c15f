"""to_onnx end to end: numbers match ONNX Runtime, inputs are checked, output modes work."""

from __future__ import annotations

import logging
import os
import pathlib
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from jax import lax
from jax.extend.core import Primitive

import jax2onnx
from jax2onnx import to_onnx
from jax2onnx.plugin import Rules
from jax2onnx.values.errors import LoweringError, UnsupportedPrimitiveError, UsageError

THIS_FILE = pathlib.Path(__file__).name

_k1, _k2, _k3 = jax.random.split(jax.random.PRNGKey(0), 3)
W1 = jax.random.normal(_k1, (30, 16)) * 0.3
B1 = jax.random.normal(_k2, (16,)) * 0.1
W2 = jax.random.normal(_k3, (16, 5)) * 0.3


def mlp(x):
    hidden = jnp.tanh(x @ W1 + B1)
    return jax.nn.softmax(hidden @ W2, axis=-1)


def run(model: onnx.ModelProto, *arrays: np.ndarray, **named: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    feed = dict(zip(names, arrays, strict=False))
    feed.update(named)
    assert sorted(feed) == sorted(names)
    return session.run(None, feed)


def dims(value_info) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


# -- the "done when" criterion -------------------------------------------------------


def test_mlp_with_softmax_matches_jax_at_batch_1_and_7():
    model = to_onnx(mlp, [("B", 30)])
    assert isinstance(model, onnx.ModelProto)
    onnx.checker.check_model(model, full_check=True)
    (graph_input,) = model.graph.input
    assert dims(graph_input) == ["B", 30]
    assert graph_input.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    (graph_output,) = model.graph.output
    assert dims(graph_output) == ["B", 5]
    rng = np.random.default_rng(1)
    for batch in (1, 7):
        x = rng.standard_normal((batch, 30)).astype(np.float32)
        (got,) = run(model, x)
        want = np.asarray(mlp(x))
        assert got.shape == (batch, 5)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=1e-5)


def test_shared_symbolic_dim_across_inputs():
    model = to_onnx(lambda a, b: a * b + 1.0, [("B", 3), ("B", 3)])
    assert [dims(i) for i in model.graph.input] == [["B", 3], ["B", 3]]
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    (got,) = run(model, a, a)
    np.testing.assert_allclose(got, a * a + 1.0)


# -- input_params ------------------------------------------------------------------


def test_input_params_become_scalar_graph_inputs():
    def scaled(x, *, scale):
        return jnp.tanh(x) * scale

    model = to_onnx(scaled, [("B", 4)], input_params={"scale": 2.0})
    names = [i.name for i in model.graph.input]
    assert names == ["in_0", "scale"]
    scale_input = model.graph.input[1]
    assert dims(scale_input) == []
    assert scale_input.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    for scale in (2.0, -0.5):
        (got,) = run(model, x, scale=np.asarray(scale, np.float32))
        np.testing.assert_allclose(got, np.asarray(scaled(x, scale=scale)), rtol=1e-6)


def test_input_names_and_output_names():
    model = to_onnx(
        lambda x: (x + 1.0, x * 2.0), [(2,)], input_names=["x"], output_names=["plus", "times"]
    )
    assert [i.name for i in model.graph.input] == ["x"]
    assert [o.name for o in model.graph.output] == ["plus", "times"]


# -- return modes, determinism, files --------------------------------------------


def test_same_function_twice_gives_identical_bytes():
    first = to_onnx(mlp, [("B", 30)]).SerializeToString()
    second = to_onnx(mlp, [("B", 30)]).SerializeToString()
    assert first == second


def test_return_mode_ir_returns_onnx_ir_model():
    model = to_onnx(mlp, [("B", 30)], return_mode="ir")
    assert isinstance(model, ir.Model)
    assert [v.name for v in model.graph.inputs] == ["in_0"]
    proto = ir.serde.serialize_model(model)
    assert proto.SerializeToString() == to_onnx(mlp, [("B", 30)]).SerializeToString()


def test_return_mode_file_writes_and_returns_path(tmp_path):
    target = tmp_path / "sub" / "mlp.onnx"
    result = to_onnx(mlp, [("B", 30)], return_mode="file", output_path=target)
    assert result == os.fspath(target)
    assert target.is_file()
    loaded = onnx.load(target)
    onnx.checker.check_model(loaded, full_check=True)
    assert loaded.SerializeToString() == to_onnx(mlp, [("B", 30)]).SerializeToString()
    assert sorted(p.name for p in target.parent.iterdir()) == ["mlp.onnx"]  # no temp file left


def test_file_is_written_atomically(tmp_path, monkeypatch):
    target = tmp_path / "model.onnx"
    target.write_bytes(b"previous model")

    def fail(*_args, **_kwargs):
        raise OSError("disk full")

    from jax2onnx.conversion import serialize

    monkeypatch.setattr(serialize, "write_streaming", fail)
    with pytest.raises(OSError, match="disk full"):
        to_onnx(mlp, [("B", 30)], return_mode="file", output_path=target)
    assert target.read_bytes() == b"previous model"
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]

    monkeypatch.undo()

    def broken(x):
        raise RuntimeError("user code failed")

    with pytest.raises(RuntimeError, match="user code failed"):
        to_onnx(broken, [(3,)], return_mode="file", output_path=target)
    assert target.read_bytes() == b"previous model"


# -- bad input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"inputs": [("B", 3.5)]}, TypeError, r"inputs\[0\], axis 1: 3.5"),
        ({"inputs": "abc"}, TypeError, r"inputs must be a list"),
        ({"inputs": [(2, -3)]}, ValueError, r"inputs\[0\], axis 1: dimension -3 is negative"),
        ({"inputs": [(2,), "x"]}, TypeError, r"inputs\[1\]"),
        ({"inputs": [(True, 3)]}, TypeError, r"inputs\[0\], axis 0"),
        ({"inputs": [("", 3)]}, ValueError, r"inputs\[0\], axis 0"),
        ({"return_mode": "onnx"}, ValueError, r"return_mode"),
        ({"return_mode": "file"}, ValueError, r"output_path"),
        ({"opset": 99}, ValueError, r"opset 99"),
        ({"opset": 12}, ValueError, r"opset 12 is not supported; choose 13..26"),
        ({"opset": "23"}, TypeError, r"opset must be an int"),
        ({"input_names": ["x", "x"], "inputs": [(2,), (2,)]}, ValueError, r"input_names.*'x'"),
        ({"input_names": ["a", "b"]}, ValueError, r"input_names has 2 names for 1 inputs"),
        (
            {"input_names": ["scale"], "input_params": {"scale": 1.0}},
            ValueError,
            r"input_names.*'scale'",
        ),
        ({"input_params": {"not an identifier": 1.0}}, TypeError, r"input_params key"),
        ({"input_params": [1.0]}, TypeError, r"input_params must be a mapping"),
        ({"output_names": ["a", "b"]}, ValueError, r"output_names has 2 names for 1 outputs"),
        ({"output_names": ["in_0"]}, ValueError, r"output names must be unique"),
        ({"model_name": ""}, TypeError, r"model_name"),
        ({"extra_rules": [object()]}, TypeError, r"extra_rules"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(kwargs, error, pattern):
    arguments = {"inputs": [(2,)], **kwargs}
    inputs = arguments.pop("inputs")
    with pytest.raises(error, match=pattern):
        to_onnx(lambda *xs, **_: xs[0] + 1.0, inputs, **arguments)


@pytest.mark.parametrize("fn", [42, "not a function", None])
def test_non_callable_fn_is_a_type_error(fn):
    with pytest.raises(TypeError, match="fn must be a callable"):
        to_onnx(fn, [(2,)])


# -- unsupported primitives ------------------------------------------------------------


mystery_p = Primitive("test_core_mystery")
mystery_p.def_abstract_eval(lambda x: x)
other_p = Primitive("test_core_other")
other_p.def_abstract_eval(lambda x, y: jax.core.ShapedArray(x.shape, np.int32))


def uses_missing_primitives(x):
    y = mystery_p.bind(x)
    z = mystery_p.bind(jnp.tanh(y))  # the same missing primitive again
    return other_p.bind(z, x)


def test_unsupported_primitives_are_listed_once_with_source_avals_and_plugins():
    with pytest.raises(UnsupportedPrimitiveError) as info:
        to_onnx(uses_missing_primitives, [("B", 3)])
    message = str(info.value)
    assert isinstance(info.value, NotImplementedError)
    assert "2 primitive(s) have no lowering" in message
    assert message.count("'test_core_mystery'") == 1
    assert message.count("'test_core_other'") == 1
    mystery_line = next(line for line in message.splitlines() if "'test_core_mystery'" in line)
    other_line = next(line for line in message.splitlines() if "'test_core_other'" in line)
    first_bind = uses_missing_primitives.__code__.co_firstlineno + 1
    assert f"{THIS_FILE}:{first_bind}" in mystery_line
    assert f"{THIS_FILE}:{first_bind + 2}" in other_line
    assert "float32[B,3]" in mystery_line
    assert other_line.count("float32[B,3]") == 2
    assert "extra_rules" in message
    loaded = next(line for line in message.splitlines() if line.startswith("Loaded plugins:"))
    for plugin in jax2onnx.plugins().plugins:
        assert f"{plugin.name} {plugin.version}" in loaded


def test_a_primitive_inside_library_code_is_reported_at_the_users_call():
    from jax._src import source_info_util

    from jax2onnx.conversion.unsupported import check_supported

    def user_fn(x):
        return jax.jit(lambda y: mystery_p.bind(y) * 2.0)(x)

    closed = jax.make_jaxpr(user_fn)(np.zeros(3, np.float32))
    call = closed.jaxpr.eqns[0]
    inner = call.params["jaxpr"]
    # what library code looks like: equations without a frame of the user's
    anonymous = [e.replace(source_info=source_info_util.new_source_info()) for e in inner.eqns]
    inner = inner.replace(jaxpr=inner.jaxpr.replace(eqns=anonymous))
    outer = closed.jaxpr.replace(eqns=[call.replace(params={**call.params, "jaxpr": inner})])
    with pytest.raises(UnsupportedPrimitiveError) as info:
        check_supported(closed.replace(jaxpr=outer), jax2onnx.plugins().registry(), None)
    line = next(x for x in str(info.value).splitlines() if "'test_core_mystery'" in x)
    assert f"{THIS_FILE}:{user_fn.__code__.co_firstlineno + 1}" in line


def test_missing_jax_primitive_names_the_distribution_that_provides_it():
    from jax2onnx.conversion.unsupported import check_supported
    from jax2onnx.frontend.loading import PluginSet
    from jax2onnx.registration.registry import Registry

    closed = jax.make_jaxpr(lambda x: lax.cumsum(jnp.sin(x), axis=0))(np.zeros(3, np.float32))
    without_lax = PluginSet.load(environ={"JAX2ONNX_DISABLE_PLUGIN_AUTOLOAD": "1"})
    with pytest.raises(UnsupportedPrimitiveError) as info:
        check_supported(closed, Registry([]), without_lax)
    message = str(info.value)
    assert "2 primitive(s)" in message
    assert message.count("no loaded plugin lowers JAX's own primitives") == 2
    assert "Loaded plugins: core" in message
    assert "Installed but not loaded" in message and "lax (jax2onnx-lax)" in message

    # the lax plugin declares Rules(libraries=("jax",)): its gap, not a missing install
    with_lax = PluginSet.load(environ={"JAX2ONNX_PLUGINS": "lax"})
    with pytest.raises(UnsupportedPrimitiveError, match="jax2onnx-lax .* is installed but"):
        check_supported(closed, Registry([]), with_lax)


# -- record_primitive_calls_file -------------------------------------------------------


def _recorded(path) -> list[str]:
    return [line.split("\t")[0] for line in path.read_text().splitlines()]


def test_record_file_is_written_when_a_primitive_has_no_lowering(tmp_path):
    record = tmp_path / "calls.tsv"
    record.write_text("stale\tfrom an earlier run\n")
    with pytest.raises(UnsupportedPrimitiveError, match="test_core_mystery"):
        to_onnx(uses_missing_primitives, [("B", 3)], record_primitive_calls_file=record)
    calls = _recorded(record)
    assert calls == ["test_core_mystery", "tanh", "test_core_mystery", "test_core_other"]
    assert f"{THIS_FILE}:" in record.read_text()


def test_record_file_holds_what_was_traced_before_the_function_failed(tmp_path):
    def fails_inside_a_scan(x):
        y = jnp.sin(x)

        def body(carry, _):
            carry = jnp.cos(carry)
            raise RuntimeError("the user's own error")

        return jax.lax.scan(body, y, None, length=2)

    record = tmp_path / "calls.tsv"
    record.write_text("stale\tfrom an earlier run\n")
    with pytest.raises(RuntimeError, match="the user's own error"):
        to_onnx(fails_inside_a_scan, [("B", 3)], record_primitive_calls_file=record)
    assert _recorded(record) == ["sin", "cos"]


def test_record_file_is_written_when_jax_rejects_the_function(tmp_path):
    def mismatched(x):
        return jnp.tanh(x) @ jnp.ones((4, 2))  # (B, 3) @ (4, 2)

    record = tmp_path / "calls.tsv"
    with pytest.raises(TypeError):
        to_onnx(mismatched, [("B", 3)], record_primitive_calls_file=record)
    assert _recorded(record)[0] == "tanh"


def test_record_file_is_written_when_a_lowering_fails(tmp_path):
    rules = Rules("test_failing")

    @rules.lowering(square_p)
    def failing(ctx, x):
        raise RuntimeError("this rule fails")

    record = tmp_path / "calls.tsv"
    with pytest.raises(LoweringError):
        to_onnx(
            lambda x: square_p.bind(jnp.exp(x)),
            [(3,)],
            record_primitive_calls_file=record,
            extra_rules=rules,
        )
    assert _recorded(record) == ["exp", "test_core_square"]


# -- what fn returns -------------------------------------------------------------------


def returns_nothing(x):
    jnp.sin(x)


@pytest.mark.parametrize("fn", [returns_nothing, lambda x: (), lambda x: {"a": None}])
def test_a_function_returning_no_array_is_refused(fn):
    with pytest.raises(UsageError) as info:
        to_onnx(fn, [(3,)])
    message = str(info.value)
    name = fn.__name__
    assert f"fn {name}(x)" in message
    assert "must return" in message and "array" in message
    assert "flat" not in message  # not our wrapper
    if fn is returns_nothing:
        assert "returned None" in message


class NotAnArray:
    def __repr__(self):
        return "NotAnArray()"


def returns_a_string(x):
    return x + 1, "done"


def returns_an_object(x):
    return {"y": x, "meta": NotAnArray()}


@pytest.mark.parametrize(
    ("fn", "what"),
    [
        (returns_a_string, "output [1] is a str ('done')"),
        (returns_an_object, "output ['meta'] is a NotAnArray (NotAnArray())"),
        (lambda x: "text", "returned a str ('text')"),
    ],
)
def test_a_function_returning_a_non_array_is_named(fn, what):
    with pytest.raises(UsageError) as info:
        to_onnx(fn, [(3,)])
    message = str(info.value)
    assert f"fn {fn.__qualname__}(x)" in message
    assert what in message
    assert "flat" not in message and "tracing.py" not in message


# -- extra_rules -----------------------------------------------------------------------


square_p = Primitive("test_core_square")
square_p.def_abstract_eval(lambda x: x)
square_p.def_impl(lambda x: x * x)


def square_rules() -> Rules:
    rules = Rules("test_square")

    @rules.lowering(square_p)
    def square(ctx, x):
        return ctx.op.Mul(x, x)

    return rules


def test_extra_rules_apply_to_one_call_only():
    def fn(x):
        return square_p.bind(x) + 1.0

    model = to_onnx(fn, [("B", 3)], extra_rules=square_rules())
    assert [n.op_type for n in model.graph.node] == ["Mul", "Add"]
    x = np.array([[1.0, -2.0, 3.0]], np.float32)
    (got,) = run(model, x)
    np.testing.assert_allclose(got, x * x + 1.0)
    assert "test_core_square" not in jax2onnx.plugins().registry()
    # without the rule, the next call converts the primitive through its implementation
    assert jax2onnx.convert(fn, [("B", 3)]).report.inlined == {"test_core_square"}


# -- interceptions ---------------------------------------------------------------------


def test_interceptions_are_undone_even_when_tracing_raises():
    module = types.ModuleType("j2o_test_intercept_target")

    def original_double(x):
        return x * 2.0

    module.double = original_double
    sys.modules[module.__name__] = module
    try:
        rules = Rules("test_intercept")
        double_p = rules.primitive("double", impl=original_double)
        rules.intercept(f"{module.__name__}.double", double_p)

        @rules.lowering(double_p)
        def double(ctx, x):
            return ctx.op.Add(x, x)

        seen = []

        def converts(x):
            seen.append(module.double)
            return module.double(x)

        def raises(x):
            seen.append(module.double)
            module.double(x)
            raise RuntimeError("failure inside the traced function")

        model = to_onnx(converts, [(3,)], extra_rules=[rules])
        assert [n.op_type for n in model.graph.node] == ["Add"]
        assert seen[-1] is not original_double  # the interception was active while tracing
        assert module.double is original_double

        with pytest.raises(RuntimeError, match="failure inside the traced function"):
            to_onnx(raises, [(3,)], extra_rules=[rules])
        assert seen[-1] is not original_double
        assert module.double is original_double
        assert "double" in vars(module)
    finally:
        del sys.modules[module.__name__]


def test_accept_refuses_calls_which_then_run_the_original():
    module = types.ModuleType("j2o_test_intercept_accept")

    def scaled(x, factor=2.0):
        return x * factor

    module.scaled = scaled
    sys.modules[module.__name__] = module
    try:
        rules = Rules("test_accept")
        scaled_p = rules.primitive("scaled", impl=scaled)
        seen = []

        def accept(arguments):
            seen.append(arguments)
            return arguments["factor"] > 0

        rules.intercept(f"{module.__name__}.scaled", scaled_p, accept=accept)

        @rules.lowering(scaled_p)
        def lower(ctx, x, *, factor):
            return ctx.op.Abs(ctx.op.Mul(x, np.asarray(factor, np.float32)))

        model = to_onnx(lambda x: module.scaled(x), [(3,)], extra_rules=[rules])
        assert [n.op_type for n in model.graph.node] == ["Mul", "Abs"]
        assert set(seen[-1]) == {"x", "factor"} and seen[-1]["factor"] == 2.0  # defaults filled
        model = to_onnx(lambda x: module.scaled(x, factor=-1.0), [(3,)], extra_rules=[rules])
        assert [n.op_type for n in model.graph.node] == ["Mul"]  # refused: the original ran
        with pytest.raises(TypeError):  # a call that does not bind gets the user's own error
            to_onnx(lambda x: module.scaled(x, scale=3.0), [(3,)], extra_rules=[rules])
        assert module.scaled is scaled
    finally:
        del sys.modules[module.__name__]


def test_interception_of_an_unimported_package_is_skipped():
    rules = Rules("test_unimported")
    prim = rules.primitive("never", impl=lambda x: x)
    rules.intercept("j2o_package_that_is_not_imported.fn", prim)
    model = to_onnx(lambda x: x * 3.0, [(2,)], extra_rules=[rules])
    assert [n.op_type for n in model.graph.node] == ["Mul"]
    assert "j2o_package_that_is_not_imported" not in sys.modules


def test_step_timings_are_logged_at_debug_level(caplog, tmp_path):
    with caplog.at_level(logging.DEBUG, logger="jax2onnx"):
        to_onnx(
            jnp.tanh,
            [("B", 3)],
            model_name="timed",
            return_mode="file",
            output_path=tmp_path / "timed.onnx",
        )
    (record,) = [r for r in caplog.records if r.name == "jax2onnx"]
    steps = record.jax2onnx_timings
    assert list(steps) == ["plugins", "prepare", "trace", "lower", "passes", "serialize"]
    assert all(seconds >= 0 for seconds in steps.values())
    assert record.getMessage().startswith("converted 'timed': plugins ")


def test_a_primitive_lowered_for_real_values_only_is_reported_on_complex_ones():
    double_p = Primitive("double_real_only")
    double_p.def_abstract_eval(lambda x: x)
    rules = Rules("realonly")
    rules.lowering(double_p)(lambda ctx, x: ctx.op.Add(x, x))
    with pytest.raises(UnsupportedPrimitiveError) as info:
        to_onnx(
            lambda z: double_p.bind(z),
            [jax.ShapeDtypeStruct((3,), np.complex64)],
            extra_rules=[rules],
        )
    message = str(info.value)
    assert "'double_real_only (on complex values)' on (complex64[3])" in message
    assert "lowered for real values only" in message and "values='complex'" in message
    # on real values the same rule converts
    assert to_onnx(lambda x: double_p.bind(x), [(3,)], extra_rules=[rules]) is not None


def test_a_default_whose_repr_fails_does_not_break_the_call_check():
    class Opaque:  # e.g. an Equinox module bound as a lambda default
        def __repr__(self):
            raise TypeError("no repr")

    opaque = Opaque()
    model = to_onnx(lambda x, _m=opaque: x + 1, [(3,)])
    assert [n.op_type for n in model.graph.node] == ["Add"]
