"""Small equations on constants are computed at conversion (jax2onnx.conversion.folding)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest
from jax import lax

from jax2onnx import to_onnx


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def test_constant_bookkeeping_becomes_initializers():
    def f(x):
        t0, t1 = jnp.float32(0.0), jnp.float32(1.0)
        end = lax.nextafter(t1, t0)  # the float below 1
        steps = jnp.ceil((end - t0) / jnp.float32(0.3))
        scale = jnp.where(end < t1, steps, -steps)
        return x * scale

    model = to_onnx(f, [(3,)])
    assert _ops(model) == ["Mul"]
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(_run(model, x), np.asarray(f(x)))


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: jnp.arange(300.0, dtype=jnp.float32), id="large"),
        pytest.param(lambda: jnp.asarray(2.5, jnp.float32).astype(jnp.int32), id="float-to-int"),
    ],
)
def test_what_is_not_folded_still_converts(make):
    def f(x):
        return x + jnp.sum(make() * 2).astype(jnp.float32)

    model = to_onnx(f, [(3,)])
    x = np.ones(3, np.float32)
    np.testing.assert_allclose(_run(model, x), np.asarray(f(x)), rtol=1e-6)
