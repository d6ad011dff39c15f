"""Flax NNX attention: ``nnx.dot_product_attention`` and ``nnx.MultiHeadAttention``.

Flax has two attention paths with different numbers. Without dropout and
without sowing, ``nnx.dot_product_attention`` calls ``jax.nn.dot_product_attention``
(softmax in float32, masked logits ``-0.7 * max``): that call is already the
``nn.dot_product_attention`` macro primitive of jax2onnx-nn, so it is left to
it. With ``dropout_rate > 0`` (deterministic at export) flax computes the
weights itself: ``query / sqrt(depth)``, einsum, ``+ bias``, masked logits
``finfo(dtype).min``, softmax in the computation dtype; that path is the
primitive ``flax.dot_product_attention``.

``MultiHeadAttention`` is one primitive ``flax.multi_head_attention`` over the
inputs, the mask and the module's arrays, which the stand-in reshapes and
promotes at conversion time: each projection kernel ``(in, heads, head_dim)``
becomes ``(in, heads*head_dim)`` so a projection is one MatMul + Add whose
``(B, S, heads*head_dim)`` output feeds ONNX ``Attention`` in its 3-D form
(``q_num_heads``/``kv_num_heads``: no Transpose), and the output kernel
``(heads, head_dim, out)`` becomes ``(heads*head_dim, out)``. ``normalize_qk``
is a LayerNormalization per head (ONNX's two-pass variance against flax's
``E[x^2] - E[x]^2``: equal within float32 tolerance). ``decode=True`` runs
flax's cache update, and says clearly why it cannot export when it cannot.

Lowering of the attention core, shared by both primitives:

* opset >= 23: one ``Attention``. Masks become one additive float mask
  ``bias + Where(mask, 0, -0.7 * max)``: ONNX Runtime turns a boolean mask's
  fully masked row (and an additive mask equal to ``finfo.min``) into zeros,
  where flax and JAX give a uniform row. ``is_causal`` with a mask or bias
  folds the causal triangle into the mask (JAX and flax mask the union where
  ONNX adds, and ONNX Runtime cannot build a float64 Attention with
  ``is_causal`` and a float mask); that triangle is computed from the
  lengths (two ``Range``) when they are symbolic. Masks are expanded to ``(.., q_len,
  kv_len)``: ONNX Runtime broadcasts neither length. Flax's path divides
  ``query`` by ``sqrt(depth)`` itself and passes ``scale=1`` (ONNX Runtime
  scales Q and K by a float32 ``sqrt(scale)`` each: 1e-7 off in float64).
* opset < 23, or float64 on JAX's path (its softmax runs in float32):
  MatMul -> Softmax -> MatMul with JAX's scale, fills and softmax dtype.

Batching is explicit (the vmapped axis becomes one more leading batch axis,
so one ``Attention`` remains); the JVP is JAX's derivative of ``impl``.
"""

from __future__ import annotations

import functools
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, Jax2OnnxError, at_conversion, call_arguments, is_symbolic
from jax2onnx_flax._util import F32, hashable_precision

family = Family("flax")
register = family.register

_jax_dpa = jax.nn.dot_product_attention  # the original, captured before interception

# -- reference semantics ---------------------------------------------------------


def _full_mask(mask, batch):
    """``mask`` (right-aligned against ``(batch..., heads, T, S)``) with all batch dims."""
    mask = jnp.reshape(mask, (1,) * (len(batch) + 3 - mask.ndim) + mask.shape)
    return jnp.broadcast_to(mask, (*batch, *mask.shape[-3:]))


def _jax_path(q, k, v, bias, mask, is_causal):
    """flax's fast path: batch dims folded into one, ``jax.nn.dot_product_attention``."""
    batch = q.shape[:-3]
    if mask is not None:
        mask = _full_mask(mask, batch)
    if bias is not None:
        bias = _full_mask(bias, batch)
    fold = lambda x: None if x is None else jnp.reshape(x, (-1, *x.shape[-3:]))  # noqa: E731
    q, k, v, bias, mask = map(fold, (q, k, v, bias, mask))
    out = _jax_dpa(q, k, v, bias, mask, is_causal=is_causal)
    return jnp.reshape(out, (*batch, *out.shape[-3:]))


