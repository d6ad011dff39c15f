"""Bit-level float operations: bitcast_convert_type, nextafter and reduce_precision.

ONNX has BitCast only from opset 26. Below it these primitives are exact arithmetic on the
float's value: the binade of ``|x|`` comes from a binary search over a table of powers of
two (comparisons and Gather, no Log), and every further step is a power-of-two scaling,
a subtraction inside one binade or an integer product, all exact. float16 and bfloat16
compute in float32 (exact: every half value and every intermediate is a float32).
Integer -> float uses BitShift (opset 11) to cut the fields out; nothing here needs more
than opset 13 below BitCast's opset.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case, onnx_dtype
from jax2onnx_lax._casedata import edges

family = Family("lax")

_BF16 = np.dtype(jnp.bfloat16)
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_IEEE = {np.dtype(np.float16), _BF16, _F32, _F64}
_SHIFTABLE = {1: np.uint8, 2: np.uint32, 4: np.uint32, 8: np.uint64}  # ORT BitShift dtypes


def _format(dtype):
    """(mantissa bits, smallest normal exponent, largest exponent, dtype to compute in)."""
    info = jnp.finfo(dtype)
    compute = _F64 if np.dtype(dtype) == _F64 else _F32
    return int(info.nmant), int(info.minexp), int(info.maxexp) - 1, compute


def _powers(lo, hi, compute):
    """``2^lo .. 2^hi``, padded with +inf to a power-of-two length for the search."""
    n = hi - lo + 1
    table = np.full(1 << max(1, (n - 1).bit_length()), np.inf, compute)
    table[:n] = np.ldexp(1.0, np.arange(lo, hi + 1))
    return table


def _binade(ctx, a, lo, hi, compute):
    """``(index, powers)``: ``index = clamp(floor(log2 a), lo, hi) - lo`` (int64) for finite
    ``a >= 0`` (0 below ``2^lo``, zero included) by binary search, and the table constant
    whose ``Gather`` at ``index`` is ``2^(lo + index)``. Comparisons only: exact."""
    table = _powers(lo, hi, compute)
    powers, index, step = ctx.const(table), None, len(table) // 2
    while step:
        if index is None:  # the first probe compares with a constant
            hit = ctx.op.GreaterOrEqual(a, np.asarray(table[step], compute))
            index = ctx.op.Where(hit, np.int64(step), np.int64(0))
        else:
            probe = ctx.op.Add(index, np.int64(step))
            hit = ctx.op.GreaterOrEqual(a, ctx.op.Gather(powers, probe))
            index = ctx.op.Where(hit, probe, index)
        step //= 2
    return index, powers


def _magnitude(ctx, x):
    """``|x|`` with inf and NaN replaced by 0 (so the search stays finite), and the mask of
    finite elements."""
    a = ctx.op.Abs(x)
    finite = ctx.op.Less(a, np.inf)  # False for inf and NaN
    return ctx.op.Where(finite, a, np.zeros((), x.dtype.numpy())), finite


def _negative(ctx, x):
    """The sign bit of a non-NaN ``x``: ``x < 0``, or ``1 / x < 0`` for -0.0 (-inf in IEEE
    division, which ONNX Runtime follows)."""
    return ctx.op.Or(ctx.op.Less(x, 0.0), ctx.op.Less(ctx.op.Reciprocal(x), 0.0))


def float_bits(ctx, x, dtype):
    """The IEEE bit pattern of ``x`` (``dtype`` one of float16/bfloat16/float32/float64) as
    its signed integer of the same width, held in int64, by exact arithmetic.

    A finite ``|x|`` in binade ``e = max(floor(log2|x|), emin)`` has exponent field
    ``e - emin + [|x| >= 2^emin]`` and mantissa ``(|x| / 2^e - [normal]) * 2^p`` (an integer
    below ``2^p``; subnormals and zeros have the normal flag clear); the pattern is
    ``field * 2^p + mantissa``, minus ``2^(w-1)`` when the sign bit is set (-0.0 included).
    inf has the all-ones field; every NaN gives the positive quiet NaN with zero payload
    (the pattern of ``jnp.nan``): arithmetic cannot see a NaN's sign or payload."""
    p, emin, emax, compute = _format(dtype)
    width = 8 * np.dtype(dtype).itemsize
    x = ctx.cast(x, compute)
    a, finite = _magnitude(ctx, x)
    index, powers = _binade(ctx, a, emin, emax, compute)
    normal = ctx.op.GreaterOrEqual(a, np.asarray(2.0**emin, compute))
    fraction = ctx.op.Sub(ctx.op.Div(a, ctx.op.Gather(powers, index)), ctx.cast(normal, compute))
    mantissa = ctx.cast(ctx.op.Mul(fraction, np.asarray(2.0**p, compute)), np.int64)
    field = ctx.op.Add(index, ctx.cast(normal, np.int64))
    bits = ctx.op.Add(ctx.op.Mul(field, np.int64(2**p)), mantissa)
    inf = (2 ** (width - 1 - p) - 1) * 2**p
    special = ctx.op.Where(ctx.op.IsNaN(x), np.int64(inf + 2 ** (p - 1)), np.int64(inf))
    bits = ctx.op.Where(finite, bits, special)
    signed = ctx.op.Add(bits, np.int64(-(2 ** (width - 1))))
    return ctx.op.Where(_negative(ctx, x), signed, bits)


