"""NaN and finiteness tests in fewer nodes (solvers run them once per step).

JAX writes ``isnan(x)`` as ``x != x`` and the lowerings write ``isfinite(x)``
as ``x - x == 0`` (``x - x`` is 0 where ``x`` is finite and NaN elsewhere);
``jnp.any``/``jnp.all`` of a flag is a uint8 ``ReduceMax``/``ReduceMin`` between
two Casts. A solver's step tests its state this way every iteration:

* ``Not(Equal(x, x))`` is ``IsNaN(x)``, and ``Not(Equal(x - x, 0))`` is
  ``IsNaN(x - x)`` (one node for two);
* ``any(not isfinite(x))`` is ``IsNaN(ReduceSum(x - x))`` over the same
  axes: a sum of zeros is 0, a sum with a NaN is NaN (three nodes for six);
* ``all(isfinite(x))`` is ``ReduceSum(x - x) == 0`` (three for five);
* JAX's NaN-propagating ``max``/``min`` of an ``x`` that is ``>= 0`` or NaN
  (``|v|``, a maximum norm) tests ``IsNaN(ReduceSum(x))`` instead of a
  reduction over a cast ``IsNaN(x)`` mask (four nodes for six);
* ``Abs(x)`` of an ``x`` that is ``+0`` or more, or NaN, is ``x``: quotients,
  products and sums of magnitudes (a scaled error ``|d| / (atol + rtol |y|)``
  whose norm takes ``abs`` again), also a Loop carry that starts and stays so;
* last, from opset 20, an ``any``/``all`` left over axes known not to be empty
  reduces the booleans themselves (one node for three; ONNX Runtime refuses an
  empty boolean reduction).

Each is exact for every input, empty reductions included (an empty ``any`` is
false, an empty sum 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.canonical import shape_of
from jax2onnx.passes.fusion.match import Match, constant, int_attr, ints, node, producer, rank
from jax2onnx.passes.identities import take_place
from jax2onnx.values.ir import ir

_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


def _self_difference(value: ir.Value | None) -> ir.Node | None:
    """The ``Sub(x, x)`` of a float ``x`` computing ``value``."""
    sub = producer(value, "Sub")
    if sub is None or sub.inputs[0] is not sub.inputs[1] or sub.inputs[0].dtype not in _FLOATS:
        return None
    return sub


def _finite_test(value: ir.Value | None) -> tuple[ir.Node, ir.Node, ir.Value] | None:
    """``(Equal, Sub, zero)`` when ``value`` is ``Equal(x - x, 0)`` (``isfinite(x)``)."""
    equal = producer(value, "Equal")
    if equal is None:
        return None
    for k in (0, 1):
        sub, zero = _self_difference(equal.inputs[k]), constant(equal.inputs[1 - k])
        if sub is not None and zero is not None and zero.size == 1 and zero.item() == 0:
            return equal, sub, equal.inputs[1 - k]
    return None


def _keeps_shape(found: tuple[ir.Node, ir.Node, ir.Value]) -> bool:
    """Whether the test's zero leaves the shape of ``x - x`` as it is (rank 0 or the same)."""
    return rank(found[2]) in (0, rank(found[1].outputs[0]))


def nan_test(ctx: Any, negation: ir.Node) -> bool:
    """``Not(Equal(x, x))`` -> ``IsNaN(x)``; ``Not(Equal(x - x, 0))`` -> ``IsNaN(x - x)``."""
    equal = producer(negation.inputs[0], "Equal")
    if equal is None:
        return False
    tested = None
    if equal.inputs[0] is equal.inputs[1] and equal.inputs[0].dtype in _FLOATS:
        tested = equal.inputs[0]
    elif (found := _finite_test(equal.outputs[0])) is not None:
        if not _keeps_shape(found):
            return False  # a zero of higher rank broadcasts the test: left as it is
        tested = found[1].outputs[0]
    if tested is None:
        return False
    match = Match(ctx.graph, negation)
    match.take(equal)
    isnan = node("IsNaN", [tested])
    isnan.outputs[0].dtype = ir.DataType.BOOL
    isnan.outputs[0].shape = negation.outputs[0].shape
    return match.replace([isnan], isnan.outputs[0])


