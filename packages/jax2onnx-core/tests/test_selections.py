"""SelectInBodiesPass: a loop body's Wheres on one scalar condition become one If,
the same numbers bit for bit (-0.0 included)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
from jax import lax

from jax2onnx import to_onnx
from jax2onnx.passes import SelectInBodiesPass
from jax2onnx_testkit import passes_off

_CPU = ["CPUExecutionProvider"]


def _stepper(x):
    """A step accepted or rejected by one test, as a solver's: time, state, step size and
    a record (-0.0 once a step is accepted) picked by it."""

    def cond(carry):
        t, _, _, _, k = carry
        return (t < 1.0) & (k < 40)

    def body(carry):
        t, y, h, z, k = carry
        err = jnp.abs(jnp.sin(7.0 * t + jnp.sum(y))) * h * 40.0
        accept = err < 1.0
        t = jnp.where(accept, t + h, t)
        y = jnp.where(accept, y + h * jnp.cos(y), jnp.where(y > 0, 0.5 * y, y))
        h = jnp.where(accept, h * 1.5, h * 0.5)
        z = jnp.where(accept, -0.0 * jnp.abs(z), z)
        return t, y, h, z, k + 1

    t0 = jnp.zeros((), x.dtype)
    _, y, _, z, _ = lax.while_loop(cond, body, (t0, x, jnp.asarray(0.1, x.dtype), x, 0))
    return y, z


def _body(model):
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    return loop.attribute[0].g


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=_CPU)
    return session.run(None, {session.get_inputs()[0].name: x})


def _without_pass(fn, shapes):
    with passes_off(SelectInBodiesPass):
        return to_onnx(fn, shapes)


def test_selections_on_one_test_are_one_if():
    model = to_onnx(_stepper, [("B",)])
    onnx.checker.check_model(model, full_check=True)
    body = _body(model)
    ops = [n.op_type for n in body.node]
    branches = [n for n in body.node if n.op_type == "If"]
    assert len(branches) == 1 and len(branches[0].output) >= 4, ops
    assert ops.count("Where") == 1, ops  # the nested one, on another test
    kept = [n.op_type for n in _body(_without_pass(_stepper, [("B",)])).node]
    assert kept.count("Where") == 5 and "If" not in kept, kept
    rng = np.random.default_rng(0)
    for n in (3, 6):
        x = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        for got, want in zip(_run(model, x), jax.jit(_stepper)(x), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_picked_negative_zero_stays_negative():
    # ONNX Runtime's Where returns +0.0 where it picks -0.0; an If passes the value as it is
    x = np.array([0.5, -0.25, 0.75, 0.1], np.float32)
    want = np.asarray(jax.jit(_stepper)(x)[1])
    assert (want == 0).all() and np.signbit(want).all(), want  # the case picks a -0.0
    got = _run(to_onnx(_stepper, [x.shape]), x)[1]
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_a_main_graph_where_keeps_its_form():
    def fn(x):
        s = jnp.sum(x) > 0
        return jnp.where(s, x, -x), jnp.where(s, 2.0 * x, x)

    model = to_onnx(fn, [(3,)])
    assert [n.op_type for n in model.graph.node].count("Where") == 2


def _codes(x):
    """A solver's result code: set on NaN, tested, escalated, mapped through a table."""
    s = jnp.sum(x)
    code = jnp.where(jnp.isnan(s), jnp.int32(3), jnp.int32(0))
    failed = code == 3
    code = jnp.where(failed | (s > 1), jnp.int32(2), code)
    mapped = jnp.array([0, 5, 6, 7], jnp.int32)[code]
    return jnp.where(mapped != 0, mapped, 0), failed


def test_result_codes_are_tested_and_mapped_without_reading_them_back():
    model = to_onnx(_codes, [("B",)])
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    # code == 3 is the NaN test itself; the table read is a Where over mapped constants;
    # where(mapped != 0, mapped, 0) is mapped
    assert "Equal" not in ops and "Gather" not in ops and ops.count("Where") == 2, ops
    for x in ([0.1, 0.2], [0.5, 0.6, 0.7], [np.nan, 0.1, 0.2], [0.1, -0.2, 0.05]):
        x = np.asarray(x, np.float32)
        for got, want in zip(_run(model, x), jax.jit(_codes)(x), strict=True):
            np.testing.assert_array_equal(got, want)


def _controller(x):
    """A step-size controller: what the accept test picks feeds more work (the factor is
    a constant once the branch is known)."""

    def cond(carry):
        return carry[0] < 1.0

    def body(carry):
        t, y, h = carry
        err = jnp.abs(jnp.sin(9.0 * t + jnp.sum(y))) * h * 30.0
        accept = err < 1.0
        factor = jnp.where(accept, 1.25, 0.5)
        grow = jnp.clip(factor * 0.9, 0.2, 5.0)
        t = jnp.where(accept, t + h, t)
        y = jnp.where(accept, y * jnp.cos(h), y)
        return t, y, jnp.minimum(h * grow, 1.0 - t + 1e-3)

    t0 = jnp.zeros((), x.dtype)
    return lax.while_loop(cond, body, (t0, x, jnp.asarray(0.05, x.dtype)))[1]


def test_the_work_after_the_selections_runs_in_the_picked_branch():
    model, kept = to_onnx(_controller, [("B",)]), _without_pass(_controller, [("B",)])
    onnx.checker.check_model(model, full_check=True)
    body = _body(model)
    ops = [n.op_type for n in body.node]
    assert "Where" not in ops and ops.count("If") == 1, ops
    assert "Clip" not in ops and "Clip" in [n.op_type for n in _body(kept).node]
    branch = next(n for n in body.node if n.op_type == "If").attribute[0].g
    assert "Clip" not in [n.op_type for n in branch.node]  # the picked factor's clip folded
    rng = np.random.default_rng(1)
    for n in (2, 5):
        x = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        got = _run(model, x)[0]
        np.testing.assert_array_equal(got, _run(kept, x)[0])  # the same ops on the same numbers
        np.testing.assert_allclose(got, jax.jit(_controller)(x), rtol=1e-5, atol=1e-6)
