"""``SelectInBodiesPass``: a loop body's Wheres on one scalar condition become one ``If``.

ONNX Runtime's CPU ``Where`` selects into two temporaries and merges them: on
small tensors it costs about 1 µs, three to four times an ``Add``, and in a
Loop body it runs at every step. A solver's step is accepted or rejected by one
condition that picks many values (diffrax: the time, the state, the last stage,
the controller's factors) and the work after it reads what was picked. In the
graphs a Loop or Scan body holds, at any depth:

* **The work after the selections, per branch.** From the first of at least
  :data:`_GROUP` Wheres on one scalar condition on, the nodes reading the
  condition or what such nodes computed (no nested graphs, no random ops, at
  most :data:`_REGION`) become the two branches of an ``If`` on it: in each, a
  copy with the condition a constant and its Wheres on it their picked operand;
  constant folding then computes what the constant made constant (a
  controller's factor and its clipping). A node joins only while the If can
  stand before the first reader of the region's results outside it with every
  other operand computed by then; the results read outside are the If's
  outputs (an ``Identity`` for an operand passed as it is).
* **The remaining Wheres on one condition**, at least :data:`_GROUP`, their
  operands and result of one shape and type and none reading another, become one
  ``If`` whose branches return the operands, before the first reader of any of
  their results.

Each selection costs one If and the branch's copies of what runs anyway:
measured in a Loop body (ONNX Runtime 1.32, CPU), 0.3 µs less per selection
for two, 0.5 µs for seven; diffrax's Dopri5 and Tsit5 solves 7-9% faster.

Exact: the same nodes on the same numbers, every selection the operand its
condition picks bit for bit (also -0.0, which ONNX Runtime's Where turns into
+0.0 when it picks it). The main graph's Wheres run once per call and keep
their form; so do Wheres whose condition has more than one element (an If
picks whole values). Reading a two-entry table instead of a Where between two
constants, ``Gather([b, a], Cast(c))``, is 0.5 µs cheaper alone but measured no
faster in the solvers' bodies: not done.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import numpy as np

from jax2onnx.passes.bodies import nested_graphs, subgraphs
from jax2onnx.passes.constants import FoldConstantsPass
from jax2onnx.passes.fusion.canonical import shape_of
from jax2onnx.values.ir import ir

_ONNX = ("", "ai.onnx")
_LOOPS = ("Loop", "Scan")
_GROUP = 2  # selections on one condition that become an If, at least
_REGION = 48  # nodes an If on a condition specializes, at most
_RANDOM = frozenset(
    ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial")
    + ("Bernoulli", "Dropout")
)


class SelectInBodiesPass(ir.passes.InPlacePass):
    """Wheres of loop bodies on one scalar condition as one If (see the module)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for root in [model.graph, *(f.graph for f in model.functions.values())]:
            graphs = (root, *nested_graphs(root))
            names = {v.name for g in graphs for n in g for v in n.outputs} | set(root.initializers)
            for graph in _per_step(root):
                modified |= _specialize(graph, names)
                modified |= _group(graph)
        if modified:  # the branches' reads of the condition, now constants
            FoldConstantsPass()(model)
        return ir.passes.PassResult(model, modified=modified)


def _per_step(graph: ir.Graph) -> Iterator[ir.Graph]:
    """The graphs run once per step of a loop: Loop/Scan bodies and every graph in them."""
    for node in graph:
        for sub in subgraphs(node):
            if node.op_type in _LOOPS and node.domain in _ONNX:
                yield sub
                yield from nested_graphs(sub)
            else:
                yield from _per_step(sub)


def _where(node: ir.Node) -> bool:
    return (
        node.op_type == "Where"
        and node.domain in _ONNX
        and len(node.inputs) == 3
        and all(v is not None for v in node.inputs)
    )


def _single(shape: tuple | None) -> bool:
    """A static shape of one element."""
    return shape is not None and all(isinstance(d, int) and d == 1 for d in shape)


def _branchable(node: ir.Node) -> bool:
    """A Where an If can take: one-element condition, operands of the result's shape/type."""
    if not _where(node):
        return False
    test, a, b = node.inputs
    out = shape_of(node.outputs[0])
    if not _single(shape_of(test)) or out is None:
        return False
    return shape_of(a) == out and shape_of(b) == out and a.dtype == b.dtype


# -- one If per condition ------------------------------------------------------------------------


def _group(graph: ir.Graph) -> bool:
    modified = False
    while True:
        nodes = list(graph)
        by_test: dict[int, list[ir.Node]] = defaultdict(list)
        for node in nodes:
            if _branchable(node):
                by_test[id(node.inputs[0])].append(node)
        place = {id(n): k for k, n in enumerate(nodes)}
        reads = _reads(nodes)
        for wheres in by_test.values():
            group = _first_group(wheres, place, reads)
            if group:
                _branch(graph, group, nodes, place, reads)
                modified = True
                break
        else:
            return modified


