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

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from jax2onnx.values.errors import LoweringError

if TYPE_CHECKING:  # onnx_ir is imported when a conversion starts, not with jax2onnx
    from jax2onnx.values.ir import ir


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
        ceiling = _ceiling(term, lookup)
        if ceiling is not None:  # k * floordiv(-n, b) is -k * ceil(n / b)
            total = _plus_times(total, -coeff, ceiling)
            continue
        value: DimValue | int = 1
        for factor, power in term._factors:
            f = _factor(factor, lookup)
            for _ in range(power):
                value = f if isinstance(value, int) and value == 1 else value * f
        total = _plus_times(total, coeff, value)
    return total


def _ceiling(term: Any, lookup: Callable[[str], DimValue]) -> DimValue | None:
    """``ceil(n / b)`` for a term ``floordiv(-n, b)`` with ``n >= 0`` and a constant ``b > 0``.

    The ceiling of a size (``-(-T // 2)``, the output size of a SAME stride-2
    window) is then one ``Add`` and one truncating ``Div``, not the general floor.
    """
    if len(term._factors) != 1 or term._factors[0][1] != 1:
        return None
    factor = term._factors[0][0]
    if factor.var is not None or factor.operation != "floordiv":
        return None
    a_expr, b_expr = factor.operands
    b = evaluate(b_expr, lookup)  # a constant may still be a DimExpr
    if not isinstance(b, int) or b <= 0 or not _nonnegative(-a_expr):
        return None
    n = evaluate(-a_expr + (b - 1), lookup)  # JAX simplifies (T - 1) + 1 to T
    if isinstance(n, int):
        return None
    return n if b == 1 else n.truncdiv(b)


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


