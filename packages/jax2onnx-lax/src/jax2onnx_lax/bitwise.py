"""Bitwise logic, shifts, population count, count-leading-zeros and mulhi.

ONNX's BitShift runs in ONNX Runtime only on uint8, uint32 and uint64, so shifts,
popcount and clz work on the operand's bit pattern as an unsigned integer
(``_UNSIGNED``: 16-bit values zero-extended into uint32), then cast back; casts
between integer types keep the low bits, so the round trip is exact.

BitwiseAnd/Or/Xor/Not exist from opset 18. Below it, integer and/or/xor/not,
shift_right_arithmetic, population_count and clz have second lowerings (``*_opset13``)
built from BitShift, comparisons, bool logic and 32/64-bit arithmetic (``_intbits``).
"""

from __future__ import annotations

import functools

import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case
from jax2onnx_lax import _intbits
from jax2onnx_lax._casedata import INTS, all_pairs, edges, int_cases, x64

family = Family("lax")

_UNSIGNED = {1: (np.uint8,), 2: (np.uint16, np.uint32), 4: (np.uint32,), 8: (np.uint64,)}


def _logic(bool_op: str, bitwise: bool):
    def lower(ctx, *xs):
        dtype = np.dtype(ctx.avals_in[0].dtype)
        if dtype == np.bool_:
            return getattr(ctx.op, bool_op)(*xs)
        if bitwise:
            return getattr(ctx.op, f"Bitwise{bool_op}")(*xs)
        if bool_op == "Not":
            return _intbits.invert(ctx, xs[0], dtype)
        return _intbits.logic(ctx, bool_op, *xs, dtype)

    lower.__name__ = lower.__qualname__ = bool_op.lower() + ("" if bitwise else "_opset13")
    if bitwise:
        lower.__doc__ = f"{bool_op} on bool, Bitwise{bool_op} on integers."
    else:
        how = "all ones minus x" if bool_op == "Not" else f"bool {bool_op} of bit vectors"
        lower.__doc__ = (
            f"{bool_op} on bool; on integers (no Bitwise{bool_op} before opset 18) {how}, "
            "exact arithmetic in _intbits."
        )
    return lower


for _prim, _op in ((lax.and_p, "And"), (lax.or_p, "Or"), (lax.xor_p, "Xor"), (lax.not_p, "Not")):
    family.lowering(_prim)(_logic(_op, False))
    family.lowering(_prim, min_opset=18)(_logic(_op, True))


def _bits(ctx, x, dtype):
    """The bit pattern of integer ``x`` as an unsigned value ORT can shift, and its dtype."""
    chain = _UNSIGNED[np.dtype(dtype).itemsize]
    for step in chain:
        if np.dtype(dtype) != np.dtype(step):
            x = ctx.cast(x, step)
    return x, np.dtype(chain[-1])


def _shift(ctx, x, s, direction: str):
    """Logical shift of ``x`` by ``s``; amounts outside [0, bits) give 0, as in JAX."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    width = 8 * dtype.itemsize
    ux, udtype = _bits(ctx, x, dtype)
    us, _ = _bits(ctx, s, dtype)
    out_of_range = ctx.op.GreaterOrEqual(us, np.asarray(width, udtype))
    zero = np.zeros((), udtype)
    amount = ctx.where(out_of_range, zero, us, udtype)
    shifted = ctx.op.BitShift(ux, amount, direction=direction)
    return ctx.cast(ctx.where(out_of_range, zero, shifted, udtype), dtype)


@family.lowering(lax.shift_left_p, min_opset=11)
def shift_left(ctx, x, s):
    """shift_left -> BitShift(LEFT) on the unsigned bit pattern; shifts >= bits give 0."""
    return _shift(ctx, x, s, "LEFT")


@family.lowering(lax.shift_right_logical_p, min_opset=11)
def shift_right_logical(ctx, x, s):
    """shift_right_logical -> BitShift(RIGHT) on the unsigned bit pattern; >= bits give 0."""
    return _shift(ctx, x, s, "RIGHT")


@family.lowering(lax.shift_right_arithmetic_p, min_opset=18)
def shift_right_arithmetic(ctx, x, s):
    """shift_right_arithmetic as ``~(~x >> s)`` where the sign bit is set, ``x >> s``
    elsewhere (logical shifts on the unsigned pattern); the amount is clamped to bits - 1,
    so out-of-range shifts fill with the sign bit as in JAX (also for unsigned types)."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    width = 8 * dtype.itemsize
    ux, udtype = _bits(ctx, x, dtype)
    us, _ = _bits(ctx, s, dtype)
    mask = np.asarray(2**width - 1, udtype)
    top = np.asarray(width - 1, udtype)
    negative = ctx.op.Equal(ctx.op.BitShift(ux, top, direction="RIGHT"), np.ones((), udtype))
    flipped = ctx.where(negative, ctx.op.BitwiseXor(ux, mask), ux, udtype)
    shifted = ctx.op.BitShift(flipped, ctx.op.Min(us, top), direction="RIGHT")
    return ctx.cast(ctx.where(negative, ctx.op.BitwiseXor(shifted, mask), shifted, udtype), dtype)


