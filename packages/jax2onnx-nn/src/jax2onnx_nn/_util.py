"""Helpers shared by the nn family modules: macro declaration and axis bookkeeping."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jax2onnx.plugin import Family

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
FLOATS = (F32, F64)


def macro(
    family: Family,
    name: str,
    impl: Callable[..., Any],
    targets: Sequence[str],
    *,
    batching: Any = "elementwise",
    jvp: Any = "fallback",
    accept: Callable[[dict[str, Any]], bool] | None = None,
) -> Any:
    """The macro primitive ``nn.<name>`` of ``family``: ``impl`` evaluates it, ``targets`` bind it.

    ``accept(arguments)`` (the call's bound arguments, defaults applied) may
    refuse a call the primitive does not cover; that call runs the original
    function and converts through its decomposition.
    """
    prim = family.primitive(name, impl=impl, batching=batching, jvp=jvp)
    for target in targets:
        family.intercept(target, prim, accept=accept, aliases=_aliases(target))
    return prim


def _aliases(target: str) -> tuple[str, ...]:
    """Flax re-exports ``jax.nn`` functions as ``nnx.gelu``, ``linen.gelu`` ...: patch those too."""
    if not target.startswith("jax.nn."):
        return ()
    name = target.rsplit(".", 1)[1]
    return (f"flax.nnx.{name}", f"flax.linen.{name}")


def canonical_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, an int or a sequence) as sorted non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    return tuple(sorted(int(a) % ndim if ndim else int(a) for a in axis))


def shifted_axis(axis: Any, ndim: int) -> Any:
    """``axis`` of an ``ndim`` operand, renumbered for a batch axis added in front."""
    if axis is None:
        return tuple(range(1, ndim + 1))
    if isinstance(axis, (int, np.integer)):
        return int(axis) % ndim + 1
    return tuple(int(a) % ndim + 1 for a in axis)
