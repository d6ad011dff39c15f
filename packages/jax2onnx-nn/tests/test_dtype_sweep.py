"""Every ``jax.nn`` function the nn plugin lowers, at every dtype JAX accepts, small and zero-size.

The nn plugin's lowerings are of functions it intercepts while ``to_onnx``
traces (``nn.relu``, ``nn.softmax`` ...), so each probe runs eagerly: a dtype
counts when JAX runs the function on it, and that run is the reference. See
``jax2onnx_lax``'s ``test_dtype_sweep.py`` for the idea and
`jax2onnx_testkit.sweep` for the machinery.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax2onnx_nn._manifest import MANIFEST
from jax2onnx_testkit.sweep import Probe, check_complete, check_sweep

X, X0 = ((2, 3),), ((0, 3),)


def nn(name, fn=None, shapes=X, zero=X0, **kw):
    return Probe(f"nn.{name}", fn or getattr(jax.nn, name), shapes, zero, eager=True, **kw)


def _attention(q, k, v):
    return jax.nn.dot_product_attention(q, k, v)


def _attention_data(rng, shape, dtype, i):
    return rng.uniform(-1, 1, size=shape)


PROBES = [
    *(
        nn(name)
        for name in (
            "celu",
            "elu",
            "gelu",
            "hard_sigmoid",
            "hard_silu",
            "hard_tanh",
            "identity",
            "leaky_relu",
            "log_sigmoid",
            "mish",
            "relu",
            "relu6",
            "selu",
            "sigmoid",
            "silu",
            "soft_sign",
            "softplus",
            "sparse_plus",
            "sparse_sigmoid",
            "squareplus",
        )
    ),  # fmt: skip
    nn("gelu", lambda x: jax.nn.gelu(x, approximate=False), label="exact"),
    nn("glu", lambda x: jax.nn.glu(x, axis=0), shapes=((4, 3),), zero=((4, 0),)),
    nn("log1mexp", lambda x: jax.nn.log1mexp(jnp.abs(x) + 0.1)),
    nn("log_softmax", lambda x: jax.nn.log_softmax(x, axis=-1)),
    nn("softmax", lambda x: jax.nn.softmax(x, axis=-1)),
    nn("logsumexp", lambda x: jax.nn.logsumexp(x, axis=1)),
    nn("logmeanexp", lambda x: jax.nn.logmeanexp(x, axis=1)),
    nn("standardize", lambda x: jax.nn.standardize(x, axis=-1)),
    nn("one_hot", lambda x: jax.nn.one_hot(x, 4), fixed={0: np.int32}),
    nn(
        "one_hot",
        lambda x: jax.nn.one_hot(jnp.zeros((2,), np.int32), 3, dtype=x.dtype),
        label="dtype",
    ),  # fmt: skip
    Probe(
        "nn.dot_product_attention",
        _attention,
        ((1, 3, 2, 4),) * 3,
        ((0, 3, 2, 4),) * 3,
        eager=True,
        data=_attention_data,
        # JAX's softmax runs in float32 whatever the operands (its source says so): a float64
        # result is float32-accurate, and ONNX Runtime's float32 exp is not XLA's to the bit
        tolerances={"float64": (1e-6, 1e-7)},
    ),
]

NOT_SWEPT = {
    "nn.dropout": "a macro layer plugins bind with a runtime flag (its cases cover the dtypes)",
    "nn.scaled_matmul": "float8/e8m0 scales only, at opset >= 26: its cases cover those",
    "scaled_matmul_wrapper": "JAX's primitive behind jax.nn.scaled_matmul (see there)",
}


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_dtype_sweep(probe):
    check_sweep(probe)


def test_every_lowering_is_swept():
    lowered = {name for module in MANIFEST.values() for name in module.get("lowers", ())}
    check_complete(lowered, PROBES, NOT_SWEPT)
