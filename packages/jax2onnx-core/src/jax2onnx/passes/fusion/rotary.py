"""ONNX ``RotaryEmbedding`` (opset >= 23) from rotary position embeddings written in ``jnp``.

Matched, anchored at the Add::

    y = x * cos + rotate(x) * sin
    rotate_half(x)     = concat(-x[..., D/2:], x[..., :D/2])          # Llama, GPT-NeoX
    rotate_every_two(x) = reshape(stack(-x[..., 1::2], x[..., ::2]))  # GPT-J

with the slices as any of the forms :func:`.rotary_tables.slice_of` reads
(a symbolic batch lowers ``x[..., :k]`` to Transpose and GatherND, which the
layout pass leaves around ``rotate_half``: that form is read in its frame),
and ``cos``/``sin`` constants, or ``T[position_ids]`` of a constant table
``T`` (:func:`.rotary_tables.table_of`). ``x`` is ``(B, S, H, D)`` (fed to
the op as ``(B, S, H*D)`` with ``num_heads``, through the Reshape that split
the heads when there is one), ``(B, H, S, D)`` (4-D form) or ``(B, S, D)``.
ONNX Runtime broadcasts neither the tables nor the positions over the batch,
so the op gets a ``(P, D/2)`` cache and ``position_ids`` of shape ``(B, S)``:
the graph's own (``T[position_ids]``), or ``0..S-1`` per example (a constant
for a static batch, else ``Expand`` to the batch read with ``Shape``, shared
by every rotary embedding of that batch). When ``x`` is the first ``rd``
columns of a tensor and the result is concatenated with the others (GPT-J's
``rotary_dim``), the op takes the whole tensor with ``rotary_embedding_dim``.

Why it is exact: ``RotaryEmbedding`` computes ``x1 * cos - x2 * sin`` and
``x1 * sin + x2 * cos`` on the halves (or pairs) of ``x``, with ``cos``/``sin``
the cache rows at the positions: the products and sums of the decomposed
form, provided its factors repeat their halves (pairs), which is checked on
the constants. Float32 only: ONNX Runtime has no float64 kernel (and its
float16 one is not exercised here).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.canonical import static_or_symbolic
from jax2onnx.passes.fusion.layout import compose, identity, inverse, sole_user
from jax2onnx.passes.fusion.match import Match, constant, int_attr, node, operands, producer
from jax2onnx.passes.fusion.rotary_tables import Table, shape_through, slice_of, table_of
from jax2onnx.values.ir import ir
from jax2onnx.values.kernels import has_kernel

MIN_OPSET = 23


class Rotated:
    """``rotate(x)`` found in a frame ``Transpose(x, perm)`` (``perm`` identity: x itself)."""

    def __init__(self, x: ir.Value, perm: tuple, interleaved: bool, nodes: list) -> None:
        self.x, self.perm, self.interleaved, self.nodes = x, perm, interleaved, nodes


def _frame(value: ir.Value) -> tuple[ir.Value, tuple] | None:
    """``(x, perm)`` with ``value == Transpose(x, perm)`` (or ``value`` itself)."""
    transpose = producer(value, "Transpose")
    shape = static_or_symbolic(value)
    if transpose is None:
        return (value, identity(len(shape))) if shape is not None else None
    attribute = transpose.attributes.get("perm")
    if attribute is None:
        return None
    return transpose.inputs[0], tuple(int(p) for p in attribute.as_ints())


def _halves(concat: ir.Node) -> Rotated | None:
    """``concat(-x2, x1)`` along the last axis of ``x`` (in any frame)."""
    if len(concat.inputs) != 2:
        return None
    neg = producer(concat.inputs[0], "Neg")
    second = slice_of(neg.inputs[0]) if neg is not None else None
    first = slice_of(concat.inputs[1])
    if second is None or first is None or second.source is not first.source:
        return None
    framed = _frame(first.source)
    if framed is None:
        return None
    x, perm = framed
    width = shape_through(first.source)[first.axis]
    r = len(perm)
    if int_attr(concat, "axis", 0) % r != first.axis or second.axis != first.axis:
        return None
    if perm[first.axis] != r - 1 or not isinstance(width, int) or width % 2:
        return None
    half = width // 2
    if not (
        np.array_equal(first.indices, np.arange(half))
        and np.array_equal(second.indices, np.arange(half, width))
    ):
        return None
    return Rotated(x, perm, False, [concat, neg, first.node, second.node])


def _pairs(reshape: ir.Node) -> Rotated | None:
    """``reshape(stack((-x[..., 1::2], x[..., ::2]), -1))`` with ``x`` itself (no frame)."""
    concat = producer(reshape.inputs[0], "Concat")
    if concat is None or len(concat.inputs) != 2:
        return None
    ups = [producer(v, "Unsqueeze") for v in concat.inputs]
    if any(u is None for u in ups):
        return None
    neg = producer(ups[0].inputs[0], "Neg")
    odd = slice_of(neg.inputs[0]) if neg is not None else None
    even = slice_of(ups[1].inputs[0])
    if odd is None or even is None or odd.source is not even.source:
        return None
    x = odd.source
    shape = static_or_symbolic(x)
    r = len(shape)
    width = shape[-1]
    if odd.axis != r - 1 or even.axis != r - 1 or not isinstance(width, int) or width % 2:
        return None
    for up in ups:
        axes = constant(up.inputs[1]) if len(up.inputs) > 1 else None
        if axes is None or axes.size != 1 or int(axes.reshape(-1)[0]) % (r + 1) != r:
            return None
    if int_attr(concat, "axis", 0) % (r + 1) != r:
        return None
    if not (
        np.array_equal(odd.indices, np.arange(1, width, 2))
        and np.array_equal(even.indices, np.arange(0, width, 2))
    ):
        return None
    if static_or_symbolic(reshape.outputs[0]) != shape:
        return None
    return Rotated(x, identity(r), True, [reshape, concat, *ups, neg, odd.node, even.node])


def _transposed(value: ir.Value) -> tuple[ir.Node | None, ir.Value, tuple | None]:
    """``(Transpose, its input, perm)`` for a Transpose, else ``(None, value, None)``."""
    transpose = producer(value, "Transpose")
    if transpose is None or "perm" not in transpose.attributes:
        return None, value, None
    perm = tuple(int(p) for p in transpose.attributes["perm"].as_ints())
    return transpose, transpose.inputs[0], perm


def _rotated_term(value: ir.Value) -> tuple[Rotated, ir.Value, list, tuple] | None:
    """``(rotated, sin factor value, nodes, frame of the factor)`` for ``rotate(x) * sin``,
    also when the rotation was computed in a frame ``Transpose(x, p)`` and transposed back
    before the product (``Transpose(rot_t) * sin``) or after it (``Transpose(rot_t * sin_t)``)."""
    outer, value, back = _transposed(value)
    mul = producer(value, "Mul")
    if mul is None:
        return None
    for rot, factor in operands(mul):
        inner, rot, inner_back = _transposed(rot)
        if outer is not None and inner is not None:
            continue
        found = None
        concat, reshape = producer(rot, "Concat"), producer(rot, "Reshape")
        if concat is not None:
            found = _halves(concat)
        elif reshape is not None:
            found = _pairs(reshape)
        if found is None:
            continue
        undo = back if outer is not None else inner_back
        r = len(found.perm)
        if undo is None and found.perm != identity(r):
            continue
        if undo is not None and compose(found.perm, undo) != identity(r):
            continue
        nodes = [n for n in (outer, inner) if n is not None]
        frame = found.perm if outer is not None else identity(r)
        return found, factor, [*nodes, mul, *found.nodes], frame
    return None


def _to_x_frame(value: ir.Value, perm: tuple, x_rank: int) -> ir.Value | np.ndarray | None:
    """A factor given in the frame ``Transpose(x, perm)``, brought to ``x``'s (constants)."""
    if perm == identity(x_rank):
        return value
    array = constant(value)
    if array is None or array.ndim > x_rank:
        return None
    padded = array.reshape((1,) * (x_rank - array.ndim) + array.shape)
    return np.ascontiguousarray(np.transpose(padded, inverse(perm)))


