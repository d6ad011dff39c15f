"""``nnx.BatchNorm``, ``LayerNorm``, ``RMSNorm`` and ``GroupNorm`` as macro primitives.

Each primitive evaluates with Flax's own arithmetic (``promote_dtype``, then
``_compute_stats`` and ``_normalize`` from ``flax.nnx.nn.normalization``), so
JAX's numbers are Flax's. The lowerings emit the ONNX op a human writes where
it computes the same numbers, and inline Flax's computation otherwise:

- ``BatchNorm`` (running statistics): ``BatchNormalization`` when the feature
  axis is axis 1 (``(N, C)`` and ``NCHW``-style inputs); for channels-last
  inputs a fused scale and shift ``x * a + b`` with ``a = scale / sqrt(var +
  eps)`` and ``b = bias - mean * a`` folded at conversion time, which
  broadcasts along the last axis without the two Transposes an ONNX
  ``BatchNormalization`` would need (ONNX Runtime computes the very same fused
  form inside its kernel).
- ``LayerNorm``: ``LayerNormalization`` (opset >= 17) over trailing reduction
  axes; Flax's ``use_fast_variance`` (``E[x^2] - E[x]^2``) differs from the
  exact variance only by rounding for inputs whose mean is small against their
  spread (a case shows where it does not).
- ``RMSNorm``: ``RMSNormalization`` at opset >= 23 (ONNX Runtime 1.31 runs it in
  float32 and float64), Flax's exact decomposition below.
- ``GroupNorm``: ``GroupNormalization`` at opset >= 21 (per-channel scale and
  bias; Transposes to channels-first, float64 with ``stash_type`` double),
  Flax's exact decomposition below (opset 18's per-group scale is not Flax's).

Batching is explicit (the vmapped axis moves to the front and the axes
renumber); JVPs differentiate Flax's computation. ``Dropout`` is in
:mod:`jax2onnx_flax.dropout`.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import batching

from jax2onnx.plugin import case
from jax2onnx_flax._rules import rules
from jax2onnx_lax._util import to_dtype

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def _flax():
    from flax.nnx.nn import dtypes, normalization

    return normalization, dtypes


def _optional(rest, has_scale, has_bias):
    rest = list(rest)
    scale = rest.pop(0) if has_scale else None
    bias = rest.pop(0) if has_bias else None
    return scale, bias


def _axes(ndim: int, axes: Any) -> tuple[int, ...]:
    axes = axes if isinstance(axes, (tuple, list)) else (axes,)
    return tuple(sorted({int(a) % ndim for a in axes}))


def _dtype(dtype: Any) -> np.dtype | None:
    return None if dtype is None else np.dtype(dtype)


# -- impls: Flax's computation on explicit operands --------------------------------


def _batch_norm_impl(x, mean, var, *rest, feature_axes, epsilon, dtype, has_scale, has_bias):
    normalization, dtypes = _flax()
    scale, bias = _optional(rest, has_scale, has_bias)
    x, mean, var, scale, bias = dtypes.promote_dtype((x, mean, var, scale, bias), dtype=dtype)
    reduction = tuple(a for a in range(x.ndim) if a not in feature_axes)
    return normalization._normalize(
        x, mean, var, scale, bias, reduction, feature_axes, dtype, epsilon
    )


def _layer_norm_impl(
    x, *rest, reduction_axes, feature_axes, epsilon, dtype, use_fast_variance, use_mean, **flags
):
    normalization, dtypes = _flax()
    scale, bias = _optional(rest, **flags)
    x, scale, bias = dtypes.promote_dtype((x, scale, bias), dtype=dtype)
    mean, var = normalization._compute_stats(
        x, reduction_axes, dtype, use_mean=use_mean, use_fast_variance=use_fast_variance
    )
    return normalization._normalize(
        x, mean, var, scale, bias, reduction_axes, feature_axes, dtype, epsilon
    )


def _group_norm_impl(
    x, *rest, num_groups, reduction_axes, epsilon, dtype, use_fast_variance, **flags
):
    """Flax's GroupNorm, repeating the statistics along their last (group) axis."""
    normalization, dtypes = _flax()
    scale, bias = _optional(rest, **flags)
    x, scale, bias = dtypes.promote_dtype((x, scale, bias), dtype=dtype)
    size = x.shape[-1] // num_groups
    grouped = x.reshape((*x.shape[:-1], num_groups, size))
    mean, var = normalization._compute_stats(
        grouped, [*reduction_axes[:-1], -1], dtype, use_fast_variance=use_fast_variance
    )
    mean, var = (jnp.repeat(s, size, axis=-1) for s in (mean, var))
    return normalization._normalize(
        x, mean, var, scale, bias, reduction_axes[:-1], (x.ndim - 1,), dtype, epsilon
    )


