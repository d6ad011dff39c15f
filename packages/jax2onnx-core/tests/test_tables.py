"""TabulateChoicesPass (``passes/tables.py``): what a graph computes from one small index
alone (a pivot's row permutation) is one Gather of a table made at conversion."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort

from jax2onnx import to_onnx
from jax2onnx.passes import TabulateChoicesPass
from jax2onnx_testkit import passes_off


def pivoted(a, keep):
    """Each step moves the row of the largest first entry to the top, as partial
    pivoting does: the permutation is built from the ArgMax by comparisons and Wheres."""

    def step(i, a):
        rows = jnp.arange(a.shape[0])
        p = jnp.argmax(jnp.abs(a[:, 0]), keepdims=keep)
        perm = jnp.where(rows == p, 0, rows)
        perm = jnp.where(rows == 0, p, perm)
        swapped = a[perm]
        return jnp.roll(swapped, 1, axis=1) * 0.5 + jnp.sin(a)

    return jax.lax.fori_loop(0, 3, step, a)


def _body_ops(model: onnx.ModelProto) -> list[str]:
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    return [n.op_type for n in loop.attribute[0].g.node]


def test_a_permutation_made_from_a_pivot_index_is_read_from_a_table():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 3)).astype(np.float32)
    for keep in (False, True):  # a scalar index, and a one-element one
        fn = lambda a, keep=keep: pivoted(a, keep)  # noqa: E731
        model = to_onnx(fn, [a])
        onnx.checker.check_model(model, full_check=True)
        with passes_off(TabulateChoicesPass):
            plain = to_onnx(fn, [a])
        ops, before = _body_ops(model), _body_ops(plain)
        # the comparisons with arange and the Wheres between index vectors: gone
        assert "Equal" not in ops and ops.count("Where") < before.count("Where"), (ops, before)
        assert len(ops) < len(before), (ops, before)
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        for x in (a, a[::-1] * 3.0, np.where(a > 0, a, np.nan).astype(np.float32)):
            x = np.ascontiguousarray(x)
            (got,) = session.run(None, {session.get_inputs()[0].name: x})
            np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-6, atol=1e-6)
