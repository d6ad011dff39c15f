"""``MergeBodyDuplicatesPass``: equal subexpressions merge inside Loop and If bodies too.

onnx_ir's common-subexpression pass works on the main graph only. A loop body
runs once per step, so a duplicate there costs a node run per step: the same
index wrap-around computed for two ``dynamic_slice``s of one counter, the same
Slice of a carried state read twice. This pass merges them in every nested
graph (Loop, Scan and If bodies, at any depth, in the main graph and in ONNX
functions): a node whose op, attributes and input values equal an earlier
node's in the same graph is dropped and its readers read the earlier node's
outputs. Nodes holding graphs, random ops, large tensor attributes and nodes
whose outputs are outputs of their graph are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from jax2onnx.values.ir import ir

_RANDOM = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial"}
)
_TENSOR_LIMIT = 16  # elements of a tensor attribute compared by value


class MergeBodyDuplicatesPass(ir.passes.InPlacePass):
    """Merge equal nodes within each nested graph (see the module docstring)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for root in [model.graph, *(f.graph for f in model.functions.values())]:
            for graph in nested_graphs(root):
                modified |= _merge(graph)
        return ir.passes.PassResult(model, modified=modified)


def nested_graphs(graph: ir.Graph) -> Iterator[ir.Graph]:
    """Every graph nested in ``graph`` (Loop, Scan and If bodies), at any depth."""
    for node in graph:
        for sub in subgraphs(node):
            yield sub
            yield from nested_graphs(sub)


def subgraphs(node: ir.Node) -> list[ir.Graph]:
    """The graphs ``node`` holds (a Loop's or Scan's body, an If's branches)."""
    found: list[ir.Graph] = []
    for attribute in node.attributes.values():
        if attribute.type is ir.AttributeType.GRAPH:
            found.append(attribute.value)
        elif attribute.type is ir.AttributeType.GRAPHS:
            found.extend(attribute.value)
    return found


def innermost_first_in(model: ir.Model, visit: Callable[[ir.Graph, ir.Node], bool]) -> bool:
    """:func:`innermost_first` over the main graph and every function's graph."""
    modified = False
    for root in [model.graph, *(f.graph for f in model.functions.values())]:
        modified |= innermost_first(root, visit)
    return modified


def innermost_first(graph: ir.Graph, visit: Callable[[ir.Graph, ir.Node], bool]) -> bool:
    """``visit(g, node)`` for every node of ``graph`` and of the graphs in it, a node's
    own graphs before the node (inner loops first); whether any visit changed something."""
    modified = False
    for node in list(graph):
        for sub in subgraphs(node):
            modified |= innermost_first(sub, visit)
        if node.graph is graph:  # not removed by a visit of an earlier node
            modified |= visit(graph, node)
    return modified


def _key(node: ir.Node) -> Any:
    if node.op_type in _RANDOM and node.domain in ("", "ai.onnx"):
        return None
    attributes = []
    for name, attribute in sorted(node.attributes.items()):
        value = attribute.value
        if attribute.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
            return None
        if attribute.type in (
            ir.AttributeType.INTS,
            ir.AttributeType.FLOATS,
            ir.AttributeType.STRINGS,
        ):
            value = tuple(value)
        elif attribute.type is ir.AttributeType.TENSOR:
            if value.size > _TENSOR_LIMIT:
                return None
            array = value.numpy()
            value = (array.shape, str(array.dtype), array.tobytes())
        attributes.append((name, value))
    inputs = tuple(None if v is None else id(v) for v in node.inputs)
    return (node.domain, node.op_type, node.overload, len(node.outputs), inputs, tuple(attributes))


def _merge(graph: ir.Graph) -> bool:
    seen: dict[Any, ir.Node] = {}
    modified = False
    for node in list(graph):
        key = _key(node)
        if key is None:
            continue
        first = seen.setdefault(key, node)
        if first is node or any(out.is_graph_output() for out in node.outputs):
            continue
        for duplicate, kept in zip(node.outputs, first.outputs, strict=True):
            if kept.shape is None:
                kept.shape = duplicate.shape
            if kept.type is None:
                kept.type = duplicate.type
            ir.convenience.replace_all_uses_with(duplicate, kept)
        graph.remove(node, safe=True)
        modified = True
    return modified


def drop_unused_initializers(model: ir.Model) -> None:
    """Initializers that nothing reads any more, of the main graph (a body now holds its
    own copy, after onnx_ir's unused-node removal ran) and of Loop/Scan/If bodies (a
    rewrite in the body made a constant, a later one made it unneeded), which onnx_ir
    does not clear: ONNX Runtime warns about them. A read by a node no graph holds any
    more (a body a pass wrote out, whose old nodes still point at their operands) is
    no read."""
    graphs = [model.graph, *nested_graphs(model.graph)]
    held = {id(node) for graph in graphs for node in graph}
    for graph in graphs:
        outputs = set(map(id, graph.outputs))
        for name, value in list(graph.initializers.items()):
            read = any(id(use.node) in held for use in value.uses())
            if not read and id(value) not in outputs and not value.is_graph_input():
                del graph.initializers[name]


class UniqueNamesPass(ir.passes.InPlacePass):
    """Every value of the model gets a name no other value has, in any graph.

    ONNX Runtime wants a Loop or If body's names distinct from those of the
    graphs around it. onnx_ir's ``NameFixPass`` names values graph by graph as
    it walks them and forgets a body's names when it leaves the body, so a
    value of the enclosing graph named after the body was walked (one a pass
    named ``val_6`` before) can repeat a name the body took. This pass names
    first: the main graph's inputs and outputs keep theirs, every other value
    without a name or with a name taken gets a fresh one.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        main = model.graph
        taken = {v.name for v in [*main.inputs, *main.outputs] if v.name}
        fixed = {id(v) for v in [*main.inputs, *main.outputs]}
        modified = False
        counter = 0
        for graph in [main, *nested_graphs(main)]:
            values = [*graph.inputs, *graph.initializers.values()]
            values += [out for node in graph for out in node.outputs]
            for value in values:
                if id(value) in fixed:
                    continue
                fixed.add(id(value))
                if value.name and value.name not in taken:
                    taken.add(value.name)
                    continue
                base = value.name or "v"
                while f"{base}_{counter}" in taken:
                    counter += 1
                old, value.name = value.name, f"{base}_{counter}"
                taken.add(value.name)
                if value.const_value is not None and old in graph.initializers:
                    graph.initializers.pop(old)  # re-keyed under the new name
                    graph.register_initializer(value)
                modified = True
        return ir.passes.PassResult(model, modified=modified)
