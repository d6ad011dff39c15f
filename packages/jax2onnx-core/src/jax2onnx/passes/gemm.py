"""``FuseMatMulAddPass``: a 2-D ``MatMul + Add`` becomes one Gemm."""

from __future__ import annotations

from jax2onnx.values.ir import ir

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
                gemm = ir.Node(
                    "",
                    "Gemm",
                    [*matmul.inputs, bias],
                    num_outputs=1,
                    name=matmul.name,
                    metadata_props=dict(matmul.metadata_props) or None,
                )
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
