"""Cases of :mod:`jax2onnx_flax.linen_attention` (Linen DenseGeneral, Einsum, attention)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import Family, case
from jax2onnx_flax._util import grad_of_squares, linen_factory, via_apply
from jax2onnx_flax.attention import dpa_p, mha_p
from jax2onnx_flax.einsum import einsum_p
from jax2onnx_flax.linear import linear_general_p

family = Family("flax")
register = family.register

LINEN = ()


def _calling(fn):
    """A wrap: ``lambda *xs: fn(bound, *xs)`` (call options, masks, several inputs)."""
    return lambda bound: lambda *xs: fn(bound, *xs)


def _layer(name, **kwargs):
    return lambda nn: getattr(nn, name)(**kwargs)


def _lin(name, build, init, inputs, **kw):
    """A Linen case: ``build(nn)`` initialised on ones of ``init``, bound (or wrapped)."""
    wrap, init_kwargs = kw.pop("wrap", None), kw.pop("init_kwargs", None)
    make = linen_factory(build, *init, wrap=wrap, init_kwargs=init_kwargs)
    return case(name, make, inputs, factory=True, **kw)


# -- nn.DenseGeneral ------------------------------------------------------------------

_DG = "DenseGeneral"

family.add_cases(
    linear_general_p,
    lambda: [
        _lin(
            "linen_dense_general_last_axis",
            _layer(_DG, features=5),
            [(2, 3, 4)],
            [("B", 3, 4)],
            expect=["MatMul -> Add:Bx3x5"],
            counts={"Einsum": 0, "Reshape": 0},
        ),
        _lin(
            "linen_dense_general_features_tuple",
            _layer(_DG, features=(2, 3)),
            [(2, 4)],
            [("B", 4)],
            expect=["Einsum -> Add:Bx2x3"],
            counts={"Reshape": 0, "Transpose": 0},
        ),
        _lin(
            "linen_dense_general_axes",
            _layer(_DG, features=(4, 5), axis=(1, -1)),
            [(2, 2, 3)],
            [("B", 2, 3)],
            expect=["Einsum -> Add:Bx4x5"],
            counts={"Reshape": 0, "Transpose": 0},
        ),
        _lin(
            "linen_dense_general_middle_axis_no_bias",
            _layer(_DG, features=(2, 2), axis=1, use_bias=False),
            [(2, 3, 4)],
            [("B", 3, 4)],
            expect=["Einsum:Bx4x2x2"],
            counts={"Add": 0},
        ),
        _lin(
            "linen_dense_general_batch_dims",
            _layer(_DG, features=4, batch_dims=(0,)),
            [(2, 3, 3)],
            [(2, "B", 3)],
            expect=["Einsum -> Add:2xBx4"],
        ),
        _lin(  # bfloat16 weights stay bfloat16 in the file; the graph casts them
            "linen_dense_general_bfloat16_params",
            _layer(_DG, features=(2, 3), param_dtype=jax.numpy.bfloat16),
            [(2, 4)],
            [("B", 4)],
            variants=["f32"],
            expect=["Cast -> Einsum -> Add:Bx2x3"],
        ),
        _lin(
            "linen_dense_general_apply_lambda",
            _layer(_DG, features=(4, 5), axis=(1, 2)),
            [(2, 2, 3)],
            [("B", 2, 3)],
            wrap=via_apply,
            expect=["Einsum -> Add:Bx4x5"],
        ),
        _lin(
            "linen_dense_general_vmap",
            _layer(_DG, features=4, axis=(0, 1)),
            [(2, 3)],
            [("B", 2, 3)],
            wrap=jax.vmap,
            expect=["Einsum -> Add:Bx4"],
            counts={"Transpose": 0},
        ),
        _lin(
            "linen_dense_general_grad",
            _layer(_DG, features=(4, 5), axis=(1, 2)),
            [(3, 2, 3)],
            [(3, 2, 3)],
            wrap=grad_of_squares,
        ),
    ],
)


# -- nn.Einsum --------------------------------------------------------------------------


def _einsum(shape, equation=None, **kwargs):
    return lambda nn: nn.Einsum(shape, equation, **kwargs)


family.add_cases(
    einsum_p,
    lambda: [
        _lin(
            "linen_einsum_heads",
            _einsum((2, 3, 4), "nta,hab->nthb"),
            [(2, 5, 3)],
            [("B", 5, 3)],
            expect=["Einsum -> Add:Bx5x2x4"],
            counts={"Reshape": 0, "Transpose": 0},
        ),
        _lin(
            "linen_einsum_matmul",
            _einsum((3, 4), "...a,ab->...b"),
            [(2, 2, 3)],
            [("B", 2, 3)],
            expect=["MatMul -> Add:Bx2x4"],
            counts={"Einsum": 0},
        ),
        _lin(  # the equation given at call time
            "linen_einsum_call_equation_no_bias",
            _einsum((3, 4), use_bias=False),
            [(2, 5, 3)],
            [("B", 5, 3)],
            init_kwargs={"einsum_str": "bta,ac->bct"},
            wrap=_calling(lambda m, x: m(x, "bta,ac->bct")),
            expect=["Einsum:Bx4x5"],
            counts={"Add": 0},
        ),
        _lin(
            "linen_einsum_apply_lambda",
            _einsum((2, 3, 4), "nta,hab->nthb"),
            [(2, 5, 3)],
            [("B", 5, 3)],
            wrap=via_apply,
            expect=["Einsum -> Add:Bx5x2x4"],
        ),
        _lin(
            "linen_einsum_vmap",
            _einsum((2, 3, 4), "ta,hab->thb"),
            [(5, 3)],
            [("B", 5, 3)],
            wrap=jax.vmap,
            expect=["Einsum -> Add:Bx5x2x4"],
        ),
        _lin(
            "linen_einsum_grad",
            _einsum((2, 3, 4), "nta,hab->nthb"),
            [(2, 5, 3)],
            [(2, 5, 3)],
            wrap=grad_of_squares,
        ),
    ],
)


# -- nn.MultiHeadDotProductAttention ---------------------------------------------------------

_MHA = "MultiHeadDotProductAttention"
_ONE = {"Attention": 1, "Transpose": 0, "Softmax": 0, "Einsum": 0}
_GRAPH = "MatMul -> Add -> Attention -> MatMul -> Add:Bx6x16"
_X = [("B", 6, 16)]
_INIT = [(2, 6, 16)]
_BOOL_2ND = [None, np.bool_]


def _mha(name="MultiHeadDotProductAttention", **kwargs):
    return _layer(name, **{"num_heads": 4, "qkv_features": 16, **kwargs})


def _causal(m, x):
    from flax import linen as nn

    return m(x, mask=nn.make_causal_mask(x[..., 0]))


def _decode_step(bound):
    """One decoding step with the cache in and out (``mutable=["cache"]``): Flax's own method."""
    module, variables = bound.unbind()
    return lambda x: module.apply(variables, x, mutable=["cache"])


