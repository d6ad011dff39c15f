"""``LiftScalarsPass``: scalars read out of a vector and stacked back stay one-element vectors.

Code written element by element (a right-hand side ``jnp.array([f0(y), f1(y),
f2(y)])``, a row of a triangular solve written into a vector, a step size
read out of a carried array) lowers to ``Squeeze``/``Gather`` of a scalar,
scalar arithmetic, and ``Unsqueeze`` before the stack: two reshaping nodes
per element that XLA never runs but ONNX Runtime does, once per loop step.
ONNX Runtime also fuses scalar ``Gather``\\ s of one tensor into a ``Split``
plus one ``Squeeze`` per element, which is more nodes, not fewer.

The pass keeps a leading axis of size 1 on such scalars instead (*lifts*
them). A value of shape ``s`` is lifted to ``[1, *s]``:

* sources: ``Squeeze(x, [0])`` (it goes, its readers read ``x``), a
  ``Gather`` on axis 0 by a constant scalar (it gathers by ``[k]``), a
  reduction over axis 0 without ``keepdims`` (it keeps them);
* elementwise ops whose lifted operand had the result's rank give a lifted
  result; an operand of lower rank broadcasts as before (the extra 1 meets
  a dimension the operand was broadcast along anyway), so the result is
  unchanged. So does ``Gather`` on axis 0 by a lifted index, a ``MatMul``
  whose left operand is lifted (right operand of rank at most 2, or a
  batch no shorter) and ``Reshape`` to a constant target (same elements; a ``0`` in the target
  would copy a dimension that moved, so such a ``Reshape`` is a boundary);
* sinks: ``Unsqueeze(v, [0])`` of a lifted ``v`` is ``v`` and goes.

Any other reader (a ``Concat``, a ``Loop`` or ``If``, a graph output, a
body that captures the value) reads a ``Squeeze`` of the lifted value. A
connected set of lifted values is rewritten only when the nodes that go (the
``Squeeze`` sources and ``Unsqueeze`` sinks) outnumber the ``Squeeze``\\ s it
adds. Every element is computed by the same op on the same numbers, so the
results are unchanged bit for bit. Runs in every graph of the model.
"""

from __future__ import annotations

import numpy as np

from jax2onnx.passes.bodies import nested_graphs
from jax2onnx.passes.fusion.canonical import shape_of
from jax2onnx.passes.fusion.match import ELEMENTWISE, ints, new_constant
from jax2onnx.values.ir import ir

_ONNX = ("", "ai.onnx")
_REDUCTIONS = frozenset(
    (
        "ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1",
        "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
    )
)  # fmt: skip


class LiftScalarsPass(ir.passes.InPlacePass):
    """Keep a leading unit axis on scalar chains between a read and a stack (module docstring)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        indices: dict[tuple, ir.Value] = {}  # one initializer per index [k] and for axes [0]
        for graph in [model.graph, *nested_graphs(model.graph)]:
            modified |= _Lift(graph, model.graph, indices).run()
        if modified:
            model.graph.sort()
        return ir.passes.PassResult(model, modified)


def _rank(value: ir.Value | None) -> int | None:
    """The value's rank, worked out from its producer when a lowering left it unrecorded."""
    shape = shape_of(value)
    return None if shape is None else len(shape)


def _record(value: ir.Value, dims: tuple) -> None:
    """Record a shape on a value whose element type is known (ONNX stores no shape
    without a type; ONNX Runtime infers what is left unrecorded)."""
    if value.type is not None:
        value.shape = ir.Shape(list(dims))


