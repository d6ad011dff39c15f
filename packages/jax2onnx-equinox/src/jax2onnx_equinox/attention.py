"""Equinox attention: ``eqx.nn.MultiheadAttention`` and ``eqx.nn.RotaryPositionalEmbedding``.

``MultiheadAttention`` is the macro primitive ``equinox.eqx_multihead_attention``
over the three inputs, the mask and the four projections' arrays (weights
transposed to ``(in, out)`` at conversion time, widened to the computation
dtype as Equinox's promotion does). Its arithmetic is Equinox's: each
projection ``x @ W.T + b``, the query divided by ``sqrt(qk_size)``, logits of
masked positions set to ``finfo(dtype).min``, the softmax in the computation
dtype, the weighted values through the output projection. The lowering folds
any batch axes into one and emits:

* opset >= 23: MatMul (+ Add) per projection on ``(B, T, D)``, a Div, one ONNX
  ``Attention`` in its 3-D form (``q_num_heads = kv_num_heads = num_heads``,
  ``scale=1`` because the query is already divided: exact in ONNX Runtime, which
  scales Q and K by a float32 ``sqrt(scale)`` each) and the output MatMul (+ Add).
  A boolean mask becomes the additive ``Where(mask, 0, -0.7 * max)``: ONNX
  Runtime turns a boolean mask's fully masked row (and an additive
  ``finfo.min``) into zeros, where Equinox gives a uniform row; any finite
  logit plus ``-0.7 * max`` rounds to that number, so a masked row is uniform
  and a masked position weighs exactly 0, as in Equinox. ONNX Runtime's
  Attention runs float32 and float64.
* opset < 23: MatMul -> Where(mask, ., finfo.min) -> Softmax -> MatMul, per head
  through Reshape/Transpose: Equinox's own numbers.

A call with ``process_heads``, dropout that is active (``inference=False`` with
``dropout_p > 0``), the deprecated ``deterministic=`` or inputs Equinox would
reject runs Equinox's own code (which converts through the lax rules). Under
``jax.vmap`` the vmapped axis becomes one more batch axis, so one Attention
serves the whole batch; the JVP is JAX's derivative of ``impl``.

``RotaryPositionalEmbedding`` on ``(T, H)`` (T static) is the primitive
``equinox.eqx_rotary_embedding`` over ``x`` and the ``(T, H)`` cosine and
sine tables (Equinox's halves tiled, as its call does). They are the tables
Equinox's own call uses (its cache is keyed by size and dtype, not theta): the
stand-in runs Equinox's call at conversion time on ``[1.., 0..]``, whose
output is exactly ``[cos, sin]``. Equinox rotates halves
(``concat(-x2, x1)``), which is ONNX ``RotaryEmbedding``'s non-interleaved form
(``x1 * cos - x2 * sin``, ``x1 * sin + x2 * cos``): float32 at opset 23 lowers
to that op (ONNX Runtime's kernel rounds some elements differently in the last
bit); float64 (no kernel) and older opsets inline Equinox's
``x * cos + rotate_half(x) * sin`` on constant tables. Batching keeps the heads where they are:
``vmap(rope, in_axes=1)`` over ``(T, heads, H)`` binds the primitive on the
whole array with ``seq_axis=-3`` (the 3-D form ``(B, T, heads*H)``, no Transpose).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, Jax2OnnxError, at_conversion, call_arguments, is_symbolic
from jax2onnx_equinox._util import F32, FLOATS, eqx_factory, factory_cases, grad_of_squares, vmapped

family = Family("equinox")
register = family.register

# -- MultiheadAttention: reference semantics --------------------------------------------

_PROJ = ("query_proj", "key_proj", "value_proj", "output_proj")


def _layout(extra, has_mask, biases):
    """``(mask, wq, bq, wk, bk, wv, bv, wo, bo)`` from the operands after q, k, v."""
    rest = list(extra)
    mask = rest.pop(0) if has_mask else None
    out = [mask]
    for has_bias in biases:
        out += [rest.pop(0), rest.pop(0) if has_bias else None]
    return out


def _project(x, w, b):
    y = jax.lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())))
    return y if b is None else y + b


def _mha_impl(q, k, v, *extra, num_heads, has_mask, biases):
    """Equinox's arithmetic on ``(*batch, T, D)`` inputs, mask ``(*batch|(), N|1, T, S)``."""
    mask, wq, bq, wk, bk, wv, bv, wo, bo = _layout(extra, has_mask, biases)
    heads = lambda x: jnp.reshape(x, (*x.shape[:-1], num_heads, -1))  # noqa: E731
    qh, kh, vh = heads(_project(q, wq, bq)), heads(_project(k, wk, bk)), heads(_project(v, wv, bv))
    qh = qh / math.sqrt(qh.shape[-1])
    logits = jnp.einsum("...thd,...shd->...hts", qh, kh)
    if mask is not None:
        logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
    weights = jax.nn.softmax(logits, axis=-1)  # float32/float64: Equinox's softmax dtype
    attn = jnp.einsum("...hts,...shd->...thd", weights, vh)
    return _project(jnp.reshape(attn, (*attn.shape[:-2], -1)), wo, bo)