def _table(factor: Any, x_shape: tuple, interleaved: bool) -> Table | None:
    if isinstance(factor, np.ndarray):
        value = ir.Value(name="rotary_probe", const_value=ir.tensor(factor))
        return table_of(value, x_shape, interleaved)
    return table_of(factor, x_shape, interleaved)


def _columns(value: ir.Value) -> tuple[ir.Value, np.ndarray, list] | None:
    """``(x, columns, nodes)`` when ``value`` is ``x[..., columns]`` (columns of the last
    axis), also sliced in a frame ``Transpose(x, p)`` and transposed back."""
    back, inner, undo = _transposed(value)
    sliced = slice_of(inner)
    if sliced is None:
        return None
    source, nodes = sliced.source, [sliced.node]
    framed = _frame(source) if back is not None else (source, None)
    if framed is None:
        return None
    x, perm = framed
    shape = static_or_symbolic(x)
    if shape is None:
        return None
    if back is None:
        if sliced.axis != len(shape) - 1:
            return None
        return x, sliced.indices, nodes
    if compose(perm, undo) != identity(len(perm)) or perm[sliced.axis] != len(shape) - 1:
        return None
    return x, sliced.indices, [back, *nodes]


def _partial(add: ir.Node, x: ir.Value) -> tuple[ir.Node, ir.Value, int, list] | None:
    """``(Concat, whole, rd, nodes)`` when ``x`` is the first ``rd`` columns of ``whole``
    and the result is concatenated with the others (GPT-J's ``rotary_dim``)."""
    concat = sole_user(add.outputs[0], "Concat")
    if concat is None or len(concat.inputs) != 2 or concat.inputs[0] is not add.outputs[0]:
        return None
    rotated, passed = _columns(x), _columns(concat.inputs[1])
    if rotated is None or passed is None or rotated[0] is not passed[0]:
        return None
    whole = rotated[0]
    shape = static_or_symbolic(whole)
    width, rd = shape[-1], rotated[1].size
    if int_attr(concat, "axis", 0) % len(shape) != len(shape) - 1 or not isinstance(width, int):
        return None
    if not np.array_equal(np.concatenate([rotated[1], passed[1]]), np.arange(width)):
        return None
    return concat, whole, rd, [concat, *rotated[2], *passed[2]]