def _flax_path(q, k, v, bias, mask, is_causal, precision):
    """flax's own weights (deterministic): q/sqrt(d), einsum, bias, finfo.min, softmax."""
    dtype = q.dtype
    heads, kv_heads = q.shape[-2], k.shape[-2]
    rep = heads // kv_heads
    q = q / np.asarray(math.sqrt(q.shape[-1]), dtype)  # flax: jnp.sqrt(depth).astype(dtype)
    q = jnp.reshape(q, (*q.shape[:-2], kv_heads, rep, q.shape[-1]))
    w = jnp.einsum("...qhgd,...khd->...hgqk", q, k, precision=precision)
    w = jnp.reshape(w, (*w.shape[:-4], heads, *w.shape[-2:]))
    if bias is not None:
        w = w + bias
    if mask is not None or is_causal:
        keep = jnp.ones((), bool) if mask is None else mask.astype(bool)
        if is_causal:
            keep = keep & jnp.tril(jnp.ones(w.shape[-2:], bool))
        w = jnp.where(keep, w, jnp.finfo(dtype).min)
    w = jax.nn.softmax(w).astype(dtype)
    w = jnp.reshape(w, (*w.shape[:-3], kv_heads, rep, *w.shape[-2:]))
    out = jnp.einsum("...hgqk,...khd->...qhgd", w, v, precision=precision)
    return jnp.reshape(out, (*out.shape[:-3], heads, out.shape[-1]))


def _attend(q, k, v, bias, mask, *, is_causal, flax_softmax, precision):
    if flax_softmax:
        return _flax_path(q, k, v, bias, mask, is_causal, precision)
    return _jax_path(q, k, v, bias, mask, is_causal)


def _split(extra, *flags):
    rest = list(extra)
    return [rest.pop(0) if flag else None for flag in flags]


# -- nnx.dot_product_attention (flax's own weights) -------------------------------


def _dpa_impl(query, key, value, *extra, has_bias, has_mask, is_causal, precision):
    bias, mask = _split(extra, has_bias, has_mask)
    return _flax_path(query, key, value, bias, mask, is_causal, precision)


def _move_batch(args, dims, n_inputs, mask_rank):
    """The vmapped axis in front, as one more leading batch axis.

    The first ``n_inputs`` operands (queries, keys, values) are broadcast when
    unbatched; masks and biases broadcast from the right against
    ``(batch..., heads, T, S)``, so an unbatched one stays as it is and a
    batched one gets ones after its new first axis up to ``mask_rank(new q)``.
    """
    from jax.interpreters import batching

    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    front = [
        batching.bdim_at_front(a, d, size)
        for a, d in zip(args[:n_inputs], dims[:n_inputs], strict=True)
    ]
    rank = mask_rank(front[0])
    for a, d in zip(args[n_inputs:], dims[n_inputs:], strict=True):
        if d is not None:
            a = jnp.moveaxis(a, d, 0)
            a = jnp.reshape(a, (size, *(1,) * (rank - a.ndim), *a.shape[1:]))
        front.append(a)
    return front


def _dpa_batching(args, dims, **params):
    return dpa_p.bind(*_move_batch(args, dims, 3, lambda q: q.ndim), **params), 0


dpa_p = family.primitive(
    "dot_product_attention", impl=_dpa_impl, batching=_dpa_batching, jvp="fallback"
)


