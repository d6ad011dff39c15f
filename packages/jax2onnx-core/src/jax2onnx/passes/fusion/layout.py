"""Layout helpers for the fusions that read through Transposes and Reshapes.

A value is often a Transpose (or a chain of them, with a scaling by a
constant in between) of the tensor a fusion wants. :func:`walk` follows such
a chain up to its source and returns the permutation that maps the source to
the value, so a fusion can feed the source (permuted once, or not at all) to
the fused op and let the nodes it no longer reads go (unused nodes are
removed after the pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jax2onnx.passes.fusion.canonical import static_or_symbolic
from jax2onnx.passes.fusion.match import node, operands, producer, rank, scalar
from jax2onnx.values.ir import ir

Perm = tuple[int, ...]


def perm_of(transpose: ir.Node, value_rank: int) -> Perm:
    attribute = transpose.attributes.get("perm")
    if attribute is None:
        return tuple(reversed(range(value_rank)))
    return tuple(int(p) for p in attribute.as_ints())


def compose(first: Sequence[int], then: Sequence[int]) -> Perm:
    """The permutation of ``Transpose(Transpose(x, first), then)``."""
    return tuple(first[i] for i in then)


def inverse(perm: Sequence[int]) -> Perm:
    result = [0] * len(perm)
    for i, p in enumerate(perm):
        result[p] = i
    return tuple(result)


def identity(r: int) -> Perm:
    return tuple(range(r))


class Walked:
    """``value == Transpose(source, perm) * scale``: what :func:`walk` found."""

    def __init__(self, source: ir.Value, perm: Perm, scale: float) -> None:
        self.source, self.perm, self.scale = source, perm, scale


def scaled_by(step: ir.Node) -> tuple[ir.Value, float] | None:
    """``(x, factor)`` when ``step`` is ``x * c`` or ``x / c`` with ``c`` a one-number
    constant that does not raise the rank of ``x``."""
    pairs = operands(step) if step.op_type == "Mul" else [tuple(step.inputs)]
    for inner, other in pairs:
        factor = scalar(other)
        r, c = rank(inner), rank(other)
        if factor is None or factor == 0.0 or r is None or c is None or c > r:
            continue
        return inner, factor if step.op_type == "Mul" else 1.0 / factor
    return None


def walk(value: ir.Value, *, scales: bool = True) -> Walked | None:
    """Follow Transposes (and, with ``scales``, Mul/Div by a scalar constant) up from
    ``value``; ``None`` when the rank of what it reaches is unknown."""
    perm: Perm | None = None
    scale = 1.0
    while True:
        transpose = producer(value, "Transpose")
        if transpose is not None:
            attribute = transpose.attributes.get("perm")
            r = len(attribute.as_ints()) if attribute is not None else rank(transpose.inputs[0])
            if r is None:
                return None
            step_perm = perm_of(transpose, r)
            perm = step_perm if perm is None else compose(step_perm, perm)
            value = transpose.inputs[0]
            continue
        step = producer(value, "Mul", "Div") if scales else None
        found = scaled_by(step) if step is not None else None
        if found is None:
            r = rank(value)
            if r is None or (perm is not None and len(perm) != r):
                return None
            return Walked(value, perm or identity(r), scale)
        value, scale = found[0], scale * found[1]


def transposed(value: ir.Value, perm: Perm, new: list[ir.Node]) -> ir.Value:
    """``value`` permuted by ``perm`` (no node for the identity); new nodes go to ``new``."""
    if perm == identity(len(perm)):
        return value
    t = node("Transpose", [value], perm=list(perm))
    new.append(t)
    return t.outputs[0]


def shape_of(value: ir.Value | None, perm: Perm | None = None) -> tuple[Any, ...] | None:
    dims = static_or_symbolic(value)
    if dims is None or perm is None:
        return dims
    return tuple(dims[p] for p in perm)


def sole_user(value: ir.Value, *op_types: str) -> ir.Node | None:
    """The one node reading ``value``, when it is one of ``op_types`` and ``value`` is
    not a graph output."""
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output():
        return None
    user = uses[0].node
    if user.domain not in ("", "ai.onnx") or user.op_type not in op_types:
        return None
    return user
