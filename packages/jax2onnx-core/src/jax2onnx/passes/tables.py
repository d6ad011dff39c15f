"""``TabulateChoicesPass``: what a graph computes from one small index alone is a table read.

An LU factorisation with partial pivoting picks each pivot row with an
``ArgMax`` and makes the row permutation from it: comparisons of the index with
``arange(n)``, Wheres between constant index vectors, a swap written as another
Where. Those nodes depend on the pivot index alone, which takes one of ``n``
values; in a Newton loop they run once per iteration. This pass evaluates such a
cone of nodes at conversion for every value of the index, with constant folding's
own evaluation (:func:`~jax2onnx.passes.constants.evaluate`, the same bits as the
runtime), and writes each value the cone hands to other nodes as one ``Gather``
of the table of its results by the index.

* The index: an ``ArgMax`` or ``ArgMin`` output of one element over a static axis
  of at most ``_MAX_VALUES`` elements (its values: ``0 .. n-1``, also for NaN
  input).
* The cone: the nodes of one graph whose operands are constants, that index or
  other values of the cone, which constant folding evaluates for every index value
  (results of one shape each), without subgraphs.
* A cone changes only when it loses more nodes than the reads it needs (a
  ``Gather`` per handed value, and a ``Reshape`` when the index is a one-element
  vector), and its tables stay small (``_MAX_ENTRIES`` elements each).

Exact: each table row holds what the nodes compute for that index value.
"""

from __future__ import annotations

import math

import numpy as np

from jax2onnx.passes.bodies import nested_graphs, subgraphs
from jax2onnx.passes.constants import evaluate, foldable
from jax2onnx.passes.fusion.canonical import shape_of
from jax2onnx.passes.fusion.match import constant, new_constant, node
from jax2onnx.values.ir import ir

_ONNX = ("", "ai.onnx")
_MAX_VALUES = 16  # values of the index
_MAX_ENTRIES = 1024  # elements of one table


class TabulateChoicesPass(ir.passes.InPlacePass):
    """Cones computed from one small index become table reads (see the module)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for root in [model.graph, *(f.graph for f in model.functions.values())]:
            for graph in [root, *nested_graphs(root)]:
                modified |= _tabulate(graph)
        return ir.passes.PassResult(model, modified)


def _static(value: ir.Value | None) -> tuple[int, ...] | None:
    shape = shape_of(value)  # (inferred from the producer when not recorded)
    return shape if shape is not None and all(isinstance(d, int) for d in shape) else None


def _values(index: ir.Value, depth: int = 2) -> int | None:
    """How many values an index takes (``0 .. n-1``), or None when it is no index: an
    ``ArgMax``/``ArgMin`` of one result, or a Where between two such of one length (JAX's
    NaN-aware argmax picks the first NaN's index where there is one)."""
    source = index.producer()
    if source is None or source.domain not in _ONNX:
        return None
    if source.op_type == "Where" and depth > 0 and len(source.inputs) == 3:
        counts = {_values(v, depth - 1) for v in source.inputs[1:]}
        shape = _index_shape(index)
        return (
            counts.pop()
            if len(counts) == 1 and shape is not None and math.prod(shape) == 1
            else None
        )
    if source.op_type not in ("ArgMax", "ArgMin"):
        return None
    data = _static(source.inputs[0])
    if not data or source.attributes.get_int("select_last_index", 0):
        return None
    axis = source.attributes.get_int("axis", 0) % len(data)
    if math.prod(data) != data[axis]:
        return None  # one index only: the axis holds every element
    return data[axis] if data[axis] <= _MAX_VALUES else None


def _index_shape(index: ir.Value) -> tuple[int, ...] | None:
    """An index's shape, from its ArgMax when not recorded: the input's, reduced."""
    source = index.producer()
    if source.op_type == "Where":
        return _static(index)
    data = _static(source.inputs[0])
    axis = source.attributes.get_int("axis", 0) % len(data)
    keep = source.attributes.get_int("keepdims", 1)
    return tuple(1 if k == axis else d for k, d in enumerate(data) if keep or k != axis)


def _tabulate(graph: ir.Graph) -> bool:
    derived: dict[int, ir.Value] = {}  # value id -> the index it is computed from
    cones: dict[int, list[ir.Node]] = {}  # index id -> its cone, in graph order
    indices: dict[int, ir.Value] = {}
    for n in graph:
        if not foldable(n) or subgraphs(n) or not n.inputs:
            continue
        index = None
        for v in n.inputs:
            if v is None or constant(v) is not None:
                continue
            found = derived.get(id(v))
            if found is None and _values(v) is not None:
                found = v
            if found is None or (index is not None and found is not index):
                index = None
                break
            index = found
        if index is None:
            continue
        for out in n.outputs:
            derived[id(out)] = index
        cones.setdefault(id(index), []).append(n)
        indices[id(index)] = index
    changed = False
    for key, members in cones.items():
        changed |= _replace(graph, indices[key], members)
    return changed


def _replace(graph: ir.Graph, index: ir.Value, members: list[ir.Node]) -> bool:
    inside = {id(n) for n in members}
    handed = [
        out
        for n in members
        for out in n.outputs
        if out.is_graph_output() or any(id(use.node) not in inside for use in out.uses())
    ]
    shape = _index_shape(index)
    scalar = shape == ()
    if len(members) <= len(handed) * (1 if scalar else 2):
        return False
    rows: dict[int, list[np.ndarray]] = {id(v): [] for v in handed}
    for k in range(_values(index)):
        known = {id(index): np.full(shape, k, np.int64)}
        for n in members:
            arrays = [
                None if v is None else known[id(v)] if id(v) in known else constant(v)
                for v in n.inputs
            ]
            results = evaluate(n, arrays)
            if results is None or len(results) != len(n.outputs):
                return False
            for out, result in zip(n.outputs, results, strict=True):
                known[id(out)] = np.asarray(result)
        for v in handed:
            rows[id(v)].append(known[id(v)])
    tables = {}
    for v in handed:
        entries = rows[id(v)]
        shapes = {e.shape for e in entries}
        if len(shapes) != 1 or entries[0].size * len(entries) > _MAX_ENTRIES:
            return False
        if _static(v) is not None and _static(v) != entries[0].shape:
            return False
        tables[id(v)] = np.stack(entries)
    first = members[0]
    for v in handed:
        table = new_constant(graph, tables[id(v)], "table")
        read = node("Gather", [table, index], axis=0)
        read.metadata_props.update(v.producer().metadata_props)
        made = [read]
        result = read.outputs[0]
        result.type = v.type
        entry = tables[id(v)].shape[1:]
        if scalar:
            result.shape = ir.Shape(list(entry))
        else:  # a one-element index keeps its axes in front of the entry: dropped
            result.shape = ir.Shape([*shape, *entry])
            target = new_constant(graph, np.asarray(entry, np.int64), "entry")
            back = node("Reshape", [result, target])
            back.outputs[0].type, back.outputs[0].shape = v.type, ir.Shape(list(entry))
            made.append(back)
            result = back.outputs[0]
        for n in made:
            graph.insert_before(first, n)
        output = v.is_graph_output()
        ir.convenience.replace_all_uses_with(v, result, replace_graph_outputs=output)
        if output:  # the graph's output keeps its name
            v.name, result.name = result.name, v.name
    return True
