"""jax.random: key arrays, the Threefry-2x32 hash and the primitives around them.

A key array (dtype ``key<fry>``) is stored in the graph as its uint32 key data of shape
``(..., 2)``, the layout of ``jax.random.key_data``; the core maps key avals, key constants
and key graph inputs and outputs to it. ``random_wrap``, ``random_unwrap`` and
``random_clone`` are therefore Identity.

``random_seed``, ``random_bits``, ``random_split`` and ``random_fold_in`` run the PRNG
implementation's own functions (``jax.extend.random.threefry_prng_impl``) traced on the
key data, so the graph computes exactly JAX's numbers under either value of
``jax_threefry_partitionable`` (read when converting). They decompose into
``threefry2x32`` and ``iota_2x32_shape``, lowered here to uint32 arithmetic (ONNX Runtime
has uint32 kernels for Add, BitShift, BitwiseXor and BitwiseOr; Add wraps modulo 2^32).
Below opset 18 (no BitwiseXor) each xor goes through bool bit vectors (``_intbits.py``):
about 1.4 times the nodes of the opset-18 graph, the same numbers. Samplers turn bits into
floats with ``bitcast_convert_type``, exact arithmetic below opset 26 (see ``bits.py``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case, is_symbolic, stored_type
from jax2onnx_lax._casedata import edges
from jax2onnx_lax._intbits import bit_vector, from_bits
from jax2onnx_lax._util import reshape

family = Family("lax")

_U32 = np.dtype(np.uint32)
# Threefry-2x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
# rotation distances of the 8 rounds of one cycle, and the key-schedule parity constant.
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
_PARITY = 0x1BD11BDA
_ROUNDS = 20


def _jex_random() -> Any:
    """``jax.extend.random``, imported on first use (``jax.extend`` costs 0.03 s to import)."""
    import jax.extend.random

    return jax.extend.random


def _u32(value: int) -> np.ndarray:
    return np.asarray(value, _U32)


# ---------------------------------------------------------------- threefry2x32


def _rotate_left(ctx, x, r: int):
    """32-bit rotation: (x << r) | (x >> (32 - r)), r in 1..31."""
    left = ctx.op.BitShift(x, _u32(r), direction="LEFT")
    return ctx.op.BitwiseOr(left, ctx.op.BitShift(x, _u32(32 - r), direction="RIGHT"))


@family.lowering("threefry2x32", min_opset=18)
def threefry2x32(ctx, k0, k1, x0, x1):
    """threefry2x32 -> 20 Threefry rounds unrolled in uint32 (Add, BitShift, BitwiseOr,
    BitwiseXor), a key injection after every 4 rounds; no ONNX op hashes. Operands
    broadcast as in JAX; after the first round both words depend on all four."""
    schedule = [k0, k1, ctx.op.BitwiseXor(ctx.op.BitwiseXor(k0, k1), _u32(_PARITY))]
    x0, x1 = ctx.op.Add(x0, schedule[0]), ctx.op.Add(x1, schedule[1])
    for d in range(_ROUNDS):
        x0 = ctx.op.Add(x0, x1)
        x1 = ctx.op.BitwiseXor(x0, _rotate_left(ctx, x1, _ROTATIONS[d % 8]))
        if d % 4 == 3:
            s = (d + 1) // 4
            x0 = ctx.op.Add(x0, schedule[s % 3])
            x1 = ctx.op.Add(ctx.op.Add(x1, schedule[(s + 1) % 3]), _u32(s))
    return [x0, x1]


@family.lowering("threefry2x32")
def threefry2x32_opset13(ctx, k0, k1, x0, x1):
    """threefry2x32 without BitwiseXor (opset < 18): the same 20 rounds, each xor a bool
    Xor of bit vectors reassembled by a MatMul (see _intbits). The words carry a trailing
    axis of size 1 throughout, so reading bits needs no Unsqueeze, and the rotation is
    folded into the shift amounts that read x1's bits."""
    k0, k1, x0, x1 = (ctx.op.Unsqueeze(v, ctx.i64([-1])) for v in (k0, k1, x0, x1))

    def bits(v, rotation=0):
        return bit_vector(ctx, v, _U32, rotation, column=True)

    parity = bits(np.asarray([_PARITY], _U32))
    k2 = from_bits(ctx, ctx.op.Xor(ctx.op.Xor(bits(k0), bits(k1)), parity), _U32, column=True)
    schedule = [k0, k1, k2]
    x0, x1 = ctx.op.Add(x0, schedule[0]), ctx.op.Add(x1, schedule[1])
    for d in range(_ROUNDS):
        x0 = ctx.op.Add(x0, x1)
        mixed = ctx.op.Xor(bits(x0), bits(x1, _ROTATIONS[d % 8]))
        x1 = from_bits(ctx, mixed, _U32, column=True)
        if d % 4 == 3:
            s = (d + 1) // 4
            x0 = ctx.op.Add(x0, schedule[s % 3])
            x1 = ctx.op.Add(ctx.op.Add(x1, schedule[(s + 1) % 3]), _u32(s))
    return [ctx.op.Squeeze(v, ctx.i64([-1])) for v in (x0, x1)]


