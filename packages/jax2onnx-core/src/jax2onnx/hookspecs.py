"""The whole contract between jax2onnx and its plugins.

A plugin is a module named by an entry point in the group ``jax2onnx``; the
entry point's name is the distribution name without ``jax2onnx-``::

    [project.entry-points.jax2onnx]
    myops = "jax2onnx_myops.plugin"

The module implements one or both hooks below, each marked with
:data:`jax2onnx.plugin.hookimpl`. Importing the module must be cheap: no Flax,
Equinox or ONNX Runtime at top level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from jax2onnx.rules import Rules

PROJECT = "jax2onnx"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def jax2onnx_rules() -> Rules:
    """Return the plugin's :class:`~jax2onnx.plugin.Rules`.

    Called once per plugin when the plugin set loads (at ``import jax2onnx``
    for the default set). Every plugin's result is kept; two plugins lowering
    one primitive is an error unless one of them registered it with
    ``override=True``.
    """


@hookspec(firstresult=True)
def jax2onnx_prepare(fn: Any, config: dict[str, Any]) -> Any:
    """Turn a stateful object into something ``jax.make_jaxpr`` can trace.

    Called by ``to_onnx`` before tracing with the object the user passed and
    a dict of conversion settings (``input_params``, ``opset``,
    ``enable_double_precision``). Return ``None`` when the object is not yours;
    otherwise return a :class:`jax2onnx.plugin.Prepared` (a pure callable
    plus the constants it closes over). The first non-``None`` result wins.
    """