class _Deterministic:
    """Dropout in the layer, switched off by the call's ``deterministic=True``."""

    @staticmethod
    def wrap(bound):
        module, variables = bound.unbind()
        return lambda x: module.apply(variables, x, deterministic=True)


family.add_cases(
    mha_p,
    lambda: [
        _lin(
            "linen_mha_self",
            _mha(),
            _INIT,
            _X,
            expect=[_GRAPH],
            counts={**_ONE, "Reshape": 0, "Einsum": 0},
            variants=["f32", "f64", "bf16", "f16"],  # half inputs promote to float32
        ),
        _lin(
            # computes in bfloat16 (dtype, softmax included) with float32 parameters
            "linen_mha_dtype_bfloat16",
            _mha(dtype=jnp.bfloat16),
            _INIT,
            _X,
            expect=["Attention"],
            counts={"Attention": 1, "Softmax": 0},
            variants=["bf16"],
        ),
        _lin(
            "linen_mha_cross",
            _mha(qkv_features=12, out_features=10, use_bias=False),
            [(2, 5, 16), (2, 7, 6)],
            [("B", 5, 16), ("B", 7, 6)],
            expect=["MatMul -> Attention -> MatMul:Bx5x10"],
            counts={**_ONE, "Add": 0},
        ),
        _lin(
            "linen_mha_qkv_inputs",
            _mha(qkv_features=8, num_heads=2),
            [(2, 5, 16), (2, 7, 6), (2, 7, 3)],
            [("B", 5, 16), ("B", 7, 6), ("B", 7, 3)],
            expect=["MatMul -> Add -> Attention -> MatMul -> Add:Bx5x16"],
            counts=_ONE,
        ),
        _lin(
            "linen_mha_bool_mask",
            _mha(),
            _INIT,
            [("B", 6, 16), ("B", 1, 6, 6)],
            dtypes=_BOOL_2ND,
            wrap=_calling(lambda m, x, k: m(x, mask=k)),
            expect=["Where -> Attention"],
            counts=_ONE,
        ),
        _lin("linen_mha_causal_mask", _mha(), _INIT, _X, wrap=_calling(_causal), counts=_ONE),
        _lin(
            "linen_mha_normalize_qk",
            _mha(normalize_qk=True),
            _INIT,
            _X,
            expect=["MatMul -> Add -> Reshape -> LayerNormalization -> Reshape -> Attention"],
            counts={**_ONE, "LayerNormalization": 2},
        ),
        _lin(  # an inference-mode export: deterministic pinned, no Dropout
            "linen_mha_dropout_pinned",
            _mha(dropout_rate=0.1),
            _INIT,
            _X,
            init_kwargs={"deterministic": True},
            expect=[_GRAPH],
            counts={**_ONE, "Dropout": 0},
        ),
        _lin(
            "linen_mha_dropout_deterministic_call",
            _mha(dropout_rate=0.1),
            _INIT,
            _X,
            init_kwargs={"deterministic": True},
            wrap=_Deterministic.wrap,
            expect=[_GRAPH],
            counts={**_ONE, "Dropout": 0},
        ),
        _lin(
            "linen_mha_apply_lambda",
            _mha(out_features=8),
            _INIT,
            _X,
            wrap=via_apply,
            expect=["MatMul -> Add -> Attention -> MatMul -> Add:Bx6x8"],
            counts=_ONE,
        ),
        _lin("linen_mha_batch_dims", _mha(), [(2, 2, 6, 16)], [(2, "B", 6, 16)], counts=_ONE),
        _lin("linen_mha_unbatched", _mha(), [(6, 16)], [(6, 16)], counts=_ONE),
        _lin("linen_mha_alias", _mha("MultiHeadAttention"), _INIT, _X, expect=[_GRAPH]),
        _lin("linen_self_attention", _mha("SelfAttention"), _INIT, _X, expect=[_GRAPH]),
        _lin(
            "linen_mha_opset21",
            _mha(),
            _INIT,
            [("B", 6, 16), ("B", 1, 6, 6)],
            dtypes=_BOOL_2ND,
            wrap=_calling(lambda m, x, k: m(x, mask=k)),
            opset=21,
            expect=["MatMul -> Reshape -> Where -> Softmax"],
            counts={"Attention": 0, "Softmax": 1},
        ),
        _lin(
            "linen_mha_vmap",
            _mha(),
            _INIT,
            [("B", 2, 6, 16), ("B", 2, 4, 6, 6)],
            dtypes=_BOOL_2ND,
            wrap=lambda bound: jax.vmap(lambda x, k: bound(x, mask=k)),
            counts=_ONE,
        ),
        _lin(  # Flax's method (its DenseGenerals are stand-ins); the cache is an output
            "linen_mha_decode_step",
            _mha(decode=True),
            [(2, 4, 16)],
            [(2, 1, 16)],
            wrap=_decode_step,
            variants=["f32"],  # Flax's float32 cache takes no float64 keys
            counts={"Einsum": 4, "Attention": 1},  # the constant decode mask is causal: fused
        ),
        _lin(
            "linen_mha_grad",
            _mha(),
            _INIT,
            [(2, 6, 16)],
            wrap=_calling(lambda m, x: jax.grad(lambda x: _causal(m, x).sum())(x)),
        ),
    ],
)


