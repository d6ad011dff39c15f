"""Every primitive the lax plugin lowers, at every dtype JAX accepts, on small and zero-size arrays.

Each probe reaches one primitive; `jax2onnx_testkit.sweep.sweep` asks JAX
which of bool, int8..uint64, float16, bfloat16, float32, float64, complex64
and complex128 it takes, converts them all and compares with JAX. A probe's
``known`` lists the failures the suite expects, each with its reason; the
test fails when a failure is not listed and when a listed one passes.
``test_every_lowering_is_swept`` keeps the table complete: a new lowering
without a probe (or a reason in ``NOT_SWEPT``) fails it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jax2onnx_lax._manifest import MANIFEST
from jax2onnx_testkit.sweep import Probe, check_complete, check_sweep

L = lax.linalg
I32 = np.int32
U32 = np.uint32
X = ((2, 3),)
X0 = ((0, 3),)
XX = ((2, 3), (2, 3))
XX0 = ((0, 3), (0, 3))
M = ((3, 3),)
M0 = ((0, 0),)


def P(primitive, fn, shapes=X, zero=X0, **kw):
    return Probe(primitive, fn, shapes, zero, **kw)


def unary(name, fn=None, **kw):
    return P(name, fn or getattr(lax, name), **kw)


def binary(name, fn=None, **kw):
    return P(name, fn or getattr(lax, name), XX, XX0, **kw)


def _ints(lo, hi, positions=(0, 1, 2)):
    """Draws integers in ``[lo, hi)`` at ``positions`` (floats and the rest as usual)."""

    def data(rng, shape, dtype, i):
        if i in positions and dtype.kind in "iu":
            return rng.integers(max(lo, 0) if dtype.kind == "u" else lo, hi, size=shape)
        return None

    return data


def _positive(rng, shape, dtype, i):
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return rng.uniform(0.25, 3.0, size=shape)
    return None


def _shift_amounts(rng, shape, dtype, i):
    if i == 1 and dtype.kind in "iu":
        return rng.integers(0, dtype.itemsize * 8 + 2, size=shape)
    return None


def _spd(rng, shape, dtype, i):
    """Hermitian positive-definite matrices (and batches of them)."""
    if dtype.kind not in "fc" or i != 0:
        return None
    a = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if dtype.kind == "c" else 0)
    n = shape[-1]
    return a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)


def _upper_spd(rng, shape, dtype, i):
    a = _spd(rng, shape, dtype, i)
    return None if a is None else np.triu(a)


def _hermitian(rng, shape, dtype, i):
    a = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if dtype.kind == "c" else 0)
    return (a + np.conj(np.swapaxes(a, -1, -2))) / 2


def _add_any(x, y):
    from jax._src.ad_util import add_jaxvals_p  # what JAX's autodiff sums cotangents with

    return add_jaxvals_p.bind(x, y)


def _key(fn):
    """A probe function of (dtype carrier, uint32[2] key data)."""
    return lambda x, k: fn(x, jax.random.wrap_key_data(k))


_KEY = {1: U32}
_KEY_DATA = _ints(0, 2**31)

UNARY = [
    unary("abs"),
    *(unary(n, data=_positive) for n in ("acosh", "log", "rsqrt", "sqrt", "lgamma", "digamma")),
    *(
        unary(n)
        for n in (
            "acos",
            "asin",
            "asinh",
            "atan",
            "atanh",
            "cbrt",
            "ceil",
            "clz",
            "cos",
            "cosh",
            "erf",
            "erfc",
            "exp",
            "exp2",
            "expm1",
            "floor",
            "imag",
            "is_finite",
            "log1p",
            "logistic",
            "neg",
            "population_count",
            "real",
            "round",
            "sign",
            "sin",
            "sinh",
            "square",
            "tan",
            "tanh",
            "bessel_i0e",
            "bessel_i1e",
            "conj",
        )
    ),
    unary("erf_inv", lambda x: lax.erf_inv(x * 0.3)),
    unary("not", lax.bitwise_not),
    unary("copy", lax.copy_p.bind),
    unary("stop_gradient", lax.stop_gradient),
    unary("device_put", jax.device_put),
    unary("optimization_barrier", lambda x: lax.optimization_barrier((x, x))),
    unary("reduce_precision", lambda x: lax.reduce_precision(x, 5, 2)),
    unary("integer_pow", lambda x: lax.integer_pow(x, 3)),
    unary("integer_pow", lambda x: lax.integer_pow(x, -2), label="negative", data=_positive),
    unary(
        "convert_element_type",
        lambda x: [
            x.astype(t)
            for t in ("bool", "int8", "uint16", "int32", "float16", "bfloat16", "float32")
        ],
    ),
    unary(
        "convert_element_type",
        lambda x: (
            [x.astype(t) for t in ("int64", "uint64", "float64", "complex128")]
            if jax.config.jax_enable_x64
            else [x.astype("complex64")]
        ),
        label="wide",
    ),
    unary(
        "bitcast_convert_type",
        lambda x: lax.bitcast_convert_type(
            x, {1: "uint8", 2: "int16", 4: "float32", 8: "int64", 16: "float64"}[x.dtype.itemsize]
        ),
    ),
    unary("bitcast_convert_type", lambda x: lax.bitcast_convert_type(x, "uint8"), label="bytes"),
    unary("iota", lambda x: lax.broadcasted_iota(x.dtype, x.shape, 1)),
    unary("empty", lambda x: lax.empty(x.shape, x.dtype)),
]

BINARY = [
    *(binary(n) for n in ("add", "sub", "mul", "max", "min", "atan2", "nextafter", "complex")),
    *(binary(n) for n in ("eq", "ne", "lt", "le", "gt", "ge")),
    binary("eq_to", lax.eq_to_p.bind),
    binary("le_to", lax.le_to_p.bind),
    binary("lt_to", lax.lt_to_p.bind),
    binary("add_any", _add_any),
    binary("div", data=_ints(1, 6, (1,))),
    binary("div", lambda x, y: lax.div(x, -y), label="negative", data=_ints(1, 6, (1,))),
    binary("rem", data=_ints(1, 6, (1,))),
    binary("rem", lambda x, y: lax.rem(x, -y), label="negative", data=_ints(1, 6, (1,))),
    binary("pow", data=_positive),
    binary("and", lax.bitwise_and),
    binary("or", lax.bitwise_or),
    binary("xor", lax.bitwise_xor),
    binary("mulhi", lax.mulhi),
    *(
        binary(n, data=_shift_amounts)
        for n in ("shift_left", "shift_right_arithmetic", "shift_right_logical")
    ),
    *(binary(n, data=_positive) for n in ("igamma", "igammac", "igamma_grad_a", "polygamma")),
    binary(
        "polygamma",
        lambda n, x: lax.polygamma(jnp.round(n * 0 + 1), x),
        data=_positive,
        label="first",
    ),
    binary("zeta", lambda s, q: lax.zeta(s + 1.5, q), data=_positive),
    P(
        "regularized_incomplete_beta",
        lambda a, b, x: lax.betainc(a, b, x * 0.25),
        XX + X,
        XX0 + X0,
        data=_positive,
    ),
    P("clamp", lambda lo, x, hi: lax.clamp(lo, x, hi), ((), (2, 3), ()), ((), (0, 3), ())),
    P("select_n", lambda p, x, y: lax.select_n(p, x, y), XX + X, XX0 + X0, fixed={0: np.bool_}),
    P(
        "select_n",
        lambda p, x, y, z: lax.select_n(p, x, y, z),
        XX * 2,
        XX0 * 2,
        fixed={0: I32},
        data=_ints(0, 3, (0,)),
        label="int32_predicate",
    ),
]


def _index(hi):
    return lambda rng, shape, dtype, i: rng.integers(-hi, hi, size=shape) if i > 0 else None


def _distinct(rng, shape, dtype, i):
    """Indices that name each row once (a scatter's result is undefined for repeated ones)."""
    return rng.permutation(shape[0]) if i == 1 else None


IDX = {1: I32}
SHAPES = [
    unary("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (4, *x.shape), (1, 2))),
    binary("concatenate", lambda x, y: lax.concatenate([x, y], 1)),
    unary(
        "pad",
        lambda x: lax.pad(
            x, x.ravel()[0] if x.size else jnp.zeros((), x.dtype), ((1, 2, 1), (-1, 0, 0))
        ),
    ),
    unary("reshape", lambda x: x.reshape(3, -1) if x.size else x.reshape(3, 0)),
    unary("rev", lambda x: lax.rev(x, (0, 1))),
    unary("slice", lambda x: lax.slice(x, (0, 1), (x.shape[0], 3), (1, 2))),
    unary("squeeze", lambda x: lax.squeeze(x[:, None], (1,))),
    unary("transpose", lambda x: lax.transpose(x, (1, 0))),
    unary("tile", lambda x: lax.tile(x, (2, 1))),
    unary("stack", lambda x: lax.stack_p.bind(x, x, axis=1) if hasattr(lax, "stack_p") else x),
    unary("unstack", lambda x: jnp.unstack(x, axis=1)),
    unary("split", lambda x: lax.split(x, (1, 2), axis=1)),
    P(
        "dynamic_slice",
        lambda x, i: lax.dynamic_slice(x, (i, i), (x.shape[0], 2)),
        ((2, 3), ()),
        ((0, 3), ()),
        fixed=IDX,
        data=_index(3),
    ),
    P(
        "dynamic_update_slice",
        lambda x, u, i: lax.dynamic_update_slice(x, u, (i, i)),
        ((2, 3), (1, 2), ()),
        ((0, 3), (0, 2), ()),
        fixed={2: I32},
        data=_index(3),
    ),
    P("gather", lambda x, i: x[i, 1:], ((2, 3), (4,)), ((0, 3), (0,)), fixed=IDX, data=_index(2)),
    P(
        "gather",
        lambda x, i: jnp.take_along_axis(x, i, axis=1),
        ((2, 3), (2, 4)),
        ((0, 3), (0, 4)),
        fixed=IDX,
        data=_index(3),
        label="along_axis",
    ),
    P(
        "scatter-add",
        lambda x, i, v: x.at[i].add(v),
        ((2, 3), (4,), (4, 3)),
        ((0, 3), (0,), (0, 3)),
        fixed=IDX,
        data=_index(2),
        label="duplicates",
    ),
    *(
        P(
            name,
            lambda x, i, v, m=method: getattr(x.at[i], m)(v),
            ((2, 3), (2,), (2, 3)),
            ((0, 3), (0,), (0, 3)),
            fixed=IDX,
            data=_distinct,
        )
        for name, method in (
            ("scatter", "set"),
            ("scatter-add", "add"),
            ("scatter-mul", "multiply"),
            ("scatter-min", "min"),
            ("scatter-max", "max"),
        )
    ),
    P(
        "scatter-sub",
        lambda x, i, v: lax.scatter_sub(
            x, i[:, None], v, lax.ScatterDimensionNumbers((1,), (0,), (0,))
        ),
        ((2, 3), (4,), (4, 3)),
        ((0, 3), (0,), (0, 3)),
        fixed=IDX,
        data=_ints(0, 2, (1,)),
    ),
]

_WINDOW = dict(window_dimensions=(1, 2), window_strides=(1, 1), padding=((0, 0), (0, 0)))


def _sas(t, x):
    return lax.select_and_scatter_add_p.bind(t, x, select_prim=lax.ge_p, **_WINDOW)


def _sga(t, x):
    return lax.select_and_gather_add_p.bind(
        t, x, select_prim=lax.ge_p, base_dilation=(1, 1), window_dilation=(1, 1), **_WINDOW
    )


REDUCTIONS = [
    *(
        unary(f"reduce_{n}", lambda x, n=n: getattr(lax, f"reduce_{n}")(x, (1,)))
        for n in ("sum", "max", "min", "prod", "and", "or", "xor")
    ),
    unary(
        "reduce_sum",
        lambda x: lax.reduce_sum_p.bind(x, axes=(0,), out_sharding=None),
        label="leading",
    ),
    unary("argmax", lambda x: lax.argmax(x, 1, np.int32)),
    unary("argmin", lambda x: lax.argmin(x, 0, np.int32)),
    unary("reduce", lambda x: lax.reduce(x, jnp.zeros((), x.dtype), lambda a, b: b, (1,))),
    binary(
        "reduce",
        lambda x, y: lax.reduce(
            (x, y), (jnp.zeros((), x.dtype),) * 2, lambda a, b: (a[0], b[1]), (1,)
        ),
        label="variadic",
    ),
    *(
        unary(f"cum{n}", lambda x, n=n: getattr(lax, f"cum{n}")(x, 1))
        for n in ("sum", "prod", "max", "min", "logsumexp")
    ),
    unary("cumsum", lambda x: lax.cumsum(x, 0, reverse=True), label="reverse"),
    *(
        unary(
            f"reduce_window_{n}",
            lambda x, n=n: lax.reduce_window(
                x,
                jnp.asarray(0 if n == "sum" else x.ravel()[0] if x.size else 0, x.dtype),
                {"sum": lax.add, "max": lax.max, "min": lax.min}[n],
                (1, 2),
                (1, 1),
                "VALID",
            ),
            contains=(f"reduce_window_{n}", "reduce_window"),
        )
        for n in ("sum", "max", "min")
    ),
    unary(
        "reduce_window",
        lambda x: lax.reduce_window(
            x, jnp.zeros((), x.dtype), lambda a, b: b, (1, 2), (1, 1), "VALID"
        ),
    ),
    binary(
        "reduce_window",
        lambda x, y: lax.reduce_window(
            (x, y), (jnp.zeros((), x.dtype),) * 2, lambda a, b: (a[0], b[1]), (1, 2), (1, 1), "SAME"
        ),
        label="variadic",
    ),
    P("select_and_scatter_add", _sas, ((2, 2), (2, 3)), ((0, 2), (0, 3))),
    binary(
        "select_and_gather_add",
        _sga,
        known={
            ("bool", "small"): "JAX gives False everywhere on bool (XLA packs value and tangent "
            "into one word and loses the tangent bit); the export gives the selected tangent"
        },
    ),
    unary("sort", lambda x: lax.sort(x, dimension=1)),
    binary("sort", lambda x, y: lax.sort((x, y), dimension=0, num_keys=1), label="two"),
    unary("top_k", lambda x: lax.top_k(x, 2)),
    unary("approx_top_k", lambda x: lax.approx_max_k(x, 2)),
    unary("approx_top_k", lambda x: lax.approx_min_k(x, 2), label="min"),
]


def _conv(x, w, **kw):
    return lax.conv_general_dilated(x, w, (1,), "SAME", **kw)


def _geqp3(x, jpvt):
    from jax._src.lax import linalg as private  # geqp3 has no public wrapper

    return private.geqp3(x, jpvt)


def _svd(x):
    s = L.svd(x, compute_uv=False)
    u, s2, vh = L.svd(x, full_matrices=False)
    return s, (u * s2[..., None, :]) @ vh  # the factors up to signs: their product


LINEAR = [
    binary("dot_general", lambda x, y: lax.dot_general(x, y, (((1,), (1,)), ((), ())))),
    binary(
        "dot_general",
        lambda x, y: lax.dot_general(x, y, (((1,), (1,)), ((0,), (0,)))),
        label="batched",
    ),
    P(
        "ragged_dot_general",
        lambda x, w, g: lax.ragged_dot(x, w, g),
        ((4, 3), (2, 3, 2), (2,)),
        ((0, 3), (2, 3, 2), (2,)),
        fixed={2: I32},
        data=lambda rng, shape, dtype, i: (
            (np.array([1, 3]) if shape[0] and shape != (0, 3) else None) if i == 2 else None
        ),
    ),
    P(
        "conv_general_dilated",
        lambda x, w: _conv(x, w),
        ((1, 2, 5), (3, 2, 2)),
        ((0, 2, 5), (3, 2, 2)),
    ),
    P(
        "conv_general_dilated",
        lambda x, w: _conv(x, w, feature_group_count=2),
        ((1, 2, 5), (4, 1, 2)),
        ((0, 2, 5), (4, 1, 2)),
        label="grouped",
    ),
]

LINALG = [
    P("cholesky", L.cholesky, M, M0, data=_spd),
    P(
        "cholesky_update",
        lambda r, w: L.cholesky_update(r, w),
        ((3, 3), (3,)),
        ((0, 0), (0,)),
        data=_upper_spd,
    ),
    P(
        "eig",
        lambda x: L.eig(x, compute_left_eigenvectors=False, compute_right_eigenvectors=False),
        M,
        M0,
        data=_hermitian,
    ),
    P("eigh", lambda x: L.eigh(x)[1], M, M0, data=_hermitian),
    P("geqrf", lambda x: jnp.linalg.qr(x, mode="raw"), ((4, 3),), ((0, 3),)),
    # no zero-size probe: XLA's CPU geqp3 dies of a floating-point exception on a 0x3 matrix
    P("geqp3", _geqp3, ((4, 3), (3,)), None, fixed={1: I32}, data=_ints(0, 1, (1,))),
    P("hessenberg", L.hessenberg, M, ((2, 0, 0),), known={}),
    P(
        "householder_product",
        lambda a, t: L.householder_product(a, t),
        ((4, 3), (2,)),
        ((0, 0), (0,)),
    ),
    P("lu", L.lu, M, M0),
    P(
        "lu_pivots_to_permutation",
        lambda p: L.lu_pivots_to_permutation(p, 4),
        ((3,),),
        ((0,),),
        fixed={0: I32},
        data=_ints(0, 4, (0,)),
    ),
    P(
        "ormqr",
        lambda a, t, c: L.ormqr(a, t, c, left=True, transpose=False),
        ((4, 3), (2,), (4, 2)),
        ((0, 0), (0,), (0, 2)),
    ),
    P("qr", lambda x: L.qr(x, full_matrices=False), ((4, 3),), ((0, 3),)),
    P(
        "schur",
        lambda x: L.schur(x, compute_schur_vectors=False)[0].diagonal().real.sum(),
        M,
        M0,
        data=_hermitian,
    ),
    P("svd", _svd, ((4, 3),), ((0, 3),)),
    P(
        "symmetric_product",
        lambda a, c: L.symmetric_product(a, c),
        ((3, 2), (3, 3)),
        ((0, 2), (0, 0)),
    ),
    P(
        "triangular_solve",
        lambda a, b: L.triangular_solve(a, b, left_side=True, lower=True),
        ((3, 3), (3, 2)),
        ((0, 0), (0, 2)),
        data=_spd,
    ),
    P("tridiagonal", lambda x: L.tridiagonal(x)[1], M, M0, data=_hermitian),
    P(
        "tridiagonal_solve",
        lambda dl, d, du, b: L.tridiagonal_solve(dl, d + 4, du, b),
        ((3,), (3,), (3,), (3, 2)),
        ((0,), (0,), (0,), (0, 2)),
    ),
    P(
        "custom_linear_solve",
        lambda m, b: lax.custom_linear_solve(
            lambda v: m @ v, b, lambda mv, r: jnp.linalg.solve(m, r)
        ),
        M + ((3,),),
        M0 + ((0,),),
        data=_spd,
    ),
]

FFT = [
    unary("fft", jnp.fft.fft, zero=((0, 4),)),
    unary("fft", jnp.fft.rfft, zero=((0, 4),), label="real"),
    unary("fft", lambda x: jnp.fft.irfft(x, 4), zero=((0, 3),), label="inverse_real"),
]


def _rbg(x, k):
    return lax.rng_bit_generator(k, x.shape, dtype=x.dtype)


def _iota_2x32(x):
    from jax._src.random import prng  # the primitive has no public API

    return prng.iota_2x32_shape(x.shape)


def _threefry(k, c):
    from jax import extend

    return extend.random.threefry2x32_p.bind(k[:1], k[1:], c, c)


UINTS = ("uint8", "uint16", "uint32", "uint64")
RANDOM = [
    P(
        "random_bits",
        _key(lambda x, k: jax.random.bits(k, x.shape, x.dtype)),
        ((2, 3), (2,)),
        ((0, 3), (2,)),
        fixed=_KEY,
        data=_KEY_DATA,
        dtypes=UINTS,
    ),
    P(
        "random_seed",
        lambda s: jax.random.key_data(jax.random.key(s)),
        ((),),
        None,
        dtypes=("int8", "uint8", "int32", "uint32", "int64", "uint64"),
    ),
    *(
        P(
            name,
            lambda k, f=fn: jax.random.key_data(f(jax.random.wrap_key_data(k))),
            ((2,),),
            None,
            dtypes=("uint32",),
            data=_KEY_DATA,
            contains=(name,),
        )
        for name, fn in (
            ("random_wrap", lambda k: k),
            ("random_unwrap", lambda k: k),
            ("random_split", jax.random.split),
            ("random_clone", jax.random.clone),
            ("random_fold_in", lambda k: jax.random.fold_in(k, 7)),
        )
    ),
    P(
        "random_gamma",
        _key(lambda a, k: jax.random.gamma(k, a + 0.5)),
        ((3,), (2,)),
        ((0,), (2,)),
        fixed=_KEY,
        data=_positive,
    ),
    P(
        "rng_bit_generator",
        _rbg,
        ((2, 3), (4,)),
        ((0, 3), (4,)),
        fixed={1: U32},
        data=_KEY_DATA,
        dtypes=UINTS,
    ),
    P("threefry2x32", _threefry, ((2,), (3,)), ((2,), (0,)), dtypes=("uint32",), data=_KEY_DATA),
    unary("iota_2x32_shape", _iota_2x32, dtypes=("float32",)),
]

CONTROL = [
    unary("cond", lambda x: lax.cond(x.size > 3, lambda y: lax.rev(y, (1,)), lambda y: y, x)),
    unary(
        "cond",
        lambda x: lax.switch(
            jnp.int32(x.size) % 3, [lambda y: y, lambda y: lax.rev(y, (0,)), lambda y: y[::-1]], x
        ),
        label="switch",
    ),
    unary(
        "while",
        lambda x: lax.while_loop(
            lambda c: c[0] < 3, lambda c: (c[0] + 1, lax.rev(c[1], (0,))), (jnp.int32(0), x)
        )[1],
    ),
    unary("scan", lambda x: lax.scan(lambda c, y: (lax.rev(c, (0,)), c), x[0], x)),
]

NUMPY_API = [
    unary("lax.numpy.arange", lambda x: jnp.arange(5, dtype=x.dtype), eager=True, zero=None),
    unary(
        "lax.numpy.linspace", lambda x: jnp.linspace(0, 4, 5, dtype=x.dtype), eager=True, zero=None
    ),
    P("lax.numpy.clip", lambda x, lo, hi: jnp.clip(x, lo, hi), XX + X, XX0 + X0, eager=True),
    P(
        "lax.numpy.compress",
        lambda c, x: jnp.compress(c, x, axis=1),
        ((3,), (2, 3)),
        ((3,), (0, 3)),
        fixed={0: np.bool_},
        eager=True,
    ),
    unary("lax.numpy.nonzero", lambda x: jnp.nonzero(x), eager=True),
    unary("lax.numpy.unique", lambda x: jnp.unique(x), eager=True),
    unary("lax.image.resize", lambda x: jax.image.resize(x, (4, 5), "linear"), eager=True),
    unary(
        "lax.image.scale_and_translate",
        lambda x: jax.image.scale_and_translate(
            x, (4, 5), (0, 1), jnp.ones(2), jnp.zeros(2), "linear"
        ),
        eager=True,
    ),
]

PROBES = [
    *UNARY,
    *BINARY,
    *SHAPES,
    *REDUCTIONS,
    *LINEAR,
    *LINALG,
    *FFT,
    *RANDOM,
    *CONTROL,
    *NUMPY_API,
]

NOT_SWEPT = {
    "rng_uniform": "refused by design: XLA's stateful generator has no defined numbers",
    "dim_as_value": "only exists for symbolic dimensions (symbolic cases of every shape op)",
    "empty2": "only in grad-of-cond residuals (its cases make it; it is a constant of the dtype)",
    "lax.lu_pivot": "lu's own pivot search on its column magnitudes: swept through the lu probe",
}


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_dtype_sweep(probe):
    check_sweep(probe)


def test_every_lowering_is_swept():
    lowered = {name for module in MANIFEST.values() for name in module.get("lowers", ())}
    check_complete(lowered, PROBES, NOT_SWEPT)
