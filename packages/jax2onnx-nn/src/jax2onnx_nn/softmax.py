"""Axis-wise ``jax.nn`` functions as macro primitives: the softmax family, glu, one_hot.

``softmax``, ``log_softmax``, ``logsumexp``, ``standardize``, ``glu`` and
``one_hot`` take an ``axis`` parameter, so their batching rule is explicit: it
moves the batch axis to the front and binds the same primitive with the axis
renumbered, which keeps the single ONNX op under ``jax.vmap``. Softmax and
log-softmax have explicit JVP rules that bind the primitive for the primal (so
the graph of ``jax.grad`` still holds ``Softmax``/``LogSoftmax``); the others
use JAX's derivative of the original function. ``one_hot`` is piecewise
constant: its tangent is zero (float labels under ``jax.grad`` give zeros).

Calls the single op does not cover (``where=``, ``b=``, ``return_sign=True``,
array ``mean``/``variance``) are not intercepted: they run the original
function and convert through its decomposition.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from jax2onnx.plugin import (
    Family,
    batch_at_front,
    case,
    is_symbolic,
    kernel_dtypes,
    onnx_dtype,
)
from jax2onnx_nn._util import FLOATS, canonical_axes, macro, shifted_axis

family = Family("nn")
register = family.register

_NN = jax.nn  # the originals, captured before any interception patches them
_softmax, _log_softmax, _logsumexp = _NN.softmax, _NN.log_softmax, _NN.logsumexp
_standardize, _glu, _one_hot = _NN.standardize, _NN.glu, _NN.one_hot


def _hashable_axis(axis: Any) -> bool:
    return axis is None or isinstance(axis, (int, tuple))


def _axis_batching(get_prim):
    """Batch axis to the front, ``axis`` renumbered, the same primitive bound again."""

    def rule(args, dims, *, axis, **params):
        (x,) = batch_at_front(args, dims)
        return get_prim().bind(x, axis=shifted_axis(axis, x.ndim - 1), **params), 0

    return rule


def _tangent(t):
    return ad.instantiate_zeros(t) if isinstance(t, ad.Zero) else t


# -- softmax -------------------------------------------------------------------


def _softmax_jvp(primals, tangents, *, axis, where):
    """JAX's softmax JVP: ``dy = y * (dx - sum(y * dx, axis))``; the primal stays one primitive."""
    (x,), (dx,) = primals, tangents
    y = softmax_p.bind(x, axis=axis, where=where)
    dx = _tangent(dx)
    return y, y * (dx - jnp.sum(y * dx, axis, keepdims=True))


softmax_p = macro(
    family,
    "softmax",
    _softmax,
    ["jax.nn.softmax"],
    batching=_axis_batching(lambda: softmax_p),
    jvp=_softmax_jvp,
    accept=lambda a: a["where"] is None and _hashable_axis(a["axis"]),
)


def _single_axis(ctx, axis) -> int | None:
    ndim = len(ctx.avals_in[0].shape)
    axes = canonical_axes(axis, ndim)
    return axes[0] if len(axes) == 1 else None


_SOFTMAX_EDGES = np.array(
    [[0.0, 1.0, 2.0], [-np.inf, -np.inf, -np.inf], [-np.inf, 0.0, 1.0], [np.inf, 0.0, 1.0]]
    + [[np.nan, 0.0, 1.0], [1e30, -1e30, 0.0]]
)
_MASK = np.array([[True, False, True, True], [False, True, True, False]])