@family.lowering(lax.shift_right_arithmetic_p)
def shift_right_arithmetic_opset13(ctx, x, s):
    """shift_right_arithmetic without BitwiseXor (opset < 18): the logical shift of the bit
    pattern plus, where the sign bit is set, the ``s`` top bits of the width (all ones minus
    all ones >> s; disjoint from the shifted bits, so Add is Or), in uint32 (uint64 for 64
    bits) where Add/Sub/Mul have kernels at opset 13. The amount is clamped to bits - 1 as
    in JAX (negative amounts read as large unsigned ones); unsigned types likewise."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    width = 8 * dtype.itemsize
    carrier = _intbits.WORD[dtype.itemsize]
    ux, us = (_intbits.zero_extend(ctx, v, dtype, carrier) for v in (x, s))
    amount = ctx.op.Min(us, np.asarray(width - 1, carrier))
    ones = np.asarray(2**width - 1, carrier)
    fill = ctx.op.Sub(ones, ctx.op.BitShift(ones, amount, direction="RIGHT"))
    sign = ctx.op.BitShift(ux, np.asarray(width - 1, carrier), direction="RIGHT")
    shifted = ctx.op.BitShift(ux, amount, direction="RIGHT")
    return ctx.cast(ctx.op.Add(shifted, ctx.op.Mul(sign, fill)), dtype)


def _popcount(ctx, ux, udtype):
    """Bits set in each element (SWAR: pairs, nibbles, bytes, then a byte-sum multiply)."""
    width = 8 * np.dtype(udtype).itemsize

    def pattern(byte: int):
        return np.asarray(int.from_bytes(bytes([byte]) * (width // 8), "little"), udtype)

    def shr(v, k: int):
        return ctx.op.BitShift(v, np.asarray(k, udtype), direction="RIGHT")

    ux = ctx.op.Sub(ux, ctx.op.BitwiseAnd(shr(ux, 1), pattern(0x55)))
    ux = ctx.op.Add(
        ctx.op.BitwiseAnd(ux, pattern(0x33)), ctx.op.BitwiseAnd(shr(ux, 2), pattern(0x33))
    )
    ux = ctx.op.BitwiseAnd(ctx.op.Add(ux, shr(ux, 4)), pattern(0x0F))
    if width == 8:
        return ux
    return shr(ctx.op.Mul(ux, pattern(0x01)), width - 8)


@family.lowering(lax.population_count_p, min_opset=18)
def population_count(ctx, x):
    """population_count -> SWAR bit counting with BitShift/BitwiseAnd/Add (no ONNX op)."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    ux, udtype = _bits(ctx, x, dtype)
    return ctx.cast(_popcount(ctx, ux, udtype), dtype)


@family.lowering(lax.clz_p, min_opset=18)
def clz(ctx, x):
    """clz -> bits - popcount(x smeared right): ORing in x >> 1, 2, 4 ... sets every bit
    below the leading one (no ONNX op counts leading zeros)."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    width = 8 * dtype.itemsize
    ux, udtype = _bits(ctx, x, dtype)
    k = 1
    while k < width:
        shifted = ctx.op.BitShift(ux, np.asarray(k, udtype), direction="RIGHT")
        ux = ctx.op.BitwiseOr(ux, shifted)
        k *= 2
    count = ctx.op.Sub(np.asarray(width, udtype), _popcount(ctx, ux, udtype))
    return ctx.cast(count, dtype)


@family.lowering(lax.population_count_p)
def population_count_opset13(ctx, x):
    """population_count without BitwiseAnd (opset < 18): the bit vector (see _intbits)
    summed by a MatMul with ones."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    bits = _intbits.bit_vector(ctx, x, dtype)
    return ctx.cast(_intbits.weighted_sum(ctx, bits, [1] * (8 * dtype.itemsize)), dtype)


