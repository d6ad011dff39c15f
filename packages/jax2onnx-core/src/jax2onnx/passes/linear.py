"""``CollapseLinearMapsPass``: a web of linear ops on small tensors becomes one product each.

Solvers combine the same few vectors again and again with constant weights: a
Runge-Kutta step sums its stages (``y0 + dt * sum_j b_j k_j``), its error
estimate and its dense-output coefficients are other sums of the same stages,
and a pseudo-spectral right-hand side scales a spectrum and transforms it
back. The lowerings emit these op by op (Slices and Gathers of the stage table,
Muls by coefficients, Adds, Concats; the complex product's Slices and Muls, a
Reshape and the inverse transform's MatMul), and in a Loop body each of those
nodes runs once per step.

The pass works in Loop and If bodies only, where every node runs once per
step and a few nodes less per step is what counts. The main graph, which
runs once per call, keeps the ops as the lowerings wrote them: a complex
product or a ``rotate_half`` reads there as it does in the source, not as a
small matrix.

Every value computed from a few float tensors ("leaves": what a non-linear op,
an input or an enclosing graph made) by ops linear in them, with constant
parameters, is ``W @ concat(flattened leaves)`` for one constant matrix
``W``. The ops: ``Identity``, ``Neg``, ``Add``, ``Sub``, ``Mul`` and ``Div``
by a constant, ``MatMul`` with a constant, ``Reshape``, ``Squeeze``,
``Unsqueeze``, ``Flatten``, ``Expand``, ``Transpose``, ``Slice``,
``Gather`` by constant indices, ``Concat``, ``ReduceSum`` and ``ScatterND``
by constant indices (into a tensor of the web or into zeros). This
pass finds the connected webs of such nodes (static shapes, float32 or
float64), computes each ``W`` at conversion in float64 by carrying the
coefficients of every leaf element through the ops (rounded once to the
dtype), and replaces each value the web hands to other ops with one
``MatMul`` of the concatenated leaves (or a sum of the leaves that enter
scaled by one number, plus a ``MatMul`` for the rest, when that is fewer
nodes). A value replaced earlier in the web is a leaf of the later ones, so
nothing is computed twice; a value that only copies elements of one leaf
(``x[k]``, a Slice) stays the read it is. A web changes only when it loses at
least ``_MARGIN`` nodes, each
matrix stays small (``_MAX_LEAVES`` leaf elements, ``_MAX_WEIGHTS`` weights)
and a leaf that arithmetic cancels (``x - x``, ``0 * x``) stays in the
product with weights 0: an infinite or NaN element makes the result NaN as
before (a leaf that only a Slice or a Gather skips is not read at all).

The sums are the runtime's MatMul, not the op-by-op rounding: the numbers
agree within the dtype's rounding, not bit for bit. ``DFT`` is not among the
ops: a dense matrix in place of a fast transform sums terms far larger than
the result (a second derivative's weights grow as the square of the grid
size), so it would lose digits that the transform keeps. An infinite or NaN leaf
element still reaches every output whose weights read it (``0 * inf`` is NaN
where a Slice would have skipped it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from jax2onnx.passes.bodies import nested_graphs
from jax2onnx.passes.fusion.canonical import shape_of
from jax2onnx.passes.fusion.match import constant, new_constant, node
from jax2onnx.passes.identities import take_place
from jax2onnx.values.ir import ir

_ONNX = ("", "ai.onnx")
_FLOATS = frozenset((ir.DataType.FLOAT, ir.DataType.DOUBLE))
# op -> the input positions that must be constant (the others carry the linear signal)
_PARAMETERS = {
    "Identity": (),
    "Neg": (),
    "Reshape": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "Flatten": (),
    "Expand": (1,),
    "Transpose": (),
    "Slice": (1, 2, 3, 4),
    "Gather": (1,),
    "ReduceSum": (1,),
    "Div": (1,),
    "Add": (),
    "Sub": (),
    "Concat": (),
    "ScatterND": (1,),
}
_MAX_LEAVES = 1024  # leaf elements one replaced value reads
_MAX_WEIGHTS = 1 << 16  # weights of one replaced value's matrix
# the products may do this many times the web's own arithmetic, plus a little: a node run
# costs ONNX Runtime about what a thousand multiply-adds do
_WORK_RATIO, _WORK_FLOOR = 4, 1024
# nodes a web must lose: a few scalar reads stacked back are clearer as they are
_MARGIN = 3


class _Unsupported(Exception):
    """An op the coefficients cannot be carried through (the web stays as it is)."""


class CollapseLinearMapsPass(ir.passes.InPlacePass):
    """Linear webs of ops on small tensors become products with constant matrices."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in nested_graphs(model.graph):  # bodies only: see the module
            modified |= _Webs(graph).collapse()
        return ir.passes.PassResult(model, modified)


