"""Flax Linen ``BatchNorm``, ``LayerNorm``, ``RMSNorm``, ``GroupNorm`` as the NNX norm primitives.

The stand-ins run inside Linen's method wrapper (see :mod:`jax2onnx_flax.linen`),
read the statistics and parameters with ``module.variable``/``module.param`` in
the order, shapes and dtypes the layer does, and bind the primitives the NNX
layers bind (``batch_norm``, ``layer_norm``, ``rms_norm``, ``group_norm`` of
:mod:`jax2onnx_flax.norm` and :mod:`jax2onnx_flax.layer_norm`), so a Linen layer
lowers to the same ONNX op as its NNX twin: BatchNormalization (or the fused
``x * a + b`` for channels-last inputs), LayerNormalization, RMSNormalization
(opset >= 23), GroupNormalization (opset >= 21), each honouring
``normalization_mode``.

Linen does not promote its input: statistics are computed in
``promote_types(dtype or x.dtype, float32)`` (with ``force_float32_reductions``)
and the result is cast to ``canonicalize_dtype(x, scale, bias, dtype=dtype)``.
The stand-ins bind the primitive in that arithmetic dtype and cast the result
to Linen's dtype; a layer whose arithmetic mixes precisions in a way the
primitive does not (statistics narrower than the input or the parameters) runs
Flax's own code. ``mask`` and ``axis_name`` also run Flax's own code.

``BatchNorm``'s ``use_running_average`` is resolved with :func:`linen.merged`
(pinned to True in inference mode). A concrete False runs Flax's own method
when ``batch_stats`` is mutable (batch statistics, running averages updated);
with immutable statistics, where Flax would refuse the update (a bound model
exported with its own ``train`` flag as an input: one branch per value), it
normalises with the batch statistics and leaves the averages as they are, as
an exported NNX layer does (an export has no state output).
A traced flag (a runtime input) selects with ``Where`` between the primitive
(running statistics) and Flax's batch-statistics normalisation; when
``batch_stats`` is mutable (``apply(..., mutable=["batch_stats"])``) the
running averages are updated as Flax does, selected by the same flag, so
either value of the flag computes what Flax computes with that bool (the
averages keep their stored dtype; Flax's training step alone would widen
float32 averages to float64 for float64 data). With
immutable statistics (a bound module exported with the flag as an input) the
averages cannot change, as for the NNX layer.
Linen computes ``rsqrt(var + eps) * scale`` in the running statistics' dtype
even for a wider input (float64 data, float32 statistics); that factor is then
computed at conversion time in Flax's precision and bound as the scale over
unit variance and zero epsilon, so the numbers stay Flax's.

Dropout, Embed, SpectralNorm and WeightNorm are in
:mod:`jax2onnx_flax.linen_layers`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, at_conversion, case
from jax2onnx_flax._util import linen_factory, linen_params, via_apply
from jax2onnx_flax.layer_norm import layer_norm_p, rms_norm_p
from jax2onnx_flax.linen import LinenStandIn, merged
from jax2onnx_flax.norm import batch_norm_p, flax_normalization, group_norm_p, norm_axes

family = Family("flax")


register = family.register


def _linen_normalization():
    from flax.linen import dtypes, normalization

    return normalization, dtypes


def _params(module, x, feature_axes, use_scale, use_bias):
    """``scale`` and ``bias`` read as Linen's ``_normalize`` reads them (``None`` when off).

    ``module.param`` reserves the name for this call, so a stand-in reads
    them once, after deciding whether Flax's own method runs instead.
    """
    normalization, _ = _linen_normalization()
    ndim = jnp.ndim(x)
    shape = [x.shape[a] for a in normalization._canonicalize_axes(ndim, feature_axes)]
    out = []
    for name, used in (("scale", use_scale), ("bias", use_bias)):
        init = getattr(module, f"{name}_init") if used else None
        value = module.param(name, init, shape, module.param_dtype) if used else None
        if value is not None and not module.force_float32_reductions:
            value = at_conversion(jnp.asarray, value, module.param_dtype)
        out.append(value)
    return out


def _param_dtypes(module, use_scale, use_bias):
    """The dtypes :func:`_params` will return (stored, or ``param_dtype`` when made).

    The stored arrays are read unboxed (:func:`linen_params`), as ``module.param``
    will return them.
    """
    stored_params = linen_params(module)
    out = []
    for name, used in (("scale", use_scale), ("bias", use_bias)):
        stored = stored_params.get(name) if used else None
        keep = stored is not None and module.force_float32_reductions
        out.append(
            None if not used else np.dtype(jnp.result_type(stored) if keep else module.param_dtype)
        )
    return out


def _out_dtype(module, x, scale, bias):
    """Linen's result dtype: ``canonicalize_dtype(x, scale, bias, dtype=module.dtype)``."""
    _, dtypes = _linen_normalization()
    return np.dtype(dtypes.canonicalize_dtype(x, scale, bias, dtype=module.dtype))


