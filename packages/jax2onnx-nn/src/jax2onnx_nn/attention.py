"""``jax.nn.dot_product_attention`` as the macro primitive ``nn.dot_product_attention``.

The lowering emits one ONNX ``Attention`` (opset 23) in its 3-D form: JAX's
``BTNH`` operands reshape (for free) to ``(B, T, N*H)`` with ``q_num_heads`` and
``kv_num_heads``, so grouped-query heads need no Transpose. ``bias`` and a
boolean ``mask`` become one float ``attn_mask``: ``bias + Where(mask, 0, big)``
with JAX's large negative number ``big`` (finite, so a fully masked row is
uniform, as in JAX, not zero as ONNX's ``-inf`` would give); that mask is float32,
as JAX's logits are for bfloat16/float16 operands too. Float64 (JAX runs
the softmax in float32) and ``local_window_size`` inline JAX's decomposition.
``mask`` with ``is_causal`` takes the causal triangle into the mask (computed
from the lengths when they are symbolic).

Batching is explicit (the vmapped axis merges into the batch axis, so one
``Attention`` remains); the JVP is JAX's derivative of the original function.
Calls with ``query_seq_lengths``/``key_value_seq_lengths``, ``return_residual``
or a non-XLA ``implementation`` run the original function.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import (
    Family,
    batch_at_front,
    call_arguments,
    case,
    is_symbolic,
    kernel_dtypes,
    onnx_dtype,
)

family = Family("nn")
register = family.register

F32 = np.dtype(np.float32)
_dpa = jax.nn.dot_product_attention  # the original, captured before interception


def _impl(query, key, value, *extra, has_bias, has_mask, scale, is_causal, local_window_size):
    rest = list(extra)
    bias = rest.pop(0) if has_bias else None
    mask = rest.pop(0) if has_mask else None
    return _dpa(
        query,
        key,
        value,
        bias,
        mask,
        scale=scale,
        is_causal=is_causal,
        local_window_size=local_window_size,
    )


def _batching(args, dims, **params):
    """Merge the vmapped axis into JAX's batch axis and bind the primitive once."""
    front = batch_at_front(args, dims)
    size = front[0].shape[0]
    if front[0].ndim == 4:  # unbatched operands were (T, N, H): the vmapped axis is B
        return attention_p.bind(*front, **params), 0
    batch = front[0].shape[1]
    merged = [a.reshape((size * batch, *a.shape[2:])) for a in front[:3]]
    for t in front[3:]:
        t = jnp.broadcast_to(t, (size, batch, *t.shape[2:])) if t.ndim == 5 else t
        merged.append(t.reshape((size * batch, *t.shape[2:])))
    out = attention_p.bind(*merged, **params)
    return out.reshape((size, batch, *out.shape[1:])), 0


attention_p = family.primitive(
    "dot_product_attention", impl=_impl, batching=_batching, jvp="fallback"
)


def _binder(original):
    arguments = call_arguments(original)

    @functools.wraps(original)
    def call(*args, **kwargs):
        a = arguments(*args, **kwargs)
        if a is None:
            return original(*args, **kwargs)
        window = a["local_window_size"]
        if (
            a["query_seq_lengths"] is not None
            or a["key_value_seq_lengths"] is not None
            or a["return_residual"]
            or a["implementation"] not in (None, "xla")
            or not (a["scale"] is None or isinstance(a["scale"], (int, float)))
            or not (window is None or isinstance(window, (int, tuple)))
        ):
            return original(*args, **kwargs)
        operands = [jnp.asarray(a["query"]), jnp.asarray(a["key"]), jnp.asarray(a["value"])]
        for name in ("bias", "mask"):
            if a[name] is not None:
                operands.append(jnp.asarray(a[name]))
        return attention_p.bind(
            *operands,
            has_bias=a["bias"] is not None,
            has_mask=a["mask"] is not None,
            scale=None if a["scale"] is None else float(a["scale"]),
            is_causal=bool(a["is_causal"]),
            local_window_size=window,
        )

    return call


family.intercept("jax.nn.dot_product_attention", attention_p, binder=_binder)