def _bits_to_float(ctx, u, width, dst):
    """The float whose ``width``-byte IEEE bit pattern is ``u`` (unsigned, shiftable), by
    exact arithmetic where BitCast (opset 26) is missing: sign, exponent field e and
    mantissa m are cut out with BitShift; the value is ``(m + 2^p [e > 0]) * 2^(max(e, 1)
    - bias - p)`` with the power of two gathered from a table (an integer below 2^(p+1)
    times a power of two is exact, subnormals included), NaN where e is all ones and m > 0,
    times -1 where the sign bit is set. float16/bfloat16 compute in float32 (exact)."""
    info = jnp.finfo(dst)
    bits, p, top = 8 * width, int(info.nmant), 2 ** int(info.nexp) - 1
    compute = _format(dst)[3]
    udtype = np.dtype(_SHIFTABLE[width])
    pad = 8 * udtype.itemsize - bits  # uint16 patterns sit in uint32

    def field(left, right):
        shifted = ctx.op.BitShift(u, np.asarray(left, udtype), direction="LEFT")
        return ctx.op.BitShift(shifted, np.asarray(right, udtype), direction="RIGHT")

    sign = ctx.cast(field(pad, pad + bits - 1), np.bool_)
    exponent = ctx.cast(field(pad + 1, pad + 1 + p), np.int64)
    mantissa = ctx.cast(field(pad + bits - p, pad + bits - p), compute)
    bias = 2 ** (int(info.nexp) - 1) - 1
    scale = [2.0 ** (max(e, 1) - bias - p) for e in range(top)] + [np.inf]
    implicit = np.where(np.arange(top + 1) > 0, 2.0**p, 0.0).astype(compute)
    significand = ctx.op.Add(mantissa, ctx.op.Gather(ctx.const(implicit), exponent))
    value = ctx.op.Mul(significand, ctx.op.Gather(ctx.const(np.array(scale, compute)), exponent))
    nan = ctx.op.And(ctx.op.Equal(exponent, np.int64(top)), ctx.op.Greater(mantissa, 0.0))
    value = ctx.op.Where(nan, np.asarray(np.nan, compute), value)
    one = np.ones((), compute)
    value = ctx.op.Mul(value, ctx.op.Where(sign, -one, one))  # -0.0 survives a Mul, not a Where
    return ctx.cast(value, dst)


