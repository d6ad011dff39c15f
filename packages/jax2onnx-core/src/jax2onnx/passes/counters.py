"""``CountLoopTripsPass``: a Loop bounded by counters gets its trip count; dead carries go.

A ``while`` lowers to a Loop without a trip count whose body computes the
condition again at the end of every step. Bounded loops (a ``fori_loop`` with
a start known only at run time, Equinox's loops with ``max_steps``, diffrax's
Runge-Kutta stages) test counters there: ``c + 1 < n`` for a counter ``c``
the body steps by one and a bound ``n`` that does not change. Such a test
decides how often the Loop runs before it starts: ``n - c0`` steps for the
counter's start ``c0``, as long as the Loop's first condition held. The pass
gives the Loop that many steps (the smallest count of all such tests, and of
a trip count it had) and drops the test from the body's condition; the
condition the body returns is then its input where nothing else is tested
(it was true, or the step would not run).

A carry whose result nobody reads after the Loop and that the body reads
only to compute itself (such a counter, once its test is gone, or a flag that
only records the test) then goes with its nodes: ``DropDeadCarries``.

Both run late, after the interval pass, which reads the counters' bounds
from the condition (:mod:`.ranges`), and cost a few nodes in front of the
Loop, which runs once per call, for fewer node runs per step.
"""

from __future__ import annotations

import numpy as np

from jax2onnx.passes.bodies import innermost_first_in, subgraphs
from jax2onnx.passes.fusion.canonical import shape_of
from jax2onnx.passes.fusion.match import constant
from jax2onnx.passes.loops import keep_carries
from jax2onnx.values.ir import ir

_ONNX = ("", "ai.onnx")
_INTEGERS = frozenset((ir.DataType.INT32, ir.DataType.INT64))


class CountLoopTripsPass(ir.passes.InPlacePass):
    """Counter tests leave a Loop's condition for its trip count; dead carries go."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, modified=innermost_first_in(model, _visit_node))


def _visit_node(graph: ir.Graph, node: ir.Node) -> bool:
    if node.op_type != "Loop" or node.domain not in _ONNX:
        return False
    counted = _count(graph, node)
    return _drop_dead_carries(graph, node) is not node or counted


def _body(loop: ir.Node) -> ir.Graph | None:
    attribute = loop.attributes.get("body")
    return None if attribute is None else attribute.as_graph()


def _conjuncts(value: ir.Value, body: ir.Graph, found: list[tuple[ir.Node | None, int]]) -> None:
    """The leaves of the And tree computing ``value`` in ``body`` (read only by the tree),
    each with the And node and input position it sits at (None, -1 for the root)."""
    node = value.producer()
    if node is None or node.op_type != "And" or node.graph is not body or node.domain not in _ONNX:
        return
    for k, leaf in enumerate(node.inputs):
        inner = leaf.producer()
        single = len(leaf.uses()) == 1 and not leaf.is_graph_output()
        if inner is not None and inner.op_type == "And" and single and inner.graph is body:
            _conjuncts(leaf, body, found)
        else:
            found.append((node, k))


def _counter_bound(
    test: ir.Value, body: ir.Graph, loop: ir.Node
) -> tuple[ir.Value, ir.Value, int] | None:
    """``test`` is ``c + 1 < n`` (or ``<= n``) of a carry ``c`` the body steps by one and an
    ``n`` from outside the body: the counter's start, ``n`` and the steps beyond ``n - c0``."""
    node = test.producer()
    if node is None or node.graph is not body or node.domain not in _ONNX:
        return None
    if node.op_type in ("Less", "LessOrEqual"):
        stepped, bound = node.inputs
    elif node.op_type in ("Greater", "GreaterOrEqual"):
        bound, stepped = node.inputs
    else:
        return None
    extra = 1 if node.op_type in ("LessOrEqual", "GreaterOrEqual") else 0
    if bound is None or stepped is None or bound.dtype not in _INTEGERS:
        return None
    if bound.producer() is not None and bound.producer().graph is body:
        return None  # the bound changes from step to step
    if bound.is_graph_input() and bound.graph is body:
        return None
    add = stepped.producer()
    if add is None or add.op_type != "Add" or add.graph is not body or add.domain not in _ONNX:
        return None
    carries = body.inputs[2:]
    for k, operand in enumerate(add.inputs):
        one = constant(add.inputs[1 - k])
        if one is None or one.size != 1 or int(one.reshape(-1)[0]) != 1:
            continue
        position = next((j for j, c in enumerate(carries) if c is operand), None)
        if position is None or body.outputs[1 + position] is not stepped:
            continue
        start = loop.inputs[2 + position]
        if start is None or start.dtype != bound.dtype:
            return None
        if start.shape is None or len(start.shape) != 0 or shape_of(bound) != ():
            return None  # a trip count is one number
        return start, bound, extra
    return None


