"""HoistLinearMapsPass (``passes/maps.py``): a linear web whose coefficients a Loop keeps
becomes one product by a matrix computed in front of the Loop."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import onnx
import onnxruntime as ort

from jax2onnx import to_onnx
from jax2onnx.passes import HoistLinearMapsPass
from jax2onnx_testkit import passes_off


def _body(model: onnx.ModelProto) -> onnx.GraphProto:
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    return loop.attribute[0].g


def _run(model, *args):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, args, strict=True)))


def chord(a, b):
    """A chord iteration: one LU factorisation, a solve with it at every step."""
    factors = jsl.lu_factor(a)

    def step(i, x):
        residual = b - a @ x - 0.1 * jnp.tanh(x)
        return x + jsl.lu_solve(factors, residual)

    return jax.lax.fori_loop(0, 6, step, jnp.zeros_like(b))


def test_a_solve_by_factors_the_loop_keeps_is_one_product():
    rng = np.random.default_rng(0)
    a = (rng.normal(size=(4, 4)) + 4 * np.eye(4)).astype(np.float32)
    b = rng.normal(size=4).astype(np.float32)
    model = to_onnx(chord, [a, b])
    onnx.checker.check_model(model, full_check=True)
    with passes_off(HoistLinearMapsPass):
        plain = to_onnx(chord, [a, b])
    body, before = _body(model), _body(plain)
    ops = [n.op_type for n in body.node]
    # the permutation and both substitutions: gone; the matrix is made in front of the Loop
    assert "Div" not in ops and "Slice" not in ops and "Gather" not in ops, ops
    assert len(body.node) + 10 <= len(before.node), (ops, [n.op_type for n in before.node])
    outer = {v for n in model.graph.node for v in n.output}
    assert any(n.op_type == "MatMul" and set(n.input) & outer for n in body.node), ops
    for scale in (1.0, -3.0):
        want = np.asarray(jax.jit(chord)(a, b * scale))
        (got,) = _run(model, a, b * scale)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
        (unchanged,) = _run(plain, a, b * scale)
        np.testing.assert_allclose(got, unchanged, rtol=2e-5, atol=2e-6)


def shuffle(x, m, v, idx):
    """A web of every batched op: products from both sides, a broadcast scale, a
    transpose, a reversed slice, a concatenation, a reshape, a gather by an index the
    loop keeps, a sum, a broadcast add; then a non-linear step."""

    def step(i, carry):
        x, z = carry
        y = (x @ m) * v  # (2, 3) @ (3, 3), scaled per column
        y = y.T  # (3, 2)
        y = jnp.concatenate([y, y[::-1]], axis=1)  # (3, 4)
        flat = y.reshape(12)[idx]  # (12,) permuted
        total = flat.sum()
        out = flat[:6].reshape(2, 3) + total
        w = m @ z  # a matrix from the left times a vector
        return jnp.tanh(out), jnp.tanh(w + out[0])

    return jax.lax.fori_loop(0, 4, step, (x, x[0]))


def test_every_batched_op_gives_the_unchanged_numbers():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3)).astype(np.float32)
    m = (rng.normal(size=(3, 3)) * 0.5).astype(np.float32)
    v = rng.normal(size=3).astype(np.float32)
    idx = rng.permutation(12).astype(np.int32)
    model = to_onnx(shuffle, [x, m, v, idx])
    onnx.checker.check_model(model, full_check=True)
    with passes_off(HoistLinearMapsPass):
        plain = to_onnx(shuffle, [x, m, v, idx])
    # each handed value one product of the leaves it reads: the body loses all but the
    # stacks, the two products, the Reshape back to (2, 3) and the non-linear steps
    ops = [n.op_type for n in _body(model).node]
    assert sorted(ops) == ["Concat", "MatMul", "MatMul", "Reshape", "Reshape", "Tanh", "Tanh"], ops
    assert len(_body(plain).node) >= 15
    for k in range(2):
        inputs = [x * (1 + k), m, v * (1 - 2 * k), np.roll(idx, k)]
        want = jax.jit(shuffle)(*inputs)
        for got, expected in zip(_run(model, *inputs), want, strict=True):
            np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-5, atol=1e-6)
