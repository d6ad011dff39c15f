"""Step 5: clean the graph with onnx_ir's own passes, plus one of ours.

Identity nodes and unused nodes go, equal subexpressions merge, small equal
initializers merge, unused functions and opset imports go; onnx_ir has all of
these. Ours, where onnx_ir has none: :class:`FoldTransposesPass` merges chains
of Transpose nodes, which the NCHW adaptors and layout-changing lowerings
create next to each other; :class:`FoldConstantsPass` computes, once at
conversion time, the nodes whose inputs are all initializers (a bias
reshaped for broadcasting, ``rsqrt(var + eps)`` of a normalisation) for the
ops whose NumPy result is bit-identical to ONNX Runtime's;
:class:`FuseMatMulAddPass` turns a 2-D ``MatMul + Add`` (a dense layer
written as ``x @ w + b``, two primitives) into one Gemm. Every pass is
deterministic, so the same input gives a byte-identical model.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx_ir.passes import common


class FoldTransposesPass(ir.passes.InPlacePass):
    """``Transpose(Transpose(x, p1), p2)`` -> ``Transpose(x, p1[p2])``, or ``x`` if identity."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        graph = model.graph
        outputs = {id(v) for v in graph.outputs}
        for node in list(graph):
            if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
                continue
            inner = node.inputs[0].producer() if node.inputs[0] is not None else None
            if inner is None or inner.op_type != "Transpose" or inner.domain not in ("", "ai.onnx"):
                continue
            p1, p2 = _perm(inner), _perm(node)
            if p1 is None or p2 is None:
                continue
            perm = [p1[i] for i in p2]
            source = inner.inputs[0]
            if perm == sorted(perm) and id(node.outputs[0]) not in outputs:
                ir.convenience.replace_all_uses_with(node.outputs[0], source)
            else:
                node.replace_input_with(0, source)
                node.attributes["perm"] = ir.AttrInt64s("perm", perm)
            modified = True
        return ir.passes.PassResult(model, modified)


_FLOATS = frozenset((np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)))