def _static(value: ir.Value | None) -> tuple[int, ...] | None:
    shape = shape_of(value)
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(shape)


def signal_positions(
    node: ir.Node, fixed: Any = None, parameters: dict = _PARAMETERS
) -> list[int] | None:
    """The input positions of a linear node that carry the signal, or None when the node
    is not linear in them (a constant operand of Add makes it affine). ``fixed`` tells
    the operands that are coefficients (default: constants); ``parameters`` maps each op
    to the positions that must be such coefficients."""
    if node.domain not in _ONNX or len(node.outputs) != 1:
        return None
    out = node.outputs[0]
    if out.dtype not in _FLOATS or _static(out) is None:
        return None
    op, inputs = node.op_type, node.inputs
    is_fixed = fixed or (lambda v: constant(v) is not None)
    given = [is_fixed(v) if v is not None else False for v in inputs]
    if op in ("Mul", "MatMul"):
        if len(inputs) != 2 or given[0] == given[1]:
            return None
        signal = [0 if given[1] else 1]
    elif op == "ScatterND" and "ScatterND" in parameters:  # writes by constant indices
        reduction = node.attributes.get("reduction")
        if (
            len(inputs) != 3
            or not given[1]
            or given[2]
            or (reduction and reduction.as_string() != "none")
        ):
            return None
        zeros = constant(inputs[0]) if given[0] else None
        if zeros is not None and np.any(zeros):
            return None
        signal = [2] if given[0] else [0, 2]
    elif op in parameters:
        positions = parameters[op]
        signal = [k for k in range(len(inputs)) if k not in positions and inputs[k] is not None]
        if not signal or any(given[k] for k in signal):
            return None
        if any(inputs[k] is not None and not given[k] for k in positions if k < len(inputs)):
            return None
    else:
        return None
    for k in signal:
        if inputs[k].dtype != out.dtype or _static(inputs[k]) is None:
            return None
    return signal


def connected_webs(graph: ir.Graph, signals: dict[int, list[int]]) -> list[list[ir.Node]]:
    """The nodes of ``graph`` with ``signals`` (node id -> signal positions), grouped by
    the signals passed between them, each group in graph order."""
    parent = {k: k for k in signals}

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for n in graph:
        for k in signals.get(id(n), ()):
            source = n.inputs[k].producer()
            if source is not None and id(source) in signals and source.graph is graph:
                parent[root(id(source))] = root(id(n))
    webs: dict[int, list[ir.Node]] = {}
    for n in graph:
        if id(n) in signals:
            webs.setdefault(root(id(n)), []).append(n)
    return list(webs.values())