def _cast(y, dtype):
    return y if np.dtype(y.dtype) == dtype else y.astype(dtype)


def _stats_dtype(module, x) -> np.dtype:
    """The dtype of Linen's ``_compute_stats`` for this layer and input."""
    dtype = jnp.result_type(x) if module.dtype is None else module.dtype
    if module.force_float32_reductions:
        dtype = jnp.promote_types(dtype, jnp.float32)
    return np.dtype(dtype)


def _exact_dtype(module, x, param_dtypes) -> np.dtype | None:
    """The dtype the primitive computes in when it is all of Linen's arithmetic, else None.

    Linen reduces in the statistics' dtype and promotes ``x - mean`` and
    ``mul * scale`` with JAX's rules; the primitive casts everything to one
    dtype and reduces in at least float32. Both agree when that one dtype is
    the statistics' dtype and at least float32.
    """
    stats = _stats_dtype(module, x)
    dtype = np.dtype(jnp.result_type(x, stats, *(d for d in param_dtypes if d is not None)))
    wide = np.dtype(jnp.promote_types(dtype, jnp.float32)) == dtype
    return dtype if dtype == stats and wide else None


def _normalize(module, x, mean, var, scale, bias, reduction, feature_axes):
    """Flax's normalisation arithmetic on arrays (NNX's ``_normalize``, which is Linen's
    without the parameter reads)."""
    normalization, _ = flax_normalization()
    return normalization._normalize(
        x, mean, var, scale, bias, reduction, feature_axes, module.dtype, module.epsilon
    )


# -- BatchNorm ----------------------------------------------------------------------


def batch_norm(original, module, x, use_running_average=None, *, mask=None):
    """``nn.BatchNorm.__call__``: running statistics as ``batch_norm`` (see module docstring)."""
    flag = merged(module, "use_running_average", use_running_average)
    traced = isinstance(flag, jax.core.Tracer)
    training = not traced and not flag
    if training and (module.is_initializing() or module.is_mutable_collection("batch_stats")):
        return original(x, use_running_average, mask=mask)
    normalization, _ = _linen_normalization()
    ndim = jnp.ndim(x)
    feature_axes = normalization._canonicalize_axes(ndim, module.axis)
    reduction = tuple(i for i in range(ndim) if i not in feature_axes)
    fshape = [x.shape[a] for a in feature_axes]
    stats_dtype = jnp.float32 if module.force_float32_reductions else module.param_dtype
    ra_mean = module.variable("batch_stats", "mean", lambda s: jnp.zeros(s, stats_dtype), fshape)
    ra_var = module.variable("batch_stats", "var", lambda s: jnp.ones(s, stats_dtype), fshape)
    mean, var = ra_mean.value, ra_var.value
    if not module.force_float32_reductions:
        mean, var = (at_conversion(jnp.asarray, v, module.param_dtype) for v in (mean, var))
    scale, bias = _params(module, x, feature_axes, module.use_scale, module.use_bias)
    y = None if training else _running(module, x, mean, var, scale, bias, feature_axes, reduction)
    if not traced and not training:
        return y
    mean, var = normalization._compute_stats(
        x,
        reduction,
        dtype=module.dtype,
        axis_name=module.axis_name if not module.is_initializing() else None,
        axis_index_groups=module.axis_index_groups,
        use_fast_variance=module.use_fast_variance,
        mask=mask,
        force_float32_reductions=module.force_float32_reductions,
    )
    keep = jnp.asarray(flag, bool)
    if not module.is_initializing() and module.is_mutable_collection("batch_stats"):
        momentum = module.momentum
        for stat, new in ((ra_mean, mean), (ra_var, var)):
            new = (momentum * stat.value + (1 - momentum) * new).astype(stat.value.dtype)
            stat.value = jnp.where(keep, stat.value, new)
    batch = _normalize(module, x, mean, var, scale, bias, reduction, feature_axes)
    return batch if training else jnp.where(keep, y, batch)


