"""Which dtypes ONNX Runtime (CPU) has kernels for: one table for every plugin.

ONNX defines most ops for many types, but ONNX Runtime's CPU provider
implements only some of them. Rules never hard-code those gaps: they ask
:func:`has_kernel` (or declare ``rules.lowering(native_dtypes=...)`` with
:func:`kernel_dtypes`, so the core picks the op or the decomposition), and
:func:`kernel_dtype` names the exact wider type to compute in.

``KERNELS`` lists, per op type, the dtypes it runs in; an op not listed runs
in every dtype but bfloat16. The entries are the ones our cases exercise: add
an op when a rule needs it, with a case that fails without it.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)

_NUMERIC = frozenset(
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
    )
)
_FLOAT32 = frozenset({F32})
_FLOATS = frozenset({F32, F64})


def _without(*missing: Any) -> frozenset[np.dtype]:
    return _NUMERIC - {np.dtype(m) for m in missing}


KERNELS: dict[str, frozenset[np.dtype]] = {
    # selection and comparison: integer gaps
    "Where": _without(np.bool_, np.int16, np.uint16, np.uint64),
    "Max": _without(np.bool_, np.int16, np.uint16),
    "Min": _without(np.bool_, np.int16, np.uint16),
    "Less": _without(np.bool_),
    "LessOrEqual": _without(np.bool_),
    "Greater": _without(np.bool_),
    "GreaterOrEqual": _without(np.bool_),
    "Clip": _without(np.bool_, np.int16, np.uint16),
    "Pad": _without(np.int16, np.uint16),
    "CumSum": _without(np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64),
    # products
    "MatMul": frozenset(
        np.dtype(t)
        for t in (np.float16, np.float32, np.float64, np.int32, np.int64, np.uint32, np.uint64)
    ),
    "Gemm": frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64)),
    "Einsum": frozenset(
        np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int32, np.int64)
    ),
    "Conv": frozenset(np.dtype(t) for t in (np.float16, np.float32)),
    "ConvTranspose": frozenset(np.dtype(t) for t in (np.float16, np.float32)),
    # activations and normalisations: floating point only
    "Relu": _FLOATS,
    "Sigmoid": _FLOATS,
    "Softmax": _FLOATS,
    "LogSoftmax": _FLOAT32,
    "Softplus": _FLOAT32,
    "Softsign": _FLOAT32,
    "Elu": _FLOAT32,
    "Celu": _FLOAT32,
    "Selu": _FLOAT32,
    "LeakyRelu": _FLOAT32,
    "PRelu": _FLOAT32,
    "HardSigmoid": _FLOAT32,
    "HardSwish": _FLOAT32,
    "Mish": _FLOAT32,
    "Gelu": _FLOAT32,
    "Attention": _FLOAT32,
    "RotaryEmbedding": _FLOAT32,  # and float16; no float64 kernel
    "AveragePool": _FLOAT32,
    "MaxPool": _FLOATS,
}

# Exact stand-ins: integers widen by value (uint64 -> int64 keeps the bits, all
# Where and Max need), bool -> uint8, bfloat16 -> float32 (one rounding back, as
# XLA's CPU backend computes bfloat16).
_WIDER = {
    np.dtype(np.bool_): np.dtype(np.uint8),
    np.dtype(np.int16): np.dtype(np.int32),
    np.dtype(np.uint16): np.dtype(np.int32),
    np.dtype(np.uint64): np.dtype(np.int64),
    BFLOAT16: F32,
}


def has_kernel(op_type: str, dtype: Any) -> bool:
    """Whether ONNX Runtime's CPU provider runs ``op_type`` on operands of ``dtype``.

    Args:
        op_type: an ONNX op type (``"Where"``, ``"Gelu"`` ...).
        dtype: a NumPy or JAX dtype.

    Returns:
        False for bfloat16 and for the gaps the table lists; True otherwise.
    """
    dtype = np.dtype(dtype)
    if dtype == BFLOAT16:
        return False
    known = KERNELS.get(op_type)
    return known is None or dtype in known


def kernel_dtype(op_type: str, dtype: Any) -> np.dtype:
    """The dtype to compute ``op_type`` in for operands of ``dtype``.

    ``dtype`` itself where ONNX Runtime has the kernel; otherwise the exact
    wider stand-in (bool -> uint8, int16/uint16 -> int32, uint64 -> int64,
    bfloat16 -> float32) when that one has it; otherwise ``dtype`` (the
    caller decomposes).

    Example:
        ```python
        import numpy as np
        from jax2onnx.plugin import kernel_dtype

        assert kernel_dtype("Where", np.int16) == np.int32  # cast, select, cast back
        ```
    """
    dtype = np.dtype(dtype)
    if has_kernel(op_type, dtype):
        return dtype
    wide = _WIDER.get(dtype)
    return wide if wide is not None and has_kernel(op_type, wide) else dtype


def kernel_dtypes(*op_types: str) -> frozenset[np.dtype]:
    """The dtypes every one of ``op_types`` has kernels for (for ``native_dtypes=``).

    Example:
        ```python
        @family.lowering(gelu_p, native_dtypes=kernel_dtypes("Gelu"))  # float32 only
        def gelu(ctx, x, *, approximate):
            return ctx.op.Gelu(x, approximate="tanh" if approximate else "none")
        ```
    """
    result = _NUMERIC
    for op_type in op_types:
        result = result & KERNELS.get(op_type, _NUMERIC)
    return frozenset(result)
