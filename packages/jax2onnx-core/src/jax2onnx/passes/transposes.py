"""``FoldTransposesPass``: Transposes sink through elementwise ops and merge."""

from __future__ import annotations

from jax2onnx._ir import ir

_UNARY = frozenset(
    "Abs Cast Ceil Celu Cos Elu Erf Exp Floor Gelu HardSigmoid HardSwish IsNaN LeakyRelu Log "
    "Mish Neg Not Reciprocal Relu Round Selu Sigmoid Sign Sin Softplus Softsign Sqrt Tanh".split()
)

_BINARY = frozenset("Add Sub Mul Div Max Min Pow".split())


def _can_become_output(graph: ir.Graph, value: ir.Value) -> bool:
    """A node result that is not already an input or output of the graph."""
    return (
        value.producer() is not None
        and not value.is_graph_input()
        and all(v is not value for v in graph.outputs)
    )


def _perm(node: ir.Node) -> list[int] | None:
    attr = node.attributes.get("perm")
    return None if attr is None else list(attr.as_ints())


def _sinkable(user: ir.Node, slot: int) -> bool:
    """A one-input elementwise op, or a binary one whose other operand is one number."""
    if user.domain not in ("", "ai.onnx") or len(user.outputs) != 1:
        return False
    if user.op_type in _UNARY:
        return len(user.inputs) == 1
    if user.op_type in _BINARY and len(user.inputs) == 2:
        other = user.inputs[1 - slot]
        return other is not None and other.const_value is not None and other.const_value.size == 1
    return False


class FoldTransposesPass(ir.passes.InPlacePass):
    """``Transpose(Transpose(x, p1), p2)`` -> ``Transpose(x, p1[p2])``, or ``x`` if identity.

    A Transpose feeding only an elementwise op (``Relu``, ``Gelu``, ``Cast``,
    or ``Max``/``Add``/... with a single number) first moves below it, so that
    layout changes on both sides of an activation (``Conv -> Transpose ->
    Relu -> Transpose -> Conv``) meet and cancel.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        modified = False
        for _ in range(len(graph)):
            if not self._sink(graph):
                break
            modified = True
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
            out = node.outputs[0]
            if perm == sorted(perm) and id(out) not in outputs:
                ir.convenience.replace_all_uses_with(out, source)
            elif perm == sorted(perm) and _can_become_output(graph, source):
                name = out.name
                if source.shape is None:  # a graph output must carry its shape
                    source.shape = out.shape
                ir.convenience.replace_all_uses_with(out, source, replace_graph_outputs=True)
                source.name = name
            else:
                node.replace_input_with(0, source)
                node.attributes["perm"] = ir.AttrInt64s("perm", perm)
            modified = True
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _sink(graph: ir.Graph) -> bool:
        modified = False
        for node in list(graph):
            if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
                continue
            moved = node.outputs[0]
            uses = moved.uses()
            if len(uses) != 1 or moved in graph.outputs or _perm(node) is None:
                continue
            ((user, slot),) = uses
            if not _sinkable(user, slot):
                continue
            result = user.outputs[0]
            later = list(result.uses())
            was_output = [i for i, v in enumerate(graph.outputs) if v is result]
            user.replace_input_with(slot, node.inputs[0])
            after = ir.Node(
                "", "Transpose", [result], attributes=[node.attributes["perm"]], name=node.name
            )
            graph.insert_after(user, after)
            out = after.outputs[0]
            out.dtype, out.shape = result.dtype, result.shape
            result.shape = node.inputs[0].shape
            for consumer, index in later:
                consumer.replace_input_with(index, out)
            for i in was_output:
                graph.outputs[i] = out
            out.name, result.name = result.name, f"{result.name}_pre"
            graph.remove(node, safe=True)
            modified = True
        return modified
