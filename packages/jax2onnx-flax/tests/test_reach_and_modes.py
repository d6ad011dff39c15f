"""Modules reached through globals and helpers, a model's own flags, and ``ToLinen``.

Each export runs in ONNX Runtime against JAX's output of the same model in
eval mode (a clone: the user's model is never switched), and the user's model
is left as it was: mode, statistics, RNG counts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from flax import linen as nn
from flax import nnx

from jax2onnx import to_onnx
from jax2onnx.plugin import Jax2OnnxError, UsageError

X = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)


def _run(model, *inputs, **named):
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
    feeds.update(named)
    return session.run(None, feeds)


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _moved_statistics(module, seed):
    """Running statistics away from 0 and 1, so eval-mode BatchNorm differs from identity."""
    rng = np.random.default_rng(seed)
    for _, node in nnx.iter_graph(module):
        if isinstance(node, nnx.BatchNorm):
            node.mean[...] = rng.standard_normal(node.mean.shape).astype(np.float32)
            node.var[...] = rng.uniform(0.5, 2.0, node.var.shape).astype(np.float32)
    return module


def _snapshot(module):
    keys = jax.dtypes.prng_key
    return [
        np.asarray(jax.random.key_data(a) if jnp.issubdtype(a.dtype, keys) else a)
        for a in jax.tree.leaves(nnx.state(module))
    ]


def _unchanged(before, module):
    for a, b in zip(before, _snapshot(module), strict=True):
        np.testing.assert_array_equal(a, b)


def _in_eval(module, *args, **kwargs):
    """JAX's reference: a clone of ``module`` after ``model.eval()``."""
    clone = nnx.clone(module)
    clone.eval()
    return np.asarray(clone(*args, **kwargs))


# -- a module reached through a global name -----------------------------------------------

MODEL = _moved_statistics(
    nnx.Sequential(
        nnx.Linear(4, 4, rngs=nnx.Rngs(0)),
        nnx.Dropout(0.5, rngs=nnx.Rngs(1)),
        nnx.BatchNorm(4, rngs=nnx.Rngs(2)),
    ),
    seed=3,
)  # training mode, as built


def _predict(x):
    return MODEL(x) * 2.0


def test_global_module_exports_in_inference_mode():
    before = _snapshot(MODEL)
    exported = to_onnx(lambda x: MODEL(x), [(3, 4)])
    assert "Dropout" not in _ops(exported)
    np.testing.assert_allclose(_run(exported, X)[0], _in_eval(MODEL, X), rtol=1e-5, atol=1e-5)
    assert MODEL.layers[1].deterministic is False and MODEL.layers[2].use_running_average is False
    _unchanged(before, MODEL)
    assert _predict.__globals__["MODEL"] is MODEL


def test_global_module_through_a_helper_function_and_vmap():
    before = _snapshot(MODEL)
    exported = to_onnx(lambda x: _predict(x) + 1.0, [("B", 4)])
    want = _in_eval(MODEL, X) * 2.0 + 1.0
    np.testing.assert_allclose(_run(exported, X)[0], want, rtol=1e-5, atol=1e-5)
    mapped = to_onnx(jax.vmap(_predict), [(2, 3, 4)])
    stacked = np.stack([X, X[::-1]])
    want = np.stack([_in_eval(MODEL, X), _in_eval(MODEL, X[::-1])]) * 2.0
    np.testing.assert_allclose(_run(mapped, stacked)[0], want, rtol=1e-5, atol=1e-5)
    _unchanged(before, MODEL)
    assert _predict.__globals__["MODEL"] is MODEL


def test_module_reached_as_global_and_closure_is_copied_once():
    def make(module):
        return lambda x: module(x) + MODEL(x)

    exported = to_onnx(make(MODEL), [(3, 4)])
    assert sum(1 for i in exported.graph.initializer if tuple(i.dims) == (4, 4)) == 1
    want = 2.0 * _in_eval(MODEL, X)
    np.testing.assert_allclose(_run(exported, X)[0], want, rtol=1e-5, atol=1e-5)


class _Holder:
    model = MODEL


def test_module_reached_through_an_attribute_is_refused_with_the_line():
    holder = _Holder()
    before = _snapshot(MODEL)
    with pytest.raises(UsageError, match=r"test_reach_and_modes\.py:\d+.*model\.eval\(\)"):
        to_onnx(lambda x: holder.model(x), [(3, 4)])
    _unchanged(before, MODEL)


