"""``FoldIndexRangesPass``: integer bounds known at conversion decide index arithmetic.

JAX's indexing normalises every dynamic index (``i < 0 ? i + n : i``) and the
lowerings clamp it or check it against the axis (``0 <= i <= n - 1``) before
a Gather or a ScatterND. Inside a solver's loop body the index is often a
counter whose bounds are known: it starts at a constant, grows by one, and
the loop stops when it reaches its limit. Every step then runs comparisons
whose answer never changes.

This pass computes an interval ``[low, high]`` for integer values, from:

* constants; ``ArgMax``/``ArgMin`` (``[0, n - 1]``); ``Shape``/``Size``;
* a Loop's iteration number (``[0, trips - 1]``) and its carried values: a
  carry takes its start value's interval joined with what the body returns
  for it, bounded by the body's condition when that is a conjunction holding
  ``Less(carry, c)`` (or ``LessOrEqual``, ``Greater``, ``GreaterOrEqual``)
  with ``c`` in a known interval (a constant; else its type's range: a counter
  below an int32 bound never overflows when stepped by one), the loop going on
  only while it holds, and by the Loop's start condition for the first step,
  found by
  iterating over the body until the intervals no longer change (a bound that
  moves is widened to its type's end, then cut by the condition);
* the ops that move, select or compute integers (``Add``, ``Sub``, ``Mul``
  and ``Neg`` only when no value in the intervals can wrap around).

Then a comparison whose answer the intervals decide becomes a constant, a
``Where`` on a decided condition becomes the chosen operand, a ``Clip``
that cannot change its input goes, and so does an integer Cast round trip
``Cast(Cast(x, T), type of x)`` when ``T`` holds every value of ``x``'s
interval (an int64 index cast to int32 and back: an ``ArgMax`` over a short
axis; a widening such as int32 -> int64 -> int32 always). Chains of
Squeeze, Unsqueeze and Reshape become one op or none, a Cast among them
moving before them (it works element by element), where it meets the Cast
it undoes. The passes that follow fold what is left
(``And`` with a constant true, unused nodes). Only shapes known at
conversion are used; a value whose shape is unknown keeps its node.
"""

from __future__ import annotations

import math

import numpy as np

from jax2onnx.passes.chains import CHAIN, LAYOUT, layout_chain
from jax2onnx.passes.fusion.canonical import shape_of
from jax2onnx.passes.fusion.match import constant, new_constant, producer
from jax2onnx.passes.identities import take_place
from jax2onnx.values.ir import ir

Interval = tuple[int, int]
_ONNX = ("", "ai.onnx")
_SAME = frozenset(
    {"Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand", "Transpose", "Slice"}
    | {"Gather", "GatherElements", "GatherND", "Tile", "ReduceMax", "ReduceMin"}
)
_COMPARE = {
    "Less": lambda a, b: (a[1] < b[0], a[0] >= b[1]),
    "LessOrEqual": lambda a, b: (a[1] <= b[0], a[0] > b[1]),
    "Greater": lambda a, b: (a[0] > b[1], a[1] <= b[0]),
    "GreaterOrEqual": lambda a, b: (a[0] >= b[1], a[1] < b[0]),
    "Equal": lambda a, b: (a[0] == a[1] == b[0] == b[1], a[1] < b[0] or b[1] < a[0]),
}
_ROUNDS = 6  # a Loop's carries settle in two or three rounds when bounded
_READ_LIMIT = 4096  # elements of an integer constant whose bounds are read
# Loops nested this deep inside one that settles are iterated too (a solver's step loop
# holding its stage loop holding a Newton loop): rounds multiply, so the depth is bounded
_NESTED = 2