def finite_reduction(ctx: Any, back: ir.Node) -> bool:
    """``any(not isfinite(x))`` and ``all(isfinite(x))`` as a sum of ``x - x``."""
    if int_attr(back, "to", 0) != ir.DataType.BOOL:
        return False
    reduce = producer(back.inputs[0], "ReduceMax", "ReduceMin")
    there = producer(reduce.inputs[0], "Cast") if reduce is not None else None
    if there is None or there.inputs[0].dtype != ir.DataType.BOOL:
        return False
    if "axes" in reduce.attributes:  # axes as an attribute: before opset 18, left as it is
        return False
    flag, taken = there.inputs[0], [reduce, there]
    if reduce.op_type == "ReduceMax":  # any(not finite): Not(Equal(x - x, 0)) or IsNaN(x - x)
        isnan = producer(flag, "IsNaN")
        negation = producer(flag, "Not")
        found = _finite_test(negation.inputs[0]) if negation is not None else None
        if found is not None and _keeps_shape(found):
            sub, taken = found[1], [*taken, negation, found[0]]
        elif isnan is not None and _self_difference(isnan.inputs[0]) is not None:
            sub, taken = isnan.inputs[0].producer(), [*taken, isnan]
        else:
            return False
    else:  # all(finite): Equal(x - x, 0)
        found = _finite_test(flag)
        if found is None or rank(found[2]) != 0:
            return False
        sub, taken = found[1], [*taken, found[0]]
    axes = reduce.inputs[1:2] if len(reduce.inputs) > 1 else []
    keep = int_attr(reduce, "keepdims", 1)
    empty_is_noop = int_attr(reduce, "noop_with_empty_axes", 0)
    total = node("ReduceSum", [sub.outputs[0], *axes], keepdims=keep)
    if empty_is_noop:
        total.attributes["noop_with_empty_axes"] = ir.AttrInt64("noop_with_empty_axes", 1)
    total.outputs[0].dtype = sub.outputs[0].dtype
    total.outputs[0].shape = back.outputs[0].shape
    if reduce.op_type == "ReduceMax":
        test = node("IsNaN", [total.outputs[0]])
    else:
        zero = ctx.constant(np.zeros((), sub.outputs[0].dtype.numpy()), "zero")
        test = node("Equal", [total.outputs[0], zero])
    test.outputs[0].dtype = ir.DataType.BOOL
    test.outputs[0].shape = back.outputs[0].shape
    match = Match(ctx.graph, back)
    match.take(*taken)
    return match.replace([total, test], test.outputs[0])


# ops whose every output is >= 0 or NaN: a sum of such values is NaN only when one is
_NON_NEGATIVE = frozenset(("Abs", "Relu", "Sqrt", "Exp", "Sigmoid", "Softplus"))


def _non_negative(value: ir.Value) -> bool:
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return False
    return (
        node.op_type in _NON_NEGATIVE
        or (node.op_type == "Mul" and node.inputs[0] is node.inputs[1])
        or _unsigned(value)
    )


# ops whose result is +0 or more (or NaN) when every operand is
_CLOSED = frozenset(("Add", "Mul", "Div", "Max", "Min", "Sqrt"))


def _unsigned(value: ir.Value | None, depth: int = 0, assumed: ir.Value | None = None) -> bool:
    """Whether ``value`` is ``+0`` or more, or NaN, everywhere (never ``-0``): ``Abs``,
    ``Exp``, ``Sigmoid``, ``Softplus``, a square, a vector's dot product with itself, a
    constant of such numbers, and sums, products, quotients, maxima, minima and square
    roots of those (``assumed``: a value taken to be such, a Loop carry's induction)."""
    if value is None or depth > 6:
        return False
    if value is assumed:
        return True
    array = constant(value)
    if array is not None:
        return array.dtype.kind == "f" and not np.any(np.signbit(array))
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type in ("Abs", "Exp", "Sigmoid", "Softplus"):
        return True
    if node.op_type == "Mul" and node.inputs[0] is node.inputs[1]:
        return True
    if node.op_type == "MatMul" and node.inputs[0] is node.inputs[1] and _vector(node.inputs[0]):
        return True  # sum of squares: +0 for an all-zero vector, NaN with a NaN
    return node.op_type in _CLOSED and all(_unsigned(v, depth + 1, assumed) for v in node.inputs)


def _vector(value: ir.Value) -> bool:
    return value.shape is not None and len(value.shape) == 1


def _unsigned_carry(ctx: Any, value: ir.Value) -> bool:
    """A Loop carry that starts ``+0`` or more (or NaN) and that the body returns so
    whenever it came so (induction over the steps)."""
    loop, body = ctx.owner, ctx.graph
    if loop is None or loop.op_type != "Loop" or not value.is_graph_input():
        return False
    k = next((i for i, v in enumerate(body.inputs) if v is value), None)
    if k is None or k < 2 or len(body.outputs) <= k - 1 or len(loop.inputs) <= k:
        return False
    return _unsigned(loop.inputs[k]) and _unsigned(body.outputs[k - 1], assumed=value)


def unsigned_abs(ctx: Any, op: ir.Node) -> bool:
    """``Abs(x)`` of an ``x`` that is ``+0`` or more, or NaN, is ``x``."""
    x = op.inputs[0]
    if x is None or x.dtype not in _FLOATS:
        return False
    if not (_unsigned(x) or _unsigned_carry(ctx, x)):
        return False
    return take_place(op, x)