def _axis_batching(get_prim, impl, axis_params):
    """Vmapped input: batch axis to the front, axes renumbered, the primitive bound again.

    Batched parameters (a vmap over modules) fall back to ``jax.vmap`` of Flax's code.
    """

    def rule(args, dims, **params):
        if any(d is not None for d in dims[1:]):
            out = jax.vmap(functools.partial(impl, **params), in_axes=tuple(dims))(*args)
            return out, 0
        x = batching.bdim_at_front(args[0], dims[0], args[0].shape[dims[0]])
        for name in axis_params:
            params[name] = tuple(a + 1 for a in params[name])
        return get_prim().bind(x, *args[1:], **params), 0

    return rule


def _primitive(name, impl, axis_params):
    prim = rules.primitive(
        name,
        impl=impl,
        batching=_axis_batching(lambda: prim, impl, axis_params),
        jvp="fallback",
    )
    return prim


batch_norm_p = _primitive("batch_norm", _batch_norm_impl, ("feature_axes",))
layer_norm_p = _primitive("layer_norm", _layer_norm_impl, ("reduction_axes", "feature_axes"))
rms_norm_p = _primitive("rms_norm", _layer_norm_impl, ("reduction_axes", "feature_axes"))
group_norm_p = _primitive("group_norm", _group_norm_impl, ("reduction_axes",))


# -- binders ----------------------------------------------------------------------


def _plain(module) -> bool:
    """Options the primitives cover: Flax's own promotion, no pmean axis."""
    _, dtypes = _flax()
    return module.promote_dtype is dtypes.promote_dtype and module.axis_name is None


def _params(module, *names):
    arrays = [getattr(module, n) for n in names]
    return [a[...] for a in arrays if a is not None]


def _bind_batch_norm(original):
    def call(self, x, use_running_average=None, *, mask=None):
        flag = self.use_running_average if use_running_average is None else use_running_average
        static = isinstance(flag, (bool, np.bool_))
        if flag is None or mask is not None or not _plain(self) or (static and not flag):
            return original(self, x, use_running_average, mask=mask)
        feature_axes = _axes(jnp.ndim(x), self.axis)
        y = batch_norm_p.bind(
            x,
            *_params(self, "mean", "var", "scale", "bias"),
            feature_axes=feature_axes,
            epsilon=float(self.epsilon),
            dtype=_dtype(self.dtype),
            has_scale=self.scale is not None,
            has_bias=self.bias is not None,
        )
        if static:
            return y
        return jnp.where(jnp.asarray(flag, bool), y, _batch_statistics(self, x, feature_axes))

    return call


def _batch_statistics(module, x, feature_axes):
    """Training mode for a runtime ``use_running_average``: normalise with the batch's
    statistics (the running averages' update is not an output of an export)."""
    normalization, dtypes = _flax()
    scale, bias = _params(module, "scale") or [None], _params(module, "bias") or [None]
    x, scale, bias = dtypes.promote_dtype((x, scale[0], bias[0]), dtype=module.dtype)
    reduction = tuple(a for a in range(x.ndim) if a not in feature_axes)
    mean, var = normalization._compute_stats(
        x, reduction, module.dtype, use_fast_variance=module.use_fast_variance
    )
    return normalization._normalize(
        x, mean, var, scale, bias, reduction, feature_axes, module.dtype, module.epsilon
    )