class FoldIndexRangesPass(ir.passes.InPlacePass):
    """Comparisons, Wheres and Clips decided by integer intervals fold (see the module)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for root in [model.graph, *(f.graph for f in model.functions.values())]:
            # a function has no initializers: its comparisons stay (Where and Clip still fold)
            ranges = _Ranges(model.graph if root is model.graph else None)
            modified |= ranges.visit(root, fold=True)
        return ir.passes.PassResult(model, modified)


_BOOLEAN = frozenset({"Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal", "IsNaN"})
_INDEX = frozenset({"ArgMax", "ArgMin", "Shape", "Size", "NonZero"})


def _dtype(value: ir.Value | None, depth: int = 0) -> ir.DataType | None:
    """The value's element type, from its producer when not recorded."""
    if value is None:
        return None
    if value.dtype is not None or depth > 8:
        return value.dtype
    node = value.producer()
    if node is None or node.domain not in _ONNX:
        return None
    if node.op_type == "Cast" and "to" in node.attributes:
        return ir.DataType(node.attributes["to"].as_int())
    if node.op_type in _INDEX:
        return ir.DataType.INT64
    if node.op_type in _BOOLEAN or node.op_type in ("And", "Or", "Not", "Xor", "IsInf"):
        return ir.DataType.BOOL
    source = node.inputs[1] if node.op_type == "Where" and len(node.inputs) > 1 else None
    source = source or (node.inputs[0] if node.inputs else None)
    return _dtype(source, depth + 1)


def _bounds(value: ir.Value | None) -> Interval | None:
    """The integer range of the value's dtype (None: not an integer)."""
    dtype = _dtype(value)
    if dtype is None:
        return None
    if dtype == ir.DataType.BOOL:
        return (0, 1)
    np_type = np.dtype(dtype.numpy())
    if np_type.kind not in "iu":
        return None
    info = np.iinfo(np_type)
    return (int(info.min), int(info.max))


