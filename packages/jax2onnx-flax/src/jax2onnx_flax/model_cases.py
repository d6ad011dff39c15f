"""Cases converting the example models of :mod:`jax2onnx_flax.models` (small configs).

Each model has an inference-mode case (``model.eval()``) and a ``*_training`` case
that leaves the module in training mode after one training-mode forward pass
(``Dropout`` active, ``BatchNorm`` updating its statistics): export still uses
inference semantics, and the testkit compares with that inference-mode copy.

The plugin imports this module only when its cases are built (see ``plugin.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.plugin import case
from jax2onnx_flax import models

_SRC, _TGT = 6, 5  # encoder and decoder sequence lengths
_SEQ = 8  # GPT-2 tokens


def _with_statistics(model: Any) -> Any:
    """Give every BatchNorm running statistics far from the (0, 1) they start with."""
    from flax import nnx

    rng = np.random.default_rng(0)
    for _, module in nnx.iter_graph(model):
        if isinstance(module, nnx.BatchNorm):
            shape = module.mean[...].shape
            module.mean[...] = rng.normal(0.0, 1.0, shape).astype(np.float32)
            module.var[...] = rng.uniform(0.5, 2.0, shape).astype(np.float32)
    return model


def _trained(model: Any, *inputs: Any) -> Any:
    """One forward pass in training mode (statistics and RNG counts move); stays training."""
    model.train()
    model(*inputs)
    return model


def _inference(model: Any) -> Any:
    model.eval()  # returns None
    return model


def _floats(*shape: int) -> np.ndarray:
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32)


def _mlp() -> Any:
    return _inference(_with_statistics(models.mlp()))


def _mlp_training() -> Any:
    return _trained(_with_statistics(models.mlp()), _floats(4, 30))


def _cnn() -> Any:
    return _inference(models.cnn())


def _cnn_training() -> Any:
    return _trained(models.cnn(), _floats(2, 28, 28, 1))


def _vit() -> Any:
    return _inference(models.vit())


def _vit_training() -> Any:
    return _trained(models.vit(), _floats(2, 32, 32, 3))


def _gpt2() -> Any:
    return _inference(models.gpt2())


def _gpt2_training() -> Any:
    ids = np.random.default_rng(1).integers(0, models.GPTConfig().vocab, (2, _SEQ))
    return _trained(models.gpt2(), ids.astype(np.int32))


def _encoder_decoder() -> Any:
    return _inference(models.encoder_decoder())


def _encoder_decoder_training() -> Any:
    dim = models.EncoderDecoderConfig().dim
    return _trained(models.encoder_decoder(), _floats(2, _SRC, dim), _floats(2, _TGT, dim))


_VOCAB = models.GPTConfig().vocab
_MAX_LEN = models.GPTConfig().max_len
_ED_DIM = models.EncoderDecoderConfig().dim

# Properties that hold in every variant (f32, f64, symbolic batch): no dropout or random
# ops in an inference export (an active nnx.Dropout exports as ONNX Dropout); rank-2
# Linear layers are Gemms; jax.nn.dot_product_attention is one Attention.
_NO_RANDOM = {"Dropout": 0, "RandomUniform": 0, "RandomUniformLike": 0, "Bernoulli": 0}


def _model_cases(name: str, make: Any, make_training: Any, inputs: list, **kwargs: Any) -> list:
    return [
        case(name, make, inputs, factory=True, **kwargs),
        case(f"{name}_training", make_training, inputs, factory=True, **kwargs),
    ]


def cases() -> list:
    """The cases of every example model, filed under ``"models"``."""
    return [
        *_model_cases(
            "mlp",
            _mlp,
            _mlp_training,
            [("B", 30)],
            expect=["Gemm:Bx20", "Gemm:Bx10"],
            counts={"Gemm": 2, **_NO_RANDOM},
        ),
        *_model_cases(
            "cnn",
            _cnn,
            _cnn_training,
            [("B", 28, 28, 1)],
            expect=["Relu:Bx32 -> Gemm:Bx10"],
            counts={"Gemm": 2, "Relu": 3, **_NO_RANDOM},
        ),
        *_model_cases(
            "vit",
            _vit,
            _vit_training,
            [("B", 32, 32, 3)],
            expect=["Gemm:Bx10"],
            counts=_NO_RANDOM,
        ),
        *_model_cases(
            "gpt2",
            _gpt2,
            _gpt2_training,
            [("B", _SEQ)],
            dtypes=[np.int32],
            input_range=(0, _VOCAB),
            variants=["f32", "f64"],
            counts={"Attention": 2, **_NO_RANDOM},
        ),
        case(
            "gpt2_symbolic_sequence",
            _gpt2,
            [("B", "T")],
            dtypes=[np.int32],
            input_range=(0, _VOCAB),
            dim_sizes={"B": (3, 2, 1), "T": (_SEQ, 3, _MAX_LEN)},
            factory=True,
            counts={"Attention": 2, **_NO_RANDOM},
        ),
        *_model_cases(
            "encoder_decoder",
            _encoder_decoder,
            _encoder_decoder_training,
            [("B", _SRC, _ED_DIM), ("B", _TGT, _ED_DIM)],
            counts=_NO_RANDOM,
        ),
    ]
