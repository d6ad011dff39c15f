"""``nnx.LayerNorm`` and ``RMSNorm`` as macro primitives (shared parts: :mod:`jax2onnx_flax.norm`).

- ``LayerNorm``: ``LayerNormalization`` (opset >= 17) over trailing reduction
  axes; Flax's ``use_fast_variance`` (``E[x^2] - E[x]^2``) differs from the
  exact variance only by rounding for inputs whose mean is small against their
  spread (a case shows where it does not).
- ``RMSNorm``: ``RMSNormalization`` at opset >= 23 (ONNX Runtime 1.31 runs it in
  float32 and float64), Flax's exact decomposition below.

Both evaluate with Flax's own ``_compute_stats`` and ``_normalize``; other axes
and dtypes inline that computation. Scale and bias (over ``feature_axes``)
broadcast to the normalised shape at conversion time.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, call_arguments
from jax2onnx_flax._util import F64, const_value, factory_cases
from jax2onnx_flax.norm import (
    as_dtype,
    cast_all,
    flax_normalization,
    float_out,
    grad_case,
    module_arrays,
    norm_axes,
    norm_module,
    norm_primitive,
    optional_operands,
    plain_module,
    vmapped,
)

family = Family("flax")
register = family.register


def _layer_norm_impl(
    x, *rest, reduction_axes, feature_axes, epsilon, dtype, use_fast_variance, use_mean, **flags
):
    normalization, dtypes = flax_normalization()
    scale, bias = optional_operands(rest, **flags)
    x, scale, bias = dtypes.promote_dtype((x, scale, bias), dtype=dtype)
    mean, var = normalization._compute_stats(
        x, reduction_axes, dtype, use_mean=use_mean, use_fast_variance=use_fast_variance
    )
    return normalization._normalize(
        x, mean, var, scale, bias, reduction_axes, feature_axes, dtype, epsilon
    )


layer_norm_p = norm_primitive(
    family, "layer_norm", _layer_norm_impl, ("reduction_axes", "feature_axes")
)
rms_norm_p = norm_primitive(
    family, "rms_norm", _layer_norm_impl, ("reduction_axes", "feature_axes")
)


def _bind_layer_norm(prim, use_mean):
    def make(original):
        arguments = call_arguments(original)  # RMSNorm takes mask positionally, LayerNorm not

        @functools.wraps(original)
        def call(*args, **kwargs):
            named = arguments(*args, **kwargs)
            if named is None or any(named[k] is not None for k in set(named) - {"self", "x"}):
                return original(*args, **kwargs)
            self, x = named["self"], named["x"]
            if not plain_module(self):
                return original(*args, **kwargs)
            ndim = jnp.ndim(x)
            has_bias = use_mean and self.bias is not None
            return prim.bind(
                x,
                *module_arrays(self, "scale", *(["bias"] if has_bias else [])),
                reduction_axes=norm_axes(ndim, self.reduction_axes),
                feature_axes=norm_axes(ndim, self.feature_axes),
                epsilon=float(self.epsilon),
                dtype=as_dtype(self.dtype),
                use_fast_variance=bool(self.use_fast_variance),
                use_mean=use_mean,
                has_scale=self.scale is not None,
                has_bias=has_bias,
            )

        return call

    return make


family.intercept(
    "flax.nnx.LayerNorm.__call__", layer_norm_p, binder=_bind_layer_norm(layer_norm_p, True)
)
family.intercept(
    "flax.nnx.RMSNorm.__call__", rms_norm_p, binder=_bind_layer_norm(rms_norm_p, False)
)


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
        return ctx.const(np.broadcast_to(const_value(value).astype(dtype).reshape(fshape), tail))
    y = ctx.op.Reshape(value, ctx.i64(fshape))
    return y if fshape == tail else ctx.op.Expand(y, ctx.i64(tail))


def _norm_op(ctx, op, x, rest, params):
    """One LayerNormalization/RMSNormalization, or None when the form does not fit
    (or ``normalization_mode="force_decomposed"`` asks for Flax's arithmetic)."""
    if ctx.normalization_mode == "force_decomposed":
        return None
    out = float_out(ctx)
    first = _trailing(ctx, params["reduction_axes"], params["feature_axes"])
    if out is None or first is None:
        return None
    x, *rest = cast_all(ctx, [x, *rest], out)
    scale, bias = optional_operands(rest, params["has_scale"], params["has_bias"])
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


def _layer_norm_cases():
    return [
        ("layer_norm", norm_module("LayerNorm", 6), [("B", 6)], {"expect": [f"{_LN}:Bx6"]}),
        ("layer_norm_3d", norm_module("LayerNorm", 4), [("B", 3, 4)], {"expect": [f"{_LN}:Bx3x4"]}),
        (
            # half inputs promote to the float32 parameters
            "layer_norm_half_inputs",
            norm_module("LayerNorm", 8),
            [("B", 3, 8)],
            {"variants": ["bf16", "f16"], "expect": [f"Cast -> {_LN}:Bx3x8"]},
        ),
        (
            # computes in bfloat16 (dtype), statistics in float32 as Flax reduces
            "layer_norm_dtype_bfloat16",
            norm_module("LayerNorm", 8, dtype=jnp.bfloat16),
            [("B", 3, 8)],
            {"variants": ["f32", "bf16"], "expect": [f"{_LN}:Bx3x8"]},
        ),
        (
            "layer_norm_two_axes",
            norm_module("LayerNorm", 12, reduction_axes=(1, 2), feature_axes=(1, 2)),
            [("B", 3, 4)],
            {"expect": [f"{_LN}:Bx3x4"]},
        ),
        (
            "layer_norm_features_last",
            norm_module("LayerNorm", 4, reduction_axes=(-2, -1)),
            [("B", 3, 4)],
            {"expect": [f"{_LN}:Bx3x4"]},
        ),
        (
            "layer_norm_middle_axis",
            norm_module("LayerNorm", 3, reduction_axes=1),
            [("B", 4, 3)],
            {"counts": {_LN: 0}},
        ),
        (
            "layer_norm_plain",
            norm_module("LayerNorm", 6, use_scale=False, use_bias=False),
            [("B", 6)],
            {"expect": [_LN]},
        ),
        (
            "layer_norm_exact_variance",
            norm_module("LayerNorm", 16, use_fast_variance=False),
            [_OFFSET],
            {"expect": [_LN]},
        ),
        (
            "layer_norm_fast_variance_offset",
            norm_module("LayerNorm", 16),
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
            norm_module("LayerNorm", 6),
            [("B", 6)],
            {"dtypes": [np.float16], "expect": ["Cast -> LayerNormalization:Bx6"]},
        ),
        ("layer_norm_vmap", vmapped(norm_module("LayerNorm", 4)), [("B", 3, 4)], {"expect": [_LN]}),
        ("layer_norm_grad", grad_case(norm_module("LayerNorm", 6)), [("B", 6)], {}),
    ]


@family.lowering(layer_norm_p, min_opset=17, cases=lambda: factory_cases(_layer_norm_cases()))
def layer_norm(ctx, x, *rest, **params):
    """One LayerNormalization over trailing axes (float32/float64, static normalised dims).

    Flax's scale and bias (over ``feature_axes``) broadcast to the normalised
    shape at conversion time. Other axes and dtypes inline Flax's computation.
    """
    y = _norm_op(ctx, "LayerNormalization", x, rest, params)
    return y if y is not None else ctx.fallback()


@family.lowering(rms_norm_p)
def rms_norm_decomposed(ctx, x, *rest, **params):
    """Flax's own statistics and normalisation, inlined (opsets without the ONNX op)."""
    return ctx.fallback()


_RMS = "RMSNormalization"


def _rms_norm_cases():
    return [
        ("rms_norm", norm_module("RMSNorm", 6), [("B", 6)], {"expect": [f"{_RMS}:Bx6"]}),
        ("rms_norm_3d", norm_module("RMSNorm", 4), [("B", 3, 4)], {"expect": [f"{_RMS}:Bx3x4"]}),
        (
            "rms_norm_half_inputs",
            norm_module("RMSNorm", 8),
            [("B", 3, 8)],
            {"variants": ["bf16", "f16"], "expect": [f"Cast -> {_RMS}:Bx3x8"]},
        ),
        (
            "rms_norm_dtype_bfloat16",
            norm_module("RMSNorm", 8, dtype=jnp.bfloat16),
            [("B", 3, 8)],
            {"variants": ["f32", "bf16"], "expect": [_RMS]},
        ),
        (
            "rms_norm_plain",
            norm_module("RMSNorm", 6, use_scale=False),
            [("B", 6)],
            {"expect": [_RMS]},
        ),
        (
            "rms_norm_opset21",
            norm_module("RMSNorm", 6),
            [("B", 6)],
            {"opset": 21, "counts": {_RMS: 0}},
        ),
        ("rms_norm_vmap", vmapped(norm_module("RMSNorm", 4)), [("B", 3, 4)], {"expect": [_RMS]}),
        ("rms_norm_grad", grad_case(norm_module("RMSNorm", 6)), [("B", 6)], {}),
    ]


@family.lowering(rms_norm_p, min_opset=23, cases=lambda: factory_cases(_rms_norm_cases()))
def rms_norm(ctx, x, *rest, **params):
    """One RMSNormalization over trailing axes (float32/float64; stash_type double for float64)."""
    y = _norm_op(ctx, "RMSNormalization", x, rest, params)
    return y if y is not None else ctx.fallback()