def nan_extreme(ctx: Any, where: ir.Node) -> bool:
    """``Where(any(isnan(x)), NaN, ReduceMax(x))`` (or ``ReduceMin``) of an ``x`` that is
    ``>= 0`` or NaN -> ``Where(IsNaN(s), s, ReduceMax(x))`` with ``s = ReduceSum(x)``."""
    back = producer(where.inputs[0], "Cast")
    nan = constant(where.inputs[1])
    extreme = producer(where.inputs[2], "ReduceMax", "ReduceMin")
    if back is None or extreme is None or nan is None or nan.size != 1 or not np.isnan(nan).all():
        return False
    if int_attr(back, "to", 0) != ir.DataType.BOOL:
        return False
    reduce = producer(back.inputs[0], "ReduceMax")
    there = producer(reduce.inputs[0], "Cast") if reduce is not None else None
    isnan = producer(there.inputs[0], "IsNaN") if there is not None else None
    if isnan is None or "axes" in reduce.attributes or "axes" in extreme.attributes:
        return False
    x = extreme.inputs[0]
    if isnan.inputs[0] is not x or x.dtype not in _FLOATS or not _non_negative(x):
        return False
    axes = list(reduce.inputs[1:2])
    if list(extreme.inputs[1:2]) != axes and not _same_constants(extreme, reduce):
        return False
    for attribute in ("keepdims", "noop_with_empty_axes"):
        if int_attr(reduce, attribute, -1) != int_attr(extreme, attribute, -1):
            return False
    total = node("ReduceSum", [x, *axes], keepdims=int_attr(reduce, "keepdims", 1))
    if int_attr(reduce, "noop_with_empty_axes", 0):
        total.attributes["noop_with_empty_axes"] = ir.AttrInt64("noop_with_empty_axes", 1)
    total.outputs[0].dtype, total.outputs[0].shape = x.dtype, extreme.outputs[0].shape
    test = node("IsNaN", [total.outputs[0]])
    test.outputs[0].dtype, test.outputs[0].shape = ir.DataType.BOOL, back.outputs[0].shape
    picked = node("Where", [test.outputs[0], total.outputs[0], extreme.outputs[0]])
    picked.outputs[0].dtype, picked.outputs[0].shape = (
        where.outputs[0].dtype,
        where.outputs[0].shape,
    )
    match = Match(ctx.graph, where)
    match.take(back, reduce, there, isnan)
    return match.replace([total, test, picked], picked.outputs[0])


def _same_constants(a: ir.Node, b: ir.Node) -> bool:
    """Whether the two reductions' axes inputs are equal constants."""
    x = constant(a.inputs[1]) if len(a.inputs) > 1 else None
    y = constant(b.inputs[1]) if len(b.inputs) > 1 else None
    return x is not None and y is not None and np.array_equal(x, y)


def bool_fold(ctx: Any, back: ir.Node) -> bool:
    """``Cast(ReduceMax(Cast(b, uint8)), bool)`` (``any``; ReduceMin: ``all``) is
    ``ReduceMax(b)`` from opset 20, which reduces booleans, over axes known not to be
    empty (ONNX Runtime refuses an empty boolean reduction, JAX's any of none is false)."""
    if ctx.opset < 20 or int_attr(back, "to", 0) != ir.DataType.BOOL:
        return False
    reduce = producer(back.inputs[0], "ReduceMax", "ReduceMin")
    there = producer(reduce.inputs[0], "Cast") if reduce is not None else None
    if there is None or there.inputs[0] is None or there.inputs[0].dtype != ir.DataType.BOOL:
        return False
    if "axes" in reduce.attributes or int_attr(reduce, "noop_with_empty_axes", 0):
        return False
    flag, given = there.inputs[0], reduce.inputs[1] if len(reduce.inputs) > 1 else None
    shape, axes = shape_of(flag), ints(given)
    if shape is None or (given is not None and axes is None):
        return False  # axes computed at run time
    reduced = range(len(shape)) if given is None else axes
    if not all(isinstance(shape[a], int) and shape[a] > 0 for a in reduced):
        return False
    fold = node(
        reduce.op_type, [flag, *reduce.inputs[1:2]], keepdims=int_attr(reduce, "keepdims", 1)
    )
    fold.outputs[0].dtype = ir.DataType.BOOL
    fold.outputs[0].shape = back.outputs[0].shape
    match = Match(ctx.graph, back)
    match.take(reduce, there)
    return match.replace([fold], fold.outputs[0])


REWRITES = (
    (("Not",), nan_test),
    (("Cast",), finite_reduction),
    (("Where",), nan_extreme),
    (("Abs",), unsigned_abs),
)
# after every pattern reading the uint8 form (the NaN tests above, the norms)
LATE = ((("Cast",), bool_fold),)