def _dpa_binder(original):
    arguments = call_arguments(original)

    @functools.wraps(original)
    def call(*args, **kwargs):
        a = arguments(*args, **kwargs)
        if a is None:
            return original(*args, **kwargs)
        if a["dropout_rate"] == 0.0 or not a["deterministic"] or a["module"] is not None:
            return original(*args, **kwargs)  # jax.nn's path (its own primitive), or random
        qkv = (a["query"], a["key"], a["value"])
        q, k, v = at_conversion(a["promote_dtype"], qkv, dtype=a["dtype"])
        bias, mask = a["bias"], a["mask"]
        if (
            q.shape[-1] != k.shape[-1]
            or q.shape[-2] % k.shape[-2]
            or (bias is not None and jnp.result_type(q, bias) != q.dtype)
        ):
            return original(*args, **kwargs)
        operands = [q, k, v]
        if bias is not None:
            operands.append(jnp.asarray(bias, q.dtype))
        if mask is not None:
            operands.append(jnp.asarray(mask).astype(bool))
        return dpa_p.bind(
            *operands,
            has_bias=bias is not None,
            has_mask=mask is not None,
            is_causal=bool(a["is_causal"]),
            precision=hashable_precision(a["precision"]),
        )

    return call


family.intercept(
    "flax.nnx.dot_product_attention",
    dpa_p,
    binder=_dpa_binder,
    aliases=("flax.nnx.nn.attention.dot_product_attention",),
)


@family.lowering(dpa_p)
def dot_product_attention(ctx, query, key, value, *extra, has_bias, has_mask, is_causal, precision):
    """flax's attention weights: one Attention (opset >= 23), else MatMul/Softmax/MatMul."""
    q_aval, k_aval, v_aval = ctx.avals_in[:3]
    batch = q_aval.shape[:-3]
    t_len, heads, head = q_aval.shape[-3:]
    s_len, kv_heads, _ = k_aval.shape[-3:]
    v_head = v_aval.shape[-1]
    bias, mask = _split(extra, has_bias, has_mask)
    rest_avals = _split(ctx.avals_in[3:], has_bias, has_mask)
    fold = ctx.shape([-1, t_len, heads * head])
    q3 = ctx.op.Reshape(query, fold)
    k3 = ctx.op.Reshape(key, ctx.shape([-1, s_len, kv_heads * head]))
    v3 = ctx.op.Reshape(value, ctx.shape([-1, s_len, kv_heads * v_head]))
    geometry = _Geometry(batch, heads, kv_heads, head, v_head, t_len, s_len)
    bias4 = None if bias is None else _to_4d(ctx, bias, rest_avals[0].shape, geometry)
    mask4 = None if mask is None else _to_4d(ctx, mask, rest_avals[1].shape, geometry)
    y = _core(ctx, q3, k3, v3, bias4, mask4, geometry, is_causal, flax_softmax=True)
    return ctx.op.Reshape(y, ctx.shape(ctx.avals_out[0].shape))


# -- the attention core ---------------------------------------------------------------


class _Geometry:
    """Static sizes of one attention call (lengths may be symbolic)."""

    def __init__(self, batch, heads, kv_heads, head, v_head, t_len, s_len):
        self.batch, self.heads, self.kv_heads = tuple(batch), int(heads), int(kv_heads)
        self.head, self.v_head, self.t_len, self.s_len = int(head), int(v_head), t_len, s_len


def _to_4d(ctx, value, shape, g: _Geometry):
    """A mask or bias broadcastable to ``(batch..., heads, T, S)`` as ``(B|1, heads|1, T, S)``."""
    shape = (1,) * (len(g.batch) + 3 - len(shape)) + tuple(shape)
    lead, (h, t, s) = shape[: len(g.batch)], shape[len(g.batch) :]
    ones = all(not is_symbolic(d) and d == 1 for d in lead)
    expand = not ones and tuple(lead) != g.batch
    if expand or t != g.t_len or s != g.s_len:
        target = (*(g.batch if expand else lead), h, g.t_len, g.s_len)
        value = ctx.op.Expand(value, ctx.shape(target))
    return ctx.op.Reshape(value, ctx.shape([1 if ones else -1, h, g.t_len, g.s_len]))