def _bind_layer_norm(prim, use_mean):
    def make(original):
        def call(self, x, *args, mask=None, **kwargs):
            if args or kwargs or mask is not None or not _plain(self):
                return original(self, x, *args, mask=mask, **kwargs)
            ndim = jnp.ndim(x)
            has_bias = use_mean and self.bias is not None
            return prim.bind(
                x,
                *_params(self, "scale", *(["bias"] if has_bias else [])),
                reduction_axes=_axes(ndim, self.reduction_axes),
                feature_axes=_axes(ndim, self.feature_axes),
                epsilon=float(self.epsilon),
                dtype=_dtype(self.dtype),
                use_fast_variance=bool(self.use_fast_variance),
                use_mean=use_mean,
                has_scale=self.scale is not None,
                has_bias=has_bias,
            )

        return call

    return make


def _bind_group_norm(original):
    def call(self, x, *, mask=None):
        ndim = jnp.ndim(x)
        axes = self.reduction_axes
        axes = _axes(ndim, [*range(1, ndim - 1), -1] if axes is None else axes)
        if mask is not None or not _plain(self) or axes != tuple(range(1, ndim)):
            return original(self, x, mask=mask)  # Flax's statistics are (N, groups) only
        return group_norm_p.bind(
            x,
            *_params(self, "scale", "bias"),
            num_groups=int(self.num_groups),
            reduction_axes=axes,
            epsilon=float(self.epsilon),
            dtype=_dtype(self.dtype),
            use_fast_variance=bool(self.use_fast_variance),
            has_scale=self.scale is not None,
            has_bias=self.bias is not None,
        )

    return call


rules.intercept("flax.nnx.BatchNorm.__call__", batch_norm_p, binder=_bind_batch_norm)
rules.intercept(
    "flax.nnx.LayerNorm.__call__", layer_norm_p, binder=_bind_layer_norm(layer_norm_p, True)
)
rules.intercept("flax.nnx.RMSNorm.__call__", rms_norm_p, binder=_bind_layer_norm(rms_norm_p, False))
rules.intercept("flax.nnx.GroupNorm.__call__", group_norm_p, binder=_bind_group_norm)


# -- lowerings ----------------------------------------------------------------------


def _float_out(ctx) -> np.dtype | None:
    dt = np.dtype(ctx.avals_out[0].dtype)
    return dt if dt in (F32, F64) else None


def _cast_all(ctx, values, dtype):
    return [to_dtype(ctx, v, a.dtype, dtype) for v, a in zip(values, ctx.avals_in, strict=False)]


def _param_shaped(ctx, value, shape, dtype):
    """A (C,) parameter reshaped to ``shape`` (folded when constant); ``None`` stays."""
    if value is None:
        return None
    if value.const_value is not None:
        return ctx.const(value.const_value.numpy().astype(dtype).reshape(shape))
    return ctx.op.Reshape(value, ctx.const(np.asarray(shape, np.int64)))


def _const(value) -> np.ndarray | None:
    return None if value is None or value.const_value is None else value.const_value.numpy()


def _nrm(ctx, x, rest, impl, **params):
    return ctx.decompose(impl, x, *rest, **params)


def _module(cls, *args, mode=None, **kwargs):
    """A factory for ``nnx.<cls>`` with random parameters (and statistics); ``mode``
    ``"train"``/``"eval"`` switches it (export must ignore ``"train"``)."""

    def make():
        from flax import nnx

        module = getattr(nnx, cls)(*args, rngs=nnx.Rngs(0), **kwargs)
        rng = np.random.default_rng(len(cls))
        for name in ("mean", "var", "scale", "bias"):
            v = getattr(module, name, None)
            if v is not None:
                values = rng.standard_normal(v[...].shape).astype(np.float32)
                v[...] = jnp.asarray(np.abs(values) + 0.5 if name == "var" else values)
        if mode is not None:
            getattr(module, mode)()
        return module

    return make


