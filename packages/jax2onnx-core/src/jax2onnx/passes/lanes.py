"""``VectorizeLanesPass``: a stack of scalar computations becomes one computation on vectors.

Physics code written element by element (a quaternion product, a 3x3 matrix
product unrolled into nine sums, ``jnp.array([f(q[0]), f(q[1]), f(q[2])])``)
lowers to one ONNX node per scalar operation and a ``Concat`` of
``Unsqueeze``\\ d results. When the stacked values (the *lanes*) are computed
by the same expression tree, each lane on its own elements, the whole stack
is that tree once on vectors: the superword-level parallelism of vectorising
compilers, applied to the graph.

The pass starts at a ``Concat`` whose inputs are ``Unsqueeze(s_i, axis)`` along
the concatenation axis and walks the lanes ``s_i`` down together:

* lanes that are one value are that value, broadcast (a shared factor);
* lanes that are initializers are their stack, a new initializer;
* lanes that read elements of one tensor at constant positions
  (``Gather(x, k)``, ``Squeeze(Slice(x, k, k + 1))`` over one or more
  contiguous axes that sit where the stack's axis is) are one ``Gather`` of
  the positions (of ``x`` itself when they are all of it, in order);
* lanes made by one elementwise op with equal attributes are that op on the
  vectorised operands. Lanes of ``Add`` and ``Sub`` mixed are an ``Add`` of the
  subtrahends times a constant sign (``a - b`` and ``a + b * -1`` are the same
  floats, also for zeros and NaN); an ``Add``'s or ``Mul``'s operands may be
  swapped in some lanes (both are commutative bit for bit). An operand that
  is a scalar in lanes of higher rank is vectorised on its own and reshaped
  to broadcast along the stack's axis.

Anything else (ops that differ between lanes, shapes not known, other
broadcasting) leaves the stack as it is. Every vector op computes per element
exactly what its lane did, so the numbers are unchanged. A stack is rewritten
only when the nodes it makes are fewer than the nodes that go (the lanes'
nodes that nothing else reads, the ``Unsqueeze``\\ s and the ``Concat``); inner
stacks go first, so a matrix built row by row becomes vectors, then a matrix.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from jax2onnx.passes.bodies import nested_graphs
from jax2onnx.passes.fusion.match import ELEMENTWISE, initializer, ints
from jax2onnx.passes.identities import take_place
from jax2onnx.values.ir import ir

_ONNX = ("", "ai.onnx")
_COMMUTATIVE = frozenset(("Add", "Mul"))


class VectorizeLanesPass(ir.passes.InPlacePass):
    """Stacks of isomorphic scalar computations become vector computations."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        run = _Run(model.graph)
        for graph in [model.graph, *nested_graphs(model.graph)]:
            run.enter(graph)
            for concat in list(graph):
                if concat.graph is graph and concat.op_type == "Concat":
                    modified |= _Stack.rewrite(concat, run)
        if modified:  # a lane read out of a vector may be read before the stack was
            model.graph.sort()
        return ir.passes.PassResult(model, modified)


def _dims(value: ir.Value) -> tuple[int, ...] | None:
    """The static shape of ``value``, or None."""
    if value.shape is None or not all(isinstance(d, int) for d in value.shape):
        return None
    return tuple(value.shape)


def _onnx_node(value: ir.Value) -> ir.Node | None:
    node = value.producer()
    if node is None or node.domain not in _ONNX or len(node.outputs) != 1:
        return None
    return node