def _causal(ctx, g: _Geometry):
    """The ``(1, 1, T, S)`` lower triangle (key ``j`` visible from query ``i`` when
    ``j <= i``): a constant for static lengths, else ``Range``s of the lengths compared."""
    if not (is_symbolic(g.t_len) or is_symbolic(g.s_len)):
        return ctx.const(np.tril(np.ones((int(g.t_len), int(g.s_len)), bool))[None, None])
    rows = ctx.op.Unsqueeze(ctx.arange(g.t_len), ctx.i64([0, 1, 3]))
    return ctx.op.GreaterOrEqual(rows, ctx.op.Unsqueeze(ctx.arange(g.s_len), ctx.i64([0, 1, 2])))


def _core(ctx, q3, k3, v3, bias4, mask4, g: _Geometry, is_causal, *, flax_softmax):
    """Attention over ``(B, T, heads*head)`` operands, ``(B, T, heads*v_head)`` result."""
    dtype = np.dtype(ctx.avals_in[0].dtype)
    # JAX and flax mask the union of mask and causal triangle (ONNX adds them), and ONNX
    # Runtime cannot build a float64 Attention with is_causal and a float attn_mask
    fold_causal = is_causal and (mask4 is not None or bias4 is not None)
    if fold_causal:
        tril = _causal(ctx, g)
        mask4 = tril if mask4 is None else ctx.op.And(mask4, tril)
    # JAX's fill, capped to float32 range since JAX's softmax runs in float32
    big = -0.7 * float(jnp.finfo(dtype if flax_softmax or dtype.itemsize <= 4 else F32).max)
    # JAX's softmax (and bfloat16/float16 logits) run in float32: Attention in float32,
    # or widened to it, computes them so; float64 is decomposed
    native = ctx.opset >= 23 and (flax_softmax or dtype.itemsize <= 4)
    emit = _attention_op if native else _decomposed
    causal = is_causal and not fold_causal
    return emit(ctx, q3, k3, v3, bias4, mask4, g, causal, flax_softmax, dtype, big)


def _attention_op(ctx, q3, k3, v3, bias4, mask4, g, is_causal, flax_softmax, dtype, big):
    attn_mask = bias4
    if mask4 is not None:
        additive = ctx.op.Where(mask4, np.zeros((), dtype), np.asarray(big, dtype))
        attn_mask = additive if bias4 is None else ctx.op.Add(bias4, additive)
    scale = 1.0 / math.sqrt(g.head)
    if flax_softmax:  # flax divides the query itself; scale 1 is exact in ONNX Runtime
        q3 = ctx.op.Div(q3, np.asarray(math.sqrt(g.head), dtype))
        scale = 1.0
    heads = dict(q_num_heads=g.heads, kv_num_heads=g.kv_heads)
    return ctx.op.Attention(q3, k3, v3, attn_mask, **heads, scale=scale, is_causal=int(is_causal))


