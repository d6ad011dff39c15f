"""The pieces a rotary embedding is made of: slices of the last axis, cos/sin tables.

:func:`slice_of` reads a slice of one axis however the lowering wrote it
(``Slice``, ``Split``, ``Gather`` with evenly spaced constant indices,
``GatherND`` of such indices along axis 0). :func:`table_of` reads a cos or
sin factor broadcast against ``x`` as ONNX ``RotaryEmbedding`` wants it: a
``(positions, D/2)`` cache and which positions each ``(batch, sequence)``
row reads, from a constant (positions ``0..S-1``) or from
``T[position_ids]`` with ``T`` constant (``transformers``' ``sincos`` table),
provided the factor repeats its halves (``interleaved=0``) or its pairs
(``interleaved=1``): then multiplying by it is what the op does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.canonical import static_or_symbolic
from jax2onnx.passes.fusion.match import constant, int_attr, producer
from jax2onnx.values.ir import ir

INT64_MIN = int(np.iinfo(np.int64).min)


class Sliced:
    """``value == source[..., start:stop:step, ...]`` along ``axis`` (non-negative indices)."""

    def __init__(self, node: ir.Node, source: ir.Value, axis: int, indices: np.ndarray) -> None:
        self.node, self.source, self.axis, self.indices = node, source, axis, indices


def _progression(indices: np.ndarray, size: Any) -> np.ndarray | None:
    if indices.dtype.kind not in "iu" or indices.ndim != 1 or indices.size == 0:
        return None
    if not isinstance(size, int):
        return None
    if indices.min() < -size or indices.max() >= size:
        return None
    indices = indices.astype(np.int64) % size
    if indices.size > 1:
        steps = np.diff(indices)
        if steps[0] == 0 or not (steps == steps[0]).all():
            return None
    return indices


def shape_through(value: ir.Value) -> tuple | None:
    """The shape of ``value``, or of the input of the Transpose computing it, permuted
    (the Transposes the lowerings emit carry no shape)."""
    shape = static_or_symbolic(value)
    transpose = producer(value, "Transpose")
    if shape is not None or transpose is None or "perm" not in transpose.attributes:
        return shape
    inner = static_or_symbolic(transpose.inputs[0])
    if inner is None:
        return None
    return tuple(inner[int(p)] for p in transpose.attributes["perm"].as_ints())


def slice_of(value: ir.Value) -> Sliced | None:
    """The slice ``value`` is, if it is one (see the module)."""
    step = producer(value, "Slice", "Split", "Gather", "GatherND")
    if step is None:
        return None
    source = step.inputs[0]
    shape = shape_through(source)
    if shape is None:
        return None
    r = len(shape)
    if step.op_type == "Gather":
        axis = int_attr(step, "axis", 0) % r
        idx = constant(step.inputs[1])
        found = None if idx is None else _progression(np.asarray(idx), shape[axis])
    elif step.op_type == "GatherND":
        idx = constant(step.inputs[1])
        if idx is None or idx.ndim != 2 or idx.shape[1] != 1 or int_attr(step, "batch_dims", 0):
            return None
        axis, found = 0, _progression(idx[:, 0], shape[0])
    elif step.op_type == "Split":
        axis = int_attr(step, "axis", 0) % r
        sizes = constant(step.inputs[1]) if len(step.inputs) > 1 else None
        if sizes is None or not isinstance(shape[axis], int):
            return None
        k = list(step.outputs).index(value)
        start = int(np.sum(sizes[:k]))
        found = np.arange(start, start + int(sizes[k]))
    else:
        found, axis = _slice_indices(step, shape)
    return None if found is None else Sliced(step, source, axis, found)


def _slice_indices(step: ir.Node, shape: tuple) -> tuple[np.ndarray | None, int]:
    parts = [constant(v) if v is not None else None for v in step.inputs[1:5]]
    starts, ends = parts[0], parts[1]
    if starts is None or ends is None or starts.size != 1:
        return None, 0
    axes = parts[2] if len(parts) > 2 and parts[2] is not None else np.zeros(1, np.int64)
    steps = parts[3] if len(parts) > 3 and parts[3] is not None else np.ones(1, np.int64)
    if axes is None or steps is None:
        return None, 0
    axis = int(axes.reshape(-1)[0]) % len(shape)
    size = shape[axis]
    if not isinstance(size, int):
        return None, axis
    begin, end, stride = (int(a.reshape(-1)[0]) for a in (starts, ends, steps))
    return np.arange(size)[slice(begin, end, stride)], axis


def halves(array: np.ndarray, interleaved: bool) -> np.ndarray | None:
    """The ``D/2`` columns of ``array`` whose repetition it is (halves, or pairs)."""
    d = array.shape[-1]
    if d % 2:
        return None
    first, second = (
        (array[..., 0::2], array[..., 1::2])
        if interleaved
        else (array[..., : d // 2], array[..., d // 2 :])
    )
    return first if np.array_equal(first, second) else None


class Table:
    """A cos or sin factor: ``cache`` (P, D/2), and ``positions`` (a value (B, S) or
    ``None`` for ``0..S-1``), ``seq_axis`` of ``x`` it varies along."""

    def __init__(self, cache: np.ndarray, positions: ir.Value | None, seq_axis: int) -> None:
        self.cache, self.positions, self.seq_axis = cache, positions, seq_axis


def table_of(value: ir.Value, x_shape: tuple, interleaved: bool) -> Table | None:
    """The factor ``value`` (broadcast against ``x``) as a :class:`Table` (see the module)."""
    r = len(x_shape)
    array = constant(value)
    if array is not None:
        if array.ndim > r or array.dtype.kind != "f":
            return None
        padded = array.reshape((1,) * (r - array.ndim) + array.shape)
        varying = [a for a in range(r - 1) if padded.shape[a] != 1]
        if len(varying) != 1 or padded.shape[-1] != x_shape[-1]:
            return None
        seq = varying[0]
        if padded.shape[seq] != x_shape[seq] or seq == 0:
            return None
        rows = np.moveaxis(padded, seq, 0).reshape(padded.shape[seq], x_shape[-1])
        cache = halves(rows, interleaved)
        return None if cache is None else Table(cache, None, seq)
    return _gathered(value, x_shape, interleaved)


def _gathered(value: ir.Value, x_shape: tuple, interleaved: bool) -> Table | None:
    """``T[position_ids]`` with columns selected, halves repeated, size-1 axes added."""
    shape = static_or_symbolic(value)
    if shape is None or len(shape) != len(x_shape):
        return None
    picks: list[np.ndarray] = []  # column selections, applied last first
    while True:
        step = producer(value, "Unsqueeze", "Concat", "Gather", "Split", "Slice")
        if step is None:
            return None
        if step.op_type == "Unsqueeze":
            value = step.inputs[0]
            continue
        if step.op_type == "Concat":
            width = static_or_symbolic(step.inputs[0])
            if width is None or int_attr(step, "axis", 0) % len(width) != len(width) - 1:
                return None
            if any(v is not step.inputs[0] for v in step.inputs) or not isinstance(width[-1], int):
                return None
            picks.append(np.tile(np.arange(width[-1]), len(step.inputs)))
            value = step.inputs[0]
            continue
        if step.op_type == "Gather":
            break
        sliced = slice_of(value)
        if sliced is None or sliced.axis != len(shape_through(sliced.source)) - 1:
            return None
        picks.append(sliced.indices)
        value = sliced.source
    table = constant(step.inputs[0])
    positions = step.inputs[1]
    gathered = static_or_symbolic(step.outputs[0])
    if table is None or int_attr(step, "axis", 0) != 0 or gathered is None:
        return None
    idx_shape = gathered[: len(gathered) - table.ndim + 1]  # the index may carry no shape
    if len(idx_shape) != 2:
        return None
    if table.dtype.kind != "f" or any(d != 1 for d in table.shape[1:-1]):
        return None
    columns = np.arange(table.shape[-1])
    for pick in reversed(picks):
        columns = columns[pick]
    if columns.size != x_shape[-1]:
        return None
    rows = table.reshape(table.shape[0], -1)[:, columns]
    # the factor: (B, S) of the positions at axis 0 and at the sequence axis, else 1
    seq = [a for a in range(1, len(shape) - 1) if shape[a] != 1]
    if len(seq) != 1 or shape[0] != idx_shape[0] or shape[seq[0]] != idx_shape[1]:
        return None
    if x_shape[0] != idx_shape[0] or x_shape[seq[0]] != idx_shape[1]:
        return None
    cache = halves(rows, interleaved)
    return None if cache is None else Table(cache, positions, seq[0])
