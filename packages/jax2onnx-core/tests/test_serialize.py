"""Files are written with the weights streamed from their arrays, and read back whole."""

from __future__ import annotations

import os

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort

from jax2onnx import to_onnx
from jax2onnx.serialize import STREAM_MIN_BYTES

RNG = np.random.default_rng(0)
W = RNG.standard_normal((64, 128)).astype(np.float32)
V = RNG.standard_normal((128, 16)).astype(np.float32)
HALF = RNG.standard_normal((16, 8)).astype(ml_dtypes.bfloat16)
SMALL = np.linspace(-1, 1, 8, dtype=np.float32)


def fn(x):
    hidden = jnp.tanh(x @ W) @ V
    return (hidden.astype(jnp.bfloat16) @ HALF).astype(jnp.float32) + SMALL


def _arrays(model):
    return {i.name: onnx.numpy_helper.to_array(i).view(np.uint8) for i in model.graph.initializer}


def test_file_holds_what_the_proto_holds(tmp_path):
    path = to_onnx(fn, [("B", 64)], return_mode="file", output_path=tmp_path / "m.onnx")
    loaded = onnx.load(path)
    proto = to_onnx(fn, [("B", 64)])
    onnx.checker.check_model(loaded, full_check=True)
    assert W.nbytes >= STREAM_MIN_BYTES > SMALL.nbytes
    got, want = _arrays(loaded), _arrays(proto)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    assert [n.op_type for n in loaded.graph.node] == [n.op_type for n in proto.graph.node]
    assert os.listdir(tmp_path) == ["m.onnx"]


def test_streamed_file_runs_in_onnx_runtime(tmp_path):
    path = to_onnx(fn, [("B", 64)], return_mode="file", output_path=tmp_path / "m.onnx")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(session.run(None, {"in_0": x})[0], fn(x), rtol=2e-2, atol=2e-2)


def test_external_data_still_available(tmp_path):
    path = to_onnx(
        fn,
        [("B", 64)],
        return_mode="file",
        output_path=tmp_path / "m.onnx",
        external_data=True,
    )
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]
    loaded = onnx.load(path)
    np.testing.assert_array_equal(_arrays(loaded)[_name_of(loaded, W.shape)], W.view(np.uint8))


def _name_of(model, shape):
    return next(i.name for i in model.graph.initializer if tuple(i.dims) == shape)