def _mha_batching(args, dims, *, num_heads, has_mask, biases):
    """Inputs and mask batched: the vmapped axis as one more leading batch axis."""
    from jax.interpreters import batching

    params = dict(num_heads=num_heads, has_mask=has_mask, biases=biases)
    n = 4 if has_mask else 3
    if any(d is not None for d in dims[n:]):  # batched weights (an ensemble): JAX's vmap
        return jax.vmap(functools.partial(_mha_impl, **params), in_axes=tuple(dims))(*args), 0
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    front = [batching.bdim_at_front(a, d, size) for a, d in zip(args[:3], dims[:3], strict=True)]
    if has_mask:
        mask, d = args[3], dims[3]
        if d is not None:  # right-aligned against (B, *batch, N, T, S): ones after B
            mask = jnp.moveaxis(mask, d, 0)
            lead = front[0].ndim - 2  # batch axes of the new inputs, B included
            mask = jnp.reshape(mask, (size, *(1,) * (lead + 3 - mask.ndim), *mask.shape[1:]))
        front.append(mask)
    return mha_p.bind(*front, *args[n:], **params), 0


mha_p = family.primitive(
    "eqx_multihead_attention", impl=_mha_impl, batching=_mha_batching, jvp="fallback"
)


# -- MultiheadAttention: the stand-in -----------------------------------------------------


def _dropout_off(module, inference):
    p = module.dropout.p
    if isinstance(p, (int, float)) and p == 0:
        return True
    inference = module.dropout.inference if inference is None else inference
    return isinstance(inference, (bool, np.bool_)) and bool(inference)


def _mha_binder(original):
    arguments = call_arguments(original)

    @functools.wraps(original)
    def call(self, *args, **kwargs):
        a = arguments(self, *args, **kwargs)
        if a is None:
            return original(self, *args, **kwargs)
        q, k, v, mask = a["query"], a["key_"], a["value"], a["mask"]
        sizes = (self.query_size, self.key_size, self.value_size)
        if (
            a["process_heads"] is not None
            or a["deterministic"] is not None
            or not _dropout_off(self, a["inference"])
            or any(jnp.ndim(x) != 2 or jnp.shape(x)[1] != n for x, n in zip((q, k, v), sizes))
            or jnp.shape(k)[0] != jnp.shape(v)[0]
        ):
            return original(self, *args, **kwargs)
        t_len, s_len = jnp.shape(q)[0], jnp.shape(k)[0]
        if mask is not None and (
            jnp.result_type(mask) != np.bool_
            or jnp.shape(mask) not in ((t_len, s_len), (self.num_heads, t_len, s_len))
        ):
            return original(self, *args, **kwargs)  # Equinox's own error or semantics
        projs = [getattr(self, name) for name in _PROJ]
        arrays = [x for p in projs for x in (p.weight, p.bias) if x is not None]
        dtype = np.dtype(jnp.result_type(q, k, v, *arrays))
        if not jnp.issubdtype(dtype, jnp.floating):
            return original(self, *args, **kwargs)

        def weights():
            out = []
            for p in projs:
                out.append(jnp.asarray(p.weight, dtype).T)
                if p.bias is not None:
                    out.append(jnp.asarray(p.bias, dtype))
            return out

        operands = [jnp.asarray(x, dtype) for x in (q, k, v)]
        if mask is not None:
            operands.append(mask if jnp.ndim(mask) == 3 else jnp.expand_dims(mask, 0))
        return mha_p.bind(
            *operands,
            *at_conversion(weights),
            num_heads=int(self.num_heads),
            has_mask=mask is not None,
            biases=tuple(p.bias is not None for p in projs),
        )

    return call


