"""Macro primitives: a whole JAX function kept as one primitive while tracing.

A macro primitive evaluates with its ``impl`` (the original JAX function), so
JAX runs it exactly as before; its abstract evaluation is derived from ``impl``;
and it carries a batching rule and a JVP rule chosen by strategy:

* ``"fallback"``: the rule calls ``impl`` under ``jax.vmap`` / ``jax.jvp``; the
  result decomposes into primitives the converter already lowers.
* ``"elementwise"`` (batching only): the primitive applies per element, so the
  batched call is the same primitive on the operands moved to a common axis.
* a callable: an explicit rule with JAX's signature (``(args, dims, **params)``
  for batching, ``(primals, tangents, **params)`` for JVP), which may bind the
  macro primitive again so the exported graph keeps the single op.
* ``jvp=None``: non-differentiable by design; ``jax.grad`` through it raises
  :class:`~jax2onnx.values.errors.NonDifferentiableError`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax._src import core as jax_core
from jax.interpreters import ad, batching, mlir

from jax2onnx.values.errors import NonDifferentiableError

Strategy = str | Callable[..., Any] | None


def make_primitive(
    name: str,
    impl: Callable[..., Any],
    *,
    batching_rule: Strategy = "fallback",
    jvp_rule: Strategy = "fallback",
    multiple_results: bool = False,
    abstract_eval: Callable[..., Any] | None = None,
) -> jax_core.Primitive:
    """Create a JAX primitive that evaluates with ``impl`` and has vmap/JVP rules."""
    prim = jax_core.Primitive(name)
    prim.multiple_results = multiple_results
    prim.def_impl(impl)
    prim.def_abstract_eval(abstract_eval or _derived_abstract_eval(impl, multiple_results))
    mlir.register_lowering(prim, mlir.lower_fun(impl, multiple_results=multiple_results))
    batching.primitive_batchers[prim] = _batching(prim, impl, batching_rule)
    ad.primitive_jvps[prim] = _jvp(prim, impl, jvp_rule)
    return prim


def _derived_abstract_eval(impl, multiple_results):
    def abstract_eval(*avals, **params):
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
        out = jax.eval_shape(functools.partial(impl, **params), *specs)
        to_aval = lambda s: jax.core.ShapedArray(s.shape, s.dtype)  # noqa: E731
        if multiple_results:
            return [to_aval(s) for s in jax.tree_util.tree_leaves(out)]
        return to_aval(out)

    return abstract_eval


def _batching(prim, impl, strategy):
    if callable(strategy):
        return strategy
    if strategy == "fallback":

        def fallback(args, dims, **params):
            out = jax.vmap(functools.partial(impl, **params), in_axes=tuple(dims))(*args)
            return out, ([0] * len(out) if prim.multiple_results else 0)

        return fallback
    if strategy == "elementwise":

        def elementwise(args, dims, **params):
            size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
            moved = [batching.bdim_at_front(a, d, size) for a, d in zip(args, dims)]
            out = prim.bind(*moved, **params)
            return out, ([0] * len(out) if prim.multiple_results else 0)

        return elementwise
    raise ValueError(
        f"primitive {prim.name}: batching must be 'fallback', 'elementwise' or a callable, "
        f"got {strategy!r}"
    )


def _jvp(prim, impl, strategy):
    if strategy is None:

        def refuse(primals, tangents, **params):
            raise NonDifferentiableError(
                f"{prim.name} is non-differentiable by design: jax.grad and jax.jvp cannot "
                "pass through it. Apply jax.lax.stop_gradient to its inputs or differentiate "
                "a function that does not use it."
            )

        return refuse
    if callable(strategy):
        return strategy
    if strategy == "fallback":

        def fallback(primals, tangents, **params):
            # integer and boolean operands (masks, indices) have float0 tangents: held
            # fixed, so no float0 zeros are staged into the graph
            moving = [i for i, t in enumerate(tangents) if not _is_float0(t)]

            def at(*xs):
                args = list(primals)
                for i, x in zip(moving, xs, strict=True):
                    args[i] = x
                return impl(*args, **params)

            return jax.jvp(
                at,
                tuple(primals[i] for i in moving),
                tuple(ad.instantiate_zeros(tangents[i]) for i in moving),
            )

        return fallback
    raise ValueError(
        f"primitive {prim.name}: jvp must be 'fallback', None or a callable, got {strategy!r}"
    )


def _is_float0(tangent) -> bool:
    aval = tangent.aval if isinstance(tangent, ad.Zero) else jax.typeof(tangent)
    return aval.dtype == jax.dtypes.float0


def _is_array(value) -> bool:
    return isinstance(value, (jax.Array, jax.core.Tracer, np.ndarray, np.generic))


def call_arguments(original: Callable[..., Any]) -> Callable[..., dict[str, Any] | None]:
    """``arguments(*args, **kwargs)``: a call's arguments by name, defaults filled in.

    For binders that decide per call: the result is ``None`` when the call
    does not fit ``original``'s signature (the binder then runs
    ``original``, which raises the user's own error).

    Args:
        original: the intercepted function.

    Returns:
        ``arguments(*args, **kwargs)``: the call's arguments as a dict by
            parameter name, or ``None``.

    Example:
        ```python
        def binder(original):
            arguments = call_arguments(original)

            def stand_in(*args, **kwargs):
                named = arguments(*args, **kwargs)
                if named is None or not isinstance(named["limit"], float):
                    return original(*args, **kwargs)
                return softclip_p.bind(named["x"], limit=named["limit"])

            return stand_in
        ```
    """
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    def arguments(*args: Any, **kwargs: Any) -> dict[str, Any] | None:
        if signature is None:
            return None
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        return dict(bound.arguments)

    return arguments


def accepting(
    make: Callable[[Callable[..., Any]], Callable[..., Any]],
    accept: Callable[[dict[str, Any]], bool],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A binder that runs ``original`` for the calls ``accept(arguments)`` refuses."""

    def binder(original: Callable[..., Any]) -> Callable[..., Any]:
        arguments = call_arguments(original)
        stand_in = make(original)

        @functools.wraps(original)
        def call(*args, **kwargs):
            named = arguments(*args, **kwargs)
            if named is None or not accept(named):
                return original(*args, **kwargs)
            return stand_in(*args, **kwargs)

        return call

    return binder


