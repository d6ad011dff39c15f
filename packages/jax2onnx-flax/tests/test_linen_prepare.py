"""Linen modules and ``nnx.bridge`` through ``to_onnx``: what is accepted, inference mode, flags."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from flax import linen as nn
from flax import nnx

from jax2onnx import onnx_function, to_onnx, traced_callable


class Block(nn.Module):
    """Dense -> BatchNorm -> Dropout, trained with ``train=True`` as Linen code is written."""

    features: int = 6

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Dense(self.features)(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.Dropout(0.5, deterministic=not train)(x)
        return nn.relu(x)


class Twice(nn.Module):
    def setup(self):
        self.first = nn.Dense(5)
        self.second = nn.Dense(3)

    def __call__(self, x):
        return self.second(jnp.tanh(self.first(x)))

    def encode(self, x):
        return self.first(x)


def _variables(module, shape, **kwargs):
    variables = module.init(jax.random.key(0), jnp.ones(shape), **kwargs)
    leaves, tree = jax.tree.flatten(variables)
    keys = jax.random.split(jax.random.key(3), len(leaves))
    moved = [leaf + 0.2 * jax.random.normal(k, leaf.shape) for leaf, k in zip(leaves, keys)]
    return jax.tree.unflatten(tree, moved)


def _run(model, *inputs, **named):
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
    feeds.update(named)
    return session.run(None, feeds)


def _ops(model):
    return [n.op_type for n in model.graph.node]


X = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)


# -- bound Linen modules --------------------------------------------------------------


def test_bound_module_exports_inference_mode():
    module = Block()
    variables = _variables(module, (2, 4))
    bound = module.bind(variables)
    exported = to_onnx(bound, [("B", 4)])
    assert "Dropout" not in _ops(exported) and "Gemm" in _ops(exported)
    want = module.apply(variables, X, train=False)
    np.testing.assert_allclose(_run(exported, X)[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(traced_callable(bound)(X), want, rtol=1e-6)


def test_bound_method_and_setup_submodule():
    module = Twice()
    variables = _variables(module, (2, 4))
    bound = module.bind(variables)
    encoded = to_onnx(bound.encode, [("B", 4)])
    assert _ops(encoded) == ["Gemm"]
    want = module.apply(variables, X, method=Twice.encode)
    np.testing.assert_allclose(_run(encoded, X)[0], want, rtol=1e-6)
    second = to_onnx(bound.second, [("B", 5)])
    y = np.ones((2, 5), np.float32)
    np.testing.assert_allclose(_run(second, y)[0], bound.second(y), rtol=1e-6)


def test_unbound_module_names_the_idiom():
    with pytest.raises(TypeError, match=r"model\.bind\(variables\)"):
        to_onnx(Twice(), [(2, 4)])


def test_runtime_flag_of_the_model_selects_with_if():
    module = Block()
    variables = _variables(module, (2, 4))
    exported = to_onnx(module.bind(variables), [("B", 4)], input_params={"train": False})
    assert "If" in _ops(exported)
    assert [i.name for i in exported.graph.input][1:] == ["train"]
    (got,) = _run(exported, X, train=np.array(False))
    np.testing.assert_allclose(got, module.apply(variables, X), rtol=1e-5, atol=1e-6)


def test_deterministic_switch_as_input_keeps_batchnorm_in_inference():
    class Drop(nn.Module):
        @nn.compact
        def __call__(self, x, deterministic: bool = True):
            return nn.Dropout(0.3)(nn.Dense(4)(x), deterministic=deterministic)

    module = Drop()
    variables = _variables(module, (2, 4))
    exported = to_onnx(module.bind(variables), [("B", 4)], input_params={"deterministic": True})
    assert "deterministic" in [i.name for i in exported.graph.input]
    (got,) = _run(exported, X, deterministic=np.array(True))
    np.testing.assert_allclose(got, module.apply(variables, X), rtol=1e-6, atol=1e-6)


def test_apply_lambda_keeps_the_semantics_it_spells():
    module = Twice()
    variables = _variables(module, (2, 4))
    exported = to_onnx(lambda x: module.apply(variables, x), [("B", 4)])
    assert _ops(exported) == ["Gemm", "Tanh", "Gemm"]
    np.testing.assert_allclose(
        _run(exported, X)[0], module.apply(variables, X), rtol=1e-5, atol=1e-6
    )


def test_interceptor_is_seen_by_the_converting_thread_only():
    """A Linen call in another thread while to_onnx traces runs Flax's own code."""
    module = Twice()
    variables = _variables(module, (2, 4))
    seen = []
    started, release = threading.Event(), threading.Event()

    def slow(x):
        started.set()
        release.wait(10)
        return module.apply(variables, x)

    def other():
        started.wait(10)
        jaxpr = jax.make_jaxpr(lambda x: module.apply(variables, x))(X)
        seen.extend(e.primitive.name for e in jaxpr.eqns)
        release.set()

    thread = threading.Thread(target=other)
    thread.start()
    to_onnx(slow, [("B", 4)])
    thread.join()
    assert "dot_general" in seen and not any(p.startswith("flax.") for p in seen)


