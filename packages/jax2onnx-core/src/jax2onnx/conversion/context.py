"""What a lowering rule sees: :class:`LoweringContext` and its helpers.

``ctx.op.<OpType>(...)`` emits one node; the methods below are the moves
rules make again and again (int64 constants, casts, layout changes,
selections widened where ONNX Runtime has no kernel, falling back to JAX's
own computation), so a rule body stays a few lines of ONNX ops.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jax2onnx.values import kernels
from jax2onnx.values.dims import is_symbolic
from jax2onnx.values.dtypes import exact_cast, onnx_dtype
from jax2onnx.values.errors import LoweringError
from jax2onnx.values.ir import ir
from jax2onnx.values.provenance import UNKNOWN_SOURCE, source_line

if TYPE_CHECKING:
    from jax2onnx.conversion.lowering import GraphScope


class OpBuilder:
    """``ctx.op.<OpType>(*inputs, **attributes)`` emits one ONNX node.

    Inputs may be ``onnx_ir`` values, ``None`` (an omitted optional input),
    or Python/NumPy numbers and arrays, which become constants: a Python
    number takes the dtype of the node's first value input, NumPy data keeps
    its own. Other keywords are the node's ONNX attributes, except
    ``_outputs`` (the number of outputs, default 1), ``_domain`` and
    ``_version`` (for an op of another domain). The call returns the output
    value, or a tuple of them when ``_outputs`` is given. A standard op
    written in a form newer than the target opset (``ReduceSum`` with axes as
    an input, ``Split(num_outputs=)``) is rewritten as it is emitted.
    """

    def __init__(self, scope: GraphScope) -> None:
        self._scope = scope

    def __getattr__(self, op_type: str) -> Callable[..., Any]:
        if op_type.startswith("_"):
            raise AttributeError(op_type)
        return self._emitter(op_type)

    def _emitter(self, op_type: str) -> Callable[..., Any]:
        """The emitting function of ``op_type``, any name (an ONNX function's may start
        with ``_``, which attribute access keeps for Python's own names)."""

        def emit(*inputs: Any, _outputs: int = 1, _domain: str = "", _version=None, **attrs):
            values = self._promote(inputs)
            outs = self._scope.add_node(
                op_type, values, attrs, num_outputs=_outputs, domain=_domain, version=_version
            )
            return outs[0] if _outputs == 1 else tuple(outs)

        emit.__name__ = op_type
        return emit

    def _promote(self, inputs: Sequence[Any]) -> list[ir.Value | None]:
        like = next((v.dtype for v in inputs if isinstance(v, ir.Value) and v.dtype), None)
        out: list[ir.Value | None] = []
        for value in inputs:
            if value is None or isinstance(value, ir.Value):
                out.append(value)
            elif isinstance(value, (np.ndarray, np.generic)):
                out.append(self._scope.const(value))
            elif isinstance(value, (bool, int, float)):
                dtype = like.numpy() if like is not None else None
                out.append(self._scope.const(np.asarray(value, dtype=dtype), dtype))
            else:
                out.append(self._scope.const(np.asarray(value)))
        return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, bool, np.generic, np.ndarray))


