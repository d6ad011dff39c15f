"""NaN and finiteness tests (``passes/fusion/finite.py``): fewer nodes, the same results.

Every case runs on inputs with NaN, +-inf, both infinities in one reduction (whose
plain sum would be NaN), finite values and an empty axis, and compares with JAX
exactly (booleans, and maxima and minima with their NaNs).
"""

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from jax2onnx import to_onnx
from jax2onnx_testkit import op_counts

INF, NAN = np.inf, np.nan
INPUTS = [
    np.array([[1.0, INF, 2.0], [0.0, 1.0, -2.0]]),
    np.array([[INF, -INF, 1.0], [1.0, 1.0, 1.0]]),
    np.array([[NAN, 0.0, 0.0], [-0.0, 3.0, 6.0e4]]),
    np.ones((2, 3)),
]

CASES = {  # fn, the op counts it converts to
    "any_not_finite": (lambda x: jnp.any(~jnp.isfinite(x)), {"Sub": 1, "ReduceSum": 1, "IsNaN": 1}),
    "all_finite_rows": (
        lambda x: jnp.all(jnp.isfinite(x), axis=1),
        {"Sub": 1, "ReduceSum": 1, "Equal": 1},
    ),
    "not_finite": (lambda x: ~jnp.isfinite(x), {"Sub": 1, "IsNaN": 1}),
    "is_nan": (lambda x: jnp.isnan(x), {"IsNaN": 1}),
    "any_nan_columns": (lambda x: jnp.any(jnp.isnan(x), axis=0), {"IsNaN": 1, "Cast": 0}),
    # JAX's max and min propagate NaN (no empty reduction: JAX refuses those)
    "max_abs": (lambda x: jnp.max(jnp.abs(x)), {"ReduceSum": 1, "IsNaN": 1}),
    "min_sqrt_rows": (lambda x: jnp.min(jnp.sqrt(x), axis=1), {"ReduceSum": 1, "IsNaN": 1}),
    "max_signed": (lambda x: jnp.max(x, axis=0), {"ReduceSum": 0, "IsNaN": 1}),  # may hold -inf
    # abs of a magnitude is the magnitude; of a sqrt it stays (sqrt(-0) is -0: 1/-0 is -inf)
    "max_abs_scaled_error": (
        lambda x: jnp.max(jnp.abs(jnp.abs(x) / (1e-3 + 1e-2 * jnp.abs(x))), axis=1),
        {"Abs": 1, "ReduceSum": 1},
    ),
    "abs_of_sqrt": (lambda x: 1 / jnp.abs(jnp.sqrt(x)), {"Abs": 1}),
    "abs_of_a_dot_product": (lambda x: 1 / jnp.abs(x[0] @ x[0]), {"Abs": 0}),
}


def _check(model, fn, inputs):
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in inputs:
        got = session.run(None, {session.get_inputs()[0].name: x})[0]
        np.testing.assert_array_equal(got, np.asarray(fn(x)))  # NaN where JAX has NaN


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_nan_and_finite_tests_are_short_and_exact(name, dtype):
    fn, ops = CASES[name]
    inputs = [x.astype(dtype) for x in INPUTS]
    model = to_onnx(fn, [inputs[0]])
    counts = op_counts(model)
    assert all(counts.get(op, 0) == n for op, n in ops.items()) and "Not" not in counts, counts
    _check(model, fn, inputs)
    if not name.startswith(("max", "min")):
        _check(to_onnx(fn, [np.zeros((2, 0), dtype)]), fn, [np.zeros((2, 0), dtype)])


def test_before_opset_18_the_reductions_stay_and_agree():
    fn = CASES["any_not_finite"][0]
    model = to_onnx(fn, [INPUTS[0].astype(np.float32)], opset=17)
    assert "ReduceMax" in op_counts(model)
    _check(model, fn, [x.astype(np.float32) for x in INPUTS])


def test_abs_of_a_carried_sum_of_squares_goes():
    def fn(x):  # CG's r.r: carried from one step to the next, |r.r| is r.r
        def cond(carry):
            _, rr, k = carry
            return (rr > 1e-3) & (k < 20)

        def body(carry):
            r, rr, k = carry
            r = r * 0.5 - jnp.abs(rr) * 1e-3
            return r, r @ r, k + 1

        return jax.lax.while_loop(cond, body, (x, x @ x, 0))[1]

    model = to_onnx(fn, [("B",)])
    assert op_counts(model).get("Abs", 0) == 0, op_counts(model)
    inputs = [np.array(v, np.float32) for v in ([1.0, -2.0, 0.5], [0.25, NAN], [INF, 1.0])]
    _check(model, fn, inputs)