def _running(module, x, mean, var, scale, bias, feature_axes, reduction):
    """Normalisation with the running statistics: the ``batch_norm`` primitive.

    Linen computes ``(x - mean) * (rsqrt(var + eps) * scale) + bias`` with
    JAX's promotion; the primitive in the dtype of all operands. When the
    factor's dtype is narrower, it is computed now as Linen does and bound as
    the scale (over unit variance, zero epsilon); when ``x - mean`` is
    narrower, Flax's arithmetic is inlined as it is.
    """
    present = [a for a in (x, mean, var, scale, bias) if a is not None]
    compute = np.dtype(jnp.result_type(*present))
    if np.dtype(jnp.result_type(x, mean)) != compute:
        return _normalize(module, x, mean, var, scale, bias, reduction, feature_axes)
    out = _out_dtype(module, x, scale, bias)
    epsilon = float(module.epsilon)
    if np.dtype(jnp.result_type(*(a for a in (var, scale) if a is not None))) != compute:
        scale = at_conversion(_factor, var, scale, epsilon)
        var, epsilon = at_conversion(jnp.ones_like, var), 0.0
    flat = [at_conversion(jnp.reshape, a, (-1,)) for a in (mean, var, scale, bias) if a is not None]
    y = batch_norm_p.bind(
        x,
        *flat,
        feature_axes=tuple(sorted(feature_axes)),
        epsilon=epsilon,
        dtype=None,
        has_scale=scale is not None,
        has_bias=bias is not None,
    )
    return _cast(y, out)


def _factor(var, scale, epsilon):
    """Linen's ``mul = rsqrt(var + epsilon); mul *= scale`` in its own dtype."""
    mul = jax.lax.rsqrt(var + epsilon)
    return mul if scale is None else mul * scale


# -- LayerNorm, RMSNorm ---------------------------------------------------------------


def layer_norm(original, module, x, *, mask=None):
    """``nn.LayerNorm.__call__``: the ``layer_norm`` primitive."""
    return _layer_like(original, module, x, mask, layer_norm_p, True, module.use_bias)


def rms_norm(original, module, x, *, mask=None):
    """``nn.RMSNorm.__call__``: the ``rms_norm`` primitive (no mean, no bias)."""
    return _layer_like(original, module, x, mask, rms_norm_p, False, False)


def _layer_like(original, module, x, mask, prim, use_mean, use_bias):
    if mask is not None or module.axis_name is not None:
        return original(x, mask=mask)
    dtype = _exact_dtype(module, x, _param_dtypes(module, module.use_scale, use_bias))
    if dtype is None:
        return original(x, mask=mask)
    scale, bias = _params(module, x, module.feature_axes, module.use_scale, use_bias)
    ndim = jnp.ndim(x)
    y = prim.bind(
        x,
        *(a for a in (scale, bias) if a is not None),
        reduction_axes=norm_axes(ndim, module.reduction_axes),
        feature_axes=norm_axes(ndim, module.feature_axes),
        epsilon=float(module.epsilon),
        dtype=dtype,
        use_fast_variance=bool(module.use_fast_variance),
        use_mean=use_mean,
        has_scale=scale is not None,
        has_bias=bias is not None,
    )
    return _cast(y, _out_dtype(module, x, scale, bias))


