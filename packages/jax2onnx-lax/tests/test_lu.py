"""LU's graph: swaps as gathers, the last row's step only a pivot, lu_solve reading lu's
permutation, and the pivot search passing over NaN entries."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import onnx
import onnxruntime as ort

from jax2onnx import to_onnx

_CPU = ["CPUExecutionProvider"]


def _run(model, *args):
    session = ort.InferenceSession(model.SerializeToString(), providers=_CPU)
    return session.run(None, {i.name: a for i, a in zip(session.get_inputs(), args)})


def _ops(model):
    return [n.op_type for n in model.graph.node]


def test_lu_solve_of_lu_factor_reads_the_permutation_lu_computed():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)
    replayed = lambda a, b: jsl.lu_solve(  # noqa: E731 - the pivots through an integer op
        (jsl.lu_factor(a)[0], jsl.lu_factor(a)[1] + jnp.zeros((), np.int32)), b
    )
    direct = lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b)  # noqa: E731
    models = [to_onnx(fn, [a.shape, b.shape]) for fn in (direct, replayed)]
    for model, fn in zip(models, (direct, replayed)):
        onnx.checker.check_model(model, full_check=True)
        np.testing.assert_allclose(_run(model, a, b)[0], fn(a, b), rtol=1e-5, atol=1e-5)
    # the replay swaps entries of an arange once per pivot: Wheres and reads each
    direct_ops, replayed_ops = _ops(models[0]), _ops(models[1])
    assert direct_ops.count("Where") + 4 <= replayed_ops.count("Where")
    assert len(direct_ops) + 8 <= len(replayed_ops)


def test_the_pivot_passes_over_nan_and_the_last_row_only_records_its_pivot():
    a = np.array([[1.0, 2, 3], [np.nan, 1, 1], [5, 1, 2]], np.float32)
    model = to_onnx(jax.lax.linalg.lu, [a.shape])
    onnx.checker.check_model(model, full_check=True)
    assert _ops(model).count("ArgMax") == 2  # steps 0 and 1; row 2 is its own pivot
    factors, pivots, permutation = _run(model, a)
    # column 0 pivots on the 5 (not the NaN); row 1 is all NaN after it, so column 1 on row 2
    assert pivots.tolist() == [2, 2, 2] and permutation.tolist() == [2, 0, 1]
    b = np.array([[2.0, 1, 0], [4, 1, 1], [1, 3, 2]], np.float32)
    got = _run(model, b)
    for g, w in zip(got, jax.lax.linalg.lu(b)):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
