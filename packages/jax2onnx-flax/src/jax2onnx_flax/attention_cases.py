"""Cases of :mod:`jax2onnx_flax.attention` (nnx.dot_product_attention, MultiHeadAttention)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, case
from jax2onnx_flax.attention import dpa_p, mha_p

family = Family("flax")
register = family.register

# -- cases ----------------------------------------------------------------------------

# JAX's attention softmax runs in float32 for float64 operands (flax's default path).
_F64_SOFTMAX_IN_F32 = {"float64": (1e-6, 1e-6)}
_BTNH = [("B", 5, 4, 8), ("B", 6, 4, 8), ("B", 6, 4, 8)]
_GQA = [(2, 5, 4, 8), (2, 6, 2, 8), (2, 6, 2, 8)]
_MASK_ROW = np.tril(np.ones((5, 6), bool)) | (np.arange(6) % 2 == 0)
_MASK_ROW[2] = False  # a fully masked row: uniform in flax, zeros in ONNX's boolean mask


def _dpa(name, inputs, *, wrap=None, mask=None, options=None, **kw):
    """An ``nnx.dot_product_attention`` case (a factory: flax is imported before conversion,
    so the interception applies); ``options`` default to flax's own weights path."""

    def make():
        from flax import nnx

        def fn(q, k, v, *rest):
            extra = dict(zip(("bias", "mask"), rest))
            if mask is not None:
                extra["mask"] = jnp.asarray(mask)
            opts = dict(dropout_rate=0.1, deterministic=True) if options is None else options
            return nnx.dot_product_attention(q, k, v, **extra, **opts)

        return fn if wrap is None else wrap(fn)

    return case(name, make, inputs, factory=True, **kw)


def _grad_of_sum(fn):
    return jax.grad(lambda *args: fn(*args).sum(), argnums=(0, 1, 2))


_CAUSAL = dict(dropout_rate=0.1, deterministic=True, is_causal=True)
_BOOL_4TH = [None, None, None, np.bool_]

family.add_cases(
    dpa_p,
    lambda: [
        _dpa(  # jax.nn's path: the nn.dot_product_attention primitive
            "nnx_dpa",
            _BTNH,
            options={},
            expect=["Reshape -> Attention -> Reshape:Bx5x4x8"],
            counts={"Attention": 1, "Transpose": 0},
            variants=["f32"],
        ),
        _dpa("nnx_dpa_f64", _BTNH, options={}, variants=["f64"], tolerances=_F64_SOFTMAX_IN_F32),
        _dpa(
            "nnx_dpa_dropout_mask",
            _BTNH,
            mask=_MASK_ROW,
            expect=["Div -> Attention"],
            counts={"Attention": 1, "Transpose": 0, "Softmax": 0},
        ),
        _dpa(
            # flax's weights in float16: the finfo(float16).min fill
            "nnx_dpa_dropout_mask_f16",
            _BTNH,
            mask=_MASK_ROW,
            expect=["Attention"],
            counts={"Attention": 1, "Softmax": 0},
            variants=["f16"],
        ),
        _dpa(
            "nnx_dpa_dropout_mask_bf16",
            _BTNH,
            mask=_MASK_ROW,
            variants=["bf16"],
        ),
        _dpa(
            "nnx_dpa_dropout_bias_causal_gqa",
            [*_GQA, (1, 4, 5, 6)],
            options=_CAUSAL,
            counts={"Attention": 1},
        ),
        _dpa(  # query and key lengths symbolic and unequal: the triangle from two Ranges
            "nnx_dpa_dropout_bias_causal_symbolic",
            [(2, "T", 4, 8), (2, "S", 4, 8), (2, "S", 4, 8), (1, 4, "T", "S")],
            options=_CAUSAL,
            dim_sizes={"T": (5, 1, 7, 4), "S": (6, 3, 7, 2)},
            counts={"Attention": 1},
        ),
        _dpa(  # flax's causal path needs the mask's full (T, S)
            "nnx_dpa_dropout_mask_causal",
            [*_GQA, (2, 1, 5, 6)],
            options=_CAUSAL,
            dtypes=_BOOL_4TH,
            counts={"Attention": 1},
        ),
        _dpa(
            "nnx_dpa_dropout_batch_dims",
            [(2, "B", 5, 4, 8), (2, "B", 6, 4, 8), (2, "B", 6, 4, 8)],
            counts={"Attention": 1},
        ),
        _dpa(
            "nnx_dpa_dropout_opset21",
            _BTNH,
            mask=_MASK_ROW,
            opset=21,
            expect=["MatMul -> Reshape -> Where -> Softmax -> Reshape -> MatMul"],
            counts={"Attention": 0},
        ),
        _dpa(
            "nnx_dpa_dropout_vmap",
            [("B", 2, 5, 4, 8), ("B", 2, 5, 4, 8), ("B", 2, 5, 4, 8)],
            wrap=jax.vmap,
            options=_CAUSAL,
            counts={"Attention": 1},
        ),
        _dpa("nnx_dpa_dropout_grad", [(2, 5, 4, 8), (2, 6, 4, 8), (2, 6, 4, 8)], wrap=_grad_of_sum),
    ],
)


def _mha(name, inputs, call=None, *, wrap=None, options=None, **kw):
    """An ``nnx.MultiHeadAttention`` case (4 heads, 16 features), ``call(module, *inputs)``."""

    def make():
        from flax import nnx

        config = dict(num_heads=4, in_features=16, qkv_features=16, decode=False)
        module = nnx.MultiHeadAttention(**{**config, **(options or {})}, rngs=nnx.Rngs(0))
        fn = module if call is None else functools.partial(call, module)
        return fn if wrap is None else wrap(fn)

    kw.setdefault("variants", ["f32"])
    return case(name, make, inputs, factory=True, **kw)