class _Ranges:
    def __init__(self, root: ir.Graph | None) -> None:
        self.root = root
        self.known: dict[int, Interval] = {}

    def of(self, value: ir.Value | None) -> Interval | None:
        if value is None:
            return None
        known = self.known.get(id(value))
        if known is not None:
            return known
        tensor = value.const_value
        if tensor is not None:  # an initializer: only small integer ones are read (no weights)
            if tensor.dtype.numpy().kind not in "iub" or math.prod(tensor.shape) > _READ_LIMIT:
                return None
        array = constant(value)
        if array is None or array.size == 0 or array.dtype.kind not in "iub":
            return None
        return (int(array.min()), int(array.max()))

    def _set(self, value: ir.Value, interval: Interval | None) -> None:
        limits = _bounds(value)
        if interval is None or limits is None:
            self.known.pop(id(value), None)
        elif limits[0] <= interval[0] <= interval[1] <= limits[1]:
            self.known[id(value)] = interval
        else:
            self.known.pop(id(value), None)  # could wrap around: nothing known

    # -- walking ---------------------------------------------------------------
    def visit(self, graph: ir.Graph, *, fold: bool, depth: int = 0) -> bool:
        modified = False
        for node in list(graph):
            if node.graph is None:
                continue  # removed by a fold of this walk
            if node.op_type == "Loop" and node.domain in _ONNX:
                if fold or depth < _NESTED:
                    modified |= self._loop(node, fold=fold, depth=depth + 1)
                else:  # deeper loops are not iterated while the enclosing ones settle:
                    for out in node.outputs:  # their results are unknown (cost bounded)
                        self._set(out, None)
                    continue
            else:
                for attribute in node.attributes.values():
                    if attribute.type is ir.AttributeType.GRAPH:
                        modified |= self.visit(attribute.value, fold=fold, depth=depth)
                    elif attribute.type is ir.AttributeType.GRAPHS:
                        for sub in attribute.value:
                            modified |= self.visit(sub, fold=fold, depth=depth)
            if fold and node.domain in _ONNX and self._fold(graph, node):
                modified = True
                continue
            if node.op_type != "Loop":  # a Loop's results were set by _loop
                self._propagate(node)
        return modified

    def _loop(self, loop: ir.Node, *, fold: bool, depth: int = 0) -> bool:
        body = loop.attributes["body"].value if "body" in loop.attributes else None
        if body is None or len(body.inputs) != len(loop.inputs):
            return False
        carried = len(loop.inputs) - 2
        trips = self.of(loop.inputs[0]) if loop.inputs[0] is not None else None
        high = trips[1] - 1 if trips is not None else int(np.iinfo(np.int64).max)
        self._set(body.inputs[0], (0, max(high, 0)))
        starts = [self.of(v) for v in loop.inputs[2:]]
        # the body runs only if the Loop's start condition holds: it bounds the first step's
        # carries as the body's condition bounds the next ones'
        given = {id(v): k for k, v in enumerate(loop.inputs[2:])}
        ahead = _condition_limits(loop.inputs[1], given, self, loop.graph)
        entered = [_meet(s, ahead.get(k)) if s else None for k, s in enumerate(starts)]
        current = list(entered)
        for _ in range(_ROUNDS):
            for value, interval in zip(body.inputs[2:], current, strict=True):
                self._set(value, interval)
            self.visit(body, fold=False, depth=depth)
            returned = {id(body.outputs[1 + k]): k for k in range(carried)}
            limits = _condition_limits(body.outputs[0], returned, self, body)
            if trips is not None:
                _count_limits(body, carried, entered, high, limits)
            following = []
            for k in range(carried):
                out = self.of(body.outputs[1 + k])
                following.append(_join(entered[k], _meet(out, limits.get(k))))
            if following == current:
                break
            current = [  # a bound that moved goes to the end of its type, then to the limit
                _widened(c, f, entered[k], limits.get(k), _bounds(body.inputs[2 + k]))
                for k, (c, f) in enumerate(zip(current, following, strict=True))
            ]
        else:
            current = [None] * carried  # did not settle: nothing known of the carries
        for value, interval in zip(body.inputs[2:], current, strict=True):
            self._set(value, interval)
        modified = self.visit(body, fold=fold, depth=depth)
        for k in range(carried):  # the result: the start or what the last step returned
            if k < len(loop.outputs):
                self._set(loop.outputs[k], _join(starts[k], self.of(body.outputs[1 + k])))
        return modified

    # -- intervals -------------------------------------------------------------
    def _propagate(self, node: ir.Node) -> None:
        if node.domain not in _ONNX or not node.outputs:
            return
        out, op = node.outputs[0], node.op_type
        ins = [self.of(v) for v in node.inputs]
        result: Interval | None = None
        if op in _SAME and ins:
            result = ins[0]
        elif op == "Cast":
            result = ins[0]
        elif op == "Concat":
            result = _join_all(ins)
        elif op == "Where" and len(ins) == 3:
            result = _join(ins[1], ins[2]) if ins[1] and ins[2] else None
        elif op in ("Max", "Min") and ins and all(ins):
            pick = max if op == "Max" else min
            result = (pick(i[0] for i in ins), pick(i[1] for i in ins))
        elif op == "Add" and len(ins) == 2 and all(ins):
            result = (ins[0][0] + ins[1][0], ins[0][1] + ins[1][1])
        elif op == "Sub" and len(ins) == 2 and all(ins):
            result = (ins[0][0] - ins[1][1], ins[0][1] - ins[1][0])
        elif op == "Neg" and ins and ins[0]:
            result = (-ins[0][1], -ins[0][0])
        elif op == "Mul" and len(ins) == 2 and all(ins):
            corners = [a * b for a in ins[0] for b in ins[1]]
            result = (min(corners), max(corners))
        elif op == "Clip" and ins and ins[0]:
            low = ins[1][0] if len(ins) > 1 and ins[1] else ins[0][0]
            high = ins[2][1] if len(ins) > 2 and ins[2] else ins[0][1]
            result = (max(ins[0][0], low), min(ins[0][1], high)) if low <= high else None
        elif op == "Mod" and len(ins) == 2 and all(ins):
            result = _remainder(ins[0], ins[1], node.attributes.get_int("fmod", 0))
        elif op in ("ArgMax", "ArgMin"):
            result = _arg_range(node)
        elif op in ("Shape", "Size"):
            result = (0, int(np.iinfo(np.int64).max))
        self._set(out, result)

    # -- folding ---------------------------------------------------------------
    def _fold(self, graph: ir.Graph, node: ir.Node) -> bool:
        op = node.op_type
        if op in _COMPARE and len(node.inputs) == 2:
            a, b = self.of(node.inputs[0]), self.of(node.inputs[1])
            if a is None or b is None:
                return False
            true, false = _COMPARE[op](a, b)
            if not (true or false) or self.root is None:
                return False
            shape = shape_of(node.outputs[0])
            if shape is None or not all(isinstance(d, int) for d in shape):
                return False
            value = new_constant(self.root, np.full(shape, bool(true)), "decided")
            return take_place(node, value)
        if op == "Where" and len(node.inputs) == 3:
            decided = _decided(node.inputs[0])
            if decided is None:
                return False
            kept = node.inputs[1] if decided else node.inputs[2]
            shape = shape_of(node.outputs[0])
            if shape is None or shape_of(kept) != shape:
                return False
            return take_place(node, kept)
        if op in ("And", "Or", "Not") and node.inputs and self.root is not None:
            flags = [_decided(v) for v in node.inputs]
            shape = shape_of(node.outputs[0])
            if None in flags or shape is None or not all(isinstance(d, int) for d in shape):
                return False
            answer = all(flags) if op == "And" else any(flags) if op == "Or" else not flags[0]
            return take_place(node, new_constant(self.root, np.full(shape, answer), "decided"))
        if op == "Slice" and len(node.inputs) >= 3:
            return self._unpadded_scatter(node)
        if op == "Cast" and node.inputs:
            uses = node.outputs[0].uses()
            if len(uses) == 1 and uses[0].node.op_type in LAYOUT and uses[0].idx == 0:
                return False  # the layout op takes it along first (_commute)
            return self._round_trip(node)
        if op in LAYOUT and node.inputs:
            return self._commute(graph, node)
        if op == "Clip" and node.inputs:
            x = self.of(node.inputs[0])
            low = self.of(node.inputs[1]) if len(node.inputs) > 1 else None
            high = self.of(node.inputs[2]) if len(node.inputs) > 2 else None
            if x is None or (len(node.inputs) > 1 and node.inputs[1] is not None and low is None):
                return False
            if len(node.inputs) > 2 and node.inputs[2] is not None and high is None:
                return False
            if (low is None or low[1] <= x[0]) and (high is None or x[1] <= high[0]):
                return take_place(node, node.inputs[0])
        return False

    def _unpadded_scatter(self, cut: ir.Node) -> bool:
        """``Slice(ScatterND(Concat(x, pad), i, u), 0, n)`` along axis 0, ``n`` the rows of
        ``x``, is ``ScatterND(x, i, u)`` when every index is in ``[0, n)``: the lowerings pad
        a scatter so that an index out of bounds writes to a row that is cut off again."""
        scatter = producer(cut.inputs[0], "ScatterND")
        if scatter is None or len(scatter.inputs) != 3 or None in scatter.inputs:
            return False
        reduction = scatter.attributes.get("reduction")
        if reduction is not None and reduction.as_string() != "none":
            return False
        concat = producer(scatter.inputs[0], "Concat")
        x = concat.inputs[0] if concat is not None and concat.inputs else None
        dims = shape_of(x) if x is not None else None
        if not dims or not isinstance(dims[0], int) or concat.attributes.get_int("axis", 0) != 0:
            return False
        bounds = [constant(v) if v is not None else None for v in cut.inputs[1:]]
        want = ([0], [dims[0]], [0], [1])
        if any(b is None or list(b.reshape(-1)) != w for b, w in zip(bounds, want, strict=False)):
            return False
        index = self.of(scatter.inputs[1])
        if index is None or index[0] < 0 or index[1] >= dims[0]:
            return False
        if len(scatter.outputs[0].uses()) != 1 or scatter.outputs[0].is_graph_output():
            return False
        attributes = [scatter.attributes[k] for k in scatter.attributes]
        rows = ir.Node("", "ScatterND", [x, *scatter.inputs[1:]], attributes, num_outputs=1)
        rows.outputs[0].shape, rows.outputs[0].type = x.shape, x.type
        rows.metadata_props.update(scatter.metadata_props)
        cut.graph.insert_before(cut, rows)
        return take_place(cut, rows.outputs[0])

    def _round_trip(self, back: ir.Node) -> bool:
        """``Cast(L(Cast(x, T)), type of x)`` is ``L(x)`` when ``T`` holds ``x``'s interval
        (integers and booleans; a float round trip rounds), ``L`` a chain, maybe empty,
        of layout ops read by the chain alone: they move integers of either type."""
        chain, value = [], back.inputs[0]
        while (layout := producer(value, *LAYOUT)) is not None and len(chain) < CHAIN:
            if len(value.uses()) != 1 or value.is_graph_output() or layout.inputs[0] is None:
                return False
            chain.append(layout)
            value = layout.inputs[0]
        there = producer(value, "Cast")
        if there is None or there.inputs[0] is None:
            return False
        x = there.inputs[0]
        kind = _bounds(x)
        if kind is None or _dtype(x) != _dtype(back.outputs[0]):
            return False
        middle = _bounds(there.outputs[0])
        held = self.of(x) or kind
        if middle is None or not middle[0] <= held[0] <= held[1] <= middle[1]:
            return False
        if not chain:
            return take_place(back, x)
        if back.outputs[0].is_graph_output() and chain[0].graph is not back.graph:
            return False
        if x.shape is None:  # a Cast keeps the shape: the layout ops that follow read it
            x.shape = there.outputs[0].shape
        if x.dtype is None:
            x.dtype = _dtype(x)
        chain[-1].replace_input_with(0, x)
        for layout in chain:
            layout.outputs[0].dtype = _dtype(x)
        return take_place(back, chain[0].outputs[0])

    def _commute(self, graph: ir.Graph, anchor: ir.Node) -> bool:
        """Layout ops in a row become one, a Cast among them moving before them (see
        :func:`_layout_chain`), where it may meet a Cast it undoes
        (``Squeeze(Cast(Unsqueeze(Cast(i, int32)), int64))``: an int64 index
        narrowed, moved one axis up, and widened back)."""
        moved = layout_chain(graph, anchor, self.root)
        if moved is None:
            cast = producer(anchor.inputs[0], "Cast")
            if cast is None or cast.graph is not graph or not self._round_trip(cast):
                return False
            self._propagate(anchor)  # the anchor stays: its interval as the walk sets it
            return True
        cast, layout, source = moved
        if cast is not None:  # new nodes: the walk has passed, their intervals are set here
            self._set(cast.outputs[0], self.of(source))
        if layout is not None:
            self._set(layout.outputs[0], self.of(source))
        if cast is not None:
            self._round_trip(cast)
        return True


