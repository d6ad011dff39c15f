"""``x.at[mask]`` updates with a traced mask inside ``jax.vmap``.

Not a ``case(...)``: the testkit's reference is JAX evaluating the same
function, and JAX refuses a boolean-mask update under ``jax.vmap`` even on
concrete arrays (``NonConcreteBooleanIndexError``). The reference here is
what the update means, ``jnp.where`` of the mask, per example.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest

from jax2onnx import to_onnx


def _run(fn, specs, *arrays):
    model = to_onnx(fn, specs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, arrays)))


def test_masked_update_under_vmap_with_a_symbolic_batch():
    def f(x, m, v):
        return jax.vmap(lambda a, b, c: a.at[b].add(c))(x, m, v)

    specs = [("B", 4), jax.ShapeDtypeStruct(("B", 4), jnp.bool_), ("B",)]
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        m = rng.random((batch, 4)) > 0.5
        v = rng.standard_normal(batch).astype(np.float32)
        (got,) = _run(f, specs, x, m, v)
        np.testing.assert_allclose(got, np.where(m, x + v[:, None], x), rtol=1e-6)


def test_jax_still_refuses_the_masked_update_under_vmap():
    """If this starts failing, JAX computes the reference itself: make it a case."""
    f = jax.vmap(lambda a, b: jnp.asarray(a).at[b].set(0.0))
    with pytest.raises(jax.errors.NonConcreteBooleanIndexError):
        f(np.ones((2, 3), np.float32), np.ones((2, 3), bool))