def _bn_runtime():
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self):
            self.bn = _module("BatchNorm", 6)()

        def __call__(self, x, use_running_average):
            return self.bn(x, use_running_average=use_running_average)

    return Net()


def _vmapped(factory):
    return lambda: jax.vmap(factory())


def _grad(factory):
    def make():
        module = factory()
        return jax.grad(lambda x: (module(x) ** 2 * jnp.cos(x)).sum())

    return make


def _cases(rows):
    """``(name, factory, inputs, options)`` rows as factory cases."""
    return [case(name, make, inputs, factory=True, **kw) for name, make, inputs, kw in rows]


_BN_FLAG = "BatchNormalization -> Where"
_BN_CASES = [
    ("batch_norm_2d", _module("BatchNorm", 6), [("B", 6)], {"expect": ["BatchNormalization:Bx6"]}),
    (
        "batch_norm_nchw",
        _module("BatchNorm", 3, axis=1),
        [("B", 3, 4, 4)],
        {"expect": ["BatchNormalization:Bx3x4x4"], "counts": {"Transpose": 0}},
    ),
    (
        "batch_norm_nhwc",
        _module("BatchNorm", 3),
        [("B", 4, 4, 3)],
        {"expect": ["Mul -> Add:Bx4x4x3"], "counts": {"Transpose": 0, "BatchNormalization": 0}},
    ),
    (
        "batch_norm_plain",
        _module("BatchNorm", 6, use_scale=False, use_bias=False),
        [("B", 6)],
        {"expect": ["BatchNormalization"]},
    ),
    (
        "batch_norm_train_mode",
        _module("BatchNorm", 6, mode="train"),
        [("B", 6)],
        {"expect": ["BatchNormalization:Bx6"]},
    ),
    (
        "batch_norm_runtime_flag",
        _bn_runtime,
        [("B", 6)],
        {"input_params": {"use_running_average": True}, "expect": [_BN_FLAG]},
    ),
    (
        "batch_norm_runtime_flag_false",
        _bn_runtime,
        [("B", 6)],
        {"input_params": {"use_running_average": False}, "expect": [_BN_FLAG]},
    ),
    (
        "batch_norm_vmap",
        _vmapped(_module("BatchNorm", 3, axis=1, mode="eval")),
        [("B", 2, 3, 4)],
        {"expect": ["Mul -> Add:Bx2x3x4"], "counts": {"Transpose": 0}},
    ),
    ("batch_norm_grad", _grad(_module("BatchNorm", 6, mode="eval")), [("B", 6)], {}),
]


def _bn_runtime_stats(x, mean, var, scale):
    """Statistics and scale as graph inputs: the fused form computed in the graph."""
    params = dict(feature_axes=(2,), epsilon=1e-3, dtype=None, has_scale=True, has_bias=False)
    return batch_norm_p.bind(x, mean, var, scale, **params)