def rotary(ctx: Any, add: ir.Node) -> bool:
    dtype = add.outputs[0].dtype
    if ctx.opset < MIN_OPSET or dtype != ir.DataType.FLOAT:
        return False
    if not has_kernel("RotaryEmbedding", np.float32):
        return False
    for first, second in operands(add):
        found = _rotated_term(second)
        if found is None:
            continue
        rotated, sin_value, nodes, frame = found
        x = rotated.x
        plain = producer(first, "Mul")
        if plain is None:
            continue
        cos_value = next((c for v, c in operands(plain) if v is x), None)
        shape = static_or_symbolic(x)
        if cos_value is None or shape is None or len(shape) not in (3, 4):
            continue
        if static_or_symbolic(add.outputs[0]) != shape:
            continue
        sin_factor = _to_x_frame(sin_value, frame, len(shape))
        if sin_factor is None:
            continue
        cos, sin = (_table(f, shape, rotated.interleaved) for f in (cos_value, sin_factor))
        if cos is None or sin is None or cos.seq_axis != sin.seq_axis:
            continue
        if (cos.positions is None) != (sin.positions is None):
            continue
        if cos.positions is not None and cos.positions is not sin.positions:
            continue
        partial = _partial(add, x)
        rd = None
        if partial is not None:
            anchor, x, rd, extra = partial
            shape = static_or_symbolic(x)
        match = Match(ctx.graph, anchor if partial is not None else add)
        match.take(add, plain, *nodes, *(extra if partial is not None else ()))
        return _emit(ctx, match, x, shape, cos, sin, rotated.interleaved, rd)
    return False


