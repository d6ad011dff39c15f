"""Passes for code written element by element: LiftScalarsPass (scalars read out of a
vector and stacked back keep a unit axis) and ComposeGathersPass (reads of reads by
constant indices are one Gather).

Each case converts with and without the pass: the pass removes nodes, the outputs
agree bit for bit (every element is the same op on the same numbers, or the same
element moved) and both match ``jax.jit``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from jax2onnx import to_onnx
from jax2onnx.passes import ComposeGathersPass, LiftScalarsPass
from jax2onnx.values.ir import ir
from jax2onnx_testkit import op_counts


@pytest.fixture
def plain(monkeypatch):
    """``to_onnx`` with one pass switched off (the class, for this test only)."""

    def convert(fn, args, without=LiftScalarsPass):
        with monkeypatch.context() as patch:
            patch.setattr(without, "call", lambda self, m: ir.passes.PassResult(m, False))
            return to_onnx(fn, args)

    return convert


def _outputs(model, args):
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, args, strict=True)))


def _lifted(plain, fn, args, *, fewer_reshapes: int) -> dict[str, int]:
    """The pass's model has ``fewer_reshapes`` fewer Squeeze + Unsqueeze nodes (bodies
    included) and no other node more; its numbers are the plain model's, bit for bit."""
    model, before = to_onnx(fn, args), plain(fn, args)
    ops, base = op_counts(model), op_counts(before)
    reshapes = sum(ops.get(op, 0) - base.get(op, 0) for op in ("Squeeze", "Unsqueeze"))
    assert reshapes == -fewer_reshapes, (base, ops)
    others = set(ops) - {"Squeeze", "Unsqueeze"}
    assert all(ops[op] <= base.get(op, 0) for op in others), (base, ops)
    got = _outputs(model, args)
    for g, w in zip(got, _outputs(before, args), strict=True):
        np.testing.assert_array_equal(g, w)
    for g, e in zip(got, jax.tree_util.tree_leaves(jax.jit(fn)(*args)), strict=True):
        assert g.shape == np.shape(e) and g.dtype == np.asarray(e).dtype
        np.testing.assert_allclose(g, np.asarray(e), rtol=2e-6, atol=1e-6)
    return ops


def rhs(y):  # an ODE right-hand side written element by element, no two alike
    return jnp.array([y[1] * y[2] - 0.5, jnp.sin(y[0]) + y[2], -y[0] / (1.0 + y[1] * y[1])])


def test_an_element_by_element_stack_keeps_no_reshape_per_element(plain):
    y = np.array([0.3, -1.25, 2.0], np.float32)
    ops = _lifted(plain, rhs, [y], fewer_reshapes=3)
    assert "Unsqueeze" not in ops and "Squeeze" not in ops, ops


def test_a_stack_in_a_loop_body_loses_its_reshapes_per_step(plain):
    def solve(y):
        return jax.lax.fori_loop(0, 6, lambda i, y: y + 0.01 * rhs(y), y)

    _lifted(plain, solve, [np.array([0.3, -1.25, 2.0], np.float32)], fewer_reshapes=3)


def test_reductions_over_the_leading_axis_keep_it(plain):
    def fn(a):  # two column-wise reductions and one over a vector, stacked as rows
        return jnp.stack([jnp.max(a, axis=0) - a[0], jnp.sum(a, axis=0), a[:, 1].sum() + a[1]])

    a = np.array([[0.5, -2.0, 3.0], [1.5, 0.25, -1.0], [-0.75, 4.0, 2.5]], np.float32)
    _lifted(plain, fn, [a], fewer_reshapes=2)  # the sum already keeps its axis


def test_a_lifted_value_read_outside_the_stack_is_squeezed_once(plain):
    def fn(y):  # y[0] * y[1] also leaves as a scalar output and feeds a Concat of vectors
        p = y[0] * y[1]
        v = jnp.stack([p, y[2] - p, y[1] + 1.0, jnp.cos(y[0])])
        return v, p, jnp.concatenate([y, p * y])

    y = np.array([0.7, -0.4, 1.9], np.float32)
    model = to_onnx(fn, [y])
    assert [o.name for o in model.graph.output] == [o.name for o in plain(fn, [y]).graph.output]
    _lifted(plain, fn, [y], fewer_reshapes=3)


def test_integer_indices_and_matrix_rows_lift_too(plain):
    def fn(a, x, k):  # a row chosen by a read index, a scalar from a row-vector product
        row = a[k[0] % 3]  # (an argmax here would be TabulateChoicesPass's: a table read)
        return jnp.stack([row @ x, x[0] * row[2], (k[1] * 3).astype(jnp.float32)])

    a = np.arange(9, dtype=np.float32).reshape(3, 3) / 7.0
    x = np.array([0.5, -1.0, 2.0], np.float32)
    _lifted(plain, fn, [a, x, np.array([4, 1], np.int32)], fewer_reshapes=2)


def test_a_single_read_kept_by_other_readers_is_left_alone(plain):
    def fn(y):  # y[0] feeds only a Concat: lifting would move the Squeeze, not remove one
        return jnp.concatenate([jnp.reshape(y[0] * 2.0, (1,)) * y, y[1:]])

    y = np.array([1.5, -0.5, 0.25], np.float32)
    assert op_counts(to_onnx(fn, [y])) == op_counts(plain(fn, [y]))


def _composed(plain, fn, args, *, fewer: int) -> dict[str, int]:
    """Without ComposeGathersPass the model has ``fewer`` more nodes; the same bits."""
    model, before = to_onnx(fn, args), plain(fn, args, without=ComposeGathersPass)
    ops, base = op_counts(model), op_counts(before)
    assert sum(base.values()) - sum(ops.values()) == fewer, (base, ops)
    got = _outputs(model, args)
    for g, w in zip(got, _outputs(before, args), strict=True):
        np.testing.assert_array_equal(g, w)
    for g, e in zip(got, jax.tree_util.tree_leaves(jax.jit(fn)(*args)), strict=True):
        np.testing.assert_allclose(g, np.asarray(e), rtol=2e-6, atol=1e-6)
    return ops


def test_a_cross_product_of_motion_vector_halves_reads_the_vector_itself(plain):
    def fn(m, u):  # angular and linear halves of 6-D motion vectors, crossed
        return jnp.cross(m[:, :3], u[:, 3:]), jnp.cross(m[:, 3:], u[:, :3])

    m = np.linspace(-1.0, 2.0, 12, dtype=np.float32).reshape(2, 6)
    u = np.linspace(0.5, -3.0, 12, dtype=np.float32).reshape(2, 6)
    ops = _composed(plain, fn, [m, u], fewer=4)
    assert "Slice" not in ops, ops


def test_reads_of_reads_and_unit_axes_on_read_indices_are_one_gather(plain):
    rows = np.array([2, 0, 3, -1])

    def fn(t):  # a table's rows by index, then two of them, one given a unit axis
        picked = t[rows]  # (the leading [None] goes anyway: Mul broadcasts so itself)
        return picked[jnp.array([3, 1])][:, None, :] * picked[jnp.array([0, -2])][None]

    t = np.arange(20, dtype=np.float32).reshape(5, 4) / 3.0
    ops = _composed(plain, fn, [t], fewer=2)
    assert ops.get("Gather") == 2 and "Unsqueeze" not in ops, ops


def test_a_read_on_another_axis_keeps_both_gathers(plain):
    def fn(t):  # a column of rows: the two reads are on different axes
        return t[np.array([1, 0])][:, np.array([2, 2, 0])]

    t = np.arange(12, dtype=np.float32).reshape(3, 4)
    _composed(plain, fn, [t], fewer=0)
