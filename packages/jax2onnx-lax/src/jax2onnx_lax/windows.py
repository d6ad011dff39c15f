"""reduce_window and its specialisations (max, min and sum pooling).

A window reduction is taken apart in JAX's own order: base dilation (identity
values between elements), padding (identity values; negative padding slices),
then windows with strides and window dilation. Where ONNX has an exact pooling
op the windowed axes become the trailing spatial axes of an (N, C, ...) layout
(one Transpose each way at most): MaxPool for float max and min and int8/uint8
max, a depthwise Conv with a ones kernel for float32/float16/bfloat16 sums. Every other
case is the general form: per windowed axis, one strided Slice per window
offset, folded with Max/Min/Add/Mul, which is exact for every dtype ORT has
those ops for (16-bit ints widen to int32, bool to uint8). A generic reduce_window
whose reducer is not one such op, or that has several operands, is folded window
by window in XLA's order (:mod:`jax2onnx_lax.folds`, which has the complex rules).

The gradients of window reductions (select_and_scatter_add, select_and_gather_add)
are in :mod:`jax2onnx_lax.window_grads`; they share the layout helpers here
(``strided_slice``, ``dilate``, ``pad``, ``window_end``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from jax2onnx.plugin import Family, case, is_symbolic
from jax2onnx_lax.blocks import nan_exact_max_pool
from jax2onnx_lax.folds import window_fold

family = Family("lax")

_INT64_MAX = np.iinfo(np.int64).max
_BF16 = ["f32", "f64", "bf16"]  # the float cases given half-precision variants
_WIDE = {  # dtypes ORT lacks Max/Min (or Add/Mul) kernels for -> an exact wider dtype
    np.dtype(np.int16): np.int32,
    np.dtype(np.uint16): np.int32,
    np.dtype(np.bool_): np.uint8,
}
_COMBINE = {"max": "Max", "min": "Min", "add": "Add", "mul": "Mul"}
_BODY = {"add": "add", "mul": "mul", "max": "max", "min": "min", "or": "max", "and": "min"}


def _identity(kind, dtype):
    dtype = np.dtype(dtype)
    if kind in ("add", "mul"):
        return np.asarray(0 if kind == "add" else 1, dtype)
    if dtype == np.bool_:
        return np.asarray(kind == "min", dtype)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.asarray(info.min if kind == "max" else info.max, dtype)
    return np.asarray(-np.inf if kind == "max" else np.inf, dtype)


def strided_slice(ctx, x, starts, ends, axes, steps=None):
    args = [x, ctx.i64(starts), ctx.shape(ends), ctx.i64(axes)]
    return ctx.op.Slice(*args, ctx.i64(steps) if steps else None)


def dilate(ctx, x, shape, dilation, fill):
    """Base dilation: ``d - 1`` fill values between neighbours along each axis.

    Unsqueeze a new axis after the dilated one, Pad it to ``d`` with the fill,
    merge the two (Reshape), and Slice off the trailing fill values.
    """
    shape = list(shape)
    for a, d in enumerate(dilation):
        if d == 1:
            continue
        y = ctx.op.Unsqueeze(x, ctx.i64([a + 1]))
        pads = [0] * (2 * (len(shape) + 1))
        pads[len(shape) + 1 + a + 1] = d - 1
        y = ctx.op.Pad(y, ctx.i64(pads), fill)
        n = shape[a]
        y = ctx.reshape(y, [*shape[:a], n * d, *shape[a + 1 :]])  # sizes, as n may be 0
        x = strided_slice(ctx, y, [0], [-(d - 1)], [a])
        if not is_symbolic(n):
            shape[a] = 0 if n == 0 else (n - 1) * d + 1
        else:  # n may be 0 at run time (no windows): the size is then 0, not 1 - d
            shape[a] = (n - 1) * d + 1 if provably_positive(n) else ((n - 1) * d + 1).max(0)
    return x, shape


def pad(ctx, x, shape, padding, fill):
    """Negative padding slices, positive padding pads with the fill value."""
    shape = list(shape)
    cut = [a for a, (lo, hi) in enumerate(padding) if lo < 0 or hi < 0]
    if cut:
        starts = [max(-padding[a][0], 0) for a in cut]
        ends = [padding[a][1] if padding[a][1] < 0 else _INT64_MAX for a in cut]
        x = strided_slice(ctx, x, starts, ends, cut)
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi in padding]
    if any(lo or hi for lo, hi in grow):
        x = ctx.op.Pad(x, ctx.i64([lo for lo, _ in grow] + [hi for _, hi in grow]), fill)
    for a, (lo, hi) in enumerate(padding):
        shape[a] = shape[a] + lo + hi
    return x, shape


def pad_computed(ctx, x, shape, padding, fill):
    """Padding that depends on symbolic sizes (``"SAME"`` with a stride): one ``Pad``
    whose amounts the graph computes; they must be provably non-negative."""
    amounts = [lo for lo, _ in padding] + [hi for _, hi in padding]
    for amount in amounts:
        if not provably_nonnegative(amount):
            raise ctx.error(
                f"padding {amount} may be negative for some sizes; give the padded axes "
                "static sizes, or a jax.export.symbolic_shape constraint that decides it"
            )
    x = ctx.op.Pad(x, ctx.shape(amounts), fill)
    return x, [d + lo + hi for d, (lo, hi) in zip(shape, padding, strict=True)]


def provably_positive(d) -> bool:
    """Whether JAX can prove ``d >= 1`` for every size its dimensions can take."""
    return provably_nonnegative(d - 1)


def provably_nonnegative(d) -> bool:
    """Whether JAX can prove ``d >= 0`` for every size its dimensions can take."""
    if not is_symbolic(d):
        return int(d) >= 0
    try:
        return bool(d >= 0)
    except Exception:  # InconclusiveDimensionOperation
        return False


def window_end(k, wd, s, o):
    """End of the strided Slice taking window offset ``k`` for ``o`` outputs.

    No outputs is an empty slice: a symbolic ``o`` that is 0 at run time (an
    axis shorter than the window) would give a negative end, which ONNX's
    ``Slice`` counts from the back, so the end is kept at 0 or more.
    """
    if not is_symbolic(o):
        return k * wd if o == 0 else k * wd + (o - 1) * s + 1
    end = k * wd + (o - 1) * s + 1
    try:
        if end >= 0:
            return end
    except Exception:  # InconclusiveDimensionOperation: 0 outputs may happen
        pass
    return end.max(0)


def _general(ctx, x, kind, out_shape, windows, strides, dilations):
    """Separable window reduction: per axis, Slices over the window offsets, folded."""
    op = getattr(ctx.op, _COMBINE[kind])
    for a, (w, s, wd) in enumerate(zip(windows, strides, dilations)):
        if w == 1 and s == 1:
            continue
        o = out_shape[a]
        parts = [
            strided_slice(ctx, x, [k * wd], [window_end(k, wd, s, o)], [a], [s]) for k in range(w)
        ]
        if kind in ("max", "min"):
            x = op(*parts) if len(parts) > 1 else parts[0]
        else:
            x = parts[0]
            for part in parts[1:]:
                x = op(x, part)
    return x


class _Layout:
    """Windowed axes moved to the trailing spatial axes of an (N, C, spatial...) tensor."""

    def __init__(self, ctx, shape, axes):
        self.ctx, self.shape, self.axes = ctx, list(shape), list(axes)
        self.lead = [a for a in range(len(shape)) if a not in axes]
        self.perm = self.lead + self.axes

    @property
    def channels(self):
        return self.shape[self.lead[-1]] if len(self.lead) >= 2 else 1

    def enter(self, x):
        ctx, nl = self.ctx, len(self.lead)
        if self.perm != sorted(self.perm):
            x = ctx.op.Transpose(x, perm=self.perm)
        if nl < 2:
            return ctx.op.Unsqueeze(x, ctx.i64([0, 1] if nl == 0 else [1]))
        if nl > 2:
            spatial = [self.shape[a] for a in self.axes]
            return ctx.op.Reshape(x, ctx.shape([-1, self.channels] + spatial))
        return x

    def leave(self, y, out_shape):
        ctx, nl = self.ctx, len(self.lead)
        if nl < 2:
            y = ctx.op.Squeeze(y, ctx.i64([0, 1] if nl == 0 else [1]))
        elif nl > 2:
            dims = [out_shape[a] for a in self.perm]
            y = ctx.reshape(y, dims)
        if self.perm != sorted(self.perm):
            y = ctx.op.Transpose(y, perm=[int(i) for i in np.argsort(self.perm)])
        return y


def _same_upper(shape, windows, strides, dilations, padding) -> bool:
    """Whether symbolic ``padding`` is XLA's SAME, which ONNX's ``auto_pad="SAME_UPPER"``
    computes at run time (ONNX Runtime takes it without window dilation only)."""
    if any(d != 1 for d in dilations):
        return False
    same = lax.padtype_to_pads(shape, windows, strides, "SAME")
    return all(
        str(a) == str(c) and str(b) == str(d) for (a, b), (c, d) in zip(padding, same, strict=True)
    )


def _pool(ctx, x, kind, dtype, shape, out_shape, windows, strides, dilations, padding, same_upper):
    """MaxPool / ones-kernel Conv where exact; None when the general form is needed."""
    dtype = np.dtype(dtype)
    floats = (np.float16, np.float32, np.float64, ml_dtypes.bfloat16)
    if kind == "max" and dtype in (*floats, np.int8, np.uint8):
        pass
    elif kind == "min" and dtype in floats:
        pass
    elif not (kind == "add" and dtype in (np.float16, np.float32, ml_dtypes.bfloat16)):
        return None
    axes = [
        a
        for a in range(len(shape))
        if windows[a] > 1 or strides[a] > 1 or padding[a] != (0, 0) or dilations[a] > 1
    ]
    if not 1 <= len(axes) <= 3:
        return None
    layout = _Layout(ctx, shape, axes)
    if kind == "add" and is_symbolic(layout.channels):
        return None
    kernel = [int(windows[a]) for a in axes]
    attrs = dict(
        kernel_shape=kernel,
        strides=[int(strides[a]) for a in axes],
        dilations=[int(dilations[a]) for a in axes],
        pads=[int(padding[a][0]) for a in axes] + [int(padding[a][1]) for a in axes],
    )
    if same_upper:  # SAME pads are smaller than the window: MaxPool takes them
        del attrs["pads"], attrs["dilations"]
        attrs["auto_pad"] = "SAME_UPPER"
    if kind == "add":
        c = layout.channels
        ones = ctx.const(np.ones([c, 1, *kernel], dtype))
        y = ctx.op.Conv(layout.enter(x), ones, group=c, **attrs)
        return layout.leave(y, out_shape)
    if any(p >= k for p, k in zip(attrs.get("pads", ()), kernel + kernel)):
        return None  # MaxPool takes pads smaller than the kernel only
    if np.issubdtype(dtype, np.integer):
        y = ctx.op.MaxPool(layout.enter(x), **attrs)
    elif kind == "min":  # min(x) = -max(-x), exact in floating point
        y = ctx.op.Neg(nan_exact_max_pool(ctx, layout.enter(ctx.op.Neg(x)), dtype, **attrs))
    else:
        y = nan_exact_max_pool(ctx, layout.enter(x), dtype, **attrs)
    return _no_output_when_shorter(ctx, layout.leave(y, out_shape), out_shape, axes)


def _no_output_when_shorter(ctx, y, out_shape, axes):
    """``y`` cut to ``out_shape`` along windowed axes whose symbolic size may be 0.

    An axis shorter than the window has no outputs in JAX; ONNX Runtime's
    MaxPool rounds that size up to one window. A Slice to the computed sizes
    (floored as JAX does) gives the empty result; axes JAX knows to have at
    least one output need none.
    """
    cut = [a for a in axes if is_symbolic(out_shape[a]) and not provably_positive(out_shape[a])]
    if not cut:
        return y
    starts = ctx.i64([0] * len(cut))
    ends = ctx.shape([out_shape[a] for a in cut])
    return ctx.op.Slice(y, starts, ends, ctx.i64(cut))


def _reduce(ctx, x, kind, params, init=None):
    """The window reduction ``kind`` of ``x``.

    Padding and base-dilation holes take no part in a window (XLA skips them), so
    they hold the identity; ``init`` (the generic reduce_window's initial value
    when it is not the identity) is folded once into every result, as XLA does.
    """
    dtype = np.dtype(ctx.avals_in[0].dtype)
    wide = _WIDE.get(dtype)
    if wide is not None:
        x = ctx.cast(x, wide)
        init = None if init is None else ctx.cast(init, wide)
    work = np.dtype(wide or dtype)
    fill = _identity(kind, work)
    shape = list(ctx.avals_in[0].shape)
    out_shape = list(ctx.avals_out[0].shape)
    x, shape = dilate(ctx, x, shape, params["base_dilation"], fill)
    windows, strides = params["window_dimensions"], params["window_strides"]
    dilations = params["window_dilation"]
    padding = params["padding"]
    computed = any(is_symbolic(p) for pair in padding for p in pair)  # SAME on symbolic sizes
    same_upper = computed and _same_upper(shape, windows, strides, dilations, padding)
    if computed and not same_upper:
        x, shape = pad_computed(ctx, x, shape, padding, fill)
    padding = [(0, 0)] * len(shape) if computed else [(int(a), int(b)) for a, b in padding]
    if any(lo < 0 or hi < 0 for lo, hi in padding):
        x, shape = pad(ctx, x, shape, padding, fill)
        padding = [(0, 0)] * len(shape)
    y = _pool(
        ctx, x, kind, work, shape, out_shape, windows, strides, dilations, padding, same_upper
    )
    if y is None:
        if same_upper:
            x, shape = pad_computed(ctx, x, shape, params["padding"], fill)
        x, shape = pad(ctx, x, shape, padding, fill)
        y = _general(ctx, x, kind, out_shape, windows, strides, dilations)
    if init is not None:
        y = getattr(ctx.op, _COMBINE[kind])(init, y)
    return ctx.cast(y, dtype) if wide is not None else y


def _params(window_dimensions, window_strides, padding, base_dilation, window_dilation):
    return dict(
        window_dimensions=window_dimensions,
        window_strides=window_strides,
        padding=padding,
        base_dilation=base_dilation,
        window_dilation=window_dilation,
    )


def _specialised(kind):
    def rule(ctx, x, **params):
        return _reduce(ctx, x, kind, _params(**params))

    rule.__name__ = rule.__qualname__ = f"reduce_window_{kind}"
    return rule


def _body_kind(jaxpr):
    """The reducer of a generic reduce_window when it is one add/mul/max/min (or/and on
    bool) of its two arguments, else None."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    eqns = inner.eqns
    if (
        len(eqns) != 1
        or eqns[0].primitive.name not in _BODY
        or set(map(id, eqns[0].invars)) != set(map(id, inner.invars))
        or len(inner.outvars) != 1
        or inner.outvars[0] is not eqns[0].outvars[0]
    ):
        return None
    return _BODY[eqns[0].primitive.name]