family.intercept("equinox.nn.MultiheadAttention.__call__", mha_p, binder=_mha_binder)


# -- MultiheadAttention: lowerings -------------------------------------------------------------


class _Sizes:
    """Static sizes of one call (batch axes and lengths may be symbolic)."""

    def __init__(self, ctx, num_heads, has_mask, biases):
        avals = ctx.avals_in
        q, k = avals[0], avals[1]
        self.batch = tuple(q.shape[:-2])
        self.t_len, self.s_len = q.shape[-2], k.shape[-2]
        self.heads = int(num_heads)
        w = 4 if has_mask else 3  # operand index of wq, then wk, wv, wo
        w_v = w + 2 + sum(biases[:2])
        self.qk = int(avals[w].shape[1]) // self.heads
        self.vo = int(avals[w_v].shape[1]) // self.heads
        self.mask_shape = tuple(avals[3].shape) if has_mask else None
        self.dtype = np.dtype(q.dtype)


def _fold(ctx, x, aval, g: _Sizes):
    """``(*batch, L, D)`` as ``(B, L, D)``."""
    if len(g.batch) == 1:
        return x
    return ctx.op.Reshape(x, ctx.shape([-1, *aval.shape[-2:]]))


def _mask4(ctx, mask, g: _Sizes):
    """The ``(*mb, N|1, T, S)`` mask as ``(B|1, N|1, T, S)``."""
    lead, rest = g.mask_shape[:-3], g.mask_shape[-3:]
    ones = all(not is_symbolic(d) and d == 1 for d in lead)
    if not ones and tuple(lead) != g.batch:
        mask = ctx.op.Expand(mask, ctx.shape([*g.batch, *rest]))
    return ctx.op.Reshape(mask, ctx.shape([1 if ones else -1, *rest]))


def _projections(ctx, q, k, v, extra, g: _Sizes, has_mask, biases):
    mask, wq, bq, wk, bk, wv, bv, wo, bo = _layout(extra, has_mask, biases)

    def project(x, aval, w, b):
        y = ctx.op.MatMul(_fold(ctx, x, aval, g), w)
        return y if b is None else ctx.op.Add(y, b)

    avals = ctx.avals_in
    q3 = project(q, avals[0], wq, bq)
    q3 = ctx.op.Div(q3, np.asarray(math.sqrt(g.qk), g.dtype))  # Equinox: query / sqrt(qk)
    k3, v3 = project(k, avals[1], wk, bk), project(v, avals[2], wv, bv)
    mask4 = None if mask is None else _mask4(ctx, mask, g)
    return q3, k3, v3, mask4, (wo, bo)


def _output(ctx, y3, wo, bo):
    out = ctx.op.MatMul(y3, wo)
    out = out if bo is None else ctx.op.Add(out, bo)
    if ctx.avals_in[0].ndim != 3:
        out = ctx.op.Reshape(out, ctx.shape(ctx.avals_out[0].shape))
    return out


@family.lowering(mha_p, min_opset=23)
def multihead_attention(ctx, q, k, v, *extra, num_heads, has_mask, biases):
    """Projections as MatMul (+ Add), one Attention (3-D form, scale 1 on the divided query)."""
    g = _Sizes(ctx, num_heads, has_mask, biases)
    q3, k3, v3, mask4, (wo, bo) = _projections(ctx, q, k, v, extra, g, has_mask, biases)
    additive = None
    if mask4 is not None:
        big = np.asarray(-0.7 * float(jnp.finfo(g.dtype).max), g.dtype)
        additive = ctx.op.Where(mask4, np.zeros((), g.dtype), big)
    y3 = ctx.op.Attention(
        q3, k3, v3, additive, q_num_heads=g.heads, kv_num_heads=g.heads, scale=1.0
    )
    return _output(ctx, y3, wo, bo)


