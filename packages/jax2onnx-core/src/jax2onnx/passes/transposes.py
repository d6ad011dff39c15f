"""``FoldTransposesPass``: layout changes sink through layout-agnostic ops and cancel.

A model written channels-last (Haiku, Keras, Flax Linen with NHWC images)
converts each convolution and pooling to ONNX's channels-first op between two
Transposes. Between one convolution and the next sit ops that do not care
about the layout: BatchNorm arithmetic with per-channel constants,
activations, residual adds, padding, concatenation, a global mean. The pass
moves each Transpose down through such a *region* of ops (permuting their
constants and axis attributes) until it meets the Transpose of the next
convolution, where the two compose and, being inverses, vanish.

A region is grown from one Transpose: every consumer of a value in the
transposed layout joins when all its other inputs are in that layout too, are
constants (permuted once, here), or hold a single number. The change is made
only when it removes more Transposes than it adds (a value used outside the
region, or a graph output, needs the layout change back), so the pass never
makes a graph slower and always terminates.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from jax2onnx.passes.bodies import nested_graphs
from jax2onnx.passes.fusion.match import initializer
from jax2onnx.values.ir import ir

_UNARY = frozenset(
    "Abs Acos Acosh Asin Asinh Atan Atanh BitwiseNot Cast Ceil Celu Cos Cosh Elu Erf Exp "
    "Floor Gelu HardSigmoid HardSwish Identity IsInf IsNaN LeakyRelu Log Mish Neg Not "
    "Reciprocal Relu Round Selu Sigmoid Sign Sin Sinh Softplus Softsign Sqrt Tan Tanh "
    "ThresholdedRelu".split()
)
_BROADCAST = frozenset(
    "Add And BitShift BitwiseAnd BitwiseOr BitwiseXor Clip Div Equal Greater GreaterOrEqual "
    "Less LessOrEqual Max Mean Min Mod Mul Or Pow PRelu Sub Sum Where Xor".split()
)
_REDUCE = frozenset(
    "ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd "
    "ReduceSum ReduceSumSquare".split()
)
_AXIS = frozenset(("Concat", "Split", "Softmax", "LogSoftmax", "Hardmax"))
_UPWARD = 16  # how far a region may reach back up for an operand's producers


def _standard(node: ir.Node) -> bool:
    return node.domain in ("", "ai.onnx")


def _perm(node: ir.Node | None) -> list[int] | None:
    if node is None or node.op_type != "Transpose" or not _standard(node):
        return None
    attr = node.attributes.get("perm")
    return None if attr is None else list(attr.as_ints())


def _constant(value: ir.Value) -> np.ndarray | None:
    if value.const_value is None or value.is_graph_input():
        return None
    return value.const_value.numpy()


def _ones(value: ir.Value, rank: int) -> bool:
    """A value holding one number whose rank does not exceed ``rank``: the layout cannot matter."""
    shape = value.shape
    return (
        shape is not None
        and len(shape) <= rank
        and all(isinstance(d, int) and d == 1 for d in shape)
    )


def _int_attr(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return default if attr is None else attr.as_int()


@dataclasses.dataclass
class _Plan:
    """How one region node changes when its transposed inputs are replaced by their sources."""

    permute: list[int]  # input slots holding constants to permute
    axis: int | None = None  # the new value of the "axis" attribute
    pads: np.ndarray | None = None  # Pad: the new pads
    axes: list[int] | None = None  # Reduce*: the new axes
    fixed: list[int] | None = None  # Reduce* with keepdims=0: the output's transposition
    sliced: list[int] | None = None  # Slice: the new axes


class _Region:
    """The nodes a Transpose with permutation ``perm`` moves through, and what it costs."""

    def __init__(self, graph: ir.Graph, perm: list[int], opset: int) -> None:
        self.graph, self.perm, self.rank, self.opset = graph, perm, len(perm), opset
        self.inside: dict[int, ir.Value] = {}  # values in the transposed layout
        self.seeds: dict[int, ir.Node] = {}  # Transposes whose output is such a value
        self.nodes: dict[int, tuple[ir.Node, _Plan]] = {}
        self.failed: set[int] = set()

    def add_seed(self, node: ir.Node) -> None:
        out = node.outputs[0]
        self.seeds[id(out)] = node
        self.inside[id(out)] = out

    def _operand(
        self, value: ir.Value | None, slot: int, permute: list[int], new: list, depth: int
    ) -> bool:
        """Whether an input can stay as it is, be permuted, or be taken from its Transpose."""
        if value is None or id(value) in self.inside or _ones(value, self.rank):
            return True
        producer = value.producer()
        if (
            _perm(producer) == self.perm
            and producer.graph is self.graph
            and id(producer.inputs[0]) not in self.inside
        ):
            new.append(producer)
            return True
        data = _constant(value)
        if data is not None and data.ndim <= self.rank:
            permute.append(slot)
            return True
        # computed from other transposed values (the other branch of a residual add): join too
        return producer is not None and depth < _UPWARD and self.take(producer, depth + 1)

    def plan(self, node: ir.Node, depth: int = 0) -> tuple[_Plan, list[ir.Node]] | None:
        """The plan for ``node`` if it can compute in the untransposed layout."""
        if not _standard(node) or id(node) in self.nodes or node.graph is not self.graph:
            return None  # a node of a subgraph (If, Loop, Scan) reads the value as it is
        op, permute, seeds = node.op_type, [], []
        data = [0] if op in _REDUCE or op in ("Pad", "Split", "Slice") else range(len(node.inputs))
        if op not in _UNARY | _BROADCAST | _REDUCE | _AXIS | {"Pad", "Slice"}:
            return None
        if op in ("Softmax", "LogSoftmax", "Hardmax") and self.opset < 13:
            return None  # before opset 13 these flatten the trailing axes
        if op in _UNARY and len(node.inputs) != 1:
            return None
        for slot in data:
            if not self._operand(node.inputs[slot], slot, permute, seeds, depth):
                return None
        moved = [v for v in node.inputs if v is not None and id(v) in self.inside]
        if not seeds and not moved:
            return None  # only constants: nothing here is in the transposed layout
        if op == "Concat" and any(len(node.inputs[s].shape) != self.rank for s in permute):
            return None
        result = _Plan(permute)
        if op in _AXIS:
            default = 0 if op in ("Concat", "Split") else -1
            result.axis = self.perm[_int_attr(node, "axis", default) % self.rank]
        elif op == "Pad":
            if not self._pad(node, result):
                return None
        elif op == "Slice":
            if not self._slice(node, result):
                return None
        elif op in _REDUCE:
            if not self._reduce(node, result):
                return None
        return result, seeds

    def _pad(self, node: ir.Node, result: _Plan) -> bool:
        pads = _constant(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        if pads is None or len(node.inputs) > 3 and node.inputs[3] is not None:
            return False
        if pads.shape != (2 * self.rank,):
            return False
        new = np.empty_like(pads)
        for k, axis in enumerate(self.perm):
            new[axis], new[self.rank + axis] = pads[k], pads[self.rank + k]
        result.pads = new
        return True

    def _axes_input(self, node: ir.Node, slot: int) -> list[int] | None:
        """The axes an input lists (``[]`` when it is absent), or None when computed."""
        if len(node.inputs) <= slot or node.inputs[slot] is None:
            return []
        given = _constant(node.inputs[slot])
        return None if given is None else [int(a) % self.rank for a in given.reshape(-1)]

    def _slice(self, node: ir.Node, result: _Plan) -> bool:
        """Slice lists its axes: starts, ends and steps do not depend on the layout."""
        axes = self._axes_input(node, 3)
        if axes == []:  # absent: the first len(starts) axes
            starts = node.inputs[1].shape if len(node.inputs) > 1 else None
            if starts is None or len(starts) != 1 or not isinstance(starts[0], int):
                return False
            axes = list(range(starts[0]))
        if axes is None:
            return False
        result.sliced = [self.perm[a] for a in axes]
        return True

    def _reduce(self, node: ir.Node, result: _Plan) -> bool:
        axes = self._axes_input(node, 1)
        if axes is None:
            return False
        attr = node.attributes.get("axes")
        if not axes and attr is not None:  # before opset 18 (13 for ReduceSum): an attribute
            axes = [a % self.rank for a in attr.as_ints()]
        if not axes:
            if _int_attr(node, "noop_with_empty_axes", 0):
                result.axes = []
                return True
            axes = list(range(self.rank))
        result.axes = sorted(self.perm[a] for a in axes)
        if not _int_attr(node, "keepdims", 1):
            kept = [self.perm[k] for k in range(self.rank) if k not in axes]
            order = sorted(kept)
            result.fixed = [order.index(a) for a in kept]
        return True

    def grow(self, graph: ir.Graph) -> None:
        """Take in every consumer that can compute in the untransposed layout."""
        grown = True
        while grown:
            grown = False
            self.failed.clear()  # a node refused before may fit now that more values moved
            for value in list(self.inside.values()):
                for user, _ in value.uses():
                    if id(user) in self.nodes or _perm(user) is not None:
                        continue
                    grown = self.take(user, 0) or grown

    def take(self, node: ir.Node, depth: int) -> bool:
        """Add ``node`` to the region if it can compute in the untransposed layout."""
        if id(node) in self.failed:
            return False
        found = self.plan(node, depth)
        if found is None:
            self.failed.add(id(node))  # not again in this round: the search upwards branches
            return False
        plan, seeds = found
        self.nodes[id(node)] = (node, plan)
        for seed in seeds:
            self.add_seed(seed)
        if plan.fixed is None:
            for out in node.outputs:
                self.inside[id(out)] = out
        return True

    def _outside_uses(self, graph: ir.Graph, value: ir.Value) -> tuple[list, bool]:
        """Transposes reading ``value`` from outside, and whether anything else does."""
        transposes, other = [], any(v is value for v in graph.outputs)
        for user, _ in value.uses():
            if id(user) in self.nodes:
                continue
            if _perm(user) is not None and user.graph is graph:
                transposes.append(user)
            else:
                other = True
        return transposes, other

    def gain(self, graph: ir.Graph) -> int:
        """Transposes removed minus Transposes added by moving the layout change below."""
        if not self.nodes:
            return 0
        gain = len(self.seeds)
        for value in self.inside.values():
            transposes, other = self._outside_uses(graph, value)
            gain -= other
            for user in transposes:
                composed = [self.perm[i] for i in _perm(user)]
                gain += composed == sorted(composed)
        for _, plan in self.nodes.values():
            if plan.fixed is not None and plan.fixed != sorted(plan.fixed):
                gain -= 1
        return gain


class _Rewriter:
    """Applies a region's plan to the graph."""

    def __init__(self, graph: ir.Graph) -> None:
        self.graph = graph
        names = {v.name for v in graph.inputs} | set(graph.initializers)
        for node in graph:
            names.update(v.name for v in node.outputs)
        self.names = names
        self.counter = itertools.count()

    def fresh(self, base: str | None) -> str:
        while True:
            name = f"{base or 'value'}_t{next(self.counter)}"
            if name not in self.names:
                self.names.add(name)
                return name

    def constant(self, array: np.ndarray, base: str | None) -> ir.Value:
        return initializer(self.graph, array, self.fresh(base))

    def transpose_after(self, value: ir.Value, perm: list[int], shape) -> ir.Value:
        """A Transpose of ``value`` placed after its producer, taking over its name."""
        node = ir.Node("", "Transpose", [value], attributes=[ir.AttrInt64s("perm", perm)])
        out = node.outputs[0]
        out.dtype, out.shape = value.dtype, shape
        out.name, value.name = value.name, self.fresh(value.name)
        self.graph.insert_after(value.producer(), node)
        return out

    def apply(self, region: _Region) -> None:
        graph, perm = self.graph, region.perm
        inverse = [int(i) for i in np.argsort(perm)]
        # 1. region nodes read the Transposes' sources; constants and attributes are permuted
        for node, plan in region.nodes.values():
            for slot, value in enumerate(node.inputs):
                if value is not None and id(value) in region.seeds:
                    node.replace_input_with(slot, region.seeds[id(value)].inputs[0])
            for slot in plan.permute:
                data = _constant(node.inputs[slot])
                data = data.reshape((1,) * (region.rank - data.ndim) + data.shape)
                node.replace_input_with(
                    slot, self.constant(data.transpose(inverse), node.inputs[slot].name)
                )
            if plan.axis is not None:
                node.attributes["axis"] = ir.AttrInt64("axis", plan.axis)
            if plan.pads is not None:
                node.replace_input_with(1, self.constant(plan.pads, node.inputs[1].name))
            if plan.sliced is not None:
                if len(node.inputs) < 4:
                    node.resize_inputs(4)
                name = node.inputs[3].name if node.inputs[3] is not None else "axes"
                axes = np.asarray(plan.sliced, np.int64)
                node.replace_input_with(3, self.constant(axes, name))
            if plan.axes is not None and plan.axes:
                if len(node.inputs) > 1 and node.inputs[1] is not None:
                    axes = np.asarray(plan.axes, np.int64)
                    node.replace_input_with(1, self.constant(axes, node.inputs[1].name))
                else:
                    node.attributes["axes"] = ir.AttrInt64s("axes", plan.axes)
        # 2. values computed in the region now hold untransposed data
        for key, value in region.inside.items():
            if key in region.seeds:
                continue
            old_shape = value.shape
            if old_shape is not None:
                value.shape = ir.Shape([old_shape[i] for i in inverse])
            self._boundary(region, value, value, old_shape)
        for key, seed in region.seeds.items():
            self._boundary(region, region.inside[key], seed.inputs[0], None)
            if not seed.outputs[0].uses() and all(v is not seed.outputs[0] for v in graph.outputs):
                graph.remove(seed, safe=True)
        # 3. a reduction that drops axes gives its result in a new order
        for node, plan in region.nodes.values():
            if plan.fixed is None or plan.fixed == sorted(plan.fixed):
                continue
            out = node.outputs[0]
            old_shape = out.shape
            users = list(out.uses())
            was_output = [i for i, v in enumerate(graph.outputs) if v is out]
            if old_shape is not None:
                order = [int(i) for i in np.argsort(plan.fixed)]
                out.shape = ir.Shape([old_shape[i] for i in order])
            moved = self.transpose_after(out, plan.fixed, old_shape)
            for user, slot in users:
                user.replace_input_with(slot, moved)
            for i in was_output:
                graph.outputs[i] = moved

    def _boundary(self, region: _Region, value: ir.Value, source: ir.Value, shape) -> None:
        """Give the consumers outside the region what they read before."""
        graph, seed = self.graph, id(value) in region.seeds
        transposes, other = region._outside_uses(graph, value)
        skip = {id(u) for u in transposes}  # they will read the untransposed value
        users = [(u, s) for u, s in value.uses() if id(u) not in region.nodes and id(u) not in skip]
        was_output = [i for i, v in enumerate(graph.outputs) if v is value]
        for user in transposes:
            composed = [region.perm[i] for i in _perm(user)]
            user.replace_input_with(0, source)
            user.attributes["perm"] = ir.AttrInt64s("perm", composed)
            if composed == sorted(composed):
                _drop_identity(graph, user)
        if other and not seed:
            moved = self.transpose_after(value, region.perm, shape)
            for user, slot in users:
                user.replace_input_with(slot, moved)
            for i in was_output:
                graph.outputs[i] = moved


