"""Older opsets: node forms newer than the target opset, written with older ops as they are emitted.

Lowerings emit today's ONNX (``ReduceMean`` with its axes as an input,
``Split(num_outputs=)``, ``Shape(start=, end=)``, ``Add`` on int8,
``Reshape(allowzero=1)`` ...). When the conversion targets an opset older
than the form, :func:`adapt` writes the same computation in the older form.
The table is data: op type -> (the opset the form needs, when a node needs it,
its rewrite), so every plugin's lowerings work at opsets 13..26 without an
``if ctx.opset`` of their own. Ops that do
not exist at all below some opset (``BitwiseAnd``, ``GroupNormalization`` ...)
are the lowerings' business: they register a second lowering with a lower
``min_opset`` (or a macro primitive falls back to its ``impl``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jax2onnx.values.errors import LoweringError
from jax2onnx.values.ir import ir

_REDUCTIONS_WITH_AXES_INPUT = (
    "ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum "
    "ReduceLogSumExp ReduceSumSquare"
).split()
_SMALL_INTS = {
    ir.DataType.INT8: ir.DataType.INT32,
    ir.DataType.INT16: ir.DataType.INT32,
    ir.DataType.UINT8: ir.DataType.UINT32,
    ir.DataType.UINT16: ir.DataType.UINT32,
}
_HALF_FLOATS = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)

Rewrite = Callable[[Any, str, Sequence[Any], dict[str, Any], int], Sequence[ir.Value]]
Needs = Callable[[Sequence[Any], dict[str, Any]], bool]


def _const_ints(value: Any, what: str) -> list[int]:
    if value is None or value.const_value is None:
        raise LoweringError(
            f"{what} takes its axes as a runtime value, which needs opset 18; pass opset=18 or "
            "newer to to_onnx"
        )
    return [int(a) for a in np.asarray(value.const_value.numpy()).reshape(-1)]


def _reduce(scope, op_type, inputs, attrs, num_outputs):
    """Reduce* with an axes input (opset 18) -> the axes attribute."""
    x, axes = inputs[0], inputs[1] if len(inputs) > 1 else None
    attrs = dict(attrs)
    noop = attrs.pop("noop_with_empty_axes", 0)
    if axes is not None:
        listed = _const_ints(axes, op_type)
        if not listed and noop:
            return scope.add_node("Identity", [x], {})
        attrs["axes"] = listed or None
    return scope.add_node(op_type, [x], attrs, num_outputs=num_outputs)


def _split(scope, op_type, inputs, attrs, num_outputs):
    """Split(num_outputs=k) (opset 18) -> Split with its sizes as an input (the last smaller)."""
    attrs = dict(attrs)
    k = int(attrs.pop("num_outputs"))
    axis = int(attrs.get("axis", 0))
    x = inputs[0]
    shape = x.shape
    if shape is not None and isinstance(shape[axis], int):
        size = shape[axis]
        chunk = -(-size // k)
        sizes = [chunk] * (k - 1) + [size - chunk * (k - 1)]
        split = scope.const(np.array(sizes, np.int64))
    else:
        (full,) = scope.add_node("Shape", [x], {})
        (dim,) = scope.add_node("Gather", [full, scope.const(np.array([axis], np.int64))], {})
        one_less = scope.const(np.array([k - 1], np.int64))
        (padded,) = scope.add_node("Add", [dim, one_less], {})
        (chunk,) = scope.add_node("Div", [padded, scope.const(np.array([k], np.int64))], {})
        (taken,) = scope.add_node("Mul", [chunk, one_less], {})
        (last,) = scope.add_node("Sub", [dim, taken], {})
        (split,) = scope.add_node("Concat", [*([chunk] * (k - 1)), last], {"axis": 0})
    return scope.add_node("Split", [x, split], attrs, num_outputs=num_outputs)


def _shape(scope, op_type, inputs, attrs, num_outputs):
    """Shape(start=, end=) (opset 15) -> Shape then Slice."""
    (full,) = scope.add_node("Shape", [inputs[0]], {})
    start = int(attrs.get("start") or 0)
    end = attrs.get("end")
    end = np.iinfo(np.int64).max if end is None else int(end)
    return scope.add_node(
        "Slice",
        [full, scope.const(np.array([start], np.int64)), scope.const(np.array([end], np.int64))],
        {},
    )


def _widened(scope, op_type, inputs, attrs, num_outputs):
    """Arithmetic on int8/int16/uint8/uint16 (opset 14) -> the same on 32 bits, cast back.

    The 32-bit result reduced to the narrow type is the narrow type's
    wrapping result, as JAX computes it."""
    dtype = inputs[0].dtype
    wide = _SMALL_INTS[dtype]
    cast = [scope.add_node("Cast", [v], {"to": wide})[0] for v in inputs]
    (y,) = scope.add_node(op_type, cast, attrs)
    return scope.add_node("Cast", [y], {"to": dtype})


def _small_int(inputs, attrs) -> bool:
    return bool(inputs) and inputs[0] is not None and inputs[0].dtype in _SMALL_INTS


def _half_check(scope, op_type, inputs, attrs, num_outputs):
    """IsInf on float16/bfloat16 (opset 20) -> IsInf on float32 (exact)."""
    (x,) = scope.add_node("Cast", [inputs[0]], {"to": ir.DataType.FLOAT})
    return scope.add_node(op_type, [x], attrs)


# element types newer than opset 13, by the opset that introduced them
_TYPE_OPSETS = {
    ir.DataType.FLOAT8E4M3FN: 19,
    ir.DataType.FLOAT8E4M3FNUZ: 19,
    ir.DataType.FLOAT8E5M2: 19,
    ir.DataType.FLOAT8E5M2FNUZ: 19,
    ir.DataType.INT4: 21,
    ir.DataType.UINT4: 21,
    ir.DataType.FLOAT4E2M1: 23,
}


def _casts_to(since: int) -> Needs:
    types = {int(t) for t, v in _TYPE_OPSETS.items() if v == since}
    return lambda inputs, attrs: int(attrs["to"]) in types


def _refuse_type(scope, op_type, inputs, attrs, num_outputs):
    """A Cast to a type the target opset does not have: a clear error."""
    dtype = ir.DataType(int(attrs["to"]))
    since = _TYPE_OPSETS[dtype]
    raise LoweringError(
        f"{scope.conversion.current} at {scope.conversion.source}: the ONNX type {dtype.name} "
        f"exists from opset {since}; pass opset={since} or newer to to_onnx"
    )


def _layer_norm(scope, op_type, inputs, attrs, num_outputs):
    """LayerNormalization (opset 17) -> mean, centred variance, rsqrt, scale and bias."""
    if num_outputs != 1:
        raise LoweringError(
            "LayerNormalization's mean and inverse-deviation outputs need opset 17; pass "
            "opset=17 or newer to to_onnx"
        )
    x, scale, bias = (*inputs, None, None)[:3]
    axis = int(attrs.get("axis", -1))
    if axis < 0:
        axes = list(range(axis, 0))
    elif x.shape is not None:
        axes = list(range(axis, len(x.shape)))
    else:
        raise LoweringError(
            "LayerNormalization with a positive axis on a value of unknown rank needs opset 17"
        )
    eps = scope.const(np.asarray(attrs.get("epsilon", 1e-5), x.dtype.numpy()))
    (mean,) = scope.add_node("ReduceMean", [x], {"axes": axes, "keepdims": 1})
    (centred,) = scope.add_node("Sub", [x, mean], {})
    (square,) = scope.add_node("Mul", [centred, centred], {})
    (var,) = scope.add_node("ReduceMean", [square], {"axes": axes, "keepdims": 1})
    (shifted,) = scope.add_node("Add", [var, eps], {})
    (dev,) = scope.add_node("Sqrt", [shifted], {})
    (y,) = scope.add_node("Div", [centred, dev], {})
    (y,) = scope.add_node("Mul", [y, scale], {})
    if bias is None:
        return [y]
    return scope.add_node("Add", [y, bias], {})


def _reshape_zero(scope, op_type, inputs, attrs, num_outputs):
    """Reshape(allowzero=1) (opset 14) -> a Reshape to the target with 0s raised to 1, cut back.

    Before opset 14 a 0 in a Reshape's target copies the input's axis. When
    the target holds sizes (no -1) that may be 0 at run time, the data is
    flattened, padded with zeros to the product of the raised target (no
    padding unless the result is empty), reshaped to the raised target and
    sliced to the real one: the same array, of the right zero-size shape.
    """
    x, shape = inputs
    attrs = {k: v for k, v in attrs.items() if k != "allowzero"}
    known = shape.const_value
    if known is not None and 0 not in known.numpy():
        return scope.add_node("Reshape", [x, shape], attrs)

    def i64(values):
        return scope.const(np.array(values, np.int64))

    (flat,) = scope.add_node("Reshape", [x, i64([-1])], {})
    (raised,) = scope.add_node("Max", [shape, i64([1])], {})
    (total,) = scope.add_node("ReduceProd", [raised], {"keepdims": 1})
    (size,) = scope.add_node("Shape", [flat], {})
    (extra,) = scope.add_node("Sub", [total, size], {})
    if x.dtype is None:  # Pad's zeros (ONNX Runtime's Pad-13 lacks 16-bit types)
        (pads,) = scope.add_node("Concat", [i64([0]), extra], {"axis": 0})
        (padded,) = scope.add_node("Pad", [flat, pads], {})
    else:
        zero = scope.const(np.zeros((1,), x.dtype.numpy()))
        (filler,) = scope.add_node("Expand", [zero, extra], {})
        (padded,) = scope.add_node("Concat", [flat, filler], {"axis": 0})
    (full,) = scope.add_node("Reshape", [padded, raised], {})
    (starts,) = scope.add_node("Sub", [shape, shape], {})
    return scope.add_node("Slice", [full, starts, shape], {})


# op type -> [(opset the form needs, does this node use the form?, rewrite)]
ADAPTERS: dict[str, list[tuple[int, Needs, Rewrite]]] = {
    **{
        op: [
            (18, lambda inputs, attrs: len(inputs) > 1 or "noop_with_empty_axes" in attrs, _reduce)
        ]
        for op in _REDUCTIONS_WITH_AXES_INPUT
    },
    "Split": [(18, lambda inputs, attrs: "num_outputs" in attrs, _split)],
    "Shape": [(15, lambda inputs, attrs: bool(attrs.get("start") or attrs.get("end")), _shape)],
    **{
        op: [(14, lambda inputs, attrs: _small_int(inputs, attrs), _widened)]
        for op in ("Add", "Sub", "Mul", "Div")
    },
    "IsInf": [(20, lambda inputs, attrs: inputs[0].dtype in _HALF_FLOATS, _half_check)],
    "LayerNormalization": [(17, lambda inputs, attrs: True, _layer_norm)],
    "Reshape": [(14, lambda inputs, attrs: bool(attrs.get("allowzero")), _reshape_zero)],
    "Cast": [(since, _casts_to(since), _refuse_type) for since in (19, 21, 23)],
}


def adapt(
    scope: Any,
    op_type: str,
    inputs: Sequence[Any],
    attrs: dict[str, Any],
    num_outputs: int,
) -> Sequence[ir.Value] | None:
    """The node written for ``scope``'s opset, or None when it is fine as it is."""
    opset = scope.conversion.opset
    for since, needs, rewrite in ADAPTERS.get(op_type, ()):
        if opset < since and needs(inputs, attrs):
            return rewrite(scope, op_type, inputs, attrs, num_outputs)
    return None