# JAX runs the attention softmax in float32 even for float64 operands, so float64
# results carry float32 rounding (XLA's and ORT's float32 exp differ by an ulp).
_F64_SOFTMAX_IN_F32 = {"float64": (1e-6, 1e-6)}
_BTNH = [("B", 5, 4, 8), ("B", 6, 4, 8), ("B", 6, 4, 8)]
_GQA = [("B", 5, 4, 8), ("B", 6, 2, 8), ("B", 6, 2, 8)]
_MASK = np.tril(np.ones((5, 6), bool)) | (np.arange(6) % 2 == 0)
_MASK_ROW = np.ones((1, 1, 5, 6), bool)
_MASK_ROW[0, 0, 2] = False  # a fully masked row: uniform in JAX


def _triangle(ctx, t_len, s_len):
    """``(T, S)``: key ``j`` visible from query ``i`` when ``j <= i``; a constant when static."""
    if not (is_symbolic(t_len) or is_symbolic(s_len)):
        return np.tril(np.ones((int(t_len), int(s_len)), bool))
    rows = ctx.op.Unsqueeze(ctx.arange(t_len), ctx.i64([1]))
    return ctx.op.GreaterOrEqual(rows, ctx.arange(s_len))


@family.lowering(
    attention_p,
    min_opset=23,
    native_dtypes=(*kernel_dtypes("Attention"), np.bool_),  # float32 (and half), a bool mask
    cases=lambda: [
        case(
            "dpa",
            lambda q, k, v: jax.nn.dot_product_attention(q, k, v),
            _BTNH,
            expect=["Reshape -> Attention -> Reshape:Bx5x4x8"],
            counts={"Attention": 1, "Transpose": 0, "Softmax": 0},
            variants=["f32"],
        ),
        case(
            "dpa_f64",
            lambda q, k, v: jax.nn.dot_product_attention(q, k, v),
            _BTNH,
            variants=["f64"],
            tolerances=_F64_SOFTMAX_IN_F32,
        ),
        case(
            "dpa_gqa_causal_scale",
            lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True, scale=0.5),
            _GQA,
            counts={"Attention": 1},
            variants=["f32", "bf16"],
        ),
        case(
            "dpa_bias_mask",
            lambda q, k, v, b: jax.nn.dot_product_attention(
                q, k, v, bias=b, mask=jnp.asarray(_MASK)[None, None]
            ),
            [*_BTNH, ("B", 4, 5, 6)],
            counts={"Attention": 1},
            variants=["f32", "bf16", "f16"],
        ),
        case(
            "dpa_bias_one_head",
            lambda q, k, v, b: jax.nn.dot_product_attention(q, k, v, b),
            [*_GQA, (1, 1, 5, 6)],
            expect=["Attention"],
            variants=["f32"],
        ),
        case(
            "dpa_mask_causal_full_row",
            lambda q, k, v: jax.nn.dot_product_attention(
                q, k, v, mask=jnp.asarray(_MASK_ROW), is_causal=True
            ),
            [(2, 5, 4, 8), (2, 6, 4, 8), (2, 6, 4, 8)],
            counts={"Attention": 1},
            variants=["f32", "bf16", "f16"],
        ),
        case(  # the causal triangle from the run-time lengths, unequal T and S
            "dpa_mask_causal_symbolic",
            lambda q, k, v, m: jax.nn.dot_product_attention(q, k, v, mask=m, is_causal=True),
            [("B", "T", 4, 8), ("B", "S", 4, 8), ("B", "S", 4, 8), ("B", 1, "T", "S")],
            dtypes=[None, None, None, np.bool_],
            dim_sizes={"B": (2, 1, 3, 2), "T": (5, 1, 6, 4), "S": (6, 2, 6, 3)},
            counts={"Attention": 1},
            variants=["f32"],
        ),
        case(
            "dpa_tnh",
            lambda q, k, v: jax.nn.dot_product_attention(q, k, v),
            [(5, 4, 8), (6, 4, 8), (6, 4, 8)],
            counts={"Attention": 1},
            variants=["f32"],
        ),
        case(
            "dpa_local_window",
            lambda q, k, v: jax.nn.dot_product_attention(q, k, v, local_window_size=(2, 1)),
            [(2, 5, 4, 8), (2, 5, 4, 8), (2, 5, 4, 8)],
            counts={"Attention": 0},
            tolerances=_F64_SOFTMAX_IN_F32,
        ),
        case(
            "dpa_seq_lengths",
            lambda q, k, v, n: jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=n),
            [(2, 5, 4, 8), (2, 6, 4, 8), (2, 6, 4, 8), np.array([3, 6], np.int32)],
            counts={"Attention": 0},
            tolerances=_F64_SOFTMAX_IN_F32,
        ),
        case(
            "dpa_vmap",
            jax.vmap(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True)),
            [("B", 2, 5, 4, 8), ("B", 2, 5, 4, 8), ("B", 2, 5, 4, 8)],
            counts={"Attention": 1},
            variants=["f32"],
        ),
        case(
            "dpa_vmap_tnh",
            jax.vmap(lambda q, k, v: jax.nn.dot_product_attention(q, k, v)),
            [("B", 5, 4, 8), ("B", 6, 4, 8), ("B", 6, 4, 8)],
            counts={"Attention": 1},
            variants=["f32"],
        ),
        case(
            "dpa_grad",
            jax.grad(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True).sum()),
            [(2, 5, 4, 8), (2, 5, 4, 8), (2, 5, 4, 8)],
            tolerances=_F64_SOFTMAX_IN_F32,
        ),
        case(
            "dpa_opset22",
            lambda q, k, v: jax.nn.dot_product_attention(q, k, v),
            [(2, 5, 4, 8), (2, 6, 4, 8), (2, 6, 4, 8)],
            opset=22,
            counts={"Attention": 0},
            tolerances=_F64_SOFTMAX_IN_F32,
        ),
    ],
)
def dot_product_attention(
    ctx, query, key, value, *extra, has_bias, has_mask, scale, is_causal, local_window_size
):
    """One Attention (3-D form) between free Reshapes; see the module docstring."""
    q_shape, k_shape, v_shape = (a.shape for a in ctx.avals_in[:3])
    unbatched = len(q_shape) == 3
    t_len, s_len = q_shape[-3], k_shape[-3]
    fold_causal = is_causal and has_mask
    if local_window_size is not None or ctx.avals_in[0].dtype not in kernel_dtypes("Attention"):
        return ctx.fallback()  # a bool mask alone is native: bool or integer operands are not
    n_heads, k_heads, head, v_head = q_shape[-2], k_shape[-2], q_shape[-1], v_shape[-1]
    if unbatched:
        zero = ctx.i64([0])
        query, key, value = (ctx.op.Unsqueeze(x, zero) for x in (query, key, value))
    flat = ctx.i64([0, 0, -1])
    q3, k3, v3 = (ctx.op.Reshape(x, flat) for x in (query, key, value))
    rest = list(extra)
    bias = rest.pop(0) if has_bias else None
    mask = rest.pop(0) if has_mask else None
    attn_mask = bias
    if mask is not None:
        if fold_causal:
            mask = ctx.op.And(mask, _triangle(ctx, t_len, s_len))
        # float32 as JAX's logits (bfloat16/float16 operands too): a finite ``big``
        big = np.asarray(-0.7 * np.finfo(np.float32).max, np.float32)
        additive = ctx.op.Where(mask, np.zeros((), np.float32), big)
        attn_mask = additive if bias is None else ctx.op.Add(ctx.cast(bias, F32), additive)
    y = ctx.op.Attention(
        q3,
        k3,
        v3,
        attn_mask,
        q_num_heads=int(n_heads),
        kv_num_heads=int(k_heads),
        scale=float(1.0 / np.sqrt(head) if scale is None else scale),
        is_causal=int(is_causal and not fold_causal),
    )
    y.dtype = onnx_dtype(ctx.avals_in[0].dtype)  # the builder does not know Attention's dtype
    out = ctx.op.Reshape(y, ctx.i64([0, 0, int(n_heads), int(v_head)]))
    if unbatched:
        out = ctx.op.Squeeze(out, ctx.i64([0]))
    return out


@family.lowering(attention_p)
def _attention_decomposed(ctx, *operands, **params):
    """JAX's decomposition (einsum, masks, float32 softmax, einsum), inlined (before opset 23)."""
    return ctx.fallback()
