"""Step 5: clean the graph with onnx_ir's own passes, plus one of ours.

Identity nodes and unused nodes go, equal subexpressions merge, small equal
initializers merge, unused functions and opset imports go; onnx_ir has all of
these. Ours, where onnx_ir has none: :class:`FoldTransposesPass` merges chains
of Transpose nodes, which the NCHW adaptors and layout-changing lowerings
create next to each other; :class:`FuseMatMulAddPass` turns a 2-D
``MatMul + Add`` (a dense layer written as ``x @ w + b``, two primitives) into
one Gemm. Every pass is deterministic, so the same input gives a
byte-identical model.
"""

from __future__ import annotations

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
