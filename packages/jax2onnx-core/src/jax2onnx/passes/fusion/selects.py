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

from jax2onnx.passes.fusion.canonical import broadcast, shape_of
from jax2onnx.passes.fusion.match import constant, int_attr, producer
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


_COMPARISONS = {
    "Equal": (np.equal, np.equal),
    "Less": (np.less, np.greater),
    "LessOrEqual": (np.less_equal, np.greater_equal),
    "Greater": (np.greater, np.less),
    "GreaterOrEqual": (np.greater_equal, np.less_equal),
}


def code_test(ctx: Any, test: ir.Node) -> bool:
    """A comparison of a tree of Wheres over one-element constants with a one-element
    constant is the same tree over the leaves' outcomes (booleans, each of its leaf's
    shape), written as logic: ``Equal(Where(c, a, b), k)`` is ``c`` when only ``a``
    equals ``k``, ``Not(c)`` when only ``b`` does, a constant when both or neither do."""
    return _code_logic(ctx, test, test, negated=False)


def negated_code_test(ctx: Any, negation: ir.Node) -> bool:
    """``Not`` of such a comparison read only there: the tree over the leaves' negated
    outcomes (``Not(Equal(code, 0))`` of a code picked among constants: the picks
    themselves). A tree read elsewhere too is copied here, the two nodes it replaces
    paying for the logic of a two-level tree."""
    test = producer(negation.inputs[0], *_COMPARISONS)
    if test is None or len(test.outputs[0].uses()) != 1 or test.outputs[0].is_graph_output():
        return False
    for use in negation.outputs[0].uses():  # kept_code's Where(Not(Equal(x, k)), x, k) first
        where = use.node
        if where.op_type == "Where" and use.idx == 0 and len(where.inputs) == 3:
            if any(where.inputs[1] is v and _same(where.inputs[2], w) for v, w in _pairs(test)):
                return False
    return _code_logic(ctx, test, negation, negated=True)


def _pairs(test: ir.Node) -> list[tuple[ir.Value, ir.Value]]:
    """(compared value, constant) of a comparison, either way round."""
    return [(test.inputs[0], test.inputs[1]), (test.inputs[1], test.inputs[0])]


def _code_logic(ctx: Any, test: ir.Node, replaced: ir.Node, negated: bool) -> bool:
    for k in (0, 1):
        tree, number = producer(test.inputs[k], "Where"), _scalar(test.inputs[1 - k])
        if tree is None or number is None or len(test.inputs) != 2:
            continue
        compare = _COMPARISONS[test.op_type][k]  # the constant first: the mirrored test
        leaves: list[ir.Value] = []
        kind = number.dtype
        if not _tree(tree, leaves, _TREE, lambda v, kind=kind: v.dtype == kind):
            continue
        shape = shape_of(tree.outputs[0])
        if shape is None or shape != shape_of(test.outputs[0]):
            continue  # (a one-element constant of higher rank broadcasts the test)
        shared = len(tree.outputs[0].uses()) > 1 or tree.outputs[0].is_graph_output()
        if len(leaves) > (3 if negated else 2) and shared:
            continue  # a tree read elsewhere too would be copied
        mapped = {
            id(v): ctx.constant(compare(constant(v), number) != negated, "code") for v in leaves
        }
        logic = _tree_logic(ctx, tree, mapped, replaced)
        if logic is None or not take_place(replaced, logic):
            return False
        if test.graph is not None and not test.outputs[0].uses():
            test.graph.remove(test, safe=True)  # its reading of the tree ends now
        return True
    return False


def absorbed(ctx: Any, op: ir.Node) -> bool:
    """``Or(a, And(a, b))`` and ``And(a, Or(a, b))`` are ``a``; ``Or(a, Or(a, b))`` and
    ``And(a, And(a, b))`` are the inner one (each when it has the output's shape): a
    result code's failure flag tested again by the flags it was made from."""
    shape = shape_of(op.outputs[0])
    for k in (0, 1):
        kept = op.inputs[k]
        for inner_op in ("Or", "And"):
            inner = producer(op.inputs[1 - k], inner_op)
            if kept is None or inner is None or not any(v is kept for v in inner.inputs):
                continue
            result = kept if inner_op != op.op_type else op.inputs[1 - k]
            if shape is not None and shape_of(result) == shape:
                return take_place(op, result)
    return False


def _tree_logic(ctx: Any, where: ir.Node, mapped: dict, before: ir.Node) -> ir.Value | None:
    """The tree of Wheres at ``where`` over the boolean leaves ``mapped``, as logic (None
    when a Where there has neither operand constant: ONNX Runtime has no boolean Where;
    the nodes made so far are left to the clean-up)."""
    operands = []
    for value in where.inputs[1:]:
        inner = producer(value, "Where")
        operand = mapped[id(value)] if inner is None else _tree_logic(ctx, inner, mapped, before)
        if operand is None:
            return None
        operands.append(operand)
    out = ir.Value(type=before.outputs[0].type, shape=where.outputs[0].shape)
    return _logic(ctx, where.inputs[0], *operands, out, before)


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
    size = len(table)
    if not _tree(tree, leaves, _TREE, lambda v: v.dtype.kind in "iu" and -size <= int(v) < size):
        return False
    mapped = {}
    for leaf in leaves:
        index = constant(leaf)  # the entry keeps the leaf's shape (a [1] leaf broadcasts)
        entry = np.full(index.shape, table[int(index.reshape(()))], table.dtype)
        mapped[id(leaf)] = ctx.constant(entry, "code")
    copy = _copy(ctx.graph, tree, mapped, gather)
    return take_place(gather, copy)


