"""Reading elementwise arithmetic for the activation fusions.

Activations are written with their constants in many places: ``0.5 * x * s``,
``x * (0.5 * s)``, ``x * s / 2`` are one product. :func:`product` reads a
value as ``coefficient * factor * factor ...`` through the ``Mul``, ``Neg``,
division by a constant and small integer ``Pow`` nodes between them, so a
rewrite compares one coefficient and a list of factors instead of every
bracketing. :func:`polynomial` reads ``k1 * x + k3 * x^3`` the same way.
:func:`evaluate` computes a small elementwise subgraph of one value in
float64, for patterns recognised by what they compute rather than by their
exact shape (the tail of the float32 ``erfc`` lowering).

Every reader returns the nodes it walked through; :func:`fuse` adds them to
a :class:`~jax2onnx.passes.fusion.match.Match` once the whole pattern is
found, so ``Match.replace`` still refuses when one of them is read outside.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from jax2onnx.passes.fusion.canonical import static_or_symbolic
from jax2onnx.passes.fusion.match import DEFAULT_DOMAINS, Match, constant, scalar
from jax2onnx.values.ir import ir
from jax2onnx.values.kernels import has_kernel

MAX_WALK = 12  # nodes a product or polynomial may span


class Product(NamedTuple):
    coefficient: float
    factors: list[ir.Value]
    nodes: list[ir.Node]


def private(value: ir.Value) -> bool:
    """Whether ``value`` is read by exactly one node and is no graph output."""
    return len(list(value.uses())) == 1 and not value.is_graph_output()


def close(found: float | None, wanted: float, rtol: float = 1e-6) -> bool:
    """``found`` equals ``wanted`` within ``rtol`` (float32 constants round ``wanted``)."""
    return found is not None and abs(found - wanted) <= rtol * abs(wanted)


def kernel(anchor: ir.Node, op_type: str) -> bool:
    """Whether ONNX Runtime runs ``op_type`` in the dtype of ``anchor``'s output."""
    dtype = anchor.outputs[0].dtype
    return dtype is not None and has_kernel(op_type, dtype.numpy())


def fuse(ctx: Any, anchor: ir.Node, nodes: list[ir.Node], fused: ir.Node) -> bool:
    """Replace ``anchor`` and ``nodes`` by the one-input node ``fused``, when its input has
    the anchor output's shape and dtype and no node of the pattern is read outside it."""
    x, out = fused.inputs[0], anchor.outputs[0]
    shape = static_or_symbolic(x)
    if shape is None or shape != static_or_symbolic(out) or x.dtype != out.dtype:
        return False  # a scalar constant of higher rank broadcast x: not elementwise in x
    match = Match(ctx.graph, anchor)
    match.take(*nodes)
    return match.replace([fused], fused.outputs[0])


def product(value: ir.Value) -> Product:
    """``value`` as ``coefficient * factors[0] * factors[1] ...``.

    The node computing ``value`` is always walked into; below it only values
    read by that one node are (a value read elsewhere stays a factor). Scalar
    constants go into the coefficient; ``Div`` by a scalar constant, ``Neg``
    and ``Pow`` by 2, 3 or 4 are walked through. Anything else is a factor.
    """
    coefficient = 1.0
    factors: list[ir.Value] = []
    nodes: list[ir.Node] = []

    def visit(v: ir.Value, top: bool) -> None:
        nonlocal coefficient
        number = scalar(v)
        if number is not None:
            coefficient *= number
            return
        step = v.producer() if top or private(v) else None
        if step is None or step.domain not in DEFAULT_DOMAINS or len(nodes) >= MAX_WALK:
            factors.append(v)
            return
        op, inputs = step.op_type, step.inputs
        divisor = scalar(inputs[1]) if op in ("Div", "Pow") else None
        if op == "Mul":
            nodes.append(step)
            visit(inputs[0], False)
            visit(inputs[1], False)
        elif op == "Div" and divisor:
            nodes.append(step)
            coefficient /= divisor
            visit(inputs[0], False)
        elif op == "Neg":
            nodes.append(step)
            coefficient = -coefficient
            visit(inputs[0], False)
        elif op == "Pow" and divisor in (2.0, 3.0, 4.0) and scalar(inputs[0]) is None:
            nodes.append(step)
            factors.extend([inputs[0]] * int(divisor))
        else:
            factors.append(v)

    visit(value, True)
    return Product(coefficient, factors, nodes)


def polynomial(value: ir.Value, x: ir.Value) -> tuple[dict[int, float], list[ir.Node]] | None:
    """``({power: coefficient}, nodes)`` when ``value`` is a sum of terms ``k * x^n``.

    One level of sum is read, scaled or not (``k * (a + b)``, ``a + b``); each
    term is a :func:`product` whose factors are all ``x`` (a scalar is power 0).
    """
    outer = product(value)
    nodes = list(outer.nodes)
    if len(outer.factors) == 1 and outer.factors[0] is not x:
        inner = outer.factors[0]
        add = inner.producer()
        if add is None or add.op_type != "Add" or add.domain not in DEFAULT_DOMAINS:
            return None
        if inner is not value and not private(inner):
            return None
        nodes.append(add)
        terms = [_term(v, x) for v in add.inputs]
    else:
        terms = [Product(1.0, outer.factors, [])]
    powers: dict[int, float] = {}
    for term in terms:
        if any(f is not x for f in term.factors):
            return None
        n = len(term.factors)
        powers[n] = powers.get(n, 0.0) + outer.coefficient * term.coefficient
        nodes.extend(term.nodes)
    return powers, nodes


def _term(value: ir.Value, x: ir.Value) -> Product:
    number = scalar(value)
    if number is not None:
        return Product(number, [], [])
    return Product(1.0, [x], []) if value is x else product(value)


def _erf(a: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(a).astype(np.float64)


_NUMPY: dict[str, Callable[..., np.ndarray]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
    "Pow": np.power,
    "Min": np.minimum,
    "Max": np.maximum,
    "Neg": np.negative,
    "Abs": np.abs,
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Reciprocal": np.reciprocal,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Erf": _erf,
    "Tanh": np.tanh,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
    "Equal": np.equal,
    "Not": np.logical_not,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Where": np.where,
}


def evaluate(
    value: ir.Value, leaf: ir.Value, points: np.ndarray, limit: int = 48
) -> tuple[np.ndarray, list[ir.Node]] | None:
    """``value`` computed in float64 with ``leaf = points``, and the nodes computing it.

    ``None`` unless ``value`` depends on nothing but ``leaf`` and scalar
    constants, through at most ``limit`` elementwise ONNX nodes of the kinds
    in ``_NUMPY``.
    """
    known: dict[int, np.ndarray] = {id(leaf): np.asarray(points, np.float64)}
    nodes: list[ir.Node] = []

    def visit(v: ir.Value) -> np.ndarray | None:
        if id(v) in known:
            return known[id(v)]
        array = constant(v)
        if array is not None:
            if array.size != 1 or array.dtype.kind not in "fiub":
                return None
            return array.reshape(()).astype(np.float64 if array.dtype.kind != "b" else bool)
        step = v.producer()
        if step is None or step.domain not in DEFAULT_DOMAINS or len(nodes) >= limit:
            return None
        compute = _NUMPY.get(step.op_type)
        if compute is None or len(step.outputs) != 1:
            return None
        nodes.append(step)
        arguments = [visit(i) for i in step.inputs]
        if any(a is None for a in arguments):
            return None
        with np.errstate(all="ignore"):
            known[id(v)] = np.asarray(compute(*arguments))
        return known[id(v)]

    result = visit(value)
    return None if result is None else (result, nodes)