# -- nnx.bridge -------------------------------------------------------------------------


def _bridge(module=None, shape=(2, 4)):
    bridged = nnx.bridge.ToNNX(module or Block(), rngs=nnx.Rngs(0))
    nnx.bridge.lazy_init(bridged, jnp.ones(shape))
    return bridged


def _snapshot(module):
    return jax.tree.map(
        lambda a: np.asarray(jax.random.key_data(a) if _is_key(a) else a), nnx.state(module)
    )


def _is_key(a):
    return jnp.issubdtype(jnp.result_type(a), jax.dtypes.prng_key)


def _unchanged(before, module):
    after = _snapshot(module)
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)):
        np.testing.assert_array_equal(a, b)


def test_to_nnx_directly_inside_lambda_and_unchanged():
    bridged = _bridge()
    before = _snapshot(bridged)
    for target in (bridged, lambda x: bridged(x) * 2.0):
        exported = to_onnx(target, [("B", 4)])
        assert "Dropout" not in _ops(exported) and "Gemm" in _ops(exported)
        (got,) = _run(exported, X)
        np.testing.assert_allclose(got, traced_callable(target)(X), rtol=1e-5, atol=1e-6)
    _unchanged(before, bridged)
    variables = nnx.bridge.variables.nnx_attrs_to_linen_vars(
        {k: v for k, v in vars(bridged).items() if k in ("Dense_0", "BatchNorm_0")}
    )
    np.testing.assert_allclose(
        traced_callable(bridged)(X), Block().apply(variables, X), rtol=1e-6, atol=1e-6
    )


class Host(nnx.Module):
    def __init__(self, *, rngs):
        self.inner = _bridge()
        self.head = nnx.Linear(6, 2, rngs=rngs)

    def __call__(self, x):
        return self.head(self.inner(x))


def test_to_nnx_nested_in_nnx_module():
    host = Host(rngs=nnx.Rngs(1))
    before = _snapshot(host)
    exported = to_onnx(host, [("B", 4)])
    assert _ops(exported).count("Gemm") == 2
    np.testing.assert_allclose(_run(exported, X)[0], traced_callable(host)(X), rtol=1e-5, atol=1e-6)
    _unchanged(before, host)


def test_to_nnx_under_onnx_function():
    bridged = _bridge(Twice())

    @onnx_function
    def block(x):
        return bridged(x)

    exported = to_onnx(lambda x: block(x) + 1.0, [("B", 4)])
    assert [f.name for f in exported.functions] == ["block"]
    np.testing.assert_allclose(
        _run(exported, X)[0], traced_callable(bridged)(X) + 1.0, rtol=1e-5, atol=1e-6
    )


def test_to_linen_inside_linen():
    class Outer(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nnx.bridge.to_linen(nnx.Linear, 4, 5)(x)
            return nn.Dense(2)(jnp.tanh(x))

    module = Outer()
    variables = module.init(jax.random.key(0), jnp.ones((2, 4)))
    bound = module.bind(variables)
    exported = to_onnx(bound, [("B", 4)])
    assert _ops(exported).count("Gemm") == 2
    np.testing.assert_allclose(
        _run(exported, X)[0], module.apply(variables, X), rtol=1e-5, atol=1e-6
    )


@onnx_function
class SharedBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.relu(nn.Dense(4)(x))


def test_onnx_function_on_a_linen_class():
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return SharedBlock()(SharedBlock()(x))

    module = Net()
    variables = _variables(module, (2, 4))
    exported = to_onnx(module.bind(variables), [("B", 4)])
    assert _ops(exported) == ["SharedBlock", "SharedBlock"]
    assert [f.name for f in exported.functions] == ["SharedBlock"]
    np.testing.assert_allclose(
        _run(exported, X)[0], module.apply(variables, X), rtol=1e-5, atol=1e-6
    )
