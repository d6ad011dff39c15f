"""Result codes (``passes/fusion/selects.py``): a solver's int32 code set by Wheres,
tested against constants and mapped through a table, in fewer nodes, the same values."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort

from jax2onnx import to_onnx


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})


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
