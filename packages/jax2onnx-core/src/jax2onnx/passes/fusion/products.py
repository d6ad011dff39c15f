"""Small matrix products written out term by term become one ``MatMul``.

Physics code multiplies 3x3 matrices by hand (MJX's ``matmul_unroll``: nine
sums of three products each, fast on accelerators). :class:`VectorizeLanesPass`
turns the 27 scalar products into ``K`` products of element reads,

    sum_k  Gather(P, I_k)[..., m, 1] * Gather(Q, J_k)[..., 1, n]

with ``I_k`` reading column ``k`` of a matrix ``A`` stored in ``P`` and ``J_k``
row ``k`` of a matrix ``B`` stored in ``Q``: the product ``A @ B``. It becomes
``MatMul(A, B)``, where ``A`` and ``B`` are one read each of ``P`` and ``Q``
(a Reshape when the reads are in storage order, which then collapses with the
Reshape that stored them). The sum of products is the runtime's own, so the
numbers agree within the dtype's rounding, not bit for bit.

A matrix times a vector, ``MatMul(M, v)`` with a 2-D ``M`` and a 1-D ``v``
(``A @ x``), is ``MatMul(v, M^T)``: ONNX Runtime's MatMul takes a slow path for a
1-D second operand (3.4x a ``v @ M`` of a 4x4 matrix, 36x at 256x256). A constant
``M`` is stored transposed; a computed one of 256 elements or more multiplies
``v`` as a ``[k, 1]`` column (Unsqueeze, MatMul, Squeeze), which costs two
nodes that only pay off on a larger matrix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.canonical import shape_of
from jax2onnx.passes.fusion.match import Match, constant, node, rank, static_shape
from jax2onnx.values.ir import ir

_FLOATS = frozenset((ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16))


def _terms(value: ir.Value, match: Match, terms: list[ir.Node]) -> bool:
    """The Mul nodes summed into ``value`` by a tree of Adds (taken into ``match``)."""
    op = value.producer()
    if op is None or op.op_type not in ("Add", "Mul") or op.domain not in ("", "ai.onnx"):
        return False
    if not match.take(op):
        return False
    if op.op_type == "Mul":
        terms.append(op)
        return True
    return all(_terms(v, match, terms) for v in op.inputs)


def _read(value: ir.Value) -> tuple[ir.Value, np.ndarray] | None:
    """``value = Gather(P, I)`` on ``P``'s last axis by constant indices of rank 2."""
    gather = value.producer()
    if gather is None or gather.op_type != "Gather" or len(gather.inputs) != 2:
        return None
    source, indices = gather.inputs[0], constant(gather.inputs[1])
    shape = shape_of(source)
    if shape is None or not shape or indices is None or indices.ndim != 2:
        return None
    if gather.attributes.get_int("axis", 0) % len(shape) != len(shape) - 1:
        return None
    if indices.dtype.kind not in "iu" or np.any(indices < 0):
        return None
    return source, indices.astype(np.int64)


def _analyze(ctx: Any, add: ir.Node) -> tuple | None:
    """The product ``add`` sums (its pattern, the two sources and their reads) or None."""
    out = add.outputs[0]
    if out.dtype not in _FLOATS or add.graph is not ctx.graph:
        return None
    match, terms = Match(ctx.graph, add), []
    if not all(_terms(v, match, terms) for v in add.inputs) or len(terms) < 2:
        return None
    left = right = None
    columns, rows = [], []
    for term in terms:
        reads = [_read(v) for v in term.inputs]
        if any(r is None for r in reads):
            return None
        (p, i), (q, j) = reads
        if i.shape[1] != 1:  # the row read first: swap
            (p, i), (q, j) = (q, j), (p, i)
        if i.shape[1] != 1 or j.shape[0] != 1:
            return None
        if left is None:
            left, right = p, q
        if p is not left or q is not right:
            return None
        columns.append(i[:, 0])
        rows.append(j[0, :])
    shape = shape_of(out)
    if shape is None or shape_of(left)[:-1] != shape[:-2] or shape_of(right)[:-1] != shape[:-2]:
        return None  # batch dims differ: the elementwise broadcast is not MatMul's
    return match, left, right, np.stack(columns, axis=1), np.stack(rows, axis=0)


def unrolled_product(ctx: Any, add: ir.Node) -> bool:
    uses = add.outputs[0].uses()
    if len(uses) == 1 and uses[0].node.op_type == "Add" and _analyze(ctx, uses[0].node):
        return False  # a partial sum: the whole one is rewritten from the Add after it
    found = _analyze(ctx, add)
    if found is None:
        return False
    match, left, right, a_index, b_index = found  # [m, K], [K, n]
    a, b = _matrix(ctx, left, a_index), _matrix(ctx, right, b_index)
    if a is None or b is None:
        return False
    product = node("MatMul", [a.outputs[0], b.outputs[0]])
    product.outputs[0].type = add.outputs[0].type
    return match.replace([a, b, product], product.outputs[0])


def _matrix(ctx: Any, source: ir.Value, index: np.ndarray) -> ir.Node | None:
    """Nodes reading ``source[..., index]`` (a matrix per batch), a Reshape when ``index``
    is the storage order of the whole last axis."""
    shape = shape_of(source)
    width = shape[-1]
    if not isinstance(width, int) or np.any(index >= width):
        return None
    rank = len(shape)
    if index.size == width and np.array_equal(index.reshape(-1), np.arange(width)):
        lead = [d if isinstance(d, int) else 0 for d in shape[:-1]]  # 0: copy a symbolic dim
        target = ctx.constant(np.array(lead + list(index.shape), np.int64), "matrix")
        read = node("Reshape", [source, target])
    else:
        read = node("Gather", [source, ctx.constant(index, "matrix")], axis=rank - 1)
    read.outputs[0].type = source.type
    read.outputs[0].shape = ir.Shape([*shape[:-1], *index.shape])
    return read


def vector_second(ctx: Any, matmul: ir.Node) -> bool:
    """``MatMul(M, v)`` of a 2-D ``M`` and a 1-D ``v`` -> ``MatMul(v, M^T)`` (see the module)."""
    matrix, vector = matmul.inputs
    if rank(matrix) != 2 or rank(vector) != 1 or vector.dtype not in _FLOATS:
        return False
    match = Match(ctx.graph, matmul)
    weights = constant(matrix)
    if weights is not None:
        stored = ctx.constant(np.ascontiguousarray(weights.T), "matmul_t")
        product = node("MatMul", [vector, stored])
        return match.replace([product], product.outputs[0])
    shape = static_shape(matrix)
    if shape is None or shape[0] * shape[1] < _COLUMN_FROM:
        return False
    axis = ctx.constant(np.array([-1], np.int64), "column")
    column = node("Unsqueeze", [vector, axis])
    product = node("MatMul", [matrix, column.outputs[0]])
    flat = node("Squeeze", [product.outputs[0], axis])
    return match.replace([column, product, flat], flat.outputs[0])


# a computed matrix of at least this many elements multiplies a vector as a column
_COLUMN_FROM = 256

REWRITES = ((("Add",), unrolled_product), (("MatMul",), vector_second))
