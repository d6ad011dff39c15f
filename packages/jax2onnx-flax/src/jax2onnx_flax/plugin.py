"""jax2onnx-flax: Flax NNX modules.

``jax2onnx_prepare`` turns an ``nnx.Module`` (or a bound method of one) into a
pure function over its state in inference mode (see :mod:`jax2onnx_flax.prepare`);
the family modules intercept NNX modules (``Linear`` -> Gemm, ``LayerNorm`` ->
LayerNormalization, ``MultiHeadAttention`` -> Attention ...).
Importing this module never imports Flax: the hook looks at ``sys.modules``
first, since an object cannot be an NNX module unless Flax is loaded.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from jax2onnx.plugin import PrepareConfig, Prepared, Rules, hookimpl

# the family modules, imported by name when the rules are built
FAMILIES = (
    "attention",
    "attention_cases",
    "linear",
    "einsum",
    "conv",
    "conv_transpose",
    "norm",
    "layer_norm",
    "dropout",
    "embed",
    "model_cases",
    "pooling",
)


@hookimpl
def jax2onnx_rules() -> Rules:
    """A new Rules with every family module's declarations."""
    rules = Rules("flax")
    for name in FAMILIES:
        importlib.import_module(f"{__package__}.{name}").register(rules)
    return rules


@hookimpl
def jax2onnx_prepare(fn: Any, config: PrepareConfig) -> Prepared | None:
    if "flax.nnx" not in sys.modules:
        return None
    from jax2onnx_flax.prepare import (
        as_module_call,
        closed_over_modules,
        prepare_closure,
        prepare_module,
    )

    found = as_module_call(fn)
    if found is not None:
        module, method = found
        return prepare_module(module, method, config)
    positions = closed_over_modules(fn)
    if positions:
        return prepare_closure(fn, positions, config)
    return None
