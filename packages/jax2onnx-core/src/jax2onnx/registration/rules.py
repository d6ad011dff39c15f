"""``Rules``: what one plugin contributes.

A plugin's ``jax2onnx_rules`` hook builds a fresh :class:`Rules` each time it
is called: it creates ``Rules("myops")`` and lets each of its family modules
``register(rules)`` (see :mod:`jax2onnx.registration.family`). The loader freezes the
result, so the rules a plugin set lowers with can no longer change.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from jax2onnx.registration.cases import Case, CaseSource, DeclaredCases
from jax2onnx.registration.deferred import DeferredFamily
from jax2onnx.registration.records import (
    Interception,
    Lowering,
    LoweringFn,
    MacroInfo,
    Prepared,
    dtype_set,
    make_macro,
    primitive_name,
)
from jax2onnx.values.errors import PluginLoadError

_VALUES = ("real", "complex", "any")
__all__ = [
    "Interception",
    "Lowering",
    "LoweringFn",
    "MacroInfo",
    "Prepared",
    "Rules",
    "make_macro",
    "primitive_name",
]

Snapshot = tuple[
    tuple[Lowering, ...],
    tuple[Interception, ...],
    tuple[MacroInfo, ...],
    tuple[DeferredFamily, ...],
]


class Rules:
    """Lowerings, macro primitives, interceptions and cases of one plugin.

    A plugin's ``jax2onnx_rules`` hook returns a new ``Rules`` on every call;
    the loader freezes it (`Rules.freeze`), after which every method that
    adds something raises ``RuntimeError``. A ``Rules`` made by hand can
    also be passed to ``to_onnx(..., extra_rules=...)`` for one conversion.

    Args:
        name: the plugin's name, the entry point's name (the distribution
            name without ``jax2onnx-``): letters, digits, ``_`` and ``-``.
        libraries: the Python packages whose primitives the plugin lowers
            (``("jax",)`` for JAX's own primitives, ``("equinox",)`` ...): a
            missing lowering of such a primitive is then reported as this
            plugin's gap.

    Attributes:
        tracing_contexts: the factories given to ``tracing_context``.

    Raises:
        ValueError: ``name`` is empty or not an identifier.
    """

    def __init__(self, name: str, *, libraries: Iterable[str] = ()) -> None:
        if not name or not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"plugin name {name!r} must be a non-empty identifier")
        self.name = name
        self.libraries = tuple(libraries)
        self._lowerings: list[Lowering] = []
        self._slots: dict[tuple[str, int, str], Lowering] = {}
        self._interceptions: list[Interception] = []
        self._macros: list[MacroInfo] = []
        self.tracing_contexts: list[Callable[[], Any]] = []
        self._declared_cases: list[DeclaredCases] = []
        self._cases: tuple[tuple[str, Case], ...] | None = None
        self._manifest: dict[str, DeferredFamily] = {}  # every deferred module, by name
        self._deferred: dict[str, DeferredFamily] = {}  # those not imported yet
        self._lock = threading.RLock()
        self._loading = False
        self._frozen = False

    def __repr__(self) -> str:
        return (
            f"Rules({self.name!r}, lowerings={len(self._lowerings)}, "
            f"macros={len(self._macros)}, deferred={len(self._deferred)})"
        )

    @property
    def lowerings(self) -> tuple[Lowering, ...]:
        """The `Lowering` of every registered rule (deferred modules are imported first)."""
        self.load_deferred()
        return tuple(self._lowerings)

    @property
    def interceptions(self) -> tuple[Interception, ...]:
        """The `Interception` of every ``intercept`` call (deferred modules imported first)."""
        self.load_deferred()
        return tuple(self._interceptions)

    @property
    def macros(self) -> tuple[MacroInfo, ...]:
        """The macro primitives made with ``primitive`` (deferred modules imported first)."""
        self.load_deferred()
        return tuple(self._macros)

    @property
    def deferred(self) -> tuple[DeferredFamily, ...]:
        """The family modules given to `Rules.defer` that are not imported yet."""
        return tuple(self._deferred.values())

    @property
    def manifest(self) -> tuple[DeferredFamily, ...]:
        """Every family module given to `Rules.defer`, imported or not."""
        return tuple(self._manifest.values())

    @property
    def cases(self) -> tuple[tuple[str, Case], ...]:
        """``(component, Case)`` pairs, component a primitive's name, in declaration order.

        The case functions run on the first read, not when the plugin loads:
        conversions never build cases; the testkit and the coverage table read
        them. Deferred family modules are imported first.

        Raises:
            CaseError: a case function failed, or returned something other
                than `Case` objects (the message names the plugin and component).
        """
        self.load_deferred()
        if self._cases is None:
            self._cases = tuple(pair for d in self._declared_cases for pair in d.build(self.name))
        return self._cases

    @property
    def frozen(self) -> bool:
        """Whether `Rules.freeze` was called: nothing more can be added."""
        return self._frozen

    def freeze(self) -> Rules:
        """Refuse further changes (the loader freezes every plugin's rules).

        Deferred family modules still register when they are imported.
        """
        if not self._frozen:
            self.tracing_contexts = tuple(self.tracing_contexts)  # type: ignore[assignment]
            self._frozen = True
        return self

    def defer(self, manifest: Mapping[str, Mapping[str, Sequence[str]]]) -> None:
        """Register family modules when a conversion needs them, not now.

        ``manifest`` maps each module's import name to what it declares:
        ``{"lowers": [primitive names], "macros": [macro names it does not lower],
        "intercepts": ["module.attr" targets]}``, as ``jax2onnx manifest PLUGIN``
        generates it (see :mod:`jax2onnx.registration.deferred`). A module is imported, and its
        ``register(rules)`` called, when a jaxpr holds one of its primitives,
        when a conversion starts while an interception target's package is
        imported, or when the rules' lowerings, interceptions, macros or
        cases are read. The testkit checks the manifest against the modules.

        Raises:
            ValueError: a module is deferred twice, or an entry has unknown
                keys.
            TypeError: an entry is not lists of names.
            RuntimeError: the rules are frozen.
        """
        self._check_open("deferred family modules")
        for module, entry in manifest.items():
            family = DeferredFamily.of(module, entry)
            if module in self._manifest:
                raise ValueError(f"plugin {self.name!r} defers {module!r} twice")
            self._manifest[module] = self._deferred[module] = family

    def load_deferred(self, modules: Iterable[str] | None = None) -> None:
        """Import deferred family modules (``None``: all) and register their declarations.

        Safe to call from several threads; a module loads once.
        """
        if not self._deferred:
            return
        with self._lock:
            wanted = list(self._deferred) if modules is None else list(modules)
            for module in wanted:
                if module not in self._deferred:
                    continue
                self._loading = True
                try:
                    importlib.import_module(module).register(self)
                except Exception as err:
                    raise PluginLoadError(
                        f"family module {module} of plugin {self.name!r} failed to load when "
                        f"a conversion needed it: {type(err).__name__}: {err}. Fix or "
                        f"reinstall the plugin, or disable it with JAX2ONNX_DISABLE_PLUGINS="
                        f"{self.name}."
                    ) from err
                finally:
                    self._loading = False
                    del self._deferred[module]  # loaded once, even when it failed

    def snapshot(
        self,
    ) -> tuple[
        tuple[Lowering, ...],
        tuple[Interception, ...],
        tuple[MacroInfo, ...],
        tuple[DeferredFamily, ...],
    ]:
        """What is registered now and what is still deferred, read consistently (no loading).

        For the registry: a module another thread is loading is either still
        deferred or completely registered.
        """
        with self._lock:
            return (
                tuple(self._lowerings),
                tuple(self._interceptions),
                tuple(self._macros),
                tuple(self._deferred.values()),
            )

    def _check_open(self, what: str) -> None:
        if self._frozen and not self._loading:
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
        cases: CaseSource = (),
        native_dtypes: Iterable[Any] | None = None,
        fallback: Callable[..., Any] | None = None,
        values: str = "real",
    ) -> Callable[[LoweringFn], LoweringFn]:
        """Register the decorated function as the lowering of ``primitives``.

        The function has JAX's lowering signature ``rule(ctx, *inputs, **params)``
        (``ctx`` a `LoweringContext`, the inputs ``onnx_ir`` values, the params
        the equation's) and returns the ONNX value of the output, or a
        sequence with one value per output. The core stamps each output's
        dtype and shape from the jaxpr.

        Args:
            *primitives: the JAX primitives (or their names) the rule lowers.
            min_opset: the oldest opset its ONNX form works at. A primitive
                may have several lowerings with different ``min_opset``; the
                newest one the target opset allows is used. Below the oldest,
                a primitive with a fallback is inlined as JAX computes it.
            override: replace another plugin's lowering of the same
                primitive; without it, two plugins lowering one primitive is
                a `PluginConflictError` naming both.
            cases: test cases, filed under the first primitive: a function
                without arguments returning the `case` objects (built only
                when the cases are read, see `Rules.cases`), or the objects.
            native_dtypes: the rule runs only when every input has one of
                these dtypes (what its ONNX op has kernels for, e.g.
                ``kernel_dtypes("Gelu")``); other inputs inline the fallback.
                bfloat16 and float16 join whenever float32 is listed: the
                rule emits its ops in those dtypes (constants too, e.g.
                ``ctx.const(eps, dtype)``) and the precision step computes
                them in float32 where ONNX Runtime must.
            fallback: JAX's computation of the primitive,
                ``fallback(*inputs, **params)``, inlined for inputs outside
                ``native_dtypes`` and by ``ctx.fallback()``; default: the
                macro primitive's ``impl``.
            values: ``"real"`` (default) lowers the equations without
                complex inputs or outputs; ``"complex"`` those with some (a
                primitive may have one rule of each), receiving and returning
                complex values as stored, float tensors with a trailing axis
                of 2 (see ``ctx.decompose(..., stored=True)``); ``"any"``
                both. An equation with complex values and no complex rule
                inlines the primitive's fallback when it has one, and is
                reported as unsupported otherwise.

        Returns:
            A decorator that registers the function and returns it unchanged.

        Raises:
            TypeError: no primitive given, or one that is not a primitive.
            ValueError: an unknown ``values``, an empty ``native_dtypes``, or
                a second lowering of a primitive at the same ``min_opset``.
            RuntimeError: the rules are frozen.
        """
        if not primitives:
            raise TypeError("rules.lowering needs at least one primitive")
        if values not in _VALUES:
            raise ValueError(f"values must be one of {_VALUES}, got {values!r}")
        names = [primitive_name(p) for p in primitives]
        declared = DeclaredCases.of(names[0], cases)
        natives = dtype_set(native_dtypes)
        if natives is not None:  # bfloat16/float16 compute in float32 where they must
            from jax2onnx.values.kernels import with_halves

            natives = with_halves(natives)

        def register(fn: LoweringFn) -> LoweringFn:
            for name in names:
                lowering = Lowering(
                    name, fn, self.name, min_opset, override, natives, fallback, values
                )
                self._add_lowering(lowering)
            self._add_cases(declared)
            return fn

        return register

    def _add_lowering(self, lowering: Lowering) -> None:
        self._check_open(f"a lowering of {lowering.primitive!r}")
        # slots by (primitive, min_opset, table): a plugin has hundreds of rules
        slots = [(lowering.primitive, lowering.min_opset, table) for table in lowering.tables]
        existing = next((self._slots[s] for s in slots if s in self._slots), None)
        if existing is not None:
            raise ValueError(
                f"plugin {self.name!r} lowers {lowering.primitive!r} twice at min_opset "
                f"{lowering.min_opset}: {existing.where} and {lowering.where}"
            )
        self._slots.update(dict.fromkeys(slots, lowering))
        self._lowerings.append(lowering)

    def elementwise(
        self, ops: Mapping[Any, str], *, min_opset: int = 1, override: bool = False
    ) -> None:
        """Lower each primitive to the single ONNX op named for it.

        Each rule is ``ctx.op.<OpType>(*inputs)``: the op takes the
        primitive's inputs in order and no attributes.

        Args:
            ops: primitive (or its name) -> ONNX op type, e.g.
                ``{lax.exp_p: "Exp", lax.log_p: "Log"}``.
            min_opset: as in `Rules.lowering`.
            override: as in `Rules.lowering`.
        """
        for primitive, op_type in ops.items():
            self._add_lowering(
                Lowering(
                    primitive_name(primitive), _one_op(op_type), self.name, min_opset, override
                )
            )

    def add_cases(self, component: Any, cases: CaseSource) -> None:
        """Attach cases to a component (a primitive or any name).

        For cases that do not belong to one ``lowering`` call: a macro
        primitive's end-to-end cases, a model, an interception.

        Args:
            component: a primitive (filed under its name) or any name.
            cases: a function without arguments returning the `Case` objects
                (called only when the cases are read, see `Rules.cases`), or
                the objects themselves.
        """
        name = component if isinstance(component, str) else primitive_name(component)
        self._add_cases(DeclaredCases.of(name, cases))

    def _add_cases(self, declared: DeclaredCases) -> None:
        self._check_open("cases")
        if declared.source != ():  # a lowering without cases
            self._declared_cases.append(declared)
            self._cases = None

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
        """Create a macro primitive named ``<plugin>.<name>``.

        A macro primitive keeps a whole JAX function as one primitive while
        ``to_onnx`` traces (see `Rules.intercept`), so its lowering can emit
        one ONNX op. JAX evaluates it with ``impl`` and derives its abstract
        evaluation from ``impl``.

        Args:
            name: the name within the plugin.
            impl: the original JAX function, ``impl(*operands, **params)``;
                also the default fallback of the primitive's lowering.
            batching: how ``jax.vmap`` batches it: ``"fallback"``
                (``jax.vmap(impl)``, which decomposes), ``"elementwise"``
                (the primitive again on operands moved to one batch axis) or
                a rule ``(args, dims, **params) -> (out, out_dims)``.
            jvp: how ``jax.jvp`` (and ``jax.grad``) differentiates it:
                ``"fallback"`` (``jax.jvp(impl)``), a rule
                ``(primals, tangents, **params) -> (out, out_tangent)``, or
                ``None`` (non-differentiable by design: differentiating
                raises `NonDifferentiableError`).
            multiple_results: ``impl`` returns a sequence of arrays.
            abstract_eval: the output avals from the input avals and params,
                when deriving them from ``impl`` is not wanted.

        Returns:
            The new JAX primitive (bind it, intercept with it, lower it).
        """
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
        self._macros.append(info)

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

        The attribute is replaced while tracing and restored afterwards, also
        when tracing raises. Code must reach the function through that
        attribute at call time (``ops.softclip(x)``), not through a name bound
        earlier with ``from ... import softclip``.

        Args:
            target: the attribute to replace, ``"package.module.attr"``.
            primitive: the primitive the stand-in binds; ``None`` when
                ``binder`` is given and the stand-in binds no primitive of
                its own (it only makes the call traceable, as the flax plugin
                does for ``nnx.bridge.ToNNX``).
            binder: ``binder(original)`` returns the stand-in. The default
                binds the leading array arguments as operands and the other
                (hashable) arguments as parameters; a call it cannot bind
                runs ``original``.
            accept: ``accept(arguments)`` (the call's arguments by name,
                defaults filled in) may refuse a call: the original function
                then runs and converts through its decomposition.
            aliases: other attributes that re-export the same function
                (``"flax.nnx.gelu"`` for ``"jax.nn.gelu"``); each is patched
                too, but only while it still is the very object ``target``
                names.

        Raises:
            ValueError: no ``primitive`` and no ``binder``, or a target that
                is not ``"module.attribute"``.
            RuntimeError: the rules are frozen.
        """
        self._check_open(f"an interception of {target!r}")
        if primitive is None and binder is None:
            raise ValueError(f"intercept {target!r}: without a primitive, give a binder")
        for name in (target, *aliases):
            if name.count(".") < 1:
                raise ValueError(f"intercept target {name!r} must be 'module.attribute'")
        if accept is not None:
            from jax2onnx.registration.macro import accepting, default_binder

            make = binder or (lambda original: default_binder(original, primitive))
            binder = accepting(make, accept)
        self._interceptions.append(
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
        if self._loading:
            raise RuntimeError(
                f"a deferred family module of plugin {self.name!r} registers a tracing context; "
                "register it in the plugin's jax2onnx_rules() instead"
            )
        if not callable(factory):
            raise TypeError(f"tracing_context takes a callable, got {type(factory).__name__}")
        self.tracing_contexts.append(factory)


def _one_op(op_type: str) -> LoweringFn:
    def lower(ctx, *inputs, **_params):
        return getattr(ctx.op, op_type)(*inputs)

    lower.__name__ = lower.__qualname__ = f"elementwise_{op_type}"
    lower.__doc__ = f"One {op_type} node."
    return lower