def _tree(where: ir.Node, leaves: list[ir.Value], depth: int, fits: Any) -> bool:
    """Whether ``where`` is a tree of Wheres (the inner ones read only by their parent)
    whose leaves are one-element constants that ``fits`` accepts; ``leaves`` gathers them."""
    if depth == 0 or len(where.inputs) != 3 or any(v is None for v in where.inputs):
        return False
    for value in where.inputs[1:]:
        inner = producer(value, "Where")
        if inner is not None:
            if len(value.uses()) != 1 or value.is_graph_output() or inner.graph is not where.graph:
                return False
            if not _tree(inner, leaves, depth - 1, fits):
                return False
            continue
        leaf = _scalar(value)
        if leaf is None or not fits(leaf):
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


def boolean_choice(ctx: Any, where: ir.Node) -> bool:
    """A Where between booleans, one of them a constant all true or all false, is logic:
    ``Where(c, True, y)`` is ``Or(c, y)``, ``Where(c, False, y)`` is ``And(Not(c), y)``,
    ``Where(c, x, True)`` is ``Or(Not(c), x)``, ``Where(c, x, False)`` is ``And(c, x)``
    (and ``Where(c, True, False)`` is ``c``). ONNX Runtime's Where costs about what
    three of its logical ops do (and has no boolean kernel: the lowerings select in
    uint8). The operands must broadcast to the Where's own shape."""
    if len(where.inputs) != 3 or any(v is None for v in where.inputs):
        return False
    if where.outputs[0].dtype != ir.DataType.BOOL:
        return False
    logic = _logic(ctx, *where.inputs, where.outputs[0], where)
    return logic is not None and take_place(where, logic)


def _logic(
    ctx: Any, test: ir.Value, x: ir.Value, y: ir.Value, out: ir.Value, before: ir.Node
) -> ir.Value | None:
    """``Where(test, x, y)`` of booleans as logic (inserted before ``before``), with
    ``out``'s type and shape; None when neither ``x`` nor ``y`` is a constant or a shape
    would differ."""
    shape = shape_of(out)
    flags = [_flag(x), _flag(y)]
    if shape is None or flags == [None, None]:
        return None

    def made(op: str, *inputs: ir.Value) -> ir.Value:
        logic = ir.Node("", op, list(inputs), num_outputs=1)
        logic.outputs[0].type = out.type
        logic.outputs[0].shape = ir.Shape(list(broadcast([shape_of(v) for v in inputs])))
        logic.metadata_props.update(before.metadata_props)
        ctx.graph.insert_before(before, logic)
        return logic.outputs[0]

    if None not in flags:  # both constant
        if flags[0] == flags[1]:
            if not all(isinstance(d, int) for d in shape):
                return None
            return ctx.constant(np.full(shape, flags[0]), "flag")
        if shape_of(test) != shape:
            return None
        return test if flags[0] else made("Not", test)
    k = 0 if flags[0] is not None else 1
    other = (x, y)[1 - k]
    if shape_of(test) is None or shape_of(other) is None:
        return None
    if broadcast([shape_of(test), shape_of(other)]) != shape:
        return None
    flag = flags[k]
    # the test as the constant's side needs it: true where the constant is picked (k=0)
    side = test if (k == 0) == flag else made("Not", test)
    return made("Or" if flag else "And", side, other)


def _flag(value: ir.Value) -> bool | None:
    """True or False when ``value`` is a boolean constant with one value throughout."""
    array = constant(value)
    if array is None or array.dtype != np.bool_ or array.size == 0:
        return None
    return bool(array.flat[0]) if array.all() or not array.any() else None


def boolean_round_trip(ctx: Any, back: ir.Node) -> bool:
    """``Cast(Where(c, x, y), bool)`` of a Where between booleans cast to numbers (or
    numeric constants) is the Where between the booleans (how ``lax.select_n`` of flags
    comes out of a lowering that selects in uint8): a cast boolean casts back to itself.
    Written as logic when one of them is a constant (see ``boolean_choice``)."""
    if int_attr(back, "to", 0) != ir.DataType.BOOL:
        return False
    where = producer(back.inputs[0], "Where")
    if where is None or len(where.inputs) != 3 or any(v is None for v in where.inputs):
        return False
    operands = [where.inputs[0]]
    for value in where.inputs[1:]:
        number = constant(value)
        cast = producer(value, "Cast")
        if number is not None and number.dtype.kind in "iub":
            operands.append(ctx.constant(number.astype(np.bool_), "flag"))
        elif cast is not None and cast.inputs[0] is not None:
            if cast.inputs[0].dtype != ir.DataType.BOOL:
                return False
            operands.append(cast.inputs[0])
        else:
            return False
    logic = _logic(ctx, *operands, back.outputs[0], back)
    return logic is not None and take_place(back, logic)


REWRITES = (
    (("Where",), repeated_condition),
    (("Where",), kept_code),
    (("Where",), boolean_choice),
    (("Cast",), boolean_round_trip),
    (("Equal",), boolean_index_test),
    (tuple(_COMPARISONS), code_test),
    (("Not",), negated_code_test),
    (("And", "Or"), absorbed),
    (("Gather",), mapped_codes),
    (("If",), negated_branch),
)
