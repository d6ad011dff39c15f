"""``Family``: what one family module declares, replayed onto a plugin's ``Rules``.

A family module declares its lowerings with the decorators of a module-level
:class:`Family`; ``family.register(rules)`` replays those declarations onto the
plugin's ``Rules``. A ``Family`` is the module's own declaration (written once,
while the module imports), never a registry that conversions read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from jax2onnx.registration.cases import CaseSource
from jax2onnx.registration.rules import LoweringFn, Rules, make_macro


class Family:
    """The rules one family module declares, replayed onto a plugin's ``Rules``.

    The methods take the arguments of `Rules`' methods of the same names and
    only record the declaration. Macro primitives are made once, when the
    module imports (like JAX's own primitives); every ``register(rules)``
    adds the same declarations to a new ``Rules``. Cases given as a function
    are passed on as that function: they are built when the testkit reads
    ``rules.cases``, not when the module imports.

    Args:
        plugin: the name of the plugin whose ``Rules`` this family registers
            on.

    Example:
        ```python
        from jax import lax
        from jax2onnx.plugin import Family, case

        family = Family("myops")

        @family.lowering(lax.tanh_p, cases=lambda: [case("tanh", lax.tanh, [(3,)])])
        def tanh(ctx, x, *, accuracy=None):
            return ctx.op.Tanh(x)

        register = family.register  # the plugin's hook calls register(rules)
        ```
    """

    def __init__(self, plugin: str) -> None:
        self.plugin = plugin
        self._declarations: list[Callable[[Rules], None]] = []

    def __repr__(self) -> str:
        return f"Family({self.plugin!r}, declarations={len(self._declarations)})"

    def lowering(self, *primitives: Any, **options: Any) -> Callable[[LoweringFn], LoweringFn]:
        """Record a [`Rules.lowering`][jax2onnx.registration.rules.Rules.lowering] call."""
        for key in ("cases", "native_dtypes"):  # iterables are read once, here
            if options.get(key) is not None and not callable(options[key]):
                options[key] = tuple(options[key])

        def declare(fn: LoweringFn) -> LoweringFn:
            self._declarations.append(lambda rules: rules.lowering(*primitives, **options)(fn))
            return fn

        return declare

    def elementwise(self, ops: Mapping[Any, str], **options: Any) -> None:
        """Record a [`Rules.elementwise`][jax2onnx.registration.rules.Rules.elementwise] call."""
        ops = dict(ops)
        self._declarations.append(lambda rules: rules.elementwise(ops, **options))

    def add_cases(self, component: Any, cases: CaseSource) -> None:
        """Record a [`Rules.add_cases`][jax2onnx.registration.rules.Rules.add_cases] call."""
        cases = cases if callable(cases) else tuple(cases)
        self._declarations.append(lambda rules: rules.add_cases(component, cases))

    def intercept(self, target: str, primitive: Any, **options: Any) -> None:
        """Record a [`Rules.intercept`][jax2onnx.registration.rules.Rules.intercept] call."""
        self._declarations.append(lambda rules: rules.intercept(target, primitive, **options))

    def tracing_context(self, factory: Callable[[], Any]) -> None:
        """Record a [`Rules.tracing_context`][jax2onnx.registration.rules.Rules.tracing_context]
        call."""
        self._declarations.append(lambda rules: rules.tracing_context(factory))

    def primitive(self, name: str, **options: Any) -> Any:
        """As [`Rules.primitive`][jax2onnx.registration.rules.Rules.primitive]:
        ``<plugin>.<name>``, made now."""
        info = make_macro(f"{self.plugin}.{name}", **options)
        self._declarations.append(lambda rules: rules._add_macro(info))
        return info.primitive

    def register(self, rules: Rules) -> None:
        """Add every declaration of this family to ``rules``.

        Raises:
            ValueError: ``rules`` belongs to another plugin.
        """
        if rules.name != self.plugin:
            raise ValueError(
                f"a family of plugin {self.plugin!r} cannot register on Rules({rules.name!r})"
            )
        for declare in self._declarations:
            declare(rules)