def _reads(nodes: list[ir.Node]) -> dict[int, int]:
    """id(value) -> the first position in ``nodes`` reading it (in the node or its graphs)."""
    first: dict[int, int] = {}
    for k, node in enumerate(nodes):
        for value in _inputs_within(node):
            first.setdefault(id(value), k)
    return first


def _inputs_within(node: ir.Node) -> Iterator[ir.Value]:
    yield from (v for v in node.inputs if v is not None)
    for sub in subgraphs(node):
        for inner in sub:
            yield from _inputs_within(inner)
        yield from sub.outputs


def _first_group(
    wheres: list[ir.Node], place: dict[int, int], reads: dict[int, int]
) -> list[ir.Node] | None:
    """The first run of at least :data:`_GROUP` of ``wheres`` one If can stand for: its
    operands all computed before the first reader of any of its results."""
    group: list[ir.Node] = []
    for where in wheres:
        trial = [*group, where]
        if _fits(trial, place, reads):
            group = trial
        elif len(group) >= _GROUP:
            return group
        else:
            group = [where]
    return group if len(group) >= _GROUP else None


def _fits(group: list[ir.Node], place: dict[int, int], reads: dict[int, int]) -> bool:
    members = {id(n) for n in group}
    ready = -1
    for node in group:
        for value in node.inputs:
            made = value.producer()
            if made is None or id(made) not in place:
                continue  # an input, an initializer or a value of an enclosing graph
            if id(made) in members:
                return False
            ready = max(ready, place[id(made)])
    first = min((reads.get(id(n.outputs[0]), len(place)) for n in group), default=len(place))
    return ready < first


def _branch(
    graph: ir.Graph,
    group: list[ir.Node],
    nodes: list[ir.Node],
    place: dict[int, int],
    reads: dict[int, int],
) -> None:
    test = group[0].inputs[0]
    then = ir.Graph([], [], nodes=[], name=f"{group[0].name or 'where'}_picked")
    other = ir.Graph([], [], nodes=[], name=f"{group[0].name or 'where'}_other")
    for where in group:
        for branch, value in ((then, where.inputs[1]), (other, where.inputs[2])):
            copy = ir.Node("", "Identity", [value], num_outputs=1)
            copy.outputs[0].type = where.outputs[0].type or value.type
            copy.outputs[0].shape = where.outputs[0].shape or value.shape
            branch.append(copy)
            branch.outputs.append(copy.outputs[0])
    attributes = [
        ir.Attr("then_branch", ir.AttributeType.GRAPH, then),
        ir.Attr("else_branch", ir.AttributeType.GRAPH, other),
    ]
    node = ir.Node("", "If", [test], attributes, num_outputs=len(group))
    node.metadata_props.update(group[0].metadata_props)
    first = min(reads.get(id(n.outputs[0]), len(nodes)) for n in group)
    if first < len(nodes):
        graph.insert_before(nodes[first], node)
    else:
        graph.append(node)
    for where, value in zip(group, node.outputs, strict=True):
        old = where.outputs[0]
        value.type = old.type or where.inputs[1].type
        value.shape, name = old.shape or where.inputs[1].shape, old.name
        old.replace_all_uses_with(value, replace_graph_outputs=True)
        old.name = None
        value.name = name
        graph.remove(where, safe=True)


# -- the work after the selections, specialized per branch ---------------------------------------


def _specialize(graph: ir.Graph, names: set) -> bool:
    """Each branch's copies are named apart from every name in ``names`` (constant folding
    makes their results initializers of the main graph under their names)."""
    modified = False
    while _specialize_one(graph, names):
        modified = True
    return modified


def _specialize_one(graph: ir.Graph, names: set) -> bool:
    nodes = list(graph)
    place = {id(n): k for k, n in enumerate(nodes)}
    by_test: dict[int, list[ir.Node]] = defaultdict(list)
    for node in nodes:
        if _branchable(node) and len(shape_of(node.inputs[0])) == 0:
            by_test[id(node.inputs[0])].append(node)
    for wheres in by_test.values():
        if len(wheres) < _GROUP:
            continue
        test, start = wheres[0].inputs[0], place[id(wheres[0])]
        region, at = _region(nodes, place, start, test)
        picked = sum(n in wheres for n in region)
        if (
            picked >= _GROUP
            and len(region) > picked
            and _split(graph, nodes, region, test, at, names)
        ):
            return True
    return False


