"""Step 5: clean the graph with onnx_ir's own passes.

Identity nodes and unused nodes go, equal subexpressions merge, small equal initializers merge,
unused opset imports go. Every pass is deterministic, so the same input gives
a byte-identical model.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes import common


def optimize(model: ir.Model) -> ir.Model:
    """Run the cleanup passes in place and return the model."""
    passes = ir.passes.Sequential(
        common.IdentityEliminationPass(),
        common.RemoveUnusedNodesPass(),
        common.CommonSubexpressionEliminationPass(),
        common.RemoveUnusedNodesPass(),
        common.DeduplicateInitializersPass(),
        common.RemoveUnusedFunctionsPass(),
        common.RemoveUnusedOpsetsPass(),
    )
    passes(model)
    return model
