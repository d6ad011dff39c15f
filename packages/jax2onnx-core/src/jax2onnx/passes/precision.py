"""The precision step: bfloat16 ops ONNX Runtime's CPU provider cannot run compute in float32.

Rules emit bfloat16 ops as the jaxpr computes them (see
:func:`jax2onnx.kernels.has_kernel`). :class:`WidenHalfPrecisionPass` then
gives every such op without a CPU kernel of its own
(:func:`jax2onnx.kernels.native_kernel`, the table read from ONNX Runtime's
kernel registry) float32 operands and Casts its results back to bfloat16.
XLA's CPU backend computes bfloat16 elementwise math the same way, so
the numbers are the ones JAX computes on CPU: each op rounds to bfloat16
once, where the jaxpr says. (Under ``jax.jit`` XLA may skip the rounding of a
result that is only converted to float32; the model keeps it, as JAX does op
by op.)

:class:`FoldCastsPass` removes the Cast pairs that cancel: a widening Cast
followed by the Cast back (bfloat16 -> float32 -> bfloat16), and a rounding
Cast pair (float32 -> bfloat16 -> float32) around a value that is already a
bfloat16 number (a widened bfloat16 value, passed through ops that only move,
select or negate values). Other pairs round, as JAX does, and stay.

float16 needs neither: ONNX Runtime computes the float16 ops it lacks kernels
for in float32 itself. ``to_onnx(native_half_precision=True)`` skips the step
and keeps every bfloat16 op for runtimes that have the kernels (TensorRT, ONNX
Runtime CUDA and DirectML, onnxruntime-web WebGPU).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx._ir import ir
from jax2onnx.kernels import BFLOAT16, DEFAULT_OPSET, F32, native_kernel

_BF16 = ir.DataType.BFLOAT16
_F32 = ir.DataType.FLOAT
# ops that are not kernels, or whose bfloat16 operands are not data
_SKIP = frozenset({"Constant", "Cast", "CastLike"})
# ops whose result holds only values of their operands, negated at most: a bfloat16
# number stays one (operand positions that carry the data; None: all of them)
_EXACT: dict[str, tuple[int, ...] | None] = {
    "Identity": None, "Reshape": (0,), "Transpose": None, "Squeeze": (0,),
    "Unsqueeze": (0,), "Flatten": None, "Expand": (0,), "Tile": (0,), "Slice": (0,),
    "Split": (0,), "Concat": None, "Gather": (0,), "GatherElements": (0,),
    "GatherND": (0,), "Neg": None, "Abs": None, "Relu": None, "Max": None, "Min": None,
    "Where": (1, 2), "ReduceMax": (0,), "ReduceMin": (0,), "MaxPool": (0,),
    "Pad": (0, 2), "Floor": None, "Ceil": None, "Round": None,
}  # fmt: skip


def _graphs(model: ir.Model) -> list[Any]:
    """The main graph, every subgraph and every function body."""
    found: list[Any] = []

    def walk(graph: Any) -> None:
        found.append(graph)
        for node in graph:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    walk(attr.value)
                elif attr.type == ir.AttributeType.GRAPHS:
                    for sub in attr.value:
                        walk(sub)

    walk(model.graph)
    for function in model.functions.values():
        walk(function)
    return found


class _Names:
    """Fresh value names, unique in the whole model (subgraphs and functions too)."""

    def __init__(self, graphs: list[Any]) -> None:
        self.taken: set[str] = set()
        for graph in graphs:
            for value in getattr(graph, "inputs", ()):
                self.taken.add(value.name or "")
            for node in graph:
                self.taken.update(v.name or "" for v in node.outputs)
        self.taken.update(graphs[0].initializers)

    def __call__(self, base: str | None) -> str:
        name, n = f"{base}__f32", 1
        while name in self.taken:
            name, n = f"{base}__f32_{n}", n + 1
        self.taken.add(name)
        return name


def _is_bf16(value: ir.Value | None) -> bool:
    return value is not None and value.dtype == _BF16


def _dtype_attr(node: ir.Node) -> bool:
    attr = node.attributes.get("dtype")
    return attr is not None and attr.type == ir.AttributeType.INT and attr.value == _BF16


class WidenHalfPrecisionPass(ir.passes.InPlacePass):
    """Every bfloat16 op without an ONNX Runtime CPU kernel computes in float32 between Casts.

    Operands are widened once per value (one Cast however many ops read it);
    results are Cast back to bfloat16 under their own names, so graph outputs
    and consumers are unchanged.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = model.opset_imports.get("", DEFAULT_OPSET)
        graphs = _graphs(model)
        names = _Names(graphs)
        modified = False
        for graph in graphs:
            widened: dict[int, ir.Value] = {}
            for node in list(graph):
                if self._needs(node, opset):
                    self._widen(graph, node, widened, names)
                    modified = True
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _needs(node: ir.Node, opset: int) -> bool:
        if node.domain not in ("", "ai.onnx") or node.op_type in _SKIP:
            return False
        values = [*node.inputs, *node.outputs]
        if not (any(_is_bf16(v) for v in values) or _dtype_attr(node)):
            return False
        return not native_kernel(node.op_type, BFLOAT16, opset) and native_kernel(
            node.op_type, F32, opset
        )

    @staticmethod
    def _widen(graph: Any, node: ir.Node, widened: dict[int, ir.Value], names: _Names) -> None:
        for index, value in enumerate(node.inputs):
            if not _is_bf16(value):
                continue
            wide = widened.get(id(value))
            if wide is None:
                cast = ir.Node("", "Cast", [value], attributes=[ir.AttrInt64("to", _F32)])
                cast.metadata_props.update(node.metadata_props)
                graph.insert_before(node, cast)
                wide = cast.outputs[0]
                wide.dtype, wide.shape = _F32, value.shape
                wide.name = names(value.name)
                widened[id(value)] = wide
            node.replace_input_with(index, wide)
        if _dtype_attr(node):
            node.attributes["dtype"] = ir.AttrInt64("dtype", _F32)
        for out in node.outputs:
            if _is_bf16(out):
                _narrow_result(graph, node, out, names(out.name))


