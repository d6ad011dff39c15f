"""UnrollCountedLoopsPass: short Loops of known length in a Loop body become their steps."""

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


def _unread_initializers(model: onnx.ModelProto) -> list[str]:
    """Initializers no node of any graph reads (ONNX Runtime warns about each)."""
    graphs, read, k = [model.graph], set(), 0
    while k < len(graphs):
        for node in graphs[k].node:
            read.update(node.input)
            graphs.extend(a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH)
        k += 1
    return [i.name for g in graphs for i in g.initializer if i.name not in read]


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    onnx.checker.check_model(model, full_check=True)
    assert not _unread_initializers(model), _unread_initializers(model)  # the old steps' reads
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _in_steps(step):
    """``step`` run as the body of an outer loop whose length is known at run time only."""

    def fn(x, *rest):
        count = 3 + (x.sum() > 1e9).astype(jnp.int32)
        return jax.lax.fori_loop(0, count, lambda _, c: step(c, *rest), x)

    return fn


def _outer_body(model: onnx.ModelProto) -> list[str]:
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    return [n.op_type for n in loop.attribute[0].g.node]


def four_steps(x):
    return jax.lax.fori_loop(0, 4, lambda i, c: jnp.sin(c) * jnp.asarray(_TABLE)[i] + c, x)


def test_a_fixed_count_loop_in_a_body_becomes_its_steps():
    fn = _in_steps(four_steps)
    x = np.array([0.3, -0.2, 0.5], np.float32)
    model = to_onnx(fn, [x])
    assert op_counts(model).get("Loop") == 1, op_counts(model)  # the outer one
    assert _outer_body(model).count("Sin") == 4, _outer_body(model)
    session = _session(model)
    for value in (x, np.array([1.5, 2.0, -3.0], np.float32)):
        (got,) = session.run(None, {"in_0": value})
        np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(value)), rtol=1e-6, atol=1e-6)


def test_a_loop_of_the_main_graph_keeps_its_form():
    model = to_onnx(four_steps, [np.array([0.3, -0.2, 0.5], np.float32)])
    assert op_counts(model).get("Loop") == 1, op_counts(model)


def stages(x, first):
    """A stage loop as diffrax writes it: the counter starts at 0 or 1 (the first stage
    reused), reads its row of a table by the counter and writes its result there."""
    start = jnp.where(first, 0, 1)
    buffer = jnp.zeros((6, 3), x.dtype).at[0].set(x * 0.5)

    def body(carry):
        i, y, k = carry
        y = jnp.tanh(y + jnp.asarray(_STAGES)[i] @ k)
        return i + 1, y, k.at[i].set(y * 0.25)

    y, k = jax.lax.while_loop(lambda c: c[0] < 6, body, (start, x, buffer))[1:]
    return y + 0.1 * k.sum(axis=0)


def test_a_counter_from_one_of_two_starts_unrolls_with_a_guarded_first_step():
    fn = _in_steps(stages)
    x = np.array([0.3, -0.2, 0.5], np.float32)
    model = to_onnx(fn, [x, np.array(True)])
    body = _outer_body(model)
    # the first step runs in an If taken where the start is 0 (the guard ``start <= 0`` of
    # ``start = where(first, 0, 1)`` is ``first`` itself); the other five as they are
    assert "Loop" not in body and "LessOrEqual" not in body and "Where" not in body, body
    assert body.count("If") == 1 and body.count("Tanh") == 5, body
    session = _session(model)
    for value in (x, np.array([1.5, 2.0, -3.0], np.float32)):
        for first in (True, False):
            (got,) = session.run(None, {"in_0": value, "in_1": np.array(first)})
            want = jax.jit(fn)(value, first)
            np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6, atol=1e-6)


def test_a_long_loop_stays_a_loop():
    fn = _in_steps(lambda c: jax.lax.fori_loop(0, 40, lambda i, c: jnp.sin(c) + 0.1 * c, c))
    x = np.array([0.3, -0.2, 0.5], np.float32)
    model = to_onnx(fn, [x])
    assert op_counts(model).get("Loop") == 2, op_counts(model)
    (got,) = _session(model).run(None, {"in_0": x})
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-6, atol=1e-6)