@family.lowering(mha_p)
def multihead_attention_decomposed(ctx, q, k, v, *extra, num_heads, has_mask, biases):
    """Before opset 23 (no Attention op): MatMul -> Where(mask) -> Softmax -> MatMul per head."""
    g = _Sizes(ctx, num_heads, has_mask, biases)
    q3, k3, v3, mask4, (wo, bo) = _projections(ctx, q, k, v, extra, g, has_mask, biases)

    def heads(x, length, size, perm):
        return ctx.op.Transpose(ctx.op.Reshape(x, ctx.shape([0, length, g.heads, size])), perm=perm)

    logits = ctx.op.MatMul(
        heads(q3, g.t_len, g.qk, [0, 2, 1, 3]), heads(k3, g.s_len, g.qk, [0, 2, 3, 1])
    )
    if mask4 is not None:
        logits = ctx.op.Where(mask4, logits, np.asarray(jnp.finfo(g.dtype).min, g.dtype))
    probs = ctx.op.Softmax(logits, axis=-1)
    y = ctx.op.MatMul(probs, heads(v3, g.s_len, g.vo, [0, 2, 1, 3]))
    y3 = ctx.op.Reshape(ctx.op.Transpose(y, perm=[0, 2, 1, 3]), ctx.i64([0, 0, -1]))
    return _output(ctx, y3, wo, bo)


# -- RotaryPositionalEmbedding ------------------------------------------------------------


def _rope_impl(x, cos, sin, *, seq_axis):
    """Equinox's ``x * cos + rotate_half(x) * sin``; tables ``(T, H)`` along ``seq_axis``."""
    mid = -seq_axis - 2  # axes between the sequence and the features (heads)
    table = lambda t: jnp.reshape(t, (t.shape[0], *(1,) * mid, t.shape[1]))  # noqa: E731
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * table(cos) + rotated * table(sin)


def _rope_batching(args, dims, *, seq_axis):
    """The vmapped axis stays where it is: before the sequence axis it is one more batch
    axis; between the sequence and the features one more head axis."""
    x, cos, sin = args
    d = dims[0]
    if d is None or dims[1] is not None or dims[2] is not None:
        return jax.vmap(functools.partial(_rope_impl, seq_axis=seq_axis), in_axes=dims)(*args), 0
    if d == x.ndim - 1:  # batched along the features' side: move it in front
        x, d = jnp.moveaxis(x, d, 0), 0
    after_seq = d > x.ndim - 1 + seq_axis  # the new axis sits between sequence and features
    seq_axis = seq_axis - 1 if after_seq else seq_axis
    return rope_p.bind(x, cos, sin, seq_axis=seq_axis), d


rope_p = family.primitive(
    "eqx_rotary_embedding", impl=_rope_impl, batching=_rope_batching, jvp="fallback"
)


def _rope_binder(original):
    arguments = call_arguments(original)

    @functools.wraps(original)
    def call(self, *args, **kwargs):
        a = arguments(self, *args, **kwargs)
        x = None if a is None else a["x"]
        if x is not None and jnp.ndim(x) == 2 and is_symbolic(jnp.shape(x)[0]):
            raise Jax2OnnxError(
                f"eqx.nn.RotaryPositionalEmbedding on a sequence of symbolic length "
                f"{jnp.shape(x)[0]}: Equinox computes its cos/sin tables for the length at "
                "trace time, so the sequence axis needs a fixed size in to_onnx's inputs "
                '(e.g. ("B", 128, 64) instead of ("B", "T", 64)).'
            )
        if (
            x is None
            or jnp.ndim(x) != 2
            or jnp.shape(x)[1] != self.embedding_size
            or jnp.result_type(x) not in FLOATS
            or jnp.result_type(x, self.dtype) != jnp.result_type(x)
        ):
            return original(self, *args, **kwargs)
        t_len, size = jnp.shape(x)
        half = size // 2

        def tables():  # Equinox's own call on [1.., 0..] returns exactly [cos, sin]
            probe = jnp.concatenate(
                [jnp.ones((t_len, half), x.dtype), jnp.zeros((t_len, half), x.dtype)], axis=-1
            )
            out = original(self, probe)
            return jnp.tile(out[:, :half], (1, 2)), jnp.tile(out[:, half:], (1, 2))

        cos, sin = at_conversion(tables)
        return rope_p.bind(x, cos, sin, seq_axis=-2)

    return call


