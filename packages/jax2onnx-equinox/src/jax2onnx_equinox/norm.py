"""``eqx.nn`` normalisation layers as macro primitives.

Equinox normalises ONE example; a batch is a ``jax.vmap``. Each primitive's
``impl`` is Equinox's own arithmetic on an input with leading (vmapped) axes,
and its batching rule binds the same primitive with one more leading axis, so
a vmapped (or twice vmapped) layer stays one ONNX op for the whole batch:

- ``LayerNorm`` -> ``LayerNormalization`` (opset >= 17) over the trailing
  ``shape`` axes; ``RMSNorm`` -> ``RMSNormalization`` (opset >= 23, then an
  ``Add`` for Equinox's bias); ``GroupNorm`` -> ``GroupNormalization``
  (opset >= 21: per-channel scale and bias as Equinox has them; opset 18's
  per-group scale is not Equinox's). Older opsets and
  ``normalization_mode="force_decomposed"`` inline Equinox's computation.
- ``BatchNorm`` in inference mode -> ``BatchNormalization`` with the running
  statistics read from the ``eqx.nn.State`` at conversion time (``"ema"``
  buffers, or ``"batch"`` mode's debiased averages) as initializers.
- ``SpectralNorm`` / ``WeightNorm`` compute the normalised weight at conversion
  time and call the wrapped layer with it, so a wrapped ``Linear`` or ``Conv``
  converts as it does alone (one Gemm / Conv with the weight an initializer).

Calls the primitives do not cover (complex inputs, a training-mode or runtime
``inference`` flag, shapes Equinox rejects) run Equinox's own method.
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, at_conversion
from jax2onnx_equinox import _norm_cases as cases
from jax2onnx_equinox._util import F64, FLOATS, factory_cases, x_batched

family = Family("equinox")
register = family.register

# -- shared ------------------------------------------------------------------------------


def _optional(rest, *flags):
    """The operands after the input, ``None`` where a flag says the array is absent."""
    rest = list(rest)
    return [rest.pop(0) if flag else None for flag in flags]


def _compute_dtype(dtype):
    """Equinox's ``jnp.result_type(x.dtype, jnp.float32)`` under standard promotion."""
    with jax.numpy_dtype_promotion("standard"):
        return jnp.result_type(dtype, jnp.float32)


def _real_float(x) -> bool:
    return jnp.issubdtype(_compute_dtype(jnp.result_type(x)), jnp.floating)


def _as(dtype, *arrays):
    """The module's arrays cast to ``dtype`` now (initializers), ``None`` kept."""
    return [None if a is None else at_conversion(jnp.asarray, a, dtype) for a in arrays]


def _norm_primitive(name, impl, axis_param):
    """A macro primitive whose batching rule binds it again with ``axis_param`` + 1."""

    def bind(x, *rest, **params):
        params[axis_param] += 1
        return prim.bind(x, *rest, **params), 0

    prim = family.primitive(name, impl=impl, batching=x_batched(impl, bind), jvp="fallback")
    return prim


def _stateless_binder(bind_call):
    """A stand-in for ``LayerNorm``/``RMSNorm``/``GroupNorm.__call__`` (``state`` passes through).

    ``bind_call(self, x)`` returns the output, or ``None`` to run Equinox's method.
    """

    def binder(original):
        # Equinox's own "no state given" default, so the stand-in's signature is the original's
        absent = inspect.signature(original).parameters["state"].default

        @functools.wraps(original)
        def call(self, x, state=absent, *, key=None):
            y = bind_call(self, x) if _real_float(x) else None
            if y is None:
                return original(self, x, state, key=key)
            return y if state is absent else (y, state)

        return call

    return binder


def _float_out(ctx):
    dt = np.dtype(ctx.avals_out[0].dtype)
    return dt if dt in FLOATS else None


def _static(dims) -> bool:
    return all(isinstance(d, (int, np.integer)) for d in dims)


def _channels_first(ctx, x, lead):
    """``x`` with its ``lead`` leading axes as one N axis (channels at axis 1), and the
    function restoring the original shape; ``None`` when the per-example dims are symbolic."""
    shape = ctx.avals_in[0].shape
    if lead == 1:
        return x, lambda y: y
    if lead == 0:
        return ctx.op.Unsqueeze(x, ctx.i64([0])), lambda y: ctx.op.Squeeze(y, ctx.i64([0]))
    inner = shape[lead:]
    if not _static(inner):
        return None
    flat = ctx.op.Reshape(x, ctx.i64([-1, *[int(d) for d in inner]]))
    return flat, lambda y: ctx.op.Reshape(y, ctx.shape(shape))


