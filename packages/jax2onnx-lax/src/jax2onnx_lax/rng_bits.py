"""lax.rng_bit_generator: XLA's Threefry and Philox bit generators, bit for bit as on CPU.

JAX hands XLA the key as ``uint32[4]`` (two little-endian uint64 words ``s0, s1``; a legacy
``uint64[2]`` key is those words themselves). XLA expands the op into ordinary HLO
(``RngBitGeneratorExpander``), and this module writes the same arithmetic in uint32 JAX
code that is traced and inlined (``ctx.decompose``), so each operation is lowered by its own
rule (kernel gaps, opsets 13-17 without Bitwise ops):

* ``RNG_THREE_FRY``: ``s0`` is the Threefry-2x32 key (low, high word), ``s1`` a 64-bit
  counter. 64-bit output: element ``i`` (row-major) hashes ``s1 + i``, low word first.
  32-bit output: the shape is halved along its first even axis (else its longest; a
  scalar counts as ``(2,)``); half-element ``j`` hashes ``s1 + j`` and its two words fill
  two neighbours along that axis. 8/16-bit: the 32-bit bits, truncated. New key:
  ``s0, s1 + number of counters``.
* ``RNG_PHILOX`` (and ``RNG_DEFAULT``, which XLA's CPU compiler expands as Philox):
  Philox-4x32-10 keyed by ``s0`` over the 128-bit counters ``(s1, s0) + j``; the four
  words of block ``j`` are elements ``4j .. 4j+3`` (64-bit output: two words per
  element, low first). New key: ``s0, s1 + number of blocks`` (mod 2^64).

The 32x32 -> 64-bit products of Philox are ``lax.mulhi`` and a wrapping ``lax.mul`` in
uint32, so nothing needs uint64 unless the output is uint64.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case, is_symbolic

family = Family("lax")

_U32 = np.dtype(np.uint32)
_U64 = np.dtype(np.uint64)
# Philox-4x32-10 (Salmon et al., SC'11): the two round multipliers and the Weyl
# sequence increments of the two key words
_PHILOX_MUL = (np.uint32(0xD2511F53), np.uint32(0xCD9E8D57))
_PHILOX_WEYL = (np.uint32(0x9E3779B9), np.uint32(0xBB67AE85))
_PHILOX_ROUNDS = 10
_COUNTERS = 2**32  # counters are uint32 iotas (the high word of an index is 0)


# ---------------------------------------------------------------- uint32 arithmetic


def _add64(lo, hi, count):
    """``(hi, lo) + count`` modulo 2^64 in uint32 words; ``count`` below 2^32, an array,
    an int or a symbolic dimension."""
    if isinstance(count, int):
        step = np.uint32(count)
    elif is_symbolic(count):
        step = lax.convert_element_type(jnp.asarray(count), _U32)
    else:
        step = count
    low = lo + step
    return low, hi + (low < lo).astype(_U32)


def _key_words(key):
    """``s0`` and ``s1`` as uint32 words ``[s0 low, s0 high, s1 low, s1 high]``."""
    if key.dtype == _U64:
        high = lax.shift_right_logical(key, np.uint64(32))
        return [w.astype(_U32) for w in (key[0], high[0], key[1], high[1])]
    return [key[i] for i in range(4)]


def _new_key(key, words):
    if key.dtype == _U64:
        return jnp.stack([_join64(words[0], words[1]), _join64(words[2], words[3])])
    return jnp.stack(words)


def _join64(low, high):
    return low.astype(_U64) | lax.shift_left(high.astype(_U64), np.uint64(32))


# ---------------------------------------------------------------- Threefry


def _threefry2x32(*words):
    import jax.extend.random  # imported on first use, as random.py does

    return jax.extend.random.threefry2x32_p.bind(*words)


def _split_axis(shape: tuple) -> int | None:
    """XLA's axis to halve for 32-bit Threefry: the first even one, else the first longest
    (``None``: a scalar). ``ValueError`` when a symbolic size decides it."""
    if not shape:
        return None
    for i, d in enumerate(shape):
        if is_symbolic(d):
            raise ValueError(d)
        if d % 2 == 0:
            return i
    return max(range(len(shape)), key=lambda i: (shape[i], -i))


def _threefry(words, shape: tuple, wide: bool):
    """XLA's Threefry bits (uint32, or uint64 when ``wide``) and the new counter words."""
    k0, k1, c_lo, c_hi = words
    axis = None if wide else _split_axis(shape)
    if wide:
        half = shape
    elif axis is None:
        half = (1,)
    else:
        half = (*shape[:axis], (shape[axis] + 1) // 2, *shape[axis + 1 :])
    count = math.prod(half)
    lo, hi = _add64(c_lo, c_hi, lax.iota(_U32, count))
    x0, x1 = _threefry2x32(*(jnp.broadcast_to(v, (count,)) for v in (k0, k1, lo, hi)))
    if wide:
        bits = _join64(x0, x1).reshape(shape)
    elif axis is None:
        bits = x0.reshape(())
    else:  # the two words of a half-element are neighbours along the axis
        pairs = jnp.stack([x0.reshape(half), x1.reshape(half)], axis=axis + 1)
        full = (*shape[:axis], 2 * half[axis], *shape[axis + 1 :])
        bits = lax.slice_in_dim(pairs.reshape(full), 0, shape[axis], axis=axis)
    return bits, _add64(c_lo, c_hi, count)


# ---------------------------------------------------------------- Philox


def _philox4x32(x: list, k0, k1) -> list:
    """The 10 rounds of Philox-4x32 on four uint32 words."""
    for _ in range(_PHILOX_ROUNDS):
        (m0, m1), (w0, w1) = _PHILOX_MUL, _PHILOX_WEYL
        hi0, lo0 = lax.mulhi(x[0], m0), lax.mul(x[0], m0)
        hi1, lo1 = lax.mulhi(x[2], m1), lax.mul(x[2], m1)
        x = [hi1 ^ x[1] ^ k0, lo1, hi0 ^ x[3] ^ k1, lo0]
        k0, k1 = k0 + w0, k1 + w1
    return x


def _philox(words, shape: tuple, wide: bool):
    """XLA's Philox bits (uint32, or uint64 when ``wide``) and the new counter words."""
    k0, k1, c_lo, c_hi = words
    size = math.prod(shape)
    per_block = 2 if wide else 4
    blocks = (size + per_block - 1) // per_block
    # the 128-bit counter (s1 low, s1 high, s0 low, s0 high) + j: a carry out of s1
    # increments s0's half
    lo, hi = _add64(c_lo, c_hi, lax.iota(_U32, blocks))
    carry = (hi < c_hi) | ((hi == c_hi) & (lo < c_lo))
    s0_lo, s0_hi = _add64(k0, k1, carry.astype(_U32))
    x = _philox4x32([lo, hi, s0_lo, s0_hi], k0, k1)
    if wide:
        x = [_join64(x[0], x[1]), _join64(x[2], x[3])]
    flat = jnp.stack(x, axis=1).reshape(per_block * blocks)
    bits = lax.slice_in_dim(flat, 0, size).reshape(shape)
    return bits, _add64(c_lo, c_hi, blocks)


def _generate(key, *, shape: tuple, dtype: np.dtype, philox: bool):
    """``(new key, bits)`` as XLA's expansion of rng_bit_generator computes them."""
    words = _key_words(key)
    wide = dtype.itemsize == 8
    bits, (lo, hi) = (_philox if philox else _threefry)(words, shape, wide)
    return _new_key(key, [words[0], words[1], lo, hi]), bits.astype(dtype)


# ---------------------------------------------------------------- the lowering

_ALGORITHMS = {"RNG_DEFAULT": True, "RNG_PHILOX": True, "RNG_THREE_FRY": False}


@family.lowering("rng_bit_generator")
def rng_bit_generator(ctx, key, *, shape, dtype, algorithm, **_):
    """rng_bit_generator -> XLA's generator in uint32 arithmetic (Threefry: threefry2x32 on
    64-bit counters; Philox: mulhi/mul rounds on 128-bit counters), the counters from an
    iota, the words interleaved as XLA lays them out; RNG_DEFAULT is Philox, as on CPU."""
    philox = _ALGORITHMS.get(getattr(algorithm, "name", str(algorithm)))
    if philox is None:
        raise ctx.error(
            f"unknown algorithm {algorithm}; pass lax.RandomAlgorithm.RNG_THREE_FRY, "
            "RNG_PHILOX or RNG_DEFAULT"
        )
    shape, dtype = tuple(shape), np.dtype(dtype)
    size = math.prod(shape)
    if not is_symbolic(size) and size >= _COUNTERS:
        raise ctx.error(
            f"{size} values are more than 2^32 counters; draw them in several calls "
            "(split the key) or use jax.random with threefry2x32 keys"
        )
    if not philox and dtype.itemsize < 8:
        try:
            _split_axis(shape)
        except ValueError as err:
            raise ctx.error(
                f"32-bit RNG_THREE_FRY bits of shape {shape} are laid out along the first "
                f"even axis, which the symbolic size {err} decides; give the sizes up to the "
                "first even one statically, or use RNG_PHILOX / RNG_DEFAULT (any shape)"
            ) from err
    return ctx.decompose(_generate, key, shape=shape, dtype=dtype, philox=philox)


# ---------------------------------------------------------------- cases

_ALGS = {
    "threefry": lax.RandomAlgorithm.RNG_THREE_FRY,
    "philox": lax.RandomAlgorithm.RNG_PHILOX,
    "default": lax.RandomAlgorithm.RNG_DEFAULT,
}
# shapes XLA treats differently: scalar, empty, odd sizes (no even axis: the longest is
# halved), an even axis after odd ones, a block of 4 (Philox) not filled
_SHAPES = ((), (0,), (1,), (7,), (3, 5), (5, 3, 2), (3, 0, 5), (2, 3, 4), (9, 1, 3))
_KEY4 = np.array([0x12345678, 0x9ABCDEF0, 0x0BADF00D, 0xDEADBEEF], np.uint32)
# s1 = 2^64 - 3: the counters carry from the low into the high word and wrap around
# (Philox: the carry also increments s0's half of the 128-bit counter)
_EDGE4 = np.array([0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFD, 0xFFFFFFFF], np.uint32)
_RBG = ("rbg", "unsafe_rbg")


def _all_shapes(alg, dtype):
    """A case function: bits and new keys of every shape in ``_SHAPES``, from two keys; each
    draw uses the previous draw's new key (the state carries between calls)."""

    def fn(k, edge):
        outs = []
        for key in (k, edge):
            for shape in _SHAPES:
                new, bits = lax.rng_bit_generator(key, shape, dtype, alg)
                outs += [new, bits]
                key = new
        return outs

    return fn


def _draws(name: str, sampler, impl: str, shape=(3, 5), **kw):
    """A jax.random case under an rbg-family key made from uint32[4] key data."""
    return case(
        f"{impl}_{name}",
        lambda k: sampler(jax.random.wrap_key_data(k, impl=impl), shape),
        [_KEY4],
        **kw,
    )


def _data(key):
    return jax.random.key_data(key)


_EXACT = {"float32": (0.0, 0.0), "float64": (0.0, 0.0)}


def _cases() -> list:
    cases = []
    for alg_name, alg in _ALGS.items():
        for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
            wide = np.dtype(dtype).itemsize == 8
            cases.append(
                case(
                    f"rng_{alg_name}_{np.dtype(dtype).name}",
                    _all_shapes(alg, dtype),
                    [_KEY4, _EDGE4],
                    variants=["f64"] if wide else None,
                )
            )
    for alg_name, alg in _ALGS.items():
        cases.append(  # opsets 13-17: xor, or and shifts without Bitwise ops
            case(
                f"rng_{alg_name}_opset13",
                lambda k, alg=alg: lax.rng_bit_generator(k, (3, 5), np.uint32, alg),
                [_EDGE4],
                opset=13,
            )
        )
    cases += [
        case(  # the legacy uint64[2] key (x64 only)
            "rng_uint64_key",
            lambda k: [
                x for alg in _ALGS.values() for x in lax.rng_bit_generator(k, (5,), np.uint32, alg)
            ],
            [np.array([0x9ABCDEF012345678, 0xFFFFFFFFFFFFFFFE], np.uint64)],
            variants=["f64"],
        ),
        case(  # vmap keeps the first key only and draws the batch from it (JAX's rule)
            "rng_vmap",
            jax.vmap(lambda k: lax.rng_bit_generator(k, (3,))),
            [np.stack([_KEY4, _EDGE4])],
        ),
        case(
            "rng_philox_symbolic",
            lambda k, x: lax.rng_bit_generator(k, x.shape, algorithm=_ALGS["philox"]),
            [_KEY4, ("B", 3)],
            dim_sizes={"B": (3, 1, 0, 6)},
            no_unused_inputs=False,
        ),
        case(
            "rng_threefry_symbolic",
            lambda k, x: [
                *lax.rng_bit_generator(k, x.shape, algorithm=_ALGS["threefry"]),
                *lax.rng_bit_generator(k, (3, 4, *x.shape[1:]), algorithm=_ALGS["threefry"]),
            ],
            [_KEY4, (2, "B")],
            dim_sizes={"B": (3, 1, 0, 6)},
            no_unused_inputs=False,
        ),
        case(  # 64-bit Threefry bits: one counter per element, any shape
            "rng_threefry_uint64_symbolic",
            lambda k, x: lax.rng_bit_generator(k, x.shape, np.uint64, _ALGS["threefry"]),
            [_KEY4, ("B", 3)],
            dim_sizes={"B": (3, 1, 0, 6)},
            no_unused_inputs=False,
            variants=["f64"],
        ),
    ]
    for impl in _RBG:
        cases += [
            _draws("bits", lambda k, s: jax.random.bits(k, s), impl),
            _draws("bits_uint8", lambda k, s: jax.random.bits(k, s, np.uint8), impl, (7,)),
            _draws(
                "bits_uint64",
                lambda k, s: jax.random.bits(k, s, np.uint64),
                impl,
                variants=["f64"],
            ),
            _draws("uniform", jax.random.uniform, impl, variants=["f32", "f64"], tolerances=_EXACT),
            _draws("normal", jax.random.normal, impl, variants=["f32", "f64"]),
            _draws("randint", lambda k, s: jax.random.randint(k, s, -5, 1000), impl),
            _draws("split", lambda k, s: _data(jax.random.split(k, s)), impl, (2, 3)),
            _draws("fold_in", lambda k, s: _data(jax.random.fold_in(k, 12345)), impl),
            case(
                f"{impl}_seed",
                lambda s, impl=impl: _data(jax.random.key(s, impl=impl)),
                [np.array(-123456, np.int32)],
            ),
            case(
                f"{impl}_vmap_keys",
                lambda ks, impl=impl: jax.vmap(lambda k: jax.random.bits(k, (3,)))(
                    jax.random.wrap_key_data(ks, impl=impl)
                ),
                [np.stack([_KEY4, _EDGE4])],
            ),
        ]
    return cases


family.add_cases("rng_bit_generator", _cases)


register = family.register