@family.lowering(
    softmax_p,
    native_dtypes=kernel_dtypes("Softmax"),
    cases=lambda: [
        case(
            "softmax",
            lambda x: jax.nn.softmax(x),
            [("B", 5)],
            expect=["Softmax:Bx5"],
            variants=["f32", "f64", "bf16"],
        ),
        case(
            "softmax_axis0",
            lambda x: jax.nn.softmax(x, axis=0),
            [("B", 4)],
            expect=["Softmax:Bx4"],
            counts={"Transpose": 0},
        ),
        case(
            "softmax_axes",
            lambda x: jax.nn.softmax(x, axis=(1, 2)),
            [("B", 3, 4)],
            counts={"Softmax": 0},
        ),
        case("softmax_edges", lambda x: jax.nn.softmax(x), [_SOFTMAX_EDGES]),
        case(
            "softmax_where",
            lambda x, m: jax.nn.softmax(x, where=m),
            [(2, 4), _MASK],
            counts={"Softmax": 0},
        ),
        case(
            "softmax_vmap",
            jax.vmap(lambda x: jax.nn.softmax(x, axis=0)),
            [("B", 3, 4)],
            expect=["Softmax:Bx3x4"],
            counts={"Softmax": 1, "Transpose": 0},
        ),
        case(
            "softmax_vmap_axis1",
            jax.vmap(lambda x: jax.nn.softmax(x), in_axes=1),
            [(4, "B")],
            counts={"Softmax": 1},
        ),
        case(
            "softmax_grad",
            jax.grad(lambda x: (jax.nn.softmax(x) * jnp.arange(5.0)).sum()),
            [("B", 5)],
            counts={"Softmax": 1},
        ),
        case("softmax_f16", lambda x: jax.nn.softmax(x), [(2, 3)], dtypes=[np.float16]),
    ],
)
def softmax(ctx, x, *, axis, where):
    """One Softmax over a single axis (float32/float64).

    Several axes (ONNX Softmax takes one) and other dtypes inline JAX's
    decomposition (max-shifted exp over the sum).
    """
    single = _single_axis(ctx, axis)
    if single is None or where is not None:
        return ctx.fallback()
    return ctx.op.Softmax(x, axis=single)


# -- log_softmax ---------------------------------------------------------------


def _log_softmax_jvp(primals, tangents, *, axis, where):
    """``dy = dx - sum(exp(y) * dx, axis)``; the primal stays one primitive."""
    (x,), (dx,) = primals, tangents
    y = log_softmax_p.bind(x, axis=axis, where=where)
    dx = _tangent(dx)
    return y, dx - jnp.sum(jnp.exp(y) * dx, axis, keepdims=True)


log_softmax_p = macro(
    family,
    "log_softmax",
    _log_softmax,
    ["jax.nn.log_softmax"],
    batching=_axis_batching(lambda: log_softmax_p),
    jvp=_log_softmax_jvp,
    accept=lambda a: a["where"] is None and _hashable_axis(a["axis"]),
)


@family.lowering(
    log_softmax_p,
    native_dtypes=kernel_dtypes("LogSoftmax"),
    cases=lambda: [
        case(
            "log_softmax",
            lambda x: jax.nn.log_softmax(x),
            [("B", 5)],
            expect=["LogSoftmax:Bx5"],
            variants=["f32", "bf16", "f16"],
        ),
        case("log_softmax_f64", lambda x: jax.nn.log_softmax(x), [("B", 5)], variants=["f64"]),
        case(
            "log_softmax_axis0",
            lambda x: jax.nn.log_softmax(x, 0),
            [("B", 4)],
            expect=["LogSoftmax:Bx4"],
            variants=["f32"],
        ),
        case(
            "log_softmax_axes",
            lambda x: jax.nn.log_softmax(x, axis=(0, 2)),
            [(2, "B", 4)],
            counts={"LogSoftmax": 0},
        ),
        case("log_softmax_edges", lambda x: jax.nn.log_softmax(x), [_SOFTMAX_EDGES]),
        case(
            "log_softmax_where",
            lambda x, m: jax.nn.log_softmax(x, where=m),
            [(2, 4), _MASK],
            counts={"LogSoftmax": 0},
        ),
        case(
            "log_softmax_vmap",
            jax.vmap(lambda x: jax.nn.log_softmax(x, axis=0)),
            [("B", 3, 4)],
            counts={"LogSoftmax": 1, "Transpose": 0},
            variants=["f32"],
        ),
        case(
            "log_softmax_vmap_f64",
            jax.vmap(lambda x: jax.nn.log_softmax(x, axis=0)),
            [("B", 3, 4)],
            variants=["f64"],
        ),
        case(
            "log_softmax_grad",
            jax.grad(lambda x: (jax.nn.log_softmax(x) * jnp.arange(5.0)).sum()),
            [("B", 5)],
            counts={"LogSoftmax": 1},
            variants=["f32"],
        ),
        case(
            "log_softmax_grad_f64",
            jax.grad(lambda x: (jax.nn.log_softmax(x) * jnp.arange(5.0)).sum()),
            [("B", 5)],
            variants=["f64"],
        ),
    ],
)
def log_softmax(ctx, x, *, axis, where):
    """One LogSoftmax over a single axis (float32); otherwise JAX's decomposition.

    ONNX Runtime's float64 LogSoftmax gives ``[nan, -inf, -inf]`` for a row
    ``[inf, 0, 1]`` where JAX gives NaNs, so float64 decomposes as well.
    """
    single = _single_axis(ctx, axis)
    if single is None or where is not None:
        return ctx.fallback()
    return ctx.op.LogSoftmax(x, axis=single)


