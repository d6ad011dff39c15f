"""``HoistLinearMapsPass``: a linear web whose coefficients a Loop does not change becomes
one product by a matrix computed in front of the Loop.

A Newton loop that reuses a factorisation (diffrax's implicit stages, whose
chord iterations keep the LU factors of one Jacobian for a whole step) solves
with the same factors at every iteration: it permutes the right-hand side's
rows (a ``Gather`` by the pivots), substitutes forward and back (``Slice``\\ s,
``MatMul``\\ s by the factors' blocks, ``Sub``\\ s, ``Div``\\ s by the diagonal,
``Concat``\\ s). Each op is linear in the right-hand side, with coefficients
that do not change inside the loop: some twenty nodes per iteration compute
what one product by the factorised matrix's inverse computes.

In each Loop body the pass finds the connected webs of nodes linear in the
values they pass on (the ops of :class:`~jax2onnx.passes.linear.CollapseLinearMapsPass`
but ``ScatterND``, and ``GatherElements``), whose other operands are constants or
values from outside the body, at least one of them not a constant (webs of
constants alone are that pass's). Each value the web hands to other nodes is
``leaves @ W`` for the leaves it reads (what other nodes or the Loop's carries
made), flattened and concatenated, and a matrix ``W`` that the body does not
change: the web applied to the unit vectors. The pass writes that once in front
of the Loop, as the same ops on a batch of the ``L`` unit vectors of all the
web's leaves along a new leading axis (axes shift by one, reshapes keep the
batch, a matrix times a vector from the left becomes the batch times its
transpose; each handed value keeps the rows of its own leaves), and leaves in
the body one ``MatMul`` per handed value (with a ``Concat`` of its leaves and
``Reshape``\\ s where shapes need it). A matrix made from factors an ``If``
refreshes now and then is moved into that branch afterwards by
:class:`~jax2onnx.passes.updates.SinkIntoUpdatesPass`.

A web changes only when the body loses at least ``_MARGIN`` nodes, its leaves
have at most ``_MAX_LEAVES`` elements and each handed value at most
``_MAX_ELEMENTS``, and every value has a static float shape. Only Loop bodies:
an If branch runs once per visit, as the matrix would.

The numbers: each column of ``W`` is what the web computes for a unit input,
op for op; the product sums the columns in the runtime's MatMul. The result
agrees with the op-by-op one within the rounding of the dtype and the
conditioning of the map (a triangular solve becomes a product with the
factors' inverse, which a chord iteration corrects as it corrects the
Jacobian it keeps). An infinite or NaN leaf element reaches every output the
map reads it into, as NaN where weights are 0. The matrix is computed each
time the Loop starts, also when it then runs no step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from jax2onnx.passes.bodies import innermost_first_in
from jax2onnx.passes.constants import FoldConstantsPass
from jax2onnx.passes.fusion.match import constant, new_constant, node
from jax2onnx.passes.linear import (
    _ONNX,
    _PARAMETERS,
    _static,
    connected_webs,
    signal_positions,
)
from jax2onnx.values.ir import ir

# op -> the input positions that must be fixed (the others carry the signal)
_OPERANDS = {k: v for k, v in _PARAMETERS.items() if k != "ScatterND"} | {"GatherElements": (1,)}
_MARGIN = 4  # body nodes the web must lose
_MAX_LEAVES = 32  # leaf elements: the batch computed in front of the Loop
_MAX_ELEMENTS = 256  # elements of one handed value


class HoistLinearMapsPass(ir.passes.InPlacePass):
    """Linear webs with loop-invariant coefficients become products (see the module)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = innermost_first_in(model, _visit)
        if modified:  # the batch through constant ops (a product composed before) folds
            FoldConstantsPass()(model)
        return ir.passes.PassResult(model, modified=modified)


class _Unsupported(Exception):
    """A web the batch cannot be carried through (it stays as it is)."""


