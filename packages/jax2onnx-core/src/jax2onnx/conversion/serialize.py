"""Step 6: hand the model over as an ``onnx.ModelProto``, an ``onnx_ir.Model`` or a file.

Files are written atomically: staged in a temporary directory next to the
target, then moved into place by one rename, or a swap with the file being
replaced, per file (``_put_in_place``). A file is written without copying the
weights: the model is serialised without its large initializers, then each
one is appended as a further ``graph`` record holding one ``initializer``
whose ``raw_data`` is written straight from the array's buffer. Protocol
buffers merge repeated occurrences of a message field, so every reader
(``onnx.load``, ONNX Runtime) sees one graph with all initializers. Models
whose weights exceed protobuf's 2 GiB limit store them as external data next
to the model file instead.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
import tempfile
from typing import IO, Any

import numpy as np

from jax2onnx.values.ir import ir

PROTOBUF_LIMIT = 2**31 - 2**20  # leave room for the graph itself
STREAM_MIN_BYTES = 4096  # smaller initializers are serialised with the graph

_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_NAME, _TENSOR_RAW_DATA = 1, 2, 8, 9
_PACKED = frozenset(("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2"))


def weight_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value)


def check_single_file(model: ir.Model, why: str, fix: str) -> None:
    """Refuse a model whose weights cannot live inside one protobuf file.

    ``why`` names what asked for one file, ``fix`` what to pass instead. Called
    before anything is written: a protobuf message above 2 GiB can be written
    by our streaming writer, but neither ``onnx.load`` nor ONNX Runtime reads
    it back.
    """
    size = weight_bytes(model)
    if size > PROTOBUF_LIMIT:
        raise ValueError(
            f"{why} writes the weights inside the model file, but they take "
            f"{size / 2**30:.2f} GiB ({size} bytes), more than protobuf's 2 GiB limit, "
            f"so no protobuf reader (onnx.load, ONNX Runtime) could load the file; {fix}"
        )


def to_proto(model: ir.Model) -> Any:
    return ir.serde.serialize_model(model)


def save(
    model: ir.Model, path: str | os.PathLike[str], *, external_data: bool | None = None
) -> str:
    """Write ``model`` to ``path`` atomically; returns the path.

    Everything is written into a temporary directory next to ``path`` first;
    only a complete write is moved into place, one atomic rename per file, so
    a reader opening ``path`` sees the whole previous model or the whole new
    one, and a failure (disk full, no permission, an interrupt) leaves no
    partial file and the previous model at ``path`` as it was.

    With external data the data file is moved first, then the model: a
    reader that opens the model and then its data never pairs the new model
    with the old data. One that opened the old model just before a save and
    its data just after can still see the new data (two files cannot be
    swapped at once). If moving the model fails, the previous data file is
    swapped back where the platform allows the swap (see ``_put_in_place``);
    an interrupt between the two moves leaves the new data with the old model.

    ``external_data=False`` for weights above protobuf's 2 GiB raises
    ``ValueError`` before anything is written (see ``check_single_file``).
    """
    path = os.fspath(path)
    if external_data is None:
        external_data = weight_bytes(model) > PROTOBUF_LIMIT
    elif not external_data:  # refused before anything, even a directory, is created
        check_single_file(
            model,
            "external_data=False",
            "pass external_data=True, or leave it None (the default: a .data file "
            "only above 2 GiB)",
        )
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    name = os.path.basename(path)
    staging = tempfile.mkdtemp(prefix=".jax2onnx-", dir=directory)
    try:
        staged = os.path.join(staging, name)
        if external_data:
            ir.save(model, staged, external_data=f"{name}.data")  # written beside `staged`
            data_swapped = _put_in_place(f"{staged}.data", f"{path}.data")
            try:
                _put_in_place(staged, path)
            except OSError:  # the model was not moved: put the previous data file back
                if data_swapped:
                    _exchange(f"{staged}.data", f"{path}.data")
                raise
        else:
            with open(staged, "wb") as out:
                write_streaming(model, out)
            _put_in_place(staged, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # with the previous model, if swapped
    return path


def _put_in_place(staged: str, path: str) -> bool:
    """Atomically make ``staged`` the file at ``path``; True if the old file is now at ``staged``.

    An existing regular file is swapped with ``staged`` rather than renamed
    over: on ext4 (default mount option ``auto_da_alloc``) a rename that
    replaces a file first forces the new file's delayed-allocation blocks to
    be allocated and its data submitted for writing, which for 500 MB of
    weights costs a few hundred ms, while an exchange of two names does not.
    The swap is as atomic as the rename. Without it (no file at ``path``, not
    Linux, or a file system that cannot exchange) this is ``os.replace``.
    Neither syncs to disk, so neither promises the file survives a power cut
    (the swap gives up the partial protection of ext4's flush on replace).
    """
    try:
        swappable = stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        swappable = False
    if swappable and _exchange(staged, path):
        return True
    os.replace(staged, path)
    return False


def _exchange(first: str, second: str) -> bool:
    """Swap two existing names with Linux ``renameat2(RENAME_EXCHANGE)``; False if unsupported.

    Python's ``os`` module does not expose ``renameat2`` (glibc 2.28+ has it).
    A missing file also gives False (the caller's ``os.replace`` then renames
    or reports it); other errors are raised as ``OSError``.
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # imported on first use, not with jax2onnx

    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange):
        code = ctypes.get_errno()
        if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOENT):
            return False
        raise OSError(code, os.strerror(code), first, None, second)
    return True


def write_streaming(model: ir.Model, out: IO[bytes]) -> None:
    """Serialise ``model`` to ``out`` with large initializers written from their buffers."""
    initializers = model.graph.initializers
    streamed = [
        value
        for value in initializers.values()
        if value.const_value is not None
        and value.const_value.nbytes >= STREAM_MIN_BYTES
        and value.const_value.dtype.name not in _PACKED
    ]
    for value in streamed:
        del initializers[value.name]
    try:
        out.write(ir.serde.serialize_model(model).SerializeToString())
    finally:
        for value in streamed:
            initializers[value.name] = value
    for value in streamed:
        _write_initializer(out, value.name, value.const_value)


def _write_initializer(out: IO[bytes], name: str, tensor: Any) -> None:
    data = _raw(tensor)
    head = bytearray()
    for dim in tensor.shape:
        head += _key(_TENSOR_DIMS, 0) + _varint(int(dim))
    head += _key(_TENSOR_DATA_TYPE, 0) + _varint(int(tensor.dtype))
    encoded_name = name.encode("utf-8")
    head += _key(_TENSOR_NAME, 2) + _varint(len(encoded_name)) + encoded_name
    head += _key(_TENSOR_RAW_DATA, 2) + _varint(data.nbytes)
    tensor_size = len(head) + data.nbytes
    entry = _key(_GRAPH_INITIALIZER, 2) + _varint(tensor_size)
    out.write(_key(_MODEL_GRAPH, 2) + _varint(len(entry) + tensor_size))
    out.write(entry)
    out.write(head)
    out.write(data)


def _raw(tensor: Any) -> memoryview:
    """The tensor's little-endian bytes, without a copy when its array allows."""
    array = tensor.numpy()
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    array = np.asarray(array, order="C")
    try:
        return memoryview(array).cast("B")
    except (TypeError, ValueError):  # dtypes the buffer protocol does not know (bfloat16 ...)
        return memoryview(array.view(np.uint8)).cast("B")


def _key(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
