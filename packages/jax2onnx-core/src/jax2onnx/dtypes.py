"""Mapping between NumPy/JAX dtypes and ONNX data types.

onnx_ir is imported on first use: importing it pulls in sympy, which
``import jax2onnx`` must not pay for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx_ir as ir


def onnx_dtype(dtype) -> ir.DataType:
    """The ONNX data type of a NumPy or JAX dtype (bfloat16 and float8 included)."""
    import onnx_ir as ir

    dtype = np.dtype(dtype)
    try:
        return ir.DataType.from_numpy(dtype)
    except (TypeError, ValueError) as err:
        raise TypeError(f"dtype {dtype} has no ONNX equivalent") from err