def _unsigned(dtype) -> np.dtype:
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def _bitcast_same_width(ctx, x, src, dst):
    """A bit reinterpretation: Cast between integers of one width (two's complement keeps
    the bits), BitCast from opset 26; below it float -> integer is :func:`float_bits` and
    integer -> float :func:`_bits_to_float` (float -> float goes through the integer)."""
    if src == dst:
        return x
    if src.kind in "iu" and dst.kind in "iu":
        return ctx.cast(x, dst)
    if ctx.opset >= 26:
        return ctx.op.BitCast(x, to=onnx_dtype(dst))
    if src in _IEEE and (dst in _IEEE or dst.kind in "iu"):
        signed = np.dtype(f"i{src.itemsize}")
        x, src = ctx.cast(float_bits(ctx, x, src), signed), signed
        if dst.kind in "iu":
            return ctx.cast(x, dst)
    if src.kind in "iu" and dst in _IEEE:
        return _bits_to_float(ctx, ctx.cast(x, _SHIFTABLE[src.itemsize]), src.itemsize, dst)
    raise ctx.error(
        f"bitcast {src} -> {dst} below opset 26 is exact arithmetic for float16, bfloat16, "
        "float32 and float64 only; pass opset=26 to to_onnx (ONNX BitCast)"
    )


@family.lowering(lax.bitcast_convert_type_p)
def bitcast_convert_type(ctx, x, *, new_dtype):
    """bitcast_convert_type -> Cast between same-width integers, BitCast (opset 26) for
    floats; below opset 26 exact arithmetic both ways (:func:`float_bits`,
    :func:`_bits_to_float`; NaN -> integer gives the quiet NaN pattern of ``jnp.nan``).
    Width changes split or join the unsigned bit pattern little-endian with BitShift, Cast
    and Add of the disjoint pieces (Concat / Gather on the last axis), as XLA on CPU lays
    the bytes out; nothing beyond opset 13 besides BitCast."""
    src, dst = np.dtype(ctx.avals_in[0].dtype), np.dtype(new_dtype)
    if src.itemsize == dst.itemsize:
        return _bitcast_same_width(ctx, x, src, dst)
    narrow, wide = sorted((src, dst), key=lambda d: d.itemsize)
    ratio, step = wide.itemsize // narrow.itemsize, 8 * narrow.itemsize
    shift_dtype = np.dtype(_SHIFTABLE[wide.itemsize])
    if src == wide:
        bits = ctx.cast(_bitcast_same_width(ctx, x, src, _unsigned(src)), shift_dtype)
        pieces = []
        for i in range(ratio):
            k = np.asarray(step * i, shift_dtype)
            piece = ctx.cast(ctx.op.BitShift(bits, k, direction="RIGHT"), _unsigned(narrow))
            pieces.append(ctx.op.Unsqueeze(piece, ctx.i64([-1])))
        joined = ctx.op.Concat(*pieces, axis=-1)
        return _bitcast_same_width(ctx, joined, _unsigned(narrow), dst)
    bits = _bitcast_same_width(ctx, x, src, _unsigned(src))
    result = None
    for i in range(ratio):
        piece = ctx.cast(ctx.op.Gather(bits, ctx.i64(i), axis=-1), shift_dtype)
        piece = ctx.op.BitShift(piece, np.asarray(step * i, shift_dtype), direction="LEFT")
        result = piece if result is None else ctx.op.Add(result, piece)  # disjoint bits
    return _bitcast_same_width(ctx, ctx.cast(result, _unsigned(dst)), _unsigned(dst), dst)


# ---------------------------------------------------------------- nextafter


def _nextafter_special(ctx, x, y, moved, dt, compute):
    """JAX's cases around ``moved``, the magnitude one step from a nonzero ``x`` (all in
    ``compute``): from zero the smallest subnormal of ``dt`` signed like ``y``; ``x == y``
    gives ``y``; NaN in either gives the quiet NaN ``jnp.nan``. Magnitudes and signs (+-1)
    are selected apart and multiplied last: ONNX Runtime's Where turns a -0.0 taken from
    its first branch into +0.0."""
    one, tiny = np.ones((), compute), np.asarray(jnp.finfo(dt).smallest_subnormal, compute)
    zero, equal = ctx.op.Equal(x, 0.0), ctx.op.Equal(x, y)
    magnitude = ctx.op.Where(zero, tiny, moved)
    magnitude = ctx.op.Where(equal, ctx.op.Abs(y), magnitude)
    nan = ctx.op.Or(ctx.op.IsNaN(x), ctx.op.IsNaN(y))
    magnitude = ctx.op.Where(nan, np.asarray(np.nan, compute), magnitude)
    sign = ctx.op.Where(ctx.op.Less(x, 0.0), -one, one)
    sign = ctx.op.Where(zero, ctx.op.Where(ctx.op.Greater(y, 0.0), one, -one), sign)
    sign = ctx.op.Where(equal, ctx.op.Where(_negative(ctx, y), -one, one), sign)
    return ctx.op.Mul(magnitude, sign)