def _region(
    nodes: list[ir.Node], place: dict[int, int], start: int, test: ir.Value
) -> tuple[list[ir.Node], int]:
    """From ``start`` on, the nodes reading the test or the region's results (no graphs, no
    random ops) that one If can stand for: its operands from outside are all computed
    before the first outside reader of its results. The region and where the If goes."""
    readers: dict[int, list[int]] = defaultdict(list)
    for k, node in enumerate(nodes):
        for value in _inputs_within(node):
            readers[id(value)].append(k)
    inside = {id(test)}
    region: list[ir.Node] = []
    members: set[int] = set()
    pending: list[int] = []  # positions reading the region's results
    ready = -1
    for node in nodes[start:]:
        if len(region) >= _REGION:
            break
        if subgraphs(node) or node.op_type in _RANDOM or node.domain not in _ONNX:
            continue
        operands = [v for v in node.inputs if v is not None]
        if not any(id(v) in inside for v in operands):
            continue
        at = place[id(node)]
        made = [
            place[id(v.producer())]
            for v in operands
            if id(v) not in inside and v.producer() is not None and id(v.producer()) in place
        ]
        later = max([ready, *made])
        uses = [k for v in node.outputs for k in readers.get(id(v), ())]
        # once in, the node reads the region from inside: the If goes before the first
        # outside reader, so every operand from outside must be computed before it
        first = min(
            (k for k in [*pending, *uses] if k not in members and k != at), default=len(nodes)
        )
        if later >= first:
            continue
        region.append(node)
        members.add(at)
        pending.extend(uses)
        inside.update(id(v) for v in node.outputs)
        ready = later
    outside = [
        k for n in region for v in n.outputs for k in readers.get(id(v), ()) if k not in members
    ]
    return region, min(outside, default=len(nodes))


def _split(
    graph: ir.Graph,
    nodes: list[ir.Node],
    region: list[ir.Node],
    test: ir.Value,
    start: int,
    names: set,
) -> bool:
    """``region`` as an If on ``test`` before ``nodes[start]``: each branch a copy with the
    test a constant and its Wheres on the test their picked operand."""
    members = {id(n) for n in region}
    reads = _reads([n for n in nodes if id(n) not in members])
    results = [v for n in region for v in n.outputs if id(v) in reads or v.is_graph_output()]
    if not results:  # nobody reads the region: dead work, for unused-node removal
        return False
    branches = []
    for flag, label in ((True, "picked"), (False, "other")):
        branch = ir.Graph([], [], nodes=[], name=f"{region[0].name or 'where'}_{label}")
        known = {id(test): _flag(branch, flag, _fresh(names, f"{test.name or 'test'}_{label}"))}
        for node in region:
            operands = [None if v is None else known.get(id(v), v) for v in node.inputs]
            if _where(node) and node.inputs[0] is test and _branchable(node):
                known[id(node.outputs[0])] = operands[1 if flag else 2]
                continue
            copy = ir.Node(
                node.domain,
                node.op_type,
                operands,
                list(node.attributes.values()),
                num_outputs=len(node.outputs),
            )
            copy.metadata_props.update(node.metadata_props)
            for old, new in zip(node.outputs, copy.outputs, strict=True):
                new.type, new.shape = old.type, _shape(old)
                new.name = _fresh(names, f"{old.name or 'value'}_{label}")
                known[id(old)] = new
            branch.append(copy)
        for value in results:
            out = known[id(value)]
            if (
                out.producer() is None
                or out.producer().graph is not branch
                or out in branch.outputs
            ):
                identity = ir.Node("", "Identity", [out], num_outputs=1)
                identity.outputs[0].type, identity.outputs[0].shape = value.type, _shape(value)
                identity.outputs[0].name = _fresh(names, f"{value.name or 'value'}_{label}")
                branch.append(identity)
                out = identity.outputs[0]
            branch.outputs.append(out)
        branches.append(branch)
    attributes = [
        ir.Attr("then_branch", ir.AttributeType.GRAPH, branches[0]),
        ir.Attr("else_branch", ir.AttributeType.GRAPH, branches[1]),
    ]
    node = ir.Node("", "If", [test], attributes, num_outputs=len(results))
    node.metadata_props.update(region[0].metadata_props)
    if start < len(nodes):
        graph.insert_before(nodes[start], node)
    else:
        graph.append(node)
    for old, new in zip(results, node.outputs, strict=True):
        new.type, new.shape, name = old.type, _shape(old), old.name
        old.replace_all_uses_with(new, replace_graph_outputs=True)
        old.name = None
        new.name = name
    for member in reversed(region):
        graph.remove(member, safe=True)
    return True


def _fresh(names: set, hint: str) -> str:
    name, k = hint, 0
    while name in names:
        k += 1
        name = f"{hint}_{k}"
    names.add(name)
    return name


def _shape(value: ir.Value) -> ir.Shape | None:
    """The value's recorded shape, else the static one its producers imply."""
    if value.shape is not None:
        return value.shape
    implied = shape_of(value)
    if implied is None or not all(isinstance(d, int) for d in implied):
        return None
    return ir.Shape(implied)


def _flag(branch: ir.Graph, flag: bool, name: str) -> ir.Value:
    value = ir.Value(
        name=name,
        type=ir.TensorType(ir.DataType.BOOL),
        shape=ir.Shape([]),
        const_value=ir.tensor(np.asarray(flag)),
    )
    branch.register_initializer(value)
    return value