def reduce_window(ctx, *args, jaxpr, consts, **params):
    """Generic reduce_window whose reducer is one add/mul/max/min: the specialised form,
    with an initial value other than the identity combined into every result. Other
    reducers, and several operands, are folded over each window (:mod:`jax2onnx_lax.folds`)."""
    kind = _body_kind(jaxpr) if len(args) == 2 else None
    if kind is None:
        return window_fold(ctx, *args, jaxpr=jaxpr, consts=consts, **params)
    x, init = args
    dtype = np.dtype(ctx.avals_in[0].dtype)
    identity = _identity(kind, dtype)
    if init.const_value is not None:
        value = np.asarray(init.const_value.numpy(), dtype)
        if value.tobytes() == identity.tobytes():
            return _reduce(ctx, x, kind, _params(**params))
    return _reduce(ctx, x, kind, _params(**params), init=init)


def _bind(prim, window, strides=None, padding=None, base=None, dilation=None):
    n = len(window)

    def fn(x):
        pads = padding or [(0, 0)] * n
        if isinstance(pads, str):
            pads = lax.padtype_to_pads(x.shape, window, strides or (1,) * n, pads)
        return prim.bind(
            x,
            window_dimensions=tuple(window),
            window_strides=tuple(strides or (1,) * n),
            padding=tuple(tuple(p) for p in pads),
            base_dilation=tuple(base or (1,) * n),
            window_dilation=tuple(dilation or (1,) * n),
        )

    return fn