@rules.lowering(
    batch_norm_p,
    cases=[
        *_cases(_BN_CASES),
        case(
            "batch_norm_runtime_stats",
            _bn_runtime_stats,
            [("B", 4, 3), (3,), (3,), (3,)],
            input_range=(0.5, 2.0),
            expect=["Sqrt -> Reciprocal -> Mul", "Mul -> Add:Bx4x3"],
        ),
    ],
)
def batch_norm(ctx, x, mean, var, *rest, feature_axes, epsilon, dtype, has_scale, has_bias):
    """BatchNormalization for a feature axis 1, else the fused ``x * a + b`` (no Transposes).

    Other dtypes inline Flax's computation.
    """
    params = dict(
        feature_axes=feature_axes,
        epsilon=epsilon,
        dtype=dtype,
        has_scale=has_scale,
        has_bias=has_bias,
    )
    out = _float_out(ctx)
    if out is None:
        return _nrm(ctx, x, [mean, var, *rest], _batch_norm_impl, **params)
    x, mean, var, *rest = _cast_all(ctx, [x, mean, var, *rest], out)
    scale, bias = _optional(rest, has_scale, has_bias)
    shape = ctx.avals_in[0].shape
    channels = int(np.prod([shape[a] for a in feature_axes]))
    if feature_axes == (1,) and len(shape) >= 2:
        scale = scale if scale is not None else np.ones(channels, out)
        bias = bias if bias is not None else np.zeros(channels, out)
        return ctx.op.BatchNormalization(x, scale, bias, mean, var, epsilon=float(epsilon))
    fshape = [shape[a] if a in feature_axes else 1 for a in range(len(shape))]
    consts = [_const(v) for v in (mean, var, scale, bias)]
    if all(c is not None for c, v in zip(consts, (mean, var, scale, bias)) if v is not None):
        m, v, s, b = consts
        a = (np.ones(channels, out) if s is None else s) / np.sqrt(v + np.asarray(epsilon, out))
        shift = (np.zeros(channels, out) if b is None else b) - m * a
        a, shift = (
            ctx.const(a.astype(out).reshape(fshape)),
            ctx.const(shift.astype(out).reshape(fshape)),
        )
    else:
        inv = ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(var, np.asarray(epsilon, out))))
        a = inv if scale is None else ctx.op.Mul(scale, inv)
        shift = ctx.op.Neg(ctx.op.Mul(mean, a))
        shift = shift if bias is None else ctx.op.Add(bias, shift)
        a, shift = (_param_shaped(ctx, t, fshape, out) for t in (a, shift))
    return ctx.op.Add(ctx.op.Mul(x, a), shift)


def _trailing(ctx, reduction_axes, feature_axes) -> int | None:
    """The first normalised axis when ONNX's trailing-axes form fits (static normalised dims)."""
    shape = ctx.avals_in[0].shape
    ndim = len(shape)
    first = ndim - len(reduction_axes)
    if reduction_axes != tuple(range(first, ndim)) or not set(feature_axes) <= set(reduction_axes):
        return None
    if not all(isinstance(d, (int, np.integer)) for d in shape[first:]):
        return None
    return first


def _normalised_param(ctx, value, first, feature_axes, dtype):
    """A (C,) scale or bias laid out over the normalised dims ``shape[first:]``."""
    if value is None:
        return None
    shape = ctx.avals_in[0].shape
    tail = [int(d) for d in shape[first:]]
    fshape = [shape[a] if a in feature_axes else 1 for a in range(first, len(shape))]
    if value.const_value is not None:
        return ctx.const(np.broadcast_to(_const(value).astype(dtype).reshape(fshape), tail))
    y = ctx.op.Reshape(value, ctx.const(np.asarray(fshape, np.int64)))
    return y if fshape == tail else ctx.op.Expand(y, ctx.const(np.asarray(tail, np.int64)))


def _norm_op(ctx, op, x, rest, params):
    """One LayerNormalization/RMSNormalization, or None when the form does not fit."""
    out = _float_out(ctx)
    first = _trailing(ctx, params["reduction_axes"], params["feature_axes"])
    if out is None or first is None:
        return None
    x, *rest = _cast_all(ctx, [x, *rest], out)
    scale, bias = _optional(rest, params["has_scale"], params["has_bias"])
    tail = [int(d) for d in ctx.avals_in[0].shape[first:]]
    scale = _normalised_param(ctx, scale, first, params["feature_axes"], out)
    scale = scale if scale is not None else np.ones(tail, out)
    bias = _normalised_param(ctx, bias, first, params["feature_axes"], out)
    eps = float(params["epsilon"])
    if op == "RMSNormalization":
        return ctx.op.RMSNormalization(
            x, scale, axis=first, epsilon=eps, stash_type=11 if out == F64 else None
        )
    return ctx.op.LayerNormalization(x, scale, bias, axis=first, epsilon=eps)


