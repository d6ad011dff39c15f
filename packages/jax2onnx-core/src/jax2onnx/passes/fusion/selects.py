"""Selections decided by a selection around them (canonical group).

``Where(c, ..., ...)`` picks its second operand wherever ``c`` holds, so inside
that operand a ``Where`` on the same ``c`` (reached through Wheres read only
there) always picks its own second operand there, and inside the third
operand its third. A lowering that masks a triangle (``lax.linalg.cholesky``
keeps the input's strict upper triangle) followed by user code masking the
same triangle again (``jnp.tril``) leaves such a pair; the inner one goes.
Every element keeps its value: only selections whose outcome is known go.

Also here, the tests those selections read: ``Equal(Cast(b), 0)`` of a boolean ``b``
cast to a number is ``Not(b)`` and ``Equal(Cast(b), 1)`` is ``b`` (how
``lax.cond`` on a boolean picks its branch index); and ``If(Not(c), A, B)`` is
``If(c, B, A)``.

And the result codes solvers carry (optimistix, lineax and diffrax keep an int32
code, ``RESULTS.where(failed, code, result)``, and test it against "successful"):

* ``Equal(Where(c, a, b), k)`` of constants ``a``, ``b``, ``k`` (one element each) is
  ``c`` when only ``a`` equals ``k``, ``Not(c)`` when only ``b`` does (a scalar constant
  when both or neither do and ``c`` is a scalar);
* ``Where(Not(Equal(x, k)), x, k)`` and ``Where(Equal(x, k), k, x)`` are ``x``, for
  integers and booleans (where ``x`` equals ``k`` it is ``k``; not for floats, where
  -0.0 equals 0.0);
* ``Gather(t, w)`` of a constant vector ``t`` and a tree ``w`` of Wheres (each read only
  there) whose leaves are one-element constants in ``t``'s range is the same tree
  with the leaves ``t[leaf]`` (a code mapped through a table: one Gather less).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.canonical import shape_of
from jax2onnx.passes.fusion.match import constant, producer
from jax2onnx.passes.identities import take_place
from jax2onnx.values.ir import ir

_DEPTH = 4  # Wheres between the outer one and the repeated one


def _same(a: ir.Value, b: ir.Value) -> bool:
    if a is b:
        return True
    x, y = constant(a), constant(b)
    return x is not None and y is not None and x.shape == y.shape and np.array_equal(x, y)


def repeated_condition(ctx: Any, where: ir.Node) -> bool:
    if len(where.inputs) != 3 or any(v is None for v in where.inputs):
        return False
    condition = where.inputs[0]
    shape = shape_of(where.outputs[0])
    if shape is None or shape_of(condition) is None:
        return False
    changed = False
    for k in (1, 2):
        changed |= _decide(ctx.graph, where.inputs[k], condition, k, shape, _DEPTH)
    return changed


def _decide(
    graph: ir.Graph, value: ir.Value, condition: ir.Value, k: int, shape: tuple, depth: int
) -> bool:
    """Within ``value`` (the outer Where's operand ``k``), Wheres on ``condition``."""
    inner = value.producer()
    if inner is None or inner.op_type != "Where" or inner.graph is not graph:
        return False
    if depth == 0 or len(value.uses()) != 1 or value.is_graph_output():
        return False
    if shape_of(value) != shape or any(v is None for v in inner.inputs):
        return False  # the same element positions all the way
    if _same(inner.inputs[0], condition) and shape_of(inner.inputs[0]) == shape_of(condition):
        kept = inner.inputs[k]
        if shape_of(kept) != shape or kept.dtype != value.dtype:
            return False
        use = next(iter(value.uses()))
        use.node.replace_input_with(use.idx, kept)
        graph.remove(inner, safe=True)
        return True
    return any(_decide(graph, inner.inputs[j], condition, k, shape, depth - 1) for j in (1, 2))


def boolean_index_test(ctx: Any, equal: ir.Node) -> bool:
    """``Equal(Cast(b), 0)`` is ``Not(b)``, ``Equal(Cast(b), 1)`` is ``b``, for a boolean
    ``b`` of the output's shape (a cast boolean is 0 or 1, whatever the number type)."""
    for k in (0, 1):
        cast, number = producer(equal.inputs[k], "Cast"), constant(equal.inputs[1 - k])
        if cast is None or number is None or number.size != 1 or not cast.inputs:
            continue
        flag = cast.inputs[0]
        if flag is None or flag.dtype != ir.DataType.BOOL or number.dtype.kind not in "iuf":
            continue
        if shape_of(flag) is None or shape_of(flag) != shape_of(equal.outputs[0]):
            continue
        if number.reshape(-1)[0] == 1:
            return take_place(equal, flag)
        if number.reshape(-1)[0] != 0:
            return False
        negation = ir.Node("", "Not", [flag], num_outputs=1)
        negation.outputs[0].type, negation.outputs[0].shape = flag.type, flag.shape
        negation.metadata_props.update(equal.metadata_props)
        equal.graph.insert_before(equal, negation)
        return take_place(equal, negation.outputs[0])
    return False


def negated_branch(ctx: Any, node: ir.Node) -> bool:
    """``If(Not(c), A, B)`` is ``If(c, B, A)``."""
    negation = producer(node.inputs[0] if node.inputs else None, "Not")
    then, other = node.attributes.get("then_branch"), node.attributes.get("else_branch")
    if negation is None or then is None or other is None or negation.inputs[0] is None:
        return False
    node.attributes["then_branch"] = ir.AttrGraph("then_branch", other.value)
    node.attributes["else_branch"] = ir.AttrGraph("else_branch", then.value)
    node.replace_input_with(0, negation.inputs[0])
    if not negation.outputs[0].uses() and not negation.outputs[0].is_graph_output():
        negation.graph.remove(negation, safe=True)
    return True


def _scalar(value: ir.Value | None) -> Any:
    array = constant(value)
    return None if array is None or array.size != 1 else array.reshape(())


def code_test(ctx: Any, equal: ir.Node) -> bool:
    """``Equal(Where(c, a, b), k)`` of one-element constants: ``c``, ``Not(c)`` or a constant."""
    for k in (0, 1):
        where, number = producer(equal.inputs[k], "Where"), _scalar(equal.inputs[1 - k])
        if where is None or number is None or len(where.inputs) != 3:
            continue
        test, a, b = where.inputs
        a, b = _scalar(a), _scalar(b)
        if a is None or b is None or test is None or shape_of(test) is None:
            continue
        if shape_of(test) != shape_of(equal.outputs[0]):
            continue
        hit_a, hit_b = bool(np.equal(a, number)), bool(np.equal(b, number))
        if hit_a and not hit_b:
            return take_place(equal, test)
        if hit_b and not hit_a:
            negation = ir.Node("", "Not", [test], num_outputs=1)
            negation.outputs[0].type, negation.outputs[0].shape = test.type, test.shape
            negation.metadata_props.update(equal.metadata_props)
            equal.graph.insert_before(equal, negation)
            return take_place(equal, negation.outputs[0])
        if shape_of(test) == ():
            return take_place(equal, ctx.constant(np.asarray(hit_a), "code_test"))
    return False


def kept_code(ctx: Any, where: ir.Node) -> bool:
    """``Where(Not(Equal(x, k)), x, k)`` and ``Where(Equal(x, k), k, x)`` are ``x``
    (integers and booleans of the result's shape, ``k`` one element)."""
    if len(where.inputs) != 3 or any(v is None for v in where.inputs):
        return False
    test, a, b = where.inputs
    negation = producer(test, "Not")
    if negation is not None:
        test, a, b = negation.inputs[0], b, a
    equal = producer(test, "Equal")
    if equal is None or len(equal.inputs) != 2:
        return False
    for k in (0, 1):
        x, number = equal.inputs[k], equal.inputs[1 - k]
        if x is not b or _scalar(number) is None or not _same(number, a):
            continue
        if x.dtype is None or not (x.dtype.is_integer() or x.dtype == ir.DataType.BOOL):
            return False
        if shape_of(x) is None or shape_of(x) != shape_of(where.outputs[0]):
            return False
        return take_place(where, x)
    return False


_TREE = 4  # Wheres deep, at most


def mapped_codes(ctx: Any, gather: ir.Node) -> bool:
    """``Gather(t, tree of Wheres over constants)`` -> the tree over ``t[leaf]``."""
    if len(gather.inputs) != 2 or gather.attributes.get_int("axis", 0) != 0:
        return False
    table = constant(gather.inputs[0])
    tree = producer(gather.inputs[1], "Where")
    if table is None or table.ndim != 1 or tree is None:
        return False
    leaves: list[ir.Value] = []
    if not _tree(tree, leaves, _TREE, len(table)):
        return False
    mapped = {}
    for leaf in leaves:
        index = constant(leaf)  # the entry keeps the leaf's shape (a [1] leaf broadcasts)
        entry = np.full(index.shape, table[int(index.reshape(()))], table.dtype)
        mapped[id(leaf)] = ctx.constant(entry, "code")
    copy = _copy(ctx.graph, tree, mapped, gather)
    return take_place(gather, copy)


def _tree(where: ir.Node, leaves: list[ir.Value], depth: int, size: int) -> bool:
    if depth == 0 or len(where.inputs) != 3 or any(v is None for v in where.inputs):
        return False
    for value in where.inputs[1:]:
        inner = producer(value, "Where")
        if inner is not None:
            if len(value.uses()) != 1 or value.is_graph_output() or inner.graph is not where.graph:
                return False
            if not _tree(inner, leaves, depth - 1, size):
                return False
            continue
        index = _scalar(value)
        if index is None or index.dtype.kind not in "iu" or not -size <= int(index) < size:
            return False
        leaves.append(value)
    return True


def _copy(graph: ir.Graph, where: ir.Node, mapped: dict, before: ir.Node) -> ir.Value:
    operands = [where.inputs[0]]
    for value in where.inputs[1:]:
        inner = producer(value, "Where")
        operands.append(mapped[id(value)] if inner is None else _copy(graph, inner, mapped, before))
    node = ir.Node("", "Where", operands, num_outputs=1)
    node.outputs[0].type, node.outputs[0].shape = before.outputs[0].type, where.outputs[0].shape
    node.metadata_props.update(where.metadata_props)
    graph.insert_before(before, node)
    return node.outputs[0]


REWRITES = (
    (("Where",), repeated_condition),
    (("Where",), kept_code),
    (("Equal",), boolean_index_test),
    (("Equal",), code_test),
    (("Gather",), mapped_codes),
    (("If",), negated_branch),
)