family.intercept("equinox.nn.RotaryPositionalEmbedding.__call__", rope_p, binder=_rope_binder)


@family.lowering(rope_p, min_opset=23, native_dtypes=(F32,))
def rotary_embedding(ctx, x, cos, sin, *, seq_axis):
    """ONNX RotaryEmbedding (rotate-half form): 4-D ``(1, batch*, T, H)`` for ``(*batch, T, H)``,
    3-D ``(B, T, heads*H)`` with ``num_heads`` for ``(*batch, T, *heads, H)``."""
    shape = ctx.avals_in[0].shape
    t_len, size = shape[seq_axis], int(shape[-1])
    heads = shape[seq_axis + 1 : -1]
    lead = shape[: len(shape) + seq_axis]
    if any(is_symbolic(d) for d in heads):
        return ctx.fallback()
    n_heads = int(np.prod(heads, dtype=np.int64))
    cos, sin = (_half(ctx, t, size) for t in (cos, sin))
    tables = [ctx.op.Unsqueeze(t, ctx.i64([0])) for t in (cos, sin)]
    if not heads:
        y = ctx.op.Reshape(x, ctx.shape([1, -1, t_len, size]))
        y = ctx.op.RotaryEmbedding(y, *tables)
    elif all(not is_symbolic(d) and d == 1 for d in lead):
        y = ctx.op.Reshape(x, ctx.shape([1, t_len, n_heads * size]))
        y = ctx.op.RotaryEmbedding(y, *tables, num_heads=n_heads)
    else:  # ONNX Runtime broadcasts no batch of the tables: positions per example
        y = ctx.op.Reshape(x, ctx.shape([-1, t_len, n_heads * size]))
        steps = np.arange(int(t_len), dtype=np.int64)[None]
        if any(is_symbolic(d) for d in lead):
            batch = ctx.op.Slice(ctx.op.Shape(y), ctx.i64([0]), ctx.i64([1]))
            positions = ctx.op.Expand(steps, ctx.op.Concat(batch, ctx.i64([1]), axis=0))
        else:
            positions = ctx.i64(np.broadcast_to(steps, (int(np.prod(lead)), int(t_len))))
        y = ctx.op.RotaryEmbedding(y, cos, sin, positions, num_heads=n_heads)
    return ctx.op.Reshape(y, ctx.shape(shape))