@family.lowering("iota_2x32_shape")
def iota_2x32_shape(ctx, *, shape):
    """iota_2x32_shape -> the row-major flat index as int64 Range, reshaped; its high and
    low 32-bit words by Div by 2^32 and a wrapping Cast to uint32 (no 64-bit iota op)."""
    size = math.prod(shape)
    if is_symbolic(size):
        limit = ctx.op.Squeeze(ctx.dim(size), ctx.i64([0]))
    else:
        limit = ctx.i64(size)
    zero, one = ctx.i64(0), ctx.i64(1)
    flat = ctx.op.Range(zero, limit, one)
    index = reshape(ctx, flat, shape)
    low = ctx.cast(index, _U32)  # int64 -> uint32 keeps the low 32 bits
    if not is_symbolic(size) and size <= 2**32:
        high = ctx.op.Expand(_u32(0), ctx.shape(shape))
    else:
        high = ctx.cast(ctx.op.Div(index, np.asarray(2**32, np.int64)), _U32)
    return [high, low]


# ---------------------------------------------------------------- key primitives


def _impl(ctx, dtype) -> Any:
    """The PRNG implementation of a key dtype: threefry2x32 (JAX's default), or rbg /
    unsafe_rbg, whose bits come from lax.rng_bit_generator (rng_bits.py)."""
    impl = getattr(dtype, "_impl", None)  # KeyTy keeps its PRNGImpl there (no public API)
    r = _jex_random()
    if all(impl is not i for i in (r.threefry_prng_impl, r.rbg_prng_impl, r.unsafe_rbg_prng_impl)):
        name = getattr(impl, "name", dtype)
        raise ctx.error(
            f"keys of the {name} PRNG do not convert; threefry2x32 (JAX's default, "
            "jax.random.key / PRNGKey without impl=), rbg and unsafe_rbg lower to ONNX"
        )
    return impl


def _vmapped(fn: Callable[..., Any], times: int) -> Callable[..., Any]:
    for _ in range(times):
        fn = jax.vmap(fn)
    return fn


def _on_key_data(ctx, fn: Callable[..., Any], *inputs):
    """Inline ``fn`` traced with key-array operands given as their uint32 key data."""
    specs = []
    for aval in ctx.avals_in:
        dtype, shape = stored_type(aval.dtype, aval.shape)
        specs.append(jax.ShapeDtypeStruct(shape, dtype))
    closed = ctx.trace(fn, *specs)
    (out,) = ctx.inline(closed, list(inputs))
    return out


@family.lowering("random_seed")
def random_seed(ctx, seeds, *, impl):
    """random_seed -> the implementation's seed function per element (Threefry: the
    seed's high and low 32 bits as the two key words): shifts, masks and casts."""
    impl = _impl(ctx, ctx.avals_out[0].dtype)
    return _on_key_data(ctx, _vmapped(impl.seed, len(ctx.avals_in[0].shape)), seeds)


