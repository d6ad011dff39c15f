"""Cases converting the example models of :mod:`jax2onnx_equinox.models` (small configs).

Equinox models take one example; every case maps them over a symbolic batch ``"B"``
(``jax.vmap``, ``eqx.filter_vmap``). The models are built in training mode (Equinox's
default: ``Dropout`` active, ``BatchNorm`` updating its statistics) and exported as
they are: the export uses inference-mode copies, and the testkit compares with those.

The plugin imports this module only when its cases are built (see ``plugin.py``).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jax2onnx.plugin import case
from jax2onnx_equinox import models

_SEQ = 8  # GPT tokens
_MOE_TOKENS = 5

# Equinox's Conv refuses a float64 input with float32 weights, and ONNX Runtime has no
# float64 Conv or AveragePool: the conv models' cases show the float32 graph (the conv
# family's cases cover float64).
_F32_ONLY = ["f32"]

# An inference export has no random or dropout ops (an active Dropout would be random).
_NO_RANDOM = {"Dropout": 0, "RandomUniform": 0, "RandomUniformLike": 0, "Bernoulli": 0}


def _floats(*shape: int) -> np.ndarray:
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32)


def _mlp_vmapped() -> Any:
    return jax.vmap(models.mlp())


def _mlp_filter_vmap() -> Any:
    import equinox as eqx

    return eqx.filter_vmap(models.mlp())


def _mlp_grad() -> Any:
    model = models.mlp()
    return jax.grad(lambda x: (jax.vmap(model)(x) ** 2).sum())


def _cnn() -> tuple[Any, Any]:
    """``(batched model, state)`` after one training-mode pass: statistics off (0, 1)."""
    model, state = models.cnn()
    config = models.CNNConfig()
    images = 1.0 + 2.0 * _floats(4, config.channels, config.image, config.image)
    _, state = models.batched(model)(images, state)
    return models.batched(model), state


def _vit() -> Any:
    return jax.vmap(models.vit())


def _gpt() -> Any:
    return jax.vmap(models.gpt())


def _gpt_mha() -> Any:
    """Equinox's documented RoPE pattern: ``MultiheadAttention(process_heads=...)``."""
    return jax.vmap(models.gpt(models.GPTConfig(depth=1, tied=False, fused=False)))


def _moe() -> Any:
    return jax.vmap(models.moe())


def _neural_ode() -> Any:
    return jax.vmap(models.neural_ode())


_MLP = models.MLPConfig()
_CNN = models.CNNConfig()
_VIT = models.ViTConfig()
_GPT = models.GPTConfig()
_MOE = models.MoEConfig()
_ODE = models.NeuralODEConfig()


def cases() -> list:
    """The cases of every example model, filed under ``"models"``."""
    return [
        case(
            "model_mlp",
            _mlp_vmapped,
            [("B", _MLP.in_features)],
            factory=True,
            expect=[
                f"Gemm:Bx{_MLP.hidden}",
                f"Gemm:Bx{_MLP.out_features} -> LayerNormalization:Bx{_MLP.out_features}",
            ],
            counts={"Gemm": 2, "LayerNormalization": 1, **_NO_RANDOM},
        ),
        case(
            "model_mlp_filter_vmap",
            _mlp_filter_vmap,
            [("B", _MLP.in_features)],
            factory=True,
            expect=[f"Gemm:Bx{_MLP.out_features} -> LayerNormalization:Bx{_MLP.out_features}"],
            counts={"Gemm": 2, "LayerNormalization": 1, **_NO_RANDOM},
        ),
        case(
            "model_mlp_grad",
            _mlp_grad,
            [("B", _MLP.in_features)],
            factory=True,
            counts=_NO_RANDOM,
        ),
        case(
            "model_cnn",
            _cnn,
            [("B", _CNN.channels, _CNN.image, _CNN.image)],
            factory=True,
            expect=[
                "Conv -> Relu -> MaxPool",
                "Conv -> Relu -> AveragePool",  # the inference BatchNorm folds into the Conv
                f"Gemm:Bx{_CNN.classes}",
            ],
            # MaxPool twice: the NaN-exact max pool of the lax plugin
            counts={
                "Conv": 2,
                "MaxPool": 2,
                "AveragePool": 1,
                "BatchNormalization": 0,
                "Gemm": 1,
                "Transpose": 0,
                **_NO_RANDOM,
            },
            variants=_F32_ONLY,
        ),
        case(
            "model_vit",
            _vit,
            [("B", _VIT.channels, _VIT.image, _VIT.image)],
            factory=True,
            expect=[f"LayerNormalization:Bx{_VIT.dim} -> Gemm:Bx{_VIT.classes}"],
            counts={
                "Conv": 1,
                "Attention": _VIT.depth,
                "LayerNormalization": 2 * _VIT.depth + 1,
                **_NO_RANDOM,
            },
            variants=_F32_ONLY,
        ),
        case(
            "model_gpt",
            _gpt,
            [("B", _SEQ)],
            dtypes=[np.int32],
            input_range=(0, _GPT.vocab),
            variants=["f32", "f64"],
            factory=True,
            expect=[f"Gather:Bx{_SEQ}x{_GPT.dim}"],
            counts={
                "Attention": _GPT.depth,
                "RMSNormalization": 2 * _GPT.depth + 1,
                "Gather": 1,
                "Softmax": 0,
                **_NO_RANDOM,
            },
        ),
        case(
            "model_gpt_mha",
            _gpt_mha,
            [("B", _SEQ)],
            dtypes=[np.int32],
            input_range=(0, _GPT.vocab),
            variants=["f32"],
            factory=True,
            counts={"RMSNormalization": 3, "Gather": 1, **_NO_RANDOM},
        ),
        case(
            "model_moe",
            _moe,
            [("B", _MOE_TOKENS, _MOE.dim)],
            factory=True,
            # one TopK routes in float32; a float64 key sorts in three stable TopK passes
            # (NaN flag, value, sign of zero: see jax2onnx_lax.sort)
            expect=["TopK", f"LayerNormalization:Bx{_MOE_TOKENS}x{_MOE.dim}"],
            counts={"LayerNormalization": 1, **_NO_RANDOM},
        ),
        case(
            "model_neural_ode",
            _neural_ode,
            [("B", _ODE.size)],
            factory=True,
            counts=_NO_RANDOM,
        ),
    ]
