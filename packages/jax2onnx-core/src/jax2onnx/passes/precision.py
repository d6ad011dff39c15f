"""The precision step: half-precision ops ONNX Runtime's CPU provider cannot run compute in float32.

Rules emit bfloat16 and float16 ops as the jaxpr computes them (see
:func:`jax2onnx.values.kernels.has_kernel`). :class:`WidenHalfPrecisionPass` then
gives every such op without a CPU kernel of its own
(:func:`jax2onnx.values.kernels.native_kernel`, the table read from ONNX Runtime's
kernel registry) float32 operands and Casts its results back. XLA's CPU
backend computes half-precision elementwise math the same way, so the
numbers are the ones JAX computes on CPU: each op rounds once, where the
jaxpr says. (Under ``jax.jit`` XLA may skip the rounding of a result that is
only converted to float32; the model keeps it, as JAX does op by op.)
ONNX Runtime would widen the float16 ops it lacks by itself, but without the
roundings between ops, so float16 is widened here too.

:class:`FoldCastsPass` removes the Cast pairs that cancel: a widening Cast
followed by the Cast back (bfloat16 -> float32 -> bfloat16), and a rounding
Cast pair (float32 -> bfloat16 -> float32) around a value that is already a
bfloat16 number (a widened bfloat16 value, passed through ops that only move,
select or negate values); float16 alike. Other pairs round, as JAX does, and
stay.

The step also widens, in both modes, every half-precision op whose ONNX
schema at the model's opset has no such type where the op has it (``Compress``
and ``ReverseSequence`` in bfloat16 at every opset, ``ConstantOfShape`` below
20, ``Loop``/``If``/``Scan`` below 16, ``Celu`` in float16 ...): ONNX Runtime
registers kernels for some of them, but the ONNX checker and ONNX Runtime's
loader refuse such a model. For ops that only move or select values the
widening is exact. A widened ``Loop``, ``If`` or ``Scan`` carries float32: its
bodies read their bfloat16 inputs as float32 and Cast them back, and Cast
their bfloat16 results to float32.

``to_onnx(native_half_precision=True)`` keeps every half-precision op the
ONNX schema allows, for runtimes that have the kernels (TensorRT, ONNX Runtime
CUDA and DirectML, onnxruntime-web WebGPU).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from jax2onnx.values.ir import ir
from jax2onnx.values.kernels import BFLOAT16, DEFAULT_OPSET, F32, native_kernel

_BF16 = ir.DataType.BFLOAT16
_F16 = ir.DataType.FLOAT16
_F32 = ir.DataType.FLOAT
_NUMPY = {_BF16: BFLOAT16, _F16: np.dtype(np.float16)}
# ops that are not kernels, or whose bfloat16 operands are not data
_SKIP = frozenset({"Constant", "Cast", "CastLike"})
# ``Value.meta`` key: a float32 body input of a widened Loop/Scan that only ever holds
# values of this half type (a widened operand, or a result Cast from it)
_CARRIES = "jax2onnx.precision.carries"
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


def _is_half(value: ir.Value | None, half: ir.DataType) -> bool:
    return value is not None and value.dtype == half


def _dtype_attr(node: ir.Node, half: ir.DataType = _BF16) -> bool:
    attr = node.attributes.get("dtype")
    return attr is not None and attr.type == ir.AttributeType.INT and attr.value == half


def _half_of(node: ir.Node) -> ir.DataType | None:
    """The half-precision type ``node`` computes in, if any (bfloat16 first)."""
    values = [*node.inputs, *node.outputs]
    for half in (_BF16, _F16):
        if any(_is_half(v, half) for v in values) or _dtype_attr(node, half):
            return half
    return None


def _attributes(node: ir.Node) -> dict[str, Any]:
    return {name: attr.value for name, attr in node.attributes.items()}


class WidenHalfPrecisionPass(ir.passes.InPlacePass):
    """Every half-precision op without an ONNX Runtime CPU kernel computes in float32.

    Its bfloat16 or float16 operands are Cast to float32 (once per value,
    however many ops read it) and its results Cast back under their own
    names, so graph outputs and consumers are unchanged. An op whose ONNX
    schema at the model's opset has no bfloat16 or float16 where the op has it
    (``Compress``, ``Einsum``, ``TopK``, ``Loop`` below opset 16, ``Celu`` ...)
    is widened in any case, so the model stays valid ONNX; with ``native=True``
    (``to_onnx``'s ``native_half_precision``) those are the only ones.
    """

    def __init__(self, native: bool = False) -> None:
        super().__init__()
        self.native = native

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = model.opset_imports.get("", DEFAULT_OPSET)
        graphs = _graphs(model)
        names = _Names(graphs)
        modified = False
        for graph in graphs:
            widened: dict[int, ir.Value] = {}
            for node in list(graph):
                half = _half_of(node)
                if half is not None and self._needs(node, half, opset):
                    _widen(model.graph, graph, node, half, widened, names, opset)
                    modified = True
        return ir.passes.PassResult(model, modified)

    def _needs(self, node: ir.Node, half: ir.DataType, opset: int) -> bool:
        if node.domain not in ("", "ai.onnx") or node.op_type in _SKIP:
            return False
        if not _schema_takes(node, half, opset):
            return True  # invalid ONNX as it is, whatever the runtime
        if self.native or not native_kernel(node.op_type, F32, opset):
            return False
        return not native_kernel(node.op_type, _NUMPY[half], opset, _attributes(node))


def _widen(
    main: ir.Graph,
    graph: Any,
    node: ir.Node,
    half: ir.DataType,
    widened: dict[int, ir.Value],
    names: _Names,
    opset: int,
) -> None:
    """``node`` computes in float32: its ``half`` operands widened, its results Cast back."""
    half_types = _half_type_params(node, half, opset)
    for index, value in enumerate(node.inputs):
        if not _is_half(value, half):
            continue
        wide = widened.get(id(value))
        # a scalar becomes a float32 initializer (a function body sees no initializers)
        if wide is None and _small_constant(value) and not isinstance(graph, ir.Function):
            array = value.const_value.numpy().astype(np.float32)
            wide = ir.Value(
                name=names(value.name),
                shape=ir.Shape(array.shape),
                type=ir.TensorType(_F32),
                const_value=ir.Tensor(array),
            )
            main.register_initializer(wide)
            widened[id(value)] = wide
        if wide is None:
            cast = ir.Node("", "Cast", [value], attributes=[ir.AttrInt64("to", _F32)])
            cast.metadata_props.update(node.metadata_props)
            graph.insert_before(node, cast)
            wide = cast.outputs[0]
            wide.dtype, wide.shape = _F32, value.shape
            wide.name = names(value.name)
            widened[id(value)] = wide
        node.replace_input_with(index, wide)
    if _dtype_attr(node, half):
        node.attributes["dtype"] = ir.AttrInt64("dtype", _F32)
    for name, attr in list(node.attributes.items()):
        if attr.type == ir.AttributeType.TENSOR and attr.value.dtype == half:
            array = attr.value.numpy().astype(np.float32)  # ConstantOfShape's value
            node.attributes[name] = ir.AttrTensor(name, ir.Tensor(array))
        elif attr.type == ir.AttributeType.GRAPH:
            _widen_body(attr.value, node, half, names)
        elif attr.type == ir.AttributeType.GRAPHS:
            for body in attr.value:
                _widen_body(body, node, half, names)
    for index, out in enumerate(node.outputs):
        if out.dtype is None and _output_type(node, index, opset) in half_types:
            out.dtype = half  # a rule left it untyped; its type is its inputs'
        if _is_half(out, half):
            _narrow_result(graph, node, out, half, names(out.name))


def _widen_body(body: Any, node: ir.Node, half: ir.DataType, names: _Names) -> None:
    """A widened ``Loop``/``If``/``Scan``'s body: its ``half`` inputs and outputs float32.

    The node's operands and results of type ``half`` are those of its bodies,
    position by position (a Loop's trip count and condition are integers and
    booleans), so the body reads each float32 input Cast back to ``half`` and
    Casts each ``half`` result to float32. So each such body input holds
    ``half`` numbers only, on every iteration (``FoldCastsPass`` reads that).
    """
    first = next(iter(body), None)
    for value in body.inputs:
        if not _is_half(value, half):
            continue
        uses = list(value.uses())
        back = ir.Node("", "Cast", [value], attributes=[ir.AttrInt64("to", half)])
        back.metadata_props.update(node.metadata_props)
        if first is None:
            body.append(back)
        else:
            body.insert_before(first, back)
        narrow = back.outputs[0]
        narrow.dtype, narrow.shape, narrow.name = half, value.shape, value.name
        value.dtype, value.name = _F32, names(value.name)
        value.meta[_CARRIES] = int(half)
        for use in uses:  # a body output that is the input itself stays float32
            use.node.replace_input_with(use.idx, narrow)
    for i, out in enumerate(body.outputs):
        if not _is_half(out, half):
            continue
        wide = ir.Node("", "Cast", [out], attributes=[ir.AttrInt64("to", _F32)])
        wide.metadata_props.update(node.metadata_props)
        body.append(wide)
        result = wide.outputs[0]
        result.dtype, result.shape, result.name = _F32, out.shape, names(out.name)
        body.outputs[i] = result


_HALF_TYPE = {_BF16: "tensor(bfloat16)", _F16: "tensor(float16)"}


@functools.cache
def _signature(op_type: str, domain: str, opset: int) -> tuple[Any, ...] | None:
    """The schema's input and output type strings, and the type parameters that
    admit float32, each with whether it admits bfloat16 and float16; None for
    an op ONNX does not define (not ours to judge)."""
    import onnx

    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    floats = {
        c.type_param_str: (
            _HALF_TYPE[_BF16] in c.allowed_type_strs,
            _HALF_TYPE[_F16] in c.allowed_type_strs,
        )
        for c in schema.type_constraints
        if "tensor(float)" in c.allowed_type_strs
    }
    inputs = tuple(f.type_str for f in schema.inputs)
    outputs = tuple(f.type_str for f in schema.outputs)
    return inputs, outputs, tuple(floats.items())


@functools.cache
def _refused(op_type: str, domain: str, opset: int, half: ir.DataType) -> frozenset[str]:
    """The float type parameters of the op's schema that do not admit ``half``."""
    signature = _signature(op_type, domain, opset)
    if signature is None:
        return frozenset()
    column = 0 if half == _BF16 else 1
    return frozenset(p for p, admits in signature[2] if not admits[column])


def _formal(node: ir.Node, opset: int, outputs: bool, index: int) -> str | None:
    """The type string of ``node``'s input (output) ``index`` in its schema."""
    signature = _signature(node.op_type, node.domain or "", opset)
    formal = signature[1 if outputs else 0] if signature is not None else ()
    return formal[min(index, len(formal) - 1)] if formal else None  # a variadic last repeats


def _half_type_params(node: ir.Node, half: ir.DataType, opset: int) -> set[str]:
    """The schema's type parameters (``T`` ...) that ``node``'s ``half`` inputs bind."""
    found = {_formal(node, opset, False, i) for i, v in enumerate(node.inputs) if _is_half(v, half)}
    return found - {None}


def _schema_takes(node: ir.Node, half: ir.DataType, opset: int) -> bool:
    """Whether the op's ONNX schema admits ``half`` where ``node`` has it.

    Only the type parameters that admit float32 count: widening cannot mend the others.
    """
    refused = _refused(node.op_type, node.domain or "", opset, half)
    if not refused:
        return True
    params = _half_type_params(node, half, opset) | {
        _output_type(node, i, opset) for i, out in enumerate(node.outputs) if _is_half(out, half)
    }
    return not params & refused


def _output_type(node: ir.Node, index: int, opset: int) -> str | None:
    return _formal(node, opset, True, index)


def _small_constant(value: ir.Value) -> bool:
    """A scalar constant (arrays, weights among them, keep their dtype and get a Cast)."""
    return value.const_value is not None and value.const_value.size <= 1


def _narrow_result(
    graph: Any, node: ir.Node, out: ir.Value, half: ir.DataType, wide_name: str
) -> None:
    """``out`` becomes float32; its users read it Cast back to ``half``."""
    uses = list(out.uses())
    outputs = [i for i, v in enumerate(graph.outputs) if v is out]
    name = out.name
    out.dtype = _F32
    out.name = wide_name
    back = ir.Node("", "Cast", [out], attributes=[ir.AttrInt64("to", half)])
    back.metadata_props.update(node.metadata_props)
    graph.insert_after(node, back)
    narrow = back.outputs[0]
    narrow.dtype, narrow.shape, narrow.name = half, out.shape, name
    for use in uses:
        use.node.replace_input_with(use.idx, narrow)
    for i in outputs:
        graph.outputs[i] = narrow


class FoldCastsPass(ir.passes.InPlacePass):
    """Cast pairs that give back their input exactly go (see the module docstring)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in _graphs(model):
            exact: dict[tuple[int, int], bool] = {}
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
                    if source.shape is None:  # a graph output keeps the shape it declared
                        source.shape = out.shape
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


def _cancelled(cast: ir.Node, exact: dict[tuple[int, int], bool]) -> ir.Value | None:
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
    if source.dtype == _F32 and x.dtype in _NUMPY and _half_values(source, x.dtype, exact, 0):
        return source  # rounding a bfloat16 (float16) number to bfloat16 (float16)
    return None


def _half_values(
    value: ir.Value, half: ir.DataType, exact: dict[tuple[int, int], bool], depth: int
) -> bool:
    """Whether every element of float32 ``value`` is a ``half`` number."""
    key = (id(value), int(half))
    known = exact.get(key)
    if known is not None:
        return known
    result = False
    if value.const_value is not None:
        array = value.const_value.numpy()
        narrow = _NUMPY[half]
        with np.errstate(over="ignore", invalid="ignore"):
            result = bool(np.array_equal(array.astype(narrow).astype(array.dtype), array))
    elif value.meta.get(_CARRIES) == int(half):
        result = True
    elif depth < 64 and (node := value.producer()) is not None:
        positions = _EXACT.get(node.op_type, ())
        if node.op_type == "Cast":
            source = node.inputs[0]
            result = source is not None and source.dtype in (half, ir.DataType.BOOL)
        elif positions != () and node.domain in ("", "ai.onnx"):
            inputs = (
                node.inputs
                if positions is None
                else [node.inputs[i] for i in positions if i < len(node.inputs)]
            )
            result = all(
                v is None or v.dtype != _F32 or _half_values(v, half, exact, depth + 1)
                for v in inputs
            )
    exact[key] = result
    return result