def _away(ctx, x, y):
    """Whether the step from a nonzero ``x`` toward ``y != x`` grows ``|x|``."""
    return ctx.op.Equal(ctx.op.Greater(y, x), ctx.op.Greater(x, 0.0))


@family.lowering(lax.nextafter_p)
def nextafter(ctx, x, y):
    """nextafter below opset 26 -> exact arithmetic on the value: in binade ``2^e`` (``e``
    from the search, at least the smallest normal exponent) one step away from zero adds
    ``2^(e-p)``, one step toward zero subtracts it, or half of it from an exact power of
    two above the smallest normal binade; the sign is multiplied back (so -tiny -> -0.0),
    inf steps to the largest finite value, and the largest finite value steps to inf by
    rounding. float16/bfloat16 compute in float32 and round back exactly. Comparisons are
    IEEE: XLA on CPU compares subnormals as zero (x == y), ONNX Runtime does not."""
    dt = np.dtype(ctx.avals_in[0].dtype)
    p, emin, emax, compute = _format(dt)
    xc, yc = ctx.cast(x, compute), ctx.cast(y, compute)
    a, finite = _magnitude(ctx, xc)
    index, powers = _binade(ctx, a, emin, emax, compute)
    power = ctx.op.Gather(powers, index)
    ulp = ctx.op.Mul(power, np.asarray(2.0**-p, compute))
    halve = ctx.op.And(ctx.op.Equal(a, power), ctx.op.Greater(index, np.int64(0)))
    down = ctx.op.Where(halve, ctx.op.Mul(ulp, np.asarray(0.5, compute)), ulp)
    step = ctx.op.Where(_away(ctx, xc, yc), ctx.op.Add(a, ulp), ctx.op.Sub(a, down))
    moved = ctx.op.Where(finite, step, np.asarray(jnp.finfo(dt).max, compute))
    return ctx.cast(_nextafter_special(ctx, xc, yc, moved, dt, compute), dt)


@family.lowering(lax.nextafter_p, min_opset=26)
def nextafter_bitcast(ctx, x, y):
    """nextafter -> BitCast to an integer, +-1 on the bit pattern, BitCast back.

    Floats order like their sign-magnitude bit patterns, so one step toward ``y`` adds 1 to
    the pattern when moving away from zero and subtracts 1 when moving toward it. From zero
    the result is the smallest subnormal with the sign of ``y``; equal inputs return ``y``.
    bfloat16 compares in float32 (no ONNX Runtime kernels).
    """
    dt = np.dtype(ctx.avals_in[0].dtype)
    it = np.dtype(f"int{dt.itemsize * 8}")
    compute = ctx.kernel_dtype("Greater", dt)
    xc, yc = ctx.cast(x, compute), ctx.cast(y, compute)
    bits = ctx.op.BitCast(x, to=onnx_dtype(it))
    step = ctx.where(_away(ctx, xc, yc), np.asarray(1, it), np.asarray(-1, it), it)
    moved = ctx.cast(ctx.op.BitCast(ctx.op.Add(bits, step), to=onnx_dtype(dt)), compute)
    moved = ctx.op.Abs(moved)
    return ctx.cast(_nextafter_special(ctx, xc, yc, moved, dt, compute), dt)


# ---------------------------------------------------------------- reduce_precision

# (exponent_bits, mantissa_bits) a Cast round trip rounds to exactly, by source dtype
# (ONNX Runtime casts float64 -> float16/bfloat16 through float32: twice rounded).
_CAST_FORMATS = {_F32: {(8, 7): _BF16, (5, 10): np.dtype(np.float16)}, _F64: {(8, 23): _F32}}


