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


# Ops whose output has the dtype of their first input: the builder records it,
# so later Python-number operands get the right dtype.
_SAME_DTYPE = frozenset(
    "Abs Acos Acosh Add Asin Asinh Atan Atanh AveragePool BatchNormalization BitShift "
    "BitwiseAnd BitwiseNot BitwiseOr BitwiseXor Ceil Celu Clip "
    "Concat Conv ConvTranspose Cos Cosh CumSum DepthToSpace Div Dropout Einsum Elu Erf Exp Expand "
    "Flatten Floor Gather GatherElements GatherND Gelu Gemm GlobalAveragePool HardSigmoid "
    "HardSwish Identity InstanceNormalization LayerNormalization LeakyRelu Log LogSoftmax MatMul "
    "Max MaxPool Mean Min Mish Mod Mul Neg Pad Pow Range Reciprocal ReduceL1 ReduceL2 "
    "ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu "
    "Reshape Resize "
    "Round ScatterElements ScatterND Selu Sigmoid Sign Sin Sinh Slice Softmax Softplus Softsign "
    "SpaceToDepth Sqrt Squeeze Sub Sum Tan Tanh Tile Transpose Trilu Unsqueeze".split()
)
_BOOL_OUT = frozenset(
    "Equal Greater GreaterOrEqual Less LessOrEqual Not And Or Xor IsNaN IsInf".split()
)


def result_dtype(op_type: str, domain: str, inputs: Any, attributes: Any) -> Any:
    """The dtype of a new node's first output when its op and inputs tell it (else None)."""
    import onnx_ir as ir

    if domain not in ("", "ai.onnx"):
        return None
    if op_type == "Cast":
        return ir.DataType(attributes["to"])
    if op_type in _BOOL_OUT:
        return ir.DataType.BOOL
    if op_type in ("Shape", "Size"):
        return ir.DataType.INT64
    if op_type in ("MatMulInteger", "ConvInteger"):
        return ir.DataType.INT32
    if op_type == "Where" and len(inputs) > 1 and inputs[1] is not None:
        return inputs[1].dtype
    if op_type in _SAME_DTYPE and inputs and inputs[0] is not None:
        return inputs[0].dtype
    return None