class _Webs:
    def __init__(self, graph: ir.Graph) -> None:
        self.graph = graph

    def collapse(self) -> bool:
        nodes = list(self.graph)
        self.order = {id(n): k for k, n in enumerate(nodes)}
        signals = {id(n): s for n in nodes if (s := signal_positions(n)) is not None}
        changed = False
        for members in connected_webs(self.graph, signals):
            if len(members) > 1:
                changed |= self._collapse(members, signals)
        return changed

    def _collapse(self, members: list[ir.Node], signals: dict) -> bool:
        inside = {id(n) for n in members}
        handed = [  # values the web hands to other ops, graphs or the graph's outputs
            n.outputs[0]
            for n in members
            if n.outputs[0].is_graph_output()
            or any(id(use.node) not in inside for use in n.outputs[0].uses())
        ]
        plan, available, kept = [], set(), 0
        try:
            for value in handed:
                leaves = self._leaves(value, inside, available, signals)
                weights, leaves = self._weights(value, leaves, signals)
                available.add(id(value))
                if _selection(weights, leaves) and _reads(value.producer(), leaves[0]):
                    kept += 1  # a read of one leaf's elements (x[k]) stays the read it is
                else:
                    plan.append((value, leaves, weights))
        except (_Unsupported, RecursionError):  # (a chain deeper than Python's stack)
            return False
        splits = [_split(v, leaves, w) for v, leaves, w in plan]
        if kept + sum(cost for cost, _, _ in splits) + _MARGIN > len(members):
            return False
        products = sum(
            _product_work(v, leaves, w, split)
            for (v, leaves, w), split in zip(plan, splits, strict=True)
        )
        if products > _WORK_RATIO * sum(_work(n) for n in members) + _WORK_FLOOR:
            return False  # a permutation of a long vector (rotate_half) stays a Slice+Concat
        made: dict[int, ir.Value] = {}
        for value, leaves, weights in plan:
            made[id(value)] = self._replace(value, [made.get(id(v), v) for v in leaves], weights)
        return True

    # -- the leaves and the matrix ----------------------------------------------------
    def _leaves(self, value, inside, available, signals) -> list[ir.Value]:
        leaves: list[ir.Value] = []
        seen: set[int] = set()

        def visit(v: ir.Value, top: bool) -> None:
            if id(v) in seen:
                return
            seen.add(id(v))
            source = v.producer()
            if (not top and id(v) in available) or source is None or id(source) not in inside:
                leaves.append(v)
                return
            for k in signals[id(source)]:
                visit(source.inputs[k], False)

        visit(value, True)
        # in graph order (inputs first): values read from the same leaves concatenate them
        # alike, and equal Concats merge
        leaves.sort(key=lambda v: (self.order.get(id(v.producer()), -1), v.name or ""))
        total = sum(math.prod(_static(v)) for v in leaves)
        if total > _MAX_LEAVES or total * math.prod(_static(value)) > _MAX_WEIGHTS:
            raise _Unsupported
        return leaves

    def _weights(self, value, leaves, signals) -> tuple[np.ndarray, list[ir.Value]]:
        """The coefficients of ``value`` (its shape plus one axis over the leaf elements)
        and the leaves it reads: one that only a Slice or a Gather skipped drops out; one
        that arithmetic cancelled (``x - x``, ``0 * x``) stays with weights 0, so that an
        infinite or NaN element still makes the result NaN, as the ops did."""
        sizes = [math.prod(_static(v)) for v in leaves]
        weights = self._coefficients(value, leaves, sizes, signals, structural=False)
        reached = self._coefficients(value, leaves, sizes, signals, structural=True)
        kept, columns, offset = [], [], 0
        for leaf, size in zip(leaves, sizes, strict=True):
            part = slice(offset, offset + size)
            offset += size
            if not np.any(reached[..., part]):
                continue  # read by no element of the value
            kept.append(leaf)  # (its weights may be 0: 0 * inf is NaN in the product too)
            columns.append(weights[..., part])
        if not kept:
            raise _Unsupported
        return np.concatenate(columns, axis=-1), kept

    def _coefficients(self, value, leaves, sizes, signals, *, structural: bool) -> np.ndarray:
        n = sum(sizes)
        memo: dict[int, np.ndarray] = {}
        offset = 0
        for v, size in zip(leaves, sizes, strict=True):
            block = np.zeros((size, n))
            block[np.arange(size), offset + np.arange(size)] = 1.0
            memo[id(v)] = block.reshape(_static(v) + (n,))
            offset += size

        def coefficients(v: ir.Value) -> np.ndarray:
            if id(v) not in memo:
                source = v.producer()
                ins = {k: coefficients(source.inputs[k]) for k in signals[id(source)]}
                result = self._carry(source, ins, structural)
                if result.shape[:-1] != _static(v):
                    raise _Unsupported
                memo[id(v)] = result
            return memo[id(v)]

        return coefficients(value)

    def _carry(self, source: ir.Node, ins: dict[int, np.ndarray], structural: bool) -> np.ndarray:
        """``source`` applied to coefficient arrays (the leaf axis last); ``structural``:
        which leaf elements each element reads at all (every factor 1, no cancelling)."""
        op = source.op_type
        out = _static(source.outputs[0])
        (first,) = [ins[k] for k in sorted(ins)][:1]
        n = first.shape[-1]
        rank = first.ndim - 1
        const = [constant(v) if v is not None else None for v in source.inputs]
        if op == "Identity":
            return first
        if op == "Neg":
            return first if structural else -first
        if op in ("Add", "Sub"):
            a, b = (_aligned(ins[k], out) for k in (0, 1))
            return a + b if op == "Add" or structural else a - b
        if op in ("Mul", "Div"):
            k = next(iter(ins))
            factor = np.asarray(const[1 - k], np.float64)
            factor = np.ones_like(factor) if structural else factor
            factor = factor.reshape((1,) * (len(out) - factor.ndim) + factor.shape + (1,))
            x = _aligned(ins[k], out)
            return x * factor if op == "Mul" else x / factor
        if op in ("Reshape", "Squeeze", "Unsqueeze", "Flatten"):
            return first.reshape(out + (n,))
        if op == "Expand":
            return np.broadcast_to(_aligned(first, out), out + (n,))
        if op == "Transpose":
            perm = source.attributes.get("perm")
            order = list(perm.as_ints()) if perm is not None else list(range(rank))[::-1]
            return first.transpose(order + [rank])
        if op == "Slice":
            return _slice(first, rank, const)
        if op == "Gather":
            axis = source.attributes.get_int("axis", 0) % rank
            return np.take(first, np.asarray(const[1], np.int64), axis=axis)
        if op == "ScatterND":
            return _scatter(ins, const, out, n)
        if op == "Concat":
            axis = source.attributes.get_int("axis", 0) % rank
            return np.concatenate([ins[k] for k in sorted(ins)], axis=axis)
        if op == "MatMul":
            if structural:
                const = [np.ones_like(c, np.float64) if c is not None else None for c in const]
            return _matmul(ins, const)
        if op == "ReduceSum":
            return _reduce_sum(source, first, rank, const)
        raise _Unsupported

    # -- the replacement ----------------------------------------------------------------
    def _replace(self, value: ir.Value, leaves: list[ir.Value], weights: np.ndarray) -> ir.Value:
        """``value``'s node gives way to the product (or sum) computing it from ``leaves``."""
        anchor = value.producer()
        dtype = value.dtype.numpy()
        out = _static(value)
        new: list[ir.Node] = []

        def add(op: str, inputs: list, **attributes: Any) -> ir.Value:
            made = node(op, inputs, **attributes)
            made.metadata_props.update(anchor.metadata_props)
            made.outputs[0].type = value.type
            new.append(made)
            return made.outputs[0]

        def flat(v: ir.Value) -> ir.Value:
            if len(_static(v)) == 1:
                return v
            size = math.prod(_static(v))
            shape = new_constant(self.graph, np.array([size], np.int64), "flat")
            result = add("Reshape", [v, shape])
            result.shape = ir.Shape([size])
            return result

        _, scaled, rest = _split(value, leaves, weights)
        if scaled == "select":  # elements of one leaf, read through the web: one Gather
            picked = np.argmax(_columns(weights, out), axis=0).astype(np.int64)
            indices = new_constant(self.graph, picked.reshape(out), "picked")
            terms = [add("Gather", [flat(leaves[0]), indices], axis=0)]
        elif scaled is None:
            terms = [self._product(add, flat, leaves, _columns(weights, out), out, dtype)]
        else:
            terms = []
            # leaves stored flat for a shaped result: summed flat, reshaped once
            size = (math.prod(out),)
            late = len(out) > 1 and all(_static(leaf) == size for leaf, _, _ in scaled)
            target = size if late else out
            for leaf, _, _ in scaled:
                if _static(leaf) != target:
                    shape = new_constant(self.graph, np.array(target, np.int64), "shape")
                    leaf = add("Reshape", [leaf, shape])
                    leaf.shape = ir.Shape(list(target))
                terms.append(leaf)
            if rest:
                columns = np.concatenate([block for _, block, _ in rest])
                leaves = [r[0] for r in rest]
                terms.append(self._product(add, flat, leaves, columns, target, dtype))
            out = target if late else out
        total = terms[0]
        for term in terms[1:]:
            total = add("Add", [total, term])
        total.shape = ir.Shape(list(out))
        if len(out) != len(_static(value)):  # summed flat: the value's own shape
            shape = new_constant(self.graph, np.array(_static(value), np.int64), "shape")
            total = add("Reshape", [total, shape])
            total.shape = ir.Shape(list(_static(value)))
        for made in new:
            self.graph.insert_before(anchor, made)
        take_place(anchor, total)
        return total

    def _product(self, add, flat, leaves, columns, out, dtype) -> ir.Value:
        pieces = [flat(v) for v in leaves]
        stacked = pieces[0] if len(pieces) == 1 else add("Concat", pieces, axis=0)
        stacked.shape = ir.Shape([columns.shape[0]])
        matrix = columns.reshape(-1) if not out else columns
        weights = new_constant(self.graph, np.ascontiguousarray(matrix).astype(dtype), "linear")
        product = add("MatMul", [stacked, weights])
        if len(out) <= 1:
            product.shape = ir.Shape(list(out))
            return product
        product.shape = ir.Shape([math.prod(out)])
        shape = new_constant(self.graph, np.array(out, np.int64), "shape")
        result = add("Reshape", [product, shape])
        result.shape = ir.Shape(list(out))
        return result