# -- GroupNorm ------------------------------------------------------------------------


def _num_groups(module, channels) -> int | None:
    """Linen's group count, or None for a configuration Flax rejects (it raises then)."""
    if (module.num_groups is None) == (module.group_size is None):
        return None
    if module.group_size is not None:
        if channels % module.group_size:
            return None
        return channels // module.group_size
    groups = module.num_groups
    return groups if isinstance(groups, int) and groups > 0 and channels % groups == 0 else None


def group_norm(original, module, x, *, mask=None):
    """``nn.GroupNorm.__call__``: the ``group_norm`` primitive over trailing reduction axes.

    The primitive's lowering takes the unreduced axes as leading batch axes,
    so reduction axes that are not the trailing ones (or a mask, an
    ``axis_name``, an invalid group count) run Flax's own method.
    """
    ndim = jnp.ndim(x)
    axes = module.reduction_axes
    axes = norm_axes(ndim, [*range(1, ndim - 1), -1] if axes is None else axes)
    first = ndim - len(axes)
    groups = _num_groups(module, x.shape[-1])
    trailing = first >= 1 and axes == tuple(range(first, ndim))
    if mask is not None or module.axis_name is not None or groups is None or not trailing:
        return original(x, mask=mask)
    dtype = _exact_dtype(module, x, _param_dtypes(module, module.use_scale, module.use_bias))
    if dtype is None:
        return original(x, mask=mask)
    scale, bias = _params(module, x, (ndim - 1,), module.use_scale, module.use_bias)
    y = group_norm_p.bind(
        x,
        *(a for a in (scale, bias) if a is not None),
        num_groups=int(groups),
        reduction_axes=axes,
        epsilon=float(module.epsilon),
        dtype=dtype,
        use_fast_variance=bool(module.use_fast_variance),
        has_scale=scale is not None,
        has_bias=bias is not None,
    )
    return _cast(y, _out_dtype(module, x, scale, bias))


LINEN = (
    LinenStandIn("BatchNorm", "__call__", batch_norm),
    LinenStandIn("LayerNorm", "__call__", layer_norm),
    LinenStandIn("RMSNorm", "__call__", rms_norm),
    LinenStandIn("GroupNorm", "__call__", group_norm),
)


# -- cases ----------------------------------------------------------------------------


def _flagged(bound):
    """``apply`` with a runtime ``use_running_average`` and mutable statistics."""
    module, variables = bound.unbind()

    def fn(x, use_running_average):
        flag = use_running_average
        return module.apply(variables, x, use_running_average=flag, mutable=["batch_stats"])

    return fn


def _grad(bound):
    return jax.grad(lambda x: (bound(x) ** 2 * jnp.cos(x)).sum())


def _case(name, layer, inputs, expect=(), *, wrap=None, **kw):
    """A case of ``nn.<layer[0]>(**layer[1])`` initialised on ones of the input's shape
    (batch 2; one example for ``jax.vmap``); a BatchNorm without the attribute inits
    with ``use_running_average=True``."""
    cls, options = layer
    first = inputs[0]
    shape = first.shape if isinstance(first, np.ndarray) else first
    shape = tuple(2 if isinstance(d, str) else d for d in shape)
    shape = shape[1:] if wrap is jax.vmap else shape
    running = cls == "BatchNorm" and "use_running_average" not in options
    init_kwargs = {"use_running_average": True} if running else None
    build = lambda nn: getattr(nn, cls)(**options)  # noqa: E731
    make = linen_factory(build, shape, wrap=wrap, init_kwargs=init_kwargs)
    return case(name, make, inputs, factory=True, expect=expect, **kw)


def _bn(**options):
    return "BatchNorm", options


def _ln(**options):
    return "LayerNorm", options


def _rms(**options):
    return "RMSNorm", options


def _gn(**options):
    return "GroupNorm", options