class LoweringContext:
    """What a lowering rule sees for one equation: ``ctx`` in ``rule(ctx, *inputs, **params)``.

    Rules never make one; import the type from ``jax2onnx.plugin`` for
    annotations.

    Attributes:
        op (OpBuilder): the node emitter:
            ``ctx.op.<OpType>(*inputs, **attributes)`` emits one node and
            returns its output, e.g. ``ctx.op.Gemm(x, w, b, transB=1)``.
            Python and NumPy numbers and arrays among the inputs become
            constants, ``None`` is an omitted optional input,
            ``_outputs=n`` returns a tuple of ``n`` outputs.
        eqn (jax.core.JaxprEqn | None): the jaxpr equation being lowered
            (``eqn.primitive``, ``eqn.params``); ``None`` in a subgraph
            builder's context.
        inputs (tuple[onnx_ir.Value, ...]): the equation's input values, as
            the rule received them.
    """

    def __init__(self, scope: GraphScope, eqn: Any = None, inputs: Sequence[ir.Value] = ()) -> None:
        self.scope = scope
        self.eqn = eqn
        self.inputs = tuple(inputs)
        self.op = OpBuilder(scope)

    # -- the equation ----------------------------------------------------------
    @property
    def opset(self) -> int:
        """The target opset (13..26)."""
        return self.scope.conversion.opset

    @property
    def normalization_mode(self) -> str:
        """``to_onnx``'s ``normalization_mode``: how normalisation layers export.

        ``"force_decomposed"``: the rule inlines the layer's own computation
        (``ctx.fallback()``); ``"prefer_native"``: the native ONNX op wherever
        the op can express the computation at the target opset; ``"auto"``:
        the rule's own choice, the form its cases show matches JAX.
        """
        return self.scope.conversion.normalization_mode

    @property
    def in_body(self) -> bool:
        """Whether the equation is lowered inside a nested graph (an If branch, a Loop or
        Scan body), where its nodes run once per step of an enclosing loop."""
        return self.scope.parent is not None and not self.scope.is_function

    @property
    def avals_in(self) -> list[Any]:
        """The JAX abstract values (``.shape``, ``.dtype``) of the equation's inputs.

        Dimensions may be symbolic (`is_symbolic`); dtypes are JAX's
        (complex, key), not the stored ones (`stored_aval`).
        """
        return [v.aval for v in self.eqn.invars]

    @property
    def avals_out(self) -> list[Any]:
        """The JAX abstract values of the equation's outputs."""
        return [v.aval for v in self.eqn.outvars]

    @staticmethod
    def stored_aval(aval: Any) -> jax.ShapeDtypeStruct:
        """The shape and dtype the graph stores an array of ``aval`` as (complex: ``[..., 2]``)."""
        from jax2onnx.values.keys import physical

        dtype, shape = physical(aval.dtype, aval.shape)
        return jax.ShapeDtypeStruct(shape, dtype)

    @property
    def source(self) -> str:
        """The user's source line of this equation, ``file:line (function)``."""
        if self.eqn is None:
            return UNKNOWN_SOURCE
        return source_line(self.eqn, self.scope.conversion.source)

    def error(self, message: str) -> LoweringError:
        """An error naming this equation's primitive and the user's source line.

        Returns:
            A `LoweringError` to raise: ``raise ctx.error("axis must be static")``.
        """
        name = self.eqn.primitive.name if self.eqn is not None else "?"
        return LoweringError(f"{name} at {self.source}: {message}")

    # -- constants and shapes ----------------------------------------------------
    def const(self, value: Any, dtype: Any = None) -> ir.Value:
        """A constant: an initializer (a ``Constant`` node inside a function body).

        Small constants are shared by value within the graph. A complex
        array is stored as its real and imaginary parts, a key array as its
        key data.

        Args:
            value: an array, a NumPy or Python number, or a JAX array.
            dtype: the dtype to store it as; by default the value's own
                (float64 becomes float32 unless the conversion is in 64-bit
                mode).

        Returns:
            The constant's value.
        """
        return self.scope.const(value, dtype)

    def i64(self, values: Sequence[int] | int) -> ir.Value:
        """An int64 constant: axes, starts, pads, shapes ..."""
        return self.scope.const(np.asarray(values, dtype=np.int64))

    def dim(self, d: Any) -> ir.Value:
        """A dimension (an int or a symbolic expression) as an int64 ``[1]`` value."""
        try:
            return self.scope.dim(d)
        except Exception as err:
            raise self.error(f"cannot compute dimension {d} as an ONNX value: {err}") from err

    def shape(self, dims: Sequence[Any]) -> ir.Value:
        """A 1-D int64 shape value; a constant when every dimension is static."""
        try:
            return self.scope.shape(dims)
        except Exception as err:
            shown = "(" + ", ".join(str(d) for d in dims) + ")"
            raise self.error(f"cannot compute shape {shown} as an ONNX value: {err}") from err

    def arange(self, d: Any) -> ir.Value:
        """``0, 1, ..., d - 1`` as a 1-D int64 value: a constant for a static ``d``, else a
        ``Range`` to the dimension computed from the graph's inputs (positions, masks)."""
        if not is_symbolic(d):
            return self.i64(np.arange(int(d)))
        stop = self.op.Squeeze(self.dim(d), self.i64([0]))
        return self.op.Range(self.i64(0), stop, self.i64(1))

    def reshape(self, x: ir.Value, sizes: Sequence[Any]) -> ir.Value:
        """``x`` reshaped to ``sizes`` (ints or symbolic dimensions, no -1).

        The target is a constant when every size is static; a size that is 0
        (or symbolic, so possibly 0 at run time) sets ``allowzero=1``, so the
        0 is a size and not ONNX's "copy the input's axis" (below opset 14
        the Reshape is rewritten to the same effect, see ``jax2onnx.conversion.opsets``).
        """
        sizes = list(sizes)
        maybe_zero = any(is_symbolic(d) or int(d) == 0 for d in sizes)
        return self.op.Reshape(x, self.shape(sizes), allowzero=1 if maybe_zero else None)

    # -- common moves --------------------------------------------------------------
    def cast(self, x: ir.Value, dtype: Any) -> ir.Value:
        """``x`` as ``dtype``: no node when it already is, a new constant when it is one."""
        target = onnx_dtype(dtype)
        if x.dtype == target:
            return x
        if x.const_value is not None:
            folded = exact_cast(x.const_value.numpy(), dtype)
            if folded is not None:
                return self.const(folded, folded.dtype)
        return self.op.Cast(x, to=target)

    def transpose(self, x: ir.Value, perm: Sequence[int]) -> ir.Value:
        """``x`` with axes permuted: no node for the identity, a constant for a constant."""
        perm = [int(p) for p in perm]
        if perm == list(range(len(perm))):
            return x
        if x.const_value is not None:
            array = x.const_value.numpy()
            return self.const(np.transpose(array, perm), array.dtype)
        return self.op.Transpose(x, perm=perm)

    def where(self, cond: ir.Value, a: Any, b: Any, dtype: Any = None) -> ir.Value:
        """``Where(cond, a, b)``, computed in a wider dtype where ONNX Runtime has no kernel.

        Args:
            cond: the boolean condition.
            a: the value where ``cond`` is true (a value or a number).
            b: the value where ``cond`` is false.
            dtype: the operands' dtype; by default that of the first ONNX
                value among ``a`` and ``b`` (give it when both are numbers).

        Returns:
            The selected value, in ``dtype``.
        """
        dtype = self._operand_dtype("where", dtype, a, b)
        wide = kernels.kernel_dtype("Where", dtype)
        if wide == dtype:
            return self.op.Where(cond, a, b)
        a, b = (self._as_dtype(v, dtype, wide) for v in (a, b))
        return self.cast(self.op.Where(cond, a, b), dtype)

    def maximum(self, x: Any, y: Any, dtype: Any = None) -> ir.Value:
        """Elementwise maximum as ``lax.max`` computes it: NaN wins; ``Or`` for bool."""
        return self._extremum("Max", "Or", x, y, dtype)

    def minimum(self, x: Any, y: Any, dtype: Any = None) -> ir.Value:
        """Elementwise minimum as ``lax.min`` computes it: NaN wins; ``And`` for bool."""
        return self._extremum("Min", "And", x, y, dtype)

    def has_kernel(self, op_type: str, dtype: Any) -> bool:
        """Whether ONNX Runtime runs ``op_type`` on ``dtype`` (see `kernel_dtypes`)."""
        return kernels.has_kernel(op_type, dtype)

    def kernel_dtype(self, op_type: str, dtype: Any) -> np.dtype:
        """The dtype to compute ``op_type`` in for ``dtype`` operands (exact stand-ins)."""
        return kernels.kernel_dtype(op_type, dtype)

    def _extremum(self, op_type: str, bool_op: str, x: Any, y: Any, dtype: Any) -> ir.Value:
        dtype = self._operand_dtype(op_type.lower(), dtype, x, y)
        if dtype == np.bool_:
            return getattr(self.op, bool_op)(x, y)
        wide = kernels.kernel_dtype(op_type, dtype)
        if wide == dtype:
            return getattr(self.op, op_type)(x, y)
        out = getattr(self.op, op_type)(
            self._as_dtype(x, dtype, wide), self._as_dtype(y, dtype, wide)
        )
        return self.cast(out, dtype)

    def _operand_dtype(self, what: str, dtype: Any, *values: Any) -> np.dtype:
        if dtype is not None:
            return np.dtype(dtype)
        for value in values:
            if isinstance(value, ir.Value) and value.dtype is not None:
                return np.dtype(value.dtype.numpy())
        raise self.error(f"ctx.{what}: pass dtype= when no operand is an ONNX value")

    def _as_dtype(self, v: Any, dtype: np.dtype, wide: np.dtype) -> Any:
        if _is_number(v):
            return np.asarray(v, dtype).astype(wide)
        return self.cast(v, wide)

    # -- nested computations -----------------------------------------------------------
    def inline(self, closed: Any, inputs: Sequence[ir.Value]) -> list[ir.Value]:
        """Lower a sub-jaxpr into the current graph and return its outputs.

        Args:
            closed: a ``ClosedJaxpr`` (from an equation's params, or
                `LoweringContext.trace`).
            inputs: one value per input of the jaxpr.

        Returns:
            One value per output of the jaxpr.
        """
        return self.scope.lower_jaxpr(closed, inputs)

    def trace(self, fn: Callable[..., Any], *specs: Any, **params: Any) -> Any:
        """``fn(*specs, **params)`` traced to a ClosedJaxpr, checked for missing lowerings.

        Use this (never ``jax.make_jaxpr``) to build the jaxpr of a subgraph
        or decomposition: a primitive no plugin lowers is reported with the
        user's source line.

        Args:
            fn: the JAX function to trace.
            *specs: avals or ``jax.ShapeDtypeStruct``s of its positional
                arguments.
            **params: keyword arguments bound as constants.

        Returns:
            The ``ClosedJaxpr``, for `LoweringContext.inline` or a subgraph.
        """
        structs = [jax.ShapeDtypeStruct(s.shape, s.dtype) for s in specs]
        target = functools.partial(fn, **params) if params else fn
        return self.scope.conversion.retrace(target, structs)

    def decompose(
        self, fn: Callable[..., Any], *inputs: ir.Value, stored: bool = False, **params: Any
    ) -> Any:
        """Inline JAX's own computation ``fn(*inputs, **params)`` into this graph.

        ``fn`` is traced on the avals of this equation's inputs and the result is
        lowered by the loaded rules: the fallback for dtypes or forms a rule's
        single ONNX op does not cover, with exactly JAX's numbers.

        ``stored=True`` traces ``fn`` on the inputs as the graph stores them
        (`stored_type`: a complex input is a float array
        with a trailing axis of 2, real and imaginary parts); ``fn`` returns its
        results in that form. This is how a rule for complex values
        (``values="complex"``) writes complex arithmetic in real JAX code.

        Args:
            fn: the JAX function, ``fn(*arrays, **params)``.
            *inputs: the ONNX values to apply it to; their avals are those of
                this equation's first ``len(inputs)`` inputs.
            stored: trace on the stored form of the inputs.
            **params: keyword arguments of ``fn`` (static values).

        Returns:
            The output value, or a list of them when ``fn`` has several.

        Example:
            ```python
            @family.lowering(unvmap_any_p)
            def unvmap_any(ctx, x):
                return ctx.decompose(jnp.any, x)  # JAX's reduction, lowered by the lax rules

            @family.lowering(conj_p, values="complex")
            def conj(ctx, z):  # z is float [..., 2]: negate the imaginary parts
                return ctx.decompose(lambda p: p * jnp.array([1, -1], p.dtype), z, stored=True)
            ```
        """
        avals = self.avals_in[: len(inputs)]
        if stored:
            avals = [self.stored_aval(a) for a in avals]
        closed = self.trace(fn, *avals, **params)
        outs = self.inline(closed, list(inputs))
        return outs[0] if len(outs) == 1 else outs

    def fallback(self, *inputs: ir.Value, **params: Any) -> Any:
        """This equation computed as JAX computes it: its fallback, inlined.

        The fallback is the rule's ``fallback=`` (or the macro primitive's
        ``impl``), called with this equation's inputs and parameters; pass
        ``inputs`` (all of them) or keyword ``params`` to replace some.

        Returns:
            The output value, or a list of them for several outputs.

        Raises:
            LoweringError: the primitive has no fallback.
        """
        name = self.eqn.primitive.name
        fn = self.scope.conversion.registry.fallback(name)
        if fn is None:
            raise self.error(
                "ctx.fallback(): the primitive has no fallback; register the rule with "
                "fallback=<JAX function> or make it with rules.primitive(impl=...)"
            )
        merged = {**self.eqn.params, **params}
        return self.decompose(fn, *(inputs or self.inputs), **merged)

    def subgraph(self, name: str) -> SubgraphBuilder:
        """Start a nested graph (an If/Loop/Scan body) that sees this scope's values.

        Args:
            name: the graph's name (its inputs are named ``<name>_in...``).

        Returns:
            A `SubgraphBuilder`.
        """
        return SubgraphBuilder(self.scope.child(), name)