@family.lowering("random_bits")
def random_bits(ctx, keys, *, bit_width, shape):
    """random_bits -> Threefry of each key over the counters of ``shape`` (threefry2x32 on
    iota_2x32_shape, or on a uint32 iota when jax_threefry_partitionable is off), words
    combined into ``bit_width`` bits: JAX's own random_bits traced on the key data."""
    impl = _impl(ctx, ctx.avals_in[0].dtype)
    fn = _vmapped(lambda k: impl.random_bits(k, bit_width, shape), len(ctx.avals_in[0].shape))
    return _on_key_data(ctx, fn, keys)


@family.lowering("random_split")
def random_split(ctx, keys, *, shape):
    """random_split -> Threefry of each key over the counters of ``shape``, the two output
    words stacked into new key data: JAX's own split traced on the key data."""
    impl = _impl(ctx, ctx.avals_in[0].dtype)
    fn = _vmapped(lambda k: impl.split(k, shape), len(ctx.avals_in[0].shape))
    return _on_key_data(ctx, fn, keys)


@family.lowering("random_fold_in")
def random_fold_in(ctx, keys, msgs):
    """random_fold_in -> Threefry of the key over the counter pair (0, msg): JAX's own
    fold_in traced on the key data, keys and messages broadcast to the output shape."""
    impl = _impl(ctx, ctx.avals_in[0].dtype)
    out_shape = tuple(ctx.avals_out[0].shape)

    def fold(k, m):
        k = jnp.broadcast_to(k, (*out_shape, *k.shape[-1:]))
        return _vmapped(impl.fold_in, len(out_shape))(k, jnp.broadcast_to(m, out_shape))

    return _on_key_data(ctx, fold, keys, msgs)


@family.lowering("random_wrap", "random_unwrap", "random_clone")
def key_identity(ctx, x, **_):
    """random_wrap / random_unwrap / random_clone: a key array is its key data: Identity.

    A legacy raw ``uint32`` key (``jax.random.PRNGKey``) passes through
    ``random_clone`` as it is: no key type, so no implementation to check.
    """
    dtype = ctx.avals_out[0].dtype
    if ctx.eqn.primitive.name != "random_unwrap" and jax.dtypes.issubdtype(
        dtype, jax.dtypes.prng_key
    ):
        _impl(ctx, dtype)
    return ctx.op.Identity(x)


@family.lowering(jax.random.random_gamma_p, fallback=jax.random.random_gamma_p.impl)
def random_gamma(ctx, key, a, *, log_space):
    """random_gamma -> JAX's own sampler (Marsaglia-Tsang rejection: a scan over the
    elements, each a while loop drawing normals and uniforms from split keys) decomposed:
    If/Loop graphs around the Threefry hash. No ONNX op samples a gamma."""
    _impl(ctx, ctx.avals_in[0].dtype)
    return ctx.fallback()


# ---------------------------------------------------------------- XLA's own generators


@family.lowering("rng_uniform")
def xla_rng(ctx, *_, **__):
    """rng_uniform: refused. Its numbers are whatever XLA's backend generator gives (it is
    stateful), so a graph cannot promise them; jax.random and rng_bit_generator convert."""
    raise ctx.error(
        "XLA's stateful lax.rng_uniform gives backend-defined numbers and does not convert; "
        "use jax.random (any of its threefry2x32, rbg, unsafe_rbg keys), which converts "
        "bit-exactly"
    )


# ---------------------------------------------------------------- cases

_KEY = np.array([0x12345678, 0x9ABCDEF0], np.uint32)  # any two uint32 words are a key
_W = jax.random.wrap_key_data
_DATA = jax.random.key_data
_Q = ("B", 4)  # a symbolic batch: noise of x.shape


def _also13(c, **changes) -> list:
    """``c`` and its copy at opset 13, where Threefry and the bitwise ops use no Bitwise ops."""
    return [c, dataclasses.replace(c, name=f"{c.name}_opset13", opset=13, **changes)]


def _keyed(name: str, sampler: Callable[..., Any], shape: tuple = _Q, **kw) -> Any:
    """A sampler case with the key as an input and a symbolic batch (float32 and float64)."""
    return case(name, lambda k, x: sampler(_W(k), x), [_KEY, shape], **kw)