def _decomposed(ctx, q3, k3, v3, bias4, mask4, g, is_causal, flax_softmax, dtype, big):
    """MatMul -> Softmax -> MatMul over ``(B, kv_heads, rep, T, .)`` (grouped heads)."""
    rep = g.heads // g.kv_heads
    if flax_softmax:
        q3 = ctx.op.Div(q3, np.asarray(math.sqrt(g.head), dtype))
    q = ctx.op.Reshape(q3, ctx.shape([0, g.t_len, g.kv_heads, rep, g.head]))
    q = ctx.op.Transpose(q, perm=[0, 2, 3, 1, 4])
    k = ctx.op.Reshape(k3, ctx.shape([0, g.s_len, g.kv_heads, 1, g.head]))
    k = ctx.op.Transpose(k, perm=[0, 2, 3, 4, 1])
    logits = ctx.op.MatMul(q, k)
    logits = ctx.op.Reshape(logits, ctx.shape([0, g.heads, g.t_len, g.s_len]))
    if not flax_softmax:
        logits = ctx.op.Mul(logits, np.asarray(1.0 / math.sqrt(g.head), dtype))
    if bias4 is not None:
        logits = ctx.op.Add(logits, bias4)
    keep = mask4
    if is_causal:
        keep = _causal(ctx, g) if keep is None else ctx.op.And(keep, _causal(ctx, g))
    if keep is not None:
        fill = jnp.finfo(dtype).min if flax_softmax else big
        logits = ctx.op.Where(keep, logits, np.asarray(fill, dtype))
    if flax_softmax or dtype == F32:
        probs = ctx.op.Softmax(logits, axis=-1)
    else:  # JAX's softmax runs in float32
        probs = ctx.cast(ctx.op.Softmax(ctx.cast(logits, F32), axis=-1), dtype)
    probs = ctx.op.Reshape(probs, ctx.shape([0, g.kv_heads, rep, g.t_len, g.s_len]))
    v = ctx.op.Reshape(v3, ctx.shape([0, g.s_len, g.kv_heads, 1, g.v_head]))
    v = ctx.op.Transpose(v, perm=[0, 2, 3, 1, 4])
    out = ctx.op.Transpose(ctx.op.MatMul(probs, v), perm=[0, 3, 1, 2, 4])
    return ctx.op.Reshape(out, ctx.i64([0, 0, -1]))


# -- nnx.MultiHeadAttention ------------------------------------------------------------


def _mha_layout(extra, params):
    """``(mask, wq, bq, wk, bk, wv, bv, q_scale, k_scale, wo, bo)`` from the operands."""
    b, n = params["has_bias"], params["normalize_qk"]
    return _split(extra, params["has_mask"], True, b, True, b, True, b, n, n, True, b)


def _project(x, w, b, precision):
    y = jax.lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())), precision=precision)
    return y if b is None else y + b


def _layer_norm(x, scale, epsilon, fast_variance):
    """flax's LayerNorm over the last axis (no bias): E[x^2] - E[x]^2 when ``fast_variance``."""
    mean = jnp.mean(x, -1, keepdims=True)
    if fast_variance:
        var = jnp.maximum(0.0, jnp.mean(x * x, -1, keepdims=True) - mean * mean)
    else:
        var = jnp.mean(jnp.square(x - mean), -1, keepdims=True)
    return (x - mean) * (jax.lax.rsqrt(var + epsilon) * scale)


def _mha_impl(xq, xk, xv, *extra, **p):
    mask, wq, bq, wk, bk, wv, bv, sq, sk, wo, bo = _mha_layout(extra, p)
    precision, heads, kv_heads = p["precision"], p["heads"], p["kv_heads"]
    q = jnp.reshape(_project(xq, wq, bq, precision), (*xq.shape[:-1], heads, -1))
    k = jnp.reshape(_project(xk, wk, bk, precision), (*xk.shape[:-1], kv_heads, -1))
    v = jnp.reshape(_project(xv, wv, bv, precision), (*xv.shape[:-1], kv_heads, -1))
    if p["normalize_qk"]:
        q = _layer_norm(q, sq, p["epsilon"][0], p["fast_variance"][0])
        k = _layer_norm(k, sk, p["epsilon"][1], p["fast_variance"][1])
    flax_softmax = p["flax_softmax"]
    y = _attend(
        q,
        k,
        v,
        None,
        mask,
        is_causal=p["is_causal"],
        flax_softmax=flax_softmax,
        precision=precision,
    )
    return _project(jnp.reshape(y, (*y.shape[:-2], -1)), wo, bo, precision)


