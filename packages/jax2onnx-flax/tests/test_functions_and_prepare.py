"""NNX modules through ``to_onnx``: preparation, ``@onnx_function`` on module classes."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import onnx
import onnx.inliner
import onnxruntime as ort
import pytest
from flax import nnx

from jax2onnx import onnx_function, to_onnx, traced_callable


@onnx_function
class MLPBlock(nnx.Module):
    def __init__(self, dim, *, rngs):
        self.linear1 = nnx.Linear(dim, dim, rngs=rngs)
        self.linear2 = nnx.Linear(dim, dim, rngs=rngs)
        self.batchnorm = nnx.BatchNorm(dim, rngs=rngs)

    def __call__(self, x):
        return nnx.gelu(self.linear2(self.batchnorm(nnx.gelu(self.linear1(x)))))


class TwoBlocks(nnx.Module):
    def __init__(self, dim, *, rngs):
        self.block1 = MLPBlock(dim, rngs=rngs)
        self.block2 = MLPBlock(dim, rngs=rngs)

    def __call__(self, x):
        return self.block2(self.block1(x))


class Encoder(nnx.Module):
    def __init__(self, *, rngs):
        self.proj = nnx.Linear(6, 4, rngs=rngs)

    def encode(self, x):
        return jnp.tanh(self.proj(x))


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})


def test_module_blocks_share_one_function():
    model = TwoBlocks(16, rngs=nnx.Rngs(0))
    exported = to_onnx(model, [("B", 16)])
    onnx.checker.check_model(exported, full_check=True)
    assert [f.name for f in exported.functions] == ["MLPBlock"]
    assert [n.op_type for n in exported.graph.node] == ["MLPBlock", "MLPBlock"]
    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    (got,) = _run(exported, x)
    want = np.asarray(traced_callable(model)(x))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    inlined = onnx.inliner.inline_local_functions(exported)
    np.testing.assert_array_equal(_run(inlined, x)[0], got)


def test_bound_method_exports_that_method():
    model = Encoder(rngs=nnx.Rngs(1))
    exported = to_onnx(model.encode, [("B", 6)])
    x = np.ones((2, 6), np.float32)
    np.testing.assert_allclose(_run(exported, x)[0], np.asarray(model.encode(x)), rtol=1e-6)


def test_module_without_call_names_a_method():
    with pytest.raises(TypeError, match=r"to_onnx\(model\.encode"):
        to_onnx(Encoder(rngs=nnx.Rngs(1)), [(2, 6)])


def test_training_mode_module_converts_unchanged():
    model = TwoBlocks(8, rngs=nnx.Rngs(0))
    model.train()
    stats = np.asarray(model.block1.batchnorm.mean[...]).copy()
    to_onnx(model, [("B", 8)])
    assert model.block1.batchnorm.use_running_average is False
    np.testing.assert_array_equal(np.asarray(model.block1.batchnorm.mean[...]), stats)


class Shared(nnx.Module):
    """Two heads over one trunk: the closure copies must keep sharing it."""

    def __init__(self, *, rngs):
        self.trunk = nnx.Linear(4, 4, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        return self.drop(self.trunk(x))


def test_plain_function_closing_over_training_modules_exports_inference():
    first = Shared(rngs=nnx.Rngs(0))
    second = Shared(rngs=nnx.Rngs(1))
    second.trunk = first.trunk
    first.train()
    second.train()

    def fn(x, scale=2.0):
        return first(x) * scale + second(x)

    exported = to_onnx(fn, [("B", 4)])
    assert first.drop.deterministic is False, "conversion must not switch the user's modules"
    assert "Dropout" not in [n.op_type for n in exported.graph.node]
    assert sum(1 for i in exported.graph.initializer if tuple(i.dims) == (4, 4)) == 1
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    first.eval()
    second.eval()
    np.testing.assert_allclose(_run(exported, x)[0], np.asarray(fn(x)), rtol=1e-6, atol=1e-6)
    assert second.trunk is first.trunk