def default_binder(original: Callable[..., Any], prim) -> Callable[..., Any]:
    """A stand-in for ``original`` that binds ``prim`` when it can.

    The leading positional arguments that are arrays become operands; every
    other argument must be hashable and becomes a parameter. A call that does
    not fit (an array after a static argument, an unhashable option) runs
    ``original`` instead, which still converts through its decomposition.
    """
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    @functools.wraps(original)
    def binder(*args, **kwargs):
        if signature is None:
            return original(*args, **kwargs)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)
        bound.apply_defaults()
        operands, params, in_operands = [], {}, True
        for pname, value in bound.arguments.items():
            kind = signature.parameters[pname].kind
            if kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                return original(*args, **kwargs)
            if in_operands and _is_array(value) and kind != inspect.Parameter.KEYWORD_ONLY:
                operands.append(value)
                continue
            in_operands = False
            if _is_array(value):
                return original(*args, **kwargs)
            try:
                hash(value)
            except TypeError:
                return original(*args, **kwargs)
            params[pname] = value
        if not operands:
            return original(*args, **kwargs)
        return prim.bind(*operands, **params)

    return binder


def batch_at_front(args: Any, dims: Any) -> list[Any]:
    """For a batching rule: every operand with its batch axis first (unbatched ones broadcast).

    ``dims`` are JAX's batch dimensions (``None`` for an unbatched operand);
    the result's operands all have the batch size as their leading axis.

    Example:
        ```python
        def batch_softclip(args, dims, *, limit):  # Rules.primitive(batching=...)
            (x,) = batch_at_front(args, dims)
            return softclip_p.bind(x, limit=limit), 0
        ```
    """
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    return [batching.bdim_at_front(a, d, size) for a, d in zip(args, dims, strict=True)]
