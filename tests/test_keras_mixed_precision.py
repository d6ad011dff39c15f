"""A Keras 3 model under the ``mixed_bfloat16`` policy, exported as Keras users do.

``model.export(path, format="onnx")`` on the JAX backend calls jax2onnx's
``to_onnx`` (keras/src/export/onnx.py: ``_export_onnx_jax``). The policy
computes in bfloat16 with float32 variables; the file must load in ONNX
Runtime CPU and match the model at bfloat16 tolerances. ``keras_model()``
and ``keras_function()`` are also used by ``benchmarks/precision.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import pytest  # noqa: E402

from jax2onnx import to_onnx  # noqa: E402
from jax2onnx.plugin import run_session  # noqa: E402

keras = pytest.importorskip("keras", reason="Keras 3 is in the test extra (hatch_build.py)")

SEQ, FEATURES = 8, 16
BF16 = np.dtype(ml_dtypes.bfloat16)


def keras_model():
    """Dense -> pre-norm causal self-attention -> pre-norm GELU MLP -> Dense, mixed_bfloat16."""
    previous = keras.mixed_precision.dtype_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        keras.utils.set_random_seed(0)
        inputs = keras.Input((SEQ, FEATURES))
        x = keras.layers.Dense(32)(inputs)
        h = keras.layers.LayerNormalization()(x)
        x = x + keras.layers.MultiHeadAttention(4, 8)(h, h, use_causal_mask=True)
        h = keras.layers.LayerNormalization()(x)
        x = x + keras.layers.Dense(32)(keras.layers.Dense(64, activation="gelu")(h))
        return keras.Model(inputs, keras.layers.Dense(10)(x))
    finally:
        keras.mixed_precision.set_global_policy(previous)


def keras_function(model):
    """The function and inputs Keras's ONNX export gives ``to_onnx`` (a dynamic batch)."""

    def predict_fn(x):
        return model(x, training=False)

    return predict_fn, [jax.ShapeDtypeStruct(("batch", SEQ, FEATURES), np.float32)]


def inputs(batch: int = 3) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((batch, SEQ, FEATURES)).astype(np.float32)


def casts(proto: onnx.ModelProto) -> int:
    return sum(node.op_type == "Cast" for node in proto.graph.node)


@pytest.fixture(scope="module")
def model():
    model = keras_model()
    model(inputs(1))  # Keras exports only a model that has been called
    return model


def test_policy_is_restored(model):
    assert keras.mixed_precision.dtype_policy().name == "float32"
    assert model.layers[1].dtype_policy.name == "mixed_bfloat16"
    assert all(w.dtype == "float32" for w in model.weights)


def test_model_export_runs_in_onnxruntime(model, tmp_path):
    path = tmp_path / "model.onnx"
    model.export(str(path), format="onnx", verbose=False)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = inputs(batch)
        want = np.asarray(model(x))
        (got,) = run_session(session, {session.get_inputs()[0].name: x})
        assert got.dtype == want.dtype == BF16
        assert got.shape == want.shape == (batch, SEQ, 10)
        # Outputs up to about 3.3, where a bfloat16 step is 1.6e-2: the absolute
        # tolerance is 1e-2 of their scale. JAX itself is that far apart: jax.jit of
        # the same call differs from model(x) by up to 1.8e-2 here, as much as ONNX
        # Runtime does (1.6e-2; with a batch of 16, 3.1e-2 for all three pairs).
        got, want = got.astype(np.float32), want.astype(np.float32)
        scale = float(np.max(np.abs(want)))
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=1e-2 * scale)
    # the float32 variables are stored once, as float32 (Keras casts them in the graph);
    # constant ones (zero biases, unit scales) may fold away
    stored = sum(onnx.numpy_helper.to_array(i).nbytes for i in proto.graph.initializer)
    weights = [np.asarray(w.value) for w in model.weights]
    varied = sum(w.nbytes for w in weights if np.unique(w).size > 1)
    assert varied <= stored <= sum(w.nbytes for w in weights) + 1024, (stored, varied)


def test_native_half_precision_has_fewer_casts(model):
    fn, specs = keras_function(model)
    native = to_onnx(fn, specs, native_half_precision=True)
    default = to_onnx(fn, specs)
    assert casts(native) < casts(default), (casts(native), casts(default))
    kinds = {node.op_type for node in native.graph.node}
    assert {"MatMul", "Attention", "Gelu"} <= kinds