def _causal_mask_call(module, x):
    from flax import nnx

    return module(x, mask=nnx.make_causal_mask(x[..., 0]))


def _grad_is_causal(module, x):
    return jax.grad(lambda x: module(x, is_causal=True).sum())(x)


_ONE = {"Attention": 1, "Transpose": 0, "Softmax": 0}
_X = [("B", 6, 16)]
_X_MASK = dict(inputs=[("B", 6, 16), ("B", 1, 6, 6)], dtypes=[None, np.bool_])
_MHA_GRAPH = "MatMul -> Add -> Attention -> MatMul -> Add:Bx6x16"
_ROW_MASK = _MASK_ROW[:, :5][None, None]

family.add_cases(
    mha_p,
    lambda: [
        _mha(
            "mha_self",
            _X,
            expect=[_MHA_GRAPH],
            counts={**_ONE, "Reshape": 0},
            variants=["f32", "bf16", "f16"],  # half inputs promote to the float32 kernels
        ),
        _mha(
            # computes in bfloat16 (dtype) with float32 parameters (param_dtype)
            "mha_dtype_bfloat16",
            _X,
            options=dict(dtype=jnp.bfloat16),
            expect=["Attention"],
            counts={"Softmax": 0},
            variants=["bf16"],
        ),
        _mha(
            "mha_self_f64",
            _X,
            expect=["MatMul -> Reshape -> Mul -> Cast -> Softmax -> Cast -> Reshape -> MatMul"],
            counts={"Attention": 0},
            variants=["f64"],
            tolerances=_F64_SOFTMAX_IN_F32,
        ),
        _mha(
            "mha_cross",
            [("B", 5, 16), ("B", 7, 6)],
            lambda m, x, y: m(x, y),
            options=dict(qkv_features=12, out_features=10, in_kv_features=6, use_bias=False),
            expect=["MatMul -> Attention -> MatMul:Bx5x10"],
            counts={**_ONE, "Add": 0},
        ),
        _mha(
            "mha_bool_mask",
            call=lambda m, x, k: m(x, mask=k),
            **_X_MASK,
            expect=["Where -> Attention"],
            counts=_ONE,
        ),
        _mha(
            "mha_padding_mask",
            [("B", 6, 16), ("B", 6)],
            lambda m, x, k: m(x, mask=k[:, None, None, :]),
            dtypes=[None, np.bool_],
            expect=["Expand -> Reshape -> Where -> Attention"],
            counts=_ONE,
        ),
        _mha(  # the mask is a constant: folded
            "mha_masked_row",
            [("B", 5, 16)],
            lambda m, x: m(x, mask=_ROW_MASK),
            expect=["MatMul -> Add -> Attention -> MatMul -> Add:Bx5x16"],
            counts=_ONE,
        ),
        _mha("mha_causal_mask", _X, _causal_mask_call, counts=_ONE),
        _mha(
            "mha_is_causal",
            _X,
            lambda m, x: m(x, is_causal=True),
            expect=[_MHA_GRAPH],
            counts={**_ONE, "Where": 0},
        ),
        _mha(  # the causal triangle of run-time lengths, with a mask (folded into it)
            "mha_is_causal_mask_symbolic",
            [("B", "T", 16), ("B", 1, "T", "T")],
            lambda m, x, k: m(x, mask=k, is_causal=True),
            dtypes=[None, np.bool_],
            dim_sizes={"B": (2, 1, 3), "T": (6, 1, 9)},
            expect=["And -> Where -> Attention"],
            counts=_ONE,
        ),
        _mha(
            "mha_is_causal_opset21_symbolic",
            [("B", "T", 16)],
            lambda m, x: m(x, is_causal=True),
            dim_sizes={"B": (2, 1, 3), "T": (6, 1, 9)},
            opset=21,
            expect=["Where -> Softmax"],
            counts={"Attention": 0, "Softmax": 1},
        ),
        _mha(
            "mha_normalize_qk",
            _X,
            options=dict(normalize_qk=True),
            expect=["MatMul -> Add -> Reshape -> LayerNormalization -> Reshape -> Attention"],
            counts={**_ONE, "LayerNormalization": 2},
        ),
        _mha(  # flax's own weights: exact in float64 with a float64 Attention
            "mha_gqa_dropout",
            _X,
            options=dict(num_kv_heads=2, dropout_rate=0.1),
            expect=["Div -> Attention"],
            counts=_ONE,
            variants=None,
        ),
        _mha("mha_batch_dims", [(2, "B", 6, 16)], counts=_ONE),
        _mha("mha_unbatched", [(6, 16)], counts=_ONE),
        _mha(
            "mha_opset21",
            call=lambda m, x, k: m(x, mask=k),
            **_X_MASK,
            options=dict(normalize_qk=True),
            opset=21,
            expect=["MatMul -> Reshape -> Mul -> Where"],
            counts={"Attention": 0, "Softmax": 1},
            tolerances=_F64_SOFTMAX_IN_F32,
            variants=None,
        ),
        _mha(
            "mha_vmap",
            [("B", 2, 6, 16), ("B", 2, 4, 6, 6)],
            lambda m, x, k: m(x, mask=k),
            wrap=jax.vmap,
            dtypes=[None, np.bool_],
            counts=_ONE,
        ),
        _mha(
            "mha_grad",
            [(2, 6, 16)],
            _grad_is_causal,
            tolerances=_F64_SOFTMAX_IN_F32,
            variants=None,
        ),
    ],
)
