"""Symbolic dimensions: computing JAX dimension expressions as ONNX values.

A symbolic dimension (``B``, ``2*B``, ``B*T``, ``T // 2``) is evaluated once
per root graph from the ``Shape`` of the input it first appears in. JAX's own
expression evaluator walks the expression; :class:`DimValue` supplies the
arithmetic as ONNX nodes.
"""

from __future__ import annotations

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

    def __floordiv__(self, other: Any) -> DimValue:
        # dimensions are non-negative, so truncating Div equals floor division
        return self._op("Div", self.value, self._lift(other))

    def __rfloordiv__(self, other: Any) -> DimValue:
        return self._op("Div", self._lift(other), self.value)

    def __mod__(self, other: Any) -> DimValue:
        return self._op("Mod", self.value, self._lift(other))

    def __rmod__(self, other: Any) -> DimValue:
        return self._op("Mod", self._lift(other), self.value)

    def __divmod__(self, other: Any) -> tuple[DimValue, DimValue]:
        return self // other, self % other

    def __rdivmod__(self, other: Any) -> tuple[DimValue, DimValue]:
        return other // self, other % self
