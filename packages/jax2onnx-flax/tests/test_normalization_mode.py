"""``to_onnx(normalization_mode=...)``: native normalisation ops or the layer's own arithmetic.

Every mode must compute the layer's numbers; the modes differ only in the
graph. The case format has no conversion options, so these checks are here.
"""

from __future__ import annotations

import jax
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from jax2onnx import to_onnx
from jax2onnx_flax.norm import norm_module

nnx = pytest.importorskip("flax.nnx")

LAYERS = [
    ("LayerNorm", norm_module("LayerNorm", 6), (4, 6), "LayerNormalization", 17),
    ("RMSNorm", norm_module("RMSNorm", 6), (4, 6), "RMSNormalization", 23),
    ("GroupNorm", norm_module("GroupNorm", 6, num_groups=3), (2, 5, 6), "GroupNormalization", 21),
    ("standardize", lambda: lambda x: jax.nn.standardize(x), (4, 6), "LayerNormalization", 17),
]


def _ops(model) -> list[str]:
    return [n.op_type for n in model.graph.node]


def _check(model, fn, x):
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, np.asarray(fn(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["auto", "prefer_native", "force_decomposed"])
@pytest.mark.parametrize(
    ("name", "make", "shape", "op", "since"), LAYERS, ids=[x[0] for x in LAYERS]
)
def test_mode_picks_the_form_and_keeps_the_numbers(mode, name, make, shape, op, since):
    fn = make()
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    model = to_onnx(fn, [x.shape], normalization_mode=mode)
    native = op in _ops(model)
    assert native == (mode != "force_decomposed"), _ops(model)
    _check(model, fn, x)


@pytest.mark.parametrize(
    ("name", "make", "shape", "op", "since"), LAYERS, ids=[x[0] for x in LAYERS]
)
def test_prefer_native_below_the_ops_opset_decomposes(name, make, shape, op, since):
    fn = make()
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    model = to_onnx(fn, [x.shape], normalization_mode="prefer_native", opset=since - 1)
    assert op not in _ops(model)
    _check(model, fn, x)
