"""``Rules``: what one plugin contributes, and ``Family``: what one module declares.

A plugin's ``jax2onnx_rules`` hook builds a fresh :class:`Rules` each time it
is called: it creates ``Rules("myops")`` and lets each of its family modules
``register(rules)``. The loader freezes the result, so the rules a plugin set
lowers with can no longer change. A family module declares its lowerings with
the decorators of a module-level :class:`Family`; ``family.register(rules)``
replays those declarations onto the plugin's ``Rules``. A ``Family`` is the
module's own declaration (written once, while the module imports), never a
registry that conversions read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from jax2onnx.cases import Case

LoweringFn = Callable[..., Any]
_VALUES = ("real", "complex", "any")


def primitive_name(primitive: Any) -> str:
    """The name a primitive has in a jaxpr (a ``Primitive`` or its name)."""
    name = primitive if isinstance(primitive, str) else getattr(primitive, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"expected a JAX primitive or its name, got {primitive!r}")
    return name


def _dtype_set(dtypes: Iterable[Any] | None) -> frozenset[np.dtype] | None:
    if dtypes is None:
        return None
    result = frozenset(np.dtype(d) for d in dtypes)
    if not result:
        raise ValueError("native_dtypes must name at least one dtype (or be None)")
    return result


@dataclasses.dataclass(frozen=True)
class Lowering:
    """One lowering rule for one primitive.

    ``native_dtypes``: the rule runs only when every input has one of these
    dtypes; otherwise the core inlines the fallback (``fallback``, or the
    macro primitive's ``impl``). ``fallback``: JAX's computation of the
    primitive, ``fallback(*inputs, **params)``, for ``ctx.fallback()``.
    ``values``: which equations the rule lowers: ``"real"`` (no complex input
    or output), ``"complex"`` (some complex input or output; the rule gets
    and returns complex values in their stored form, float ``[..., 2]``) or
    ``"any"`` (both: the rule never looks at what its values hold, like the
    rules of calls and control flow).
    """

    primitive: str
    fn: LoweringFn
    plugin: str
    min_opset: int = 1
    override: bool = False
    native_dtypes: frozenset[np.dtype] | None = None
    fallback: Callable[..., Any] | None = None
    values: str = "real"

    @property
    def tables(self) -> tuple[str, ...]:
        """The kinds of equations it lowers: ``("real",)``, ``("complex",)`` or both."""
        return ("real", "complex") if self.values == "any" else (self.values,)

    @property
    def where(self) -> str:
        code = getattr(self.fn, "__code__", None)
        module = getattr(self.fn, "__module__", "?")
        line = f":{code.co_firstlineno}" if code else ""
        return f"{module}.{getattr(self.fn, '__qualname__', self.fn)}{line}"


@dataclasses.dataclass(frozen=True)
class Interception:
    """While tracing, ``target`` (``"module.attr"``) is replaced by ``replacement``."""

    target: str
    replacement: Callable[..., Any] | None
    primitive: Any
    plugin: str
    aliases: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class MacroInfo:
    """A macro primitive a plugin made: for ``ctx.fallback()``, docs and the CLI."""

    name: str
    primitive: Any
    batching: str
    jvp: str
    impl: Callable[..., Any] | None = None


def _strategy_label(strategy: Any) -> str:
    if strategy is None:
        return "none (non-differentiable)"
    if callable(strategy):
        return "explicit"
    return str(strategy)


def make_macro(
    name: str,
    *,
    impl: Callable[..., Any],
    batching: Any = "fallback",
    jvp: Any = "fallback",
    multiple_results: bool = False,
    abstract_eval: Callable[..., Any] | None = None,
) -> MacroInfo:
    """A macro primitive named ``name`` (see :mod:`jax2onnx.macro`) and its description."""
    from jax2onnx.macro import make_primitive

    prim = make_primitive(
        name,
        impl,
        batching_rule=batching,
        jvp_rule=jvp,
        multiple_results=multiple_results,
        abstract_eval=abstract_eval,
    )
    return MacroInfo(prim.name, prim, _strategy_label(batching), _strategy_label(jvp), impl)


class Rules:
    """Lowerings, macro primitives, interceptions and cases of one plugin.

    ``libraries`` names the Python packages whose primitives the plugin lowers
    (``("jax",)`` for JAX's own primitives, ``("equinox",)`` ...): a missing
    lowering of such a primitive is then reported as this plugin's gap.
    """

    def __init__(self, name: str, *, libraries: Iterable[str] = ()) -> None:
        if not name or not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"plugin name {name!r} must be a non-empty identifier")
        self.name = name
        self.libraries = tuple(libraries)
        self.lowerings: list[Lowering] = []
        self.interceptions: list[Interception] = []
        self.macros: list[MacroInfo] = []
        self.cases: list[tuple[str, Case]] = []
        self.tracing_contexts: list[Callable[[], Any]] = []
        self._frozen = False

    def __repr__(self) -> str:
        return (
            f"Rules({self.name!r}, lowerings={len(self.lowerings)}, "
            f"macros={len(self.macros)}, cases={len(self.cases)})"
        )

    @property
    def frozen(self) -> bool:
        return self._frozen

    def freeze(self) -> Rules:
        """Refuse further changes (the loader freezes every plugin's rules)."""
        if not self._frozen:
            self.lowerings = tuple(self.lowerings)  # type: ignore[assignment]
            self.interceptions = tuple(self.interceptions)  # type: ignore[assignment]
            self.macros = tuple(self.macros)  # type: ignore[assignment]
            self.cases = tuple(self.cases)  # type: ignore[assignment]
            self.tracing_contexts = tuple(self.tracing_contexts)  # type: ignore[assignment]
            self._frozen = True
        return self

    def _check_open(self, what: str) -> None:
        if self._frozen:
            raise RuntimeError(
                f"Rules({self.name!r}) is frozen: it was loaded into a plugin set, so {what} "
                "cannot be added. Register everything inside the plugin's jax2onnx_rules(), "
                "or build a new Rules for to_onnx(..., extra_rules=...)."
            )

    def lowering(
        self,
        *primitives: Any,
        min_opset: int = 1,
        override: bool = False,
        cases: Iterable[Case] = (),
        native_dtypes: Iterable[Any] | None = None,
        fallback: Callable[..., Any] | None = None,
        values: str = "real",
    ) -> Callable[[LoweringFn], LoweringFn]:
        """Register the decorated function as the lowering of ``primitives``.

        The function has JAX's lowering signature ``rule(ctx, *inputs, **params)``
        and returns the ONNX value (or a sequence of values) of the outputs.
        ``min_opset`` is the oldest opset its ONNX form works at; a primitive may
        have several lowerings with different ``min_opset`` and the newest one
        the target opset allows is used. With ``native_dtypes`` the rule runs
        only for inputs of those dtypes (what its ONNX op has kernels for); other
        inputs inline ``fallback`` (default: the macro primitive's ``impl``).

        ``values="complex"`` registers the rule for the equations of
        ``primitives`` that have a complex input or output (a primitive may have
        one rule for real and one for complex values); it receives and returns
        complex values as stored, float tensors with a trailing axis of 2 (see
        ``ctx.decompose(..., stored=True)``). ``values="any"``: one rule for
        both. An equation with complex values and no complex rule inlines the
        primitive's fallback when it has one, and is reported as unsupported
        otherwise.
        """
        if not primitives:
            raise TypeError("rules.lowering needs at least one primitive")
        if values not in _VALUES:
            raise ValueError(f"values must be one of {_VALUES}, got {values!r}")
        names = [primitive_name(p) for p in primitives]
        cases = tuple(cases)
        natives = _dtype_set(native_dtypes)

        def register(fn: LoweringFn) -> LoweringFn:
            for name in names:
                lowering = Lowering(
                    name, fn, self.name, min_opset, override, natives, fallback, values
                )
                self._add_lowering(lowering)
            self._check_open("cases")
            for c in cases:
                self.cases.append((names[0], c))
            return fn

        return register

    def _add_lowering(self, lowering: Lowering) -> None:
        self._check_open(f"a lowering of {lowering.primitive!r}")
        for existing in self.lowerings:
            if (
                existing.primitive == lowering.primitive
                and existing.min_opset == lowering.min_opset
                and set(existing.tables) & set(lowering.tables)
            ):
                raise ValueError(
                    f"plugin {self.name!r} lowers {lowering.primitive!r} twice at min_opset "
                    f"{lowering.min_opset}: {existing.where} and {lowering.where}"
                )
        self.lowerings.append(lowering)

    def elementwise(
        self, ops: Mapping[Any, str], *, min_opset: int = 1, override: bool = False
    ) -> None:
        """Lower each primitive to the single ONNX op named for it."""
        for primitive, op_type in ops.items():
            self._add_lowering(
                Lowering(
                    primitive_name(primitive), _one_op(op_type), self.name, min_opset, override
                )
            )

    def add_cases(self, component: Any, cases: Iterable[Case]) -> None:
        """Attach cases to a component (a primitive or any name)."""
        self._check_open("cases")
        name = component if isinstance(component, str) else primitive_name(component)
        for c in cases:
            self.cases.append((name, c))

    def primitive(
        self,
        name: str,
        *,
        impl: Callable[..., Any],
        batching: Any = "fallback",
        jvp: Any = "fallback",
        multiple_results: bool = False,
        abstract_eval: Callable[..., Any] | None = None,
    ) -> Any:
        """Create a macro primitive named ``<plugin>.<name>`` (see :mod:`jax2onnx.macro`)."""
        self._check_open(f"macro primitive {name!r}")
        info = make_macro(
            f"{self.name}.{name}",
            impl=impl,
            batching=batching,
            jvp=jvp,
            multiple_results=multiple_results,
            abstract_eval=abstract_eval,
        )
        self._add_macro(info)
        return info.primitive

    def _add_macro(self, info: MacroInfo) -> None:
        self._check_open(f"macro primitive {info.name!r}")
        self.macros.append(info)

    def intercept(
        self,
        target: str,
        primitive: Any,
        *,
        binder: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
        accept: Callable[[dict[str, Any]], bool] | None = None,
        aliases: Iterable[str] = (),
    ) -> None:
        """While ``to_onnx`` traces, replace ``target`` with a call binding ``primitive``.

        ``target`` is ``"package.module.attr"``. ``binder(original)`` returns the
        stand-in; the default binds the leading array arguments as operands
        and the other arguments as parameters. ``accept(arguments)`` (the
        call's arguments by name, defaults filled in) may refuse a call: the
        original function then runs and converts through its decomposition.
        ``aliases`` name other places that re-export the same function
        (``"flax.nnx.gelu"`` for ``"jax.nn.gelu"``); each is patched too, but
        only while it still is the very object ``target`` names.
        ``primitive`` may be ``None`` when ``binder`` is given and the stand-in
        binds no primitive of its own (it only makes the call traceable, as
        the flax plugin does for ``nnx.bridge.ToNNX``).
        """
        self._check_open(f"an interception of {target!r}")
        if primitive is None and binder is None:
            raise ValueError(f"intercept {target!r}: without a primitive, give a binder")
        for name in (target, *aliases):
            if name.count(".") < 1:
                raise ValueError(f"intercept target {name!r} must be 'module.attribute'")
        if accept is not None:
            from jax2onnx.macro import accepting, default_binder

            make = binder or (lambda original: default_binder(original, primitive))
            binder = accepting(make, accept)
        self.interceptions.append(
            Interception(target, binder, primitive, self.name, tuple(aliases))
        )

    def tracing_context(self, factory: Callable[[], Any]) -> None:
        """While ``to_onnx`` traces, enter the context manager ``factory()`` returns.

        For libraries with an interception API of their own (Flax Linen's
        ``nn.intercept_methods``): the plugin's stand-ins run inside the
        library's machinery instead of replacing a module attribute. The
        context is entered in the thread that traces and left when the trace
        ends (also on errors), so, like attribute interceptions, it is seen by
        this conversion only as far as the library keeps its interceptors per
        thread. ``factory`` returns ``None`` when there is nothing to do (the
        library is not imported): it must not import the library itself.
        """
        self._check_open("a tracing context")
        if not callable(factory):
            raise TypeError(f"tracing_context takes a callable, got {type(factory).__name__}")
        self.tracing_contexts.append(factory)


def _one_op(op_type: str) -> LoweringFn:
    def lower(ctx, *inputs, **_params):
        return getattr(ctx.op, op_type)(*inputs)

    lower.__name__ = lower.__qualname__ = f"elementwise_{op_type}"
    lower.__doc__ = f"One {op_type} node."
    return lower


class Family:
    """The rules one family module declares, replayed onto a plugin's ``Rules``.

    .. code-block:: python

        family = Family("myops")

        @family.lowering(lax.tanh_p, cases=[...])
        def tanh(ctx, x, *, accuracy=None):
            return ctx.op.Tanh(x)

        register = family.register    # plugin.py: register(rules) for each family

    The decorators take the arguments of :class:`Rules`' methods. Macro
    primitives are made once, when the module imports (like JAX's own
    primitives); every ``register(rules)`` adds the same declarations to a
    new ``Rules``.
    """

    def __init__(self, plugin: str) -> None:
        self.plugin = plugin
        self._declarations: list[Callable[[Rules], None]] = []

    def __repr__(self) -> str:
        return f"Family({self.plugin!r}, declarations={len(self._declarations)})"

    def lowering(self, *primitives: Any, **options: Any) -> Callable[[LoweringFn], LoweringFn]:
        """As :meth:`Rules.lowering`."""
        for key in ("cases", "native_dtypes"):  # iterables are read once, here
            if options.get(key) is not None:
                options[key] = tuple(options[key])

        def declare(fn: LoweringFn) -> LoweringFn:
            self._declarations.append(lambda rules: rules.lowering(*primitives, **options)(fn))
            return fn

        return declare

    def elementwise(self, ops: Mapping[Any, str], **options: Any) -> None:
        """As :meth:`Rules.elementwise`."""
        ops = dict(ops)
        self._declarations.append(lambda rules: rules.elementwise(ops, **options))

    def add_cases(self, component: Any, cases: Iterable[Case]) -> None:
        """As :meth:`Rules.add_cases`."""
        cases = tuple(cases)
        self._declarations.append(lambda rules: rules.add_cases(component, cases))

    def intercept(self, target: str, primitive: Any, **options: Any) -> None:
        """As :meth:`Rules.intercept`."""
        self._declarations.append(lambda rules: rules.intercept(target, primitive, **options))

    def tracing_context(self, factory: Callable[[], Any]) -> None:
        """As :meth:`Rules.tracing_context`."""
        self._declarations.append(lambda rules: rules.tracing_context(factory))

    def primitive(self, name: str, **options: Any) -> Any:
        """As :meth:`Rules.primitive`: the primitive ``<plugin>.<name>``, made now."""
        info = make_macro(f"{self.plugin}.{name}", **options)
        self._declarations.append(lambda rules: rules._add_macro(info))
        return info.primitive

    def register(self, rules: Rules) -> None:
        """Add every declaration of this family to ``rules``."""
        if rules.name != self.plugin:
            raise ValueError(
                f"a family of plugin {self.plugin!r} cannot register on Rules({rules.name!r})"
            )
        for declare in self._declarations:
            declare(rules)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What a ``jax2onnx_prepare`` hook returns: a pure function to trace.

    ``fn`` takes the user's positional inputs (and ``input_params`` as
    keywords) and returns the outputs; arrays it closes over become
    initializers of the exported model.
    """

    fn: Callable[..., Any]
    name: str | None = None