def _iota_2x32(x):
    from jax._src.random import prng  # the primitive has no public API

    return prng.iota_2x32_shape(x.shape)


_U32_EDGES = edges(np.uint32)


def _TF(*args):
    return _jex_random().threefry2x32_p.bind(*args)


family.add_cases(
    "threefry2x32",
    lambda: [
        *_also13(
            case(
                "threefry2x32_edges",
                _TF,
                [_U32_EDGES, _U32_EDGES[::-1], np.roll(_U32_EDGES, 3), np.roll(_U32_EDGES, 5)],
                counts={"BitShift": 40, "BitCast": 0},
            ),
            counts={"BitShift": 42, "Xor": 22, "MatMul": 21, "Unsqueeze": 4},
        ),
        *_also13(
            case(
                "threefry2x32_broadcast",
                lambda k, x0, x1: _TF(k[:1, :1], k[1:, :1], x0, x1),
                [np.array([[7], [0xFFFFFFFF]], np.uint32), ("B", 3), ("B", 3)],
                dtypes=[None, np.uint32, np.uint32],
                input_range=(0, 2**32),
            )
        ),
        case(
            "threefry_2x32_odd_count",
            lambda k, c: _jex_random().threefry_2x32(k, c),
            [_KEY, ("B",)],
            dtypes=[None, np.uint32],
            dim_sizes={"B": (5, 3, 8)},
        ),
    ],
)
family.add_cases(
    "iota_2x32_shape",
    lambda: [case("iota_2x32", _iota_2x32, [("B", 3, 2)], no_unused_inputs=False)],
)
family.add_cases(
    "random_seed",
    lambda: [
        case(
            "key_int32",
            lambda s: _DATA(jax.random.key(s)),
            [np.array(-123456, np.int32)],
            variants=["f32"],
        ),
        case("seed_vmap", lambda s: _DATA(jax.vmap(jax.random.key)(s)), [edges(np.int32)]),
        *_also13(
            case(
                "seed_int64",
                lambda s: jax.vmap(jax.random.PRNGKey)(s),
                [edges(np.int64)],
                variants=["f64"],
            )
        ),
        case(
            "prngkey_const",
            lambda x: x + jax.random.normal(jax.random.PRNGKey(7), x.shape, x.dtype),
            [_Q],
        ),
    ],
)
family.add_cases(
    "random_bits",
    lambda: [
        *[
            c
            for d, v in (
                (np.uint8, None),
                (np.uint16, None),
                (np.uint32, None),
                (np.uint64, ["f64"]),
            )
            for c in _also13(
                case(
                    f"bits_{np.dtype(d).name}",
                    lambda k, d=d: jax.random.bits(_W(k), (3, 5), d),
                    [_KEY],
                    variants=v,
                )
            )
        ],
        case(
            "bits_symbolic",
            lambda k, x: jax.random.bits(_W(k), x.shape),
            [_KEY, _Q],
            no_unused_inputs=False,  # static variants read only x's shape
        ),
        case("bits_const_key", lambda: jax.random.bits(jax.random.key(0), (4,)), []),
        case(
            "bits_vmap_keys",
            lambda ks: jax.vmap(lambda k: jax.random.bits(k, (3,)))(_W(ks)),
            [("B", 2)],
            dtypes=[np.uint32],
            input_range=(0, 2**32),
        ),
        *_also13(_keyed("normal", lambda k, x: x + jax.random.normal(k, x.shape, x.dtype))),
        *_also13(
            _keyed(
                "uniform",
                lambda k, x: x + jax.random.uniform(k, x.shape, x.dtype, -2.0, 3.0),
                counts={"BitCast": 0},
            ),
            variants=("f32",),  # normal_opset13 runs float64
        ),
        _keyed("bernoulli", lambda k, x: jax.random.bernoulli(k, lax.logistic(x))),
        *_also13(
            _keyed(
                "randint",
                lambda k, x: jax.random.randint(k, x.shape, -3, 1000) + x.astype(np.int32),
            ),
            variants=("f32",),
        ),
        _keyed("categorical", lambda k, x: jax.random.categorical(k, x, axis=-1)),
        # the other axis empty at run time: the counters' Reshape to (B, T) has a size 0
        *_also13(
            _keyed(
                "categorical_axis0_no_columns",
                lambda k, x: jax.random.categorical(k, x, axis=0),
                ("B", "T"),
                dim_sizes={"B": (3, 2, 4), "T": (5, 0, 3)},
            )
        ),
        _keyed(
            "categorical_no_rows",
            lambda k, x: jax.random.categorical(k, x, axis=-1),
            ("B", "T"),
            dim_sizes={"B": (3, 0, 2), "T": (5, 4, 1)},
        ),
        _keyed("gumbel", lambda k, x: x + jax.random.gumbel(k, x.shape, x.dtype)),
        _keyed(
            "truncated_normal",
            lambda k, x: x * jax.random.truncated_normal(k, -1.5, 2.0, x.shape, x.dtype),
            opset=26,
        ),
        _keyed("exponential", lambda k, x: x * jax.random.exponential(k, x.shape, x.dtype)),
        # JAX's permutation refuses symbolic sizes
        _keyed("permutation", lambda k, x: jax.random.permutation(k, x), (5, 4)),
        _keyed(
            "shuffle_axis1",
            lambda k, x: jax.random.permutation(k, x, axis=1, independent=True),
            (3, 6),
        ),
        _keyed("choice", lambda k, x: jax.random.choice(k, x, (6,))),
        case("permutation_int", lambda k: jax.random.permutation(_W(k), 9), [_KEY]),
        case(
            "choice_no_replace", lambda k: jax.random.choice(_W(k), 9, (4,), replace=False), [_KEY]
        ),
        case(
            "choice_p", lambda k, p: jax.random.choice(_W(k), 5, (7,), p=lax.abs(p)), [_KEY, (5,)]
        ),
        case(
            "normal_const_key",
            lambda x: x * jax.random.normal(jax.random.key(0), x.shape, x.dtype),
            [_Q],
        ),
        case(
            "normal_closed_key",
            lambda: (lambda key: lambda x: x + jax.random.normal(key, x.shape, x.dtype))(
                jax.random.key(3)
            ),
            [(2, 3)],
            factory=True,
        ),
        case(
            "vmap_split_keys",
            lambda k: jax.vmap(lambda kk: jax.random.normal(kk, (3,)))(jax.random.split(_W(k), 4)),
            [_KEY],
        ),
        *_also13(
            case(
                "vmap_keys_symbolic",
                lambda ks: jax.vmap(lambda k: jax.random.normal(k, (3,)))(_W(ks)),
                [("B", 2)],
                dtypes=[np.uint32],
                input_range=(0, 2**32),
            )
        ),
        case(
            "grad_reparameterized",
            jax.grad(
                lambda mu, s, k: jnp.sum((mu + s * jax.random.normal(_W(k), mu.shape)) ** 2),
                argnums=(0, 1),
            ),
            [_Q, _Q, _KEY],
        ),
        case(
            "clone",
            lambda k, x: x + jax.random.uniform(jax.random.clone(_W(k)), x.shape, x.dtype),
            [_KEY, _Q],
        ),
    ],
)