def _aligned(x: np.ndarray, out: tuple[int, ...]) -> np.ndarray:
    """Coefficients of an operand broadcast to the output's shape (leaf axis kept last)."""
    x = x.reshape((1,) * (len(out) + 1 - x.ndim) + x.shape)
    return np.broadcast_to(x, out + (x.shape[-1],))


def _slice(x: np.ndarray, rank: int, const: list) -> np.ndarray:
    starts, ends = const[1].reshape(-1), const[2].reshape(-1)
    axes = const[3].reshape(-1) if len(const) > 3 and const[3] is not None else range(len(starts))
    steps = const[4].reshape(-1) if len(const) > 4 and const[4] is not None else [1] * len(starts)
    index = [slice(None)] * (rank + 1)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step == 0:
            raise _Unsupported
        index[int(axis) % rank] = slice(int(start), int(end), int(step))
    return x[tuple(index)]


def _scatter(ins: dict[int, np.ndarray], const: list, out: tuple, n: int) -> np.ndarray:
    """Coefficients after ``ScatterND``: the data's (or zeros), rows written replaced."""
    result = np.array(ins[0]) if 0 in ins else np.zeros(out + (n,))
    indices = np.asarray(const[1], np.int64)
    depth = indices.shape[-1]
    written = ins[2].reshape((-1,) + out[depth:] + (n,))
    for row, where in enumerate(indices.reshape(-1, depth)):
        result[tuple(int(i) % d for i, d in zip(where, out, strict=False))] = written[row]
    return result