@family.lowering(lax.clz_p)
def clz_opset13(ctx, x):
    """clz without BitwiseOr (opset < 18): the count of powers of two 2^0 .. 2^(bits-1)
    above the unsigned value (x in [2^p, 2^(p+1)) is below bits - 1 - p of them, 0 below
    all), a Less against a constant vector summed by a MatMul."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    width = 8 * dtype.itemsize
    carrier = _intbits.CARRIER[dtype.itemsize]
    ux = ctx.op.Unsqueeze(_intbits.zero_extend(ctx, x, dtype, carrier), ctx.i64([-1]))
    below = ctx.op.Less(ux, np.asarray([1 << k for k in range(width)], carrier))
    return ctx.cast(_intbits.weighted_sum(ctx, below, [1] * width), dtype)


def _halves(ctx, v):
    """High and low 32 bits of uint64 ``v`` (shifts only: BitwiseAnd needs opset 18)."""
    s = np.asarray(32, np.uint64)
    high = ctx.op.BitShift(v, s, direction="RIGHT")
    low = ctx.op.BitShift(ctx.op.BitShift(v, s, direction="LEFT"), s, direction="RIGHT")
    return high, low


@family.lowering(lax.mulhi_p, min_opset=11)
def mulhi(ctx, x, y):
    """mulhi -> the high half of the exact double-width product.

    Up to 32 bits: one Mul in a type at least twice as wide (signed operands
    sign-extended), its bit pattern shifted right by the width (BitShift runs on
    unsigned types only) and cast down, which keeps the low bits. 64 bits: the
    schoolbook product of 32-bit halves in uint64 (no wider type exists); a signed
    result then subtracts the other operand for each negative one, since a
    negative ``a`` reads as ``a + 2**64`` unsigned.
    """
    dtype = np.dtype(ctx.avals_in[0].dtype)
    width = 8 * dtype.itemsize
    signed = dtype.kind == "i"
    if width < 64:
        wide = np.dtype(f"{dtype.kind}{max(4, 2 * dtype.itemsize)}")
        product = ctx.op.Mul(ctx.cast(x, wide), ctx.cast(y, wide))
        bits = ctx.cast(product, f"u{wide.itemsize}") if signed else product
        shift = np.asarray(width, f"u{wide.itemsize}")
        return ctx.cast(ctx.op.BitShift(bits, shift, direction="RIGHT"), dtype)
    u64 = np.dtype(np.uint64)
    ux, uy = (ctx.cast(v, u64) if signed else v for v in (x, y))
    (xh, xl), (yh, yl) = _halves(ctx, ux), _halves(ctx, uy)
    hl_h, hl_l = _halves(ctx, ctx.op.Mul(xh, yl))
    lh_h, lh_l = _halves(ctx, ctx.op.Mul(xl, yh))
    low_carry = ctx.op.BitShift(ctx.op.Mul(xl, yl), np.asarray(32, u64), direction="RIGHT")
    middle = ctx.op.Add(ctx.op.Add(low_carry, hl_l), lh_l)
    high = ctx.op.Add(ctx.op.Add(ctx.op.Mul(xh, yh), hl_h), lh_h)
    high = ctx.op.Add(high, _halves(ctx, middle)[0])
    if not signed:
        return high
    for v, other in ((x, uy), (y, ux)):
        negative = ctx.cast(ctx.op.Less(v, np.zeros((), dtype)), u64)
        high = ctx.op.Sub(high, ctx.op.Mul(negative, other))
    return ctx.cast(high, dtype)


# ---------------------------------------------------------------- cases

_BOOLS = [np.array([True, True, False, False]), np.array([True, False, True, False])]


def _logic_cases(prim, fn):
    return [
        case(f"{prim.name}_bool", fn, _BOOLS),
        case(f"{prim.name}_bool_opset17", fn, _BOOLS, opset=17),
        case(f"{prim.name}_symbolic", fn, [("B", "T"), (1, "T")], dtypes=[np.bool_] * 2),
        *int_cases(prim.name, fn),
    ]


for _prim, _fn in (
    (lax.and_p, lax.bitwise_and),
    (lax.or_p, lax.bitwise_or),
    (lax.xor_p, lax.bitwise_xor),
):
    family.add_cases(_prim, functools.partial(_logic_cases, _prim, _fn))
family.add_cases(
    lax.not_p,
    lambda: [
        case("not_bool", lax.bitwise_not, [_BOOLS[0]], expect=["Not"]),
        case("not_symbolic", lax.bitwise_not, [("B", 3)], dtypes=[np.int32]),
        *[
            case(f"not_{np.dtype(d).name}", lax.bitwise_not, [edges(d)], variants=x64(d))
            for d in INTS
        ],
    ],
)


def _shift_pairs(dtype) -> list[np.ndarray]:
    """Boundary values against every shift amount in [-1, bits + 1] (wrapped into dtype)."""
    width = 8 * np.dtype(dtype).itemsize
    values = edges(dtype)
    amounts = np.array([*range(-1, width + 2)], np.int64).astype(dtype)
    return [np.repeat(values, len(amounts)), np.tile(amounts, len(values))]


def _shift_cases(prim, fn):
    return [
        case(f"{prim.name}_symbolic", fn, [("B", 3), ("B", 3)], dtypes=[np.int32] * 2),
        *[
            case(f"{prim.name}_{np.dtype(d).name}", fn, _shift_pairs(d), variants=x64(d))
            for d in INTS
        ],
    ]


for _prim, _fn in (
    (lax.shift_left_p, lax.shift_left),
    (lax.shift_right_logical_p, lax.shift_right_logical),
    (lax.shift_right_arithmetic_p, lax.shift_right_arithmetic),
):
    family.add_cases(_prim, functools.partial(_shift_cases, _prim, _fn))


def _bit_values(dtype) -> np.ndarray:
    """Zero, extremes, and every single-bit and low-bits-set pattern of ``dtype``."""
    width = 8 * np.dtype(dtype).itemsize
    patterns = [1 << k for k in range(width)] + [(1 << k) - 1 for k in range(width + 1)]
    patterns.append(0x5A5A5A5A5A5A5A5A % (1 << width))
    return np.array(patterns, np.uint64).astype(dtype)


def _count_cases(prim, fn):
    return [
        case(f"{prim.name}_symbolic", fn, [("B", 3)], dtypes=[np.int32]),
        *[
            case(f"{prim.name}_{np.dtype(d).name}", fn, [_bit_values(d)], variants=x64(d))
            for d in INTS
        ],
    ]


for _prim, _fn in ((lax.population_count_p, lax.population_count), (lax.clz_p, lax.clz)):
    family.add_cases(_prim, functools.partial(_count_cases, _prim, _fn))
family.add_cases(
    lax.mulhi_p,
    lambda: [
        case("mulhi_symbolic", lax.mulhi, [("B", 3), ("B", 3)], dtypes=[np.int32] * 2),
        case(
            "mulhi_by_scalar",
            lambda x: lax.mulhi(x, np.uint32(0x9E3779B9)),
            [_bit_values(np.uint32)],
        ),
        *int_cases("mulhi", lax.mulhi),
    ],
)


# opsets 13-17 (no Bitwise ops): every case runs all ops of its group on edge values of
# one integer width; the widths are spread over the group's primitives, so each primitive's
# coverage row records its opset-13 ops


def _logic_all(x, y):
    return lax.bitwise_and(x, y), lax.bitwise_or(x, y), lax.bitwise_xor(x, y), lax.bitwise_not(x)


def _shifts_all(x, s):
    return lax.shift_left(x, s), lax.shift_right_logical(x, s), lax.shift_right_arithmetic(x, s)


def _counts_all(x):
    return lax.population_count(x), lax.clz(x)


family.add_cases(
    lax.xor_p,
    lambda: [
        case(
            "logic_opset13_symbolic",
            _logic_all,
            [("B", 3), ("B", 3)],
            dtypes=[np.int32] * 2,
            opset=13,
            counts={"MatMul": 3, "Unsqueeze": 2},  # one bit vector per operand, not per op
        ),
        case("logic_opset13_scalar", _logic_all, [np.int16(-300), np.int16(0x5A5A)], opset=13),
    ],
)


def _opset13_cases(kind, dtype):
    """``logic``, ``counts`` or ``shifts`` at opset 13 on edge values of ``dtype``."""
    fn, inputs = {
        "logic": (_logic_all, all_pairs),
        "counts": (_counts_all, lambda d: [_bit_values(d)]),
        "shifts": (_shifts_all, _shift_pairs),
    }[kind]
    name = f"{kind}_opset13_{np.dtype(dtype).name}"
    return [case(name, fn, inputs(dtype), variants=x64(dtype), opset=13)]


for _i, _d in enumerate(INTS):
    family.add_cases(
        (lax.and_p, lax.or_p, lax.xor_p, lax.not_p)[(_i + _i // 4) % 4],  # 64 bits apart
        functools.partial(_opset13_cases, "logic", _d),
    )
    family.add_cases(
        (lax.population_count_p, lax.clz_p)[_i % 2], functools.partial(_opset13_cases, "counts", _d)
    )
    family.add_cases(lax.shift_right_arithmetic_p, functools.partial(_opset13_cases, "shifts", _d))


register = family.register
