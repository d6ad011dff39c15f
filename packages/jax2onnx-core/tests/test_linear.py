"""CollapseLinearMapsPass: webs of linear ops on small tensors become products."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort

from jax2onnx import to_onnx
from jax2onnx_testkit import op_counts

# Dormand-Prince's dense-output weights (rows: interpolation coefficients, columns: stages)
_DENSE = np.array(
    [
        [-12715105075 / 11282082432, 0, 87487479700 / 32700410799, -10690763975 / 1880347072],
        [701980252875 / 199316789632, -1453857185 / 822651844, 69997945 / 29380423, 1],
        [-1944542612 / 21024475, 1, 0, 11 / 84],
    ],
    np.float32,
)


def looped(step):
    """``step`` inside a Loop body (a count known only at run time: the Loop stays), its
    arguments the carries (their cosines each step), its results those of the last step:
    the pass works in bodies only."""

    def fn(*args):
        count = 2 + (args[0].sum() > 1e9).astype(jnp.int32)
        outs = jax.tree_util.tree_map(jnp.zeros_like, jax.eval_shape(step, *args))

        def body(_, carry):
            args, _ = carry
            return tuple(jnp.cos(a) for a in args), step(*args)

        return jax.lax.fori_loop(0, count, body, (args, outs))[1]

    return fn


def _body(model: onnx.ModelProto) -> onnx.GraphProto:
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    return loop.attribute[0].g


def _run(fn, *args):
    model = to_onnx(fn, list(args))
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: a for i, a in zip(session.get_inputs(), args, strict=True)}
    return model, session.run(None, feed)


def _stages(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)


def dense_output(k, y0):
    """Interpolation coefficients and the step's end, written stage by stage."""
    rows = []
    for r in range(3):
        acc = y0 * 0.5 - k[0] * _DENSE[r, 0]
        for j in range(1, 4):
            acc = acc + _DENSE[r, j] * k[j]
        rows.append(acc)
    y1 = y0 + 0.25 * (k[0] + 2.0 * k[1] + 2.0 * k[2] + k[3])
    return jnp.tanh(jnp.stack(rows)), jnp.sin(y1)


def test_stage_sums_become_products_and_match():
    fn = looped(dense_output)
    for seed in (0, 1):
        k, y0 = _stages(seed)
        model, got = _run(fn, k, y0)
        want = jax.jit(fn)(k, y0)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, np.asarray(w), rtol=2e-6, atol=2e-6)
    ops = [n.op_type for n in _body(model).node]
    # the stage reads, products and sums are a MatMul per result (and the leaves' Concat)
    assert ops.count("MatMul") == 2 and "Gather" not in ops and "Slice" not in ops, ops


def test_the_main_graph_keeps_the_ops_as_written():
    k, y0 = _stages(0)
    model, got = _run(dense_output, k, y0)
    assert "MatMul" not in op_counts(model), op_counts(model)
    for g, w in zip(got, jax.jit(dense_output)(k, y0), strict=True):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-6, atol=1e-6)


def test_a_value_entering_as_it_is_stays_out_of_the_product():
    """``y0 + dt * sum_j b_j k_j``: y0 is added to the product, not summed inside it."""

    def step(k, y0):
        return y0 + 0.1 * (0.5 * k[0] + 0.25 * k[1] + 0.125 * k[2] + 0.125 * k[3])

    k, y0 = _stages(2)
    fn = looped(step)
    model, (got,) = _run(fn, k, y0)
    ops = [n.op_type for n in _body(model).node if n.op_type not in ("Cos", "Identity")]
    assert sorted(ops) == ["Add", "MatMul", "Reshape"], ops
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(k, y0)), rtol=1e-6, atol=1e-6)


def test_a_flat_value_entering_a_shaped_result_is_summed_flat_then_reshaped():
    """``y0[:, None] + M k``: the sum runs on vectors, one Reshape makes the column (the
    other flattens ``k`` for the product)."""

    def step(k, y0):
        return y0[:, None] + 0.1 * (0.5 * k[0] + 0.25 * k[1] - 0.125 * k[3])[:, None]

    k, y0 = _stages(3)
    fn = looped(step)
    model, (got,) = _run(fn, k, y0)
    ops = [n.op_type for n in _body(model).node if n.op_type not in ("Cos", "Identity")]
    assert sorted(ops) == ["Add", "MatMul", "Reshape", "Reshape"], ops
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(k, y0)), rtol=1e-6, atol=1e-6)


def test_a_linear_right_hand_side_in_a_loop_body_is_one_product():
    """RK4 of a linear ODE: every stage's right-hand side and combination in the body
    are one linear map of the state."""

    def rk4(y):
        def f(y):
            return jnp.stack([y[1], -y[0] - 0.3 * y[1], 0.5 * y[0] - y[2]])

        def body(_, y):
            k1 = f(y)
            k2 = f(y + 0.05 * k1)
            k3 = f(y + 0.05 * k2)
            k4 = f(y + 0.1 * k3)
            return y + 0.1 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

        return jax.lax.fori_loop(0, 30, body, y)

    for y in (np.array([1.0, 0.0, 0.5], np.float32), np.array([-2.0, 3.0, 0.1], np.float32)):
        model, (got,) = _run(rk4, y)
        np.testing.assert_allclose(got, np.asarray(jax.jit(rk4)(y)), rtol=1e-5, atol=1e-6)
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    body = [n.op_type for n in loop.attribute[0].g.node]
    assert body == ["MatMul"], body  # the step's propagator, composed at conversion


def test_a_finiteness_test_keeps_its_ops():
    """``sum(x - x)`` is NaN exactly when x holds an inf or a NaN: it is not a zero product."""

    def fn(x):
        return jnp.isnan(jnp.sum(x - x)), x * 2.0

    x = np.array([1.0, np.inf, 2.0], np.float32)
    model, (flag, _) = _run(looped(fn), x)
    assert "MatMul" not in op_counts(model), op_counts(model)
    assert bool(flag)  # cos(inf) is NaN


def test_a_permutation_of_a_long_vector_stays_a_copy():
    """``rotate_half`` of a 64-wide head: a 64x64 product would cost more than the copy."""

    def rotate_half(x):
        half = x.shape[-1] // 2
        return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1) * 1.5

    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    fn = looped(rotate_half)
    model, (got,) = _run(fn, x)
    assert "MatMul" not in op_counts(model), op_counts(model)
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-6)
