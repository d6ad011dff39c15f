"""Test cases declared next to lowering rules.

A :class:`Case` is plain, frozen data: the function to convert, its inputs and
what the exported graph should look like. The testkit turns each case into
variants (``f32-static``, ``f64-static``, ``f32-dynamic`` ...) and checks them.

A plugin declares its cases as a function that returns them
(``cases=lambda: [case(...)]``): loading the plugin only records the function,
and the cases are built when something reads them (``Rules.cases``: the
testkit, the coverage table), so a conversion never pays for them.
"""

from __future__ import annotations

import dataclasses
import functools
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from jax2onnx.values.errors import Jax2OnnxError

DEFAULT_STATIC_SIZE = 3
DEFAULT_DYNAMIC_SIZES = (2, 5)
PRECISIONS = ("f32", "f64", "bf16", "f16")  # what Case.variants may name


@dataclasses.dataclass(frozen=True)
class Case:
    """One conversion test case.

    Attributes:
        name: short name, unique within its component.
        fn: the function to convert, or a zero-argument factory returning it
            when ``factory`` is true (for modules that are costly to build).
        inputs: one entry per positional input: a shape tuple of ints and
            strings (a string is a symbolic dimension) or a concrete array.
        dtypes: dtype per input for shape-tuple inputs; ``None`` means float32
            (float64 in the ``f64`` variant).
        input_params: keyword arguments that become scalar graph inputs.
        expect: graph patterns for ``expect_graph`` (``"MatMul -> Add"``,
            ``"Tanh:3"``, ``"Gemm:Bx10"``).
        counts: exact op counts, e.g. ``{"Transpose": 0}``.
        no_unused_inputs: every graph input must be consumed.
        tolerances: ``{dtype name: (rtol, atol)}`` overriding the defaults.
        skip: reason to skip the case (never empty when set).
        xfail: reason the case is expected to fail (never empty when set).
        variants: dtype variants to run (``"f32"``, ``"f64"``, and the
            half-precision ``"bf16"``, ``"f16"``, whose float inputs are
            bfloat16/float16 arrays); ``None`` runs ``f64`` too when the case
            has floating inputs.
        dim_sizes: concrete sizes per symbolic dim: the first is used for the
            static variant, the others for runs of the dynamic variant (the
            first too when it is the only one).
        opset: target opset, if not the default.
        factory: ``fn`` is a factory to call once per check.
        input_range: ``(low, high)`` of random inputs, for functions with a
            restricted domain (``log``, ``acosh`` ...).
        constraints: ``jax.export`` constraints on the symbolic dimensions
            (``"T <= 64"``) for the dynamic variant, where JAX needs them to
            decide a shape (``pos[:, :T]`` of a 64-row table); every size in
            ``dim_sizes`` must satisfy them.
    """

    name: str
    fn: Callable[..., Any]
    inputs: tuple[Any, ...]
    dtypes: tuple[Any, ...] | None = None
    input_params: Mapping[str, Any] | None = None
    expect: tuple[str, ...] = ()
    counts: Mapping[str, int] | None = None
    no_unused_inputs: bool = True
    tolerances: Mapping[str, tuple[float, float]] | None = None
    skip: str | None = None
    xfail: str | None = None
    variants: tuple[str, ...] | None = None
    dim_sizes: Mapping[str, tuple[int, ...]] | None = None
    opset: int | None = None
    factory: bool = False
    input_range: tuple[float, float] | None = None
    constraints: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or "[" in self.name:
            raise ValueError(f"case name {self.name!r} must be non-empty, without '/' or '['")
        if not callable(self.fn):
            raise TypeError(
                f"case {self.name!r}: fn must be callable, got {type(self.fn).__name__}"
            )
        for field in ("skip", "xfail"):
            reason = getattr(self, field)
            if reason is not None and not str(reason).strip():
                raise ValueError(f"case {self.name!r}: {field} needs a reason")
        if self.dtypes is not None and len(self.dtypes) != len(self.inputs):
            raise ValueError(
                f"case {self.name!r}: {len(self.dtypes)} dtypes for {len(self.inputs)} inputs"
            )
        for variant in self.variants or ():
            if variant not in PRECISIONS:
                raise ValueError(
                    f"case {self.name!r}: unknown variant {variant!r} (one of {PRECISIONS})"
                )

    @property
    def symbols(self) -> tuple[str, ...]:
        """Symbolic dimension names used by the inputs, in first-use order."""
        seen: dict[str, None] = {}
        for spec in self.inputs:
            if isinstance(spec, tuple):
                for dim in spec:
                    if isinstance(dim, str):
                        for name in _symbol_names(dim):
                            seen.setdefault(name)
        return tuple(seen)

    def sizes(self, symbol: str) -> tuple[int, ...]:
        """The sizes of ``symbol``: static first, then the dynamic runs (default (3, 2, 5))."""
        sizes = (self.dim_sizes or {}).get(symbol)
        if sizes:
            return tuple(sizes)
        return (DEFAULT_STATIC_SIZE, *DEFAULT_DYNAMIC_SIZES)


def _symbol_names(dim: str) -> list[str]:
    names, current = [], ""
    for char in dim + " ":
        if char.isalnum() or char == "_":
            current += char
            continue
        if current and not current[0].isdigit():
            names.append(current)
        current = ""
    return names


