"""jax2onnx-nn: ``jax.nn`` as macro primitives.

Each intercepted ``jax.nn`` function binds one macro primitive while
``to_onnx`` traces, so the exported graph holds the single ONNX op a human
would write (``Gelu``, ``Softmax`` ...). Every macro primitive has a batching
rule and (where differentiable) a JVP rule, so ``jax.vmap`` and ``jax.grad``
convert too.
"""

from __future__ import annotations

from jax2onnx.plugin import Rules, hookimpl

# the family modules; _manifest.py (`jax2onnx manifest PLUGIN`) says what each declares
FAMILIES = (
    "activations",
    "attention",
    "softmax",
    "reductions",
    "scaled",
    "dropout",
)


@hookimpl
def jax2onnx_rules() -> Rules:
    """A new Rules with every family module's declarations."""
    rules = Rules("nn")
    from jax2onnx_nn._manifest import MANIFEST

    rules.defer(MANIFEST)  # each family module is imported when a conversion needs it
    return rules