@family.lowering(lax.reduce_precision_p)
def reduce_precision(ctx, x, *, exponent_bits, mantissa_bits):
    """reduce_precision as XLA does it: round the mantissa to nearest even at x's own
    exponent, then (fewer exponent bits) results above the format's range become inf and
    results below its smallest normal become zero of x's sign (XLA flushes them).

    float32 -> float16/bfloat16 and float64 -> float32 formats: a Cast round trip (ONNX
    Runtime's Cast rounds to nearest even) and a Where for the flush. Every other format:
    exact arithmetic, ``Round(x / q) * q`` with ``q = 2^(e - mantissa_bits)`` for ``x``'s
    binade ``e`` (from the search, clamped to the range where it matters), then the range
    checks. NaN stays NaN."""
    dt = np.dtype(ctx.avals_in[0].dtype)
    p, emin, emax, compute = _format(dt)
    nexp = int(jnp.finfo(dt).nexp)
    narrower, fewer = exponent_bits < nexp, mantissa_bits < p
    if not (narrower or fewer):
        return ctx.op.Identity(x)
    bias = 2 ** (exponent_bits - 1) - 1  # of the target format
    target = _CAST_FORMATS.get(dt, {}).get((exponent_bits, mantissa_bits))
    xc = ctx.cast(x, compute)
    if target is not None:
        r = ctx.cast(ctx.cast(xc, target), dt)
    elif fewer:
        lo, hi = (max(emin, -bias), min(emax, bias + 1)) if narrower else (emin, emax)
        a, _ = _magnitude(ctx, xc)
        index, powers = _binade(ctx, a, lo, hi, compute)
        quantum = ctx.op.Mul(ctx.op.Gather(powers, index), np.asarray(2.0**-mantissa_bits, compute))
        r = ctx.op.Mul(ctx.op.Round(ctx.op.Div(xc, quantum)), quantum)
    else:
        r = xc
    if narrower:
        # x rounds to at least the smallest normal 2^(1 - bias) iff |x| >= this threshold
        # (the midpoint below it rounds up, to even): the Cast keeps a subnormal there
        threshold = 2.0 ** (1 - bias) * (1 - 2.0 ** -(min(mantissa_bits, p) + 2))
        normal = ctx.op.GreaterOrEqual(ctx.op.Abs(xc), np.asarray(threshold, compute))
        r = ctx.op.Where(normal, r, ctx.op.Mul(xc, 0.0))  # -0.0 only in Where's 2nd branch
        if target is None:  # the Cast overflows by itself
            huge = ctx.op.GreaterOrEqual(ctx.op.Abs(r), np.asarray(2.0 ** (bias + 1), compute))
            r = ctx.op.Where(huge, ctx.op.Mul(xc, np.inf), r)
    return ctx.cast(r, dt)


# ---------------------------------------------------------------- cases


def _float_edges(dtype) -> np.ndarray:
    """+-0, +-inf, NaN, subnormals, the normal boundary, +-max, 1 + eps of ``dtype``."""
    info = jnp.finfo(dtype)
    tiny, normal = float(info.smallest_subnormal), float(info.smallest_normal)
    big, eps = float(info.max), float(info.eps)
    values = [0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny, 3 * tiny, normal - tiny, normal]
    values += [-normal, 2 * normal, big, -big, 1.0, -1.5, 1.0 + eps, 3.0, 0.1, -1e3]
    return np.array(values, np.float64).astype(dtype)


def _short(dtype) -> str:
    name = np.dtype(dtype).name
    return name.replace("float", "f").replace("uint", "u").replace("int", "i")


_EXACT = {"float16": (0.0, 0.0), "float32": (0.0, 0.0), "float64": (0.0, 0.0)}


def _bitcast_case(name, values, dst, *, src=None, opset=None, **kw):
    """``bitcast_convert_type`` of ``values`` (as ``src``) to ``dst``, compared exactly;
    bfloat16 is fed as float32 and returned as float32 (ONNX Runtime cannot feed it)."""
    values = np.asarray(values)
    src, dst = np.dtype(src or values.dtype), np.dtype(dst)

    def fn(x):
        y = lax.bitcast_convert_type(x.astype(src), dst)
        return y.astype(np.float32) if dst == _BF16 else y

    wide = 8 in (src.itemsize, dst.itemsize)
    variants = ["f64" if wide else "f32"]
    return case(name, fn, [values], variants=variants, opset=opset, tolerances=_EXACT, **kw)


