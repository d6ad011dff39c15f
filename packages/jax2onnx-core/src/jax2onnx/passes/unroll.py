"""``UnrollCountedLoopsPass``: a short Loop of known length becomes its steps in a row.

A Runge-Kutta step runs its stages as a Loop (diffrax: six or seven stages,
counted by a carry from 0 or 1 depending on whether the last step's final
stage can be reused), a ``fori_loop(0, 4, ...)`` as a Loop of four. In ONNX
Runtime every step of a Loop costs a subgraph call besides its nodes, and
each step reads its stage's coefficients with a Gather by the counter and
writes its result with a ScatterND at the counter. Written out, each step
knows its counter: those reads and writes take constant indices (and fold
or become Slices), and the steps' sums meet in one graph, where
:class:`~jax2onnx.passes.linear.CollapseLinearMapsPass` composes them.

Only Loops inside a Loop or If body are unrolled: their steps, and the
subgraph calls, run once per step of the loop around them. A Loop of the main
graph runs once per call and keeps its form (a short recurrent sequence, a
scatter's loop over duplicate indices read as the source wrote them).

A Loop is unrolled when

* it runs exactly its trip count: no scan outputs, its condition true at the
  start (absent or a constant) and returned as it came (or constant true);
* its body is small (``_MAX_BODY`` nodes, no nested graphs) and the copies
  stay small (``_MAX_TRIPS`` steps, ``_MAX_NODES`` nodes in all), and it
  carries no float16 or bfloat16 (the precision step, which runs after,
  decides what such a body computes in);
* its length is known: a constant trip count, or a count ``N - c0`` of a
  counter carry the body steps by one from a start ``c0`` that takes one of
  a few known values (a constant or a ``Where`` of constants); the step for
  counter value ``v`` then runs exactly when ``c0 <= v < N``. Steps for
  values every start reaches run as they are; the others are the taken
  branch of an ``If`` on ``c0 <= v`` whose other branch passes the carries
  on (diffrax's first stage, where the last step's final one is not reused:
  computed at a solve's first step only). A body that reads the iteration
  number needs a constant start.

Every number stays: each step computes what the Loop's step computed, in the
same order.
"""

from __future__ import annotations

import numpy as np

from jax2onnx.passes.bodies import innermost_first_in, nested_graphs, subgraphs
from jax2onnx.passes.constants import FoldConstantsPass
from jax2onnx.passes.fusion import AFTER_UNROLL, FusePatternsPass
from jax2onnx.passes.fusion.match import constant, new_constant
from jax2onnx.values.ir import ir

_ONNX = ("", "ai.onnx")
_MAX_TRIPS = 8  # steps written out
_MAX_BODY = 40  # nodes of the body
_MAX_NODES = 240  # nodes of all the copies
_HALF = frozenset((ir.DataType.FLOAT16, ir.DataType.BFLOAT16))