_OFFSET = (30.0 + np.random.default_rng(3).standard_normal((4, 16))).astype(np.float32)
_LN = "LayerNormalization"
_LN_CASES = [
    ("layer_norm", _module("LayerNorm", 6), [("B", 6)], {"expect": [f"{_LN}:Bx6"]}),
    ("layer_norm_3d", _module("LayerNorm", 4), [("B", 3, 4)], {"expect": [f"{_LN}:Bx3x4"]}),
    (
        "layer_norm_two_axes",
        _module("LayerNorm", 12, reduction_axes=(1, 2), feature_axes=(1, 2)),
        [("B", 3, 4)],
        {"expect": [f"{_LN}:Bx3x4"]},
    ),
    (
        "layer_norm_features_last",
        _module("LayerNorm", 4, reduction_axes=(-2, -1)),
        [("B", 3, 4)],
        {"expect": [f"{_LN}:Bx3x4"]},
    ),
    (
        "layer_norm_middle_axis",
        _module("LayerNorm", 3, reduction_axes=1),
        [("B", 4, 3)],
        {"counts": {_LN: 0}},
    ),
    (
        "layer_norm_plain",
        _module("LayerNorm", 6, use_scale=False, use_bias=False),
        [("B", 6)],
        {"expect": [_LN]},
    ),
    (
        "layer_norm_exact_variance",
        _module("LayerNorm", 16, use_fast_variance=False),
        [_OFFSET],
        {"expect": [_LN]},
    ),
    (
        "layer_norm_fast_variance_offset",
        _module("LayerNorm", 16),
        [_OFFSET],
        {
            "variants": ["f32"],
            "xfail": "Flax's use_fast_variance computes E[x^2]-E[x]^2 in float32, which loses "
            "the variance of rows with a large mean (30 +- 1); LayerNormalization "
            "computes it accurately",
        },
    ),
    (
        "layer_norm_f16_input",
        _module("LayerNorm", 6),
        [("B", 6)],
        {"dtypes": [np.float16], "expect": ["Cast -> LayerNormalization:Bx6"]},
    ),
    ("layer_norm_vmap", _vmapped(_module("LayerNorm", 4)), [("B", 3, 4)], {"expect": [_LN]}),
    ("layer_norm_grad", _grad(_module("LayerNorm", 6)), [("B", 6)], {}),
]


@rules.lowering(layer_norm_p, min_opset=17, cases=_cases(_LN_CASES))
def layer_norm(ctx, x, *rest, **params):
    """One LayerNormalization over trailing axes (float32/float64, static normalised dims).

    Flax's scale and bias (over ``feature_axes``) broadcast to the normalised
    shape at conversion time. Other axes and dtypes inline Flax's computation.
    """
    y = _norm_op(ctx, "LayerNormalization", x, rest, params)
    return y if y is not None else _nrm(ctx, x, rest, _layer_norm_impl, **params)


@rules.lowering(rms_norm_p)
def rms_norm_decomposed(ctx, x, *rest, **params):
    """Flax's own statistics and normalisation, inlined (opsets without the ONNX op)."""
    return _nrm(ctx, x, rest, _layer_norm_impl, **params)


_RMS = "RMSNormalization"
_RMS_CASES = [
    ("rms_norm", _module("RMSNorm", 6), [("B", 6)], {"expect": [f"{_RMS}:Bx6"]}),
    ("rms_norm_3d", _module("RMSNorm", 4), [("B", 3, 4)], {"expect": [f"{_RMS}:Bx3x4"]}),
    ("rms_norm_plain", _module("RMSNorm", 6, use_scale=False), [("B", 6)], {"expect": [_RMS]}),
    ("rms_norm_opset21", _module("RMSNorm", 6), [("B", 6)], {"opset": 21, "counts": {_RMS: 0}}),
    ("rms_norm_vmap", _vmapped(_module("RMSNorm", 4)), [("B", 3, 4)], {"expect": [_RMS]}),
    ("rms_norm_grad", _grad(_module("RMSNorm", 6)), [("B", 6)], {}),
]


@rules.lowering(rms_norm_p, min_opset=23, cases=_cases(_RMS_CASES))
def rms_norm(ctx, x, *rest, **params):
    """One RMSNormalization over trailing axes (float32/float64; stash_type double for float64)."""
    y = _norm_op(ctx, "RMSNormalization", x, rest, params)
    return y if y is not None else _nrm(ctx, x, rest, _layer_norm_impl, **params)