# -- logsumexp -----------------------------------------------------------------

logsumexp_p = macro(
    family,
    "logsumexp",
    _logsumexp,
    ["jax.nn.logsumexp", "jax.scipy.special.logsumexp"],
    batching=_axis_batching(lambda: logsumexp_p),
    jvp="fallback",
    accept=lambda a: (
        a["b"] is None
        and a["where"] is None
        and a["return_sign"] is False
        and _hashable_axis(a["axis"])
    ),
)

_LSE_EDGES = np.array(
    [[0.0, 1.0, 2.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, 1.0], [np.nan, 0.0, 1.0]]
    + [[1e30, 1e30, 0.0], [-1e30, -1e30, -1e30], [100.0, 0.0, -100.0]]
)


@family.lowering(
    logsumexp_p,
    min_opset=18,
    native_dtypes=FLOATS,
    cases=lambda: [
        case(
            "logsumexp",
            lambda x: jax.nn.logsumexp(x, axis=-1),
            [("B", 5)],
            expect=["ReduceMax -> Where -> Sub -> Exp -> ReduceSum -> Log -> Add:B"],
        ),
        case("logsumexp_all", lambda x: jax.nn.logsumexp(x), [("B", 3)], counts={"ReduceMax": 1}),
        case(
            "logsumexp_keepdims",
            lambda x: jax.scipy.special.logsumexp(x, axis=(0, 2), keepdims=True),
            [(2, "B", 4)],
            counts={"ReduceMax": 1},
        ),
        case(
            "logsumexp_edges",
            lambda x: jax.nn.logsumexp(x, axis=1),
            [_LSE_EDGES],
            variants=["f32", "f64", "bf16"],
        ),
        case(
            "logsumexp_b",
            lambda x, b: jax.nn.logsumexp(x, axis=-1, b=b),
            [(2, 4), (2, 4)],
            input_range=(0.5, 2.0),
        ),
        case(
            "logsumexp_vmap",
            jax.vmap(lambda x: jax.nn.logsumexp(x, axis=0)),
            [("B", 3, 4)],
            counts={"ReduceMax": 1},
        ),
        case(
            "logsumexp_grad",
            jax.grad(lambda x: jax.nn.logsumexp(x, axis=-1).sum()),
            [("B", 5)],
        ),
        case("logsumexp_opset17", lambda x: jax.nn.logsumexp(x, axis=-1), [("B", 5)], opset=17),
    ],
)
def logsumexp(ctx, x, *, axis, b, keepdims, return_sign, where):
    """Max-shifted: ``m = ReduceMax`` (0 where not finite), ``Log(ReduceSum(Exp(x - m))) + m``.

    ONNX ``ReduceLogSumExp`` is not shifted in ONNX Runtime (it overflows
    where JAX does not); this is JAX's formula. Empty axis sets and non-float
    dtypes inline JAX's decomposition.
    """
    axes = canonical_axes(axis, len(ctx.avals_in[0].shape))
    if not axes:
        return ctx.fallback()
    return shifted_logsumexp(ctx, x, axes, keepdims)


def shifted_logsumexp(ctx, x, axes: tuple[int, ...], keepdims: bool):
    """JAX's max-shifted log-sum-exp of ``x`` (float32/float64) over non-empty ``axes``."""
    dt = np.dtype(ctx.avals_in[0].dtype)
    ax = ctx.i64(axes)
    m = ctx.op.ReduceMax(x, ax, keepdims=1)
    finite = ctx.op.Less(ctx.op.Abs(m), np.asarray(np.inf, dt))
    m = ctx.op.Where(finite, m, np.zeros((), dt))
    total = ctx.op.ReduceSum(ctx.op.Exp(ctx.op.Sub(x, m)), ax, keepdims=int(bool(keepdims)))
    return ctx.op.Add(ctx.op.Log(total), m if keepdims else ctx.op.Squeeze(m, ax))


@family.lowering(logsumexp_p)
def _logsumexp_before_18(ctx, x, **params):
    """Below opset 18 (reduction axes are attributes): JAX's decomposition, inlined."""
    return ctx.fallback()


# -- standardize ---------------------------------------------------------------

standardize_p = macro(
    family,
    "standardize",
    _standardize,
    ["jax.nn.standardize"],
    batching=_axis_batching(lambda: standardize_p),
    jvp="fallback",
    accept=lambda a: (
        a["mean"] is None
        and a["variance"] is None
        and a["where"] is None
        and isinstance(a["epsilon"], (int, float))
        and _hashable_axis(a["axis"])
    ),
)


