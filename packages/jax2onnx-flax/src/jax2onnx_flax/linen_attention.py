"""Flax Linen ``DenseGeneral``, ``Einsum`` and attention as the NNX primitives.

``nn.DenseGeneral`` binds :data:`jax2onnx_flax.linear.linear_general_p` (a MatMul
when it contracts the last axis into a 2-D kernel, else one Einsum, plus one
Add) and ``nn.Einsum`` binds :data:`jax2onnx_flax.einsum.einsum_p` (one Einsum
or MatMul, plus one Add): the same primitives as ``nnx.LinearGeneral`` and
``nnx.Einsum``, so lowerings, batching and JVPs are shared.

``nn.MultiHeadDotProductAttention`` (and ``nn.MultiHeadAttention``, and
``nn.SelfAttention``, which calls it through ``super().__call__``) binds the
NNX :data:`jax2onnx_flax.attention.mha_p`: Linen keeps the same parameter
layout as NNX (DenseGeneral kernels ``(features, heads, head_dim)``, biases
``(heads, head_dim)``, the output kernel ``(heads, head_dim, features)``),
which the stand-in flattens at conversion time, so the export is MatMul + Add
projections around one ONNX ``Attention`` (opset >= 23). Linen's attention
always computes its own weights (``query / sqrt(depth)``, ``finfo.min`` for
masked logits, softmax in the computation dtype), which is the primitive's
``flax_softmax`` form. Dropout is off when ``deterministic`` is pinned (an
inference-mode export) or resolves to True; training-mode dropout, sowing,
``decode=True``, custom ``attention_fn``/dot_generals/einsums and dtypes other
than float32/float64 run Flax's own method (its sub-layers are stand-ins too).

The function ``nn.dot_product_attention`` is intercepted as well: without
dropout (or deterministic) it binds :data:`jax2onnx_flax.attention.dpa_p`,
one ``Attention`` on the caller's ``[batch..., length, heads, depth]`` values.

Parameters that do not exist yet (``init``) are created by Flax's own method,
whose initializers reshape flat draws; existing ones are read exactly as the
layer reads them (``module.param``, shapes checked).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, Jax2OnnxError, at_conversion, call_arguments
from jax2onnx_flax._util import F32, hashable_precision, linen_params, linen_promoted
from jax2onnx_flax.attention import dpa_p, mha_p
from jax2onnx_flax.einsum import einsum_p
from jax2onnx_flax.linear import linear_general_p
from jax2onnx_flax.linen import LinenStandIn, merged, pinned
from jax2onnx_nn.dropout import dropout_p

family = Family("flax")


register = family.register


def _shape_only(rng, shape, dtype=jnp.float32):
    """An initializer for parameters known to exist: ``module.param`` checks the shape."""
    del rng
    return jnp.zeros(shape, dtype)


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


# -- nn.DenseGeneral ----------------------------------------------------------------


def dense_general(original, module, inputs):
    """``nn.DenseGeneral.__call__``: ``linear_general`` on ``(x, kernel[, bias])``."""
    if (
        module.dot_general is not None
        or module.dot_general_cls is not None
        or not module.has_variable("params", "kernel")
        or (module.use_bias and not module.has_variable("params", "bias"))
    ):
        return original(inputs)  # Flax's own dot_general, or its initializers
    features = _as_tuple(module.features)
    ndim = jnp.ndim(inputs)
    axis = tuple(sorted(a % ndim for a in _as_tuple(module.axis)))
    batch = tuple(sorted(a % ndim for a in _as_tuple(module.batch_dims)))
    if batch != tuple(range(len(batch))) or set(axis) & set(batch):
        return original(inputs)  # Flax raises its own error
    batch_shape = tuple(jnp.shape(inputs)[a] for a in batch)
    kernel_shape = (*batch_shape, *(jnp.shape(inputs)[a] for a in axis), *features)
    kernel = module.param("kernel", _shape_only, kernel_shape, module.param_dtype)
    bias = None
    if module.use_bias:
        bias = module.param("bias", _shape_only, (*batch_shape, *features), module.param_dtype)
    x, kernel, bias = linen_promoted(module, (inputs, kernel, bias))
    n = len(batch)
    dn = ((axis, tuple(range(n, n + len(axis)))), (batch, tuple(range(n))))
    operands = [x, kernel]
    if bias is not None:
        free = ndim - len(axis) - n  # non-contracted input axes after the batch axes
        shape = (*jnp.shape(bias)[:n], *(1,) * free, *features)
        operands.append(at_conversion(jnp.reshape, bias, shape))
    return linear_general_p.bind(
        *operands, dimension_numbers=dn, precision=hashable_precision(module.precision)
    )


# -- nn.Einsum --------------------------------------------------------------------------


def einsum(original, module, inputs, einsum_str=None):
    """``nn.Einsum.__call__``: the ``einsum`` primitive on ``(x, kernel[, bias])``."""
    equation = einsum_str if einsum_str is not None else module.einsum_str
    if (
        module.preferred_element_type is not None
        or (einsum_str is None) == (module.einsum_str is None)
        or "->" not in equation
        or equation.count(",") != 1
    ):
        return original(inputs, einsum_str)  # Flax's own computation, or its own error
    equation = equation.replace(" ", "")
    kernel = module.param("kernel", module.kernel_init, module.shape, module.param_dtype)
    bias = broadcast = None
    if module.use_bias:
        shape, broadcast = module._get_bias_shape(equation, inputs, kernel)
        bias = module.param("bias", module.bias_init, shape, module.param_dtype)
    x, kernel, bias = linen_promoted(module, (inputs, kernel, bias))
    operands = [x, kernel]
    if bias is not None:
        operands.append(at_conversion(jnp.reshape, bias, tuple(broadcast)))
    return einsum_p.bind(
        *operands, equation=equation, precision=hashable_precision(module.precision)
    )


# -- nn.MultiHeadDotProductAttention ------------------------------------------------------


def _field_default(cls, name):
    return cls.__dataclass_fields__[name].default


def _custom(module):
    """Options the ``mha`` primitive does not cover (Flax's own method runs)."""
    from flax import linen as nn

    cls = nn.MultiHeadDotProductAttention
    names = ("qkv_dot_general", "out_dot_general", "qkv_dot_general_cls", "out_dot_general_cls")
    names += ("qk_attn_weights_einsum_cls", "attn_weights_value_einsum_cls")
    return module.attention_fn is not _field_default(cls, "attention_fn") or any(
        getattr(module, n) is not None for n in names
    )


def multi_head_attention(
    original,
    module,
    inputs_q,
    inputs_k=None,
    inputs_v=None,
    *,
    inputs_kv=None,
    mask=None,
    deterministic=None,
    dropout_rng=None,
    sow_weights=False,
):
    """``nn.MultiHeadDotProductAttention.__call__``: the NNX ``mha`` primitive."""
    call = functools.partial(
        original,
        inputs_q,
        inputs_k,
        inputs_v,
        inputs_kv=inputs_kv,
        mask=mask,
        deterministic=deterministic,
        dropout_rng=dropout_rng,
        sow_weights=sow_weights,
    )
    if module.decode:
        return _decode(call)
    if module.dropout_rate > 0.0 and not _switched_off(module, deterministic):
        if _keyless_training(module, deterministic, dropout_rng):
            return _with_exported_dropout(module, call)
        return call()  # training-mode dropout (or Flax's own error for a missing switch)
    xk = inputs_q if inputs_k is None else inputs_k
    xv = xk if inputs_v is None else inputs_v
    xs = (inputs_q, xk, xv)
    if (
        sow_weights
        or inputs_kv is not None
        or (inputs_k is None and inputs_v is not None)
        or _custom(module)
        or any(jnp.ndim(x) < 2 for x in xs)
        or len({np.dtype(jnp.result_type(x)) for x in xs}) > 1
    ):
        return call()
    arrays = _mha_arrays(module, xs)
    if arrays is None:
        return call()  # initializing, or Flax's own shape error
    dtype = module.dtype or jnp.result_type(*xs, *(a for a in arrays if a is not None))
    dtype = np.dtype(dtype)
    floating = jnp.issubdtype(dtype, jnp.floating)
    if not floating or (module.force_fp32_for_softmax and dtype != F32):
        return call()
    cast = lambda x: jnp.asarray(x, dtype)  # noqa: E731
    operands = [cast(x) for x in xs]
    if mask is not None:
        operands.append(jnp.asarray(mask).astype(bool))
    operands += at_conversion(lambda: [cast(a) for a in arrays if a is not None])
    ln = _ln_defaults() if module.normalize_qk else ((), ())
    return mha_p.bind(
        *operands,
        has_mask=mask is not None,
        has_bias=bool(module.use_bias),
        normalize_qk=bool(module.normalize_qk),
        heads=int(module.num_heads),
        kv_heads=int(module.num_heads),
        is_causal=False,
        flax_softmax=True,
        epsilon=ln[0],
        fast_variance=ln[1],
        precision=hashable_precision(module.precision),
    )


def _keyless_training(module, deterministic, dropout_rng):
    """Training-mode dropout without a key: a bound model exported with its ``train`` flag.

    Flax would refuse (no ``dropout`` RNG); the export keeps the dropout as an
    ONNX ``Dropout`` in training mode, as for the ``Dropout`` layer.
    """
    value = merged(module, "deterministic", deterministic)
    return (
        isinstance(value, (bool, np.bool_))
        and not value
        and dropout_rng is None
        and not module.has_rng("dropout")
        and not _custom(module)
    )


def _with_exported_dropout(module, call):
    """Flax's method with the attention weights' dropout bound as the ``dropout`` primitive.

    The module is a clone ``apply`` made: its rate is set to zero for the call
    (so Flax asks for no key) and its ``attention_fn`` drops the weights
    itself, broadcast over batch and heads when Flax's ``broadcast_dropout`` is.
    """
    from flax import linen as nn

    rate = float(module.dropout_rate)

    # Flax passes only the keywords this signature names (custom einsums are refused earlier)
    def attention(
        query,
        key,
        value,
        mask=None,
        broadcast_dropout=True,
        dtype=None,
        precision=None,
        force_fp32_for_softmax=False,
    ):
        weights = nn.dot_product_attention_weights(
            query,
            key,
            mask=mask,
            deterministic=True,
            dtype=dtype,
            precision=precision,
            force_fp32_for_softmax=force_fp32_for_softmax,
        )
        broadcast = tuple(range(weights.ndim - 2)) if broadcast_dropout else ()
        weights, _ = dropout_p.bind(
            weights, jnp.asarray(False), rate=rate, broadcast_dims=broadcast
        )
        return jnp.einsum("...hqk,...khd->...qhd", weights, value, precision=precision)

    saved = (module.dropout_rate, module.attention_fn)
    object.__setattr__(module, "dropout_rate", 0.0)
    object.__setattr__(module, "attention_fn", attention)
    try:
        return call()
    finally:
        object.__setattr__(module, "dropout_rate", saved[0])
        object.__setattr__(module, "attention_fn", saved[1])


def _switched_off(module, deterministic):
    """Dropout off: ``deterministic`` pinned, or resolving to a concrete True."""
    if pinned("deterministic"):
        return True
    if module.deterministic is None and deterministic is None:
        return False  # Flax's merge_param raises its own error
    value = merged(module, "deterministic", deterministic)
    return isinstance(value, (bool, np.bool_)) and bool(value)


def _ln_defaults():
    """``(epsilons, fast_variance)`` of the two LayerNorms Linen's attention builds."""
    from flax import linen as nn

    eps = float(_field_default(nn.LayerNorm, "epsilon"))
    fast = bool(_field_default(nn.LayerNorm, "use_fast_variance"))
    return (eps, eps), (fast, fast)


def _mha_arrays(module, xs):
    """Linen's parameters in ``mha`` order, kernels flattened to 2-D (``None`` if missing)."""
    features = jnp.shape(xs[0])[-1]
    qkv = module.qkv_features or features
    out_features = module.out_features or features
    heads = module.num_heads
    if not all(isinstance(jnp.shape(x)[-1], (int, np.integer)) for x in xs) or qkv % heads:
        return None  # symbolic features, or Flax's own assertion
    head = qkv // heads
    params = linen_params(module)
    names = ["query", "key", "value", "out"] + (
        ["query_ln", "key_ln"] if module.normalize_qk else []
    )
    if any(n not in params for n in names):
        return None
    want = {
        "query": (jnp.shape(xs[0])[-1], heads, head),
        "key": (jnp.shape(xs[1])[-1], heads, head),
        "value": (jnp.shape(xs[2])[-1], heads, head),
        "out": (heads, head, out_features),
    }
    biases = {"out": (out_features,)}
    out = []
    for name in ("query", "key", "value", "out"):
        kernel, bias = params[name].get("kernel"), params[name].get("bias")
        if kernel is None or np.shape(kernel) != want[name]:
            return None
        if module.use_bias and np.shape(bias) != biases.get(name, (heads, head)):
            return None
        rows = head * heads if name == "out" else want[name][0]
        out.append(at_conversion(jnp.reshape, kernel, (rows, -1)))
        out.append(at_conversion(jnp.reshape, bias, (-1,)) if module.use_bias else None)
        if name == "value":
            out += _ln_scales(module, params, head)
    if module.normalize_qk and None in out[6:8]:
        return None
    return out


def _ln_scales(module, params, head):
    if not module.normalize_qk:
        return [None, None]
    scales = [params[n].get("scale") for n in ("query_ln", "key_ln")]
    return [s if s is not None and np.shape(s) == (head,) else None for s in scales]


def _decode(call):
    """decode=True: Flax's own cache update, or a clear error when the cache is immutable."""
    from flax import errors

    try:
        return call()
    except errors.ModifyScopeVariableError as err:
        raise Jax2OnnxError(
            "nn.MultiHeadDotProductAttention with decode=True writes its autoregressive cache "
            "(the 'cache' collection), which an export of the bound module cannot keep. Export "
            "a module built with decode=False, or a function that passes the cache in and out: "
            "lambda x, cache: model.apply({'params': params, 'cache': cache}, x, "
            "mutable=['cache'])."
        ) from err


LINEN = (
    LinenStandIn("DenseGeneral", "__call__", dense_general),
    LinenStandIn("Einsum", "__call__", einsum),
    LinenStandIn("MultiHeadDotProductAttention", "__call__", multi_head_attention),
)


# -- nn.dot_product_attention (the function) -----------------------------------------------


def _dpa_binder(original):
    """``flax.linen.dot_product_attention`` without dropout: the ``dpa`` primitive."""
    from flax.linen.dtypes import promote_dtype

    arguments = call_arguments(original)

    @functools.wraps(original)
    def call(*args, **kwargs):
        a = arguments(*args, **kwargs)
        if a is None or not _plain_dpa(a):
            return original(*args, **kwargs)
        q, k, v = promote_dtype(a["query"], a["key"], a["value"], dtype=a["dtype"])
        bias, mask = a["bias"], a["mask"]
        dtype = np.dtype(q.dtype)
        if (
            not jnp.issubdtype(dtype, jnp.floating)
            or (a["force_fp32_for_softmax"] and dtype != F32)
            or not q.ndim == k.ndim == v.ndim >= 3
            or q.shape[-2:] != k.shape[-2:]
            or k.shape[-3:-1] != v.shape[-3:-1]
            or q.shape[:-3] != k.shape[:-3]
            or (bias is not None and jnp.result_type(q, bias) != dtype)
        ):
            return original(*args, **kwargs)
        operands = [q, k, v]
        if bias is not None:
            operands.append(jnp.asarray(bias, dtype))
        if mask is not None:
            operands.append(jnp.asarray(mask).astype(bool))
        return dpa_p.bind(
            *operands,
            has_bias=bias is not None,
            has_mask=mask is not None,
            is_causal=False,
            precision=hashable_precision(a["precision"]),
        )

    return call


def _plain_dpa(a):
    """No dropout drawn, nothing sown, JAX's einsum: what ``dpa`` computes."""
    det = a["deterministic"]
    no_dropout = a["dropout_rate"] == 0.0 or (isinstance(det, (bool, np.bool_)) and bool(det))
    custom = ("module", "einsum_dot_general", "qk_attn_weights_einsum", "attn_weights_value_einsum")
    return no_dropout and all(a[n] is None for n in custom)


family.intercept(
    "flax.linen.dot_product_attention",
    dpa_p,
    binder=_dpa_binder,
    aliases=("flax.linen.attention.dot_product_attention",),
)
