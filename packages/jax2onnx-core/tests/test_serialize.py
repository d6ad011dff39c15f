"""Files are written with the weights streamed from their arrays, and read back whole.

Replacing a file is atomic: a reader sees the whole old model or the whole new one.
"""

from __future__ import annotations

import errno
import os
import sys
import threading

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
import pytest

from jax2onnx import to_onnx
from jax2onnx.conversion import serialize
from jax2onnx.conversion.serialize import STREAM_MIN_BYTES

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


# --- protobuf's 2 GiB limit (lowered here, so the tests allocate kilobytes) ---


@pytest.fixture
def small_limit(monkeypatch):
    """Make W's 32 KiB count as more than protobuf can hold."""
    monkeypatch.setattr(serialize, "PROTOBUF_LIMIT", 1024)
    assert W.nbytes > serialize.PROTOBUF_LIMIT


def test_one_file_above_the_limit_is_refused_before_anything_is_written(small_limit, tmp_path):
    existing = tmp_path / "m.onnx"
    existing.write_bytes(b"previous model")
    for path in (existing, tmp_path / "new" / "m.onnx"):
        with pytest.raises(ValueError) as raised:
            to_onnx(fn, [("B", 64)], return_mode="file", output_path=path, external_data=False)
        message = str(raised.value)
        assert "external_data=False" in message and "2 GiB" in message
        assert f"({serialize.weight_bytes(to_onnx(fn, [('B', 64)], return_mode='ir'))} bytes)" in (
            message
        )
        assert "external_data=True" in message and "leave it None" in message
    assert existing.read_bytes() == b"previous model"
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]  # no staging folder, no "new" folder


def test_web_export_above_the_limit_names_the_web_mode(small_limit, tmp_path):
    with pytest.raises(ValueError, match="export_mode='web'.*export_mode='standard'"):
        to_onnx(
            fn, [("B", 64)], return_mode="file", output_path=tmp_path / "m.onnx", export_mode="web"
        )
    assert os.listdir(tmp_path) == []


def test_above_the_limit_the_default_writes_external_data(small_limit, tmp_path):
    path = to_onnx(fn, [("B", 64)], return_mode="file", output_path=tmp_path / "m.onnx")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]
    loaded = onnx.load(path)
    np.testing.assert_array_equal(_arrays(loaded)[_name_of(loaded, W.shape)], W.view(np.uint8))


def test_a_proto_above_the_limit_is_returned(small_limit):
    """An in-memory ModelProto above 2 GiB is usable: ``onnx.save(proto, path,
    save_as_external_data=True)`` writes it (only its ``SerializeToString`` fails)."""
    proto = to_onnx(fn, [("B", 64)])
    assert _name_of(proto, W.shape)


# --- replacing an existing file ---------------------------------------------

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="renameat2(RENAME_EXCHANGE) is Linux only"
)


def _weights_model(scale: float, rows: int = 64):
    """An ``onnx_ir`` model with one streamed weight, told apart by ``scale``."""
    w = np.full((rows, 128), scale, dtype=np.float32)
    return to_onnx(lambda x: x @ w, [("B", rows)], return_mode="ir"), w


def _weight_of(model) -> np.ndarray:
    (tensor,) = [i for i in model.graph.initializer if len(i.dims) == 2]
    return onnx.numpy_helper.to_array(tensor)


def _spy_exchange(monkeypatch) -> list[bool]:
    """Record what every ``serialize._exchange`` call returned."""
    results, real = [], serialize._exchange

    def spy(first, second):
        results.append(real(first, second))
        return results[-1]

    monkeypatch.setattr(serialize, "_exchange", spy)
    return results


def _replace_and_check(tmp_path):
    """Save over an existing model; the old file is unlinked and nothing else is left."""
    path = tmp_path / "m.onnx"
    first, _ = _weights_model(1.0)
    second, w = _weights_model(2.0)
    serialize.save(first, path)
    old_bytes = path.read_bytes()
    with open(path, "rb") as old:  # keeps the previous model readable to this handle
        serialize.save(second, path)
        assert old.read() == old_bytes  # whole, untouched
        assert os.fstat(old.fileno()).st_nlink == 0  # and removed with the staging directory
    np.testing.assert_array_equal(_weight_of(onnx.load(path)), w)
    assert os.listdir(tmp_path) == ["m.onnx"]