def _visit(graph: ir.Graph, loop: ir.Node) -> bool:
    if loop.op_type != "Loop" or loop.domain not in _ONNX:
        return False
    body = loop.attributes["body"].value
    inputs = {id(v) for v in body.inputs}

    def fixed(value: ir.Value | None) -> bool:
        """A constant or a value from outside the body."""
        if value is None:
            return False
        if constant(value) is not None:
            return True
        source = value.producer()
        return id(value) not in inputs if source is None else source.graph is not body

    signals = {id(n): s for n in body if (s := signal_positions(n, fixed, _OPERANDS)) is not None}
    changed = False
    for members in connected_webs(body, signals):
        if len(members) <= _MARGIN or not any(_reads_invariant(n, signals, fixed) for n in members):
            continue
        try:
            changed |= _Web(graph, loop, body, members, signals).hoist()
        except _Unsupported:
            continue
    return changed


def _reads_invariant(n: ir.Node, signals: dict, fixed: Any) -> bool:
    """Whether a parameter of ``n`` is a value from outside the body (not a constant)."""
    return any(
        k not in signals[id(n)] and v is not None and fixed(v) and constant(v) is None
        for k, v in enumerate(n.inputs)
    )


class _Web:
    def __init__(self, graph, loop, body, members, signals) -> None:
        self.graph, self.loop, self.body = graph, loop, body
        self.members, self.signals = members, signals
        self.inside = {id(n) for n in members}

    def hoist(self) -> bool:
        handed = [
            n.outputs[0]
            for n in self.members
            if n.outputs[0].is_graph_output()
            or any(id(use.node) not in self.inside for use in n.outputs[0].uses())
        ]
        leaves, reads = self._leaves(handed)
        sizes = [math.prod(_static(v)) for v in leaves]
        total = sum(sizes)
        if total > _MAX_LEAVES or any(math.prod(_static(v)) > _MAX_ELEMENTS for v in handed):
            return False
        flat = sum(len(_static(v)) != 1 for v in leaves)
        stacks = len({tuple(sorted(r)) for r in reads if len(r) > 1})
        outs = sum(1 + (len(_static(v)) != 1) for v in handed)
        if len(self.members) - flat - stacks - outs < _MARGIN:
            return False
        self.new: list[ir.Node] = []
        self.type = leaves[0].type
        batched = self._batch(leaves, sizes, total)
        starts = np.cumsum([0, *sizes])
        matrices = []
        for value, mine in zip(handed, reads, strict=True):
            size = math.prod(_static(value))
            matrix = self._reshaped(batched[id(value)], (total, size))
            if len(mine) < len(leaves):  # the rows of the leaves it reads
                rows = [
                    row
                    for k, leaf in enumerate(leaves)
                    if id(leaf) in mine
                    for row in range(starts[k], starts[k + 1])
                ]
                picked = self._ints(rows)
                matrix = self._add("Gather", [matrix, picked], (len(rows), size), axis=0)
            matrices.append(matrix)
        for made in self.new:
            self.graph.insert_before(self.loop, made)
        for value, mine, matrix in zip(handed, reads, matrices, strict=True):
            self._product(value, [v for v in leaves if id(v) in mine], matrix)
        return True

    # -- in front of the Loop: the web on a batch of unit vectors ---------------------
    def _add(
        self, op: str, inputs: list, shape: tuple, type_: Any = None, **attributes: Any
    ) -> ir.Value:
        """A node of the batch (``shape``: its output's, the batch axis first)."""
        made = node(op, inputs, **attributes)
        made.metadata_props.update(self.loop.metadata_props)
        made.outputs[0].type = self.type if type_ is None else type_
        made.outputs[0].shape = ir.Shape(list(shape))
        self.new.append(made)
        return made.outputs[0]

    def _ints(self, values: list[int]) -> ir.Value:
        return new_constant(self.graph, np.asarray(values, np.int64), "batch")

    def _outer(self, value: ir.Value) -> ir.Value:
        """A parameter as the enclosing graph reads it (a constant copied: the body's own
        ones are not in scope there; equal initializers merge later)."""
        array = constant(value)
        return value if array is None else new_constant(self.graph, array, "batch")

    def _batch(self, leaves: list[ir.Value], sizes: list[int], total: int) -> dict:
        dtype = leaves[0].dtype.numpy()
        batched: dict[int, ir.Value] = {}
        offset = 0
        for leaf, size in zip(leaves, sizes, strict=True):
            block = np.zeros((total, size), dtype)
            block[offset + np.arange(size), np.arange(size)] = 1
            batched[id(leaf)] = new_constant(
                self.graph, block.reshape((total, *_static(leaf))), "unit"
            )
            offset += size
        for n in self.members:  # in graph order: operands first
            ins = {k: batched[id(n.inputs[k])] for k in self.signals[id(n)]}
            batched[id(n.outputs[0])] = self._carry(n, ins, total)
        return batched

    def _reshaped(self, value: ir.Value, shape: tuple) -> ir.Value:
        """``value`` reshaped (a Reshape of the batch's own Reshape reads that one's input;
        the first goes with the unused nodes when nothing else reads it)."""
        source = value.producer()
        if source is not None and source.op_type == "Reshape" and source in self.new:
            value = source.inputs[0]
        return self._add("Reshape", [value, self._ints(list(shape))], shape)

    def _aligned(self, value: ir.Value, shape: tuple, total: int, rank: int) -> ir.Value:
        """A batched operand of ``shape`` with unit axes in front to ``rank`` (plus the batch)."""
        if len(shape) == rank:
            return value
        return self._reshaped(value, (total, *([1] * (rank - len(shape))), *shape))

    def _carry(self, n: ir.Node, ins: dict, total: int) -> ir.Value:
        op, out = n.op_type, _static(n.outputs[0])
        first = ins[min(ins)]
        rank = len(_static(n.inputs[min(ins)]))
        shape = (total, *out)  # the batched result's
        if op == "Identity":
            return first
        if op == "Neg":
            return self._add("Neg", [first], shape)
        if op in ("Add", "Sub"):
            a, b = (self._aligned(ins[k], _static(n.inputs[k]), total, len(out)) for k in (0, 1))
            return self._add(op, [a, b], shape)
        if op in ("Mul", "Div"):
            (k,) = ins
            x = self._aligned(ins[k], _static(n.inputs[k]), total, len(out))
            operands = [x, self._outer(n.inputs[1 - k])]
            return self._add(op, operands if k == 0 else operands[::-1], shape)
        if op in ("Reshape", "Squeeze", "Unsqueeze", "Flatten"):
            return self._reshaped(first, shape)
        if op == "Expand":
            x = self._aligned(first, _static(n.inputs[0]), total, len(out))
            return self._add("Expand", [x, self._ints(list(shape))], shape)
        if op == "Transpose":
            perm = n.attributes.get("perm")
            order = list(perm.as_ints()) if perm is not None else list(range(rank))[::-1]
            return self._add("Transpose", [first], shape, perm=[0, *(p + 1 for p in order)])
        if op == "Slice":
            return self._slice(n, first, rank, shape)
        if op == "Gather":
            axis = n.attributes.get_int("axis", 0) % rank + 1
            return self._add("Gather", [first, self._outer(n.inputs[1])], shape, axis=axis)
        if op == "GatherElements":  # the indices repeated along the batch
            axis = n.attributes.get_int("axis", 0) % rank + 1
            index = n.inputs[1]
            lifted = self._add(
                "Reshape", [self._outer(index), self._ints([1, *out])], (1, *out), index.type
            )
            spread = self._add("Expand", [lifted, self._ints(list(shape))], shape, index.type)
            return self._add("GatherElements", [first, spread], shape, axis=axis)
        if op == "Concat":
            axis = n.attributes.get_int("axis", 0) % rank + 1
            return self._add("Concat", [ins[k] for k in sorted(ins)], shape, axis=axis)
        if op == "MatMul":
            return self._matmul(n, ins, shape)
        if op == "ReduceSum":
            return self._reduce_sum(n, first, rank, shape)
        raise _Unsupported

    def _slice(self, n: ir.Node, first: ir.Value, rank: int, shape: tuple) -> ir.Value:
        inputs = list(n.inputs) + [None] * (5 - len(n.inputs))
        starts = constant(inputs[1]) if inputs[1] is not None else None
        if inputs[3] is None:
            if starts is None:  # the default axes count the starts: known only when constant
                raise _Unsupported
            axes = list(range(starts.size))
        else:
            given = constant(inputs[3])
            if given is None:
                raise _Unsupported
            axes = [int(a) % rank for a in given.reshape(-1)]
        shifted = self._ints([a + 1 for a in axes])
        operands = [first, self._outer(inputs[1]), self._outer(inputs[2]), shifted]
        if inputs[4] is not None:
            operands.append(self._outer(inputs[4]))
        return self._add("Slice", operands, shape)

    def _matmul(self, n: ir.Node, ins: dict, shape: tuple) -> ir.Value:
        (k,) = ins
        x, w = ins[k], self._outer(n.inputs[1 - k])
        signal, weights = _static(n.inputs[k]), _static(n.inputs[1 - k])
        if k == 0:  # x @ W: the batch is one more leading axis of x
            if len(weights) > max(len(signal), 2):
                raise _Unsupported
            return self._add("MatMul", [x, w], shape)
        if len(signal) == 1:  # W @ v of a vector: the batch of v's is (L, k) @ W^T
            if len(weights) == 1:
                return self._add("MatMul", [x, w], shape)
            if len(weights) != 2:
                raise _Unsupported
            turned = self._add("Transpose", [w], weights[::-1], perm=[1, 0])
            return self._add("MatMul", [x, turned], shape)
        if len(weights) > len(signal):
            raise _Unsupported
        return self._add("MatMul", [w, x], shape)

    def _reduce_sum(self, n: ir.Node, first: ir.Value, rank: int, shape: tuple) -> ir.Value:
        keep = n.attributes.get_int("keepdims", 1)
        given = constant(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] is not None else None
        if len(n.inputs) > 1 and n.inputs[1] is not None and given is None:
            raise _Unsupported
        if given is None or given.size == 0:
            if n.attributes.get_int("noop_with_empty_axes", 0):
                return first
            axes = list(range(rank))
        else:
            axes = [int(a) % rank for a in given.reshape(-1)]
        shifted = self._ints([a + 1 for a in axes])
        return self._add("ReduceSum", [first, shifted], shape, keepdims=keep)

    # -- in the body: the products ----------------------------------------------------
    def _leaves(self, handed: list[ir.Value]) -> tuple[list[ir.Value], list[set[int]]]:
        """The web's leaves in graph order (values from the same leaves stack them
        alike, and equal Concats merge) and the ids of those each handed value reads."""
        order = {id(n): k for k, n in enumerate(self.body)}
        reads: list[set[int]] = []
        found: dict[int, ir.Value] = {}
        for value in handed:
            seen: set[int] = set()
            stack, mine = [value], set()
            while stack:
                v = stack.pop()
                if id(v) in seen:
                    continue
                seen.add(id(v))
                source = v.producer()
                if source is None or id(source) not in self.inside:
                    mine.add(id(v))
                    found[id(v)] = v
                    continue
                stack.extend(source.inputs[k] for k in self.signals[id(source)])
            reads.append(mine)
        leaves = list(found.values())
        leaves.sort(key=lambda v: (order.get(id(v.producer()), -1), v.name or ""))
        return leaves, reads

    def _product(self, value: ir.Value, leaves: list[ir.Value], matrix: ir.Value) -> None:
        """``value`` becomes the product of its leaves, stacked flat, by ``matrix``, made
        just before its node (after every leaf it reads; repeated stacks merge later)."""
        anchor = value.producer()

        def add(op: str, inputs: list, shape: tuple, **attributes: Any) -> ir.Value:
            made = node(op, inputs, **attributes)
            made.metadata_props.update(anchor.metadata_props)
            made.outputs[0].type, made.outputs[0].shape = value.type, ir.Shape(list(shape))
            self.body.insert_before(anchor, made)
            return made.outputs[0]

        pieces = []
        for leaf in leaves:
            size = math.prod(_static(leaf))
            if len(_static(leaf)) != 1:
                flat = new_constant(self.body, np.asarray([size], np.int64), "flat")
                leaf = add("Reshape", [leaf, flat], (size,))
            pieces.append(leaf)
        total = sum(math.prod(_static(v)) for v in leaves)
        stacked = add("Concat", pieces, (total,), axis=0) if len(pieces) > 1 else pieces[0]
        shape = _static(value)
        result = add("MatMul", [stacked, matrix], (math.prod(shape),))
        if len(shape) != 1:
            target = new_constant(self.body, np.asarray(shape, np.int64), "shape")
            result = add("Reshape", [result, target], shape)
        output = value.is_graph_output()
        ir.convenience.replace_all_uses_with(value, result, replace_graph_outputs=output)
        if output:  # the body's output keeps its name
            value.name, result.name = result.name, value.name
