"""Exceptions raised by jax2onnx, each naming what failed, where, and what to do."""

from __future__ import annotations


class Jax2OnnxError(Exception):
    """Base class of every error jax2onnx raises on purpose."""


class UnsupportedPrimitiveError(Jax2OnnxError, NotImplementedError):
    """The traced function uses primitives that no loaded plugin lowers."""


class LoweringError(Jax2OnnxError):
    """A lowering rule failed or returned something the core cannot use."""


class PluginConflictError(Jax2OnnxError):
    """Two plugins lower the same primitive and neither says ``override=True``."""


class PluginLoadError(Jax2OnnxError):
    """A plugin failed to load while ``JAX2ONNX_STRICT_PLUGINS=1`` is set."""


class NonDifferentiableError(Jax2OnnxError, TypeError):
    """``jax.grad`` reached a macro primitive that is non-differentiable by design."""


class UsageError(Jax2OnnxError):
    """A problem with what a command-line user asked for (exit status 2)."""
