"""The plugin author's API: everything a jax2onnx plugin imports.

.. code-block:: python

    from jax import lax
    from jax2onnx.plugin import Rules, case, hookimpl

    rules = Rules("myops")

    @rules.lowering(lax.tanh_p, cases=[case("tanh", lax.tanh, [(3,)], expect=["Tanh:3"])])
    def tanh(ctx, x, *, accuracy=None):
        return ctx.op.Tanh(x)

    @hookimpl
    def jax2onnx_rules():
        return rules
"""

from typing import TYPE_CHECKING

from jax2onnx.cases import Case, case
from jax2onnx.errors import LoweringError, NonDifferentiableError
from jax2onnx.hookspecs import hookimpl
from jax2onnx.rules import Interception, Lowering, Prepared, Rules

if TYPE_CHECKING:
    from jax2onnx.lowering import LoweringContext, SubgraphBuilder
    from jax2onnx.macro import call_arguments


def __getattr__(name: str):
    if name == "call_arguments":
        from jax2onnx.macro import call_arguments

        return call_arguments
    # the lowering context lives with onnx_ir, which is imported on first use
    if name in ("LoweringContext", "SubgraphBuilder"):
        from jax2onnx import lowering

        return getattr(lowering, name)
    raise AttributeError(f"module 'jax2onnx.plugin' has no attribute {name!r}")


__all__ = [
    "Case",
    "Interception",
    "Lowering",
    "LoweringContext",
    "LoweringError",
    "NonDifferentiableError",
    "Prepared",
    "Rules",
    "SubgraphBuilder",
    "call_arguments",
    "case",
    "hookimpl",
]