_F16 = np.dtype(np.float16)
_FLOAT_BITCASTS = [
    *((_F32, np.int32), (_F32, np.uint32), (_F64, np.int64), (_F64, np.uint64)),
    *((_F16, np.int16), (_F16, np.uint16), (_BF16, np.int16), (_BF16, np.uint16), (_F16, _BF16)),
    *((_F32, np.uint8), (_F64, np.uint32), (_F16, np.uint8)),  # through the split
]


def _float_bitcast_cases(opset):
    """Float -> integer (and float16 -> bfloat16) on every edge value, at the default opset
    (arithmetic, no BitCast) and at 26 (BitCast)."""
    suffix, graph = ("", {"counts": {"BitCast": 0}}) if opset is None else ("_op26", {})
    return [
        _bitcast_case(
            f"{_short(src)}_to_{_short(dst)}{suffix}",
            _float_edges(src).astype(_F32 if src == _BF16 else src),
            dst,
            src=src,
            opset=opset,
            **graph,
        )
        for src, dst in _FLOAT_BITCASTS
    ]


_F32_BITS = np.array([1.5, -2.0, np.nan, -np.inf, 0.0, -0.0, 1e-40, 3.4e38], np.float32)
_F16_BITS = np.array([1.5, -2.0, np.nan, -np.inf, 0.0, -0.0, 1e-7, 65504.0], np.float16)
_TINY32 = float(np.finfo(np.float32).smallest_subnormal)
family.add_cases(
    lax.bitcast_convert_type_p,
    lambda: [
        _bitcast_case("i32_to_u32", edges(np.int32), np.uint32, counts={"BitCast": 0}),
        _bitcast_case("u8_to_i8", edges(np.uint8), np.int8),
        _bitcast_case("i16_to_u16", edges(np.int16), np.uint16),
        _bitcast_case("u64_to_i64", edges(np.uint64), np.int64),
        _bitcast_case("i32_to_u8", edges(np.int32), np.uint8),
        _bitcast_case("u8x4_to_i32", edges(np.uint8)[:4].reshape(1, 4), np.int32),
        _bitcast_case("i16_to_i8", edges(np.int16).reshape(-1, 1), np.int8),
        _bitcast_case("i8x2_to_u16", edges(np.int8)[:10].reshape(5, 2), np.uint16),
        _bitcast_case("i64_to_i16", edges(np.int64), np.int16),
        _bitcast_case("u16x4_to_u64", edges(np.uint16)[:4].reshape(1, 4), np.uint64),
        _bitcast_case("i32_to_u16", edges(np.int32), np.uint16),
        *_float_bitcast_cases(None),
        *_float_bitcast_cases(26),
        case(
            "f32_to_i32_symbolic",
            lambda x: lax.bitcast_convert_type(x, np.int32),
            [("B", 3)],
            variants=["f32"],
        ),
        _bitcast_case("i32_to_f32_op26", edges(np.int32), np.float32, opset=26),
        _bitcast_case("u16_to_f16_op26", edges(np.uint16), np.float16, opset=26),
        _bitcast_case(
            "u8x4_to_f32_op26", np.arange(16, dtype=np.uint8).reshape(4, 4), np.float32, opset=26
        ),
        # below opset 26, integer -> float bitcasts are exact arithmetic (no BitCast)
        _bitcast_case(
            "i32_to_f32_arith",
            np.concatenate([edges(np.int32), _F32_BITS.view(np.int32)]),
            np.float32,
            counts={"BitCast": 0},
        ),
        _bitcast_case(
            "u64_to_f64_arith",
            np.concatenate([edges(np.uint64), _F32_BITS.astype(np.float64).view(np.uint64)]),
            np.float64,
        ),
        _bitcast_case(
            "u16_to_f16_arith",
            np.concatenate([edges(np.uint16), _F16_BITS.view(np.uint16)]),
            np.float16,
        ),
        _bitcast_case("u8x4_to_f32_arith", np.arange(16, dtype=np.uint8).reshape(4, 4), np.float32),
        _bitcast_case(
            "i16_to_bf16_arith",
            np.concatenate([edges(np.int16), np.array([0x3FC0, 0x7F81, -0x0080, 1], np.int16)]),
            _BF16,
        ),
        # user-level functions built on the sign bit and the exponent field, default opset
        case(
            "copysign",
            jnp.copysign,
            [
                np.array([1.0, -2.0, 0.0, np.inf, np.nan, 3.0, -0.0, 5.0, -7.0, 1e-30]),
                np.array([-0.0, 0.0, -1.0, -np.inf, -1.0, np.nan, 2.0, -_TINY32, np.inf, -1e30]),
            ],
            tolerances=_EXACT,
            counts={"BitCast": 0},
        ),
        case(
            "copysign_float16",
            jnp.copysign,
            [_float_edges(_F16), _float_edges(_F16)[::-1]],
            tolerances=_EXACT,
            variants=["f32"],
        ),
        case(
            "ldexp",
            jnp.ldexp,
            [
                np.array([1.5, -3.0, 0.0, np.inf, np.nan, 1e30, -0.0, 0.75, 1e-30, 5.0]),
                np.array([3, -4, 5, 2, 1, 10, 0, -1, 20, 0], np.int32),
            ],
            tolerances=_EXACT,
        ),
        case(
            "frexp",
            jnp.frexp,
            [np.array([1.0, 0.75, -3.0, 1024.5, 0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, 3e-30])],
            tolerances=_EXACT,
        ),
    ],
)