def case(
    name: str,
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    dtypes: Sequence[Any] | None = None,
    input_params: Mapping[str, Any] | None = None,
    expect: Sequence[str] = (),
    counts: Mapping[str, int] | None = None,
    no_unused_inputs: bool = True,
    tolerances: Mapping[str, tuple[float, float]] | None = None,
    skip: str | None = None,
    xfail: str | None = None,
    variants: Sequence[str] | None = None,
    dim_sizes: Mapping[str, Sequence[int]] | None = None,
    opset: int | None = None,
    factory: bool = False,
    input_range: tuple[float, float] | None = None,
    constraints: Sequence[str] = (),
) -> Case:
    """Declare a test case next to the rule it tests.

    The arguments are the fields of `Case`, with the same meanings; lists
    become tuples, a single ``expect`` string a one-pattern tuple. Call it
    inside the function given as ``cases=`` (``cases=lambda: [case(...)]``):
    a case is then built only when the testkit reads the plugin's cases,
    never while a conversion loads the plugin.

    Returns:
        The frozen `Case`.

    Raises:
        ValueError: an empty name or one with ``/`` or ``[``, an empty
            ``skip``/``xfail`` reason, ``dtypes`` of another length than
            ``inputs``, an unknown variant.
        TypeError: ``fn`` is not callable.

    Example:
        ```python
        from jax import lax
        from jax2onnx.plugin import case

        tanh_case = case("tanh", lax.tanh, [("B", 3)], expect=["Tanh:Bx3"])
        ```
    """
    return Case(
        name=name,
        fn=fn,
        inputs=tuple(tuple(i) if isinstance(i, list) else i for i in inputs),
        dtypes=None if dtypes is None else tuple(dtypes),
        input_params=None if input_params is None else dict(input_params),
        expect=(expect,) if isinstance(expect, str) else tuple(expect),
        counts=None if counts is None else dict(counts),
        no_unused_inputs=no_unused_inputs,
        tolerances=None if tolerances is None else dict(tolerances),
        skip=skip,
        xfail=xfail,
        variants=None if variants is None else tuple(variants),
        dim_sizes=None if dim_sizes is None else {k: tuple(v) for k, v in dim_sizes.items()},
        opset=opset,
        factory=factory,
        input_range=input_range,
        constraints=(constraints,) if isinstance(constraints, str) else tuple(constraints),
    )


CaseSource = Iterable[Case] | Callable[[], Iterable[Case]]
"""What ``cases=`` takes: the `Case` objects, or a function without arguments returning them."""


class CaseError(Jax2OnnxError, ValueError):
    """A plugin's cases could not be built: the message names the plugin and component.

    Raised when the cases are read (``Rules.cases``), for a case function that
    raises or returns something other than `Case` objects.
    """


@dataclasses.dataclass(frozen=True)
class DeclaredCases:
    """The cases one declaration files under one component, built on demand.

    Attributes:
        component: a primitive's name, or any name (a model, an interception).
        source: the `Case` objects, or the function that returns them.
    """

    component: str
    source: tuple[Case, ...] | Callable[[], Iterable[Case]]

    @classmethod
    def of(cls, component: str, source: CaseSource) -> DeclaredCases:
        """Keep a function as it is (it runs in `build`); read an iterable now."""
        if callable(source):
            return cls(component, source)
        if isinstance(source, (str, bytes, Case)):
            raise TypeError(
                f"cases of {component!r} must be a list of case(...) or a function returning "
                f"one, got {type(source).__name__}"
            )
        return cls(component, tuple(source))

    @property
    def where(self) -> str:
        """Where the case function is defined, ``module:line`` (``""`` for a list)."""
        fn = _unwrapped(self.source)
        code = getattr(fn, "__code__", None)
        if code is None:
            return ""
        return f"{getattr(fn, '__module__', '?')}:{code.co_firstlineno}"

    def build(self, plugin: str) -> list[tuple[str, Case]]:
        """``(component, case)`` pairs, calling the case function if there is one.

        Raises:
            CaseError: the function raised, or returned something that is not
                an iterable of `Case` objects; the message names the plugin,
                the component and the line that failed.
        """
        source = self.source
        if callable(source):
            try:
                source = list(source())
            except Exception as err:
                raise CaseError(
                    f"{self._describe(plugin)} could not be built: {type(err).__name__}: {err}"
                    f"{_failed_at(err, self.source)}"
                ) from err
        bad = [c for c in source if not isinstance(c, Case)]
        if bad:
            raise CaseError(
                f"{self._describe(plugin)} must all be case(...) objects, got "
                f"{type(bad[0]).__name__}: {bad[0]!r:.80}"
            )
        return [(self.component, c) for c in source]

    def _describe(self, plugin: str) -> str:
        where = f" (declared at {self.where})" if self.where else ""
        return f"plugin {plugin!r}: the cases of {self.component!r}{where}"


def _unwrapped(fn: Any) -> Any:
    """The function a ``functools.partial`` calls (``fn`` itself otherwise)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def _failed_at(err: Exception, fn: Any) -> str:
    """`` (at file:line)``: the last line of ``fn``'s module the error passed through."""
    code = getattr(_unwrapped(fn), "__code__", None)
    frames = traceback.extract_tb(err.__traceback__)
    own = [f for f in frames if code is not None and f.filename == code.co_filename]
    last = (own or frames[-1:] or [None])[-1]
    return f" (at {last.filename}:{last.lineno})" if last is not None else ""