@family.lowering(
    standardize_p,
    min_opset=17,
    native_dtypes=FLOATS,
    cases=lambda: [
        case(
            "standardize",
            lambda x: jax.nn.standardize(x),
            [("B", 6)],
            expect=["LayerNormalization:Bx6"],
            variants=["f32", "f64", "bf16", "f16"],
        ),
        case(
            "standardize_trailing",
            lambda x: jax.nn.standardize(x, axis=(1, 2), algorithm="stable"),
            [("B", 3, 4)],
            expect=["LayerNormalization:Bx3x4"],
        ),
        case(
            "standardize_axis0",
            lambda x: jax.nn.standardize(x, axis=0, epsilon=1e-3),
            [(4, "B")],
            counts={"LayerNormalization": 0},
        ),
        case(
            "standardize_constant_rows",
            lambda x: jax.nn.standardize(x),
            [np.array([[1000.0, 1000.0, 1000.0], [1.0, 2.0, 3.0], [-0.5, 0.0, 0.5]])],
        ),
        case(
            "standardize_mean",
            lambda x, m: jax.nn.standardize(x, mean=m),
            [(2, 4), (2, 1)],
            counts={"LayerNormalization": 0},
        ),
        case(
            "standardize_vmap",
            jax.vmap(lambda x: jax.nn.standardize(x)),
            [("B", 3, 4)],
            counts={"LayerNormalization": 1},
        ),
        case(
            "standardize_grad", jax.grad(lambda x: (jax.nn.standardize(x) ** 3).sum()), [("B", 5)]
        ),
    ],
)
def standardize(ctx, x, *, axis, mean, variance, epsilon, where, algorithm):
    """One LayerNormalization (scale 1, no bias) over trailing static axes, float32/float64.

    Other axes, symbolic normalized dims, other dtypes and
    ``normalization_mode="force_decomposed"`` inline JAX's decomposition.
    """
    shape = ctx.avals_in[0].shape
    ndim = len(shape)
    axes = canonical_axes(axis, ndim)
    trailing = bool(axes) and axes == tuple(range(ndim - len(axes), ndim))
    dims = [shape[a] for a in axes]
    decomposed = ctx.normalization_mode == "force_decomposed"
    if decomposed or not trailing or any(is_symbolic(d) for d in dims):
        return ctx.fallback()
    scale = np.ones([int(d) for d in dims], np.dtype(ctx.avals_in[0].dtype))
    return ctx.op.LayerNormalization(x, scale, axis=axes[0], epsilon=float(epsilon))


@family.lowering(standardize_p)
def _standardize_decomposed(ctx, x, **params):
    """JAX's decomposition of jax.nn.standardize (means, variance, rsqrt), inlined."""
    return ctx.fallback()


# -- glu -----------------------------------------------------------------------

glu_p = macro(
    family,
    "glu",
    _glu,
    ["jax.nn.glu"],
    batching=_axis_batching(lambda: glu_p),
    jvp="fallback",
    accept=lambda a: isinstance(a["axis"], int),
)


@family.lowering(
    glu_p,
    native_dtypes=kernel_dtypes("Split", "Sigmoid", "Mul"),
    cases=lambda: [
        case("glu", lambda x: jax.nn.glu(x), [("B", 6)], expect=["Split -> Sigmoid -> Mul:Bx3"]),
        case(
            "glu_axis0",
            lambda x: jax.nn.glu(x, axis=0),
            [(4, "B")],
            expect=["Split"],
            variants=["f32", "f64", "bf16"],
        ),
        case("glu_opset17", lambda x: jax.nn.glu(x), [(2, 6)], opset=17, expect=["Split"]),
        case(
            "glu_vmap",
            jax.vmap(lambda x: jax.nn.glu(x, axis=0)),
            [("B", 4, 3)],
            expect=["Split -> Sigmoid -> Mul:Bx2x3"],
        ),
        case("glu_grad", jax.grad(lambda x: jax.nn.glu(x).sum()), [("B", 4)]),
    ],
)
def glu(ctx, x, *, axis):
    """``Split`` into halves along ``axis``, then ``first * Sigmoid(second)`` (float32/float64).

    Other dtypes inline JAX's decomposition (as does a symbolic split axis, which
    JAX itself refuses: it cannot prove the size even).
    """
    shape = ctx.avals_in[0].shape
    position = axis % len(shape)
    if is_symbolic(shape[position]):
        return ctx.fallback()
    half = int(shape[position]) // 2
    sizes = ctx.i64([half, half])
    first, second = ctx.op.Split(x, sizes, axis=position, _outputs=2)
    first.dtype = second.dtype = onnx_dtype(ctx.avals_in[0].dtype)  # the builder does not
    # know Split's output dtypes (the precision step reads them)
    return ctx.op.Mul(first, ctx.op.Sigmoid(second))


