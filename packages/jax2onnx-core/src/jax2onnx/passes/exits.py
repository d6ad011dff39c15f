"""``ExitLoopsEarlyPass``: a fixed number of steps that skip once done stops when done.

JAX has no early exit from a ``scan``; code that wants one at a fixed upper
bound (MJX's line search: at most 50 steps) runs every step and skips the
work once a flag says it is done: ``scan(lambda c, _: cond(c.go, step,
lambda c: c, c))``. The export is a Loop whose body is one If on the flag, a
branch that returns the carries as they came (and the flag as it is, false)
and a branch that does the step. Once the flag is false every further step
changes nothing, so the Loop may as well stop: the flag becomes the Loop's
condition, the working branch becomes the body, and the If, its
pass-through branch and the steps after the work is done go.

Exact: the same steps run on the same values; the skipped ones returned
their input.
"""

from __future__ import annotations

import numpy as np

from jax2onnx.passes.bodies import innermost_first_in
from jax2onnx.passes.fusion.match import constant
from jax2onnx.values.ir import ir

_ONNX = ("", "ai.onnx")


class ExitLoopsEarlyPass(ir.passes.InPlacePass):
    """A Loop that only skips its work once a carried flag is false stops there instead."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, modified=innermost_first_in(model, _visit))


def _visit(graph: ir.Graph, loop: ir.Node) -> bool:
    if loop.op_type != "Loop" or loop.domain not in _ONNX:
        return False
    body = loop.attributes["body"].as_graph() if "body" in loop.attributes else None
    carried = len(loop.inputs) - 2
    if body is None or carried <= 0 or len(body.outputs) != 1 + carried:
        return False  # scan outputs would record the skipped steps
    if not _passes(body.outputs[0], body.inputs[1]):
        return False  # the Loop already stops on a condition of its own
    branch = [n for n in body if n.op_type == "If" and n.domain in _ONNX]
    if len(branch) != 1:
        return False
    (test,) = branch
    flag, then_skips = _flag(test.inputs[0], body)
    if flag is None:
        return False
    carry = {id(v): k for k, v in enumerate(body.inputs[2:])}
    f = carry[id(flag)]
    then, otherwise = (test.attributes[n].as_graph() for n in ("then_branch", "else_branch"))
    skip, work = (then, otherwise) if then_skips else (otherwise, then)
    # every carry is the If's result or passed through the body as it came
    result = {id(v): k for k, v in enumerate(test.outputs)}
    routes = []
    for j in range(carried):
        out = body.outputs[1 + j]
        if id(out) in result:
            routes.append(result[id(out)])
        elif _passes(out, body.inputs[2 + j]):
            routes.append(None)
        else:
            return False
    if routes[f] is None:
        return False  # the flag must come from the step
    for j, k in enumerate(routes):  # the skipping branch returns each carry unchanged
        if k is not None and not _unchanged(skip.outputs[k], body.inputs[2 + j], j == f):
            return False
    if any(v.uses() for v in test.outputs) or len(set(routes) - {None}) != len(test.outputs):
        return False  # the If's results go to the carries, each to one
    result = loop.outputs[f]
    _inline(body, test, work, routes, f, kept=bool(result.uses()) or result.is_graph_output())
    for node in reversed(list(skip)):  # what the skipping branch read is read no more
        for k in range(len(node.inputs)):
            node.replace_input_with(k, None)
        skip.remove(node)
    # the Loop starts only when the flag allows (and its own condition, if it has one)
    begin = loop.inputs[2 + f]
    if loop.inputs[1] is not None:
        start = ir.Node("", "And", [loop.inputs[1], begin], num_outputs=1)
        start.outputs[0].dtype, start.outputs[0].shape = ir.DataType.BOOL, ir.Shape([])
        graph.insert_before(loop, start)
        begin = start.outputs[0]
    loop.replace_input_with(1, begin)
    return True


def _passes(value: ir.Value, source: ir.Value) -> bool:
    """``value`` is ``source`` or an Identity of it."""
    if value is source:
        return True
    node = value.producer()
    return node is not None and node.op_type == "Identity" and node.inputs[0] is source


def _flag(condition: ir.Value, body: ir.Graph) -> tuple[ir.Value | None, bool]:
    """The carried bool the If tests, and whether its then-branch is the one taken while
    the flag is false (the branch that must skip)."""
    carries = body.inputs[2:]
    if any(condition is c for c in carries):
        return (condition if condition.dtype == ir.DataType.BOOL else None), False
    node = condition.producer()
    if node is None or node.graph is not body:
        return None, False
    if node.op_type == "Not" and any(node.inputs[0] is c for c in carries):
        return node.inputs[0], True
    if node.op_type == "Equal":
        zero = constant(node.inputs[1])
        source = node.inputs[0].producer()
        if zero is None or zero.size != 1 or zero.reshape(-1)[0] != 0:
            return None, False
        value = node.inputs[0]
        if source is not None and source.op_type == "Cast" and source.graph is body:
            value = source.inputs[0]
        if any(value is c for c in carries) and value.dtype == ir.DataType.BOOL:
            return value, True
    return None, False


def _unchanged(out: ir.Value, given: ir.Value, is_flag: bool) -> bool:
    """A skipping branch's output for a carry: the carry as it came, or for the flag the
    false it must be while the branch is taken."""
    if out is given:
        return True
    node = out.producer()
    source = node.inputs[0] if node is not None and node.op_type == "Identity" else out
    if source is given:
        return True
    if is_flag:
        value = constant(source)
        return value is not None and value.size == 1 and not bool(np.asarray(value).reshape(-1)[0])
    return False


def _inline(body: ir.Graph, test: ir.Node, work: ir.Graph, routes: list, f: int, kept: bool):
    """The working branch's nodes take the If's place; its flag is the body's condition
    (and the flag's carry too, through an Identity, when ``kept``: read after the Loop)."""
    for node in list(work):
        work.remove(node)
        body.insert_before(test, node)
    for value in list(work.initializers.values()):
        work.initializers.pop(value.name)
        body.register_initializer(value)
    results, returned = list(work.outputs), set()
    work.outputs.clear()
    for j, k in enumerate(routes):
        if k is None:
            continue
        produced = results[k]
        own = produced.is_graph_input() or (
            produced.producer() is not None and produced.producer().graph is body
        )
        if not own or id(produced) in returned or (j == f and not kept):
            produced = _identity(body, test, produced)  # a body returns its own, once each
        returned.add(id(produced))
        body.outputs[1 + j] = produced
    flag = results[routes[f]]
    own = flag.is_graph_input() or (flag.producer() is not None and flag.producer().graph is body)
    body.outputs[0] = flag if own and id(flag) not in returned else _identity(body, test, flag)
    body.remove(test, safe=True)


def _identity(body: ir.Graph, before: ir.Node, value: ir.Value) -> ir.Value:
    node = ir.Node("", "Identity", [value], num_outputs=1)
    node.outputs[0].type = value.type
    node.outputs[0].shape = None if value.shape is None else ir.Shape(list(value.shape))
    body.insert_before(before, node)
    return node.outputs[0]
