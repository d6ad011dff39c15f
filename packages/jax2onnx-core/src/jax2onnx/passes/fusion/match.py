"""A small matcher for fusion rewrites on an ``onnx_ir`` graph.

A rewrite starts from an anchor node (the last node of the pattern), walks up
through producers with :func:`producer`, collects every node it walks through
in a :class:`Match`, and, when the whole pattern is found, calls
:meth:`Match.replace` with the nodes computing the same value. ``replace``
refuses (and the rewrite does nothing) when a value computed inside the
pattern is also read outside it: fusing would then compute it twice.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from jax2onnx.values.ir import ir

DEFAULT_DOMAINS = ("", "ai.onnx")


# ONNX ops that compute each output element from the elements of their (broadcast)
# inputs at the same place
ELEMENTWISE = frozenset(
    (
        "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Neg", "Abs", "Sqrt",
        "Reciprocal", "Exp", "Log", "Sin", "Cos", "Tan", "Tanh", "Sinh", "Cosh", "Asin", "Acos",
        "Atan", "Asinh", "Acosh", "Atanh", "Sigmoid", "Erf", "Floor", "Ceil", "Round", "Sign",
        "Relu", "Softplus", "Where", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
        "And", "Or", "Xor", "Not", "IsNaN", "IsInf", "Cast", "Identity", "BitwiseAnd",
        "BitwiseOr", "BitwiseXor", "BitwiseNot", "BitShift",
    )
)  # fmt: skip


def producer(value: ir.Value | None, *op_types: str) -> ir.Node | None:
    """The node computing ``value``, when it is one of ``op_types`` of the ONNX domain."""
    if value is None:
        return None
    node = value.producer()
    if node is None or node.domain not in DEFAULT_DOMAINS or node.op_type not in op_types:
        return None
    return node


def constant(value: ir.Value | None) -> np.ndarray | None:
    """The value as a NumPy array when it is an initializer or a ``Constant``'s output."""
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    node = producer(value, "Constant")
    if node is not None and "value" in node.attributes:
        return node.attributes["value"].as_tensor().numpy()
    return None


def ints(value: ir.Value | None) -> list[int] | None:
    """A constant integer tensor as a flat list (an initializer or a ``Constant``'s output;
    not a graph input, whose stored value a caller may override)."""
    if value is None or value.is_graph_input():
        return None
    array = constant(value)
    return None if array is None else [int(v) for v in np.asarray(array).reshape(-1)]


def scalar(value: ir.Value | None) -> float | None:
    """The value as a Python float when it is a constant holding one number."""
    array = constant(value)
    if array is None or array.size != 1 or array.dtype.kind not in "fiu":
        return None
    return float(array.reshape(()))


def is_scalar(value: ir.Value | None, number: float, *, rtol: float = 0.0) -> bool:
    """Whether ``value`` is a constant equal to ``number`` (within ``rtol``)."""
    found = scalar(value)
    return found is not None and abs(found - number) <= rtol * abs(number)


def int_attr(node: ir.Node, name: str, default: int) -> int:
    attribute = node.attributes.get(name)
    return default if attribute is None else attribute.as_int()


def operands(node: ir.Node) -> list[tuple[ir.Value, ir.Value]]:
    """The inputs of a commutative binary node in both orders."""
    a, b = node.inputs[0], node.inputs[1]
    return [(a, b), (b, a)]


def static_shape(value: ir.Value | None) -> tuple[int, ...] | None:
    """The value's shape when every dimension is a known integer."""
    if value is None or value.shape is None:
        return None
    dims = tuple(value.shape)
    if not all(isinstance(d, int) for d in dims):
        return None
    return dims


def rank(value: ir.Value | None) -> int | None:
    if value is None or value.shape is None:
        return None
    return len(value.shape)


def reduced_axes(node: ir.Node, rank_of_input: int) -> tuple[int, ...] | None:
    """The non-negative axes a Reduce* node reduces (axes as input, opset >= 18, or attribute)."""
    axes: Any = None
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = constant(node.inputs[1])
        if axes is None:
            return None
    elif "axes" in node.attributes:
        axes = node.attributes["axes"].as_ints()
    if axes is None:
        return tuple(range(rank_of_input))  # no axes: all of them
    return tuple(sorted(int(a) % rank_of_input for a in np.asarray(axes).reshape(-1)))