def generic_window(init, op, window, strides, padding="VALID", **kw):
    return lambda x: lax.reduce_window(x, init, op, window, strides, padding, **kw)


def max_pool(x, window=(1, 3, 3, 1), strides=(1, 2, 2, 1), padding="SAME"):
    return lax.reduce_window(x, -jnp.inf, lax.max, window, strides, padding)


def min_pool(x):
    return lax.reduce_window(x, jnp.inf, lax.min, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")


NHWC = ("B", 6, 6, 3)
EDGES = np.array([1.0, np.nan, 3.0, -np.inf, -np.inf, 2.0, np.inf, -np.inf, 0.0, -0.0])
TIES = np.array([[2.0, 2.0, 1.0, 5.0, 5.0], [2.0, 0.0, 5.0, 5.0, -1.0], [7.0, 7.0, 7.0, 1.0, 1.0]])
_INT8 = np.array([[-128, 127, 5, -3, 0], [100, 100, -128, -128, 1]], np.int8)


def _window_cases(kind, prim, expect):
    """Shared cases; ``expect`` names the pooling op of the f32 graph, if any."""
    pool = {"expect": [expect], "variants": ["f32"]} if expect else {}
    return [
        case(f"{kind}_1d", _bind(prim, (3,), (2,), [(1, 1)]), [(7,)], **pool),
        case(f"{kind}_1d_any", _bind(prim, (3,), (2,), [(1, 1)]), [(7,)], variants=_BF16),
        case(f"{kind}_3d", _bind(prim, (1, 2, 2, 2, 1), (1, 2, 2, 2, 1)), [(1, 4, 4, 5, 2)]),
        case(
            f"{kind}_window_dilation",
            _bind(prim, (1, 2, 2, 1), (1, 1, 2, 1), "SAME", dilation=(1, 2, 3, 1)),
            [("B", 7, 7, 2)],
        ),
        case(f"{kind}_base_dilation", _bind(prim, (1, 3), (1, 2), base=(1, 2)), [("B", 5)]),
        case(
            f"{kind}_base_and_window_dilation",
            _bind(prim, (2, 2), (1, 2), [(1, 0), (0, 2)], base=(2, 3), dilation=(2, 1)),
            [(4, 5)],
        ),
        case(f"{kind}_pad_past_window", _bind(prim, (2,), (1,), [(3, 2)]), [(5,)]),
        case(f"{kind}_negative_padding", _bind(prim, (1, 3), (1, 1), [(0, 0), (-1, 2)]), [(2, 8)]),
        case(f"{kind}_4d_window", _bind(prim, (2, 2, 2, 2), (1, 2, 1, 1)), [(3, 4, 3, 3)]),
        case(
            f"{kind}_int32",
            _bind(prim, (1, 2, 2, 1), (1, 2, 2, 1), "SAME"),
            [NHWC],
            dtypes=[np.int32],
        ),
        case(f"{kind}_int8", _bind(prim, (1, 2), (1, 1), "SAME"), [_INT8]),
        case(f"{kind}_uint16", _bind(prim, (2, 2), (1, 1)), [(3, 4)], dtypes=[np.uint16]),
        case(
            f"{kind}_int64",
            _bind(prim, (2, 2), (1, 1)),
            [(3, 4)],
            dtypes=[np.int64],
            variants=["f64"],
        ),
        case(f"{kind}_f16", _bind(prim, (1, 2, 2), (1, 1, 1)), [(2, 3, 4)], dtypes=[np.float16]),
        case(f"{kind}_opset17", _bind(prim, (1, 1, 2, 2), (1, 1, 2, 2)), [(2, 3, 4, 4)], opset=17),
    ]


family.lowering(
    lax.reduce_window_max_p,
    cases=lambda: [
        case("max_pool_same", max_pool, [NHWC], expect=["MaxPool"], counts={"Transpose": 2}),
        case(
            "max_pool_valid_nchw",
            _bind(lax.reduce_window_max_p, (1, 1, 2, 2), (1, 1, 2, 2)),
            [("B", 3, 5, 5)],
            expect=["MaxPool"],
            counts={"Transpose": 0},
        ),
        case(
            "max_nan_inf",
            _bind(lax.reduce_window_max_p, (2,), (1,), [(1, 1)]),
            [EDGES],
            variants=_BF16,
        ),
        case(
            "max_bool", _bind(lax.reduce_window_max_p, (2, 2), (1, 1)), [(3, 4)], dtypes=[np.bool_]
        ),
        *_window_cases("max", lax.reduce_window_max_p, "MaxPool"),
    ],
)(_specialised("max"))

family.lowering(
    lax.reduce_window_min_p,
    cases=lambda: [
        case("min_pool_same", min_pool, [NHWC], expect=["MaxPool -> Where -> Where -> Neg"]),
        case("min_nan_inf", _bind(lax.reduce_window_min_p, (3,), (1,), [(1, 1)]), [EDGES]),
        *_window_cases("min", lax.reduce_window_min_p, "MaxPool"),
    ],
)(_specialised("min"))


def _avg_pool(x):
    return lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0


def _avg_pool_grad(x):
    return jax.grad(lambda y: (_avg_pool(y) ** 2).sum())(x)


family.lowering(
    lax.reduce_window_sum_p,
    cases=lambda: [
        case(
            "avg_pool",
            _avg_pool,
            [NHWC],
            expect=["Transpose -> Conv -> Transpose -> Div"],
            counts={"Transpose": 2},
            variants=["f32"],
        ),
        case("avg_pool_f64", _avg_pool, [NHWC], variants=["f64"]),
        case(
            "sum_same",
            generic_window(0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "SAME"),
            [NHWC],
            expect=["Conv"],
            variants=["f32"],
        ),
        case("avg_pool_grad", _avg_pool_grad, [NHWC], variants=_BF16),
        case("sum_symbolic_channels", generic_window(0.0, lax.add, (1, 2), (1, 2)), [(3, "B")]),
        *_window_cases("sum", lax.reduce_window_sum_p, "Conv"),
        case("sum_f64_slices", _avg_pool, [NHWC], variants=["f64"], counts={"Conv": 0}),
    ],
)(_specialised("add"))


family.lowering(
    lax.reduce_window_p,
    cases=lambda: [
        case("mul", generic_window(1.0, lax.mul, (1, 2, 2, 1), (1, 2, 2, 1)), [NHWC]),
        case(
            "mul_typed_init",  # an init of the operand dtype, as half precision needs
            lambda x: lax.reduce_window(
                x, jnp.ones((), x.dtype), lax.mul, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"
            ),
            [NHWC],
            variants=["bf16", "f16"],
        ),
        case("max_init_zero", generic_window(0.0, lax.max, (2, 2), (1, 1), "SAME"), [(4, 5)]),
        case("add_init_one", generic_window(1.0, lax.add, (1, 3), (1, 2), "SAME"), [("B", 7)]),
        case(
            "mul_int32", generic_window(np.int32(1), lax.mul, (2,), (1,)), [(6,)], dtypes=[np.int32]
        ),
        case("min_int8_init", generic_window(np.int8(3), lax.min, (1, 2), (1, 1), "SAME"), [_INT8]),
        case(
            "runtime_init",
            lambda x, init: lax.reduce_window(x, init, lax.max, (2, 2), (2, 1), "SAME"),
            [(5, 4), ()],
            variants=_BF16,
        ),
    ],
)(reduce_window)


register = family.register
