"""UnrollCountedLoopsPass: short Loops of known length become their steps."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort

from jax2onnx import to_onnx
from jax2onnx_testkit import op_counts

_TABLE = np.linspace(-1.0, 1.0, 18, dtype=np.float32).reshape(6, 3)
_STAGES = np.tril(np.linspace(0.1, 0.9, 36, dtype=np.float32).reshape(6, 6), -1)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    onnx.checker.check_model(model, full_check=True)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_a_fixed_count_loop_becomes_its_steps():
    def fn(x):
        return jax.lax.fori_loop(0, 4, lambda i, c: jnp.sin(c) * jnp.asarray(_TABLE)[i] + c, x)

    x = np.array([0.3, -0.2, 0.5], np.float32)
    model = to_onnx(fn, [x])
    assert "Loop" not in op_counts(model), op_counts(model)
    session = _session(model)
    for value in (x, np.array([1.5, 2.0, -3.0], np.float32)):
        (got,) = session.run(None, {"in_0": value})
        np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(value)), rtol=1e-6, atol=1e-6)


def stages(x, first):
    """A stage loop as diffrax writes it: the counter starts at 0 or 1 (the first stage
    reused), reads its row of a table by the counter and writes its result there."""
    start = jnp.where(first, 0, 1)
    buffer = jnp.zeros((6, 3), x.dtype).at[0].set(x * 0.5)

    def body(carry):
        i, y, k = carry
        y = jnp.tanh(y + jnp.asarray(_STAGES)[i] @ k)
        return i + 1, y, k.at[i].set(y * 0.25)

    return jax.lax.while_loop(lambda c: c[0] < 6, body, (start, x, buffer))[1:]


def test_a_counter_from_one_of_two_starts_unrolls_with_a_guarded_first_step():
    x = np.array([0.3, -0.2, 0.5], np.float32)
    model = to_onnx(stages, [x, np.array(True)])
    ops = op_counts(model)
    # the first step computes whatever the start and keeps its result where the start is 0
    assert "Loop" not in ops and ops.get("LessOrEqual") == 1, ops
    session = _session(model)
    for value in (x, np.array([1.5, 2.0, -3.0], np.float32)):
        for first in (True, False):
            got = session.run(None, {"in_0": value, "in_1": np.array(first)})
            want = jax.jit(stages)(value, first)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(g, np.asarray(w), rtol=1e-6, atol=1e-6)


def test_a_long_loop_stays_a_loop():
    def fn(x):
        return jax.lax.fori_loop(0, 40, lambda i, c: jnp.sin(c) + 0.1 * c, x)

    x = np.array([0.3, -0.2, 0.5], np.float32)
    model = to_onnx(fn, [x])
    assert op_counts(model).get("Loop") == 1, op_counts(model)
    (got,) = _session(model).run(None, {"in_0": x})
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-6, atol=1e-6)