def _pick(value: ir.Value) -> tuple[ir.Value, int, int, np.ndarray] | None:
    """``(x, axis, count, positions)`` when ``value`` reads elements of ``x`` at constant
    positions: ``count`` contiguous axes from ``axis`` on are replaced by the array of
    their flat positions (the rest of ``x`` kept). ``Gather`` of a constant index,
    ``Squeeze(Slice(...))`` of one element over one or more axes, and a one-axis
    ``Slice`` with constant bounds read so."""
    node = _onnx_node(value)
    x = node.inputs[0] if node is not None and node.inputs else None
    dims = _dims(x) if x is not None else None
    if not dims:
        return None
    if node.op_type == "Gather" and len(node.inputs) == 2:
        index = node.inputs[1]
        if index is None or index.const_value is None or index.is_graph_input():
            return None
        axis = node.attributes.get_int("axis", 0) % len(dims)
        return (x, axis, 1, np.asarray(index.const_value.numpy(), np.int64) % dims[axis])
    if node.op_type == "Slice":
        bounds = _bounds(node, dims)
        if bounds is None or len(bounds[0]) != 1:
            return None
        (axis,), (start,), (stop,), (step,) = bounds
        positions = np.arange(start, stop, step, dtype=np.int64)
        return (x, axis, 1, positions) if positions.size else None
    if node.op_type != "Squeeze" or len(node.inputs) != 2 or x.producer() is None:
        return None
    sliced, squeezed = x.producer(), ints(node.inputs[1])
    source = sliced.inputs[0] if sliced.op_type == "Slice" and sliced.inputs else None
    dims = _dims(source) if source is not None else None
    bounds = _bounds(sliced, dims) if dims else None
    if bounds is None or squeezed is None:
        return None
    axes, starts, stops, _ = bounds
    if (
        axes != list(range(axes[0], axes[0] + len(axes)))
        or sorted(a % len(dims) for a in squeezed) != axes
    ):
        return None
    if any(stop != start + 1 for start, stop in zip(starts, stops, strict=True)):
        return None
    block = dims[axes[0] : axes[-1] + 1]
    return (source, axes[0], len(axes), np.asarray(np.ravel_multi_index(starts, block), np.int64))


def _bounds(node: ir.Node, dims: tuple) -> tuple[list, list, list, list] | None:
    """A Slice's constant ``(axes, starts, stops, steps)``, normalised and sorted by axis."""
    if node.op_type != "Slice" or node.domain not in _ONNX or len(node.inputs) < 3:
        return None
    starts, ends = ints(node.inputs[1]), ints(node.inputs[2])
    axes = ints(node.inputs[3]) if len(node.inputs) > 3 else list(range(len(starts or ())))
    steps = ints(node.inputs[4]) if len(node.inputs) > 4 else [1] * len(axes or ())
    if None in (starts, ends, axes, steps) or not len(starts) == len(ends) == len(axes) == len(
        steps
    ):
        return None
    picked = sorted(
        (a % len(dims), *slice(s, e, k).indices(dims[a % len(dims)]))
        for a, s, e, k in zip(axes, starts, ends, steps, strict=True)
    )
    if any(step != 1 and len(picked) > 1 for _, _, _, step in picked):
        return None
    return tuple(list(column) for column in zip(*picked, strict=True))


class _Run:
    """What one run of the pass keeps: constants made (by content), names taken, and for
    the graph at hand the nodes made (by op and inputs) and every node's place in it."""

    def __init__(self, root: ir.Graph):
        self.root, self.constants = root, {}
        self.taken = set(root.initializers)
        for graph in [root, *nested_graphs(root)]:
            self.taken.update(v.name for v in graph.inputs)
            self.taken.update(v.name for n in graph for v in n.outputs)

    def enter(self, graph: ir.Graph) -> None:
        self.made: dict[tuple, tuple] = {}
        self.order = {id(n): (i, 0) for i, n in enumerate(graph)}
        self.count = 0

    def constant(self, array: np.ndarray) -> ir.Value:
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self.constants:
            name = f"lanes_{len(self.constants)}"
            while name in self.taken:
                name += "_"
            self.taken.add(name)
            self.constants[key] = initializer(self.root, array, name)
        return self.constants[key]

    def insert(self, node: ir.Node, before: ir.Node) -> None:
        """Insert ``node`` before ``before``; it takes a place between its neighbours."""
        before.graph.insert_before(before, node)
        self.count += 1
        self.order[id(node)] = (self.order[id(before)][0] - 1, self.count)


