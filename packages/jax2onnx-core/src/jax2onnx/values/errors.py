"""Exceptions raised by jax2onnx, each naming what failed, where, and what to do."""

from __future__ import annotations


class Jax2OnnxError(Exception):
    """Base class of every error jax2onnx raises on purpose.

    ``except Jax2OnnxError`` catches conversion failures, plugin conflicts and
    load failures; errors in the arguments of ``to_onnx`` are ``TypeError`` or
    ``ValueError``, and what the converted function itself raises propagates
    unchanged.
    """


class UnsupportedPrimitiveError(Jax2OnnxError, NotImplementedError):
    """The traced function uses primitives that no loaded plugin lowers.

    Raised before anything is lowered, listing every such primitive with its
    input avals, the user's source line, the loaded and failed plugins and,
    where one would, the distribution to install.
    """


class LoweringError(Jax2OnnxError):
    """A lowering rule failed or returned something the core cannot use.

    An exception a rule raises is wrapped in one naming the primitive, the
    rule and its plugin, the input avals and the user's source line. A rule
    raises its own with ``raise ctx.error(message)`` (primitive and line).
    """


class PluginConflictError(Jax2OnnxError):
    """Two plugins lower the same primitive and neither says ``override=True``.

    Fix: register one of the rules with ``override=True``, or disable a
    plugin with ``JAX2ONNX_DISABLE_PLUGINS``.
    """


class PluginLoadError(Jax2OnnxError):
    """A plugin failed to load while ``JAX2ONNX_STRICT_PLUGINS=1`` is set.

    Also raised, strict or not, when a plugin implements a hook that does not
    exist (a misspelled hook name).
    """


class NonDifferentiableError(Jax2OnnxError, TypeError):
    """``jax.grad`` reached a macro primitive that is non-differentiable by design.

    Such a primitive was made with ``jvp=None``. Apply ``jax.lax.stop_gradient``
    to its inputs, or differentiate a function that does not use it.
    """


class UsageError(Jax2OnnxError):
    """A problem with what a user asked for (on the command line: exit status 2).

    A plugin's command (``jax2onnx_commands``) raises it for a bad argument;
    the ``jax2onnx`` command prints the message and exits with status 2.
    ``to_onnx`` raises it when ``fn`` returns no array (``None``) or something
    that is not an array, naming the function and what it returned.
    """
