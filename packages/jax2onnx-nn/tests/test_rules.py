"""Plain tests of the nn macro primitives' rules (not conversion cases)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax2onnx import to_onnx


@pytest.mark.filterwarnings("ignore:jax.nn.one_hot input should be integer-typed")
@pytest.mark.filterwarnings("ignore:jax.nn.one_hot input should be integer-typed")
def test_one_hot_grad_is_zero_as_in_jax():
    def fn(x):
        return jax.grad(lambda v: (jax.nn.one_hot(v, 3) * jnp.arange(3.0)).sum())(x)

    model = to_onnx(fn, [(4,)])
    assert "Equal" not in {n.op_type for n in model.graph.node}  # no one_hot left: zeros
    x = np.array([0.0, 1.0, 2.0, 1.5], np.float32)
    np.testing.assert_array_equal(np.asarray(fn(x)), np.zeros(4, np.float32))


@pytest.mark.filterwarnings("ignore:jax.nn.one_hot input should be integer-typed")
def test_interception_is_scoped_to_tracing():
    original = jax.nn.gelu
    to_onnx(lambda x: jax.nn.gelu(x), [(2, 3)])
    assert jax.nn.gelu is original
    # Outside to_onnx plain JAX differentiates one_hot's float input as before.
    x = np.array([0.0, 1.0, 2.0], np.float32)
    grad = jax.grad(lambda v: jax.nn.one_hot(v, 3).sum())(x)
    assert np.all(np.asarray(grad) == 0)


def test_unbindable_calls_run_the_original():
    model = to_onnx(lambda x: jax.nn.logsumexp(x, axis=-1, return_sign=True), [(2, 3)])
    assert len(model.graph.output) == 2