class _Stack:
    """One Concat of Unsqueezed lanes: its plan, what it costs, what it frees."""

    def __init__(self, concat: ir.Node, run: _Run):
        self.concat, self.run = concat, run
        self.memo: dict[tuple, Any] = {}
        self.walked: dict[int, ir.Node] = {}  # lane nodes the plan replaces

    @classmethod
    def rewrite(cls, concat: ir.Node, run: _Run) -> bool:
        out = concat.outputs[0]
        dims = _dims(out)
        if dims is None or len(concat.inputs) < 2 or concat.domain not in _ONNX:
            return False
        axis = concat.attributes.get_int("axis", 0) % len(dims)
        lanes, unsqueezes = [], []
        for value in concat.inputs:
            node = _onnx_node(value) if value is not None else None
            if node is None or node.op_type != "Unsqueeze" or len(node.inputs) != 2:
                return False
            if ints(node.inputs[1]) not in ([axis], [axis - len(dims)]):
                return False
            lanes.append(node.inputs[0])
            unsqueezes.append(node)
        shape = dims[:axis] + dims[axis + 1 :]
        if len(concat.inputs) != dims[axis]:
            return False
        stack = cls(concat, run)
        plan = stack.vector(tuple(lanes), shape, axis)
        if plan is None or plan[0] == "uniform":
            return False
        count, kept = _footprint(plan)
        gain = stack.freed(unsqueezes, kept, set()) - count
        # the lanes' values read elsewhere too can be read out of the vector (a Gather each),
        # so that their own computations go
        extracted = stack.extracted(lanes, unsqueezes)
        redirected = {id(v) for v in extracted}
        extract_gain = stack.freed(unsqueezes, kept, redirected) - count - len(extracted)
        if max(gain, extract_gain) <= 0:
            return False
        vector = stack.emit(plan, {})
        if extract_gain > gain:
            for value in extracted:
                lane = ir.Node(
                    "",
                    "Gather",
                    [vector, run.constant(np.array(lanes.index(value), np.int64))],
                    attributes=[ir.AttrInt64("axis", axis)],
                    num_outputs=1,
                )
                run.insert(lane, concat)
                lane.outputs[0].shape, lane.outputs[0].type = value.shape, value.type
                ir.convenience.replace_all_uses_with(value, lane.outputs[0])
        return take_place(concat, vector)

    def extracted(self, lanes: list[ir.Value], unsqueezes: list[ir.Node]) -> list[ir.Value]:
        """The lanes the plan computes (not reads) that other nodes read too."""
        mine = {id(n) for n in unsqueezes}
        out = []
        for value in dict.fromkeys(lanes):
            node = value.producer()
            if node is None or id(node) not in self.walked or value.is_graph_output():
                continue
            if any(id(use.node) not in mine for use in value.uses()):
                out.append(value)
        return out

    # -- planning: nested tuples, nothing built until the plan pays -----------------------------
    def vector(self, lanes: tuple, shape: tuple, axis: int):
        """A plan of the stack of ``lanes`` (each of ``shape``) along ``axis``, or None."""
        key = (tuple(id(v) for v in lanes), shape, axis)
        if key not in self.memo:
            self.memo[key] = None  # set before the walk down: a re-entry finds no plan
            self.memo[key] = self._vector(lanes, shape, axis)
        return self.memo[key]

    def _vector(self, lanes: tuple, shape: tuple, axis: int):
        dtypes = {_dtype(v) for v in lanes}
        if any(_dims(v) != shape for v in lanes) or len(dtypes) != 1 or None in dtypes:
            return None
        first = lanes[0]
        if all(v is first for v in lanes):
            return ("uniform", first)
        if all(v.const_value is not None and not v.is_graph_input() for v in lanes):
            return ("const", np.stack([v.const_value.numpy() for v in lanes], axis=axis))
        picks = [_pick(v) for v in lanes]
        if all(p is not None for p in picks) and all(p[0] is picks[0][0] for p in picks):
            plan = self._gather(picks, axis)
            if plan is not None:
                return plan
        nodes = [_onnx_node(v) for v in lanes]
        if any(n is None for n in nodes):
            return _pack(lanes, axis)
        if all(n.op_type == "Unsqueeze" for n in nodes):
            plan = self._unsqueeze(nodes, shape, axis)
        elif all(n.op_type == "Gather" and len(n.inputs) == 2 for n in nodes):
            plan = self._gather_each(nodes, shape, axis)
        else:
            plan = self._op(nodes, shape, axis)
        return plan if plan is not None else _pack(lanes, axis)

    def _gather(self, picks, axis: int):
        """One read of ``x`` for lanes that read it at constant positions (or ``x`` itself)."""
        x, first, count = picks[0][:3]
        shapes = {p[3].shape for p in picks}
        if any(p[0] is not x or p[1:3] != (first, count) for p in picks) or len(shapes) != 1:
            return None
        if not first <= axis <= first + len(shapes.pop()):
            return None
        indices = np.stack([p[3] for p in picks], axis=axis - first)
        dims = _dims(x)
        whole = axis == first and indices.shape == (dims[first],)
        if count == 1 and whole and (indices == np.arange(dims[first])).all():
            return ("value", x)
        source = ("value", x)
        if count > 1:
            block = math.prod(dims[first : first + count])
            target = list(dims[:first]) + [block] + list(dims[first + count :])
            source = ("node", "Reshape", (source, ("ints", target)), ())
        attrs = (("axis", ir.AttributeType.INT, first),)
        return ("node", "Gather", (source, ("const", indices)), attrs)

    def _gather_each(self, nodes: list[ir.Node], shape: tuple, axis: int):
        """Lanes that read one constant index of their own tensors: a read of their stack."""
        index = nodes[0].inputs[1]
        if index is None or index.const_value is None or index.is_graph_input():
            return None
        positions = index.const_value.numpy()
        tensors = [n.inputs[0] for n in nodes]
        dims = _dims(tensors[0])
        if dims is None or any(_dims(t) != dims for t in tensors):
            return None
        at = nodes[0].attributes.get_int("axis", 0) % len(dims)
        for n in nodes[1:]:
            other = n.inputs[1]
            if other is None or other.const_value is None or other.is_graph_input():
                return None
            if n.attributes.get_int("axis", 0) % len(dims) != at:
                return None
            if not np.array_equal(other.const_value.numpy(), positions):
                return None
        width = positions.ndim
        if axis <= at:  # the stack's axis comes before the gathered one
            inner, at_vector = axis, at + 1
        elif axis >= at + width:
            inner, at_vector = axis - width + 1, at
        else:
            return None
        plan = self.vector(tuple(tensors), dims, inner)
        if plan is None or plan[0] == "uniform":
            return None
        for n in nodes:
            self.walked[id(n)] = n
        attrs = (("axis", ir.AttributeType.INT, at_vector),)
        return ("node", "Gather", (plan, ("const", positions)), attrs)

    def _op(self, nodes: list[ir.Node], shape: tuple, axis: int):
        kinds = {n.op_type for n in nodes}
        mixed = kinds == {"Add", "Sub"}
        op = "Add" if mixed else nodes[0].op_type
        if (len(kinds) != 1 and not mixed) or op not in ELEMENTWISE:
            return None
        arity = len(nodes[0].inputs)
        attrs = _attributes(nodes[0])
        if any(len(n.inputs) != arity or _attributes(n) != attrs for n in nodes):
            return None
        if any(v is None for n in nodes for v in n.inputs):
            return None
        operands = [[n.inputs[k] for n in nodes] for k in range(arity)]
        if arity == 2:
            operands = _aligned(operands, [n.op_type in _COMMUTATIVE for n in nodes])
        plans = []
        for column in operands:
            plan = self._operand(tuple(column), shape, axis)
            if plan is None:
                return None
            plans.append(plan)
        if all(p[0] == "uniform" for p in plans):
            return None  # lanes alike in every operand are one value; CSE merges those
        plans = [self._broadcast(p, shape, axis) for p in plans]
        if mixed:
            signs = np.array([-1 if n.op_type == "Sub" else 1 for n in nodes])
            dtype = _dtype(nodes[0].inputs[1])
            if not (np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.signedinteger)):
                return None
            signs = signs.astype(dtype).reshape((-1,) + (1,) * (len(shape) - axis))
            plans[1] = ("node", "Mul", (plans[1], ("const", signs)), ())
        for n in nodes:
            self.walked[id(n)] = n
        return ("node", op, tuple(plans), attrs)

    def _operand(self, column: tuple, shape: tuple, axis: int):
        """Lanes of one shape that broadcasts to the lane shape (numpy rules, aligned right)."""
        own = _dims(column[0])
        if own is None or any(_dims(v) != own for v in column) or len(own) > len(shape):
            return None
        lead = len(shape) - len(own)
        if any(d not in (1, s) for d, s in zip(own, shape[lead:], strict=True)):
            return None
        if axis >= lead:
            return self.vector(column, own, axis - lead)
        plan = self.vector(column, own, 0)  # the stack's axis falls before the lanes' own
        if plan is None or plan[0] == "uniform":
            return plan
        target = [len(column)] + [1] * (lead - axis) + list(own)
        if plan[0] == "const":
            return ("const", plan[1].reshape(target))
        return ("node", "Reshape", (plan, ("ints", target)), ())

    def _broadcast(self, plan, shape: tuple, axis: int):
        """A value all lanes share, with a unit axis where the stack's axis falls in it."""
        if plan[0] != "uniform":
            return plan
        at = axis - (len(shape) - len(_dims(plan[1])))
        if at <= 0:
            return plan
        return ("node", "Unsqueeze", (plan, ("ints", [at])), ())

    def _unsqueeze(self, nodes: list[ir.Node], shape: tuple, axis: int):
        """Lanes that are ``Unsqueeze(s_i, axes)`` alike: the stack of ``s_i``, unsqueezed."""
        rank = len(shape)
        axes = [ints(n.inputs[1]) if len(n.inputs) == 2 else None for n in nodes]
        if axes[0] is None or any(a != axes[0] for a in axes):
            return None
        axes = sorted(a % rank for a in axes[0])
        inner = tuple(d for i, d in enumerate(shape) if i not in axes)
        plan = self.vector(
            tuple(n.inputs[0] for n in nodes), inner, axis - sum(a < axis for a in axes)
        )
        if plan is None or plan[0] == "uniform":
            return None
        for n in nodes:
            self.walked[id(n)] = n
        return ("node", "Unsqueeze", (plan, ("ints", [a + (a >= axis) for a in axes])), ())

    # -- cost and emission ---------------------------------------------------------------
    def freed(self, unsqueezes: list[ir.Node], kept: set[int], redirected: set[int]) -> int:
        """How many nodes go: the Concat, its Unsqueezes, and lane nodes read by nothing
        else and whose values the plan does not read (``kept``); readers of ``redirected``
        values will read them elsewhere."""
        dead = {id(self.concat)}
        candidates = {id(n): n for n in unsqueezes} | self.walked
        order = self.run.order
        for node in sorted(candidates.values(), key=lambda n: order[id(n)], reverse=True):
            outs = node.outputs
            if any(v.is_graph_output() or id(v) in kept for v in outs):
                continue
            if all(id(v) in redirected or id(u.node) in dead for v in outs for u in v.uses()):
                dead.add(id(node))
        return len(dead)

    def emit(self, plan, built: dict[int, ir.Value]) -> ir.Value:
        if id(plan) in built:
            return built[id(plan)]
        kind = plan[0]
        if kind in ("value", "uniform"):
            value = plan[1]
        elif kind in ("const", "ints"):
            array = np.array(plan[1], np.int64 if kind == "ints" else None, order="C")
            value = self.run.constant(array)
        else:
            _, op, args, attrs = plan
            inputs = [self.emit(a, built) for a in args]
            key = (op, tuple(id(v) for v in inputs), attrs)
            made = self.run.made
            if key in made and made[key][1] == inputs:
                value = made[key][0]
            else:
                node = ir.Node(
                    "",
                    op,
                    inputs,
                    attributes=[ir.Attr(n, t, v) for n, t, v in attrs] if attrs else (),
                    num_outputs=1,
                )
                self.run.insert(node, self.concat)
                value = node.outputs[0]
                made[key] = (value, inputs)  # the inputs held: their ids stay theirs
                _type_output(node)
        built[id(plan)] = value
        return value