def _split_unpack(k, x):
    a, b, c = jax.random.split(_W(k), 3)
    return jax.random.normal(a, x.shape, x.dtype) * x + jax.random.uniform(
        b, x.shape, x.dtype
    ), _DATA(c)


def _scan_keys(k, x):
    def step(carry, key):
        return carry * 0.5 + jax.random.normal(key, carry.shape, carry.dtype), _DATA(key)

    return lax.scan(step, x, jax.random.split(_W(k), 4))


def _fori_fold_in(k, x):
    return lax.fori_loop(
        0, 3, lambda i, v: v + jax.random.normal(jax.random.fold_in(_W(k), i), v.shape, v.dtype), x
    )


def _split_until(keys, counts):
    """Per batch row, split a key until its counter reaches ``counts``: a batched while."""

    def one(key, n):
        def body(state):
            k, i = state
            return jax.random.split(k)[0], i + 1

        return lax.while_loop(lambda state: state[1] < n, body, (key, 0))[0]

    return _DATA(jax.vmap(one)(_W(keys), counts))


family.add_cases(
    "random_split",
    lambda: [
        *_also13(case("split", lambda k: _DATA(jax.random.split(_W(k))), [_KEY])),
        case("split_2d", lambda k: _DATA(jax.random.split(_W(k), (2, 3))), [_KEY]),
        case("split_legacy", lambda k: jax.random.split(k, 5), [_KEY]),
        case("split_unpack", _split_unpack, [_KEY, _Q]),
        case(
            "split_reshape",
            lambda k: _DATA(jax.random.split(_W(k), 6).reshape(2, 3).T[::-1]),
            [_KEY],
        ),
        case(
            "split_vmap",
            lambda ks: _DATA(jax.vmap(jax.random.split)(_W(ks))),
            [("B", 2)],
            dtypes=[np.uint32],
            input_range=(0, 2**32),
        ),
        case("scan_over_keys", _scan_keys, [_KEY, _Q]),
        case(  # the loop's carried keys are key data: the predicate broadcasts over it
            "vmap_while_key_carry",
            _split_until,
            [np.array([[1, 2], [3, 4], [5, 6]], np.uint32), np.array([0, 3, 1], np.int32)],
        ),
        case(
            "select_keys",
            lambda k, c: _DATA(jnp.where(c, jax.random.split(_W(k), 3), _W(k))),
            [_KEY, np.array([True, False, True])],
        ),
    ],
)
family.add_cases(
    "random_fold_in",
    lambda: [
        case("fold_in", lambda k: _DATA(jax.random.fold_in(_W(k), 12345)), [_KEY]),
        *_also13(
            case(
                "fold_in_vmap_msgs",
                lambda k, m: _DATA(jax.vmap(jax.random.fold_in, (None, 0))(_W(k), m)),
                [_KEY, ("B",)],
                dtypes=[None, np.int32],
            )
        ),
        case(
            "fold_in_vmap_keys",
            lambda ks: _DATA(jax.vmap(lambda k: jax.random.fold_in(k, 7))(_W(ks))),
            [("B", 2)],
            dtypes=[np.uint32],
            input_range=(0, 2**32),
        ),
        case("fori_fold_in", _fori_fold_in, [_KEY, _Q]),
    ],
)
family.add_cases(
    jax.random.random_gamma_p,
    lambda: [
        case(
            "gamma",
            lambda k, a: jax.random.gamma(_W(k), lax.abs(a) + 0.2),
            [_KEY, (3,)],
        ),
        case("beta", lambda k: jax.random.beta(_W(k), 2.0, 3.0, (2,)), [_KEY]),
        case("loggamma", lambda k, a: jax.random.loggamma(_W(k), lax.abs(a) + 0.05), [_KEY, (4,)]),
        case("dirichlet", lambda k, a: jax.random.dirichlet(_W(k), lax.abs(a) + 0.5), [_KEY, (3,)]),
        case(
            "gamma_vmap_keys",
            lambda ks: jax.vmap(lambda k: jax.random.gamma(k, 2.0, (3,)))(_W(ks)),
            [("B", 2)],
            dtypes=[np.uint32],
            input_range=(0, 2**32),
        ),
    ],
)
family.add_cases(
    "random_wrap",
    lambda: [
        case("key_data_roundtrip", lambda k: _DATA(_W(_DATA(_W(k)))), [_KEY]),
        case(
            "wrap_batched_key_data",
            lambda ks: _DATA(_W(ks)[::-1]),  # a layout op (rev) on a batch of keys
            [("B", 2)],
            dtypes=[np.uint32],
            input_range=(0, 2**32),
        ),
        case("clone", lambda k: _DATA(jax.random.clone(_W(k))), [_KEY]),
        case("clone_raw_key", lambda k: jax.random.clone(k), [_KEY]),  # PRNGKey's uint32[2]
        case(
            "clone_raw_key_then_sample",
            lambda k, x: x + jax.random.uniform(jax.random.clone(k), x.shape),
            [_KEY, _Q],
            variants=("f32",),
        ),
    ],
)


register = family.register
