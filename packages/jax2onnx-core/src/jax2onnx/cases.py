"""Test cases declared next to lowering rules.

A :class:`Case` is plain, frozen data: the function to convert, its inputs and
what the exported graph should look like. The testkit turns each case into
variants (``f32-static``, ``f64-static``, ``f32-dynamic`` ...) and checks them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

DEFAULT_STATIC_SIZE = 3
DEFAULT_DYNAMIC_SIZES = (2, 5)


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
        variants: dtype variants to run (``"f32"``, ``"f64"``); ``None`` runs
            ``f64`` too when the case has floating inputs.
        dim_sizes: concrete sizes per symbolic dim: the first is used for the
            static variant, the others for runs of the dynamic variant (the
            first too when it is the only one).
        opset: target opset, if not the default.
        factory: ``fn`` is a factory to call once per check.
        input_range: ``(low, high)`` of random inputs, for functions with a
            restricted domain (``log``, ``acosh`` ...).
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
            if variant not in ("f32", "f64"):
                raise ValueError(f"case {self.name!r}: unknown variant {variant!r}")

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
) -> Case:
    """Declare a test case next to the rule it tests.

    The arguments are the fields of `Case`, with the same meanings; lists
    become tuples, a single ``expect`` string a one-pattern tuple.

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
    )