def _pack(lanes: tuple, axis: int):
    """Lanes that share no structure, stacked as they are (``Unsqueeze`` each, ``Concat``)."""
    axes = ("ints", [axis])
    parts = tuple(("node", "Unsqueeze", (("value", v), axes), ()) for v in lanes)
    return ("node", "Concat", parts, (("axis", ir.AttributeType.INT, axis),))


def _footprint(plan) -> tuple[int, set[int]]:
    """The nodes a plan makes and the ids of the existing values it reads."""
    nodes, kept, seen = set(), set(), set()
    stack = [plan]
    while stack:
        step = stack.pop()
        if id(step) in seen:
            continue
        seen.add(id(step))
        if step[0] in ("value", "uniform"):
            kept.add(id(step[1]))
        elif step[0] == "node":
            nodes.add((step[1], id(step)))
            stack.extend(step[2])
    return len(nodes), kept


def _attributes(node: ir.Node) -> tuple:
    """Attributes as comparable ``(name, type, value)`` triples (Concat-free ops have no graphs)."""
    out = []
    for name in sorted(node.attributes):
        attr = node.attributes[name]
        value = attr.value
        out.append((name, attr.type, tuple(value) if isinstance(value, list | tuple) else value))
    return tuple(out)


def _aligned(operands: list[list[ir.Value]], swappable: list[bool]) -> list[list[ir.Value]]:
    """Swap a commutative op's operands in the lanes whose order differs from the first lane's."""

    def key(v: ir.Value) -> str:
        node = v.producer()
        if v.const_value is not None:
            return "const"
        return "?" if node is None else node.op_type

    left, right = operands
    first = (key(left[0]), key(right[0]))
    if first[0] == first[1]:
        return operands
    for i in range(1, len(left)):
        if swappable[i] and (key(right[i]), key(left[i])) == first:
            left[i], right[i] = right[i], left[i]
    return [left, right]