def _next_pairs(dtype) -> list[np.ndarray]:
    """(x, y) pairs for nextafter: steps up and down at zero, subnormals, the normal boundary,
    powers of two, the largest finite value and inf, equal inputs, NaN. No pair compares a
    subnormal with zero or another subnormal: XLA on CPU flushes those comparisons."""
    info = jnp.finfo(dtype)
    t, n, big = float(info.smallest_subnormal), float(info.smallest_normal), float(info.max)
    inf, nan = np.inf, np.nan
    pairs = [(1.0, 2.0), (1.0, 0.0), (2.0, 0.0), (-2.0, 0.0), (-2.0, -3.0), (0.0, 1.0)]
    pairs += [(0.0, -1.0), (-0.0, 1.0), (0.0, -0.0), (-0.0, 0.0), (t, 1.0), (-t, 1.0)]
    pairs += [(t, -1.0), (3 * t, -1.0), (n, 0.0), (n - t, 1.0), (2 * n, 0.0), (-2 * n, 1.0)]
    pairs += [(big, inf), (-big, -inf), (big, 0.0), (inf, 0.0), (-inf, 0.0), (inf, inf)]
    pairs += [(nan, 1.0), (1.0, nan), (3.0, 3.0), (-1.0, inf), (0.1, -0.1)]
    x, y = np.array(pairs, np.float64).T
    return [x.astype(dtype), y.astype(dtype)]


def _nextafter_case(dtype, opset=None):
    """nextafter of ``dtype`` on the edge pairs, compared bit for bit."""
    dtype = np.dtype(dtype)
    fed, variants = (_F32 if dtype == _BF16 else dtype), ["f64" if dtype == _F64 else "f32"]
    name = f"nextafter_{dtype.name}" + ("" if opset is None else "_op26")
    return case(
        name,
        _as(dtype, lambda x, y: _to_bits(lax.nextafter(x, y))),
        [v.astype(fed) for v in _next_pairs(dtype)],
        variants=variants,
        opset=opset,
        counts={"BitCast": 0} if opset is None else None,
    )


def _as(dtype, fn):
    """``fn`` of its inputs converted to ``dtype`` (bfloat16 is fed as float32)."""
    return lambda *xs: fn(*(x.astype(dtype) for x in xs))


def _to_bits(x):
    return lax.bitcast_convert_type(x, np.dtype(f"i{x.dtype.itemsize}"))


