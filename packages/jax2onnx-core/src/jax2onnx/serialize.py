"""Step 6: hand the model over as an ``onnx.ModelProto``, an ``onnx_ir.Model`` or a file.

Files are written atomically (a temporary file renamed into place). Models
whose weights exceed protobuf's 2 GiB limit store them as external data next
to the model file.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import onnx_ir as ir

PROTOBUF_LIMIT = 2**31 - 2**20  # leave room for the graph itself


def weight_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value)


def to_proto(model: ir.Model) -> Any:
    return ir.serde.serialize_model(model)


def save(
    model: ir.Model, path: str | os.PathLike[str], *, external_data: bool | None = None
) -> str:
    """Write ``model`` to ``path`` atomically; returns the path."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    if external_data is None:
        external_data = weight_bytes(model) > PROTOBUF_LIMIT
    fd, tmp = tempfile.mkstemp(prefix=".jax2onnx-", suffix=".onnx", dir=directory)
    os.close(fd)
    try:
        if external_data:
            data_name = os.path.basename(path) + ".data"
            ir.save(model, tmp, external_data=data_name)
            # the data file was written next to tmp under its final name
        else:
            ir.save(model, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