def _count(graph: ir.Graph, loop: ir.Node) -> bool:
    body = _body(loop)
    if body is None or len(body.inputs) != len(loop.inputs) or not body.outputs:
        return False
    found: list[tuple[ir.Node | None, int]] = []
    _conjuncts(body.outputs[0], body, found)
    leaves = [body.outputs[0] if parent is None else parent.inputs[k] for parent, k in found]
    if not leaves:  # the condition itself may be one test
        leaves = [body.outputs[0]]
    bounds = [_counter_bound(leaf, body, loop) for leaf in leaves]
    if all(b is None for b in bounds):
        return False
    counts = [_steps(graph, loop, *b) for b in bounds if b is not None]
    if loop.inputs[0] is not None:
        counts.append(loop.inputs[0])
    trips = counts[0]
    for other in counts[1:]:
        trips = _op(graph, loop, "Min", [trips, other], ir.DataType.INT64)
    loop.replace_input_with(0, trips)
    kept = [leaf for leaf, b in zip(leaves, bounds, strict=True) if b is None]
    condition = body.inputs[1]  # it held, or this step would not run
    for leaf in kept:
        condition = leaf if condition is body.inputs[1] else _and(body, condition, leaf)
    made_here = condition.is_graph_input() or (
        condition.producer() is not None and condition.producer().graph is body
    )
    if not made_here or any(v is condition for v in body.outputs[1:]):
        # a body returns what it computes or takes in, each value once
        condition = _and(body, condition, body.inputs[1])
    body.outputs[0] = condition
    return True


def _and(body: ir.Graph, a: ir.Value, b: ir.Value) -> ir.Value:
    node = ir.Node("", "And", [a, b], num_outputs=1)
    node.outputs[0].dtype = ir.DataType.BOOL
    node.outputs[0].shape = ir.Shape([])
    body.append(node)
    return node.outputs[0]


def _op(graph: ir.Graph, loop: ir.Node, op: str, inputs, dtype, **attributes) -> ir.Value:
    node = ir.Node(
        "", op, inputs, attributes=ir.convenience.convert_attributes(attributes), num_outputs=1
    )
    node.outputs[0].dtype = dtype
    node.outputs[0].shape = ir.Shape([])
    graph.insert_before(loop, node)
    return node.outputs[0]


def _steps(
    graph: ir.Graph, loop: ir.Node, start: ir.Value, bound: ir.Value, extra: int
) -> ir.Value:
    """``bound - start + extra`` as the Loop's int64 trip count (a constant when both are)."""
    first, last = constant(start), constant(bound)
    if first is not None and last is not None:
        steps = int(last.reshape(-1)[0]) - int(first.reshape(-1)[0]) + extra
        return _constant(graph, max(steps, 0), "trips")
    wide = []
    for value, known in ((bound, last), (start, first)):  # in int64: no wrap-around
        if known is not None:
            value = _constant(graph, int(known.reshape(-1)[0]), "bound")
        elif value.dtype != ir.DataType.INT64:
            value = _op(graph, loop, "Cast", [value], ir.DataType.INT64, to=ir.DataType.INT64)
        wide.append(value)
    steps = _op(graph, loop, "Sub", wide, ir.DataType.INT64)
    if extra:
        steps = _op(graph, loop, "Add", [steps, _constant(graph, extra, "one")], ir.DataType.INT64)
    return steps


def _constant(graph: ir.Graph, number: int, hint: str) -> ir.Value:
    taken = set(graph.initializers)
    name = next(f"{hint}_{k}" for k in range(len(taken) + 1) if f"{hint}_{k}" not in taken)
    value = ir.Value(
        name=name,
        type=ir.TensorType(ir.DataType.INT64),
        shape=ir.Shape([]),
        const_value=ir.tensor(np.array(number, np.int64), name=name),
    )
    graph.register_initializer(value)
    return value


def _drop_dead_carries(graph: ir.Graph, loop: ir.Node) -> ir.Node:
    """``loop`` without the carries nobody reads after it and its body reads only to
    compute themselves (a new Loop, or ``loop`` when every carry is needed)."""
    body = _body(loop)
    carried = len(loop.inputs) - 2
    if body is None or carried <= 0 or len(body.inputs) != 2 + carried:
        return loop
    position = {id(v): k for k, v in enumerate(body.inputs[2:])}
    live = {
        k for k in range(carried) if loop.outputs[k].uses() or loop.outputs[k].is_graph_output()
    }
    work = [body.outputs[0], *body.outputs[1 + carried :], *(body.outputs[1 + k] for k in live)]
    seen: set[int] = set()
    while work:
        value = work.pop()
        if value is None or id(value) in seen:
            continue
        seen.add(id(value))
        k = position.get(id(value))
        if k is not None:
            if k not in live:
                live.add(k)
                work.append(body.outputs[1 + k])
            continue
        node = value.producer()
        if node is not None and node.graph is body:
            work.extend(_reads(node))
    if len(live) == carried:
        return loop
    return keep_carries(graph, loop, sorted(live)) or loop


def _reads(node: ir.Node) -> list[ir.Value]:
    """The values ``node`` reads, with those its subgraphs read from enclosing scopes."""
    reads = [v for v in node.inputs if v is not None]
    for sub in subgraphs(node):
        for inner in sub:
            reads.extend(_reads(inner))
        reads.extend(v for v in sub.outputs if v is not None)
    return reads
