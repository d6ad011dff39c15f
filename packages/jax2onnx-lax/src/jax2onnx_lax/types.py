"""Type conversion and the primitives that only matter to JAX (copies, barriers).

Bit casts (``bitcast_convert_type``) live in :mod:`jax2onnx_lax.bits`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case
from jax2onnx_lax._casedata import INTS, edges

family = Family("lax")

_BF16 = np.dtype(jnp.bfloat16)
_FLOATS = (np.float16, _BF16, np.float32, np.float64)


@family.lowering(lax.convert_element_type_p)
def convert_element_type(ctx, x, *, new_dtype, **_):
    """convert_element_type -> Cast. float -> int saturates like XLA on CPU (NaN -> 0,
    out-of-range -> the type's min or max): Cast is undefined there, so only in-range values
    reach it and Where patches the rest. Cast truncates toward zero; float -> bool is
    ``x != 0`` (NaN -> True) as Cast does; int -> int wraps in both."""
    src, dst = np.dtype(ctx.avals_in[0].dtype), np.dtype(new_dtype)
    if src == dst:
        return ctx.op.Identity(x)
    if not (src.kind == "f" or src == _BF16) or dst.kind not in "iu":
        return ctx.cast(x, dst)
    if src.itemsize < 4:
        x, src = ctx.cast(x, np.float32), np.dtype(np.float32)
    info = np.iinfo(dst)
    lo, hi = np.asarray(info.min, src), np.asarray(float(info.max) + 1, src)  # powers of two
    above, below = ctx.op.GreaterOrEqual(x, hi), ctx.op.Less(x, lo)
    in_range = ctx.op.And(ctx.op.GreaterOrEqual(x, lo), ctx.op.Less(x, hi))
    out = ctx.cast(ctx.op.Where(in_range, x, np.zeros((), src)), dst)
    out = ctx.where(below, np.asarray(info.min, dst), out, dst)
    return ctx.where(above, np.asarray(info.max, dst), out, dst)


@family.lowering(lax.stop_gradient_p, lax.copy_p)
def identity(ctx, x, **_):
    """stop_gradient and copy matter only to JAX (autodiff, buffers): Identity."""
    return ctx.op.Identity(x)


@family.lowering(lax.optimization_barrier_p, lax.device_put_p)
def identities(ctx, *xs, **_):
    """optimization_barrier and device_put (several operands) only matter to XLA: Identity."""
    return [ctx.op.Identity(x) for x in xs]


@family.lowering("empty")
def empty(ctx, *_, shape, dtype, **__):
    """lax.empty -> zeros (what XLA on CPU gives) by Expand of a scalar (no large constant)."""
    return ctx.op.Expand(np.zeros((), dtype), ctx.shape(shape))


@family.lowering("empty2")
def empty2(ctx, *, dtype, **_):
    """empty2 (the scalar placeholder grad-of-cond residuals start from) -> a zero constant."""
    return ctx.const(np.zeros((), dtype))


# ---------------------------------------------------------------- cases

_FLOAT_VALUES = [
    *(np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.9, 2.5, 1e30, -1e30),
    *(127.5, 128.0, -128.5, -129.0, 255.9, 256.0, -1.0, 32767.5, 32768.0, -32769.0, 65535.5),
    *(65536.0, 2.0**31 - 128, 2.0**31, -(2.0**31), -(2.0**31) - 1e3, 4e9, 2.0**32, 1e19),
    *(-1e19, 2.0**63, -(2.0**63), 2.0**64, 1e300),
]


def _values(dtype) -> np.ndarray:
    """Inputs exercising a conversion from ``dtype``: edges, NaN, out-of-range values."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.array([True, False])
    if dtype.kind in "iu":
        return edges(dtype)
    with np.errstate(over="ignore"):
        return np.array(_FLOAT_VALUES, np.float64).astype(dtype)


def _convert_case(src, dst):
    src, dst = np.dtype(src), np.dtype(dst)
    name = f"{src.name}_to_{dst.name}"
    fed = np.dtype(np.float32) if src == _BF16 else src  # ORT cannot feed bfloat16

    def fn(x):
        y = lax.convert_element_type(lax.convert_element_type(x, src), dst)
        return y.astype(jnp.float32) if dst == _BF16 else y

    wide = 8 in (src.itemsize, dst.itemsize, fed.itemsize)
    return case(name, fn, [_values(fed)], variants=["f64" if wide else "f32"])


_ALL = (np.bool_, *INTS, *_FLOATS)
family.add_cases(
    lax.convert_element_type_p,
    lambda: [
        case(
            "f32_to_i32_symbolic",
            lambda x: lax.convert_element_type(x, np.int32),
            [("B", 4)],
            input_range=(-5.0, 5.0),
        ),
        case("weak_type_only", lambda x: x * 2, [(3,)], dtypes=[np.int8]),
        *[_convert_case(s, d) for s in _ALL for d in _ALL if np.dtype(s) != np.dtype(d)],
        case(
            "float32_subnormal_to_bool",
            lambda x: lax.convert_element_type(x, np.bool_),
            [np.array([1e-40, -1e-45], np.float32)],
            variants=["f32"],
            xfail="XLA on CPU flushes float32 subnormals to zero, so JAX gives False; "
            "ONNX Runtime keeps them (x != 0 is True). A platform flag, not semantics",
        ),
    ],
)


family.add_cases(
    lax.stop_gradient_p,
    lambda: [
        case("stop_gradient", lambda x: lax.stop_gradient(x) * 2.0, [("B", 3)]),
        case("stop_gradient_int", lax.stop_gradient, [np.array([1, -2], np.int8)]),
    ],
)
family.add_cases(lax.copy_p, lambda: [case("copy", lambda x: jnp.copy(x) + 1, [("B", 3)])])
family.add_cases(
    lax.device_put_p,
    lambda: [
        case("device_put", lambda x: jax.device_put(x) * 2, [("B", 3)]),
        case("device_put_pair", lambda x, y: jax.device_put((x, y)), [(3,), np.array([True])]),
    ],
)
family.add_cases(
    lax.optimization_barrier_p,
    lambda: [
        case(
            "barrier_pair",
            lambda x, y: lax.optimization_barrier((x, y + 1)),
            [("B", 3), np.array([1, 2], np.uint16)],
        ),
    ],
)


def _sin_times(v):
    return jnp.sin(v) * v


def _exp_plus_one(v):
    return jnp.exp(v) + 1.0


family.add_cases(
    "empty2",
    lambda: [  # the branches keep different residuals, so each fills the other's with empty2
        case(
            "grad_of_cond",
            jax.grad(lambda x: lax.cond(x.sum() > 0, _sin_times, _exp_plus_one, x).sum()),
            [("B",)],
        )
    ],
)
family.add_cases(
    "empty",
    lambda: [
        case("empty", lambda x: x + lax.empty((2, 3), x.dtype), [(2, 3)]),
        case("empty_symbolic", lambda x: x + lax.empty(x.shape, x.dtype), [("B", "T")]),
        case("empty_uint16", lambda x: x + lax.empty((4,), x.dtype), [edges(np.uint16)[:4]]),
        case("empty_bool", lambda x: x | lax.empty((2,), np.bool_), [np.array([True, False])]),
    ],
)


register = family.register
