"""``DeduplicateWeightsPass``: equal initializers of any size become one."""

from __future__ import annotations

import numpy as np

from jax2onnx.passes.bodies import nested_graphs
from jax2onnx.values.ir import ir


class DeduplicateWeightsPass(ir.passes.InPlacePass):
    """Initializers equal in dtype, shape and every byte become one, whatever their size.

    onnx_ir's own pass compares the bytes of small tensors only (a copy of
    each); weights too can repeat (zero biases of a freshly built model, tied
    tables), and a Loop or If body's initializer equal to one of the main
    graph reads the main graph's (a body sees the enclosing scope). Candidates
    are grouped by a strided sample of at most 64 elements, so distinct weights
    cost a few bytes each; only tensors whose samples agree are compared in
    full, on views of their arrays (no copies).
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        outer: dict[tuple, list[tuple[ir.Value, np.ndarray]]] = {}
        bodies = {id(g) for g in nested_graphs(model.graph)}
        for graph in [model.graph, *(g for g in model.graphs() if g is not model.graph)]:
            if graph is model.graph:
                groups = outer
            elif id(graph) in bodies:  # reads the main graph's equal constant (outer scope)
                groups = {k: list(v) for k, v in outer.items()}
            else:  # a function's graph sees no enclosing scope
                groups = {}
            for value in tuple(graph.initializers.values()):
                array = _bytes_of(value)
                if array is None or value.is_graph_input() or value.is_graph_output():
                    continue
                step = max(1, array.size // 64)
                key = (value.dtype, tuple(value.shape), array[::step].tobytes())
                group = groups.setdefault(key, [])
                kept = next((v for v, a in group if np.array_equal(a, array)), None)
                if kept is None:
                    group.append((value, array))
                    continue
                value.replace_all_uses_with(kept)
                graph.initializers.pop(value.name)
                modified = True
        return ir.passes.PassResult(model, modified)


def _bytes_of(value: ir.Value) -> np.ndarray | None:
    """The initializer's bytes as a flat uint8 view, or None when it has no array at hand."""
    tensor = value.const_value
    if tensor is None or value.shape is None or not value.shape.is_static():
        return None
    try:
        array = tensor.numpy()
    except Exception:  # noqa: BLE001 - external or packed data: left alone
        return None
    if not array.flags.c_contiguous:
        return None
    return array.reshape(-1).view(np.uint8)