def _decided(value: ir.Value | None) -> bool | None:
    tensor = value.const_value if value is not None else None
    if tensor is not None and math.prod(tensor.shape) > _READ_LIMIT:
        return None  # a large mask (attention's) is not one decided answer
    array = constant(value)
    if array is None or array.dtype != np.bool_ or array.size == 0:
        return None
    if array.all():
        return True
    return False if not array.any() else None


def _condition_limits(
    condition: ir.Value | None, returned: dict[int, int], ranges: _Ranges, graph: ir.Graph | None
) -> dict[int, Interval]:
    """Bounds a Loop condition puts on carries (a conjunction of tests of a carry against a
    constant): the step runs only where they hold. ``returned`` maps the ids of the values
    tested (what the body returns, or the Loop's start values) to their carry; the tests
    are nodes of ``graph``."""
    limits: dict[int, Interval] = {}
    pending = [condition]
    while pending:
        value = pending.pop()
        node = value.producer() if value is not None else None
        if node is None or node.domain not in _ONNX or node.graph is not graph or graph is None:
            continue
        if node.op_type == "And":
            pending.extend(node.inputs)
            continue
        if node.op_type not in ("Less", "LessOrEqual", "Greater", "GreaterOrEqual"):
            continue
        a, b = node.inputs
        for carry, other, flipped in ((a, b, False), (b, a, True)):
            k = returned.get(id(carry)) if carry is not None else None
            # against a constant or any value: its interval, else its type's, bounds the carry
            bound = (ranges.of(other) or _bounds(other)) if k is not None else None
            if k is None or bound is None:
                continue
            limit = _limit(node.op_type, flipped, bound, _bounds(carry))
            if limit is not None:
                limits[k] = _meet(limits.get(k, limit), limit)
    return limits


