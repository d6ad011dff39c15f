"""Equinox objects ``to_onnx`` takes, and ``eqx.error_if`` in an exported model."""

from __future__ import annotations

import functools
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from jax2onnx import to_onnx, traced_callable
from jax2onnx.plugin import UsageError


class Net(eqx.Module):
    """Linear -> Dropout -> BatchNorm: stateful, and different in training mode."""

    linear: eqx.nn.Linear
    dropout: eqx.nn.Dropout
    norm: eqx.nn.BatchNorm

    def __init__(self, key):
        self.linear = eqx.nn.Linear(4, 3, key=key)
        self.dropout = eqx.nn.Dropout(0.5)
        self.norm = eqx.nn.BatchNorm(3, "batch")

    def __call__(self, x, state, *, key=None):
        y = self.dropout(self.linear(x), key=key)
        return self.norm(y, state)

    def encode(self, x):
        return jnp.tanh(self.linear(x))


def _net():
    model, state = eqx.nn.make_with_state(Net)(jax.random.PRNGKey(0))
    return model, state


def _run(model: onnx.ModelProto, *inputs):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs)))


def _x(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def test_model_with_state_exports_inference_mode_and_drops_the_state():
    model, state = _net()
    before = jax.tree_util.tree_leaves((model, state))
    onnx_model = to_onnx((model, state), [(4,)])
    x = _x(4)
    (got,) = _run(onnx_model, x)
    want, _ = eqx.nn.inference_mode(model)(jnp.asarray(x), state)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert model.dropout.inference is False  # the user's model is untouched
    after = jax.tree_util.tree_leaves((model, state))
    assert all(a is b for a, b in zip(before, after))


def test_vmapped_model_with_state_under_filter_vmap():
    model, state = _net()
    batched = eqx.filter_vmap(model, in_axes=(0, None), out_axes=(0, None), axis_name="batch")
    onnx_model = to_onnx((batched, state), [("B", 4)])
    x = _x(5, 4)
    (got,) = _run(onnx_model, x)
    want, _ = eqx.nn.inference_mode(batched)(jnp.asarray(x), state)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_stateful_model_alone_says_how_to_pass_its_state():
    model, _ = _net()
    for inputs in ([(4,)], [(4,), (3,)]):  # the first: before the core's arity check
        with pytest.raises(UsageError, match=r"Net takes a `state` .*to_onnx\(\(model, state\)"):
            to_onnx(model, inputs)
    with pytest.raises(UsageError, match=r"BatchNorm takes a `state`"):
        to_onnx(model.norm, [(3,)])


def test_a_function_calling_a_stateful_model_without_its_state_says_how_to_pass_it():
    model, state = _net()
    with pytest.raises(UsageError) as raised:
        to_onnx(lambda x: model(x), [(4,)])
    message = str(raised.value)
    assert "<lambda> calls Net without its `state`" in message
    assert "model(x, state)[0]" in message and "to_onnx((model, state), inputs)" in message
    assert isinstance(raised.value.__cause__, TypeError)
    to_onnx(lambda x: model(x, state)[0], [(4,)])  # as the message says
    with pytest.raises(UsageError, match="calls BatchNorm without its `state`"):
        to_onnx(lambda x: model.norm(x), [(3,)])


def test_a_function_reading_a_stateful_model_from_its_globals_says_how_to_pass_it():
    model, state = _net()
    namespace = {"model": model, "state": state, "eqx": eqx}
    exec("def forward(x):\n    return model(x)", namespace)  # `model` is a global of forward
    with pytest.raises(UsageError) as raised:
        to_onnx(namespace["forward"], [(4,)])
    message = str(raised.value)
    assert "fn forward calls Net without its `state`" in message
    assert "eqx.nn.inference_mode(model)(x, state)[0]" in message
    exec("def fixed(x):\n    return eqx.nn.inference_mode(model)(x, state)[0]", namespace)
    onnx_model = to_onnx(namespace["fixed"], [(4,)])  # as the message says
    x = _x(4)
    want, _ = eqx.nn.inference_mode(model)(jnp.asarray(x), state)
    np.testing.assert_allclose(_run(onnx_model, x)[0], want, rtol=1e-5, atol=1e-6)


def test_a_function_whose_own_state_argument_is_missing_keeps_pythons_error():
    model, state = _net()

    def step(x, state):
        return model(x, state)[0]

    with pytest.raises(TypeError, match="missing 1 required positional argument: 'state'"):
        to_onnx(lambda x: step(x), [(4,)])


@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(lambda m: m.encode, id="bound-method"),
        pytest.param(lambda m: eqx.filter_jit(m.encode), id="filter-jit"),
        pytest.param(lambda m: eqx.Partial(Net.encode, m), id="partial"),
        pytest.param(lambda m: functools.partial(Net.encode, m), id="functools-partial"),
        pytest.param(lambda m: jax.vmap(m.encode), id="closure-vmap"),
    ],
)
def test_wrapped_modules_convert(wrap):
    model, _ = _net()
    fn = wrap(model)
    batched = "closure" in str(wrap) or fn.__class__.__name__ == "function"
    shape = ("B", 4) if batched else (4,)
    onnx_model = to_onnx(fn, [shape])
    x = _x(3, 4) if batched else _x(4)
    (got,) = _run(onnx_model, x)
    np.testing.assert_allclose(got, traced_callable(fn)(x), rtol=1e-5, atol=1e-6)


def test_training_dropout_becomes_inference():
    layer = eqx.nn.Sequential([eqx.nn.Linear(4, 4, key=jax.random.PRNGKey(1)), eqx.nn.Dropout(0.9)])
    onnx_model = to_onnx(jax.vmap(layer), [("B", 4)])
    assert not any("Random" in n.op_type for n in onnx_model.graph.node)
    x = _x(2, 4)
    (got,) = _run(onnx_model, x)
    want = jax.vmap(eqx.nn.inference_mode(layer))(jnp.asarray(x))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# -- eqx.error_if ---------------------------------------------------------------------


def _checked(x):
    return eqx.error_if(x * 2, jnp.any(x < 0), "x must be non-negative") + 1


def test_failed_check_poisons_the_outputs():
    onnx_model = to_onnx(_checked, [("B", 3)])
    good = np.abs(_x(2, 3))
    (got,) = _run(onnx_model, good)
    np.testing.assert_allclose(got, _checked(good), rtol=1e-6)
    (bad,) = _run(onnx_model, -good)
    assert np.isnan(bad).all()
    with pytest.raises(Exception, match="x must be non-negative"):
        jax.block_until_ready(jax.jit(_checked)(-good))  # JAX raises where ONNX poisons


def test_check_decided_at_trace_time_raises_at_conversion():
    def always(x):
        return eqx.error_if(x, True, "never valid")

    with pytest.raises(eqx.EquinoxTracetimeError, match="never valid"):
        to_onnx(always, [(3,)])


@pytest.mark.skipif(
    os.environ.get("EQX_ON_ERROR", "raise") != "raise", reason="EQX_ON_ERROR changes the policy"
)
def test_error_check_interception_is_gone_after_conversion():
    to_onnx(_checked, [(3,)])
    with pytest.raises(Exception, match="x must be non-negative"):
        jax.block_until_ready(jax.jit(_checked)(-np.ones(3, np.float32)))
