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
        return take_place(node, node.inputs[0])


def take_place(node: ir.Node, kept: ir.Value) -> bool:
    """``kept`` takes the place of ``node``'s one output (its readers read ``kept``) and
    ``node`` goes. A graph output passes to ``kept``, under the output's name, only when
    ``kept`` is computed in the same graph and is not an output already; otherwise
    nothing changes and the answer is False. The rewrites that drop a node for one of
    its operands (Identity, canonical forms, decided Wheres) share this."""
    out, graph = node.outputs[0], node.graph
    output = out.is_graph_output()
    if output:
        producer = kept.producer()
        if producer is None or producer.graph is not graph or kept.is_graph_output():
            return False
    if kept.shape is None:  # a rank-0 Shape is falsy: tested against None
        kept.shape = out.shape
    if kept.type is None:
        kept.type = out.type
    name = out.name
    ir.convenience.replace_all_uses_with(out, kept, replace_graph_outputs=True)
    graph.remove(node, safe=True)
    if output:
        kept.name = name
    return True