def _emit(
    ctx: Any,
    match: Match,
    x: ir.Value,
    shape: tuple,
    cos: Table,
    sin: Table,
    interleaved: bool,
    rd: int | None,
) -> bool:
    """Decide (node count, closed pattern), then build: nothing is built for a refusal."""
    seq = cos.seq_axis
    if len(shape) == 4 and seq not in (1, 2):
        return False
    heads = shape[2] if len(shape) == 4 and seq == 1 else None
    if heads is not None and not (isinstance(heads, int) and isinstance(shape[3], int)):
        return False
    split = _split_source(x, shape, heads) if heads is not None else None
    positions = cos.positions
    shared = None
    if positions is None:
        if not isinstance(shape[seq], int):
            return False
        steps = np.arange(shape[seq], dtype=np.int64)[None]
        if not isinstance(shape[0], int):
            shared = _shared_steps(ctx, match.anchor, steps, shape[0])
    count = 1 + (heads is not None) * (2 if split is None else 1)
    if positions is not None:
        count += positions.dtype != ir.DataType.INT64
    elif shared is None and not isinstance(shape[0], int):
        count += 3
    if count > len(match.nodes) or not match.closed():
        return False

    new: list[ir.Node] = []
    x_in, attrs = x, {"interleaved": 1 if interleaved else None, "rotary_embedding_dim": rd}
    if heads is not None:
        x_in = split if split is not None else _flat(ctx, x, shape, heads, new)
        attrs["num_heads"] = heads
    elif len(shape) == 3:
        attrs["num_heads"] = 1
    if positions is None:
        positions = shared or _steps(ctx, x_in, shape[0], steps, new)
    elif positions.dtype != ir.DataType.INT64:
        cast = node("Cast", [positions], to=ir.DataType.INT64)
        new.append(cast)
        positions = cast.outputs[0]
    caches = [
        ctx.constant(t.cache.astype(np.float32), f"rotary_{n}")
        for t, n in ((cos, "cos"), (sin, "sin"))
    ]
    fused = node("RotaryEmbedding", [x_in, *caches, positions], **attrs)
    new.append(fused)
    result = fused.outputs[0]
    if heads is not None:
        _typed(result, (shape[0], shape[1], heads * shape[3]))  # the attention fusion reads it
        dims = ctx.constant(np.asarray([0, 0, heads, shape[3]], np.int64), "rotary_heads")
        back = node("Reshape", [result, dims])
        new.append(back)
        result = back.outputs[0]
    return match.replace(new, result)


def _typed(value: ir.Value, shape: tuple) -> None:
    value.dtype = ir.DataType.FLOAT
    value.shape = ir.Shape(list(shape))


def _split_source(x: ir.Value, shape: tuple, heads: int) -> ir.Value | None:
    """The ``(B, S, H*D)`` input of the Reshape that split ``x`` into heads, if any."""
    split = producer(x, "Reshape")
    if split is None:
        return None
    flat = static_or_symbolic(split.inputs[0])
    if flat is None or len(flat) != 3 or flat[:2] != shape[:2] or flat[2] != heads * shape[3]:
        return None
    return split.inputs[0]


def _flat(ctx: Any, x: ir.Value, shape: tuple, heads: int, new: list) -> ir.Value:
    dims = ctx.constant(np.asarray([0, 0, -1], np.int64), "rotary_flat")
    reshape = node("Reshape", [x, dims])
    new.append(reshape)
    _typed(reshape.outputs[0], (shape[0], shape[1], heads * shape[3]))
    return reshape.outputs[0]


def _steps(ctx: Any, x: ir.Value, batch: Any, steps: np.ndarray, new: list) -> ir.Value:
    """Positions ``0..S-1`` for each example, ``(B, S)`` int64."""
    length = steps.shape[1]
    if isinstance(batch, int):
        every = np.ascontiguousarray(np.broadcast_to(steps, (batch, length)))
        return ctx.constant(every, "rotary_pos")
    size = node("Shape", [x], start=0, end=1)
    one = ctx.constant(np.ones(1, np.int64), "rotary_one")
    target = node("Concat", [size.outputs[0], one], axis=0)
    expand = node("Expand", [ctx.constant(steps, "rotary_steps"), target.outputs[0]])
    new.extend([size, target, expand])
    expand.outputs[0].shape = ir.Shape([batch, length])
    expand.outputs[0].dtype = ir.DataType.INT64
    return expand.outputs[0]


def _shared_steps(ctx: Any, anchor: ir.Node, steps: np.ndarray, batch: Any) -> ir.Value | None:
    """The positions another rotary embedding of this batch computed before ``anchor``."""
    for other in ctx.graph:
        if other is anchor:
            return None
        if other.op_type != "Expand" or other.domain not in ("", "ai.onnx"):
            continue
        source = constant(other.inputs[0])
        if source is None or source.shape != steps.shape or not np.array_equal(source, steps):
            continue
        concat = producer(other.inputs[1], "Concat")
        size = producer(concat.inputs[0], "Shape") if concat is not None else None
        if size is not None and static_or_symbolic(other.outputs[0]) == (batch, steps.shape[1]):
            return other.outputs[0]
    return None


REWRITES = ((("Add",), rotary),)