def _mha_batching(args, dims, **params):
    """Only inputs and mask batched: one more leading batch axis; batched weights: vmap(impl)."""
    n = 4 if params["has_mask"] else 3
    if any(d is not None for d in dims[n:]):
        out = jax.vmap(functools.partial(_mha_impl, **params), in_axes=tuple(dims))(*args)
        return out, 0
    moved = _move_batch(args[:n], dims[:n], 3, lambda x: x.ndim + 1)
    return mha_p.bind(*moved, *args[n:], **params), 0


mha_p = family.primitive(
    "multi_head_attention", impl=_mha_impl, batching=_mha_batching, jvp="fallback"
)


_QKV_OUT, _CLS = ("qkv", "out"), ("", "_cls")


def _mha_binder(original):
    from flax import nnx
    from flax.nnx.nn import dtypes as flax_dtypes

    arguments = call_arguments(original)
    init = inspect.signature(nnx.MultiHeadAttention.__init__).parameters
    flax_attention = init["attention_fn"].default

    @functools.wraps(original)
    def call(self, *args, **kwargs):
        a = arguments(self, *args, **kwargs)
        if a is None:
            return original(self, *args, **kwargs)
        fallback = functools.partial(original, self, *args, **kwargs)
        decode = a["decode"] if a["decode"] is not None else self.decode
        deterministic = a["deterministic"]
        deterministic = self.deterministic if deterministic is None else deterministic
        xq = a["inputs_q"]
        xk = xq if a["inputs_k"] is None else a["inputs_k"]
        xv = xk if a["inputs_v"] is None else a["inputs_v"]
        promotes = (self.qkv_promote_dtype, self.out_promote_dtype, self.ln_promote_dtype)
        if decode:
            return _decode(fallback, self)
        if (
            a["sow_weights"]
            or a["out_sharding"] is not None
            or a["qkv_sharding"] is not None
            or (a["inputs_k"] is None and a["inputs_v"] is not None)
            or (self.dropout_rate > 0.0 and not deterministic)
            or self.attention_fn is not flax_attention
            or any(p is not flax_dtypes.promote_dtype for p in promotes)
            or any(getattr(self, f"{n}_dot_general{c}") is not None for n in _QKV_OUT for c in _CLS)
            or any(jnp.ndim(x) < 2 for x in (xq, xk, xv))
            or jnp.shape(xq)[-1] != self.in_features
        ):
            return fallback()
        arrays = _mha_arrays(self)
        dtype = self.dtype or jnp.result_type(xq, xk, xv, *(x for x in arrays if x is not None))
        dtype = np.dtype(dtype)
        floating = jnp.issubdtype(dtype, jnp.floating)
        if not floating or len({np.dtype(jnp.result_type(x)) for x in (xq, xk, xv)}) > 1:
            return fallback()
        cast = lambda x: jnp.asarray(x, dtype)  # noqa: E731
        operands = [cast(xq), cast(xk), cast(xv)]
        if a["mask"] is not None:
            operands.append(jnp.asarray(a["mask"]).astype(bool))
        operands += at_conversion(lambda: [cast(x) for x in arrays if x is not None])
        ln = (self.query_ln, self.key_ln) if self.normalize_qk else ()
        return mha_p.bind(
            *operands,
            has_mask=a["mask"] is not None,
            has_bias=self.use_bias,
            normalize_qk=bool(self.normalize_qk),
            heads=int(self.num_heads),
            kv_heads=int(self.num_kv_heads),
            is_causal=bool(a["is_causal"]),
            flax_softmax=self.dropout_rate > 0.0,
            epsilon=tuple(float(m.epsilon) for m in ln),
            fast_variance=tuple(bool(m.use_fast_variance) for m in ln),
            precision=hashable_precision(self.precision),
        )

    return call