class _Lift:
    """One graph: find the liftable values, group them, rewrite the groups that pay."""

    def __init__(self, graph: ir.Graph, root: ir.Graph, indices: dict[tuple, ir.Value]):
        self.graph, self.root, self.indices = graph, root, indices
        self.parent: dict[ir.Value, ir.Value] = {}  # union-find over lifted values
        self.sources: dict[ir.Value, str] = {}  # value -> "squeeze" | "gather" | "reduce"
        self.sinks: list[tuple[ir.Node, ir.Value]] = []  # Unsqueeze(v, [0]) and its v
        self.boundary: dict[ir.Value, list[tuple[ir.Node | None, int]]] = {}

    def run(self) -> bool:
        work = [v for node in self.graph if (v := self._source(node)) is not None]
        for value in work:
            self.parent.setdefault(value, value)
        seen = set(work)
        while work:
            value = work.pop()
            for lifted in self._readers(value):
                self._union(value, lifted)
                if lifted not in seen:
                    seen.add(lifted)
                    work.append(lifted)
        groups: dict[ir.Value, list[ir.Value]] = {}
        for value in self.parent:
            groups.setdefault(self._find(value), []).append(value)
        # a Squeeze of a lifted value reads it as it was: its own group cannot go too
        blocked = {
            self._find(v)
            for v, kind in self.sources.items()
            if kind == "squeeze" and v.producer().inputs[0] in self.parent
        }
        modified = False
        for root, members in groups.items():
            if root in blocked:
                continue
            chosen = set(members)
            gain = sum(self.sources[v] == "squeeze" for v in members if v in self.sources)
            gain += sum(1 for _, v in self.sinks if v in chosen)
            if gain > sum(1 for v in members if self.boundary.get(v)):
                self._rewrite(members, chosen)
                modified = True
        return modified

    def _find(self, value: ir.Value) -> ir.Value:
        while self.parent[value] is not value:
            self.parent[value] = self.parent[self.parent[value]]
            value = self.parent[value]
        return value

    def _union(self, a: ir.Value, b: ir.Value) -> None:
        self.parent.setdefault(b, b)
        ra, rb = self._find(a), self._find(b)
        if ra is not rb:
            self.parent[rb] = ra

    def _source(self, node: ir.Node) -> ir.Value | None:
        """The output of ``node`` when it can keep a leading unit axis at no cost."""
        if node.domain not in _ONNX or len(node.outputs) != 1:
            return None
        out = node.outputs[0]
        x = node.inputs[0] if node.inputs else None
        if _rank(out) is None or _rank(x) is None or out.is_graph_output():
            return None
        kind = None
        if node.op_type == "Squeeze" and len(node.inputs) == 2:
            axes = ints(node.inputs[1])
            if axes is not None and len(axes) == 1 and axes[0] % _rank(x) == 0:
                kind = "squeeze" if shape_of(x)[0] == 1 else None
        elif node.op_type == "Gather" and _rank(x) >= 1 and len(node.inputs) == 2:
            index = ints(node.inputs[1])
            axis = node.attributes.get_int("axis", 0) % _rank(x)
            if axis == 0 and index is not None and _rank(node.inputs[1]) == 0:
                kind = "gather"
        elif node.op_type in _REDUCTIONS or node.op_type in ("ArgMax", "ArgMin"):
            kind = "reduce" if self._reduces_leading(node) else None
        if kind is None:
            return None
        self.sources[out] = kind
        return out

    @staticmethod
    def _reduces_leading(node: ir.Node) -> bool:
        x = node.inputs[0]
        if node.attributes.get_int("keepdims", 1) != 0 or _rank(x) == 0:
            return False
        if node.op_type in ("ArgMax", "ArgMin"):
            return node.attributes.get_int("axis", 0) % _rank(x) == 0
        if "axes" in node.attributes:  # before opset 18
            axes = list(node.attributes["axes"].as_ints())
            return [a % _rank(x) for a in axes] == [0] or axes == [] and _rank(x) == 1
        if len(node.inputs) < 2 or node.inputs[1] is None:
            empty_is_all = node.attributes.get_int("noop_with_empty_axes", 0) == 0
            return empty_is_all and _rank(x) == 1
        axes = ints(node.inputs[1])
        return axes is not None and [a % _rank(x) for a in axes] == [0]

    def _readers(self, value: ir.Value) -> list[ir.Value]:
        """The outputs that become lifted when ``value`` is; records sinks and boundary reads."""
        lifted: list[ir.Value] = []
        boundary = self.boundary.setdefault(value, [])
        if value.is_graph_output():
            boundary.append((None, -1))
        rank = _rank(value)
        for node, index in value.uses():
            kind = self._reader_kind(node, index, value, rank)
            if kind == "sink":
                self.sinks.append((node, value))
            elif kind == "lifts":
                lifted.append(node.outputs[0])
            elif kind == "boundary":
                boundary.append((node, index))
        return lifted

    def _reader_kind(self, node: ir.Node, index: int, value: ir.Value, rank: int) -> str:
        """``sink``, ``lifts`` (the output is lifted), ``free`` (unchanged) or ``boundary``."""
        if node.graph is not self.graph or node.domain not in _ONNX or len(node.outputs) != 1:
            return "boundary"
        out = node.outputs[0]
        out_rank = _rank(out)
        if out_rank is None or out.is_graph_output() and node.op_type == "Unsqueeze":
            return "boundary"
        op = node.op_type
        if op == "Unsqueeze" and index == 0 and len(node.inputs) == 2:
            axes = ints(node.inputs[1])
            return "sink" if axes is not None and axes == [0] or axes == [-out_rank] else "boundary"
        if op in ELEMENTWISE:
            return "lifts" if rank == out_rank else "free"
        if op == "Reshape" and index == 0:  # a 0 in the target copies a dimension: not free
            target = ints(node.inputs[1]) if len(node.inputs) > 1 else None
            zero_copies = node.attributes.get_int("allowzero", 0) == 0
            return (
                "free" if target is not None and not (zero_copies and 0 in target) else "boundary"
            )
        if op == "Gather" and index == 1 and _rank(node.inputs[0]) is not None:
            return (
                "lifts"
                if node.attributes.get_int("axis", 0) % _rank(node.inputs[0]) == 0
                else "boundary"
            )
        if op == "MatMul" and index == 0 and node.inputs[1] is not value:
            other = _rank(node.inputs[1])
            if other is None or rank == 0:
                return "boundary"
            if rank == 1:
                return "lifts" if other <= 2 else "boundary"
            return "lifts" if other <= rank else "free"
        return "boundary"

    def _rewrite(self, members: list[ir.Value], chosen: set[ir.Value]) -> None:
        squeezed: dict[ir.Value, ir.Value] = {}  # a Squeeze source's output -> its input
        shapes = {value: shape_of(value) for value in members}  # before any changes
        for value in members:
            kind = self.sources.get(value)
            node = value.producer()
            if kind == "squeeze":
                squeezed[value] = node.inputs[0]
                continue
            if kind == "gather":
                node.replace_input_with(1, self._constant("index", ints(node.inputs[1])[0]))
            elif kind == "reduce":
                node.attributes["keepdims"] = ir.AttrInt64("keepdims", 1)
            _record(value, (1, *shapes[value]))
        for value in members:
            lifted = squeezed.get(value, value)
            uses = self.boundary.get(value, [])
            if value in squeezed:  # the Squeeze stays for the boundary readers, if any
                for node, index in list(value.uses()):
                    if (node, index) not in uses:
                        node.replace_input_with(index, lifted)
                continue
            if uses:
                self._squeeze_for(value, shapes[value], uses)
        for unsqueeze, value in self.sinks:
            if value in chosen:
                lifted = squeezed.get(value, value)
                out = unsqueeze.outputs[0]
                ir.convenience.replace_all_uses_with(out, lifted)
                self.graph.remove(unsqueeze, safe=True)

    def _constant(self, hint: str, k: int) -> ir.Value:
        """The int64 initializer ``[k]`` (one per model and pass run)."""
        if (hint, k) not in self.indices:
            array = np.array([k], np.int64)
            self.indices[hint, k] = new_constant(self.root, array, hint)
        return self.indices[hint, k]

    def _squeeze_for(self, value: ir.Value, shape: tuple, uses: list[tuple[ir.Node | None, int]]):
        """The readers in ``uses`` read ``Squeeze(value, [0])`` (the value as it was)."""
        node = ir.Node("", "Squeeze", [value, self._constant("axes", 0)], num_outputs=1)
        out = node.outputs[0]
        out.type = value.type
        _record(out, shape)
        producer = value.producer()
        if producer is not None and producer.graph is self.graph:
            self.graph.insert_after(producer, node)
        else:
            self.graph.insert_before(next(iter(self.graph)), node)
        for reader, index in uses:
            if reader is None:  # a graph output: the Squeeze takes its name and place
                name = value.name
                for i, output in enumerate(self.graph.outputs):
                    if output is value:
                        self.graph.outputs[i] = out
                value.name, out.name = f"{name}_lifted", name
            else:
                reader.replace_input_with(index, out)
