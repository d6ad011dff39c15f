"""jax2onnx-nn: ``jax.nn`` as macro primitives.

This release registers the plugin and its (still empty) rule set; the
activations, softmax family and attention land as macro primitives with
batching and JVP rules. Until then ``jax.nn`` functions convert through their
``jax.lax`` decomposition, lowered by jax2onnx-lax.
"""

from __future__ import annotations

from jax2onnx.plugin import Rules, hookimpl

rules = Rules("nn")


@hookimpl
def jax2onnx_rules() -> Rules:
    return rules
