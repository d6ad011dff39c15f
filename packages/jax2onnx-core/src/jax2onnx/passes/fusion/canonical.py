"""Canonical forms: rewrites that remove nodes and give the fusions one form to match.

* ``Unsqueeze(ReduceX(x, axes, keepdims=0), axes)`` -> ``ReduceX(x, axes, keepdims=1)``
  (``jnp.mean(..., keepdims=True)`` lowers as a reduction and an Unsqueeze);
* ``Div(ReduceSum(x, axes, keepdims=1), N)`` with ``N`` the number of reduced
  elements -> ``ReduceMean(x, axes, keepdims=1)`` (JAX's mean is a sum and a
  division);
* an elementwise op reading ``Expand(a, shape)`` reads ``a`` when the op's own
  broadcasting gives the same output shape (unit axes and Reshape chains:
  :mod:`.axes`);
* ``Where(c, a, b)`` with a constant ``c`` that is all true (all false) is
  ``a`` (``b``) when that has the output's shape (``jnp.var`` guards its
  divisor so);
* and what a reduction over pytree leaves leaves behind (``jnp.all`` of a
  stack of one flag, as Equinox's and Optimistix's termination tests write
  it): ``Not(Not(x))`` is ``x``; ``Squeeze(Unsqueeze(x, axes), axes)`` is ``x``,
  so is a Squeeze back to ``x``'s shape of a ``Reshape(x)``, and with ops that
  work element by element between the two (a gather index cast and clamped)
  those ops work on ``x``;
  a one-input ``Concat`` is its input (inputs empty along its axis dropped);
  a ``ReduceMax``/``Min``/``Sum``/
  ``Mean``/``Prod`` over axes of size 1 is its input, squeezed without
  ``keepdims``; ``Cast(Cast(b, T), bool)`` of a bool ``b`` is ``b``;
  ``And(x, True)`` and ``Or(x, False)`` are ``x`` (a constant flag of a
  solver's options, a batch of one);
* arithmetic identities, as XLA's algebraic simplifier applies them (so the
  numbers keep matching ``jax.jit``): ``x + 0``, ``0 + x``, ``x - 0``,
  ``x * 1``, ``1 * x``, ``x / 1``, ``max(x, -inf)`` and ``min(x, inf)`` are
  ``x`` when the constant neither broadcasts ``x`` to a larger shape nor
  changes its type (a solver's zero initial residual, a unit step size, a mass
  matrix of ones, a clip to unbounded limits).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.match import (
    Match,
    constant,
    int_attr,
    ints,
    node,
    producer,
    rank,
    reduced_axes,
    scalar,
)
from jax2onnx.passes.identities import take_place
from jax2onnx.values.ir import ir

REDUCES = (
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSumExp",
    "ReduceSumSquare",
)
# ops that broadcast their inputs against each other (numpy rules)
BROADCASTING = (
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Where",
    "And",
    "Or",
    "Xor",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "PRelu",
)


def keepdims_reduction(ctx: Any, unsqueeze: ir.Node) -> bool:
    reduce = producer(unsqueeze.inputs[0], *REDUCES)
    if reduce is None or int_attr(reduce, "keepdims", 1) != 0 or len(unsqueeze.inputs) < 2:
        return False
    source_rank = rank(reduce.inputs[0])
    target = constant(unsqueeze.inputs[1])
    if source_rank is None or target is None:
        return False
    axes = reduced_axes(reduce, source_rank)
    inserted = tuple(sorted(int(a) % source_rank for a in target.reshape(-1)))
    if axes is None or axes != inserted or int_attr(reduce, "noop_with_empty_axes", 0):
        return False
    match = Match(ctx.graph, unsqueeze)
    match.take(reduce)
    attributes = {k: v for k, v in reduce.attributes.items() if k != "keepdims"}
    fused = ir.Node(
        "",
        reduce.op_type,
        list(reduce.inputs),
        attributes=[*attributes.values(), ir.AttrInt64("keepdims", 1)],
        num_outputs=1,
    )
    return match.replace([fused], fused.outputs[0])


def mean(ctx: Any, div: ir.Node) -> bool:
    reduce = producer(div.inputs[0], "ReduceSum")
    count = scalar(div.inputs[1])
    if reduce is None or count is None or int_attr(reduce, "keepdims", 1) != 1:
        return False
    x_rank = rank(reduce.inputs[0])
    if x_rank is None or int_attr(reduce, "noop_with_empty_axes", 0):
        return False
    axes = reduced_axes(reduce, x_rank)
    sizes = [reduce.inputs[0].shape[a] for a in axes or ()]
    if not axes or not all(isinstance(n, int) for n in sizes) or count != float(np.prod(sizes)):
        return False
    match = Match(ctx.graph, div)
    match.take(reduce)
    x = reduce.inputs[0]
    if ctx.opset >= 18:
        axes_value = ctx.constant(np.asarray(axes, np.int64), "axes")
        fused = node("ReduceMean", [x, axes_value], keepdims=1)
    else:
        fused = ir.Node(
            "",
            "ReduceMean",
            [x],
            attributes=[ir.AttrInt64s("axes", list(axes)), ir.AttrInt64("keepdims", 1)],
            num_outputs=1,
        )
    return match.replace([fused], fused.outputs[0])


def expand_operand(ctx: Any, op: ir.Node) -> bool:
    out = static_or_symbolic(op.outputs[0])
    if out is None:
        return False
    changed = False
    for k, value in enumerate(op.inputs):
        expand = producer(value, "Expand")
        if expand is None:
            continue
        inputs = [v if i != k else expand.inputs[0] for i, v in enumerate(op.inputs)]
        shapes = [static_or_symbolic(v) or _static(shape_of(v)) for v in inputs]
        if any(s is None for s in shapes) or broadcast(shapes) != out:
            continue
        if op.op_type == "PRelu" and k == 1:
            continue  # PRelu's slope broadcasts one way only
        op.replace_input_with(k, expand.inputs[0])
        unused = not expand.outputs[0].uses() and not expand.outputs[0].is_graph_output()
        if unused and expand.graph is ctx.graph:  # an enclosing graph's Expand stays there
            ctx.graph.remove(expand, safe=True)
        changed = True
    return changed


def _static(shape: tuple[Any, ...] | None) -> tuple[int, ...] | None:
    """``shape`` when every dim is an int: a static shape a producer implies (an
    Unsqueeze's output the lowering left without one)."""
    return shape if shape is not None and all(isinstance(d, int) for d in shape) else None


def constant_where(ctx: Any, where: ir.Node) -> bool:
    condition = constant(where.inputs[0])
    if condition is None or condition.dtype != np.bool_ or condition.size == 0:
        return False
    if condition.all():
        kept = where.inputs[1]
    elif not condition.any():
        kept = where.inputs[2]
    else:
        return False
    return _stand_in(ctx, where, kept)


def static_or_symbolic(value: ir.Value | None) -> tuple[Any, ...] | None:
    """The shape as a tuple of ints and symbolic names (``None`` when unknown)."""
    if value is None or value.shape is None:
        return None
    dims = []
    for d in value.shape:
        if isinstance(d, int):
            dims.append(d)
        elif isinstance(d, ir.SymbolicDim) and d.value is not None:
            dims.append(d.value)
        else:
            return None
    return tuple(dims)


def broadcast(shapes: list[tuple[Any, ...]]) -> tuple[Any, ...] | None:
    """NumPy broadcasting of shapes with symbolic names (``None``: not provably valid)."""
    width = max(len(s) for s in shapes)
    out = []
    for i in range(width):
        dims = {s[len(s) - width + i] for s in shapes if len(s) - width + i >= 0} - {1}
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(out)


_UNARY_SHAPE = frozenset(
    {"Cast", "Not", "Neg", "Abs", "Identity", "Clip", "IsNaN", "IsInf", "Sign", "Reciprocal"}
    | {"Sqrt", "Exp", "Log", "Tanh", "Sigmoid", "Relu", "Floor", "Ceil", "Round", "Sin", "Cos"}
    | {"Erf", "Softplus"}
)
_BINARY_SHAPE = frozenset(
    {"Add", "Sub", "Mul", "Div", "And", "Or", "Xor", "Equal", "Less", "LessOrEqual"}
    | {"Greater", "GreaterOrEqual", "Max", "Min", "Where"}
)


def shape_of(value: ir.Value | None, depth: int = 0) -> tuple[Any, ...] | None:
    """The value's shape (ints and symbolic names), from its producer when not recorded."""
    if value is None:
        return None
    if value.shape is not None:
        return static_or_symbolic(value)
    array = constant(value)
    if array is not None:
        return tuple(array.shape)
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx") or depth > 8 or len(node.outputs) != 1:
        return None
    if node.op_type in _UNARY_SHAPE:
        return shape_of(node.inputs[0], depth + 1)
    if node.op_type in _BINARY_SHAPE:
        shapes = [shape_of(v, depth + 1) for v in node.inputs]
        return None if any(s is None for s in shapes) else broadcast(shapes)
    if node.op_type == "Transpose":
        source = shape_of(node.inputs[0], depth + 1)
        perm = node.attributes.get("perm")
        if source is None:
            return None
        order = list(perm.as_ints()) if perm is not None else list(range(len(source)))[::-1]
        return tuple(source[p] for p in order)
    if node.op_type == "Reshape" and len(node.inputs) == 2:
        target = constant(node.inputs[1])
        if target is None or np.any(target <= 0):
            return None  # 0 (copy) and -1 (infer) need the input's shape: left unknown
        return tuple(int(d) for d in target)
    if node.op_type == "Gather" and len(node.inputs) == 2:
        data, index = shape_of(node.inputs[0], depth + 1), shape_of(node.inputs[1], depth + 1)
        if data is None or index is None or not data:
            return None
        attribute = node.attributes.get("axis")
        axis = (attribute.as_int() if attribute is not None else 0) % len(data)
        return (*data[:axis], *index, *data[axis + 1 :])
    if node.op_type in ("Unsqueeze", "Squeeze") and len(node.inputs) == 2:
        source, axes = shape_of(node.inputs[0], depth + 1), constant(node.inputs[1])
        if source is None or axes is None:
            return None
        if node.op_type == "Squeeze":
            drop = {int(a) % len(source) for a in axes.reshape(-1)} if source else set()
            return tuple(d for i, d in enumerate(source) if i not in drop)
        dims = list(source)
        rank = len(source) + axes.size
        for axis in sorted(int(a) % rank for a in axes.reshape(-1)):
            dims.insert(axis, 1)
        return tuple(dims)
    if node.op_type.startswith("Reduce") or node.op_type in ("ArgMax", "ArgMin"):
        return _reduced(node, shape_of(node.inputs[0], depth + 1))
    if node.op_type == "Slice" and len(node.inputs) >= 3:
        return _sliced(node, shape_of(node.inputs[0], depth + 1))
    if node.op_type == "Concat":
        shapes = [shape_of(v, depth + 1) for v in node.inputs]
        if any(s is None or not s or len(s) != len(shapes[0]) for s in shapes):
            return None
        axis = node.attributes.get_int("axis", 0) % len(shapes[0])
        sizes = [s[axis] for s in shapes]
        if not all(isinstance(d, int) for d in sizes):
            return None
        return (*shapes[0][:axis], sum(sizes), *shapes[0][axis + 1 :])
    return None


def _sliced(node: ir.Node, source: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """The shape a Slice with constant bounds cuts from ``source`` (static axes only)."""
    bounds = [ints(v) if v is not None else None for v in node.inputs[1:5]]
    if source is None or not source or bounds[0] is None or bounds[1] is None:
        return None
    count = len(bounds[0])
    axes = bounds[2] if len(bounds) > 2 and bounds[2] is not None else list(range(count))
    steps = bounds[3] if len(bounds) > 3 and bounds[3] is not None else [1] * count
    dims = list(source)
    for axis, start, end, step in zip(axes, bounds[0], bounds[1], steps, strict=False):
        size = dims[axis % len(dims)]
        if not isinstance(size, int) or step == 0:
            return None
        dims[axis % len(dims)] = len(range(size)[slice(start, end, step)])
    return tuple(dims)


def _reduced(node: ir.Node, source: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """The shape a reduction (or ArgMax/ArgMin) leaves of ``source``."""
    if source is None:
        return None
    if node.op_type in ("ArgMax", "ArgMin"):
        axes = [node.attributes.get_int("axis", 0)]
    elif "axes" in node.attributes:  # before opset 18
        axes = list(node.attributes["axes"].as_ints())
    elif len(node.inputs) > 1 and node.inputs[1] is not None:
        array = constant(node.inputs[1])
        if array is None:
            return None
        axes = [int(a) for a in array.reshape(-1)]
    else:
        axes = []
    if not axes and node.attributes.get_int("noop_with_empty_axes", 0):
        return source
    if not source:
        return source
    drop = {a % len(source) for a in axes} if axes else set(range(len(source)))
    keep = node.attributes.get_int("keepdims", 1) == 1
    return tuple(1 if i in drop else d for i, d in enumerate(source) if keep or i not in drop)


def _stand_in(ctx: Any, gone: ir.Node, kept: ir.Value, *, same: bool = False) -> bool:
    """``kept`` takes the place of ``gone``'s one output; ``gone`` goes. ``same``: the
    rewrite itself keeps the shape, else the two shapes must be known and equal."""
    if not same:
        shape = shape_of(gone.outputs[0])
        if shape is None or shape_of(kept) != shape:
            return False
    return take_place(gone, kept)


def double_not(ctx: Any, outer: ir.Node) -> bool:
    inner = producer(outer.inputs[0], "Not")
    return inner is not None and _stand_in(ctx, outer, inner.inputs[0], same=True)


def _per_element_chain(value: ir.Value, graph: ir.Graph) -> tuple[ir.Node | None, list[ir.Node]]:
    """The Unsqueeze (or Reshape) that ``value`` is computed from through single-reader
    per-element ops of ``graph``, and those ops in order (``None`` when there is none)."""
    chain: list[ir.Node] = []
    while True:
        node = value.producer()
        if node is None or node.graph is not graph or node.domain not in ("", "ai.onnx"):
            return None, []
        if node.op_type in ("Unsqueeze", "Reshape"):
            return node, chain[::-1]
        # the ops that keep their one input's shape work element by element on it (Clip
        # with scalar bounds): an Unsqueeze before a chain of them and a Squeeze after cancel
        if node.op_type not in _UNARY_SHAPE or len(node.outputs) != 1:
            return None, []
        if len(value.uses()) != 1 or value.is_graph_output():
            return None, []
        if any(bound is not None and rank(bound) != 0 for bound in node.inputs[1:]):
            return None, []  # a Clip bound of rank 1 or more broadcasts
        chain.append(node)
        value = node.inputs[0]


def squeeze_of_unsqueeze(ctx: Any, squeeze: ir.Node) -> bool:
    unsqueeze, chain = _per_element_chain(squeeze.inputs[0], squeeze.graph)
    if unsqueeze is None or len(squeeze.inputs) < 2 or len(unsqueeze.inputs) < 2:
        return False
    if unsqueeze.op_type == "Reshape":  # a Reshape that only added unit axes
        before = shape_of(unsqueeze.inputs[0])
        if before is None or shape_of(squeeze.outputs[0]) != before:
            return False
    else:
        out_rank, axes = rank(unsqueeze.outputs[0]), constant(squeeze.inputs[1])
        inserted = constant(unsqueeze.inputs[1])
        if out_rank is None or axes is None or inserted is None:
            return False
        normal = [sorted(int(a) % out_rank for a in v.reshape(-1)) for v in (axes, inserted)]
        if normal[0] != normal[1]:
            return False
    if not chain:
        return _stand_in(ctx, squeeze, unsqueeze.inputs[0], same=True)
    if squeeze.outputs[0].is_graph_output():
        return False
    # the chain works on the Unsqueeze's input instead: each value loses the inserted axes
    source = unsqueeze.inputs[0]
    chain[0].replace_input_with(0, source)
    for op in chain:
        op.outputs[0].shape = None if source.shape is None else ir.Shape(list(source.shape))
    return take_place(squeeze, chain[-1].outputs[0])


def lone_concat(ctx: Any, concat: ir.Node) -> bool:
    """A one-input Concat is its input; inputs empty along the axis are dropped first."""
    shapes = [shape_of(v) for v in concat.inputs]
    axis = concat.attributes.get_int("axis", 0)
    empty = [
        k
        for k, shape in enumerate(shapes)
        if shape and isinstance(shape[axis % len(shape)], int) and shape[axis % len(shape)] == 0
    ]
    if empty and len(empty) < len(concat.inputs):
        kept = [v for k, v in enumerate(concat.inputs) if k not in empty]
        if len(kept) == 1:
            return _stand_in(ctx, concat, kept[0])
        replacement = node("Concat", kept, axis=axis)
        replacement.outputs[0].type = concat.outputs[0].type
        shape = concat.outputs[0].shape
        replacement.outputs[0].shape = None if shape is None else ir.Shape(list(shape))
        ctx.graph.insert_before(concat, replacement)
        if take_place(concat, replacement.outputs[0]):
            return True
        ctx.graph.remove(replacement, safe=True)
        return False
    return len(concat.inputs) == 1 and _stand_in(ctx, concat, concat.inputs[0], same=True)


_KEEPING = ("ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceProd")


def unit_reduction(ctx: Any, reduce: ir.Node) -> bool:
    x = reduce.inputs[0]
    shape = shape_of(x)  # read through producers: an Unsqueezed scalar in a loop body
    if shape is None or int_attr(reduce, "noop_with_empty_axes", 0):
        return False
    axes = reduced_axes(reduce, len(shape))
    if not axes or any(shape[a] != 1 for a in axes):
        return False
    if int_attr(reduce, "keepdims", 1):
        return _stand_in(ctx, reduce, x)
    out = reduce.outputs[0]
    if out.is_graph_output():
        return False
    squeeze = node("Squeeze", [x, ctx.constant(np.asarray(axes, np.int64), "axes")])
    kept = tuple(d for i, d in enumerate(shape) if i not in axes)
    squeeze.outputs[0].type = out.type or x.type
    squeeze.outputs[0].shape = out.shape if out.shape is not None else ir.Shape(kept)
    match = Match(ctx.graph, reduce)
    return match.replace([squeeze], squeeze.outputs[0])


def bool_round_trip(ctx: Any, back: ir.Node) -> bool:
    """``Cast(L(Cast(b, T)), bool)`` of a bool ``b`` is ``L(b)``, ``L`` one layout op or none
    (an ``any`` over one flag: uint8 for ReduceMax, the reduction now a Squeeze)."""
    if int_attr(back, "to", 0) != ir.DataType.BOOL:
        return False
    value = back.inputs[0]
    layout = producer(value, "Squeeze", "Unsqueeze", "Reshape")
    if layout is not None and (len(value.uses()) != 1 or value.is_graph_output()):
        return False
    there = producer(layout.inputs[0] if layout is not None else value, "Cast")
    if there is None or there.inputs[0] is None or there.inputs[0].dtype != ir.DataType.BOOL:
        return False
    if layout is None:
        return _stand_in(ctx, back, there.inputs[0], same=True)
    if len(there.outputs[0].uses()) != 1 or there.outputs[0].is_graph_output():
        return False
    layout.replace_input_with(0, there.inputs[0])
    layout.outputs[0].dtype = ir.DataType.BOOL
    return _stand_in(ctx, back, layout.outputs[0], same=True)


def constant_logic(ctx: Any, op: ir.Node) -> bool:
    """``And(x, True)``/``Or(x, False)`` are ``x``; ``And(x, False)``/``Or(x, True)`` are
    that constant (when it has the output's shape: nothing broadcasts)."""
    neutral = op.op_type == "And"  # True for And, False for Or; the other value absorbs
    for k in (0, 1):
        flag = constant(op.inputs[k])
        if flag is None or flag.dtype != np.bool_ or flag.size == 0:
            continue
        if bool(flag.all()) if neutral else not flag.any():
            return _stand_in(ctx, op, op.inputs[1 - k])
        if not flag.any() if neutral else bool(flag.all()):
            return _stand_in(ctx, op, op.inputs[k])
    return False


# the constant operand that leaves the other one as it is, and where it may stand
_NEUTRAL = {
    "Add": (0, (0, 1)),
    "Sub": (0, (1,)),
    "Mul": (1, (0, 1)),
    "Div": (1, (1,)),
    "Max": (-np.inf, (0, 1)),  # ONNX Runtime's Max and Min propagate NaN, as JAX's do
    "Min": (np.inf, (0, 1)),
}


def arithmetic_identity(ctx: Any, op: ir.Node) -> bool:
    """``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x``, ``x / 1`` are ``x``, and so
    are ``max(x, -inf)`` and ``min(x, inf)`` (a clip to unbounded limits).

    Exact for integers and for floats but one case: ``-0.0 + 0.0`` is ``+0.0``,
    so adding ``+0.0`` (or subtracting ``-0.0``) turns ``-0.0`` into ``+0.0`` and
    the rewrite keeps the ``-0.0``. XLA does the same, so the converted model keeps matching
    ``jax.jit``. ``x * 0`` is no identity (``inf * 0`` is NaN), nor ``0 - x``.
    Every element of the constant must be the neutral one, and ``x`` must already
    have the output's shape (known), so the op neither broadcasts nor casts.
    """
    neutral, positions = _NEUTRAL[op.op_type]
    if len(op.inputs) != 2:
        return False
    for k in positions:
        found = constant(op.inputs[k])
        if found is None or found.size == 0 or found.dtype.kind not in "fiu":
            continue
        if not np.all(found == neutral):
            continue
        x, out = op.inputs[1 - k], op.outputs[0]
        if x is None or x.dtype is None or x.dtype != op.inputs[k].dtype:
            continue
        if out.dtype is not None and out.dtype != x.dtype:
            continue
        shape = static_or_symbolic(out)
        if shape is not None and static_or_symbolic(x) == shape:
            return _stand_in(ctx, op, x, same=True)
    return False


def signed_product(ctx: Any, outer: ir.Node) -> bool:
    """``(x * c) * s`` with every element of ``s`` +1 or -1 is ``x * (c * s)``: a sign
    flip commutes with rounding, so the bits stay (a vectorised sum of differences)."""
    shape = shape_of(outer.outputs[0])
    for k in (0, 1):
        signs, inner = constant(outer.inputs[k]), producer(outer.inputs[1 - k], "Mul")
        if shape is None or signs is None or inner is None or signs.dtype.kind != "f":
            continue
        middle = outer.inputs[1 - k]
        if signs.size == 0 or not np.all(np.abs(signs) == 1) or inner.graph is not ctx.graph:
            continue
        if len(middle.uses()) != 1 or middle.is_graph_output():
            continue
        for j in (0, 1):
            factor, x = constant(inner.inputs[j]), inner.inputs[1 - j]
            if factor is None or factor.dtype != signs.dtype or shape_of(x) is None:
                continue
            signed = factor * signs
            if broadcast([shape_of(x), signed.shape]) != shape:
                continue
            inner.replace_input_with(j, ctx.constant(signed.astype(signs.dtype), "signed"))
            middle.shape = ir.Shape(list(outer.outputs[0].shape))
            return take_place(outer, middle)  # same graph, read only here: always
    return False


REWRITES = (
    (tuple(_NEUTRAL), arithmetic_identity),
    (("Mul",), signed_product),
    (("And", "Or"), constant_logic),
    (("Not",), double_not),
    (("Squeeze",), squeeze_of_unsqueeze),
    (("Concat",), lone_concat),
    (_KEEPING, unit_reduction),
    (("Cast",), bool_round_trip),
    (("Unsqueeze",), keepdims_reduction),
    (("Div",), mean),
    (BROADCASTING, expand_operand),
    (("Where",), constant_where),
)