class UnrollCountedLoopsPass(ir.passes.InPlacePass):
    """Short Loops of known length become their steps (see the module)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        roots = {id(model.graph), *(id(f.graph) for f in model.functions.values())}
        # a Loop in a body runs its steps per outer step; one in the main graph once a call
        modified = innermost_first_in(
            model, lambda graph, node: id(graph) not in roots and _visit(graph, node, model)
        )
        if modified:  # each step's reads by its constant counter fold (only when unrolled),
            FoldConstantsPass()(model)  # and the tests of a stage's known counter decide
            FusePatternsPass(groups=AFTER_UNROLL)(model)
        return ir.passes.PassResult(model, modified=modified)


def _true(value: ir.Value | None) -> bool:
    flag = constant(value)
    return flag is not None and flag.dtype == np.bool_ and flag.size == 1 and bool(flag.all())


def _passes(value: ir.Value, source: ir.Value) -> bool:
    """``value`` is ``source`` or an Identity of it."""
    node = value.producer()
    identity = node is not None and node.op_type == "Identity" and node.domain in _ONNX
    return value is source or (identity and node.inputs[0] is source)


def _visit(graph: ir.Graph, loop: ir.Node, model: ir.Model) -> bool:
    if loop.op_type != "Loop" or loop.domain not in _ONNX or loop.inputs[0] is None:
        return False
    body = loop.attributes["body"].as_graph() if "body" in loop.attributes else None
    carried = len(loop.inputs) - 2
    if body is None or len(body.inputs) != 2 + carried or len(body.outputs) != 1 + carried:
        return False
    if len(loop.outputs) != carried or len(body) > _MAX_BODY:
        return False
    if any(subgraphs(node) for node in body):
        return False
    if any(v.dtype in _HALF for v in loop.inputs[2:]):
        return False  # the precision step decides what such a body computes in
    if len(loop.inputs) > 1 and loop.inputs[1] is not None and not _true(loop.inputs[1]):
        return False
    if not _passes(body.outputs[0], body.inputs[1]) and not _true(body.outputs[0]):
        return False
    plan = _plan(body, loop)
    if plan is None:
        return False
    counter, starts, end = plan
    first = min(starts)
    if end - first > _MAX_TRIPS or (end - first) * len(body) > _MAX_NODES:
        return False
    state = list(loop.inputs[2:])
    start = loop.inputs[2 + counter] if counter is not None else None
    for v in range(first, end):
        mapping: dict[int, ir.Value] = {1: new_constant(graph, np.array(True), "go")}
        if body.inputs[0].uses():
            mapping[0] = new_constant(graph, np.array(v - first, np.int64), "step")
        for k in range(carried):
            mapping[2 + k] = state[k]
        if counter is not None:
            dtype = body.inputs[2 + counter].dtype.numpy()
            mapping[2 + counter] = new_constant(graph, np.array(v, dtype), "counter")
        if counter is not None and v < max(starts):  # a step only some starts take
            test = _node(graph, loop, "LessOrEqual", [start, mapping[2 + counter]])
            state = _guarded(graph, loop, body, mapping, test, state, counter, model)
            continue
        outs = _inline(graph, loop, body, mapping)
        for k in range(carried):
            if k != counter:
                state[k] = outs[1 + k]
    if counter is not None:
        dtype = body.inputs[2 + counter].dtype.numpy()
        state[counter] = new_constant(graph, np.array(end, dtype), "counter")
    for k, out in enumerate(loop.outputs):
        result, name = state[k], out.name
        if not out.is_graph_output():
            ir.convenience.replace_all_uses_with(out, result)
            continue
        made = result.producer()
        if made is None or made.graph is not graph or result.is_graph_output():
            result = _node(graph, loop, "Identity", [result])  # a graph returns its own, once
        ir.convenience.replace_all_uses_with(out, result, replace_graph_outputs=True)
        result.name = name  # the output keeps its name
    graph.remove(loop, safe=True)
    return True


def _plan(body: ir.Graph, loop: ir.Node) -> tuple[int | None, set[int], int] | None:
    """(the counter carry, the values its start may take, the end ``N``) for a Loop of
    ``N - c0`` steps; (None, {0}, M) for a constant trip count ``M``."""
    trips = constant(loop.inputs[0])
    for k in range(len(loop.inputs) - 2):
        if not _stepped_by_one(body, k):
            continue
        start = loop.inputs[2 + k]
        starts = _candidates(start)
        if not starts:
            continue
        ends = set()
        for s in starts:  # the Loop's count from each start: N - s, one N for all
            count = _evaluate(loop.inputs[0], start, s)
            ends.add(None if count is None else count + s)
        if len(ends) != 1 or None in ends:
            continue
        (end,) = ends
        if max(starts) > end or (len(starts) > 1 and body.inputs[0].uses()):
            continue
        return k, starts, end
    if trips is not None and trips.size == 1:
        return None, {0}, int(trips.reshape(-1)[0])
    return None


def _stepped_by_one(body: ir.Graph, k: int) -> bool:
    step = body.outputs[1 + k].producer()
    if step is None or step.op_type != "Add" or step.domain not in _ONNX:
        return False
    mine = body.inputs[2 + k]
    others = [v for v in step.inputs if v is not mine]
    if len(others) != 1 or len(step.inputs) != 2:
        return False
    one = constant(others[0])
    return one is not None and one.size == 1 and one.dtype.kind in "iu" and one.item() == 1


def _candidates(value: ir.Value, depth: int = 0) -> set[int] | None:
    """The few values an integer scalar can take: a constant, or a Where/Cast of such."""
    known = constant(value)
    if known is not None:
        return {int(known.reshape(-1)[0])} if known.size == 1 and known.dtype.kind in "iu" else None
    node = value.producer()
    if node is None or node.domain not in _ONNX or depth > 4:
        return None
    if node.op_type == "Where" and len(node.inputs) == 3:
        a, b = (_candidates(v, depth + 1) for v in node.inputs[1:])
        return a | b if a and b else None
    if node.op_type == "Cast":
        return _candidates(node.inputs[0], depth + 1)
    return None


def _evaluate(value: ir.Value, start: ir.Value, s: int, depth: int = 0) -> int | None:
    """The integer scalar ``value`` when ``start`` is ``s`` (None: not computed from it by
    Cast, Add, Sub, Min, Max and constants)."""
    if value is start:
        return s
    known = constant(value)
    if known is not None:
        return int(known.reshape(-1)[0]) if known.size == 1 and known.dtype.kind in "iu" else None
    node = value.producer()
    if node is None or node.domain not in _ONNX or depth > 6:
        return None
    args = [_evaluate(v, start, s, depth + 1) for v in node.inputs]
    if None in args or not args:
        return None
    if node.op_type == "Cast":
        return args[0]
    if node.op_type in ("Add", "Sub") and len(args) == 2:
        return args[0] + args[1] if node.op_type == "Add" else args[0] - args[1]
    if node.op_type in ("Min", "Max"):
        return min(args) if node.op_type == "Min" else max(args)
    return None


def _node(graph: ir.Graph, before: ir.Node, op: str, inputs: list) -> ir.Value:
    node = ir.Node("", op, inputs, num_outputs=1)
    node.metadata_props.update(before.metadata_props)
    source = inputs[-1]
    if op == "LessOrEqual":
        node.outputs[0].dtype, node.outputs[0].shape = ir.DataType.BOOL, ir.Shape([])
    else:
        node.outputs[0].type, node.outputs[0].shape = source.type, source.shape
    graph.insert_before(before, node)
    return node.outputs[0]


def _guarded(
    graph: ir.Graph,
    loop: ir.Node,
    body: ir.Graph,
    mapping: dict,
    test: ir.Value,
    state: list[ir.Value],
    counter: int,
    model: ir.Model,
) -> list[ir.Value]:
    """The carries after a step only some starts take: the step's copy in the taken
    branch of an If on ``test``, the carries passed on as they came in the other, so
    its nodes run only when it is taken (a Runge-Kutta step's first stage, computed
    once per solve where the last stage of the step before is reused)."""
    taken = ir.Graph([], [], nodes=[], name=f"{loop.name or 'loop'}_taken")
    passed = ir.Graph([], [], nodes=[], name=f"{loop.name or 'loop'}_passed")
    # a branch's values get names no graph of the model has: folding makes them initializers
    # of the main graph under those names
    graphs = (model.graph, *nested_graphs(model.graph))
    names = {v.name for g in graphs for n in g for v in n.outputs} | set(model.graph.initializers)
    outs = _inline(taken, None, body, mapping, names)
    changed = [k for k in range(len(state)) if k != counter and outs[1 + k] is not state[k]]
    for k in changed:
        for branch, value in ((taken, outs[1 + k]), (passed, state[k])):
            made = value.producer()
            if made is None or made.graph is not branch or value in branch.outputs:
                copy = ir.Node("", "Identity", [value], num_outputs=1)
                copy.outputs[0].type, copy.outputs[0].shape = value.type, value.shape
                branch.append(copy)
                value = copy.outputs[0]
            branch.outputs.append(value)
    if not changed:
        return state
    attributes = [
        ir.Attr("then_branch", ir.AttributeType.GRAPH, taken),
        ir.Attr("else_branch", ir.AttributeType.GRAPH, passed),
    ]
    node = ir.Node("", "If", [test], attributes, num_outputs=len(changed))
    node.metadata_props.update(loop.metadata_props)
    graph.insert_before(loop, node)
    state = list(state)
    for k, value in zip(changed, node.outputs, strict=True):
        value.type, value.shape = state[k].type, state[k].shape
        state[k] = value
    return state


def _inline(
    graph: ir.Graph,
    loop: ir.Node | None,
    body: ir.Graph,
    mapping: dict,
    names: frozenset[str] | set[str] = frozenset(),
) -> list[ir.Value]:
    """A copy of ``body`` in ``graph`` before ``loop`` (at its end for None), its inputs
    read from ``mapping`` (position -> value), its values named apart from ``graph``'s
    and ``names``; what the copy returns."""
    copy = body.clone(allow_outer_scope_values=True)
    results = list(copy.outputs)
    copy.outputs.clear()
    given = {id(value): k for k, value in enumerate(copy.inputs)}
    for k, value in enumerate(copy.inputs):
        if k in mapping:
            ir.convenience.replace_all_uses_with(value, mapping[k])
        elif value.uses():
            raise AssertionError(f"body input {k} is read but not given")
    for name, value in list(copy.initializers.items()):
        copy.initializers.pop(name)
        moved = new_constant(graph, value.const_value.numpy(), name)
        ir.convenience.replace_all_uses_with(value, moved)
        results = [moved if r is value else r for r in results]
    inner = (graph, *nested_graphs(graph))  # a guarded step's branch among them
    taken = {v.name for g in inner for n in g for v in n.outputs} | set(graph.initializers)
    taken |= set(names)
    for node in list(copy):
        copy.remove(node)
        for out in node.outputs:  # the steps' values get names of their own
            base, k = out.name or "step", 1
            while f"{base}_{k}" in taken:
                k += 1
            out.name = f"{base}_{k}"
            taken.add(out.name)
        if loop is None:
            graph.append(node)
        else:
            graph.insert_before(loop, node)
    return [mapping.get(given[id(r)]) if id(r) in given else r for r in results]
