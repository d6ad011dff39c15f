"""``nnx.BatchNorm`` and ``GroupNorm`` as macro primitives, and what every norm shares.

Each primitive evaluates with Flax's own arithmetic (``promote_dtype``, then
``_compute_stats`` and ``_normalize`` from ``flax.nnx.nn.normalization``), so
JAX's numbers are Flax's. The lowerings emit the ONNX op a human writes where
it computes the same numbers, and inline Flax's computation (the primitive's
``impl``, through ``ctx.fallback()``) otherwise:

- ``BatchNorm`` (running statistics): ``BatchNormalization`` when the feature
  axis is axis 1 (``(N, C)`` and ``NCHW``-style inputs); for channels-last
  inputs a fused scale and shift ``x * a + b`` with ``a = scale / sqrt(var +
  eps)`` and ``b = bias - mean * a`` folded at conversion time, which
  broadcasts along the last axis without the two Transposes an ONNX
  ``BatchNormalization`` would need (ONNX Runtime computes the very same fused
  form inside its kernel).
- ``GroupNorm``: ``GroupNormalization`` at opset >= 21 (per-channel scale and
  bias; Transposes to channels-first, float64 with ``stash_type`` double),
  Flax's exact decomposition below (opset 18's per-group scale is not Flax's).

``LayerNorm`` and ``RMSNorm`` are in :mod:`jax2onnx_flax.layer_norm`,
``Dropout`` in :mod:`jax2onnx_flax.dropout`. Batching is explicit (the vmapped
axis moves to the front and the axes renumber); JVPs differentiate Flax's
computation.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import batching

from jax2onnx.plugin import Family, case
from jax2onnx_flax._util import F64, const_value, factory_cases

family = Family("flax")
register = family.register


# -- shared by the norms -------------------------------------------------------------


def flax_normalization():
    """Flax's ``normalization`` and ``dtypes`` modules (imported on first use)."""
    from flax.nnx.nn import dtypes, normalization

    return normalization, dtypes


def optional_operands(rest, has_scale, has_bias):
    """``(scale, bias)`` from the operands after the input (``None`` where absent)."""
    rest = list(rest)
    scale = rest.pop(0) if has_scale else None
    bias = rest.pop(0) if has_bias else None
    return scale, bias


def norm_axes(ndim: int, axes: Any) -> tuple[int, ...]:
    """An axis or axes of an ``ndim`` input as sorted non-negative ints."""
    axes = axes if isinstance(axes, (tuple, list)) else (axes,)
    return tuple(sorted({int(a) % ndim for a in axes}))


def as_dtype(dtype: Any) -> np.dtype | None:
    return None if dtype is None else np.dtype(dtype)


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


def norm_primitive(family: Family, name, impl, axis_params):
    """The macro primitive ``flax.<name>`` of ``family``; ``axis_params`` renumber under vmap."""
    prim = family.primitive(
        name,
        impl=impl,
        batching=_axis_batching(lambda: prim, impl, axis_params),
        jvp="fallback",
    )
    return prim


def plain_module(module) -> bool:
    """Options the primitives cover: Flax's own promotion, no pmean axis."""
    _, dtypes = flax_normalization()
    return module.promote_dtype is dtypes.promote_dtype and module.axis_name is None


def module_arrays(module, *names):
    """The values of the module's arrays ``names`` that are present."""
    arrays = [getattr(module, n) for n in names]
    return [a[...] for a in arrays if a is not None]


def float_out(ctx) -> np.dtype | None:
    """The output dtype when it is a float (float64, float32, bfloat16, float16), else None.

    The ONNX ops run in it; a bfloat16 op without an ONNX Runtime kernel is widened
    by the converter's precision step, not here.
    """
    dt = np.dtype(ctx.avals_out[0].dtype)
    return dt if jnp.issubdtype(dt, jnp.floating) and dt.itemsize >= 2 else None


def cast_all(ctx, values, dtype):
    """``values`` cast to ``dtype`` (constants converted at conversion time)."""
    return [ctx.cast(v, dtype) for v in values]


def norm_module(cls, *args, mode=None, **kwargs):
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


def vmapped(factory):
    return lambda: jax.vmap(factory())


def grad_case(factory):
    def make():
        module = factory()
        return jax.grad(lambda x: (module(x) ** 2 * jnp.cos(x)).sum())

    return make


# -- nnx.BatchNorm -----------------------------------------------------------------------


def _batch_norm_impl(x, mean, var, *rest, feature_axes, epsilon, dtype, has_scale, has_bias):
    normalization, dtypes = flax_normalization()
    scale, bias = optional_operands(rest, has_scale, has_bias)
    x, mean, var, scale, bias = dtypes.promote_dtype((x, mean, var, scale, bias), dtype=dtype)
    reduction = tuple(a for a in range(x.ndim) if a not in feature_axes)
    return normalization._normalize(
        x, mean, var, scale, bias, reduction, feature_axes, dtype, epsilon
    )


batch_norm_p = norm_primitive(family, "batch_norm", _batch_norm_impl, ("feature_axes",))


