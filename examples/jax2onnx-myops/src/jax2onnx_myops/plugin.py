"""Entry point of jax2onnx-myops (``[project.entry-points.jax2onnx] myops``)."""

from __future__ import annotations

from jax2onnx.plugin import Rules, hookimpl

from jax2onnx_myops import lowerings, ops


@hookimpl
def jax2onnx_rules() -> Rules:
    """A new Rules with the primitives (``ops``) and their lowerings (``lowerings``)."""
    rules = Rules("myops")
    ops.register(rules)
    lowerings.register(rules)
    return rules
