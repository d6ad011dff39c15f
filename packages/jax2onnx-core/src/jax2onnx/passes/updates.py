"""``SinkIntoUpdatesPass``: work on values one branch of an ``If`` refreshes runs in it.

A Loop body that refreshes some carries now and then writes ``If(c, fresh, keep)``
whose keeping branch returns those carries as they came (diffrax's implicit
stages: the Jacobian's LU factors, made at a step's first implicit stage and
passed on by the others). What the body computes from such values alone (the
permutation replayed from the pivots, the factors' entries a substitution reads,
a Newton loop's starting flags) is the same at every step until the next
refresh. The pass moves that work into the refreshing branch and carries its
results:

* the work: nodes of the body whose operands are the If's kept results, values
  from outside the body, constants, or each other's results (no subgraphs, no
  random ops), reading at least one kept result or moved value;
* what the rest of the body reads of it becomes new carries: the refreshing
  branch computes it from its fresh results, the keeping branch returns it as it
  came (an Identity each), and the Loop starts it from the same nodes applied to
  the carries' starting values, placed before the Loop (folded when those are
  constants);
* only when at least :data:`MARGIN` more nodes move than carries are added, and
  only for Loops without scan outputs;
* a kept carry only the moved work read (and nobody after the Loop) goes, with
  its Identity in the keeping branch.

Exact: the same nodes on the same numbers, once per refresh instead of once per
step. By induction the new carry holds the moved nodes' results on the kept
carries at every step: at the start (computed from the starting values), after
a refresh (computed from the fresh values) and after a keep (passed on).
"""

from __future__ import annotations

from jax2onnx.passes.bodies import innermost_first_in, subgraphs
from jax2onnx.passes.constants import FoldConstantsPass
from jax2onnx.passes.fusion.match import new_constant
from jax2onnx.passes.loops import HoistLoopInvariantsPass, keep_carries
from jax2onnx.values.ir import ir

# nodes moved minus carries added, at least
MARGIN = 4
_RANDOM = frozenset(
    ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial")
    + ("Bernoulli", "Dropout")
)


class SinkIntoUpdatesPass(ir.passes.InPlacePass):
    """Move a body's work on an If's kept results into the refreshing branch (see the module)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = innermost_first_in(model, _visit)
        if modified:  # the starting values' copies of the work: out of outer loops, folded
            HoistLoopInvariantsPass()(model)
            FoldConstantsPass()(model)
        return ir.passes.PassResult(model, modified=modified)


def _visit(graph: ir.Graph, loop: ir.Node) -> bool:
    if loop.op_type != "Loop" or loop.domain not in ("", "ai.onnx"):
        return False
    body = loop.attributes["body"].as_graph() if "body" in loop.attributes else None
    carried = len(loop.inputs) - 2
    if body is None or len(loop.outputs) != carried:  # scan outputs follow the carries
        return False
    return any(
        node.op_type == "If" and node.domain in ("", "ai.onnx") and _sink(graph, loop, body, node)
        for node in list(body)
    )


def _branches(cond: ir.Node) -> tuple[ir.Graph, ir.Graph] | None:
    then, other = cond.attributes.get("then_branch"), cond.attributes.get("else_branch")
    if then is None or other is None:
        return None
    return then.as_graph(), other.as_graph()


def _kept(body: ir.Graph, cond: ir.Node, keep: ir.Graph, carried: int) -> dict[int, int]:
    """If output -> carry, for the carries the body returns as that output and ``keep``
    returns unchanged."""
    returned = {id(v): k for k, v in enumerate(body.outputs[1 : 1 + carried])}
    kept = {}
    for r, out in enumerate(cond.outputs):
        k = returned.get(id(out))
        if k is None:
            continue
        made = keep.outputs[r].producer()
        if made is not None and made.op_type == "Identity" and made.inputs[0] is body.inputs[2 + k]:
            kept[r] = k
    return kept


def _work(body: ir.Graph, cond: ir.Node, kept: dict[int, int]) -> list[ir.Node]:
    """The body's nodes computed from the kept results alone, in graph order."""
    inside = {id(v) for v in body.inputs} | {id(v) for n in body for v in n.outputs}
    derived = {id(cond.outputs[r]) for r in kept}
    work = []
    for node in body:
        if node is cond or subgraphs(node) or node.op_type in _RANDOM:
            continue
        if node.domain not in ("", "ai.onnx"):
            continue
        reads = [v for v in node.inputs if v is not None]
        if not any(id(v) in derived for v in reads):
            continue
        if all(id(v) in derived or v.const_value is not None or id(v) not in inside for v in reads):
            work.append(node)
            derived.update(id(v) for v in node.outputs)
    return work


def _sink(graph: ir.Graph, loop: ir.Node, body: ir.Graph, cond: ir.Node) -> bool:
    branches = _branches(cond)
    if branches is None:
        return False
    carried = len(loop.inputs) - 2
    for fresh, keep in (branches, branches[::-1]):
        kept = _kept(body, cond, keep, carried)
        work = _work(body, cond, kept) if kept else []
        moved = {id(n) for n in work}
        outputs = {id(v) for v in body.outputs}
        read = [
            v
            for n in work
            for v in n.outputs
            if id(v) in outputs or any(id(u.node) not in moved for u in v.uses())
        ]
        if len(work) - len(read) < MARGIN:
            continue
        _move(graph, loop, body, cond, fresh, keep, kept, work, read)
        _drop_dead(graph, loop, body, cond, keep, kept)
        return True
    return False


