"""Primitives no plugin lowers, converted through their own JAX implementation.

Libraries define primitives of their own (lineax's ``linear_solve``, the
``filter_primitive``\\ s of Equinox-based libraries, a research codebase's
custom op) and give each an *implementation*: the Python function JAX calls
to evaluate it outside any transformation (``Primitive.def_impl``). When no
loaded plugin lowers such a primitive, the converter traces that function on
the equation's inputs (through ``retrace``, with the usual check that every
primitive it binds has a lowering) and lowers what it computes, so the
primitive converts without a plugin. The conversion report lists these
primitives (``ConversionReport.inlined``).

Not inlined: JAX's own primitives (their implementation compiles the
primitive itself with XLA, which would only bind it again), host callbacks
(their implementation calls Python on concrete values, which an ONNX model
cannot hold), and an implementation that binds the primitive it implements.
A dedicated lowering still wins wherever one is registered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jax2onnx.values.errors import LoweringError

# Host callbacks: their implementation runs Python on concrete values.
_CALLBACKS = frozenset({"pure_callback", "io_callback", "debug_callback", "callback"})


def implementation(primitive: Any) -> Callable[..., Any] | None:
    """The JAX implementation of ``primitive`` when tracing it is meaningful, else None."""
    if primitive.name in _CALLBACKS:
        return None
    impl = vars(primitive).get("impl")  # set by Primitive.def_impl
    if impl is None or not callable(impl) or _compiles_itself(impl):
        return None
    return impl


def _compiles_itself(impl: Any) -> bool:
    """An implementation that only hands the primitive to XLA (``dispatch.apply_primitive``,
    what JAX's own primitives use)."""
    from jax._src import dispatch

    return getattr(impl, "func", None) is dispatch.apply_primitive or bool(
        getattr(impl, "_apply_primitive", False)
    )


def inline_implementation(ctx: Any, *inputs: Any, **params: Any) -> Any:
    """The rule for a primitive without a lowering: its implementation, traced and lowered."""
    conversion = ctx.scope.conversion
    name = ctx.eqn.primitive.name
    if name in conversion.inlining:
        raise LoweringError(
            f"primitive {name!r} at {ctx.source}: its JAX implementation binds {name!r} "
            "again, so it cannot be inlined; a plugin must lower it (see the plugin guide)"
        )
    impl = implementation(ctx.eqn.primitive)
    assert impl is not None
    import functools

    import jax

    conversion.inlined.add(name)
    conversion.inlining.add(name)
    try:
        # traced as the user's code around it was: with the plugins' interceptions
        # (an eqx.error_if inside lineax becomes the exported check, not a callback)
        structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in ctx.avals_in]
        closed = conversion.retrace(functools.partial(impl, **params), structs, implementation=name)
        outs = ctx.inline(closed, list(inputs))
    finally:
        conversion.inlining.discard(name)
    return outs if ctx.eqn.primitive.multiple_results else outs[0]