def _half(ctx, table, size):
    """The ``(T, H/2)`` half of a tiled ``(T, H)`` table (a constant: sliced now)."""
    if table.const_value is not None:
        array = table.const_value.numpy()
        return ctx.const(array[:, : size // 2], array.dtype)
    return ctx.op.Slice(table, ctx.i64([0]), ctx.i64([size // 2]), ctx.i64([1]))


@family.lowering(rope_p)
def rotary_embedding_decomposed(ctx, x, cos, sin, *, seq_axis):
    """Before opset 23: Equinox's ``x * cos + rotate_half(x) * sin``, inlined."""
    return ctx.fallback()


# -- cases ------------------------------------------------------------------------------

T, S, D, N = 5, 7, 16, 4
_CAUSAL = np.tril(np.ones((T, T), bool))
_ROW_MASKED = np.tril(np.ones((T, S), bool)) | (np.arange(S) % 3 == 0)
_ROW_MASKED[2] = False  # a fully masked row: uniform in Equinox
_CLEAN = {"Softmax": 0, "Transpose": 0, "Loop": 0}


def _mha(**kw):
    return eqx_factory(lambda eqx, key: eqx.nn.MultiheadAttention(N, D, **kw, key=key))


def _self_attention(mask=None, wrap=vmapped, **kw):
    """``wrap(x -> mha(x, x, x, mask))`` as a case factory."""
    make = _mha(**kw)

    def factory():
        mha = make()
        fn = lambda x: mha(x, x, x, None if mask is None else jnp.asarray(mask))  # noqa: E731
        return wrap(fn)

    return factory


def _cross_attention():
    make = _mha(key_size=12, value_size=10, qk_size=6, vo_size=5, output_size=9, use_key_bias=True)
    return lambda: jax.vmap(make())


def _unbatched(mask):
    make = _mha(key_size=12)

    def factory():
        mha = make()
        return lambda q, k, v: mha(q, k, v, jnp.asarray(mask))

    return factory


def _rope_heads():
    """MultiheadAttention with RoPE on the query and key heads (Equinox's documented idiom)."""

    def factory():
        import equinox as eqx

        mha = eqx.nn.MultiheadAttention(N, D, key=jax.random.PRNGKey(0))
        rope = eqx.nn.RotaryPositionalEmbedding(D // N)
        per_head = jax.vmap(rope, in_axes=1, out_axes=1)

        def process(q, k, v):
            return per_head(q), per_head(k), v

        return jax.vmap(lambda x: mha(x, x, x, process_heads=process))

    return factory


def _rope(wrap=vmapped):
    return eqx_factory(lambda eqx, key: eqx.nn.RotaryPositionalEmbedding(8), wrap=wrap)


_BOOL_LAST = [None, None, None, np.bool_]
_ATTENTION = "MatMul -> Div -> Attention -> MatMul"

family.add_cases(
    mha_p,
    lambda: factory_cases(
        [
            (
                "eqx_mha",
                _self_attention(),
                [("B", T, D)],
                dict(
                    expect=[f"{_ATTENTION}:Bx{T}x{D}"],
                    counts={"Attention": 1, **_CLEAN},
                    variants=["f32", "f64", "bf16", "f16"],  # half inputs promote to float32
                ),
            ),
            (
                # bfloat16 weights and inputs: Equinox computes in bfloat16
                "eqx_mha_bfloat16_causal",
                _self_attention(_CAUSAL, dtype=jnp.bfloat16),
                [("B", T, D)],
                dict(counts={"Attention": 1, **_CLEAN}, variants=["bf16"]),
            ),
            (
                "eqx_mha_causal_biases_dropout",
                _self_attention(
                    _CAUSAL,
                    use_query_bias=True,
                    use_key_bias=True,
                    use_value_bias=True,
                    use_output_bias=True,
                    dropout_p=0.1,
                ),
                [("B", T, D)],
                dict(
                    expect=["Div -> Attention -> MatMul -> Add"],  # the mask: an initializer
                    counts={"Attention": 1, "Gemm": 0, **_CLEAN},
                ),
            ),
            (
                "eqx_mha_cross_head_mask",
                _cross_attention(),
                [("B", T, D), ("B", S, 12), ("B", S, 10), ("B", N, T, S)],
                dict(
                    dtypes=_BOOL_LAST,
                    expect=[f"Attention -> MatMul:Bx{T}x9"],
                    counts={"Attention": 1, **_CLEAN},
                ),
            ),
            (
                "eqx_mha_unbatched_masked_row",
                _unbatched(_ROW_MASKED),
                [(T, D), (S, 12), (S, D)],
                dict(counts={"Attention": 1}),
            ),
            ("eqx_mha_grad", _self_attention(_CAUSAL, wrap=grad_of_squares), [(T, D)], {}),
            (
                "eqx_mha_opset22",
                _self_attention(_ROW_MASKED[:, :T]),
                [("B", T, D)],
                dict(opset=22, expect=["MatMul -> Where -> Softmax -> MatMul"]),
            ),
            (
                "eqx_mha_rope_heads",
                _rope_heads(),
                [("B", T, D)],
                dict(counts={"RotaryEmbedding": 2, "Transpose": 4}, variants=["f32"]),
            ),
        ]
    ),
)

family.add_cases(
    rope_p,
    lambda: factory_cases(
        [
            (
                "eqx_rope",
                _rope(),
                [("B", T, 8)],
                dict(expect=[f"Reshape -> RotaryEmbedding -> Reshape:Bx{T}x8"], variants=["f32"]),
            ),
            (  # no float64 RotaryEmbedding kernel: Equinox's formula on constant tables
                "eqx_rope_f64",
                _rope(),
                [("B", T, 8)],
                dict(
                    # static: Slices, no Transpose; dynamic: GatherNDs, then one Transpose back
                    expect=["Concat -> Mul"],
                    counts={"RotaryEmbedding": 0, "Tile": 0, "Concat": 1},
                    variants=["f64"],
                ),
            ),
            ("eqx_rope_grad", _rope(grad_of_squares), [(T, 8)], {}),
            ("eqx_rope_opset22", _rope(), [("B", T, 8)], dict(opset=22, variants=["f32"])),
        ]
    ),
)
