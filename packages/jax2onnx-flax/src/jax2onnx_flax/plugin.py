"""jax2onnx-flax: Flax NNX and Linen modules.

``jax2onnx_prepare`` turns an ``nnx.Module`` (or a bound method of one), a
bound Linen module or an ``nnx.bridge.ToNNX`` into a pure function over its
state in inference mode, as does a plain function reaching NNX modules
through its closure or its global names (see :mod:`jax2onnx_flax.prepare`,
:mod:`jax2onnx_flax.reach` and :mod:`jax2onnx_flax.linen`); the family
modules intercept NNX modules by attribute and Linen layers through Flax's
own method interceptor
(``Linear``/``Dense`` -> Gemm, ``LayerNorm`` -> LayerNormalization,
``MultiHeadAttention`` -> Attention ...).
Importing this module never imports Flax: the hook looks at ``sys.modules``
first, since an object cannot be a Flax module unless Flax is loaded.
"""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Any

from jax2onnx.plugin import PrepareConfig, Prepared, Rules, hookimpl
from jax2onnx_flax import linen

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
    "pooling",
    "bridge",
    "linen_linear",
    "linen_conv",
    "linen_norm",
    "linen_layers",
    "linen_attention",
    "linen_attention_cases",
    "linen_rnn",
    "linen_boxed_cases",
)
# modules of example models and their cases: imported only when the cases are built
CASE_MODULES = {"models": "model_cases", "linen_models": "linen_models"}


@hookimpl
def jax2onnx_rules() -> Rules:
    """A new Rules with every family module's declarations."""
    rules = Rules("flax")
    for name in FAMILIES:
        importlib.import_module(f"{__package__}.{name}").register(rules)
    for component, name in CASE_MODULES.items():
        rules.add_cases(component, functools.partial(_cases_of, name))
    table = linen.declared(FAMILIES, __package__)
    rules.tracing_context(functools.partial(linen.tracing_context, table))
    rules.tracing_context(_refusing_live_updates)
    return rules


def _refusing_live_updates() -> Any:
    """See :func:`jax2onnx_flax.prepare.refusing_live_updates` (``None`` without NNX)."""
    from jax2onnx_flax.prepare import refusing_live_updates

    return refusing_live_updates()


def _cases_of(name: str) -> list:
    """The ``cases()`` of the case module ``name`` (imported now, not while loading)."""
    return importlib.import_module(f"{__package__}.{name}").cases()


@hookimpl
def jax2onnx_prepare(fn: Any, config: PrepareConfig) -> Prepared | None:
    if "flax.linen" in sys.modules:
        bound = linen.as_bound_call(fn)
        if bound is not None:
            return linen.prepare_bound(*bound, config)
    if "flax.nnx" not in sys.modules:
        return None
    from jax2onnx_flax.prepare import as_module_call, prepare_function, prepare_module

    found = as_module_call(fn)
    if found is not None:
        module, method = found
        return prepare_module(module, method, config)
    return prepare_function(fn, config)