def _copy(
    nodes: list[ir.Node],
    given: dict[int, ir.Value],
    place: ir.Graph,
    before: ir.Node | None,
    local: dict[str, ir.Value],
) -> dict[int, ir.Value]:
    """Copies of ``nodes`` in ``place`` (before ``before``, else at the end), operands
    mapped by ``given`` (value id -> value) and each other; body constants in ``local``
    (name -> initializer) are stored anew in ``place`` when it cannot see them."""
    mapping = dict(given)
    for node in nodes:
        inputs = []
        for v in node.inputs:
            if v is not None and id(v) not in mapping and v.name in local and local[v.name] is v:
                mapping[id(v)] = new_constant(place, v.const_value.numpy(), v.name or "moved")
            inputs.append(None if v is None else mapping.get(id(v), v))
        copy = ir.Node(
            node.domain,
            node.op_type,
            inputs,
            [ir.Attr(a.name, a.type, a.value) for a in node.attributes.values()],
            num_outputs=len(node.outputs),
            version=node.version,
        )
        copy.metadata_props.update(node.metadata_props)
        for old, new in zip(node.outputs, copy.outputs, strict=True):
            new.type, new.shape = old.type, old.shape
            mapping[id(old)] = new
        if before is not None:
            place.insert_before(before, copy)
        else:
            place.append(copy)
    return mapping


def _move(graph, loop, body, cond, fresh, keep, kept, work, read) -> None:
    carried = len(loop.inputs) - 2
    local = dict(body.initializers)
    # the refreshing branch: the work on its fresh results, returned after them
    fresh_given = {id(cond.outputs[r]): fresh.outputs[r] for r in kept}
    fresh_map = _copy(work, fresh_given, fresh, None, {})
    # the Loop's starting values: the work on the kept carries' starting values
    start_given = {id(cond.outputs[r]): loop.inputs[2 + k] for r, k in kept.items()}
    start_map = _copy(work, start_given, graph, loop, local)
    moved = {id(node) for node in work}
    n = len(read)
    first = len(cond.outputs)
    cond.resize_outputs(first + n)
    loop.resize_inputs(len(loop.inputs) + n)
    loop.resize_outputs(carried + n)
    for j, value in enumerate(read):
        fresh.outputs.append(fresh_map[id(value)])
        passed = ir.Value(name=None, type=value.type, shape=value.shape)
        body.inputs.append(passed)
        held = ir.Node("", "Identity", [passed], num_outputs=1)
        held.outputs[0].type, held.outputs[0].shape = value.type, value.shape
        keep.append(held)
        keep.outputs.append(held.outputs[0])
        result = cond.outputs[first + j]
        result.type, result.shape = value.type, value.shape
        for use in list(value.uses()):
            if id(use.node) not in moved:
                use.node.replace_input_with(use.idx, result)
        for i, out in enumerate(body.outputs):
            if out is value:
                body.outputs[i] = result
        body.outputs.insert(1 + carried + j, result)
        loop.replace_input_with(2 + carried + j, start_map[id(value)])
        final = loop.outputs[carried + j]
        final.type, final.shape = value.type, value.shape
    body.remove(list(reversed(work)), safe=True)


def _drop_dead(graph, loop, body, cond, keep, kept) -> None:
    """The kept carries only the keeping branch still reads (to pass them on) and nobody
    reads after the Loop go, with their If outputs: the moved work was their reader."""
    carried = len(loop.inputs) - 2
    dead = {}
    for r, k in kept.items():
        passed = keep.outputs[r].producer()
        if (
            cond.outputs[r].uses()
            or sum(v is cond.outputs[r] for v in body.outputs) != 1
            or loop.outputs[k].uses()
            or loop.outputs[k].is_graph_output()
            or any(u.node is not passed for u in body.inputs[2 + k].uses())
        ):
            continue
        dead[r] = k
    if not dead:
        return
    gone = set(dead.values())
    passing = [keep.outputs[r].producer() for r in dead]
    keep_carries(graph, loop, [k for k in range(carried) if k not in gone])
    live = [r for r in range(len(cond.outputs)) if r not in dead]
    for branch in _branches(cond):
        returned = list(branch.outputs)
        branch.outputs[:] = [returned[r] for r in live]
    keep.remove(passing, safe=True)
    _replace_if(body, cond, live)


def _replace_if(body: ir.Graph, cond: ir.Node, live: list[int]) -> None:
    """``cond`` with only its outputs ``live`` (the branches already return just those)."""
    new = ir.Node(
        cond.domain,
        "If",
        list(cond.inputs),
        list(cond.attributes.values()),
        num_outputs=len(live),
        name=cond.name,
        metadata_props=dict(cond.metadata_props),
    )
    body.insert_before(cond, new)
    for r, value in zip(live, new.outputs, strict=True):
        old = cond.outputs[r]
        value.type, value.shape, name = old.type, old.shape, old.name
        old.replace_all_uses_with(value, replace_graph_outputs=True)
        old.name = None
        value.name = name
    cond.resize_outputs(0)
    body.remove(cond, safe=True)