def test_decode_cache_update_on_a_copy_is_refused_and_in_and_out_converts():
    """The copy's cache update would be lost: refused. Passed in and out, it is exported."""
    attention = nnx.MultiHeadAttention(2, 8, qkv_features=8, decode=True, rngs=nnx.Rngs(0))
    attention.init_cache((1, 4, 8))
    for target in (attention, lambda x: attention(x)):
        with pytest.raises(Jax2OnnxError, match="decode=False"):
            to_onnx(target, [(1, 1, 8)])
    graphdef, params, cache = nnx.split(attention, nnx.Param, nnx.Cache)

    def step(x, cache):
        model = nnx.merge(graphdef, params, cache)
        return model(x), nnx.state(model, nnx.Cache)

    exported = to_onnx(step, [(1, 1, 8), cache])
    assert len(exported.graph.output) == 4  # the output and the three cache arrays


# -- a model's own bool flag ----------------------------------------------------------------


class OwnAttribute(nnx.Module):
    """A flag of the model's own (``self.training``) deciding whether BatchNorm runs."""

    def __init__(self, *, explicit, rngs):
        self.training = True
        self.explicit = explicit
        self.linear = nnx.Linear(4, 4, rngs=rngs)
        self.bn = nnx.BatchNorm(4, rngs=rngs)

    def __call__(self, x):
        x = self.linear(x)
        if self.training:
            if self.explicit:  # the call argument decides, as model.eval() leaves it
                return self.bn(x, use_running_average=not self.training)
            return self.bn(x)
        return x


OWN = _moved_statistics(OwnAttribute(explicit=False, rngs=nnx.Rngs(4)), seed=5)


def test_own_attribute_flag_reached_through_a_global():
    """``model.eval()`` leaves ``training`` alone: BatchNorm runs, on running statistics."""
    before = _snapshot(OWN)
    exported = to_onnx(lambda x: OWN(x), [(3, 4)])
    np.testing.assert_allclose(_run(exported, X)[0], _in_eval(OWN, X), rtol=1e-5, atol=1e-5)
    _unchanged(before, OWN)
    assert OWN.training is True and OWN.bn.use_running_average is False


def test_own_attribute_flag_passed_to_batchnorm_updates_the_copy_only():
    model = _moved_statistics(OwnAttribute(explicit=True, rngs=nnx.Rngs(6)), seed=7)
    before = _snapshot(model)
    exported = to_onnx(model, [(3, 4)])
    want = _in_eval(model, X)  # batch statistics: the call asks for them
    np.testing.assert_allclose(_run(exported, X)[0], want, rtol=1e-4, atol=1e-5)
    _unchanged(before, model)


class OwnArgument(nnx.Module):
    def __init__(self, *, rngs):
        self.linear = nnx.Linear(4, 4, rngs=rngs)
        self.bn = nnx.BatchNorm(4, rngs=rngs)

    def __call__(self, x, train: bool = False):
        x = self.linear(x)
        if train:
            x = self.bn(x)
        return x


def test_own_flag_as_input_runs_the_training_branch_on_a_copy():
    model = _moved_statistics(OwnArgument(rngs=nnx.Rngs(8)), seed=9)
    before = _snapshot(model)
    for target in (model, lambda x, train: model(x, train)):
        exported = to_onnx(target, [(3, 4)], input_params={"train": False})
        assert "If" in _ops(exported)
        for train in (False, True):
            (got,) = _run(exported, X, train=np.array(train))
            want = np.asarray(nnx.clone(model)(X, train=train))
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    _unchanged(before, model)


# -- nnx.bridge.ToLinen ---------------------------------------------------------------------


class Inner(nnx.Module):
    def __init__(self, *, rngs):
        self.linear = nnx.Linear(4, 5, rngs=rngs)
        self.bn = nnx.BatchNorm(5, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        return self.drop(self.bn(self.linear(x)))


def _inner_in_eval(*, rngs):
    inner = Inner(rngs=rngs)
    inner.eval()
    return inner


class Outer(nn.Module):
    inner: object = Inner

    @nn.compact
    def __call__(self, x):
        x = nnx.bridge.ToLinen(self.inner)(x)
        return nn.Dense(2)(jnp.tanh(x))


def test_to_linen_builds_its_module_in_inference_mode():
    outer = Outer()
    variables = outer.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, X)
    leaves, tree = jax.tree.flatten(variables)
    keys = jax.random.split(jax.random.key(2), len(leaves))
    variables = jax.tree.unflatten(
        tree, [a + 0.3 * jax.random.uniform(k, a.shape) for a, k in zip(leaves, keys)]
    )
    exported = to_onnx(outer.bind(variables), [("B", 4)])
    assert "Dropout" not in _ops(exported)
    want = Outer(inner=_inner_in_eval).apply(variables, X)
    np.testing.assert_allclose(_run(exported, X)[0], want, rtol=1e-5, atol=1e-5)
