"""Step 4: walk a jaxpr and emit ONNX nodes through the lowering context.

:class:`GraphScope` owns one ONNX graph being built (the main graph, an
``If``/``Loop``/``Scan`` body); :class:`LoweringContext` is what a rule sees
for one equation. The core binds inputs to ``onnx_ir`` values, calls the rule
as ``rule(ctx, *inputs, **params)``, then stamps each output's dtype and shape
from the jaxpr's avals: a rule only says which ONNX ops compute the result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax._src import core as jax_core

from jax2onnx.conversion import folding, opsets
from jax2onnx.conversion.context import LoweringContext
from jax2onnx.registration.registry import Registry, inline_fallback
from jax2onnx.values.dims import DimScope, is_symbolic
from jax2onnx.values.dtypes import onnx_dtype, result_dtype
from jax2onnx.values.errors import Jax2OnnxError, LoweringError
from jax2onnx.values.ir import ir
from jax2onnx.values.keys import (
    complex_parts,
    is_complex,
    is_extended,
    on_key_data,
    physical,
    touches_complex,
)
from jax2onnx.values.provenance import (
    UNKNOWN_SOURCE,
    Frame,
    Origin,
    Record,
    Recorder,
    holds,
    scopes,
    source_line,
)

_SMALL_CONST = 1024  # constants up to this many elements are shared by value


def ir_shape(shape: Sequence[Any]) -> ir.Shape:
    return ir.Shape([d if isinstance(d, int) else ir.SymbolicDim(str(d)) for d in shape])


class Conversion:
    """State shared by every graph of one conversion: the rules, the opset, what was emitted."""

    def __init__(
        self,
        registry: Registry,
        opset: int,
        plugin_set: Any = None,
        normalization_mode: str = "auto",
        *,
        metadata: bool = True,
        recorder: Recorder | None = None,
    ) -> None:
        self.registry = registry
        self.metadata = metadata  # source metadata and readable names on nodes
        self.recorder = recorder
        self.frames: list[Frame] = []  # the equations being lowered, innermost last
        self.inlined: set[str] = set()  # primitives converted through their implementation
        self.inlining: set[str] = set()  # ... whose implementation is being lowered now
        self.opset = opset
        self.normalization_mode = normalization_mode
        self.plugin_set = plugin_set
        self.counter = 0
        self.emitted: dict[str, set[str]] = {}  # primitive name -> ONNX op types its rule emitted
        self.current: str | None = None
        self.source = UNKNOWN_SOURCE  # the user's line of the equation being lowered
        # ONNX functions made by @onnx_function calls, by body structure
        self.functions: dict[Any, ir.Function] = {}

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}_{self.counter}"

    def retrace(
        self, fn: Callable[..., Any], specs: Sequence[Any], implementation: str | None = None
    ) -> Any:
        """``fn`` traced on ``specs`` while lowering, checked for missing lowerings.

        ``implementation`` names the primitive whose own JAX implementation ``fn``
        is: traced with the plugins' interceptions active, as in the first trace,
        and named in the report of a primitive it binds that nothing lowers.
        """
        from jax2onnx.conversion.tracing import retrace

        if implementation is None:
            return retrace(fn, specs, self.registry, self.plugin_set, self.source)
        return retrace(
            fn,
            specs,
            self.registry,
            self.plugin_set,
            self.source,
            interceptions=self.registry.interceptions,
            within=f"the JAX implementation of {implementation!r} (no plugin lowers it)",
        )


class GraphScope(DimScope):
    """One ONNX graph under construction.

    Constants and symbolic dimensions live in the root scope (the main graph,
    or a function body), so nested bodies refer to them through ONNX's outer
    scope instead of copying them.
    """

    def __init__(
        self, conversion: Conversion, parent: GraphScope | None = None, *, is_function=False
    ) -> None:
        self.conversion = conversion
        self.parent = parent
        self.is_function = is_function
        self.label = ""  # an ONNX function's name: the module path of its body's equations
        self.nodes: list[ir.Node] = []
        self.initializers: list[ir.Value] = []
        self.inputs: list[ir.Value] = []
        self._consts: dict[Any, ir.Value] = {}
        self.init_dims()

    def child(self) -> GraphScope:
        """A nested graph's scope (an If/Loop/Scan body) that sees this scope's values."""
        return GraphScope(self.conversion, self)

    @property
    def root(self) -> GraphScope:
        scope = self
        while scope.parent is not None and not scope.is_function:
            scope = scope.parent
        return scope

    # -- nodes -------------------------------------------------------------
    def add_node(
        self,
        op_type: str,
        inputs: Sequence[ir.Value | None],
        attributes: dict[str, Any],
        *,
        num_outputs: int = 1,
        domain: str = "",
        version: int | None = None,
    ) -> Sequence[ir.Value]:
        attributes = {k: _plain(v) for k, v in attributes.items()}
        if domain in ("", "ai.onnx") and version is None:
            present = {k: v for k, v in attributes.items() if v is not None}
            adapted = opsets.adapt(self, op_type, list(inputs), present, num_outputs)
            if adapted is not None:
                return adapted
        attrs = ir.convenience.convert_attributes(
            {k: v for k, v in attributes.items() if v is not None}
        )
        conversion = self.conversion
        name = conversion.fresh(op_type)
        frame = conversion.frames[-1] if conversion.frames else None
        origin = None if frame is None else frame.origin
        if origin is not None and conversion.metadata and origin.module:
            name = f"{origin.module}/{name}"
        node = ir.Node(
            domain,
            op_type,
            inputs,
            attributes=attrs,
            num_outputs=num_outputs,
            version=version,
            name=name,
            metadata_props=origin.props() if origin is not None and conversion.metadata else None,
        )
        if frame is not None and frame.record is not None:
            frame.record.nodes.append(node)
        dtype = result_dtype(op_type, domain, inputs, attributes)
        if conversion.current is not None:
            conversion.emitted.setdefault(conversion.current, set()).add(op_type)
        for out in node.outputs:
            out.name = self.conversion.fresh(op_type.lower())
        if dtype is not None and num_outputs >= 1:
            node.outputs[0].dtype = dtype
        if op_type == "Dropout" and num_outputs == 2 and domain in ("", "ai.onnx"):
            node.outputs[1].dtype = ir.DataType.BOOL  # the mask
        self.nodes.append(node)
        return node.outputs

    # -- constants ---------------------------------------------------------
    def const(self, value: Any, dtype: Any = None) -> ir.Value:
        """A constant value: an initializer of the root graph, a Constant in a function."""
        root = self.root
        if isinstance(value, ir.Value):
            return value
        if is_extended(getattr(value, "dtype", None)):
            value = jax.random.key_data(value)  # a key array constant: its uint32 key data
        array = np.asarray(value, dtype=dtype)
        if dtype is None and not jax.config.jax_enable_x64:
            narrow = {np.float64: np.float32, np.complex128: np.complex64}.get(array.dtype.type)
            array = array if narrow is None else array.astype(narrow)
        if is_complex(array.dtype):
            array = complex_parts(array)  # stored as real and imaginary parts
        if not array.flags.c_contiguous:  # a strided view (a slice of a table): stored as written
            array = np.ascontiguousarray(array)
        key = None
        if array.size <= _SMALL_CONST:
            key = (array.dtype.str, array.shape, array.tobytes())
        else:
            key = ("id", id(value), array.dtype.str)
        cached = root._consts.get(key)
        if cached is not None:
            return cached
        tensor = ir.Tensor(array, name=root.conversion.fresh("const"))
        if root.is_function:
            (result,) = root.add_node("Constant", [], {"value": tensor})
            result.dtype, result.shape = tensor.dtype, ir.Shape(array.shape)
        else:
            result = ir.Value(
                name=tensor.name,
                type=ir.TensorType(tensor.dtype),
                shape=ir.Shape(array.shape),
                const_value=tensor,
            )
            root.initializers.append(result)
        if key[0] == "id":
            root._consts[key] = result
            root._consts[("keep", id(value))] = value  # keep id() valid while cached
        else:
            root._consts[key] = result
        return result

    # -- dimensions --------------------------------------------------------
    def add_input(self, name: str, dtype: Any, shape: Sequence[Any]) -> ir.Value:
        dtype, shape = physical(dtype, shape)  # a key array input carries its key data
        value = ir.Value(name=name, type=ir.TensorType(onnx_dtype(dtype)), shape=ir_shape(shape))
        self.inputs.append(value)
        self.bind_symbols(value, shape)
        self.record_input_axes(value, shape)
        return value

    # -- lowering ----------------------------------------------------------
    def lower_jaxpr(
        self, closed: Any, inputs: Sequence[ir.Value], *, consts: Sequence[ir.Value] | None = None
    ) -> list[ir.Value]:
        """Emit the equations of ``closed`` (a ClosedJaxpr or Jaxpr) with ``inputs`` bound."""
        jaxpr = getattr(closed, "jaxpr", closed)
        const_vals = getattr(closed, "consts", ())
        env: dict[Any, ir.Value] = {}
        if len(inputs) != len(jaxpr.invars):
            raise LoweringError(f"jaxpr takes {len(jaxpr.invars)} inputs, {len(inputs)} given")
        if consts is None:
            consts = [self.const(c) for c in const_vals]
        for var, value in zip(jaxpr.constvars, consts):
            env[var] = value
        for var, value in zip(jaxpr.invars, inputs):
            env[var] = value
        conversion = self.conversion
        frames = conversion.frames
        parent = frames[-1] if frames else None
        user = parent is None or (parent.user and holds(parent.eqn, jaxpr))
        base: tuple[int, ...] = ()
        prefix: tuple[str, ...] = () if parent is None else parent.scopes
        if user and parent is not None:
            base = (*parent.path, parent.calls)
            parent.calls += 1
            if parent.record is not None:
                parent.record.inlined.append(jaxpr)
        if self.label and self.root is self:
            prefix = (*prefix, self.label)
        main = self.parent is None and not self.is_function
        for i, eqn in enumerate(jaxpr.eqns):
            if user:
                frame = self._user_frame(eqn, (*base, i), prefix, main)
            else:  # an equation a rule traced: its nodes are the enclosing equation's
                assert parent is not None
                frame = Frame(eqn, False, parent.origin, parent.path, prefix, parent.record)
            frames.append(frame)
            try:
                self._lower_eqn(eqn, env)
            finally:
                frames.pop()
            if user and frame.record is not None:
                frame.record.outputs = [env.get(v) for v in eqn.outvars]
        return [self._read(env, v) for v in jaxpr.outvars]

    def _user_frame(
        self, eqn: Any, path: tuple[int, ...], prefix: tuple[str, ...], main: bool
    ) -> Frame:
        conversion = self.conversion
        names = (*prefix, *scopes(eqn))
        origin = Origin(eqn.primitive.name, source_line(eqn, conversion.source), "/".join(names))
        record = None
        recorder = conversion.recorder
        if recorder is not None and main:
            record = recorder.records[path] = Record(path, eqn, origin)
        return Frame(eqn, True, origin, path, names, record)

    def _read(self, env: dict[Any, ir.Value], var: Any) -> ir.Value:
        if isinstance(var, jax_core.Literal):
            return self.const(np.asarray(var.val, dtype=var.aval.dtype))
        return env[var]

    def _lower_eqn(self, eqn: Any, env: dict[Any, ir.Value]) -> None:
        name = eqn.primitive.name
        conversion = self.conversion
        if folding.candidate(eqn) and self._fold(eqn, env):
            return
        if self._empty(eqn, env):
            return
        on_complex = touches_complex(eqn)
        lowering = conversion.registry.lookup(name, conversion.opset, complex=on_complex)
        if lowering is None:
            lowering = conversion.registry.implementation(eqn.primitive)
        if lowering is None:
            where = source_line(eqn, conversion.source)
            if on_complex and not conversion.registry.lowerings(name, complex=True):
                raise LoweringError(_no_complex_lowering(conversion.registry, eqn, where))
            raise LoweringError(
                _no_lowering_at_opset(
                    conversion.registry, name, conversion.opset, where, complex=on_complex
                )
            )
        inputs = [self._read(env, v) for v in eqn.invars]
        key_data = on_key_data(eqn)
        if key_data is not None:  # a layout op on key arrays: the same op on their key data
            closed = conversion.retrace(*key_data)
            for var, value in zip(eqn.outvars, self.lower_jaxpr(closed, inputs)):
                if not isinstance(var, jax_core.DropVar):
                    env[var] = value
            return
        ctx = LoweringContext(self, eqn, inputs)
        rule = lowering.fn
        if (
            lowering.native_dtypes is not None
            and not on_complex
            and not _native(eqn, lowering.native_dtypes)
        ):
            rule = inline_fallback
        outer, conversion.current = conversion.current, name
        outer_source = conversion.source
        frame = conversion.frames[-1] if conversion.frames else None
        if frame is not None and frame.user and frame.eqn is eqn and frame.origin is not None:
            conversion.source = frame.origin.source
        else:
            conversion.source = source_line(eqn, outer_source)
        try:
            result = rule(ctx, *inputs, **eqn.params)
        except Jax2OnnxError:
            raise
        except Exception as err:
            raise LoweringError(
                f"lowering of primitive {name!r} ({lowering.where}, plugin {lowering.plugin!r}) "
                f"failed for inputs {_avals(eqn.invars)} at {conversion.source}: "
                f"{type(err).__name__}: {err}"
            ) from err
        finally:
            conversion.current = outer
            conversion.source = outer_source
        outs = _as_list(result, len(eqn.outvars), name, lowering)
        for var, value in zip(eqn.outvars, outs):
            if isinstance(var, jax_core.DropVar):
                continue
            stamp(value, var.aval, name, lowering)
            self.bind_symbols(value, var.aval.shape)
            env[var] = value

    def _fold(self, eqn: Any, env: dict[Any, ir.Value]) -> bool:
        """A small equation on constants computed now (:mod:`jax2onnx.conversion.folding`)."""
        arrays = []
        for var in eqn.invars:
            value = self._read(env, var)
            if value.const_value is None or value.is_graph_input():
                return False
            arrays.append(value.const_value.numpy())
        outs = folding.fold(eqn, arrays)
        if outs is None:
            return False
        for var, out in zip(eqn.outvars, outs):
            if not isinstance(var, jax_core.DropVar):
                env[var] = self.const(out, dtype=out.dtype)
        return True

    def _empty(self, eqn: Any, env: dict[Any, ir.Value]) -> bool:
        """An equation whose every result has a size-0 axis (and no effects): its results
        are empty arrays whatever the inputs, written as such. Lowerings never meet
        these edges (a Conv whose kernel is larger than the input, a Reshape to 0 ...)."""
        if eqn.effects or not eqn.outvars:
            return False
        avals = [v.aval for v in eqn.outvars]
        if not all(hasattr(a, "shape") and _has_zero(a.shape) for a in avals):
            return False
        values = {}
        for var, aval in zip(eqn.outvars, avals):
            if isinstance(var, jax_core.DropVar):
                continue
            stored = LoweringContext.stored_aval(aval)
            dtype, shape = np.dtype(stored.dtype), list(stored.shape)
            if any(is_symbolic(d) for d in shape):
                try:
                    sizes = self.shape(shape)
                except LoweringError:  # a size only the lowering computes (jnp.compress's)
                    return False
                value = self.add_node("Expand", [self.const(np.zeros((), dtype)), sizes], {})[0]
                stamp(value, aval)
            else:
                value = self.const(np.zeros(shape, dtype))
            values[var] = value
        env.update(values)
        return True

    def finish_outputs(
        self,
        outputs: Sequence[ir.Value],
        avals: Sequence[Any] | None = None,
        names: Sequence[str] | None = None,
    ) -> list[ir.Value]:
        """Graph outputs must be distinct, node-produced values of this graph."""
        produced = {id(out) for node in self.nodes for out in node.outputs}
        result: list[ir.Value] = []
        seen: set[int] = set()
        for i, value in enumerate(outputs):
            if id(value) in seen or id(value) not in produced:
                (copy,) = self.add_node("Identity", [value], {})
                copy.dtype, copy.shape = value.dtype, value.shape
                value = copy
            seen.add(id(value))
            if avals is not None:
                stamp(value, avals[i], "output")
            if names is not None:
                value.name = names[i]
            result.append(value)
        return result


def _has_zero(shape: Sequence[Any]) -> bool:
    return any(not is_symbolic(d) and int(d) == 0 for d in shape)


def _plain(value: Any) -> Any:
    """An attribute value with NumPy scalars (JAX params bound by hand carry
    ``numpy.int64``) as the Python numbers ONNX attributes take; lists and tuples
    element by element, anything else as it is."""
    if isinstance(value, np.generic) and not isinstance(value, np.str_):
        return value.item()
    if isinstance(value, (list, tuple)) and any(isinstance(v, np.generic) for v in value):
        return [_plain(v) for v in value]
    return value


def _native(eqn: Any, dtypes: frozenset[np.dtype]) -> bool:
    """Whether every input of ``eqn`` has one of ``dtypes``."""
    for var in eqn.invars:
        dtype = var.aval.dtype
        if is_extended(dtype) or np.dtype(dtype) not in dtypes:
            return False
    return True


def _avals(vars_: Sequence[Any]) -> str:
    return ", ".join(str(v.aval.str_short()) for v in vars_) or "()"


def _as_list(result: Any, count: int, name: str, lowering: Any) -> list[ir.Value]:
    outs = list(result) if isinstance(result, (list, tuple)) else [result]
    if len(outs) != count or not all(isinstance(v, ir.Value) for v in outs):
        raise LoweringError(
            f"lowering of {name!r} ({lowering.where}, plugin {lowering.plugin!r}) returned "
            f"{result!r}; expected {count} onnx_ir value(s), one per output of the primitive"
        )
    return outs


def stamp(value: ir.Value, aval: Any, name: str = "?", lowering: Any = None) -> None:
    """Set the value's dtype and shape from the JAX aval (checking the dtype)."""
    dtype, shape = physical(aval.dtype, aval.shape)  # key arrays are stored as key data
    expected = onnx_dtype(dtype)
    if value.dtype is not None and value.dtype != expected:
        where = f" ({lowering.where})" if lowering is not None else ""
        raise LoweringError(
            f"lowering of {name!r}{where} produced {value.dtype.name} where JAX's output is "
            f"{aval.dtype}; add a Cast to the expected dtype"
        )
    if value.const_value is not None or value.is_graph_input():
        return
    value.dtype = expected
    value.shape = ir_shape(shape)


