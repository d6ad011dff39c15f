"""The whole contract between jax2onnx and its plugins.

A plugin is a module named by an entry point in the group ``jax2onnx``; the
entry point's name is the distribution name without ``jax2onnx-``:

```toml
[project.entry-points.jax2onnx]
myops = "jax2onnx_myops.plugin"
```

The module implements any of the hooks below, each marked with
``jax2onnx.plugin.hookimpl``. Plugins load on first use: the first
``to_onnx`` call, ``jax2onnx.plugins()`` or a ``jax2onnx`` command, not at
``import jax2onnx``. Importing a plugin module must be cheap: no Flax,
Equinox or ONNX Runtime at top level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import argparse

    from jax2onnx.registration.prepare import PrepareConfig
    from jax2onnx.registration.rules import Prepared, Rules

PROJECT = "jax2onnx"
ENTRY_POINT_GROUP = "jax2onnx"  # where installed plugins declare their module

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marks a plugin module's function as the implementation of the hook of its name.

Import it from ``jax2onnx.plugin``; pluggy's options (``tryfirst=True`` ...)
work as usual: ``@hookimpl`` or ``@hookimpl(tryfirst=True)``.
"""


@hookspec
def jax2onnx_rules() -> Rules:
    """Return a new ``Rules`` holding the plugin's lowerings.

    Called once per plugin each time a plugin set loads (once per process for
    the default set). Build a fresh ``Rules`` on every call (``Rules("myops")``
    and each family module's ``register(rules)``); the loader freezes it.
    Every plugin's result is kept; two plugins lowering one primitive is an
    error unless one of them registered it with ``override=True``. A plugin
    whose hook raises is recorded as failed and the others still load.

    Returns:
        A new ``Rules`` named after the plugin's entry point.
    """


@hookspec(firstresult=True)
def jax2onnx_prepare(fn: Any, config: PrepareConfig) -> Prepared | None:
    """Turn a stateful object into something ``jax.make_jaxpr`` can trace.

    Called by ``to_onnx`` (and ``traced_callable``) before tracing, with the
    object the user passed and the conversion's
    ``PrepareConfig``. Return ``None`` when the object
    is not yours; otherwise a ``Prepared`` (a pure
    callable whose closed-over arrays become initializers). The first
    non-``None`` result wins. Must not change the user's object.

    It runs before the core checks ``inputs`` and ``input_params`` against
    ``fn``'s arguments: a hook that recognises a misused object raises a
    ``UsageError`` naming the fix, which the user then sees first.

    Args:
        fn: the object passed to ``to_onnx`` (a module, a bound method, a
            function ...).
        config: the conversion's settings (``input_params``, ``opset``,
            ``enable_double_precision``, ``normalization_mode``).

    Returns:
        A ``Prepared`` for objects the plugin handles, else ``None``.
    """


@hookspec
def jax2onnx_commands(commands: argparse._SubParsersAction) -> None:
    """Add subcommands to the ``jax2onnx`` command line.

    Called when the command line starts, with the ``add_subparsers`` result of
    its parser. Add a parser per command and give it a ``run`` default,
    ``run(args, out) -> int`` (the exit status; ``out`` is the text stream to
    print to). Raise ``jax2onnx.plugin.UsageError`` for a problem with
    what the user asked (exit status 2).

    Args:
        commands: the ``argparse`` subparsers action of ``jax2onnx``.
    """
