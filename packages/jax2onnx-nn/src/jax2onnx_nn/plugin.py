"""jax2onnx-nn: ``jax.nn`` as macro primitives.

Each intercepted ``jax.nn`` function binds one macro primitive while
``to_onnx`` traces, so the exported graph holds the single ONNX op a human
would write (``Gelu``, ``Softmax`` ...). Every macro primitive has a batching
rule and (where differentiable) a JVP rule, so ``jax.vmap`` and ``jax.grad``
convert too.
"""

from __future__ import annotations

from jax2onnx.plugin import Rules, hookimpl
from jax2onnx_nn import activations, attention, reductions, scaled, softmax  # noqa: F401 - importing a family module registers its rules
from jax2onnx_nn._rules import rules


@hookimpl
def jax2onnx_rules() -> Rules:
    return rules