# -- LayerNorm -----------------------------------------------------------------------------


def _layer_norm_impl(x, *rest, axis, eps, has_weight, has_bias):
    """Equinox's LayerNorm over the axes ``axis:`` (``x`` already in its compute dtype)."""
    weight, bias = _optional(rest, has_weight, has_bias)
    axes = tuple(range(axis, x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    variance = jnp.maximum(0.0, jnp.var(x, axis=axes, keepdims=True))
    out = (x - mean) * jax.lax.rsqrt(variance + eps)
    if weight is not None:
        out = weight.astype(x.dtype) * out
    if bias is not None:
        out = out + bias.astype(x.dtype)
    return out


layer_norm_p = _norm_primitive("eqx_layer_norm", _layer_norm_impl, "axis")


def _rms_norm_impl(x, *rest, axis, eps, has_weight, has_bias):
    """Equinox's RMSNorm over the axes ``axis:`` (``x`` already in its compute dtype)."""
    weight, bias = _optional(rest, has_weight, has_bias)
    axes = tuple(range(axis, x.ndim))
    out = jax.lax.rsqrt(jnp.mean(x**2, axis=axes, keepdims=True) + eps) * x
    if weight is not None:
        out = weight.astype(x.dtype) * out
    if bias is not None:
        out = out + bias.astype(x.dtype)
    return out


rms_norm_p = _norm_primitive("eqx_rms_norm", _rms_norm_impl, "axis")


def _bind_shaped(prim):
    def bind_call(self, x):
        if jnp.shape(x) != tuple(self.shape):
            return None  # Equinox raises its own error
        orig = jnp.result_type(x)
        dtype = _compute_dtype(orig)
        weight = self.weight if self.use_weight else None
        bias = self.bias if self.use_bias else None
        arrays = [a for a in _as(dtype, weight, bias) if a is not None]
        y = prim.bind(
            jnp.asarray(x).astype(dtype),
            *arrays,
            axis=0,
            eps=float(self.eps),
            has_weight=weight is not None,
            has_bias=bias is not None,
        )
        return y.astype(orig)

    return _stateless_binder(bind_call)


family.intercept("equinox.nn.LayerNorm.__call__", layer_norm_p, binder=_bind_shaped(layer_norm_p))
family.intercept("equinox.nn.RMSNorm.__call__", rms_norm_p, binder=_bind_shaped(rms_norm_p))


def _scale_bias(ctx, rest, params, out):
    """``(scale, bias)`` for the ONNX op: ones for a missing weight, ``None`` for no bias."""
    weight, bias = _optional(rest, params["has_weight"], params["has_bias"])
    if weight is None:
        weight = ctx.const(np.ones([int(d) for d in ctx.avals_in[0].shape[params["axis"] :]], out))
    return weight, bias


@family.lowering(layer_norm_p, min_opset=17, native_dtypes=FLOATS)
def layer_norm(ctx, x, *rest, axis, eps, has_weight, has_bias):
    """One LayerNormalization over the trailing axes ``axis:`` (Equinox's ``shape``).

    ``normalization_mode="force_decomposed"`` (and opsets < 17) inline Equinox's
    mean, variance and rsqrt.
    """
    out = _float_out(ctx)
    if out is None or ctx.normalization_mode == "force_decomposed":
        return ctx.fallback()
    params = dict(axis=axis, has_weight=has_weight, has_bias=has_bias)
    scale, bias = _scale_bias(ctx, rest, params, out)
    stash = 11 if out == F64 else None  # float64 statistics for float64 inputs
    return ctx.op.LayerNormalization(x, scale, bias, axis=axis, epsilon=eps, stash_type=stash)


@family.lowering(rms_norm_p, min_opset=23, native_dtypes=FLOATS)
def rms_norm(ctx, x, *rest, axis, eps, has_weight, has_bias):
    """One RMSNormalization over the trailing axes ``axis:``, then ``Add`` of Equinox's bias
    (the ONNX op has no bias). Opsets < 23 and ``force_decomposed`` inline Equinox's code."""
    out = _float_out(ctx)
    if out is None or ctx.normalization_mode == "force_decomposed":
        return ctx.fallback()
    params = dict(axis=axis, has_weight=has_weight, has_bias=has_bias)
    scale, bias = _scale_bias(ctx, rest, params, out)
    stash = 11 if out == F64 else None
    y = ctx.op.RMSNormalization(x, scale, axis=axis, epsilon=eps, stash_type=stash)
    return y if bias is None else ctx.op.Add(y, bias)


# -- GroupNorm -----------------------------------------------------------------------------


def _group_norm_impl(x, *rest, lead, groups, eps, has_affine):
    """Equinox's GroupNorm on ``x`` of shape ``(*lead axes, channels, ...)``."""
    weight, bias = _optional(rest, has_affine, has_affine)
    shape = x.shape
    channels = shape[lead]
    y = x.reshape(*shape[:lead], groups, channels // groups, *shape[lead + 1 :])
    axes = tuple(range(lead + 1, y.ndim))
    mean = jnp.mean(y, axis=axes, keepdims=True)
    variance = jnp.maximum(0.0, jnp.var(y, axis=axes, keepdims=True))
    out = ((y - mean) * jax.lax.rsqrt(variance + eps)).reshape(shape)
    if weight is not None:
        per_channel = (channels,) + (1,) * (x.ndim - lead - 1)
        out = weight.reshape(per_channel).astype(x.dtype) * out + bias.reshape(per_channel).astype(
            x.dtype
        )
    return out


group_norm_p = _norm_primitive("eqx_group_norm", _group_norm_impl, "lead")


def _bind_group_norm(self, x):
    shape = jnp.shape(x)
    if not shape or shape[0] % self.groups:
        return None
    orig = jnp.result_type(x)
    dtype = _compute_dtype(orig)
    affine = self.channelwise_affine
    arrays = _as(dtype, self.weight, self.bias) if affine else []
    y = group_norm_p.bind(
        jnp.asarray(x).astype(dtype),
        *arrays,
        lead=0,
        groups=int(self.groups),
        eps=float(self.eps),
        has_affine=bool(affine),
    )
    return y.astype(orig)


family.intercept(
    "equinox.nn.GroupNorm.__call__", group_norm_p, binder=_stateless_binder(_bind_group_norm)
)


@family.lowering(group_norm_p, min_opset=21, native_dtypes=FLOATS)
def group_norm(ctx, x, *rest, lead, groups, eps, has_affine):
    """One GroupNormalization (opset 21: per-channel scale and bias, as Equinox's).

    The leading (vmapped) axes become ONNX's N axis: none -> Unsqueeze/Squeeze,
    two or more -> Reshape around the op. Opsets < 21 (whose scale is per group)
    and ``force_decomposed`` inline Equinox's grouped statistics.
    """
    out = _float_out(ctx)
    framed = None if out is None else _channels_first(ctx, x, lead)
    if framed is None or ctx.normalization_mode == "force_decomposed":
        return ctx.fallback()
    x, restore = framed
    channels = int(ctx.avals_in[0].shape[lead])
    weight, bias = _optional(rest, has_affine, has_affine)
    weight = weight if weight is not None else np.ones(channels, out)
    bias = bias if bias is not None else np.zeros(channels, out)
    y = ctx.op.GroupNormalization(
        x, weight, bias, num_groups=groups, epsilon=eps, stash_type=11 if out == F64 else None
    )
    return restore(y)


# -- BatchNorm -----------------------------------------------------------------------------


def _batch_norm_impl(x, mean, var, *rest, axis, eps, has_affine):
    """Equinox's inference-mode BatchNorm with channels at ``axis`` (dtypes as Equinox mixes
    them: the statistics' ``sqrt(var + eps)`` in their own dtype)."""
    weight, bias = _optional(rest, has_affine, has_affine)
    per_channel = [1] * x.ndim
    per_channel[axis] = -1
    out = (x - mean.reshape(per_channel)) / jnp.sqrt(var.reshape(per_channel) + eps)
    if weight is not None:
        out = out * weight.reshape(per_channel) + bias.reshape(per_channel)
    return out


batch_norm_p = _norm_primitive("eqx_batch_norm", _batch_norm_impl, "axis")


def _running_statistics(module, state):
    """Equinox's inference-mode ``(mean, var)``: the EMA buffers, or the debiased
    ``"batch"``-mode averages (computed now when the state is concrete)."""
    if getattr(module, "mode", "ema") == "ema":
        return state.get(module.ema_state_index)
    counter = state.get(module.batch_counter)
    mean, var = state.get(module.batch_state_index)
    scale = jnp.where(counter == 0, 1, 1 - module.momentum**counter)
    return mean / scale, var / scale


def _bind_batch_norm(original):
    @functools.wraps(original)
    def call(self, x, state, *, key=None, inference=None):
        flag = self.inference if inference is None else inference
        if not isinstance(flag, (bool, np.bool_)) or not flag or not _real_float(x):
            return original(self, x, state, key=key, inference=inference)
        mean, var = at_conversion(_running_statistics, self, state)
        affine = [self.weight, self.bias] if self.channelwise_affine else []
        y = batch_norm_p.bind(
            jnp.asarray(x),
            mean,
            var,
            *affine,
            axis=0,
            eps=float(self.eps),
            has_affine=bool(self.channelwise_affine),
        )
        return y, state

    return call


family.intercept("equinox.nn.BatchNorm.__call__", batch_norm_p, binder=_bind_batch_norm)


def _bn_operands(ctx, mean, var, rest, eps, has_affine, out):
    """Scale, bias, mean and variance in the output dtype for BatchNormalization, or ``None``.

    Where Equinox computes ``sqrt(var + eps)`` in the statistics' narrower dtype
    (float32 buffers, float64 input) the denominator is rounded as Equinox rounds
    it, at conversion time, and passed as ``d**2 - eps``: ONNX's ``sqrt(var + eps)``
    then gives that float64 denominator back to within float64 rounding.
    """
    weight, bias = _optional(rest, has_affine, has_affine)
    values = [mean, var, weight, bias]
    channels = int(ctx.avals_in[1].shape[0])
    if all(np.dtype(a.dtype) == out for a in ctx.avals_in[1:]):
        weight = weight if weight is not None else np.ones(channels, out)
        bias = bias if bias is not None else np.zeros(channels, out)
        return weight, bias, mean, var
    if any(v is not None and v.const_value is None for v in values):
        return None  # mixed dtypes on statistics computed in the graph
    m, v, w, b = (None if a is None else a.const_value.numpy() for a in values)
    denom = np.sqrt(v + np.asarray(eps, v.dtype)).astype(out)
    w = np.ones(channels, out) if w is None else w.astype(out)
    b = np.zeros(channels, out) if b is None else b.astype(out)
    return w, b, m.astype(out), denom * denom - np.asarray(eps, out)


@family.lowering(batch_norm_p, native_dtypes=FLOATS)
def batch_norm(ctx, x, mean, var, *rest, axis, eps, has_affine):
    """One BatchNormalization with the running statistics (channels at ``axis``).

    The leading (vmapped) axes become ONNX's N axis: none (one example) ->
    Unsqueeze/Squeeze, two or more -> Reshape around the op. Other dtypes
    inline Equinox's arithmetic.
    """
    out = _float_out(ctx)
    # a narrower input (bfloat16 with float32 statistics) promotes exactly, as in Equinox
    framed = None if out is None else _channels_first(ctx, ctx.cast(x, out), axis)
    operands = None if framed is None else _bn_operands(ctx, mean, var, rest, eps, has_affine, out)
    if operands is None:
        return ctx.fallback()
    x, restore = framed
    return restore(ctx.op.BatchNormalization(x, *operands, epsilon=eps))


# -- SpectralNorm, WeightNorm --------------------------------------------------------------


def _with_weight(module, weight):
    import equinox as eqx

    return eqx.tree_at(lambda m: getattr(m, module.weight_name), module.layer, weight)


def _spectral_weight(module, state):
    """Equinox's ``weight / sigma`` from the stored power-iteration vectors (inference)."""
    u, v = state.get(module.uv_index)
    weight = getattr(module.layer, module.weight_name)
    matrix = jnp.reshape(weight, (weight.shape[0], -1))
    sigma = jnp.einsum("i,ij,j->", u, matrix, v)
    return jnp.reshape(matrix / sigma, weight.shape)


def _bind_spectral_norm(original):
    @functools.wraps(original)
    def call(self, x, state, *, key=None, inference=None):
        flag = self.inference if inference is None else inference
        if not isinstance(flag, (bool, np.bool_)) or not flag:
            return original(self, x, state, key=key, inference=inference)
        layer = _with_weight(self, at_conversion(_spectral_weight, self, state))
        return layer(x), state

    return call


def _weight_norm_weight(module):
    v = getattr(module.layer, module.weight_name)
    return v * module.g / module._norm(v)


def _bind_weight_norm(original):
    @functools.wraps(original)
    def call(self, x, *, key=None):
        return _with_weight(self, at_conversion(_weight_norm_weight, self))(x)

    return call


family.intercept("equinox.nn.SpectralNorm.__call__", None, binder=_bind_spectral_norm)
family.intercept("equinox.nn.WeightNorm.__call__", None, binder=_bind_weight_norm)


family.add_cases(layer_norm_p, lambda: factory_cases(cases.layer_norm()))
family.add_cases(rms_norm_p, lambda: factory_cases(cases.rms_norm()))
family.add_cases(group_norm_p, lambda: factory_cases(cases.group_norm()))
family.add_cases(batch_norm_p, lambda: factory_cases(cases.batch_norm()))
family.add_cases("eqx_weight_norms", lambda: factory_cases(cases.weight_norms()))
