"""SinkIntoUpdatesPass: work on values an If refreshes moves into the refreshing branch,
the same numbers bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
from jax import lax

from jax2onnx import to_onnx
from jax2onnx.passes import SinkIntoUpdatesPass
from jax2onnx_testkit import passes_off

_CPU = ["CPUExecutionProvider"]


def _refreshed_every_third_step(work):
    def fn(x, a):
        def body(i, carry):
            m, acc = carry
            # a factor refreshed now and then, passed on unchanged otherwise
            m = lax.cond(i % 3 == 0, lambda: 0.5 * (m @ m.T) / jnp.max(jnp.abs(m)) + a, lambda: m)
            return m, acc + work(m) @ x

        return lax.fori_loop(0, x.shape[0] + 4, body, (a, jnp.zeros_like(x)))[1]

    return fn


def _heavy(m):  # read only from the refreshed factor: the same until the next refresh
    scaled = jnp.tanh(m) * 2.0 - jnp.sum(m, axis=0) / (1.0 + jnp.abs(m))
    return jnp.where(scaled > 0, scaled, 0.1 * scaled) + jnp.exp(-jnp.abs(m))


def _body_ops(model):
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    return [n.op_type for n in loop.attribute[0].g.node]


def _run(model, *args):
    session = ort.InferenceSession(model.SerializeToString(), providers=_CPU)
    return session.run(None, {i.name: a for i, a in zip(session.get_inputs(), args)})[0]


def _without_pass(fn, shapes):
    with passes_off(SinkIntoUpdatesPass):
        return to_onnx(fn, shapes)


def test_work_on_a_refreshed_factor_runs_once_per_refresh():
    fn = _refreshed_every_third_step(_heavy)
    rng = np.random.default_rng(0)
    for n in (3, 5):
        x = rng.standard_normal((n, 2)).astype(np.float32)
        a = rng.standard_normal((n, n)).astype(np.float32)
        moved, kept = to_onnx(fn, [x.shape, a.shape]), _without_pass(fn, [x.shape, a.shape])
        onnx.checker.check_model(moved, full_check=True)
        assert "Tanh" in _body_ops(kept) and "Tanh" not in _body_ops(moved), _body_ops(moved)
        assert len(_body_ops(moved)) < len(_body_ops(kept)) - 6
        got = _run(moved, x, a)
        np.testing.assert_array_equal(got, _run(kept, x, a))  # the same nodes on the same numbers
        np.testing.assert_allclose(got, jax.jit(fn)(x, a), rtol=1e-5, atol=1e-5)


def test_a_little_work_stays_in_the_body():
    fn = _refreshed_every_third_step(lambda m: jnp.tanh(m))
    moved = to_onnx(fn, [(3, 2), (3, 3)])
    assert "Tanh" in _body_ops(moved)  # one node would cost a carry and an Identity


def test_a_refreshed_value_only_the_moved_work_read_is_no_longer_carried():
    def fn(x, a):
        def body(i, carry):
            m, acc = carry
            # refreshed from the step alone: after the move only the branch reads it
            fresh = lambda: jnp.sin(a * i.astype(a.dtype)) + a  # noqa: E731
            m = lax.cond(i % 3 == 0, fresh, lambda: m)
            return m, acc + _heavy(m) @ x

        return lax.fori_loop(0, 7, body, (a, jnp.zeros_like(x)))[1]

    x = np.random.default_rng(1).standard_normal((4, 2)).astype(np.float32)
    a = np.random.default_rng(2).standard_normal((4, 4)).astype(np.float32)
    moved, kept = to_onnx(fn, [x.shape, a.shape]), _without_pass(fn, [x.shape, a.shape])
    onnx.checker.check_model(moved, full_check=True)
    loop = next(n for n in moved.graph.node if n.op_type == "Loop")
    cond = next(n for n in loop.attribute[0].g.node if n.op_type == "If")
    branches = [[n.op_type for n in a.g.node] for a in cond.attribute]
    assert ["Identity"] in branches, branches  # passes on the work's result, not m
    assert len(cond.output) == 1
    np.testing.assert_array_equal(_run(moved, x, a), _run(kept, x, a))
    np.testing.assert_allclose(_run(moved, x, a), jax.jit(fn)(x, a), rtol=1e-5, atol=1e-5)