def _dtype(value: ir.Value) -> np.dtype | None:
    if value.type is None or value.dtype is None:
        return None
    try:
        return np.dtype(value.dtype.numpy())
    except (TypeError, ValueError):
        return None


def _type_output(node: ir.Node) -> None:
    """Shape and dtype of a new node's output, by broadcasting (shape ops read their targets)."""
    out, inputs = node.outputs[0], node.inputs
    if node.op_type == "Gather":
        x, index = inputs
        axis = node.attributes.get_int("axis", 0)
        dims = list(x.shape)
        out.shape = ir.Shape(dims[:axis] + list(index.shape) + dims[axis + 1 :])
        out.type = x.type
        return
    if node.op_type in ("Reshape", "Unsqueeze"):
        x, target = inputs
        ints = [int(v) for v in target.const_value.numpy().reshape(-1)]
        if node.op_type == "Unsqueeze":
            dims = list(x.shape)
            for a in sorted(i % (len(dims) + len(ints)) for i in ints):
                dims.insert(a, 1)
            ints = dims
        out.shape, out.type = ir.Shape(ints), x.type
        return
    if node.op_type == "Concat":
        axis = node.attributes.get_int("axis", 0)
        dims = list(inputs[0].shape)
        dims[axis] = sum(v.shape[axis] for v in inputs)
        out.shape, out.type = ir.Shape(dims), inputs[0].type
        return
    ranks = [list(v.shape) for v in inputs]
    width = max(len(s) for s in ranks)
    dims = []
    for k in range(width):
        sizes = [s[k - width + len(s)] for s in ranks if k - width + len(s) >= 0]
        dims.append(max(sizes))
    out.shape = ir.Shape(dims)
    if node.op_type in (
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "And",
        "Or",
        "Xor",
        "Not",
        "IsNaN",
        "IsInf",
    ):
        out.type = ir.TensorType(ir.DataType.BOOL)
    elif node.op_type == "Cast":
        out.type = ir.TensorType(ir.DataType(node.attributes.get_int("to")))
    elif node.op_type == "Where":
        out.type = inputs[1].type
    else:
        out.type = inputs[0].type