@linux_only
def test_replacing_swaps_the_files_and_leaves_nothing_behind(monkeypatch, tmp_path):
    exchanged = _spy_exchange(monkeypatch)
    _replace_and_check(tmp_path)
    assert exchanged == [True]


def test_replacing_without_the_swap_renames_over_the_file(monkeypatch, tmp_path):
    monkeypatch.setattr(serialize, "_exchange", lambda first, second: False)  # "unsupported"
    _replace_and_check(tmp_path)


def _with_or_without_swap(monkeypatch, swap: bool) -> None:
    if swap and not sys.platform.startswith("linux"):
        pytest.skip("renameat2(RENAME_EXCHANGE) is Linux only")
    if not swap:
        monkeypatch.setattr(serialize, "_exchange", lambda first, second: False)


def _refused(*_args):
    raise PermissionError(errno.EACCES, "Permission denied")


@pytest.mark.parametrize("swap", [True, False], ids=["swap", "rename"])
def test_a_failed_write_or_move_leaves_the_old_file(monkeypatch, tmp_path, swap):
    _with_or_without_swap(monkeypatch, swap)
    path = tmp_path / "m.onnx"
    serialize.save(_weights_model(1.0)[0], path)
    before = path.read_bytes()
    real_write = serialize.write_streaming

    def disk_full(model, out):
        real_write(model, out)
        out.flush()  # the staged file holds the new model
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(serialize, "write_streaming", disk_full)
        with pytest.raises(OSError, match="No space left"):
            serialize.save(_weights_model(2.0)[0], path)
    assert path.read_bytes() == before
    with monkeypatch.context() as patch:
        patch.setattr(*((serialize, "_exchange") if swap else (os, "replace")), _refused)
        with pytest.raises(PermissionError):
            serialize.save(_weights_model(3.0)[0], path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.onnx"]


@pytest.mark.parametrize("swap", [True, False], ids=["swap", "rename"])
def test_external_data_replaces_both_files(monkeypatch, tmp_path, swap):
    _with_or_without_swap(monkeypatch, swap)
    exchanged = _spy_exchange(monkeypatch)
    path = tmp_path / "m.onnx"
    serialize.save(_weights_model(1.0)[0], path, external_data=True)
    second, w = _weights_model(2.0)
    serialize.save(second, path, external_data=True)
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]
    np.testing.assert_array_equal(_weight_of(onnx.load(path)), w)  # reads m.onnx.data
    assert (tmp_path / "m.onnx.data").read_bytes() == w.tobytes()  # its only tensor
    assert exchanged == ([True, True] if swap else [False, False])


@linux_only
def test_external_data_is_swapped_back_if_the_model_cannot_be_moved(monkeypatch, tmp_path):
    path = tmp_path / "m.onnx"
    serialize.save(_weights_model(1.0)[0], path, external_data=True)
    before = {name: (tmp_path / name).read_bytes() for name in ("m.onnx", "m.onnx.data")}
    real = serialize._put_in_place

    def model_refused(staged, target):
        if target == os.fspath(path):
            _refused()
        return real(staged, target)

    monkeypatch.setattr(serialize, "_put_in_place", model_refused)
    with pytest.raises(PermissionError):
        serialize.save(_weights_model(2.0)[0], path, external_data=True)
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]


@pytest.mark.parametrize("swap", [True, False], ids=["swap", "rename"])
def test_a_concurrent_reader_always_loads_a_whole_model(monkeypatch, tmp_path, swap):
    _with_or_without_swap(monkeypatch, swap)
    path = tmp_path / "m.onnx"
    versions = [_weights_model(float(scale), rows=2048) for scale in (1, 2)]  # 1 MiB each
    serialize.save(versions[0][0], path)
    done, loads, seen, errors = threading.Event(), [], set(), []

    def read():
        while not done.is_set():
            try:
                weight = _weight_of(onnx.load_from_string(path.read_bytes()))
                seen.add(float(weight[0, 0]))
                if not (weight == weight[0, 0]).all() or weight.shape != (2048, 128):
                    errors.append(f"a mixed or cut weight {weight.shape}")
            except Exception as error:  # a missing or half-written file
                errors.append(repr(error))
            loads.append(1)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(40):
            serialize.save(versions[i % 2][0], path)
    finally:
        done.set()
        reader.join()
    assert errors == []
    assert len(loads) >= 5 and seen <= {1.0, 2.0}
    assert os.listdir(tmp_path) == ["m.onnx"]