_GN = "GroupNormalization"
_GN_CASES = [
    (
        "group_norm_nhwc",
        _module("GroupNorm", 6, num_groups=3),
        [("B", 4, 4, 6)],
        {"expect": [f"Transpose -> {_GN} -> Transpose:Bx4x4x6"], "counts": {"Transpose": 2}},
    ),
    (
        "group_norm_2d",
        _module("GroupNorm", 6, num_groups=2),
        [("B", 6)],
        {"expect": [f"{_GN}:Bx6"], "counts": {"Transpose": 0}},
    ),
    (
        "group_norm_group_size",
        _module("GroupNorm", 8, num_groups=None, group_size=2),
        [("B", 5, 8)],
        {"expect": [_GN]},
    ),
    (
        "group_norm_plain",
        _module("GroupNorm", 4, num_groups=2, use_scale=False, use_bias=False),
        [("B", 3, 4)],
        {"expect": [_GN]},
    ),
    (
        "group_norm_opset18",
        _module("GroupNorm", 6, num_groups=3),
        [("B", 4, 6)],
        {"opset": 18, "counts": {_GN: 0}},
    ),
    (
        "group_norm_vmap",
        _vmapped(_module("GroupNorm", 6, num_groups=3)),
        [("B", 2, 4, 6)],
        {"expect": [f"Reshape -> Transpose -> {_GN}"]},
    ),
    ("group_norm_grad", _grad(_module("GroupNorm", 6, num_groups=2)), [("B", 4, 6)], {}),
]


@rules.lowering(group_norm_p, min_opset=21, cases=_cases(_GN_CASES))
def group_norm(
    ctx,
    x,
    *rest,
    num_groups,
    reduction_axes,
    epsilon,
    dtype,
    use_fast_variance,
    has_scale,
    has_bias,
):
    """GroupNormalization (opset 21: per-channel scale and bias) on a channels-first view.

    Leading unreduced axes (a vmapped batch) merge into N with a Reshape;
    channels-last inputs of rank > 2 take one Transpose each way.
    """
    params = dict(
        num_groups=num_groups,
        reduction_axes=reduction_axes,
        epsilon=epsilon,
        dtype=dtype,
        use_fast_variance=use_fast_variance,
        has_scale=has_scale,
        has_bias=has_bias,
    )
    out = _float_out(ctx)
    shape = list(ctx.avals_in[0].shape)
    lead = len(shape) - len(reduction_axes)
    inner = shape[lead:]
    if out is None or not all(isinstance(d, (int, np.integer)) for d in inner):
        return _nrm(ctx, x, rest, _group_norm_impl, **params)
    x, *rest = _cast_all(ctx, [x, *rest], out)
    scale, bias = _optional(rest, has_scale, has_bias)
    channels = int(shape[-1])
    scale = scale if scale is not None else np.ones(channels, out)
    bias = bias if bias is not None else np.zeros(channels, out)
    if lead > 1:
        x = ctx.op.Reshape(x, ctx.const(np.asarray([-1, *inner], np.int64)))
    rank = len(inner) + 1
    perm = [0, rank - 1, *range(1, rank - 1)]
    if rank > 2:
        x = ctx.op.Transpose(x, perm=perm)
    y = ctx.op.GroupNormalization(
        x,
        scale,
        bias,
        num_groups=num_groups,
        epsilon=float(epsilon),
        stash_type=11 if out == F64 else None,
    )
    if rank > 2:
        y = ctx.op.Transpose(y, perm=[int(i) for i in np.argsort(perm)])
    return y if lead == 1 else ctx.op.Reshape(y, ctx.shape(shape))


@rules.lowering(group_norm_p)
def group_norm_decomposed(ctx, x, *rest, **params):
    """Flax's grouped statistics, inlined (opset 18's GroupNormalization scales per group)."""
    return _nrm(ctx, x, rest, _group_norm_impl, **params)