class SubgraphBuilder:
    """Builds one nested ONNX graph: add inputs, lower into it, finish with outputs.

    Made by `LoweringContext.subgraph`. Values of the enclosing graphs can be
    used in the body directly (ONNX subgraphs see their outer scope).

    Attributes:
        name (str): the graph's name.
        ctx (LoweringContext): a context of the body (``eqn`` is ``None``), for its
            helpers (``ctx.const``, ``ctx.cast`` ...).
        op (OpBuilder): the body's node emitter, ``ctx.op``.

    Example:
        ```python
        then_body = ctx.subgraph("then")  # an If branch computing branch_jaxpr
        then_graph = then_body.finish(then_body.inline(branch_jaxpr, operands), ctx.avals_out)
        out = ctx.op.If(pred, then_branch=then_graph, else_branch=else_graph)
        ```
    """

    def __init__(self, scope: GraphScope, name: str) -> None:
        self.scope = scope
        self.name = name
        self.ctx = LoweringContext(scope)
        self.op = self.ctx.op

    def add_input(self, dtype: Any, shape: Sequence[Any] = ()) -> ir.Value:
        """A new input of the graph (a Loop's iteration count, a carry ...), in input order.

        Args:
            dtype: its NumPy or JAX dtype; a complex or key dtype is stored
                as `stored_type` says.
            shape: its dimensions (ints or symbolic).

        Returns:
            The input's value.
        """
        return self.scope.add_input(self.scope.conversion.fresh(f"{self.name}_in"), dtype, shape)

    def inline(self, closed: Any, inputs: Sequence[ir.Value]) -> list[ir.Value]:
        """Lower a ``ClosedJaxpr`` into the body; as `LoweringContext.inline`."""
        return self.scope.lower_jaxpr(closed, inputs)

    def finish(self, outputs: Sequence[ir.Value], avals: Sequence[Any] | None = None) -> ir.Graph:
        """The finished graph; every output gets its own value (Identity where shared).

        Args:
            outputs: the graph's output values, in order.
            avals: JAX avals, one per output: when given, each output's
                dtype and shape are stamped from them.

        Returns:
            The ``onnx_ir.Graph``, for a graph attribute (``then_branch``,
                ``body``).
        """
        outs = self.scope.finish_outputs(outputs, avals)
        return ir.Graph(
            self.scope.inputs,
            outs,
            nodes=self.scope.nodes,
            initializers=self.scope.initializers,
            name=self.name,
        )
