"""Helpers shared by the flax family modules: conversion-time arrays, batching, cases."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.plugin import at_conversion, case

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
FLOATS = (F32, F64)  # ONNX Runtime's Gemm, MatMul and Einsum have kernels for both
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"  # einsum axis names


def promoted(module: Any, arrays: tuple[Any, ...], **kwargs: Any) -> tuple[Any, ...]:
    """``module.promote_dtype(arrays, dtype=module.dtype)``, parameters promoted now.

    A parameter that promotion widens (bfloat16 or float16 weights of a module
    computing in float32) keeps its stored dtype: it is cast inside the graph,
    so the exported model stores the weights as the module does (and the
    conversion never holds a widened copy of them).
    """
    targets = jax.eval_shape(
        lambda a: module.promote_dtype(a, dtype=module.dtype, **kwargs), tuple(arrays)
    )
    return tuple(_promote(x, t) for x, t in zip(arrays, targets, strict=True))


def _promote(x: Any, target: Any) -> Any:
    if x is None or target is None or x.dtype == target.dtype:
        return x
    widens = np.dtype(target.dtype).itemsize > np.dtype(x.dtype).itemsize
    if isinstance(x, jax.core.Tracer) or widens:
        return jnp.asarray(x).astype(target.dtype)  # staged: a Cast in the graph
    return at_conversion(jnp.asarray, x, target.dtype)


def x_batched(impl: Callable[..., Any], bind: Callable[..., Any]) -> Callable[..., Any]:
    """A batching rule: with only operand 0 batched, ``bind`` it moved to the front.

    ``bind(x, *rest, **params)`` returns ``(out, out_batch_dim)``. Batched
    parameters (vmap over weights) use JAX's vmap of ``impl``.
    """

    def rule(args, dims, **params):
        if dims[0] is None or any(d is not None for d in dims[1:]):
            out = jax.vmap(functools.partial(impl, **params), in_axes=tuple(dims))(*args)
            return out, 0
        x = jnp.moveaxis(args[0], dims[0], 0)
        return bind(x, *args[1:], **params)

    return rule


def hashable_precision(precision: Any) -> Any:
    """A primitive parameter must be hashable: a list of precisions becomes a tuple."""
    return tuple(precision) if isinstance(precision, list) else precision


def const_value(value: Any) -> np.ndarray | None:
    """The array of an ONNX value known at conversion time (``None`` otherwise)."""
    return None if value is None or value.const_value is None else value.const_value.numpy()


# -- cases ----------------------------------------------------------------------------


def module_factory(factory: Callable[[Any], Any], wrap: Callable[[Any], Any] | None = None):
    """A case factory: builds the module with ``nnx.Rngs(0)``, optionally wrapped."""

    def make():
        from flax import nnx

        module = factory(nnx)
        return wrap(module) if wrap is not None else module

    return make


def grad_of_squares(module):
    """``jax.grad`` of ``sum(module(x) ** 2)`` (squared, so the gradient depends on ``x``)."""
    return jax.grad(lambda x: (module(x) ** 2).sum())


def factory_cases(rows):
    """``(name, factory, inputs, options)`` rows as factory cases."""
    return [case(name, make, inputs, factory=True, **kw) for name, make, inputs, kw in rows]


# -- Linen ----------------------------------------------------------------------------


def linen_promoted(module: Any, arrays: tuple[Any, ...]) -> tuple[Any, ...]:
    """As :func:`promoted` for a Linen layer (whose ``promote_dtype`` takes varargs)."""
    targets = jax.eval_shape(lambda a: module.promote_dtype(*a, dtype=module.dtype), tuple(arrays))
    return tuple(_promote(x, t) for x, t in zip(arrays, targets, strict=True))


def linen_params(module: Any) -> Any:
    """The ``params`` of a Linen module's scope as ``module.param`` gives them to Flax code.

    Models written for sharding (Flax's lm1b and wmt examples, T5X, MaxText) box
    their parameters: ``nn.with_logical_partitioning(init, names)`` stores
    ``nn.LogicallyPartitioned(value, names)`` (``nn.with_partitioning``:
    ``nn.Partitioned``), and ``module.param`` hands the layer the bare array
    inside. A stand-in that reads stored variables without ``module.param``
    (to look at a dtype before deciding, or to join several sub-layers'
    kernels) reads them here: every box (any ``flax.core.meta.AxisMetadata``)
    is removed as Flax's ``meta.unbox`` does, so a boxed model converts as the
    same model unboxed. Nothing is created or reserved (a missing name is absent).
    """
    from flax.core import meta

    return meta.unbox(module.variables.get("params", {}))


def linen_factory(
    build: Callable[[Any], Any],
    *shapes: tuple[int, ...],
    wrap: Callable[[Any], Any] | None = None,
    init_kwargs: dict[str, Any] | None = None,
):
    """A case factory: ``build(nn)`` initialised on ones of ``shapes``, returned bound.

    Every float variable is moved off its initial value (zero biases, unit
    scales and variances would hide a misplaced operand), so the case
    compares all of them. ``wrap`` turns the bound module into what the case
    converts (``jax.vmap``, a gradient, a lambda).
    """

    def make():
        from flax import linen as nn

        module = build(nn)
        samples = [jnp.ones(s, jnp.float32) for s in shapes]
        variables = module.init(jax.random.key(0), *samples, **(init_kwargs or {}))
        variables = perturbed(variables)
        bound = module.bind(variables)
        return wrap(bound) if wrap is not None else bound

    return make


def perturbed(variables: Any, scale: float = 0.1) -> Any:
    """``variables`` plus small normal noise on every float leaf (a fixed key)."""
    leaves, tree = jax.tree.flatten(variables)
    keys = jax.random.split(jax.random.key(1), max(len(leaves), 1))
    out = [
        leaf + scale * jax.random.normal(k, jnp.shape(leaf), leaf.dtype)
        if jnp.issubdtype(jnp.result_type(leaf), jnp.floating)
        else leaf
        for leaf, k in zip(leaves, keys)
    ]
    return jax.tree.unflatten(tree, out)


def via_apply(bound, **kwargs):
    """``lambda x: model.apply(variables, x, **kwargs)`` for a bound module: the idiom
    every Linen user writes (the flags are the ones spelled, nothing pinned)."""
    module, variables = bound.unbind()
    return lambda *args: module.apply(variables, *args, **kwargs)