_BN, _LN, _RMS, _GN = (
    "BatchNormalization",
    "LayerNormalization",
    "RMSNormalization",
    "GroupNormalization",
)
_FUSED = {"Transpose": 0, _BN: 0}
_TRAIN = functools.partial(via_apply, use_running_average=False, mutable=["batch_stats"])
_FLAG = f"{_BN} -> Where"
_B6 = [("B", 6)]

family.add_cases(
    batch_norm_p,
    lambda: [
        _case("linen_batch_norm_2d", _bn(), _B6, [f"{_BN}:Bx6"]),
        _case(
            "linen_batch_norm_nhwc",
            _bn(),
            [("B", 4, 4, 3)],
            ["Mul -> Add:Bx4x4x3"],
            counts=_FUSED,
            variants=["f32", "f64", "bf16", "f16"],
        ),
        _case(
            "linen_batch_norm_nchw",
            _bn(axis=1),
            [("B", 3, 4, 4)],
            [f"{_BN}:Bx3x4x4"],
            counts={"Transpose": 0},
        ),
        _case(
            "linen_batch_norm_two_axes",
            _bn(axis=(1, 2)),
            [("B", 3, 4)],
            ["Mul -> Add:Bx3x4"],
            counts=_FUSED,
        ),
        _case("linen_batch_norm_plain", _bn(use_scale=False, use_bias=False), _B6, [f"{_BN}:Bx6"]),
        # training attributes: pinned to inference (running statistics), momentum irrelevant
        _case(
            "linen_batch_norm_train_attr",
            _bn(use_running_average=False, momentum=0.5),
            _B6,
            [f"{_BN}:Bx6"],
        ),
        _case(
            "linen_batch_norm_runtime_flag",
            _bn(),
            _B6,
            [_FLAG],
            input_params={"use_running_average": True},
        ),
        # a runtime flag of apply(..., mutable=...): output and running averages as Flax's
        _case(
            "linen_batch_norm_runtime_flag_train",
            _bn(momentum=0.5),
            _B6,
            [_FLAG],
            wrap=_flagged,
            input_params={"use_running_average": False},
            # float64 data: Flax's training step widens the float32 averages it returns;
            # a runtime flag keeps the stored dtype for both values (eval compares float64)
            variants=["f32"],
        ),
        _case(
            "linen_batch_norm_runtime_flag_eval",
            _bn(momentum=0.5),
            _B6,
            [_FLAG],
            wrap=_flagged,
            input_params={"use_running_average": True},
        ),
        _case(
            "linen_batch_norm_vmap",
            _bn(use_running_average=True),
            [("B", 2, 6)],
            ["Mul -> Add:Bx2x6"],
            counts=_FUSED,
            wrap=jax.vmap,
        ),
        _case("linen_batch_norm_grad", _bn(use_running_average=True), _B6, wrap=_grad),
        _case(
            "linen_batch_norm_apply_lambda",
            _bn(),
            _B6,
            [f"{_BN}:Bx6"],
            wrap=functools.partial(via_apply, use_running_average=True),
        ),
        # training in the call with nothing pinned: Flax's own code, updated statistics out
        _case("linen_batch_norm_train_apply", _bn(momentum=0.5), _B6, counts={_BN: 0}, wrap=_TRAIN),
    ],
)

_OFFSET = (30.0 + np.random.default_rng(3).standard_normal((4, 16))).astype(np.float32)
_TWO = {"reduction_axes": (1, 2), "feature_axes": (1, 2)}