def _drop_identity(graph: ir.Graph, node: ir.Node) -> None:
    """Remove a Transpose that keeps the order of axes, where its result can be its input."""
    source, out = node.inputs[0], node.outputs[0]
    if all(v is not out for v in graph.outputs):
        ir.convenience.replace_all_uses_with(out, source)
        graph.remove(node, safe=True)
    elif _can_become_output(graph, source):
        name = out.name
        if source.shape is None:  # a graph output must carry its shape
            source.shape = out.shape
        ir.convenience.replace_all_uses_with(out, source, replace_graph_outputs=True)
        graph.remove(node, safe=True)
        source.name = name


def _can_become_output(graph: ir.Graph, value: ir.Value) -> bool:
    """A node result that is not already an input or output of the graph."""
    return (
        value.producer() is not None
        and not value.is_graph_input()
        and all(v is not value for v in graph.outputs)
    )


class FoldTransposesPass(ir.passes.InPlacePass):
    """Move Transposes below layout-agnostic ops; merge ``Transpose(Transpose(x))``.

    ``Transpose(Transpose(x, p1), p2)`` becomes ``Transpose(x, p1[p2])``, or
    ``x`` when that is the identity. Before merging, each Transpose moves
    down through the region of ops that can compute in the other layout
    (elementwise ops, with per-channel constants permuted; Pad, Concat,
    Split, Softmax, reductions), when that removes Transposes overall.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        opset = model.opset_imports.get("", 1)
        modified = self._merge(graph)
        for _ in range(len(graph)):
            if not self._sink(graph, opset):
                break
            modified = True
            self._merge(graph)
        for body in nested_graphs(graph):  # Loop/If bodies: pairs merge, nothing moves
            modified |= self._merge(body, nested=True)
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _sink(graph: ir.Graph, opset: int) -> bool:
        modified = False
        rewriter = None
        for node in list(graph):
            perm = _perm(node)
            if perm is None or node.graph is not graph:
                continue
            region = _Region(graph, perm, opset)
            region.add_seed(node)
            region.grow(graph)
            if region.gain(graph) > 0:
                rewriter = rewriter or _Rewriter(graph)
                rewriter.apply(region)
                modified = True
        return modified

    @staticmethod
    def _merge(graph: ir.Graph, *, nested: bool = False) -> bool:
        modified = False
        for node in list(graph):
            if node.graph is not graph:
                continue
            outer = _perm(node)
            inner_node = node.inputs[0].producer() if node.inputs[0] is not None else None
            inner = _perm(inner_node)
            if outer is None or inner is None:
                continue
            perm = [inner[i] for i in outer]
            if nested and perm == sorted(perm) and any(v is node.outputs[0] for v in graph.outputs):
                continue  # a body output must be the body's own value: the pair stays
            node.replace_input_with(0, inner_node.inputs[0])
            node.attributes["perm"] = ir.AttrInt64s("perm", perm)
            if perm == sorted(perm):
                _drop_identity(graph, node)
            modified = True
        return modified