def _no_complex_lowering(registry: Registry, eqn: Any, where: str) -> str:
    name = eqn.primitive.name
    owners = sorted({lw.plugin for lw in registry.lowerings(name)})
    return (
        f"primitive {name!r} at {where} has no lowering for complex values "
        f"({_avals(eqn.invars)} -> {_avals(eqn.outvars)}); plugin(s) {owners} lower it for "
        "real values only. Keep this operation on real values (split complex numbers with "
        "jnp.real/jnp.imag), or add a rule with rules.lowering(..., values='complex')"
    )


def _no_lowering_at_opset(
    registry: Registry, name: str, opset: int, where: str, complex: bool = False
) -> str:
    available = registry.lowerings(name, complex=complex)
    needs = min(lw.min_opset for lw in available) if available else None
    return (
        f"primitive {name!r} at {where} has no lowering for opset {opset}; "
        f"its lowerings need opset >= {needs}. Pass opset={needs} or newer to to_onnx."
    )


def lower(
    closed: Any,
    inputs: Sequence[tuple[str, Any]],
    outputs: Sequence[str],
    *,
    registry: Registry,
    plugin_set: Any,
    opset: int,
    model_name: str,
    ir_version: int,
    normalization_mode: str = "auto",
    producer_version: str,
    metadata: bool = True,
    recorder: Recorder | None = None,
) -> tuple[ir.Model, dict[str, set[str]], frozenset[str]]:
    """The ONNX model of ``closed``: graph inputs ``(name, spec)``, outputs named ``outputs``.

    Returns the model, per primitive the ONNX op types its rule emitted, and the
    primitives converted through their own JAX implementation.
    ``metadata`` puts each node's origin in its ``metadata_props``;
    ``recorder`` collects the user equations lowered into the main graph.
    """
    conversion = Conversion(
        registry, opset, plugin_set, normalization_mode, metadata=metadata, recorder=recorder
    )
    scope = GraphScope(conversion)
    values = [scope.add_input(name, spec.dtype, spec.shape) for name, spec in inputs]
    outs = scope.lower_jaxpr(closed, values)
    avals = [v.aval for v in closed.jaxpr.outvars]
    results = scope.finish_outputs(outs, avals, outputs)
    if recorder is not None:
        recorder.seal()
    graph = ir.Graph(
        scope.inputs,
        results,
        nodes=scope.nodes,
        initializers=scope.initializers,
        opset_imports={"": opset, **{f.domain: 1 for f in conversion.functions.values()}},
        name=model_name,
    )
    model = ir.Model(
        graph,
        # model-local functions need IR 8
        ir_version=max(ir_version, 8) if conversion.functions else ir_version,
        producer_name="jax2onnx",
        producer_version=producer_version,
        functions=list(conversion.functions.values()),
    )
    return model, conversion.emitted, frozenset(conversion.inlined)