family.add_cases(
    layer_norm_p,
    lambda: [
        _case("linen_layer_norm", _ln(), _B6, [f"{_LN}:Bx6"], variants=["f32", "f64", "bf16"]),
        _case("linen_layer_norm_two_axes", _ln(**_TWO), [("B", 3, 4)], [f"{_LN}:Bx3x4"]),
        _case(
            "linen_layer_norm_features_last",
            _ln(reduction_axes=(-2, -1)),
            [("B", 3, 4)],
            [f"{_LN}:Bx3x4"],
        ),
        _case(
            "linen_layer_norm_middle_axis",
            _ln(reduction_axes=1, feature_axes=1),
            [("B", 4, 3)],
            counts={_LN: 0},
        ),
        _case("linen_layer_norm_plain", _ln(use_scale=False, use_bias=False), _B6, [f"{_LN}:Bx6"]),
        _case("linen_layer_norm_exact_variance", _ln(use_fast_variance=False), [_OFFSET], [_LN]),
        # computed in float32 (Linen's statistics dtype), returned as float16
        _case(
            "linen_layer_norm_dtype_f16",
            _ln(dtype=jnp.float16),
            _B6,
            [f"{_LN} -> Cast:Bx6"],
            variants=["f32"],
        ),
        _case(
            "linen_layer_norm_dtype_bf16",
            _ln(dtype=jnp.bfloat16),
            _B6,
            [f"{_LN} -> Cast:Bx6"],
            variants=["f32", "bf16"],
        ),
        _case("linen_layer_norm_vmap", _ln(), [("B", 3, 4)], [f"{_LN}:Bx3x4"], wrap=jax.vmap),
        _case("linen_layer_norm_grad", _ln(), _B6, wrap=_grad),
        _case("linen_layer_norm_apply_lambda", _ln(), _B6, [f"{_LN}:Bx6"], wrap=via_apply),
    ],
)

family.add_cases(
    rms_norm_p,
    lambda: [
        _case("linen_rms_norm", _rms(), _B6, [f"{_RMS}:Bx6"]),
        _case("linen_rms_norm_two_axes", _rms(**_TWO), [("B", 3, 4)], [f"{_RMS}:Bx3x4"]),
        _case("linen_rms_norm_plain", _rms(use_scale=False), _B6, [f"{_RMS}:Bx6"]),
        _case("linen_rms_norm_opset21", _rms(), _B6, counts={_RMS: 0}, opset=21),
        _case("linen_rms_norm_vmap", _rms(), [("B", 3, 4)], [f"{_RMS}:Bx3x4"], wrap=jax.vmap),
        _case("linen_rms_norm_grad", _rms(), _B6, wrap=_grad),
        _case("linen_rms_norm_apply_lambda", _rms(), _B6, [f"{_RMS}:Bx6"], wrap=via_apply),
    ],
)

_ROUND = f"Transpose -> {_GN} -> Transpose"

family.add_cases(
    group_norm_p,
    lambda: [
        _case(
            "linen_group_norm_nhwc",
            _gn(num_groups=3),
            [("B", 4, 4, 6)],
            [f"{_ROUND}:Bx4x4x6"],
            counts={"Transpose": 2},
        ),
        _case(
            "linen_group_norm_2d", _gn(num_groups=2), _B6, [f"{_GN}:Bx6"], counts={"Transpose": 0}
        ),
        _case(
            "linen_group_norm_group_size",
            _gn(num_groups=None, group_size=2),
            [("B", 5, 8)],
            [f"{_ROUND}:Bx5x8"],
        ),
        _case(
            "linen_group_norm_plain",
            _gn(num_groups=2, use_scale=False, use_bias=False),
            [("B", 3, 4)],
            [_GN],
        ),
        _case(
            "linen_group_norm_opset18", _gn(num_groups=3), [("B", 4, 6)], counts={_GN: 0}, opset=18
        ),
        # statistics per (batch, time, group): the unreduced axes merge into N
        _case(
            "linen_group_norm_reduction_axes",
            _gn(num_groups=3, reduction_axes=(-2, -1)),
            [("B", 2, 4, 6)],
            [f"Reshape -> {_ROUND} -> Reshape:Bx2x4x6"],
        ),
        _case(
            "linen_group_norm_vmap",
            _gn(num_groups=3),
            [("B", 2, 4, 6)],
            [f"Reshape -> {_ROUND}"],
            wrap=jax.vmap,
        ),
        _case("linen_group_norm_grad", _gn(num_groups=2), [("B", 4, 6)], wrap=_grad),
        _case(
            "linen_group_norm_apply_lambda",
            _gn(num_groups=3),
            [("B", 4, 6)],
            [_ROUND],
            wrap=via_apply,
        ),
    ],
)