def _narrow_result(graph: Any, node: ir.Node, out: ir.Value, wide_name: str) -> None:
    """``out`` becomes float32; its users read it Cast back to bfloat16."""
    uses = list(out.uses())
    outputs = [i for i, v in enumerate(graph.outputs) if v is out]
    name = out.name
    out.dtype = _F32
    out.name = wide_name
    back = ir.Node("", "Cast", [out], attributes=[ir.AttrInt64("to", _BF16)])
    back.metadata_props.update(node.metadata_props)
    graph.insert_after(node, back)
    narrow = back.outputs[0]
    narrow.dtype, narrow.shape, narrow.name = _BF16, out.shape, name
    for use in uses:
        use.node.replace_input_with(use.idx, narrow)
    for i in outputs:
        graph.outputs[i] = narrow


class FoldCastsPass(ir.passes.InPlacePass):
    """Cast pairs that give back their input exactly go (see the module docstring)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in _graphs(model):
            exact: dict[int, bool] = {}
            for node in list(graph):
                if node.op_type != "Cast" or node.domain not in ("", "ai.onnx"):
                    continue
                source = _cancelled(node, exact)
                if source is None:
                    continue
                out = node.outputs[0]
                if out.is_graph_output():
                    if (
                        source.is_graph_input()
                        or source.is_graph_output()
                        or source.is_initializer()
                    ):
                        continue
                    ir.convenience.replace_all_uses_with(out, source, replace_graph_outputs=True)
                    source.name, out.name = out.name, f"{out.name}__folded"
                else:
                    ir.convenience.replace_all_uses_with(out, source)
                modified = True
        return ir.passes.PassResult(model, modified)


def _named_elsewhere(value: ir.Value) -> bool:
    """A graph input, output or initializer: its name is part of the graph's interface."""
    return value.is_graph_input() or value.is_graph_output() or value.is_initializer()


_LOSSLESS = {  # widening Casts that keep every value
    (_BF16, _F32), (ir.DataType.FLOAT16, _F32), (_BF16, ir.DataType.DOUBLE),
    (ir.DataType.FLOAT16, ir.DataType.DOUBLE), (_F32, ir.DataType.DOUBLE),
}  # fmt: skip


def _cancelled(cast: ir.Node, exact: dict[int, bool]) -> ir.Value | None:
    """The value ``cast`` gives back unchanged, or None."""
    x = cast.inputs[0]
    if x is None or x.dtype is None:
        return None
    if x.dtype == cast.outputs[0].dtype:  # a Cast to its own type
        return x
    first = x.producer()
    if first is None or first.op_type != "Cast" or first.domain not in ("", "ai.onnx"):
        return None
    source = first.inputs[0]
    if source is None or source.dtype != cast.outputs[0].dtype:
        return None
    if (source.dtype, x.dtype) in _LOSSLESS:  # widen, then narrow back
        return source
    if (source.dtype, x.dtype) == (_F32, _BF16) and _bf16_values(source, exact, 0):
        return source  # rounding a bfloat16 number to bfloat16
    return None


def _bf16_values(value: ir.Value, exact: dict[int, bool], depth: int) -> bool:
    """Whether every element of float32 ``value`` is a bfloat16 number."""
    known = exact.get(id(value))
    if known is not None:
        return known
    result = False
    if value.const_value is not None:
        array = value.const_value.numpy()
        result = bool(np.array_equal(array.astype(BFLOAT16).astype(array.dtype), array))
    elif depth < 64 and (node := value.producer()) is not None:
        positions = _EXACT.get(node.op_type, ())
        if node.op_type == "Cast":
            source = node.inputs[0]
            result = source is not None and source.dtype in (_BF16, ir.DataType.BOOL)
        elif positions != () and node.domain in ("", "ai.onnx"):
            inputs = (
                node.inputs
                if positions is None
                else [node.inputs[i] for i in positions if i < len(node.inputs)]
            )
            result = all(
                v is None or v.dtype != _F32 or _bf16_values(v, exact, depth + 1) for v in inputs
            )
    exact[id(value)] = result
    return result
