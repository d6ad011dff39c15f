"""jax2onnx-equinox: Equinox modules, their state and Equinox's own primitives.

``jax2onnx_prepare`` turns an ``eqx.Module`` (a layer, a model, a bound method,
an ``eqx.filter_jit``/``filter_vmap`` wrapper, an ``eqx.Partial``), a
``(model, state)`` pair or a function closing over modules into a pure
function over an inference-mode copy (see :mod:`jax2onnx_equinox.prepare`).
The family modules lower the primitives of ``equinox.internal`` (what
``eqx.internal.while_loop``, ``eqx.error_if`` and every diffrax solve bind) and
intercept ``eqx.nn`` layers as macro primitives (``Linear`` -> Gemm,
``LayerNorm`` -> LayerNormalization, ``MultiheadAttention`` -> Attention ...).
Importing this module never imports Equinox: the hook looks at ``sys.modules``
first, since an object cannot be an Equinox module unless Equinox is loaded.
"""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Any

from jax2onnx.plugin import PrepareConfig, Prepared, Rules, hookimpl

# the family modules; _manifest.py (`jax2onnx manifest PLUGIN`) says what each declares
FAMILIES = (
    "internal",
    "errors",
    "linear",
    "conv",
    "pooling",
    "layers",
    "norm",
    "attention",
    "rnn",
)
# modules of example models and their cases: imported only when the cases are built
CASE_MODULES = {"models": "model_cases"}


@hookimpl
def jax2onnx_rules() -> Rules:
    """A new Rules with every family module's declarations."""
    rules = Rules("equinox", libraries=("equinox",))
    from jax2onnx_equinox._manifest import MANIFEST

    rules.defer(MANIFEST)  # each family module is imported when a conversion needs it
    for component, name in CASE_MODULES.items():
        rules.add_cases(component, functools.partial(_cases_of, name))
    return rules


def _cases_of(name: str) -> list:
    """The ``cases()`` of the case module ``name`` (imported now, not while loading)."""
    return importlib.import_module(f"{__package__}.{name}").cases()


@hookimpl
def jax2onnx_prepare(fn: Any, config: PrepareConfig) -> Prepared | None:
    if "equinox" not in sys.modules:
        return None
    from jax2onnx_equinox.prepare import prepare

    return prepare(fn, config)