# -- nn.dot_product_attention (the function) ------------------------------------------------


def _dpa_module(nn):
    """A Linen block with its own projections calling ``nn.dot_product_attention``."""

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            q, k, v = (nn.DenseGeneral((2, 4), name=n)(x) for n in "qkv")
            mask = nn.make_causal_mask(x[..., 0])
            y = nn.dot_product_attention(q, k, v, mask=mask, dropout_rate=0.1, deterministic=True)
            return nn.DenseGeneral(8, axis=(-2, -1), name="out")(y)

    return Block()


def _dpa_function():
    from flax import linen as nn

    return lambda q, k, v, b: nn.dot_product_attention(q, k, v, bias=b)


family.add_cases(
    dpa_p,
    lambda: [
        _lin(
            "linen_dpa_in_module",
            _dpa_module,
            [(2, 6, 8)],
            [("B", 6, 8)],
            expect=["Einsum -> Add -> Reshape -> Attention -> Reshape -> Einsum -> Add:Bx6x8"],
            counts={"Attention": 1, "Softmax": 0},
        ),
        case(
            "linen_dpa_function_bias",
            _dpa_function,
            [("B", 5, 2, 4), ("B", 6, 2, 4), ("B", 6, 2, 4), (1, 2, 5, 6)],
            factory=True,
            expect=["Attention -> Reshape:Bx5x2x4"],
            counts={"Attention": 1, "Softmax": 0},
        ),
    ],
)
