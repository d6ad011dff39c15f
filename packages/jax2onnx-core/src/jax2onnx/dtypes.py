"""Mapping between NumPy/JAX dtypes and ONNX data types.

onnx_ir is imported on first use: importing it pulls in sympy, which
``import jax2onnx`` must not pay for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx_ir as ir


def onnx_dtype(dtype) -> ir.DataType:
    """The ONNX data type of a NumPy or JAX dtype (bfloat16 and float8 included).

    Returns:
        The ``onnx_ir.DataType``, e.g. for ``ctx.op.Cast(x, to=onnx_dtype(np.int64))``.

    Raises:
        TypeError: the dtype has no ONNX equivalent.
    """
    import onnx_ir as ir

    dtype = np.dtype(dtype)
    try:
        return ir.DataType.from_numpy(dtype)
    except (TypeError, ValueError) as err:
        raise TypeError(f"dtype {dtype} has no ONNX equivalent") from err


def exact_cast(array: np.ndarray, dtype: Any) -> np.ndarray | None:
    """``array`` cast to ``dtype`` at conversion time, when NumPy's result is ONNX Runtime's.

    ``None`` where the runtime defines the result itself: float -> integer
    (NaN and out-of-range values) and anything -> bfloat16 (rounding mode).
    """
    dtype = np.dtype(dtype)
    source = array.dtype
    if dtype.kind not in "biuf" or source.kind not in "biuf" or dtype.name == "bfloat16":
        return None
    if source.name == "bfloat16" or (source.kind == "f" and dtype.kind != "f"):
        return None
    return array.astype(dtype)