def _bind_batch_norm(original):
    @functools.wraps(original)
    def call(self, x, use_running_average=None, *, mask=None):
        flag = self.use_running_average if use_running_average is None else use_running_average
        static = isinstance(flag, (bool, np.bool_))
        if flag is None or mask is not None or not plain_module(self) or (static and not flag):
            return original(self, x, use_running_average, mask=mask)
        feature_axes = norm_axes(jnp.ndim(x), self.axis)
        y = batch_norm_p.bind(
            x,
            *module_arrays(self, "mean", "var", "scale", "bias"),
            feature_axes=feature_axes,
            epsilon=float(self.epsilon),
            dtype=as_dtype(self.dtype),
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
    normalization, dtypes = flax_normalization()
    scale, bias = module_arrays(module, "scale") or [None], module_arrays(module, "bias") or [None]
    x, scale, bias = dtypes.promote_dtype((x, scale[0], bias[0]), dtype=module.dtype)
    reduction = tuple(a for a in range(x.ndim) if a not in feature_axes)
    mean, var = normalization._compute_stats(
        x, reduction, module.dtype, use_fast_variance=module.use_fast_variance
    )
    return normalization._normalize(
        x, mean, var, scale, bias, reduction, feature_axes, module.dtype, module.epsilon
    )


family.intercept("flax.nnx.BatchNorm.__call__", batch_norm_p, binder=_bind_batch_norm)


def _param_shaped(ctx, value, shape, dtype):
    """A (C,) parameter reshaped to ``shape`` (folded when constant); ``None`` stays."""
    if value is None:
        return None
    if value.const_value is not None:
        return ctx.const(value.const_value.numpy().astype(dtype).reshape(shape))
    return ctx.op.Reshape(value, ctx.i64(shape))


def _bn_runtime():
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self):
            self.bn = norm_module("BatchNorm", 6)()

        def __call__(self, x, use_running_average):
            return self.bn(x, use_running_average=use_running_average)

    return Net()


_BN_FLAG = "BatchNormalization -> Where"


def _batch_norm_cases():
    return [
        (
            "batch_norm_2d",
            norm_module("BatchNorm", 6),
            [("B", 6)],
            {"expect": ["BatchNormalization:Bx6"]},
        ),
        (
            "batch_norm_nchw",
            norm_module("BatchNorm", 3, axis=1),
            [("B", 3, 4, 4)],
            {"expect": ["BatchNormalization:Bx3x4x4"], "counts": {"Transpose": 0}},
        ),
        (
            "batch_norm_nhwc",
            norm_module("BatchNorm", 3),
            [("B", 4, 4, 3)],
            {"expect": ["Mul -> Add:Bx4x4x3"], "counts": {"Transpose": 0, "BatchNormalization": 0}},
        ),
        (
            "batch_norm_half_inputs",
            norm_module("BatchNorm", 6),
            [("B", 6)],
            {"variants": ["bf16", "f16"], "expect": ["Cast -> BatchNormalization:Bx6"]},
        ),
        (
            "batch_norm_nhwc_dtype_bfloat16",
            norm_module("BatchNorm", 3, dtype=jnp.bfloat16),
            [("B", 4, 4, 3)],
            {"variants": ["f32", "bf16"], "counts": {"BatchNormalization": 0}},
        ),
        (
            "batch_norm_plain",
            norm_module("BatchNorm", 6, use_scale=False, use_bias=False),
            [("B", 6)],
            {"expect": ["BatchNormalization"]},
        ),
        (
            "batch_norm_train_mode",
            norm_module("BatchNorm", 6, mode="train"),
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
            vmapped(norm_module("BatchNorm", 3, axis=1, mode="eval")),
            [("B", 2, 3, 4)],
            {"expect": ["Mul -> Add:Bx2x3x4"], "counts": {"Transpose": 0}},
        ),
        ("batch_norm_grad", grad_case(norm_module("BatchNorm", 6, mode="eval")), [("B", 6)], {}),
    ]


def _bn_runtime_stats(x, mean, var, scale):
    """Statistics and scale as graph inputs: the fused form computed in the graph."""
    params = dict(feature_axes=(2,), epsilon=1e-3, dtype=None, has_scale=True, has_bias=False)
    return batch_norm_p.bind(x, mean, var, scale, **params)


