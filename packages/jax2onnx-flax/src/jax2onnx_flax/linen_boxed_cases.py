"""Cases: every Linen stand-in on a layer whose parameters are boxed.

Code written for sharding (Flax's lm1b and wmt examples, T5X, MaxText) wraps
its initializers in ``nn.with_logical_partitioning(init, names)`` (or
``nn.with_partitioning``): the variables then hold ``nn.LogicallyPartitioned``
(``nn.Partitioned``) boxes around the arrays, and ``module.param`` gives the
layer the bare arrays. The stand-ins must see the same: each case here is an
existing layer configuration with every parameter boxed, converted as the
same layer unboxed (same graph, JAX's numbers). The lm1b-style block is
among the example models (:mod:`jax2onnx_flax.linen_models`).

Importing this module never imports Flax: the layers are built by the case
factories (``build(nn)``).
"""

from __future__ import annotations

import jax
import numpy as np

from jax2onnx.plugin import Family, case
from jax2onnx_flax._util import linen_factory, via_apply
from jax2onnx_flax.attention import mha_p
from jax2onnx_flax.conv import conv_p
from jax2onnx_flax.conv_transpose import conv_transpose_p
from jax2onnx_flax.einsum import einsum_p
from jax2onnx_flax.embed import attend_p, embed_p
from jax2onnx_flax.layer_norm import layer_norm_p, rms_norm_p
from jax2onnx_flax.linear import linear_general_p, linear_p
from jax2onnx_flax.norm import batch_norm_p, group_norm_p

family = Family("flax")
register = family.register

LINEN = ()


def _boxed(nn, init, *names):
    """``init`` storing ``nn.LogicallyPartitioned`` boxes (logical axis ``names``)."""
    return nn.with_logical_partitioning(init, names)


def _kernel(nn, *names):
    return _boxed(nn, nn.initializers.lecun_normal(), *names)


def _bias(nn, *names):
    # nonzero: a bias read as zeros (or not at all) would not match
    return _boxed(nn, nn.initializers.normal(0.5), *names)


def _scale(nn, *names):
    return _boxed(nn, nn.initializers.ones, *names)


def _norm(kind, names=("embed",), **options):
    """``nn.<kind>`` with its scale and bias boxed (``use_bias`` where the layer has one)."""

    def build(nn):
        inits = {"scale_init": _scale(nn, *names)}
        if kind != "RMSNorm":
            inits["bias_init"] = _bias(nn, *names)
        return getattr(nn, kind)(**inits, **options)

    return build


def _partitioned_norm(nn):
    """``nn.with_partitioning`` (mesh axes, ``nn.Partitioned`` boxes) instead of logical names."""
    ones, normal = nn.initializers.ones, nn.initializers.normal(0.5)
    return nn.LayerNorm(
        scale_init=nn.with_partitioning(ones, (None,)),
        bias_init=nn.with_partitioning(normal, (None,)),
    )


def _dense(nn):
    return nn.Dense(5, kernel_init=_kernel(nn, "embed", "mlp"), bias_init=_bias(nn, "mlp"))


def _dense_general(nn):
    return nn.DenseGeneral(
        (2, 3),
        kernel_init=_kernel(nn, "embed", "heads", "kv"),
        bias_init=_bias(nn, "heads", "kv"),
    )


def _einsum(nn):
    return nn.Einsum(
        (3, 4, 5),
        "btd,dhk->bthk",
        kernel_init=_kernel(nn, "embed", "heads", "kv"),
        bias_init=_bias(nn, "heads", "kv"),
    )


def _conv(nn):
    return nn.Conv(
        4,
        (3, 3),
        kernel_init=_kernel(nn, "height", "width", "embed", "mlp"),
        bias_init=_bias(nn, "mlp"),
    )


def _conv_transpose(nn):
    return nn.ConvTranspose(
        3,
        (3, 3),
        strides=(2, 2),
        kernel_init=_kernel(nn, "height", "width", "embed", "mlp"),
        bias_init=_bias(nn, "mlp"),
    )


def _embed(nn):
    init = _boxed(nn, nn.initializers.normal(1.0), "vocab", "embed")
    return nn.Embed(num_embeddings=6, features=4, embedding_init=init)


def _attention(nn):
    """lm1b's attention: boxed kernels and biases, and the query/key LayerNorms (boxed
    scales through the layer's own ``LayerNorm``s)."""
    return nn.MultiHeadDotProductAttention(
        num_heads=2,
        qkv_features=8,
        kernel_init=_kernel(nn, "embed", "heads", "kv"),
        bias_init=_bias(nn, "heads", "kv"),
        normalize_qk=True,
    )


def _cell(kind):
    def build(nn):
        return nn.RNN(
            getattr(nn, kind)(
                5,
                kernel_init=_kernel(nn, "embed", "mlp"),
                recurrent_kernel_init=_kernel(nn, "mlp", "mlp"),
                bias_init=_bias(nn, "mlp"),
            )
        )

    return build


def _lin(name, build, init, inputs, **kw):
    """A case of ``build(nn)`` initialised on ones of ``init`` (shapes), bound or wrapped."""
    wrap, init_kwargs = kw.pop("wrap", None), kw.pop("init_kwargs", None)
    make = linen_factory(build, *init, wrap=wrap, init_kwargs=init_kwargs)
    return case(name, make, inputs, factory=True, **kw)


