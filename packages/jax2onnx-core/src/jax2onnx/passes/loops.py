"""``HoistLoopInvariantsPass``: what a Loop body computes the same way every step runs once.

A Loop body runs once per step, so every node in it costs a node run per
step. Two things in a body do not change from step to step:

- **invariant carries**: a carried value the body returns unchanged (the LU
  factors a Newton iteration reuses, a Butcher tableau, a solver's options).
  The carry goes from the Loop: readers inside the body read the Loop's
  initial value through ONNX's outer scope, readers of the Loop's result
  read that initial value too.
- **invariant nodes**: a node whose inputs all come from outside the body
  (the enclosing graphs' values, initializers, invariant carries) or from
  other invariant nodes computes the same result every step. It moves in
  front of the Loop, into the enclosing graph; from there the passes that
  follow fold it when its inputs are constants, and an enclosing Loop's
  pass moves it further out.

Loops nested at any depth are done innermost first, in the main graph and
in ONNX functions. What stays in the body: nodes holding graphs (an If, a
nested Loop), random ops, integer Div and Mod (a step that never runs must
not divide by zero in front of the Loop), and nodes whose results the body
returns (ONNX wants a body's outputs computed in the body). ``If`` branches
keep their nodes: only the taken branch runs, and moving work in front of
the If would run it for both.
"""

from __future__ import annotations

from jax2onnx.passes.bodies import innermost_first_in
from jax2onnx.values.ir import ir

_RANDOM = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial"}
)
_LOOPS = {"Loop": 2, "Scan": 0}  # the op and its body's inputs before the carried values
_INTEGER_TRAPS = frozenset({"Div", "Mod"})


class HoistLoopInvariantsPass(ir.passes.InPlacePass):
    """Invariant carries leave a Loop, invariant nodes move in front of it (see the module)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, modified=innermost_first_in(model, _visit_node))


def _visit_node(graph: ir.Graph, node: ir.Node) -> bool:
    modified = False
    if node.op_type == "Loop" and node.domain in ("", "ai.onnx"):
        node, modified = _drop_invariant_carries(graph, node)
    if node is not None and node.op_type in _LOOPS and node.domain in ("", "ai.onnx"):
        modified |= _hoist(graph, node)
    return modified


def _body(node: ir.Node) -> ir.Graph | None:
    attribute = node.attributes.get("body")
    return None if attribute is None else attribute.value


def _passed_through(body: ir.Graph, carry: int) -> bool:
    """The body returns carry ``carry``'s input as it came in (itself or an Identity of it)."""
    given, returned = body.inputs[2 + carry], body.outputs[1 + carry]
    if returned is given:
        return True
    producer = returned.producer()
    return (
        producer is not None
        and producer.op_type == "Identity"
        and producer.domain in ("", "ai.onnx")
        and producer.graph is body
        and producer.inputs[0] is given
    )


def _drop_invariant_carries(graph: ir.Graph, loop: ir.Node) -> tuple[ir.Node | None, bool]:
    """``loop`` without its invariant carries (a new node), or ``loop`` when it has none."""
    body = _body(loop)
    if body is None:
        return loop, False
    carried = len(loop.inputs) - 2
    if carried <= 0 or len(body.inputs) != 2 + carried or len(body.outputs) < 1 + carried:
        return loop, False
    fixed = [j for j in range(carried) if _passed_through(body, j)]
    if not fixed:
        return loop, False
    for j in fixed:
        start, given, result = loop.inputs[2 + j], body.inputs[2 + j], loop.outputs[j]
        if start is None:
            return loop, False
        given.replace_all_uses_with(start)
        if result.is_graph_output():
            # the enclosing graph returns the Loop's result: an Identity of the start keeps
            # the output a value this graph computes
            keep = ir.Node("", "Identity", [start], num_outputs=1)
            graph.insert_before(loop, keep)
            keep.outputs[0].type, keep.outputs[0].shape = result.type, result.shape
            keep.outputs[0].metadata_props.update(result.metadata_props)
            result.replace_all_uses_with(keep.outputs[0], replace_graph_outputs=True)
            keep.outputs[0].name = result.name
        else:
            result.replace_all_uses_with(start)
    kept = [j for j in range(carried) if j not in fixed]
    new = keep_carries(graph, loop, kept)
    return new, True


def keep_carries(graph: ir.Graph, loop: ir.Node, kept: list[int]) -> ir.Node | None:
    """A Loop like ``loop`` with only the carries ``kept`` (positions among the carries),
    its scan outputs all kept; the others' results must be unread. None (and ``loop``
    gone) when nothing is left to run."""
    body = _body(loop)
    carried = len(loop.inputs) - 2
    scans = list(range(carried, len(loop.outputs)))
    body.inputs[:] = [*body.inputs[:2], *(body.inputs[2 + j] for j in kept)]
    returned = [body.outputs[1 + j] for j in kept]
    body.outputs[:] = [body.outputs[0], *returned, *body.outputs[1 + carried :]]
    outputs = [loop.outputs[j] for j in [*kept, *scans]]
    if not outputs:  # every carry went and nothing is scanned: nothing to run
        loop.resize_outputs(0)
        graph.remove(loop, safe=True)
        return None
    inputs = [loop.inputs[0], loop.inputs[1], *(loop.inputs[2 + j] for j in kept)]
    attributes = list(loop.attributes.values())
    new = ir.Node(
        loop.domain,
        "Loop",
        inputs,
        attributes,
        num_outputs=len(outputs),
        name=loop.name,
        metadata_props=dict(loop.metadata_props),
    )
    graph.insert_before(loop, new)
    for old, value in zip(outputs, new.outputs, strict=True):
        value.type, value.shape, name = old.type, old.shape, old.name
        value.metadata_props.update(old.metadata_props)
        old.replace_all_uses_with(value, replace_graph_outputs=True)
        old.name = None
        value.name = name
    loop.resize_outputs(0)
    graph.remove(loop, safe=True)
    return new


def _hoistable(node: ir.Node, body: ir.Graph) -> bool:
    if node.domain in ("", "ai.onnx") and node.op_type in _RANDOM:
        return False
    if not node.outputs or any(out.is_graph_output() for out in node.outputs):
        return False
    graphs = (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
    if any(a.type in graphs for a in node.attributes.values()):
        return False
    if node.op_type in _INTEGER_TRAPS:
        dtype = node.outputs[0].dtype
        if dtype is None or not dtype.is_floating_point():
            return False
    return all(v is None or (v.graph is not None and v.graph is not body) for v in node.inputs)


def _hoist(graph: ir.Graph, loop: ir.Node) -> bool:
    """Move ``loop``'s invariant body nodes in front of it, in their order."""
    body = _body(loop)
    if body is None:
        return False
    moved = False
    for node in list(body):
        if _hoistable(node, body):
            body.remove(node)
            graph.insert_before(loop, node)
            moved = True
    return moved
