"""Which dtypes ONNX Runtime (CPU) has kernels for: one table for every plugin.

ONNX defines most ops for many types, but ONNX Runtime's CPU provider
implements only some of them. Rules never hard-code those gaps: they ask
:func:`has_kernel` (or declare ``rules.lowering(native_dtypes=...)`` with
:func:`kernel_dtypes`, so the core picks the op or the decomposition), and
:func:`kernel_dtype` names the exact wider type to compute in.

``KERNELS`` lists, per op type, the dtypes it runs in; an op not listed runs
in every dtype but the half-precision floats. A kernel that computes in a
narrower type does not count: ONNX Runtime registers ``Shrink`` for every
numeric type but computes it in float32, so only the types float32 holds
exactly are listed. The entries are the ones our cases and tests exercise:
add an op when a rule needs it, with a case or test that fails without it.

Half precision is different: ONNX Runtime's CPU provider has bfloat16 and
float16 kernels for a few ops only (``HALF_KERNELS``, read from its kernel
registry). Rules still emit bfloat16 and float16 ops wherever a float32 kernel
exists (:func:`has_kernel` says so), which keeps the graph native for runtimes
that have the kernels; after the lowering, the precision step
(:mod:`jax2onnx.passes.precision`) computes each half-precision op without a
CPU kernel in float32 between Casts. :func:`native_kernel` is the exact table
that step reads.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
F16 = np.dtype(np.float16)

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
    # registered for every numeric type but computed in float32 (ONNX Runtime 1.32):
    # a float64 1 + 2**-26 loses its last bits, int32 2**31 - 1 overflows
    # (tests/test_kernels.py probes each type)
    "Shrink": frozenset(np.dtype(t) for t in (np.float32, np.int8, np.int16, np.uint8, np.uint16)),
}

# ONNX Runtime's CPU kernels for the half-precision floats: op -> the first opset
# with one (the registry's ranges are contiguous from there on). Read from
# onnxruntime.capi._pybind_state.get_all_opkernel_def() of onnxruntime 1.32;
# tests/test_precision.py compares this table with the installed ONNX Runtime.
_HALF_SHARED = {
    "Cast": 6, "Concat": 4, "ConstantOfShape": 9, "Compress": 9, "Flatten": 1,
    "Gather": 1, "GatherElements": 11, "GatherND": 11, "Identity": 1, "If": 1,
    "IsInf": 20, "LayerNormalization": 1, "Loop": 1, "RandomNormalLike": 1,
    "RandomUniformLike": 1, "Reshape": 1, "ReverseSequence": 10, "Scan": 8,
    "ScatterElements": 11, "ScatterND": 11, "Shape": 1, "Sign": 9,
    "Slice": 1, "Split": 2, "Squeeze": 1, "TensorScatter": 24, "Transpose": 1,
    "Unsqueeze": 1, "BitCast": 26,
}  # fmt: skip
HALF_KERNELS: dict[np.dtype, dict[str, int]] = {
    BFLOAT16: {**_HALF_SHARED, "IsNaN": 20, "Pad": 21},
    F16: {
        **_HALF_SHARED, "IsNaN": 9, "Attention": 23, "Clip": 12, "Expand": 8, "Max": 12,
        "Min": 12, "Mod": 10, "RMSNormalization": 23, "RotaryEmbedding": 23, "Round": 11,
        "Shrink": 9,
    },
}  # fmt: skip
# ONNX Runtime also registers a bfloat16 Shrink, but ONNX's Shrink schema has no
# bfloat16 (opsets 9-26): such a model is invalid, so the precision step widens it
HALF = frozenset(HALF_KERNELS)
# half-precision kernels that exist for one attribute value only: ONNX Runtime registers
# ScatterND/ScatterElements for bfloat16 and float16 but refuses a reduction on them
_HALF_ONLY_WITH = {"ScatterND": ("reduction", "none"), "ScatterElements": ("reduction", "none")}
DEFAULT_OPSET = 23

# Exact stand-ins: integers widen by value (uint64 -> int64 keeps the bits, all
# Where and Max need), bool -> uint8. (bfloat16 and float16 widen after the
# lowering, in the precision step.)
_WIDER = {
    np.dtype(np.bool_): np.dtype(np.uint8),
    np.dtype(np.int16): np.dtype(np.int32),
    np.dtype(np.uint16): np.dtype(np.int32),
    np.dtype(np.uint64): np.dtype(np.int64),
}


def native_kernel(
    op_type: str, dtype: Any, opset: int | None = None, attributes: Any = None
) -> bool:
    """Whether ONNX Runtime's CPU provider has a kernel of its own for ``op_type`` on ``dtype``.

    The exact table: False for a bfloat16 or float16 op that runs only because
    the precision step computes it in float32. ``opset`` is the model's (default 23); ``attributes``
    (a mapping of the node's attribute values) matter for a few ops
    (``ScatterND`` with a ``reduction`` has no half-precision kernel).
    """
    dtype = np.dtype(dtype)
    half = HALF_KERNELS.get(dtype)
    if half is not None:
        first = half.get(op_type)
        only = _HALF_ONLY_WITH.get(op_type)
        if only is not None and (attributes or {}).get(only[0], only[1]) != only[1]:
            return False
        return first is not None and (opset or DEFAULT_OPSET) >= first
    known = KERNELS.get(op_type)
    return known is None or dtype in known


def has_kernel(op_type: str, dtype: Any) -> bool:
    """Whether a rule may emit ``op_type`` on operands of ``dtype`` and have it run.

    Args:
        op_type: an ONNX op type (``"Where"``, ``"Gelu"`` ...).
        dtype: a NumPy or JAX dtype.

    Returns:
        For bfloat16 and float16: whether the op has a float32 kernel (the
        precision step computes it in float32, unless
        ``native_half_precision=True`` keeps the op for a runtime with
        half-precision kernels). Otherwise: False for the gaps
        ``KERNELS`` lists, True for everything else.
    """
    dtype = np.dtype(dtype)
    if dtype in HALF:
        return native_kernel(op_type, dtype) or native_kernel(op_type, F32)
    known = KERNELS.get(op_type)
    return known is None or dtype in known


def kernel_dtype(op_type: str, dtype: Any) -> np.dtype:
    """The dtype to compute ``op_type`` in for operands of ``dtype``.

    ``dtype`` itself where the op can run on it (`has_kernel`; for bfloat16
    and float16 that includes ops computed in float32 after the lowering);
    otherwise the exact wider stand-in (bool -> uint8, int16/uint16 -> int32,
    uint64 -> int64) when that one has it; otherwise ``dtype`` (the caller
    decomposes).

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
    """The dtypes every one of ``op_types`` can run on (for ``native_dtypes=``).

    bfloat16 and float16 are in the set wherever float32 is (see `has_kernel`).

    Example:
        ```python
        @family.lowering(gelu_p, native_dtypes=kernel_dtypes("Gelu"))  # float32 and halves
        def gelu(ctx, x, *, approximate):
            return ctx.op.Gelu(x, approximate="tanh" if approximate else "none")
        ```
    """
    result = _NUMERIC
    for op_type in op_types:
        result = result & KERNELS.get(op_type, _NUMERIC)
    return with_halves(result)


def with_halves(dtypes: Any) -> frozenset[np.dtype]:
    """``dtypes`` with bfloat16 and float16 added when float32 is among them."""
    result = frozenset(np.dtype(d) for d in dtypes)
    return result | HALF if F32 in result else result
