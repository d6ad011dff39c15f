"""``expect_graph``: compact assertions about an exported graph.

Patterns are op paths, each op optionally with the shape of its first output:

| pattern | matches |
|---|---|
| ``"MatMul -> Add -> Tanh"`` | a chain where each node consumes the previous one's output |
| ``"Gemm:Bx10"`` | a Gemm whose output shape is (B, 10) |
| ``"Tanh:3"`` | a Tanh whose output shape is (3,) |
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import onnx


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _nodes(g)


def _shapes(model: onnx.ModelProto) -> dict[str, str]:
    graph = model.graph
    shapes: dict[str, str] = {}
    for info in [*graph.value_info, *graph.output, *graph.input]:
        if not info.type.HasField("tensor_type") or not info.type.tensor_type.HasField("shape"):
            continue
        dims = [
            d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?")
            for d in info.type.tensor_type.shape.dim
        ]
        shapes[info.name] = "x".join(dims)
    return shapes


def _parse(step: str, subs: Mapping[str, int]) -> tuple[str, str | None]:
    op, _, shape = step.strip().partition(":")
    if not shape:
        return op.strip(), None
    dims = []
    for d in shape.strip().split("x"):
        d = d.strip()
        dims.append(str(subs[d]) if d in subs else d)
    return op.strip(), "x".join(dims)


def _matches(node, shape, shapes) -> bool:
    return shape is None or (node.output and shapes.get(node.output[0]) == shape)


def _path_exists(model, steps, shapes) -> bool:
    nodes = list(_nodes(model.graph))
    consumers: dict[str, list[Any]] = {}
    for node in nodes:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    frontier = [n for n in nodes if n.op_type == steps[0][0] and _matches(n, steps[0][1], shapes)]
    for op, shape in steps[1:]:
        nxt = []
        for node in frontier:
            for out in node.output:
                for consumer in consumers.get(out, ()):
                    if consumer.op_type == op and _matches(consumer, shape, shapes):
                        nxt.append(consumer)
        frontier = nxt
        if not frontier:
            return False
    return bool(frontier)


def op_counts(model: onnx.ModelProto) -> dict[str, int]:
    """How many nodes of each op type the model has, subgraphs and functions included."""
    counts: dict[str, int] = {}
    for node in _nodes(model.graph):
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    for function in model.functions:
        for node in function.node:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def _used_names(graph: onnx.GraphProto) -> set[str]:
    used = {name for node in _nodes(graph) for name in node.input}
    used.update(o.name for o in graph.output)
    return used


def describe(model: onnx.ModelProto) -> str:
    """The main graph's nodes, one line each: ``Op(inputs) -> output:shape``."""
    shapes = _shapes(model)
    lines = []
    for node in model.graph.node:
        outs = ", ".join(f"{o}:{shapes.get(o, '?')}" for o in node.output)
        lines.append(f"  {node.op_type}({', '.join(node.input)}) -> {outs}")
    return "\n".join(lines)


def expect_graph(
    model: onnx.ModelProto,
    patterns: Sequence[str] = (),
    *,
    counts: Mapping[str, int] | None = None,
    no_unused_inputs: bool = False,
    input_shapes: Mapping[str, str] | None = None,
    subs: Mapping[str, int] | None = None,
) -> None:
    """Assert what an exported graph looks like.

    Nodes of subgraphs (``If``/``Loop``/``Scan`` bodies) count; a path is
    followed from node to consumer. Shapes are written ``Bx10`` (a symbol or
    a size per axis, ``?`` for an unknown one) and compared with the value
    info of the node's first output.

    Args:
        model: the exported model.
        patterns: op paths that must exist: ``"MatMul -> Add -> Tanh"`` (each
            node consumes the previous one's output), ``"Gemm:Bx10"`` (with
            the shape of the first output).
        counts: exact op counts, e.g. ``{"Transpose": 0}`` (functions'
            nodes included).
        no_unused_inputs: every graph input must be consumed.
        input_shapes: graph input (or output) name -> expected shape,
            ``"Bx3"``.
        subs: symbol name -> size, replaced in the patterns' shapes (for
            static variants of a case written with symbols).

    Raises:
        AssertionError: listing every expectation that failed, then the
            graph's nodes.

    Example:
        ```python
        import jax.numpy as jnp
        from jax2onnx import to_onnx
        from jax2onnx_testkit import expect_graph

        model = to_onnx(lambda x, w: jnp.tanh(x @ w), [("B", 4), (4, 2)])
        expect_graph(model, ["MatMul:Bx2 -> Tanh:Bx2"], counts={"Transpose": 0})
        ```
    """
    subs = dict(subs or {})
    shapes = _shapes(model)
    problems = []
    for pattern in patterns:
        steps = [_parse(s, subs) for s in pattern.split("->")]
        if not _path_exists(model, steps, shapes):
            problems.append(f"no path {pattern!r}")
    actual = op_counts(model)
    for op, expected in (counts or {}).items():
        if actual.get(op, 0) != expected:
            problems.append(f"expected {expected} {op} node(s), found {actual.get(op, 0)}")
    if no_unused_inputs:
        used = _used_names(model.graph)
        unused = [i.name for i in model.graph.input if i.name not in used]
        if unused:
            problems.append(f"unused graph inputs {unused}")
    for name, shape in (input_shapes or {}).items():
        have = shapes.get(name)
        if have is None or have.replace(" ", "") != shape.replace(" ", ""):
            problems.append(f"input/output {name!r} has shape {shapes.get(name)}, expected {shape}")
    if problems:
        raise AssertionError(
            "graph expectations failed: " + "; ".join(problems) + "\ngraph:\n" + describe(model)
        )
