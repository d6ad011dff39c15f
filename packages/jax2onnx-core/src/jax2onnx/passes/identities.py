"""``EliminateIdentitiesPass``: Identity nodes go where another value can take their place."""

from __future__ import annotations

from jax2onnx.values.ir import ir


class EliminateIdentitiesPass(ir.passes.InPlacePass):
    """``y = Identity(x)`` goes: readers of ``y`` read ``x``; a graph output ``y`` is ``x`` renamed.

    An Identity whose ``y`` is a graph output stays when ``x`` cannot take
    its place: ``x`` is already an output (a branch returning one value twice;
    onnx_ir's pass lists it twice and ONNX Runtime then returns wrong numbers
    from an ``If``), an input, an initializer, or a value of an enclosing graph.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        graphs = [model.graph, *model.functions.values()]
        for root in graphs:
            for node in list(ir.traversal.RecursiveGraphIterator(root)):
                modified |= self._eliminate(node)
        return ir.passes.PassResult(model, modified=modified)

    @staticmethod
    def _eliminate(node: ir.Node) -> bool:
        if node.op_type != "Identity" or node.domain not in ("", "ai.onnx"):
            return False
        if len(node.inputs) != 1 or len(node.outputs) != 1 or node.inputs[0] is None:
            return False
        (x,), (y,) = node.inputs, node.outputs
        graph = node.graph
        if y.is_graph_output():
            producer = x.producer()
            if producer is None or producer.graph is not graph or x.is_graph_output():
                return False
        if x.shape is None:
            x.shape = y.shape
        if x.type is None:
            x.type = y.type
        name = y.name
        ir.convenience.replace_all_uses_with(y, x, replace_graph_outputs=True)
        if x.is_graph_output():
            x.name = name
        graph.remove(node, safe=True)
        return True
