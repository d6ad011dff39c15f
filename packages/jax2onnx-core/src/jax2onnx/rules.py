"""``Rules``: what one plugin contributes.

A plugin builds one :class:`Rules` object, fills it with decorators while its
modules import, and returns it from its ``jax2onnx_rules`` hook. A ``Rules``
object is the plugin's own declaration; the registry that merges every
plugin's rules is built per plugin set, never as module-global state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jax2onnx.cases import Case

LoweringFn = Callable[..., Any]


def primitive_name(primitive: Any) -> str:
    """The name a primitive has in a jaxpr (a ``Primitive`` or its name)."""
    name = primitive if isinstance(primitive, str) else getattr(primitive, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"expected a JAX primitive or its name, got {primitive!r}")
    return name


@dataclasses.dataclass(frozen=True)
class Lowering:
    """One lowering rule for one primitive."""

    primitive: str
    fn: LoweringFn
    plugin: str
    min_opset: int = 1
    override: bool = False

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
    """What ``rules.primitive`` made: for docs and the CLI."""

    name: str
    primitive: Any
    batching: str
    jvp: str


def _strategy_label(strategy: Any) -> str:
    if strategy is None:
        return "none (non-differentiable)"
    if callable(strategy):
        return "explicit"
    return str(strategy)


class Rules:
    """Lowerings, macro primitives, interceptions and cases of one plugin."""

    def __init__(self, name: str) -> None:
        if not name or not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"plugin name {name!r} must be a non-empty identifier")
        self.name = name
        self.lowerings: list[Lowering] = []
        self.interceptions: list[Interception] = []
        self.macros: list[MacroInfo] = []
        self.cases: list[tuple[str, Case]] = []

    def __repr__(self) -> str:
        return (
            f"Rules({self.name!r}, lowerings={len(self.lowerings)}, "
            f"macros={len(self.macros)}, cases={len(self.cases)})"
        )

    def lowering(
        self,
        *primitives: Any,
        min_opset: int = 1,
        override: bool = False,
        cases: Iterable[Case] = (),
    ) -> Callable[[LoweringFn], LoweringFn]:
        """Register the decorated function as the lowering of ``primitives``.

        The function has JAX's lowering signature ``rule(ctx, *inputs, **params)``
        and returns the ONNX value (or a sequence of values) of the outputs.
        ``min_opset`` is the oldest opset its ONNX form works at; a primitive may
        have several lowerings with different ``min_opset`` and the newest one
        the target opset allows is used.
        """
        if not primitives:
            raise TypeError("rules.lowering needs at least one primitive")
        names = [primitive_name(p) for p in primitives]
        cases = tuple(cases)

        def register(fn: LoweringFn) -> LoweringFn:
            for name in names:
                self._add_lowering(Lowering(name, fn, self.name, min_opset, override))
            for c in cases:
                self.cases.append((names[0], c))
            return fn

        return register

    def _add_lowering(self, lowering: Lowering) -> None:
        for existing in self.lowerings:
            if (
                existing.primitive == lowering.primitive
                and existing.min_opset == lowering.min_opset
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
        from jax2onnx.macro import make_primitive

        prim = make_primitive(
            f"{self.name}.{name}",
            impl,
            batching_rule=batching,
            jvp_rule=jvp,
            multiple_results=multiple_results,
            abstract_eval=abstract_eval,
        )
        self.macros.append(
            MacroInfo(prim.name, prim, _strategy_label(batching), _strategy_label(jvp))
        )
        return prim

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
        """
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


def _one_op(op_type: str) -> LoweringFn:
    def lower(ctx, *inputs, **_params):
        return getattr(ctx.op, op_type)(*inputs)

    lower.__name__ = lower.__qualname__ = f"elementwise_{op_type}"
    lower.__doc__ = f"One {op_type} node."
    return lower


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What a ``jax2onnx_prepare`` hook returns: a pure function to trace.

    ``fn`` takes the user's positional inputs (and ``input_params`` as
    keywords) and returns the outputs; arrays it closes over become
    initializers of the exported model.
    """

    fn: Callable[..., Any]
    name: str | None = None
