"""Symbolic dimensions: computing JAX dimension expressions as ONNX values.

A symbolic dimension (``B``, ``2*B``, ``B*T``, ``T // 2``, ``min(T, 4)``) is
evaluated once per graph from the ``Shape`` of the values its variables come
from. `evaluate` walks JAX's form of the expression (a sum of terms, each a
coefficient times a product of factors, a factor being a variable or a
``floordiv``/``mod``/``max``/``min`` of two expressions); :class:`DimValue`
supplies the arithmetic as ONNX nodes, with Python's (and JAX's) meaning of
``//`` and ``%`` for negative operands too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def is_symbolic(d: Any) -> bool:
    """True for a JAX symbolic dimension expression (not a plain integer).

    A rule reads shapes from ``ctx.avals_in``; a symbolic dimension (``B``,
    ``2*B``) has no value at conversion time, so the rule computes it in the
    graph (``ctx.dim(d)``, ``ctx.shape(dims)``).
    """
    if isinstance(d, (int, np.integer)):
        return False
    return hasattr(d, "_get_vars")


class DimValue:
    """An int64 ``[1]`` ONNX value that supports ``+ - * // %`` with ints and itself."""

    __array_ufunc__ = None  # make NumPy scalars defer to our reflected operators

    def __init__(self, scope: Any, value: Any) -> None:
        self.scope = scope
        self.value = value

    def _lift(self, other: Any) -> Any:
        if isinstance(other, DimValue):
            return other.value
        return self.scope.const(np.array([int(other)], dtype=np.int64))

    def _op(self, op_type: str, a: Any, b: Any, **attrs: Any) -> DimValue:
        (out,) = self.scope.add_node(op_type, [a, b], attrs)
        return DimValue(self.scope, out)

    def __add__(self, other: Any) -> DimValue:
        return self._op("Add", self.value, self._lift(other))

    __radd__ = __add__

    def __sub__(self, other: Any) -> DimValue:
        return self._op("Sub", self.value, self._lift(other))

    def __rsub__(self, other: Any) -> DimValue:
        return self._op("Sub", self._lift(other), self.value)

    def __mul__(self, other: Any) -> DimValue:
        return self._op("Mul", self.value, self._lift(other))

    __rmul__ = __mul__

    def _floordiv(self, a: Any, b: Any) -> DimValue:
        # ONNX Div truncates toward zero; a - a mod b (Mod takes the divisor's sign, as
        # Python's % does) is a multiple of b, so dividing it is exact: floor division
        rest = self._op("Sub", a, self._op("Mod", a, b).value)
        return self._op("Div", rest.value, b)

    def __floordiv__(self, other: Any) -> DimValue:
        return self._floordiv(self.value, self._lift(other))

    def __rfloordiv__(self, other: Any) -> DimValue:
        return self._floordiv(self._lift(other), self.value)

    def truncdiv(self, other: Any) -> DimValue:
        """``self // other`` as one ``Div``: for a non-negative ``self`` and positive ``other``."""
        return self._op("Div", self.value, self._lift(other))

    def maximum(self, other: Any) -> DimValue:
        return self._op("Max", self.value, self._lift(other))

    def minimum(self, other: Any) -> DimValue:
        return self._op("Min", self.value, self._lift(other))

    def __mod__(self, other: Any) -> DimValue:
        return self._op("Mod", self.value, self._lift(other))

    def __rmod__(self, other: Any) -> DimValue:
        return self._op("Mod", self._lift(other), self.value)

    def __divmod__(self, other: Any) -> tuple[DimValue, DimValue]:
        return self // other, self % other

    def __rdivmod__(self, other: Any) -> tuple[DimValue, DimValue]:
        return other // self, other % self


def evaluate(d: Any, lookup: Callable[[str], DimValue]) -> DimValue | int:
    """The dimension expression ``d`` as a `DimValue` (an ``int`` when it is constant).

    Args:
        d: an int or a JAX symbolic dimension expression.
        lookup: gives the value of a dimension variable by name.
    """
    if not is_symbolic(d):
        return int(d)
    total: DimValue | int = 0
    for term, coeff in d._sorted_terms:
        value: DimValue | int = 1
        for factor, power in term._factors:
            f = _factor(factor, lookup)
            for _ in range(power):
                value = f if isinstance(value, int) and value == 1 else value * f
        total = _plus_times(total, coeff, value)
    return total


def _plus_times(total: DimValue | int, k: int, value: DimValue | int) -> DimValue | int:
    """``total + k * value`` without nodes that add zero or multiply by one."""
    if isinstance(value, int):
        return total if k * value == 0 else total + k * value
    if isinstance(total, int) and total == 0:
        return value if k == 1 else value * k
    scaled = value if abs(k) == 1 else value * abs(k)
    return total - scaled if k < 0 else total + scaled


def _factor(factor: Any, lookup: Callable[[str], DimValue]) -> DimValue | int:
    if factor.var is not None:
        return lookup(factor.var)
    a_expr, b_expr = factor.operands
    a, b = evaluate(a_expr, lookup), evaluate(b_expr, lookup)
    operation = factor.operation
    if isinstance(a, int) and isinstance(b, int):
        if operation in ("floordiv", "mod"):
            return divmod(a, b)[0 if operation == "floordiv" else 1]
        return max(a, b) if operation == "max" else min(a, b)
    if operation in ("max", "min"):
        x, y = (a, b) if isinstance(a, DimValue) else (b, a)
        return x.maximum(y) if operation == "max" else x.minimum(y)
    if operation == "floordiv":
        if isinstance(a, DimValue) and isinstance(b, int) and b > 0 and _nonnegative(a_expr):
            return a.truncdiv(b)
        return a // b
    if operation == "mod":
        return a % b
    raise ValueError(f"unknown operation {operation!r} in dimension expression")


def _nonnegative(d: Any) -> bool:
    """Whether JAX can prove ``d >= 0`` (dimension variables are at least 1)."""
    try:
        return bool(d >= 0)
    except Exception:  # InconclusiveDimensionOperation: the sign is not known
        return False


def solve_dims(dims: list[Any]) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """Each dimension variable of ``dims`` as an expression of the sizes ``dims`` take.

    JAX's own solver (what ``jax.export`` uses to find ``b`` from an argument
    of size ``2*b``). Returns the solution, variable -> expression, and the
    names it uses for the sizes with the index in ``dims`` each stands for;
    an empty solution when JAX cannot solve them.
    """
    from jax._src import core, tree_util
    from jax._src.export import shape_poly

    avals = tuple(core.ShapedArray((d,), np.float32) for d in dims)
    try:
        solution, _, sizes = shape_poly.solve_dim_vars(avals, tree_util.tree_structure((avals, {})))
    except ValueError:  # not solvable: the caller names the variable it needed
        return {}, []
    return dict(solution), [(name, index) for name, index, _ in sizes]