# -- one_hot -------------------------------------------------------------------


def _one_hot_batching(args, dims, *, num_classes, dtype, axis):
    """Batch axis to the front; the output's class axis moves one further."""
    (x,) = batch_at_front(args, dims)
    position = axis % x.ndim  # the output has one more axis than the unbatched operand
    return one_hot_p.bind(x, num_classes=num_classes, dtype=dtype, axis=position + 1), 0


def _one_hot_jvp(primals, tangents, **params):
    """one_hot is piecewise constant in its input: a zero tangent, as JAX's derivative
    (float labels under jax.grad give zeros)."""
    out = one_hot_p.bind(*primals, **params)
    return out, ad.Zero(jax.typeof(out).to_tangent_aval())


one_hot_p = macro(
    family,
    "one_hot",
    _one_hot,
    ["jax.nn.one_hot"],
    batching=_one_hot_batching,
    jvp=_one_hot_jvp,
    accept=lambda a: isinstance(a["axis"], int) and isinstance(a["num_classes"], int),
)

_LABELS = np.array([0, 2, -1, 3, 1, 7], np.int32)


@family.lowering(
    one_hot_p,
    cases=lambda: [
        case(
            "one_hot",
            lambda x: jax.nn.one_hot(x, 4),
            [("B",)],
            dtypes=[np.int32],
            expect=["Unsqueeze -> Equal -> Cast:Bx4"],
        ),
        case("one_hot_out_of_range", lambda x: jax.nn.one_hot(x, 4), [_LABELS]),
        case(
            "one_hot_float_labels",
            lambda x: jax.nn.one_hot(x, 4),
            [np.array([0.0, 2.0, -1.0, 3.0, 1.5, 4.0])],
            variants=["f32", "bf16", "f16"],
        ),
        case(
            "one_hot_axis0_int8",
            lambda x: jax.nn.one_hot(x, 3, axis=0, dtype=jnp.int32),
            [(2, 5)],
            dtypes=[np.int8],
        ),
        case("one_hot_uint8", lambda x: jax.nn.one_hot(x, 3), [(5,)], dtypes=[np.uint8]),
        case(
            "one_hot_int64",
            lambda x: jax.nn.one_hot(x, 5, dtype=jnp.bool_),
            [(2, 3)],
            dtypes=[np.int64],
            variants=["f64"],
        ),
        case(
            "one_hot_vmap",
            jax.vmap(lambda x: jax.nn.one_hot(x, 3, axis=0)),
            [("B", 4)],
            dtypes=[np.int32],
            counts={"Equal": 1},
        ),
        case(  # differentiated with respect to float labels: zeros, as in JAX
            "one_hot_grad_of_float_labels",
            jax.grad(lambda x: (jax.nn.one_hot(x, 4) * 2.0).sum()),
            [(5,)],
            no_unused_inputs=False,  # the gradient is zero whatever the labels
        ),
        case(
            "one_hot_in_grad",
            jax.grad(lambda w, y: (jax.nn.one_hot(y, 3) * jax.nn.log_softmax(w)).sum()),
            [("B", 3), ("B",)],
            dtypes=[None, np.int32],
            counts={"Equal": 1, "LogSoftmax": 1},
            variants=["f32"],
        ),
    ],
)
def one_hot(ctx, x, *, num_classes, dtype, axis):
    """``Equal(Unsqueeze(x, axis), iota)`` cast to the output dtype.

    Not ONNX ``OneHot``: it wraps negative indices, where JAX gives a zero row.
    Integers compare in int64 (exact), floats in their own dtype.
    """
    in_dtype = np.dtype(ctx.avals_in[0].dtype)
    ndim = len(ctx.avals_in[0].shape)
    position = axis % (ndim + 1)
    if np.issubdtype(in_dtype, np.integer) or in_dtype == np.bool_:
        cmp = np.dtype(np.int64)
    else:
        cmp = in_dtype
    lhs = ctx.op.Unsqueeze(ctx.cast(x, cmp), ctx.i64([position]))
    iota = np.arange(num_classes, dtype=cmp).reshape([num_classes] + [1] * (ndim - position))
    return ctx.op.Cast(ctx.op.Equal(lhs, iota), to=onnx_dtype(ctx.avals_out[0].dtype))
