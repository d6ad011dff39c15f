"""Integer bit operations without ONNX's Bitwise ops (opsets 13-17): the plugin's helpers.

ONNX has BitwiseAnd/Or/Xor/Not only from opset 18. Below it an integer is taken apart
into a bool bit vector along a new last axis: one ``BitShift`` moves bit ``k`` to the top
of the carrier (``BitShift`` runs in ONNX Runtime on uint8, uint32 and uint64) and one
comparison reads it. Bool ``And``/``Or``/``Xor`` (ONNX since opset 7) combine bit vectors,
and one ``MatMul`` with the powers of two puts the value back together: the bits are
disjoint, so the sum is exact (in uint32 up to 32 bits, uint64 for 64). Node counts do not
depend on the bit width. At opset 13 ONNX Runtime's Add, Sub and Mul run on 32- and 64-bit
integers only, so the arithmetic here stays in those types.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_U8, _U32, _U64 = (np.dtype(t) for t in (np.uint8, np.uint32, np.uint64))
# per byte width: the type an integer is shifted in (ORT's BitShift kernels), and the
# 32/64-bit type its arithmetic and bit sums run in (ORT's Add/Sub/Mul/MatMul at opset 13)
CARRIER = {1: _U8, 2: _U32, 4: _U32, 8: _U64}
WORD = {1: _U32, 2: _U32, 4: _U32, 8: _U64}


def width(dtype: Any) -> int:
    """Bits of an integer dtype."""
    return 8 * np.dtype(dtype).itemsize


def zero_extend(ctx, x, dtype, to: Any):
    """The bit pattern of integer ``x`` (of ``dtype``) zero-extended into unsigned ``to``."""
    dtype, to = np.dtype(dtype), np.dtype(to)
    if dtype.kind == "i" and dtype.itemsize < to.itemsize:
        x = ctx.cast(x, f"u{dtype.itemsize}")  # a signed value would sign-extend
    return ctx.cast(x, to)


def _known(x) -> np.ndarray | None:
    """The value of ``x`` when it is known while converting (a NumPy value or a constant)."""
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x)
    return None if x.const_value is None else x.const_value.numpy()


def bit_vector(ctx, x, dtype, rotation: int = 0, column: bool = False):
    """Bool ``(..., w)`` for integer ``x`` of ``dtype`` (``w`` bits): element ``k`` is bit
    ``(k - rotation) mod w``, so a rotation left by ``rotation`` is free. ``column``: ``x``
    already has a trailing axis of size 1, which the bits replace. A known ``x`` gives a
    constant; otherwise (Unsqueeze,) BitShift and GreaterOrEqual."""
    w = width(dtype)
    source = (np.arange(w) - rotation) % w
    known = _known(x)
    if known is not None:
        pattern = known.astype(f"u{w // 8}").astype(np.uint64)
        pattern = pattern if column else pattern[..., None]
        return ctx.const((pattern >> source.astype(np.uint64)) & 1 == 1)
    carrier = CARRIER[w // 8]
    top = 8 * carrier.itemsize - 1
    u = ctx.cast(x, carrier)  # sign extension is harmless: only the low w bits are read
    if not column:
        u = ctx.op.Unsqueeze(u, ctx.i64([-1]))
    moved = ctx.op.BitShift(u, np.asarray(top - source, carrier), direction="LEFT")
    return ctx.op.GreaterOrEqual(moved, np.asarray(1 << top, carrier))


def weighted_sum(ctx, bits, weights, column: bool = False):
    """``sum_k bits[..., k] * weights[k]`` for a bool ``bits`` (..., w) by one MatMul, in
    uint32 (uint64 for w > 32); ``column`` keeps the summed axis with size 1."""
    acc = _U64 if len(weights) > 32 else _U32
    weights = np.asarray(weights, acc)
    return ctx.op.MatMul(ctx.cast(bits, acc), weights[:, None] if column else weights)


def from_bits(ctx, bits, dtype, column: bool = False):
    """The ``dtype`` integer whose bits are the bool vector ``bits`` (a MatMul with powers
    of two, then a Cast, which keeps the low bits); ``column`` as in ``weighted_sum``."""
    w = width(dtype)
    return ctx.cast(weighted_sum(ctx, bits, [1 << k for k in range(w)], column), dtype)


def logic(ctx, op: str, x, y, dtype):
    """``x op y`` for integers of ``dtype`` (``op`` one of ``And``, ``Or``, ``Xor``):
    bool ``op`` on the two bit vectors, reassembled."""
    combined = getattr(ctx.op, op)(bit_vector(ctx, x, dtype), bit_vector(ctx, y, dtype))
    return from_bits(ctx, combined, dtype)


def invert(ctx, x, dtype):
    """``~x`` as arithmetic: all ones minus ``x`` (``-1 - x``), which borrows nowhere; 8- and
    16-bit values in int32/uint32 (no narrower Sub kernel at opset 13) and cast back."""
    dtype = np.dtype(dtype)
    wide = np.dtype(f"{dtype.kind}{max(4, dtype.itemsize)}")
    ones = np.asarray(-1).astype(wide)
    return ctx.cast(ctx.op.Sub(ones, ctx.cast(x, wide)), dtype)