def _limit(op: str, flipped: bool, other: Interval, dtype: Interval | None) -> Interval | None:
    """The values of a carry ``x`` for which ``x op y`` (``y op x`` if ``flipped``) can
    hold for some ``y`` in ``other``."""
    if dtype is None:
        return None
    low, high = dtype
    if flipped:  # c < x, c <= x, c > x, c >= x
        op = {"Less": "Greater", "LessOrEqual": "GreaterOrEqual"}.get(op) or {
            "Greater": "Less",
            "GreaterOrEqual": "LessOrEqual",
        }[op]
    return {
        "Less": (low, other[1] - 1),
        "LessOrEqual": (low, other[1]),
        "Greater": (other[0] + 1, high),
        "GreaterOrEqual": (other[0], high),
    }[op]


def _arg_range(node: ir.Node) -> Interval | None:
    shape = shape_of(node.inputs[0]) if node.inputs else None
    if shape is None:
        return None
    attribute = node.attributes.get("axis")
    axis = attribute.as_int() if attribute is not None else 0
    size = shape[axis % len(shape)] if len(shape) else None
    return (0, size - 1) if isinstance(size, int) and size > 0 else None


def _remainder(a: Interval, b: Interval, fmod: int) -> Interval | None:
    """The interval of ``Mod(a, b)`` for a divisor of one sign: with ``fmod`` the result
    has the dividend's sign (C's ``%``), else the divisor's (Python's ``%``); its size
    stays below the divisor's and, with ``fmod``, within the dividend's."""
    if b[0] > 0:
        size = b[1] - 1
    elif b[1] < 0:
        size = -b[0] - 1
    else:
        return None  # a divisor that may be 0 (or change sign)
    if not fmod:
        return (0, size) if b[0] > 0 else (-size, 0)
    low = 0 if a[0] >= 0 else max(a[0], -size)
    high = 0 if a[1] <= 0 else min(a[1], size)
    return (low, high)