def _matmul(ins: dict[int, np.ndarray], const: list) -> np.ndarray:
    if 0 in ins:  # x @ W
        x, w = np.moveaxis(ins[0], -1, 0), np.asarray(const[1], np.float64)
        if w.ndim > 2:
            raise _Unsupported
        return np.moveaxis(np.matmul(x, w), 0, -1)
    w, x = np.asarray(const[0], np.float64), np.moveaxis(ins[1], -1, 0)
    if w.ndim > 2:
        raise _Unsupported
    if x.ndim == 2:  # W @ v with v a vector: (leaf elements, k) @ W^T
        return np.moveaxis(x @ w.T, 0, -1) if w.ndim == 2 else x @ w
    return np.moveaxis(np.matmul(w, x), 0, -1)


def _reduce_sum(source: ir.Node, x: np.ndarray, rank: int, const: list) -> np.ndarray:
    keep = bool(source.attributes.get_int("keepdims", 1))
    if len(const) > 1 and const[1] is not None:
        axes = [int(a) % rank for a in const[1].reshape(-1)]
    elif "axes" in source.attributes:
        axes = [a % rank for a in source.attributes["axes"].as_ints()]
    else:
        axes = []
    if not axes:
        if source.attributes.get_int("noop_with_empty_axes", 0):
            return x
        axes = list(range(rank))
    return x.sum(axis=tuple(axes), keepdims=keep)


