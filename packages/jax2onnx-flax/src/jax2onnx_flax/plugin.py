"""jax2onnx-flax: Flax NNX and Linen modules.

This release registers the plugin and its (still empty) rule set; module
preparation and module interceptions land with the NNX work. Plain functions
that close over NNX modules already convert through the lax lowerings.
"""

from __future__ import annotations

from jax2onnx.plugin import Rules, hookimpl

rules = Rules("flax")


@hookimpl
def jax2onnx_rules() -> Rules:
    return rules
