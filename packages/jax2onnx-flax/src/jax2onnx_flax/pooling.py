"""``nnx.avg_pool``, ``nnx.max_pool``, ``nnx.min_pool`` as macro primitives.

Flax pools channels-last inputs ``(batch..., window dims..., features)``. The
lowerings move the features to axis 1 (one Transpose each way; an Unsqueeze
for an unbatched input, a Reshape merging several batch axes) and emit one
ONNX pooling op:

- ``avg_pool`` -> ``AveragePool`` with Flax's ``count_include_pad`` (float32;
  ONNX Runtime has no float64 AveragePool, so float64 inlines Flax's
  ``reduce_window`` sum, which the lax plugin lowers exactly);
- ``max_pool`` -> ``MaxPool``, ``min_pool`` -> ``Neg -> MaxPool -> Neg``, with the
  lax plugin's NaN and ``-inf`` correction (ONNX Runtime's MaxPool skips NaNs
  and starts from the lowest float, JAX's max propagates NaN).

Padding ``"SAME"``/``"VALID"`` or explicit pairs become ``pads``; pads not
smaller than the window (ONNX Runtime refuses them), negative pads, symbolic
window dims with ``"SAME"``, more than three window dims and other dtypes
inline Flax's own computation. Batching adds the vmapped axis as one more
batch axis (Flax pools any number of them); JVPs differentiate Flax's code.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax import lax
from jax.interpreters import batching

from jax2onnx.plugin import Family, call_arguments, case, is_symbolic, kernel_dtypes
from jax2onnx_lax.blocks import nan_exact_max_pool

family = Family("flax")
register = family.register


def _impl(name):
    def impl(x, **params):
        from flax.linen import pooling  # never patched: the interceptions patch nnx/linen names

        return getattr(pooling, name)(x, **params)

    impl.__name__ = impl.__qualname__ = f"{name}_impl"
    return impl


def _front_batching(get_prim):
    """The vmapped axis becomes one more leading batch axis of the same pool."""

    def rule(args, dims, **params):
        (x,), (d,) = args, dims
        return get_prim().bind(batching.bdim_at_front(x, d, x.shape[d]), **params), 0

    return rule


def _static_padding(padding):
    if isinstance(padding, str):
        return padding
    try:
        return tuple((int(lo), int(hi)) for lo, hi in padding)
    except (TypeError, ValueError):
        return None


def _binder(prim):
    def make(original):
        arguments = call_arguments(original)

        @functools.wraps(original)
        def call(*args, **kwargs):
            params = arguments(*args, **kwargs)
            if params is None:
                return original(*args, **kwargs)
            x = params.pop("inputs")
            padding = _static_padding(params["padding"])
            try:
                window = tuple(int(w) for w in params["window_shape"])
                strides = params["strides"]
                strides = None if strides is None else tuple(int(s) for s in strides)
            except (TypeError, ValueError):
                return original(*args, **kwargs)
            if padding is None or not hasattr(x, "ndim"):
                return original(*args, **kwargs)
            params.update(window_shape=window, strides=strides, padding=padding)
            if "count_include_pad" in params:
                params["count_include_pad"] = bool(params["count_include_pad"])
            return prim.bind(x, **params)

        return call

    return make


def _pool_primitive(name):
    impl = _impl(name)
    prim = family.primitive(name, impl=impl, batching=_front_batching(lambda: prim), jvp="fallback")
    family.intercept(
        f"flax.nnx.{name}", prim, binder=_binder(prim), aliases=(f"flax.linen.{name}",)
    )
    return prim


avg_pool_p = _pool_primitive("avg_pool")
max_pool_p = _pool_primitive("max_pool")
min_pool_p = _pool_primitive("min_pool")


def _pool_attrs(ctx, window, strides, padding):
    """ONNX ``kernel_shape``/``strides``/``pads`` for the window dims, or None."""
    shape = ctx.avals_in[0].shape
    n = len(window)
    spatial = shape[len(shape) - n - 1 : -1]
    strides = strides or (1,) * n
    if padding == "VALID":
        pads = [(0, 0)] * n
    elif isinstance(padding, str):
        if any(is_symbolic(d) for d in spatial):
            return None
        pads = lax.padtype_to_pads([int(d) for d in spatial], window, strides, padding)
    else:
        pads = padding
    if not 1 <= n <= 3 or any(
        p < 0 or p >= k for (lo, hi), k in zip(pads, window) for p in (lo, hi)
    ):
        return None
    return dict(
        kernel_shape=list(window),
        strides=list(strides),
        pads=[int(lo) for lo, _ in pads] + [int(hi) for _, hi in pads],
    )


def _channels_first(ctx, x, pool):
    """``pool`` applied to ``x`` laid out as ``(N, C, window dims...)`` and laid back."""
    shape, out_shape = ctx.avals_in[0].shape, ctx.avals_out[0].shape
    ndim, n = len(shape), len(ctx.eqn.params["window_shape"])
    nb = ndim - n - 1
    perm = [*range(nb), ndim - 1, *range(nb, ndim - 1)]
    y = ctx.op.Transpose(x, perm=perm)
    if nb == 0:
        y = ctx.op.Unsqueeze(y, ctx.i64([0]))
    elif nb > 1:
        y = ctx.op.Reshape(y, ctx.i64([-1, *[shape[a] for a in perm[nb:]]]))
    y = pool(y)
    if nb == 0:
        y = ctx.op.Squeeze(y, ctx.i64([0]))
    elif nb > 1:
        y = ctx.op.Reshape(y, ctx.shape([out_shape[a] for a in perm]))
    return ctx.op.Transpose(y, perm=[int(i) for i in np.argsort(perm)])


def _lowerable(ctx, window, strides, padding):
    """The pool's ONNX attributes, or None when the input's layout or padding does not fit."""
    shape = ctx.avals_in[0].shape
    nb = len(shape) - len(window) - 1
    if nb < 0:
        return None
    if nb > 1 and any(is_symbolic(d) for d in shape[nb:]):
        return None
    return _pool_attrs(ctx, window, strides, padding)


# -- cases --------------------------------------------------------------------------

_NHWC = ("B", 6, 6, 3)
_EDGES = np.array([1.0, np.nan, 3.0, -np.inf, -np.inf, 2.0, np.inf, -np.inf, 0.0, -0.0])
_EDGES = np.tile(_EDGES.reshape(1, 10, 1), (2, 1, 2))


def _pool(module, name, *args, **kwargs):
    """A factory (it imports Flax before ``to_onnx`` traces, so the interceptions apply)."""

    def make():
        import importlib

        flax_module = importlib.import_module(f"flax.{module}")
        return lambda x: getattr(flax_module, name)(x, *args, **kwargs)

    return make


_nnx = functools.partial(_pool, "nnx")


def _case(*args, **kwargs):
    return case(*args, factory=True, **kwargs)


def _vmap(factory):
    return lambda: jax.vmap(factory())


def _grad(factory):
    return lambda: jax.grad(lambda x: (factory()(x) ** 2).sum())


def _common(name, op, **f32):
    """Cases every pool has; ``f32`` restricts graph expectations to the f32 variant."""
    same = _nnx(name, (3, 3), strides=(1, 1), padding="SAME")
    return [
        _case(f"{name}_1d", _nnx(name, (3,), strides=(2,)), [("B", 7, 2)], expect=[op], **f32),
        _case(f"{name}_same", same, [_NHWC], expect=[op], counts={"Transpose": 2}, **f32),
        _case(
            f"{name}_explicit_padding",
            _nnx(name, (2, 3), strides=(2, 1), padding=((1, 1), (0, 2))),
            [_NHWC],
            expect=[op],
            **f32,
        ),
        _case(f"{name}_unbatched", _nnx(name, (2, 2)), [(5, 5, 3)], expect=[op], **f32),
        _case(
            f"{name}_two_batch_axes", _nnx(name, (2, 2)), [(2, "B", 4, 4, 3)], expect=[op], **f32
        ),
        _case(f"{name}_3d", _nnx(name, (2, 2, 2), strides=(2, 2, 2)), [(2, 4, 4, 4, 2)], **f32),
        _case(
            f"{name}_pad_past_window",
            _nnx(name, (2,), padding=((2, 2),)),
            [("B", 5, 2)],
            counts={op: 0},
        ),
        _case(f"{name}_opset17", _nnx(name, (2, 2), strides=(2, 2)), [_NHWC], opset=17, **f32),
        _case(f"{name}_vmap", _vmap(_nnx(name, (2,), strides=(2,))), [("B", 3, 6, 2)], **f32),
        _case(f"{name}_grad", _grad(_nnx(name, (2, 2), strides=(1, 1))), [_NHWC]),
    ]


# -- lowerings ----------------------------------------------------------------------


@family.lowering(
    avg_pool_p,
    native_dtypes=kernel_dtypes("AveragePool"),
    cases=lambda: [
        *_common("avg_pool", "AveragePool", variants=["f32"]),
        _case(
            "avg_pool",
            _nnx("avg_pool", (2, 2), strides=(2, 2)),
            [_NHWC],
            expect=["Transpose -> AveragePool -> Transpose:Bx3x3x3"],
            counts={"Transpose": 2},
            variants=["f32"],
        ),
        _case(
            "avg_pool_exclude_pad",
            _nnx("avg_pool", (3, 3), padding="SAME", count_include_pad=False),
            [_NHWC],
            expect=["AveragePool"],
            variants=["f32"],
        ),
        _case(
            "avg_pool_half",
            _nnx("avg_pool", (2, 2), strides=(2, 2)),
            [_NHWC],
            expect=["AveragePool", "Transpose:Bx3x3x3"],
            variants=["bf16", "f16"],
        ),
        _case(
            "avg_pool_f64",
            _nnx("avg_pool", (2, 2)),
            [_NHWC],
            variants=["f64"],
            counts={"AveragePool": 0},
        ),
        _case(
            "avg_pool_exclude_pad_f64",
            _nnx("avg_pool", (3, 3), padding="SAME", count_include_pad=False),
            [_NHWC],
            variants=["f64"],
        ),
    ],
)
def avg_pool(ctx, x, *, window_shape, strides, padding, count_include_pad):
    """One AveragePool (float32) on the channels-first view."""
    attrs = _lowerable(ctx, window_shape, strides, padding)
    if attrs is None:
        return ctx.fallback()
    pool = functools.partial(ctx.op.AveragePool, count_include_pad=int(count_include_pad), **attrs)
    return _channels_first(ctx, x, pool)


@family.lowering(
    max_pool_p,
    native_dtypes=kernel_dtypes("MaxPool"),
    cases=lambda: [
        *_common("max_pool", "MaxPool", variants=None),
        _case(
            "max_pool",
            _nnx("max_pool", (2, 2), strides=(2, 2)),
            [_NHWC],
            expect=["Transpose -> MaxPool -> Where -> Where -> Transpose:Bx3x3x3"],
            counts={"Transpose": 2, "MaxPool": 2},
        ),
        _case(
            "max_pool_nan_inf",
            _nnx("max_pool", (2,), padding="SAME"),
            [_EDGES],
            variants=["f32", "f64", "bf16", "f16"],
        ),
    ],
)
def max_pool(ctx, x, *, window_shape, strides, padding):
    """MaxPool (float32/float64) corrected for NaN and -inf, on the channels-first view."""
    attrs = _lowerable(ctx, window_shape, strides, padding)
    if attrs is None:
        return ctx.fallback()
    dt = np.dtype(ctx.avals_in[0].dtype)
    return _channels_first(ctx, x, lambda y: nan_exact_max_pool(ctx, y, dt, **attrs))


@family.lowering(
    min_pool_p,
    native_dtypes=kernel_dtypes("Neg", "MaxPool"),
    cases=lambda: [
        *_common("min_pool", "MaxPool", variants=None),
        _case(
            "min_pool",
            _nnx("min_pool", (2, 2), strides=(2, 2)),
            [_NHWC],
            expect=["Neg -> Transpose -> MaxPool"],
            counts={"Transpose": 2, "Neg": 2},
        ),
        _case("min_pool_nan_inf", _nnx("min_pool", (3,), padding="SAME"), [_EDGES]),
    ],
)
def min_pool(ctx, x, *, window_shape, strides, padding):
    """``-MaxPool(-x)`` (exact in floating point) with the NaN correction."""
    attrs = _lowerable(ctx, window_shape, strides, padding)
    if attrs is None:
        return ctx.fallback()
    dt = np.dtype(ctx.avals_in[0].dtype)
    y = _channels_first(ctx, ctx.op.Neg(x), lambda y: nan_exact_max_pool(ctx, y, dt, **attrs))
    return ctx.op.Neg(y)
