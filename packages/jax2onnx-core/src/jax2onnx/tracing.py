"""Step 3: trace the function to a ClosedJaxpr with interceptions active.

Interceptions are scoped patches: each replaces ``module.attr`` while the
trace runs and is undone in ``finally``, even when tracing raises. A target
whose top-level package has not been imported is skipped: the function being
traced cannot use it, and tracing must not import Flax or Equinox for a plain
JAX function.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax

from jax2onnx.functions import exporting
from jax2onnx.macro import default_binder
from jax2onnx.rules import Interception

_MISSING = object()


def _resolve(target: str, *, load: bool = True) -> tuple[Any, str] | None:
    """The object owning the attribute ``target`` names, and the attribute name.

    With ``load=False`` only modules already imported are considered (an
    alias never makes tracing import a module).
    """
    parts = target.split(".")
    if parts[0] not in sys.modules:
        return None
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        module = sys.modules.get(module_name)
        if module is None and not load:
            continue
        if module is None:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
        owner = module
        try:
            for attr in parts[split:-1]:
                owner = getattr(owner, attr)
        except AttributeError:
            return None
        return owner, parts[-1]
    return None


def _patch(owner: Any, attr: str, value: Any, undo: list[tuple[Any, str, Any]]) -> None:
    original = owner.__dict__.get(attr, _MISSING) if hasattr(owner, "__dict__") else _MISSING
    setattr(owner, attr, value)
    undo.append((owner, attr, original))


@contextlib.contextmanager
def interceptions_active(interceptions: Sequence[Interception]) -> Iterator[None]:
    """Apply every interception; restore every original attribute on exit."""
    undo: list[tuple[Any, str, Any]] = []
    try:
        for item in interceptions:
            resolved = _resolve(item.target)
            if resolved is None:
                continue
            owner, attr = resolved
            current = getattr(owner, attr, _MISSING)
            if current is _MISSING:
                continue
            make = item.replacement or (lambda orig, p=item.primitive: default_binder(orig, p))
            stand_in = make(current)
            _patch(owner, attr, stand_in, undo)
            for alias in item.aliases:
                found = _resolve(alias, load=False)
                if found is not None and getattr(*found, _MISSING) is current:
                    _patch(*found, stand_in, undo)
        yield
    finally:
        for owner, attr, original in reversed(undo):
            if original is _MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)


def trace(
    fn: Callable[..., Any], specs: Any, interceptions: Sequence[Interception]
) -> tuple[Any, Any]:
    """``make_jaxpr`` of ``fn(*positional, **params)`` over the flat leaves of ``specs``.

    Returns the ClosedJaxpr and the pytree of output shapes.
    """

    def flat(*leaves):
        args, kwargs = specs.rebuild(leaves)
        return fn(*args, **kwargs)

    with interceptions_active(interceptions), exporting():
        return jax.make_jaxpr(flat, return_shape=True)(*specs.all_specs)