def _decode(fallback, module):
    """decode=True: flax's own cache update when the traced function owns the module (it
    passes the cache in and out), else a clear error: on the user's module the update
    cannot be traced, and on the copy ``to_onnx`` prepared it would be lost."""
    from flax import errors

    from jax2onnx_flax.prepare import is_prepared_copy

    refusal = Jax2OnnxError(
        "nnx.MultiHeadAttention with decode=True updates its autoregressive cache "
        "(nnx.Cache) in place, which cannot be exported as a stateless ONNX graph. Export "
        "the module with decode=False (e.g. nnx.view(module, decode=False) or "
        "module.set_attributes(decode=False)), or pass the cache as inputs and outputs of "
        "a function you export."
    )
    if is_prepared_copy(module):
        raise refusal
    try:
        return fallback()
    except errors.TraceContextError as err:
        raise refusal from err


def _mha_arrays(m):
    """The module's arrays in primitive order, kernels flattened to 2-D (now, not at runtime)."""

    def get():
        value = lambda v: None if v is None else v[...]  # noqa: E731
        out = []
        for proj in (m.query, m.key, m.value):
            kernel = proj.kernel[...]
            out += [jnp.reshape(kernel, (kernel.shape[0], -1))]
            out += [None if proj.bias is None else jnp.reshape(proj.bias[...], (-1,))]
        if m.normalize_qk:
            out += [value(m.query_ln.scale), value(m.key_ln.scale)]
        else:
            out += [None, None]
        kernel = m.out.kernel[...]
        out += [jnp.reshape(kernel, (-1, kernel.shape[-1])), value(m.out.bias)]
        return out

    return at_conversion(get)


family.intercept("flax.nnx.MultiHeadAttention.__call__", mha_p, binder=_mha_binder)


@family.lowering(mha_p)
def multi_head_attention(ctx, xq, xk, xv, *extra, **p):
    """Projections as MatMul + Add on (B, S, F), one Attention on (B, S, heads*head_dim)."""
    mask, wq, bq, wk, bk, wv, bv, sq, sk, wo, bo = _mha_layout(extra, p)
    heads, kv_heads, has_mask = p["heads"], p["kv_heads"], p["has_mask"]
    avals = ctx.avals_in
    q_aval, k_aval = avals[0], avals[1]
    batch = q_aval.shape[:-2]
    t_len, s_len = q_aval.shape[-2], k_aval.shape[-2]
    head = avals[4 if has_mask else 3].shape[-1] // heads  # wq is (in, heads * head)
    g = _Geometry(batch, heads, kv_heads, head, head, t_len, s_len)

    def project(x, aval, w, b):
        if len(batch) != 1:
            x = ctx.op.Reshape(x, ctx.shape([-1, *aval.shape[-2:]]))
        y = ctx.op.MatMul(x, w)
        return y if b is None else ctx.op.Add(y, b)

    q3 = project(xq, avals[0], wq, bq)
    k3 = project(xk, avals[1], wk, bk)
    v3 = project(xv, avals[2], wv, bv)
    if p["normalize_qk"]:
        q3 = _qk_norm(ctx, q3, sq, heads, head, p["epsilon"][0])
        k3 = _qk_norm(ctx, k3, sk, kv_heads, head, p["epsilon"][1])
    mask4 = None if mask is None else _to_4d(ctx, mask, avals[3].shape, g)
    y = _core(ctx, q3, k3, v3, None, mask4, g, p["is_causal"], flax_softmax=p["flax_softmax"])
    out = ctx.op.MatMul(y, wo)
    if bo is not None:
        out = ctx.op.Add(out, bo)
    if len(batch) != 1:
        out = ctx.op.Reshape(out, ctx.shape(ctx.avals_out[0].shape))
    return out


def _qk_norm(ctx, x3, scale, heads, head, epsilon):
    """LayerNormalization over each head's features of a (B, S, heads*head) value."""
    x = ctx.op.Reshape(x3, ctx.i64([0, 0, heads, head]))
    y = ctx.op.LayerNormalization(x, scale, axis=-1, epsilon=epsilon)
    return ctx.op.Reshape(y, ctx.i64([0, 0, -1]))
