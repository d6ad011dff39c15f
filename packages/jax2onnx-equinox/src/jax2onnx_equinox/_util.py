"""Helpers shared by the equinox family modules: conversion-time arrays, batching, cases."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jax2onnx.plugin import case

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
FLOATS = (F32, F64)  # ONNX Runtime's Gemm, MatMul, Conv ... have kernels for both


def x_batched(impl: Callable[..., Any], bind: Callable[..., Any]) -> Callable[..., Any]:
    """A batching rule: with only operand 0 batched, ``bind`` it moved to the front.

    ``bind(x, *rest, **params)`` returns ``(out, out_batch_dim)``. Batched
    parameters (vmap over an ensemble's weights) use JAX's vmap of ``impl``.
    """

    def rule(args, dims, **params):
        if dims[0] is None or any(d is not None for d in dims[1:]):
            out = jax.vmap(functools.partial(impl, **params), in_axes=tuple(dims))(*args)
            return out, 0
        x = jax.numpy.moveaxis(args[0], dims[0], 0)
        return bind(x, *args[1:], **params)

    return rule


# -- cases ----------------------------------------------------------------------------


def eqx_factory(
    build: Callable[[Any, Any], Any], wrap: Callable[[Any], Any] | None = None
) -> Callable[[], Any]:
    """A case factory: ``build(eqx, key)`` with ``jax.random.PRNGKey(0)``, optionally wrapped."""

    def make():
        import equinox as eqx

        module = build(eqx, jax.random.PRNGKey(0))
        return wrap(module) if wrap is not None else module

    return make


def vmapped(module: Any) -> Callable[..., Any]:
    """``jax.vmap(module)``: Equinox layers take one example; a batch is a vmap."""
    return jax.vmap(module)


def grad_of_squares(module: Any) -> Callable[..., Any]:
    """``jax.grad`` of ``sum(module(x) ** 2)`` (squared, so the gradient depends on ``x``)."""
    return jax.grad(lambda x: (module(x) ** 2).sum())


def factory_cases(rows):
    """``(name, factory, inputs, options)`` rows as factory cases."""
    return [case(name, make, inputs, factory=True, **kw) for name, make, inputs, kw in rows]


def with_equinox(fn: Callable[..., Any]) -> Callable[[], Callable[..., Any]]:
    """A case factory returning ``fn`` once Equinox is imported.

    Interceptions apply to the libraries loaded when ``to_onnx`` starts (as in a
    user's program, which imports Equinox before it builds a model); a case
    function importing Equinox only while it is traced would miss them.
    """

    def make():
        import equinox  # noqa: F401

        return fn

    return make
