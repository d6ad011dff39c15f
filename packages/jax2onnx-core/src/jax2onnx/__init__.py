"""jax2onnx: convert JAX functions and models to ONNX.

The installed plugins (entry points of group ``jax2onnx``) load on first use:
the first ``to_onnx`` or ``plugins()`` call. Loading them while ``jax2onnx``
itself imports would re-enter a plugin package that imported
``jax2onnx.plugin`` first. Nothing here imports Flax, Equinox or ONNX Runtime.
"""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

try:
    __version__ = version("jax2onnx-core")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

from jax2onnx.api import convert, to_onnx, traced_callable
from jax2onnx.functions import onnx_function
from jax2onnx.loading import PluginSet
from jax2onnx.validation import allclose, allclose_onnxruntime_web

if TYPE_CHECKING:
    from jax2onnx.divergence import VerifyReport
    from jax2onnx.verification import verify

_LAZY = {"verify": "jax2onnx.verification", "VerifyReport": "jax2onnx.divergence"}


def __getattr__(name: str):  # verify loads on first use: import jax2onnx stays lean
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jax2onnx' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


@functools.cache
def plugins() -> PluginSet:
    """The plugin set loaded from the environment (once per process, on first use).

    ``to_onnx`` and the ``jax2onnx`` command line use this set. The
    ``JAX2ONNX_*PLUGIN*`` environment variables (see `PluginSet.load`) are
    read on the first call only.

    Returns:
        The cached `PluginSet`: ``plugins()`` returns the same object every
            time.

    Example:
        ```python
        import jax2onnx

        for plugin in jax2onnx.plugins().plugins:
            print(plugin.name, plugin.distribution, plugin.version)
        ```
    """
    return PluginSet.load()


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