def _scale(block: np.ndarray) -> float | None:
    """The one number ``c`` when the leaf enters the output as ``c * leaf``, element for
    element in storage order (the shapes may differ: a Reshape)."""
    if block.shape[0] != block.shape[1]:
        return None
    c = block[0, 0]
    if c == 0 or not np.array_equal(block, c * np.eye(block.shape[0])):
        return None
    return float(c)


def _work(n: ir.Node) -> int:
    """Multiply-adds (or element moves) of a web node."""
    elements = math.prod(_static(n.outputs[0]))
    if n.op_type == "MatMul":
        fixed = [constant(v) for v in n.inputs]
        inner = fixed[1].shape[0] if fixed[1] is not None else fixed[0].shape[-1]
        return elements * inner
    if n.op_type == "ReduceSum":
        return math.prod(_static(n.inputs[0]))
    return elements


def _product_work(value: ir.Value, leaves: list, weights: np.ndarray, split: tuple) -> int:
    """Multiply-adds of ``value``'s replacement: its product and its sums."""
    out = math.prod(_static(value))
    _, scaled, rest = split
    if scaled == "select":
        return out
    if scaled is None:
        return weights.size
    product = sum(block.size for _, block, _ in rest)
    return product + out * len(scaled)


def _selection(weights: np.ndarray, leaves: list) -> bool:
    """Whether the value copies elements of one leaf (each weight row a single 1)."""
    if len(leaves) != 1:
        return False
    rows = weights.reshape(-1, weights.shape[-1])
    return bool(np.all((rows == 0) | (rows == 1)) and np.all(rows.sum(axis=1) == 1))


def _reads(node: ir.Node, leaf: ir.Value) -> bool:
    """Whether ``node`` reads ``leaf`` itself (a read of the leaf that stays as it is)."""
    return any(v is leaf for v in node.inputs)


def _columns(weights: np.ndarray, out: tuple) -> np.ndarray:
    """The matrix ``(leaf elements, output elements)`` of coefficients."""
    return weights.reshape(math.prod(out), -1).T


def _split(value: ir.Value, leaves: list, weights: np.ndarray) -> tuple[int, Any, list]:
    """The nodes ``value``'s replacement takes and how it is built: ``(cost, "select",
    [])`` for elements of one leaf read by one Gather, ``(cost, None, [])`` for one
    product of all leaves, ``(cost, scaled, rest)`` for a sum of the leaves that enter as
    they are (``(leaf, block, 1.0)``) and a product of the rest.

    A leaf that enters as it is stays out of the product: ``y0 + sum_j b_j k_j`` summed
    in one MatMul would round every small term at ``y0``'s magnitude (a step's increment
    loses digits that the step-by-step form keeps)."""
    if _selection(weights, leaves):
        return (len(_static(leaves[0])) != 1) + 1, "select", []
    out = _static(value)
    columns = _columns(weights, out)
    scaled, rest, offset = [], [], 0
    for leaf in leaves:
        size = math.prod(_static(leaf))
        block = columns[offset : offset + size]
        factor = _scale(block)
        (scaled if factor == 1.0 else rest).append((leaf, block, factor))
        offset += size
    if not scaled:
        return _product_cost(leaves, out), None, []
    cost = sum(_static(leaf) != out for leaf, _, _ in scaled)
    if rest:
        cost += _product_cost([r[0] for r in rest], out) + 1
    return cost + len(scaled) - 1, scaled, rest


def _product_cost(leaves: list, out: tuple) -> int:
    """Reshapes of leaves that are not vectors, a Concat of several, the MatMul, and a
    Reshape of a result that is neither a vector nor a scalar."""
    reshapes = sum(len(_static(v)) != 1 for v in leaves)
    return reshapes + (len(leaves) > 1) + 1 + (len(out) > 1)
