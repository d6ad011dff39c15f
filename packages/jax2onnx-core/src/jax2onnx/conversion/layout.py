"""Step 4b: channels-first graph inputs and outputs for a channels-last function.

``inputs_as_nchw`` / ``outputs_as_nchw`` name graph inputs and outputs (by
position or name) whose layout outside the model is (N, C, spatial...) while
the function computes in (N, spatial..., C). This step rewrites the lowered
model: such an input gets the channels-first shape and a ``Transpose`` to the
layout the graph reads; such an output is transposed back. The transpose
passes then merge these with the layout changes inside the graph. A complex
value keeps its trailing axis of real and imaginary parts in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jax2onnx.values.ir import ir


def to_nchw(shape: Sequence[Any], parts: bool = False) -> list[Any]:
    """Channels-last order -> channels-first: (N, *spatial, C) -> (N, C, *spatial).

    ``parts``: the last axis holds a complex value's parts and stays last.
    """
    shape = list(shape)
    if parts:
        return [*to_nchw(shape[:-1]), shape[-1]]
    return [shape[0], shape[-1], *shape[1:-1]]


def _to_nhwc_perm(rank: int, parts: bool = False) -> list[int]:
    if parts:
        return [*_to_nhwc_perm(rank - 1), rank - 1]
    return [0, *range(2, rank), 1]


def _transpose(value: ir.Value, perm: list[int], name: str) -> ir.Node:
    return ir.Node("", "Transpose", [value], attributes=[ir.AttrInt64s("perm", perm)], name=name)


def positions(
    argument: str,
    wanted: Sequence[int | str] | None,
    values: Sequence[ir.Value],
    complex_values: frozenset[int] = frozenset(),
) -> list[int]:
    """Indices named by ``inputs_as_nchw``/``outputs_as_nchw`` (positions or names)."""
    names = [v.name for v in values]
    found: list[int] = []
    for item in wanted or ():
        if isinstance(item, str):
            if item not in names:
                raise ValueError(f"{argument}: no graph input/output named {item!r}; have {names}")
            index = names.index(item)
        elif isinstance(item, int) and not isinstance(item, bool) and 0 <= item < len(names):
            index = item
        else:
            raise ValueError(f"{argument}: {item!r} is not a name or a position < {len(names)}")
        rank = len(values[index].shape) - (index in complex_values)
        if rank < 3:
            raise ValueError(
                f"{argument}: {names[index]!r} has rank {rank}; the NCHW adaptor needs "
                "(N, spatial..., C) with rank >= 3"
            )
        if index not in found:
            found.append(index)
    return found


def adapt_nchw(
    model: ir.Model,
    inputs_as_nchw: Sequence[int | str] | None,
    outputs_as_nchw: Sequence[int | str] | None,
    complex_inputs: frozenset[int] = frozenset(),
    complex_outputs: frozenset[int] = frozenset(),
) -> ir.Model:
    """Give the named inputs and outputs of ``model`` the channels-first layout.

    ``complex_inputs``/``complex_outputs``: positions of complex values, whose
    stored trailing axis of parts is not a channel axis.
    """
    graph = model.graph
    inputs = positions("inputs_as_nchw", inputs_as_nchw, list(graph.inputs), complex_inputs)
    outputs = positions("outputs_as_nchw", outputs_as_nchw, list(graph.outputs), complex_outputs)
    for i in inputs:
        inside = graph.inputs[i]
        rank, parts = len(inside.shape), i in complex_inputs
        outside = ir.Value(
            name=inside.name, type=inside.type, shape=ir.Shape(to_nchw(inside.shape, parts))
        )
        inside.name = f"{outside.name}_nhwc"
        node = ir.Node(
            "",
            "Transpose",
            [outside],
            attributes=[ir.AttrInt64s("perm", _to_nhwc_perm(rank, parts))],
            name=f"{outside.name}_to_nhwc",
        )
        transposed = node.outputs[0]
        transposed.name, transposed.type, transposed.shape = inside.name, inside.type, inside.shape
        ir.convenience.replace_all_uses_with(inside, transposed, replace_graph_outputs=True)
        graph.inputs[i] = outside
        if len(graph):
            graph.insert_before(graph[0], node)
        else:
            graph.append(node)
    for i in outputs:
        result = graph.outputs[i]
        rank, parts = len(result.shape), i in complex_outputs
        name = result.name
        result.name = f"{name}_nhwc"
        node = ir.Node(
            "",
            "Transpose",
            [result],
            attributes=[ir.AttrInt64s("perm", to_nchw(range(rank), parts))],
            name=f"{name}_to_nchw",
        )
        out = node.outputs[0]
        out.name, out.type, out.shape = name, result.type, ir.Shape(to_nchw(result.shape, parts))
        graph.append(node)
        graph.outputs[i] = out
    return model