_NEXT_DTYPES = (_F16, _BF16, _F32, _F64)
family.add_cases(
    lax.nextafter_p,
    lambda: [
        case("nextafter", lax.nextafter, [("B", 4), ("B", 4)], tolerances=_EXACT),
        case("nextafter_op26", lax.nextafter, [("B", 4), ("B", 4)], opset=26, expect=["BitCast"]),
        *(_nextafter_case(d) for d in _NEXT_DTYPES),
        *(_nextafter_case(d, 26) for d in _NEXT_DTYPES),
        case(
            "spacing",
            jnp.spacing,
            [np.array([1.0, -1.0, 0.0, -0.0, 2.0, 3e38, -3e38, np.inf, np.nan, 1e-30, 0.1])],
            tolerances=_EXACT,
        ),
        case(
            "truncated_normal",
            lambda x: x + jax.nn.initializers.truncated_normal()(jax.random.key(0), (3, 4)),
            [(3, 4)],
            variants=["f32"],
        ),
    ],
)


def _precision_case(name, values, exponent_bits, mantissa_bits, dtype=None):
    """reduce_precision of ``values`` (as ``dtype``), compared bit for bit (-0.0 included)."""
    values = np.asarray(values)
    dtype = np.dtype(dtype or values.dtype)
    fn = _as(dtype, lambda x: _to_bits(lax.reduce_precision(x, exponent_bits, mantissa_bits)))
    return case(name, fn, [values], variants=["f64" if dtype == _F64 else "f32"])


def _precision_edges(exponent_bits, mantissa_bits) -> np.ndarray:
    """Ties at 1 and below the target's smallest normal, the overflow boundary, values that
    become subnormal or zero there, +-0, +-inf, NaN (float64)."""
    m, bias = mantissa_bits, 2 ** (exponent_bits - 1) - 1
    normal, big = 2.0 ** (1 - bias), 2.0**bias * (2 - 2.0**-m)
    ulp = 2.0 ** -(m + 1)
    values = [1 + ulp, 1 + 3 * ulp, 1 + ulp + 2.0**-40, -(1 + ulp), big, big * (1 + ulp / 2)]
    values += [big * (1 + ulp / 2) - 2.0**-30 * big, normal, normal * (1 - ulp / 2)]
    values += [normal * (1 - ulp), -normal / 2, 1e-300, -1e-300, 0.0, -0.0, np.inf, -np.inf]
    values += [np.nan, 1e300, 0.1, -3.0]
    return np.array(values)


def _narrow(values, dtype) -> np.ndarray:
    with np.errstate(over="ignore"):  # 1e300 -> inf on purpose
        return values.astype(dtype)


_TO_F16, _TO_BF16 = _precision_edges(5, 10), _precision_edges(8, 7)
family.add_cases(
    lax.reduce_precision_p,
    lambda: [
        case("to_bfloat16", lambda x: lax.reduce_precision(x, 8, 7), [("B", 5)], tolerances=_EXACT),
        case("to_float16", lambda x: lax.reduce_precision(x, 5, 10), [("B", 5)], tolerances=_EXACT),
        case("to_float32", lambda x: lax.reduce_precision(x, 8, 23), [("B", 5)]),
        case("identity_f64", lambda x: lax.reduce_precision(x, 11, 52), [(5,)], variants=["f64"]),
        _precision_case("f32_to_float16_edges", _narrow(_TO_F16, np.float32), 5, 10),
        _precision_case("f32_to_bfloat16_edges", _narrow(_TO_BF16, np.float32), 8, 7),
        _precision_case("f64_to_float16_edges", _TO_F16, 5, 10),
        _precision_case("f64_to_bfloat16_edges", _TO_BF16, 8, 7),
        _precision_case("f64_to_float32_edges", _precision_edges(8, 23), 8, 23),
        _precision_case("f32_to_e4m3_edges", _narrow(_precision_edges(4, 3), np.float32), 4, 3),
        _precision_case("f16_to_bfloat16_edges", _float_edges(_F16), 8, 7),
        _precision_case("bf16_to_float16_edges", _narrow(_TO_F16, np.float32), 5, 10, _BF16),
        case(  # a bfloat16 scalar in and out: the result stays 0-d
            "bf16_scalar",
            lambda x: lax.reduce_precision(x, 5, 2),
            [np.asarray(1.2345, _BF16)],
            tolerances=_EXACT,
        ),
    ],
)


register = family.register