def _count_limits(body: ir.Graph, carried: int, starts: list, high: int, limits: dict) -> None:
    """A carry the body steps by a constant (``c + d``, ``c - d``: a ``fori_loop``'s counter
    carried next to the Loop's own) stays within ``start + d * [0, trips - 1]``."""
    for k in range(carried):
        step = producer(body.outputs[1 + k], "Add", "Sub")
        if step is None or starts[k] is None or len(step.inputs) != 2:
            continue
        mine = body.inputs[2 + k]
        others = [v for v in step.inputs if v is not mine]
        d = constant(others[0]) if len(others) == 1 else None
        if d is None or d.size != 1 or d.dtype.kind not in "iu":
            continue
        if step.op_type == "Sub" and step.inputs[0] is not mine:
            continue
        d = int(d.reshape(-1)[0]) * (-1 if step.op_type == "Sub" else 1)
        span = (min(0, d * high), max(0, d * high))
        bound, kind = (starts[k][0] + span[0], starts[k][1] + span[1]), _bounds(mine)
        if kind is not None and kind[0] <= bound[0] and bound[1] <= kind[1]:
            limits[k] = _meet(limits.get(k), bound)


def _widened(current, following, start, limit, dtype) -> Interval | None:
    if current is None or following is None or dtype is None or current == following:
        return following
    low = following[0] if following[0] >= current[0] else dtype[0]
    high = following[1] if following[1] <= current[1] else dtype[1]
    return _join(start, _meet((low, high), limit))


def _join(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None or b is None:
        return None
    return (min(a[0], b[0]), max(a[1], b[1]))


def _join_all(intervals: list[Interval | None]) -> Interval | None:
    if not intervals or any(i is None for i in intervals):
        return None
    return (min(i[0] for i in intervals), max(i[1] for i in intervals))


def _meet(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None:
        return b
    if b is None:
        return a
    low, high = max(a[0], b[0]), min(a[1], b[1])
    return (low, high) if low <= high else a
