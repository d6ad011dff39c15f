"""VectorizeLanesPass: stacks of alike scalar computations become vector computations.

Every test compares the model against the same conversion without the pass,
bit for bit (each vector op computes per element what its lane did), and
against ``jax.jit`` at float tolerance.
"""

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort

from jax2onnx import to_onnx
from jax2onnx.passes import CollapseLinearMapsPass, HoistLinearMapsPass, VectorizeLanesPass
from jax2onnx_testkit import passes_off


def quat_mul(u, v):  # as MuJoCo MJX writes it: one expression per component
    return jnp.array(
        [
            u[0] * v[0] - u[1] * v[1] - u[2] * v[2] - u[3] * v[3],
            u[0] * v[1] + u[1] * v[0] + u[2] * v[3] - u[3] * v[2],
            u[0] * v[2] - u[1] * v[3] + u[2] * v[0] + u[3] * v[1],
            u[0] * v[3] + u[1] * v[2] - u[2] * v[1] + u[3] * v[0],
        ]
    )


def matmul_unroll(a, b):  # a 3x3 product written cell by cell
    rows = []
    for i in range(a.shape[0]):
        row = []
        for j in range(b.shape[1]):
            s = 0.0
            for k in range(a.shape[1]):
                s += a[i, k] * b[k, j]
            row.append(s)
        rows.append(row)
    return jnp.array(rows)


def _without_pass(cls=VectorizeLanesPass):
    return passes_off(cls)


def _count(graph) -> int:
    total = len(graph.node)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                total += _count(attr.g)
    return total


def _ops(graph) -> list[str]:
    ops = [n.op_type for n in graph.node]
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                ops += _ops(attr.g)
    return ops


def _run(model, args):
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: a for i, a in zip(session.get_inputs(), args, strict=True)}
    return session.run(None, feed)


def _compare(fn, args, *, smaller_by: int):
    """Convert with and without the pass; the pass saves ``smaller_by`` nodes or more and
    changes no bit; both match ``jax.jit``."""
    model = to_onnx(fn, args)
    with _without_pass():
        plain = to_onnx(fn, args)
    assert _count(plain.graph) - _count(model.graph) >= smaller_by, (
        _count(plain.graph),
        _count(model.graph),
    )
    got, want = _run(model, args), _run(plain, args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    expected = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, np.asarray(e), rtol=2e-6, atol=1e-6)
    return model


def test_a_quaternion_product_is_one_vector_expression():
    u = np.array([0.5, -0.0, np.inf, 0.25], np.float32)
    v = np.array([-0.0, 0.75, 0.5, np.nan], np.float32)
    model = _compare(quat_mul, [u, v], smaller_by=20)
    ops = _ops(model.graph)
    assert "Concat" not in ops and "Unsqueeze" not in ops, ops
    finite = [np.array([0.5, -0.3, 0.1, 0.8], np.float32), np.array([0.2, 0.7, -0.6, 0.1])]
    finite[1] = finite[1].astype(np.float32)
    np.testing.assert_allclose(_run(model, finite)[0], quat_mul(*finite), rtol=1e-6)


def test_an_unrolled_matrix_product_becomes_vector_products_batched_or_not():
    a = np.linspace(-1.0, 1.0, 9, dtype=np.float32).reshape(3, 3)
    b = np.linspace(0.5, -2.0, 9, dtype=np.float32).reshape(3, 3)
    model = _compare(matmul_unroll, [a, b], smaller_by=40)
    assert _ops(model.graph).count("Concat") == 0
    batch = np.stack([a, 2 * a, -a]), np.stack([b, b.T, 3 * b])
    _compare(jax.vmap(matmul_unroll), list(batch), smaller_by=40)


def test_lanes_inside_a_loop_body_are_vectorised_there():
    def spin(q, w):
        return jax.lax.fori_loop(0, 5, lambda i, p: quat_mul(p, w) * 0.999, q)

    q = np.array([1.0, 0.0, 0.0, 0.0], np.float32)
    w = np.array([0.99, 0.1, -0.05, 0.02], np.float32)
    # the lanes pass's own saving (the product by the invariant w is linear: one MatMul)
    with passes_off(CollapseLinearMapsPass, HoistLinearMapsPass):
        model = _compare(spin, [q, w], smaller_by=20)
    body = next(a.g for n in model.graph.node for a in n.attribute if a.g.node)
    assert "Concat" not in _ops(body), _ops(body)


def test_a_lane_read_elsewhere_is_read_out_of_the_vector():
    def fn(x, y):
        lanes = [jnp.sin(x[i] * y[i] + x[i]) * y[i] for i in range(4)]
        return jnp.stack(lanes), lanes[2] + 1.0

    x = np.array([0.1, -0.2, 0.3, -0.0], np.float32)
    y = np.array([1.5, 0.5, -2.0, 3.0], np.float32)
    model = _compare(fn, [x, y], smaller_by=10)
    assert _ops(model.graph).count("Sin") == 1


def test_stacks_that_share_no_structure_stay_as_they_are():
    def fn(q):  # each component computed differently: nothing to vectorise
        return jnp.stack([q[1] * q[2], -q[0] + q[2], jnp.sqrt(q[0]) - q[2]])

    q = np.array([0.3, -0.2, 0.5], np.float32)
    model = to_onnx(fn, [q])
    with _without_pass():
        plain = to_onnx(fn, [q])
    assert _count(model.graph) == _count(plain.graph)
    np.testing.assert_array_equal(_run(model, [q])[0], _run(plain, [q])[0])