class Match:
    """The nodes of one pattern, gathered while the rewrite walks up from its anchor."""

    def __init__(self, graph: ir.Graph, anchor: ir.Node) -> None:
        self.graph = graph
        self.anchor = anchor
        self.nodes: list[ir.Node] = [anchor]

    def take(self, *nodes: ir.Node | None) -> bool:
        """Add nodes to the pattern; ``False`` when one is missing (the pattern fails)."""
        if any(node is None or node.graph is not self.graph for node in nodes):
            return False  # missing, or in an enclosing graph (a body reads it from there)
        for node in nodes:
            if all(node is not taken for taken in self.nodes):
                self.nodes.append(node)
        return True

    def closed(self) -> bool:
        """Whether only the anchor's output is read outside the pattern."""
        inside = {id(node) for node in self.nodes}
        outputs = {id(v) for v in self.graph.outputs}
        for node in self.nodes:
            for value in node.outputs:
                if node is self.anchor:
                    continue
                if id(value) in outputs:
                    return False
                if any(id(use.node) not in inside for use in value.uses()):
                    return False
        return True

    def replace(self, new_nodes: Sequence[ir.Node], result: ir.Value) -> bool:
        """Put ``new_nodes`` in place of the pattern; ``result`` takes the anchor output's
        uses and name. ``False`` (nothing changes) when the pattern is not closed."""
        if not self.closed():
            return False
        old = self.anchor.outputs[0]
        for node in new_nodes:  # the fused op comes from the pattern's last equation
            if not node.metadata_props and self.anchor.metadata_props:
                node.metadata_props.update(self.anchor.metadata_props)
        result.dtype = result.dtype or old.dtype
        if result.shape is None:
            result.shape = old.shape
        self.graph.insert_before(self.anchor, list(new_nodes))
        ir.convenience.replace_all_uses_with(old, result, replace_graph_outputs=True)
        name = old.name
        self.graph.remove(_consumers_first(self.nodes), safe=True)
        result.name = name
        return True


def _consumers_first(nodes: Iterable[ir.Node]) -> list[ir.Node]:
    """``nodes`` ordered so that each comes before the nodes computing its inputs."""
    nodes = list(nodes)
    inside = {id(n): n for n in nodes}
    ordered: list[ir.Node] = []
    seen: set[int] = set()

    def visit(node: ir.Node) -> None:  # post-order over consumers inside the pattern
        if id(node) in seen:
            return
        seen.add(id(node))
        for value in node.outputs:
            for use in value.uses():
                if id(use.node) in inside:
                    visit(use.node)
        ordered.append(node)

    for node in nodes:
        visit(node)
    return ordered


def new_constant(graph: ir.Graph, array: np.ndarray, hint: str) -> ir.Value:
    """A new initializer holding ``array``, named after ``hint`` (a name not yet taken)."""
    taken = set(graph.initializers) | {v.name for n in graph for v in n.outputs}
    name = f"{hint}_fused"
    for k in itertools.count(1):
        if name not in taken:
            break
        name = f"{hint}_fused_{k}"
    return initializer(graph, array, name)


def initializer(graph: ir.Graph, array: np.ndarray, name: str) -> ir.Value:
    """Register ``array`` as ``graph``'s initializer ``name`` (a name the caller chose free)."""
    array = np.require(array, requirements="C")  # a 0-d array stays 0-d
    value = ir.Value(
        name=name,
        shape=ir.Shape(array.shape),
        type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
        const_value=ir.tensor(array, name=name),
    )
    graph.register_initializer(value)
    return value


def node(op_type: str, inputs: Sequence[ir.Value | None], **attributes: Any) -> ir.Node:
    """A one-output ONNX node (``None`` attributes are left out)."""
    kept = {k: v for k, v in attributes.items() if v is not None}
    return ir.Node(
        "", op_type, list(inputs), attributes=ir.convenience.convert_attributes(kept), num_outputs=1
    )
