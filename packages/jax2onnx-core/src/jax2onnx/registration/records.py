"""The records a plugin's ``Rules`` holds: lowerings, interceptions, macro primitives.

Defined here so :mod:`jax2onnx.registration.rules` stays the ``Rules`` class itself; import
them from :mod:`jax2onnx.plugin`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

LoweringFn = Callable[..., Any]


def primitive_name(primitive: Any) -> str:
    """The name a primitive has in a jaxpr (a ``Primitive`` or its name)."""
    name = primitive if isinstance(primitive, str) else getattr(primitive, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"expected a JAX primitive or its name, got {primitive!r}")
    return name


def dtype_set(dtypes: Iterable[Any] | None) -> frozenset[np.dtype] | None:
    if dtypes is None:
        return None
    result = frozenset(np.dtype(d) for d in dtypes)
    if not result:
        raise ValueError("native_dtypes must name at least one dtype (or be None)")
    return result


@dataclasses.dataclass(frozen=True)
class Lowering:
    """One lowering rule for one primitive, as `Rules.lowering` records it.

    Attributes:
        primitive: the primitive's name in a jaxpr.
        fn: the rule, ``fn(ctx, *inputs, **params)``.
        plugin: the name of the plugin that registered it.
        min_opset: the oldest opset its ONNX form works at.
        override: whether it replaces another plugin's lowering of the
            primitive.
        native_dtypes: the dtypes the rule runs for (``None``: all); other
            inputs inline the fallback.
        fallback: JAX's computation of the primitive, or ``None``.
        values: ``"real"``, ``"complex"`` or ``"any"``: the equations it
            lowers (see `Rules.lowering`).
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
        """The rule's ``module.qualname:line``, for error messages."""
        code = getattr(self.fn, "__code__", None)
        module = getattr(self.fn, "__module__", "?")
        line = f":{code.co_firstlineno}" if code else ""
        return f"{module}.{getattr(self.fn, '__qualname__', self.fn)}{line}"


@dataclasses.dataclass(frozen=True)
class Interception:
    """While tracing, ``target`` (``"module.attr"``) is replaced by ``replacement``.

    Recorded by `Rules.intercept`.

    Attributes:
        target: the attribute replaced, ``"package.module.attr"``.
        replacement: the binder: ``replacement(original)`` returns the
            stand-in installed while ``to_onnx`` traces; ``None`` for the
            default binder of ``primitive``.
        primitive: the macro primitive the stand-in binds (or ``None``).
        plugin: the name of the plugin that registered it.
        aliases: other attributes patched with the same stand-in while they
            are the very object ``target`` names.
    """

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
    """A macro primitive named ``name`` (see :mod:`jax2onnx.registration.macro`) and its
    description."""
    from jax2onnx.registration.macro import make_primitive

    prim = make_primitive(
        name,
        impl,
        batching_rule=batching,
        jvp_rule=jvp,
        multiple_results=multiple_results,
        abstract_eval=abstract_eval,
    )
    return MacroInfo(prim.name, prim, _strategy_label(batching), _strategy_label(jvp), impl)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What a ``jax2onnx_prepare`` hook returns: a pure function to trace.

    Attributes:
        fn: takes the user's positional inputs (and ``input_params`` as
            keywords) and returns the outputs; arrays it closes over become
            initializers of the exported model.
        name: a name for what was prepared (informational; the core does
            not read it).
    """

    fn: Callable[..., Any]
    name: str | None = None