def _attend(bound):
    return bound.attend


_B6 = [("B", 6)]
_LN, _RMS, _GN = "LayerNormalization", "RMSNormalization", "GroupNormalization"
_RUNNING = {"use_running_average": True}
_CELL = {"variants": ["f32"]}  # a float32 cell's carry: Flax itself refuses float64 inputs

family.add_cases(
    layer_norm_p,
    lambda: [
        _lin("linen_boxed_layer_norm", _norm("LayerNorm"), [(2, 6)], _B6, expect=[f"{_LN}:Bx6"]),
        _lin(
            "linen_boxed_layer_norm_bfloat16_params",
            _norm("LayerNorm", param_dtype=jax.numpy.bfloat16),
            [(2, 6)],
            _B6,
            expect=[f"Cast -> Reshape -> {_LN}:Bx6"],
            variants=["f32"],
        ),
        _lin(
            "linen_boxed_layer_norm_apply_lambda",
            _norm("LayerNorm", names=("length", "embed"), reduction_axes=(1, 2)),
            [(2, 3, 4)],
            [("B", 3, 4)],
            wrap=via_apply,
            expect=[f"{_LN}:Bx3x4"],
        ),
        _lin("linen_partitioned_layer_norm", _partitioned_norm, [(2, 6)], _B6, expect=[_LN]),
    ],
)

family.add_cases(
    rms_norm_p,
    lambda: [
        _lin("linen_boxed_rms_norm", _norm("RMSNorm"), [(2, 6)], _B6, expect=[f"{_RMS}:Bx6"]),
    ],
)

family.add_cases(
    group_norm_p,
    lambda: [
        _lin(
            "linen_boxed_group_norm",
            _norm("GroupNorm", num_groups=3),
            [(2, 4, 6)],
            [("B", 4, 6)],
            expect=[_GN],
        ),
    ],
)

family.add_cases(
    batch_norm_p,
    lambda: [
        _lin(
            "linen_boxed_batch_norm",
            _norm("BatchNorm"),
            [(2, 6)],
            _B6,
            init_kwargs=_RUNNING,
            expect=["BatchNormalization:Bx6"],
        ),
    ],
)

family.add_cases(
    linear_p,
    lambda: [
        _lin("linen_boxed_dense", _dense, [(2, 4)], [("B", 4)], expect=["Gemm:Bx5"]),
        _lin(
            "linen_boxed_dense_apply_lambda",
            _dense,
            [(2, 4)],
            [("B", 4)],
            wrap=via_apply,
            expect=["Gemm:Bx5"],
        ),
        _lin("linen_boxed_gru", _cell("GRUCell"), [(2, 3, 4)], [("B", 3, 4)], **_CELL),
        _lin("linen_boxed_lstm", _cell("LSTMCell"), [(2, 3, 4)], [("B", 3, 4)], **_CELL),
    ],
)

family.add_cases(
    linear_general_p,
    lambda: [
        _lin(
            "linen_boxed_dense_general",
            _dense_general,
            [(2, 4)],
            [("B", 4)],
            expect=["Einsum -> Add:Bx2x3"],
        ),
    ],
)

family.add_cases(
    einsum_p,
    lambda: [
        _lin("linen_boxed_einsum", _einsum, [(2, 3, 3)], [("B", 3, 3)], expect=["Add:Bx3x4x5"]),
    ],
)

family.add_cases(
    conv_p,
    lambda: [
        _lin(
            "linen_boxed_conv",
            _conv,
            [(1, 6, 6, 2)],
            [("B", 6, 6, 2)],
            expect=["Transpose -> Conv -> Transpose:Bx6x6x4"],
            variants=["f32"],  # ONNX Runtime has no float64 Conv
        ),
    ],
)

family.add_cases(
    conv_transpose_p,
    lambda: [
        _lin(
            "linen_boxed_conv_transpose",
            _conv_transpose,
            [(1, 4, 4, 2)],
            [("B", 4, 4, 2)],
            expect=["ConvTranspose"],
            variants=["f32"],
        ),
    ],
)

_TOKENS = {"dtypes": [np.int32], "input_range": (0, 6)}

family.add_cases(
    embed_p,
    lambda: [
        # init through attend (a float query): Embed's table is made in setup
        _lin(
            "linen_boxed_embed",
            _embed,
            [(2, 4)],
            [("B", 3)],
            init_kwargs={"method": "attend"},
            expect=["Gather -> Where:Bx3x4"],
            **_TOKENS,
        ),
    ],
)

family.add_cases(
    attend_p,
    lambda: [
        _lin(
            "linen_boxed_attend",
            _embed,
            [(2, 4)],
            [("B", 4)],
            init_kwargs={"method": "attend"},
            wrap=_attend,
            expect=["Gemm:Bx6"],
        ),
    ],
)

family.add_cases(
    mha_p,
    lambda: [
        _lin(
            "linen_boxed_attention",
            _attention,
            [(2, 3, 6)],
            [("B", 3, 6)],
            expect=[f"Reshape -> {_LN} -> Reshape -> Attention"],
            counts={"Attention": 1, _LN: 2},
        ),
    ],
)
