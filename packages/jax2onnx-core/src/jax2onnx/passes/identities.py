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


def _own_constant(graph: ir.Graph, position: int) -> bool:
    """Output ``position`` of a body or branch, an Identity of an initializer (of an
    enclosing graph), becomes an initializer of the graph itself: no copy per step."""
    out = graph.outputs[position]
    node = out.producer()
    if node is None or node.op_type != "Identity" or node.domain not in ("", "ai.onnx"):
        return False
    source = node.inputs[0] if len(node.inputs) == 1 else None
    if source is None or source.const_value is None or source.is_graph_input():
        return False
    if len(out.uses()) != 0 or sum(v is out for v in graph.outputs) != 1:
        return False
    name = out.name
    kind = out.type or source.type
    copy = ir.Value(type=kind, shape=source.shape, const_value=source.const_value)
    graph.outputs[position] = copy
    graph.remove(node, safe=True)
    copy.name = name
    graph.register_initializer(copy)
    return True


class ForwardLoopCarriesPass(ir.passes.InPlacePass):
    """A Loop body returns a carry or its condition as the body input it copies, not
    through an ``Identity`` (a carry shifted into another, the condition passed on).

    Only the condition and the carried outputs: ONNX Runtime aliases a body input
    returned as a scan output, so every step's slot would hold the last step's value,
    and those Identities stay. So do Identities of values of enclosing graphs (the
    checker wants a body's outputs computed or input there) and of an input the body
    already returns elsewhere (one name, one output). A carry that is a constant (a
    reset counter, a flag set again each step), and an If branch's output that is
    one, becomes a constant of the body or branch. ONNX Runtime
    runs each Identity as a copy per step; without it the step is faster.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for root in [model.graph, *model.functions.values()]:
            for node in list(ir.traversal.RecursiveGraphIterator(root)):
                if node.op_type == "Loop" and node.domain in ("", "ai.onnx"):
                    modified |= self._forward(node)
                if node.op_type == "If" and node.domain in ("", "ai.onnx"):
                    for name in ("then_branch", "else_branch"):
                        branch = node.attributes.get(name)
                        if branch is not None:
                            graph = branch.as_graph()
                            for position in range(len(graph.outputs)):
                                modified |= _own_constant(graph, position)
        return ir.passes.PassResult(model, modified=modified)

    @staticmethod
    def _forward(loop: ir.Node) -> bool:
        attribute = loop.attributes.get("body")
        if attribute is None:
            return False
        body = attribute.as_graph()
        carried = 1 + len(loop.inputs) - 2  # the condition, then the carries
        modified = False
        for position in range(min(carried, len(body.outputs))):
            out = body.outputs[position]
            node = out.producer()
            if node is None or node.op_type != "Identity" or node.domain not in ("", "ai.onnx"):
                continue
            source = node.inputs[0] if len(node.inputs) == 1 else None
            if _own_constant(body, position):  # a constant carry (a reset counter)
                modified = True
                continue
            if source is None or not source.is_graph_input() or source not in body.inputs:
                continue
            if source.is_graph_output() or len(out.uses()) != 0:
                continue
            if source.type is None:
                source.type = out.type
            body.outputs[position] = source
            body.remove(node, safe=True)
            modified = True
        return modified
