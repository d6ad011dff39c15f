"""Step 5: clean the graph with onnx_ir's own passes, plus one of ours.

Identity nodes and unused nodes go, equal subexpressions merge, small equal
initializers merge, unused functions and opset imports go; onnx_ir has all of
these. :class:`FoldTransposesPass` (ours: onnx_ir has none) merges chains of
Transpose nodes, which the NCHW adaptors and layout-changing lowerings create
next to each other. Every pass is deterministic, so the same input gives a
byte-identical model.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes import common


class FoldTransposesPass(ir.passes.InPlacePass):
    """``Transpose(Transpose(x, p1), p2)`` -> ``Transpose(x, p1[p2])``, or ``x`` if identity."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        graph = model.graph
        outputs = {id(v) for v in graph.outputs}
        for node in list(graph):
            if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
                continue
            inner = node.inputs[0].producer() if node.inputs[0] is not None else None
            if inner is None or inner.op_type != "Transpose" or inner.domain not in ("", "ai.onnx"):
                continue
            p1, p2 = _perm(inner), _perm(node)
            if p1 is None or p2 is None:
                continue
            perm = [p1[i] for i in p2]
            source = inner.inputs[0]
            if perm == sorted(perm) and id(node.outputs[0]) not in outputs:
                ir.convenience.replace_all_uses_with(node.outputs[0], source)
            else:
                node.replace_input_with(0, source)
                node.attributes["perm"] = ir.AttrInt64s("perm", perm)
            modified = True
        return ir.passes.PassResult(model, modified)


def _perm(node: ir.Node) -> list[int] | None:
    attr = node.attributes.get("perm")
    return None if attr is None else list(attr.as_ints())


def optimize(model: ir.Model) -> ir.Model:
    """Run the cleanup passes in place and return the model."""
    passes = ir.passes.Sequential(
        common.IdentityEliminationPass(),
        FoldTransposesPass(),
        common.RemoveUnusedNodesPass(),
        common.CommonSubexpressionEliminationPass(),
        common.RemoveUnusedNodesPass(),
        common.DeduplicateInitializersPass(),
        common.RemoveUnusedFunctionsPass(),
        common.RemoveUnusedOpsetsPass(),
    )
    passes(model)
    return model