def _fold_reshape(node, data, shape):
    allow_zero = node.attributes.get("allowzero")
    target = [int(d) for d in shape]
    if not (allow_zero is not None and allow_zero.as_int()):
        target = [data.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return data.reshape(target)


def _axes(node, given):
    if given is not None:
        return [int(a) for a in given]
    attr = node.attributes.get("axes")
    return None if attr is None else list(attr.as_ints())


def _fold_unsqueeze(node, data, axes=None):
    axes = _axes(node, axes)
    rank = data.ndim + len(axes)
    return data.reshape(_unsqueezed(data.shape, sorted(a % rank for a in axes)))


def _unsqueezed(shape, axes):
    shape = list(shape)
    for axis in axes:
        shape.insert(axis, 1)
    return shape


def _fold_squeeze(node, data, axes=None):
    axes = _axes(node, axes)
    return np.squeeze(data, axis=None if axes is None else tuple(axes))


def _fold_transpose(node, data):
    perm = node.attributes.get("perm")
    return np.transpose(data, None if perm is None else list(perm.as_ints()))


def _fold_cast(node, data):
    target = ir.DataType(node.attributes["to"].as_int())
    if target == ir.DataType.BFLOAT16 or data.dtype not in _FLOATS | {np.dtype(bool)}:
        return None
    if target.numpy() not in _FLOATS:
        return None  # float -> int casts of NaN/out-of-range values are runtime-defined
    return data.astype(target.numpy())


def _float_op(fn):
    def fold(node, *arrays):
        if any(a.dtype not in _FLOATS for a in arrays) or len({a.dtype for a in arrays}) != 1:
            return None
        with np.errstate(all="ignore"):
            return np.asarray(fn(*arrays), dtype=arrays[0].dtype)

    return fold


_FOLDERS = {
    "Reshape": _fold_reshape,
    "Unsqueeze": _fold_unsqueeze,
    "Squeeze": _fold_squeeze,
    "Transpose": _fold_transpose,
    "Cast": _fold_cast,
    "Add": _float_op(np.add),
    "Sub": _float_op(np.subtract),
    "Mul": _float_op(np.multiply),
    "Div": _float_op(np.divide),
    "Neg": _float_op(np.negative),
    "Sqrt": _float_op(np.sqrt),
    "Reciprocal": _float_op(np.reciprocal),
}


class FoldConstantsPass(ir.passes.InPlacePass):
    """Replace a node whose inputs are all initializers by an initializer of its result.

    Only for layout ops and correctly rounded float arithmetic (IEEE ``+ - * /
    sqrt`` give the same bits in NumPy and ONNX Runtime), and only when the
    result is no larger than its largest input, so folding never grows the
    model (a broadcasting ``Add`` that would expand a constant stays).
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        outputs = {id(v) for v in graph.outputs}
        modified = False
        for node in list(graph):
            fold = _FOLDERS.get(node.op_type)
            if fold is None or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
                continue
            if not node.inputs or any(
                v is not None and (v.const_value is None or v.is_graph_input()) for v in node.inputs
            ):
                continue
            arrays = [None if v is None else v.const_value.numpy() for v in node.inputs]
            if node.op_type not in ("Unsqueeze", "Squeeze") and any(a is None for a in arrays):
                continue
            result = fold(node, *arrays)
            old = node.outputs[0]
            if result is None or id(old) in outputs:
                continue
            if result.size > max(a.size for a in arrays if a is not None):
                continue
            new = ir.Value(
                name=old.name,
                type=ir.TensorType(ir.DataType.from_numpy(result.dtype)),
                shape=ir.Shape(result.shape),
                const_value=ir.Tensor(np.ascontiguousarray(result), name=old.name),
            )
            ir.convenience.replace_all_uses_with(old, new)
            graph.remove(node, safe=True)
            graph.register_initializer(new)
            modified = True
        return ir.passes.PassResult(model, modified)


_GEMM_DTYPES = frozenset((ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16))


class FuseMatMulAddPass(ir.passes.InPlacePass):
    """``Add(MatMul(a, b), c)`` of 2-D ``a``, ``b`` -> ``Gemm(a, b, c)`` (a dense layer).

    Only when the MatMul feeds nothing else, ``c`` broadcasts to the product's
    shape unidirectionally (``[N]``, ``[1, N]``, ``[M, N]``...) and the dtype is a
    float type Gemm takes. The numbers are the same: Gemm computes ``a @ b + c``.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        modified = False
        for add in list(graph):
            if add.op_type != "Add" or add.domain not in ("", "ai.onnx"):
                continue
            for k in (0, 1):
                product, bias = add.inputs[k], add.inputs[1 - k]
                matmul = product.producer() if product is not None else None
                if (
                    matmul is None
                    or matmul.op_type != "MatMul"
                    or matmul.domain not in ("", "ai.onnx")
                ):
                    continue
                if not _fusable(graph, matmul, product, bias):
                    continue
                gemm = ir.Node("", "Gemm", [*matmul.inputs, bias], num_outputs=1, name=matmul.name)
                out, old = gemm.outputs[0], add.outputs[0]
                out.dtype, out.shape = old.dtype, old.shape
                graph.insert_before(add, gemm)
                ir.convenience.replace_all_uses_with(old, out, replace_graph_outputs=True)
                graph.remove([add, matmul], safe=True)
                out.name = old.name
                modified = True
                break
        return ir.passes.PassResult(model, modified)


def _fusable(graph: ir.Graph, matmul: ir.Node, product: ir.Value, bias: ir.Value | None) -> bool:
    a, b = matmul.inputs
    if bias is None or any(v is None or v.shape is None for v in (a, b, bias, product)):
        return False
    if len(a.shape) != 2 or len(b.shape) != 2 or len(bias.shape) > 2:
        return False
    if product.dtype not in _GEMM_DTYPES or len(product.uses()) != 1 or product in graph.outputs:
        return False
    target = list(product.shape)
    for have, want in zip(reversed(list(bias.shape)), reversed(target)):
        if not (have == 1 or have == want):
            return False
    return True


def _perm(node: ir.Node) -> list[int] | None:
    attr = node.attributes.get("perm")
    return None if attr is None else list(attr.as_ints())


def optimize(model: ir.Model) -> ir.Model:
    """Run the cleanup passes in place and return the model."""
    passes = ir.passes.Sequential(
        common.IdentityEliminationPass(),
        FoldConstantsPass(),
        FoldTransposesPass(),
        common.RemoveUnusedNodesPass(),
        common.CommonSubexpressionEliminationPass(),
        common.RemoveUnusedNodesPass(),
        FuseMatMulAddPass(),
        common.DeduplicateInitializersPass(),
        common.RemoveUnusedFunctionsPass(),
        common.RemoveUnusedOpsetsPass(),
    )
    passes(model)
    return model
