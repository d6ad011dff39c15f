"""jax2onnx: convert JAX functions and models to ONNX.

The installed plugins (entry points of group ``jax2onnx``) load on first use:
the first ``to_onnx`` or ``plugins()`` call. Loading them while ``jax2onnx``
itself imports would re-enter a plugin package that imported
``jax2onnx.plugin`` first. Nothing here imports Flax, Equinox or ONNX Runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jax2onnx.checking.validation import allclose, allclose_onnxruntime_web
from jax2onnx.conversion.functions import onnx_function
from jax2onnx.frontend.api import convert, to_onnx, traced_callable
from jax2onnx.frontend.loading import PluginSet, plugins
from jax2onnx.values.version import __version__

if TYPE_CHECKING:
    from jax2onnx.checking.divergence import VerifyReport
    from jax2onnx.checking.verification import verify

_LAZY = {"verify": "jax2onnx.checking.verification", "VerifyReport": "jax2onnx.checking.divergence"}


def __getattr__(name: str):  # verify loads on first use: import jax2onnx stays lean
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jax2onnx' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "PluginSet",
    "__version__",
    "allclose",
    "allclose_onnxruntime_web",
    "convert",
    "onnx_function",
    "plugins",
    "to_onnx",
    "traced_callable",
    "verify",
    "VerifyReport",
]