@family.lowering(
    batch_norm_p,
    cases=lambda: [
        *factory_cases(_batch_norm_cases()),
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
    out = float_out(ctx)
    if out is None:
        return ctx.fallback()
    x, mean, var, *rest = cast_all(ctx, [x, mean, var, *rest], out)
    scale, bias = optional_operands(rest, has_scale, has_bias)
    shape = ctx.avals_in[0].shape
    channels = int(np.prod([shape[a] for a in feature_axes]))
    if feature_axes == (1,) and len(shape) >= 2:
        scale = scale if scale is not None else np.ones(channels, out)
        bias = bias if bias is not None else np.zeros(channels, out)
        return ctx.op.BatchNormalization(x, scale, bias, mean, var, epsilon=float(epsilon))
    fshape = [shape[a] if a in feature_axes else 1 for a in range(len(shape))]
    consts = [const_value(v) for v in (mean, var, scale, bias)]
    if all(c is not None for c, v in zip(consts, (mean, var, scale, bias)) if v is not None):
        # folded in float64, rounded once to the output dtype
        m, v, s, b = (None if c is None else c.astype(F64) for c in consts)
        a = (np.ones(channels, F64) if s is None else s) / np.sqrt(v + epsilon)
        shift = (np.zeros(channels, F64) if b is None else b) - m * a
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


# -- nnx.GroupNorm -----------------------------------------------------------------------


def _group_norm_impl(
    x, *rest, num_groups, reduction_axes, epsilon, dtype, use_fast_variance, **flags
):
    """Flax's GroupNorm, repeating the statistics along their last (group) axis."""
    normalization, dtypes = flax_normalization()
    scale, bias = optional_operands(rest, **flags)
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


group_norm_p = norm_primitive(family, "group_norm", _group_norm_impl, ("reduction_axes",))


def _bind_group_norm(original):
    @functools.wraps(original)
    def call(self, x, *, mask=None):
        ndim = jnp.ndim(x)
        axes = self.reduction_axes
        axes = norm_axes(ndim, [*range(1, ndim - 1), -1] if axes is None else axes)
        if mask is not None or not plain_module(self) or axes != tuple(range(1, ndim)):
            return original(self, x, mask=mask)  # Flax's statistics are (N, groups) only
        return group_norm_p.bind(
            x,
            *module_arrays(self, "scale", "bias"),
            num_groups=int(self.num_groups),
            reduction_axes=axes,
            epsilon=float(self.epsilon),
            dtype=as_dtype(self.dtype),
            use_fast_variance=bool(self.use_fast_variance),
            has_scale=self.scale is not None,
            has_bias=self.bias is not None,
        )

    return call


family.intercept("flax.nnx.GroupNorm.__call__", group_norm_p, binder=_bind_group_norm)


_GN = "GroupNormalization"


def _group_norm_cases():
    return [
        (
            "group_norm_nhwc",
            norm_module("GroupNorm", 6, num_groups=3),
            [("B", 4, 4, 6)],
            {"expect": [f"Transpose -> {_GN} -> Transpose:Bx4x4x6"], "counts": {"Transpose": 2}},
        ),
        (
            "group_norm_2d",
            norm_module("GroupNorm", 6, num_groups=2),
            [("B", 6)],
            {"expect": [f"{_GN}:Bx6"], "counts": {"Transpose": 0}},
        ),
        (
            "group_norm_group_size",
            norm_module("GroupNorm", 8, num_groups=None, group_size=2),
            [("B", 5, 8)],
            {"expect": [_GN]},
        ),
        (
            "group_norm_half_inputs",
            norm_module("GroupNorm", 6, num_groups=3),
            [("B", 4, 6)],
            {"variants": ["bf16", "f16"], "expect": [_GN]},
        ),
        (
            "group_norm_dtype_bfloat16",
            norm_module("GroupNorm", 6, num_groups=3, dtype=jnp.bfloat16),
            [("B", 4, 6)],
            {
                "variants": ["f32", "bf16"],
                "expect": [_GN],
            },
        ),
        (
            "group_norm_plain",
            norm_module("GroupNorm", 4, num_groups=2, use_scale=False, use_bias=False),
            [("B", 3, 4)],
            {"expect": [_GN]},
        ),
        (
            "group_norm_opset18",
            norm_module("GroupNorm", 6, num_groups=3),
            [("B", 4, 6)],
            {"opset": 18, "counts": {_GN: 0}},
        ),
        (
            "group_norm_vmap",
            vmapped(norm_module("GroupNorm", 6, num_groups=3)),
            [("B", 2, 4, 6)],
            {"expect": [f"Reshape -> Transpose -> {_GN}"]},
        ),
        (
            "group_norm_grad",
            grad_case(norm_module("GroupNorm", 6, num_groups=2)),
            [("B", 4, 6)],
            {},
        ),
    ]


@family.lowering(group_norm_p, min_opset=21, cases=lambda: factory_cases(_group_norm_cases()))
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
    channels-last inputs of rank > 2 take one Transpose each way. With
    ``normalization_mode="force_decomposed"``, Flax's arithmetic is inlined.
    """
    out = float_out(ctx)
    shape = list(ctx.avals_in[0].shape)
    lead = len(shape) - len(reduction_axes)
    inner = shape[lead:]
    static = all(isinstance(d, (int, np.integer)) for d in inner)
    if out is None or not static or ctx.normalization_mode == "force_decomposed":
        return ctx.fallback()
    x, *rest = cast_all(ctx, [x, *rest], out)
    scale, bias = optional_operands(rest, has_scale, has_bias)
    channels = int(shape[-1])
    scale = scale if scale is not None else np.ones(channels, out)
    bias = bias if bias is not None else np.zeros(channels, out)
    if lead > 1:
        x = ctx.op.Reshape(x, ctx.i64([-1, *inner]))
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


@family.lowering(group_norm_p)
def group_norm_decomposed(ctx, x, *rest, **params):
    """Flax's grouped statistics, inlined (opset 18's GroupNormalization scales per group)."""
    return ctx.fallback()