class DimScope:
    """The dimensions part of a graph scope (``lowering.GraphScope`` inherits it).

    Each dimension variable has a source, the value and axis whose size it
    is (a graph input's, or a rule output's for a data-dependent size), kept
    in the scope that holds the value; `dim` computes an expression from
    the sources as an int64 ``[1]`` value, once per scope. The graph scope
    supplies ``parent``, ``root``, ``add_node`` and ``const``.
    """

    parent: Any

    def init_dims(self) -> None:
        self.symbol_sources: dict[str, tuple[Any, int]] = {}
        self._input_axes: list[tuple[Any, int, Any]] = []  # every symbolic input axis
        self._solved: dict[str, Any] | None = None  # variables only inputs' expressions hold
        self._dims: dict[str, Any] = {}

    def record_input_axes(self, value: Any, shape: Sequence[Any]) -> None:
        """A graph input's symbolic axes: sources of their variables, and for `_solution`."""
        self.bind_symbols(value, shape)
        self._input_axes += [(value, axis, d) for axis, d in enumerate(shape) if is_symbolic(d)]
        self._solved = None

    def bind_symbols(self, value: ir.Value, shape: Sequence[Any]) -> None:
        """Make ``value`` the source of each dimension variable of ``shape`` not yet known.

        A graph input carries its dimensions; so does the output of a rule whose
        size depends on the data (a new dimension such as ``nonzero_0``, which no
        input has). The source is kept in this scope: a value of a Loop/If body
        is not visible from the graph around it.
        """
        for axis, d in enumerate(shape):
            if is_symbolic(d):
                for var in _plain_var(d):
                    if self._find_symbol(var) is None:
                        self.symbol_sources[var] = (value, axis)

    def dim(self, d: Any) -> ir.Value:
        """A dimension as an int64 tensor of shape ``[1]``.

        Computed once, in the innermost graph holding a source of one of its
        variables (the root graph for the inputs' dimensions), and cached there.
        """
        if not is_symbolic(d):
            return self.const(np.array([int(d)], dtype=np.int64))
        axis_scope = self._axis_scope(d)
        if axis_scope is not None:  # the size of an input axis (b*b, 2*b): read it
            key = str(d)
            if key not in axis_scope._dims:
                value, axis = next((v, a) for v, a, e in axis_scope._input_axes if e == d)
                shape = axis_scope.add_node("Shape", [value], {"start": axis, "end": axis + 1})
                axis_scope._dims[key] = shape[0]
            return axis_scope._dims[key]
        scopes = {}
        owner = self.root
        for var in sorted(d._get_vars()):
            found = self._symbol_scope(var) or self._solving_scope(var)
            if found is None:
                raise LoweringError(
                    f"symbolic dimension {var!r} (in {d}) does not appear in any input shape "
                    "nor in an earlier output of this graph, and the input shapes do not "
                    "determine it; give some input an axis whose size is "
                    f"{var!r} or an expression JAX can solve for it (2*{var}, {var} + 1)"
                )
            scopes[var] = found
            if _depth(found) > _depth(owner):
                owner = found
        key = str(d)
        cached = owner._dims.get(key)
        if cached is not None:
            return cached
        env = {}
        for var, found in scopes.items():
            if var in found.symbol_sources:
                value, axis = found.symbol_sources[var]
                shape = owner.add_node("Shape", [value], {"start": axis, "end": axis + 1})[0]
            else:  # solved from input sizes that are expressions (2*b, b + 1)
                shape = found.dim(found._solution()[var])
            env[var] = DimValue(owner, shape)
        result = evaluate(d, env.__getitem__)
        value = result.value if isinstance(result, DimValue) else self.dim(result)
        owner._dims[key] = value
        return value

    def _solution(self) -> dict[str, Any]:
        """Dimension variables this scope's inputs have only inside expressions, solved.

        JAX solves them from the sizes of the input axes (``b`` from an axis of
        size ``2*b``); each solution is an expression of those sizes, whose
        names become sources of this scope like the inputs' own variables.
        """
        if self._solved is None:
            self._solved = {}
            if any(not _plain_var(d) for _, _, d in self._input_axes):
                solution, axes = solve_dims([d for _, _, d in self._input_axes])
                for name, index in axes:
                    value, axis, _ = self._input_axes[index]
                    self.symbol_sources.setdefault(name, (value, axis))
                self._solved = {v: e for v, e in solution.items() if v not in self.symbol_sources}
        return self._solved

    def _nearest(self, holds: Callable[[DimScope], bool]) -> DimScope | None:
        """The nearest scope (this one, then the enclosing ones) for which ``holds`` is true."""
        scope: DimScope | None = self
        while scope is not None and not holds(scope):
            scope = scope.parent
        return scope

    def _axis_scope(self, d: Any) -> DimScope | None:
        """The nearest scope with an input axis of size ``d`` exactly (an expression)."""
        if _plain_var(d):
            return None  # a variable's own source is found with the others
        return self._nearest(lambda scope: any(e == d for _, _, e in scope._input_axes))

    def _solving_scope(self, var: str) -> DimScope | None:
        """The nearest scope whose inputs' sizes determine ``var`` (see `_solution`)."""
        return self._nearest(lambda scope: var in scope._solution())

    def _symbol_scope(self, var: str) -> DimScope | None:
        """The nearest scope holding a source of ``var``."""
        return self._nearest(lambda scope: var in scope.symbol_sources)

    def _find_symbol(self, var: str) -> tuple[ir.Value, int] | None:
        scope = self._symbol_scope(var)
        return None if scope is None else scope.symbol_sources[var]

    def shape(self, dims: Sequence[Any]) -> ir.Value:
        """A 1-D int64 shape tensor; constant when every dim is static."""
        if not any(is_symbolic(d) for d in dims):
            return self.const(np.array([int(d) for d in dims], dtype=np.int64))
        pieces: list[ir.Value] = []
        static: list[int] = []
        for d in dims:
            if is_symbolic(d):
                if static:
                    pieces.append(self.const(np.array(static, dtype=np.int64)))
                    static = []
                pieces.append(self.dim(d))
            else:
                static.append(int(d))
        if static:
            pieces.append(self.const(np.array(static, dtype=np.int64)))
        if len(pieces) == 1:
            return pieces[0]
        return self.add_node("Concat", pieces, {"axis": 0})[0]


def _depth(scope: DimScope) -> int:
    depth = 0
    while scope.parent is not None:
        scope, depth = scope.parent, depth + 1
    return depth


def _plain_var(d: Any) -> list[str]:
    var = d._to_var() if hasattr(d, "_to_var") else None
    return [var] if var is not None else []
