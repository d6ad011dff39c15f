"""Step 3: trace the function to a ClosedJaxpr with interceptions active, and re-trace.

Interceptions are scoped patches: each replaces ``module.attr`` while the
trace runs and is undone in ``finally``, even when tracing raises. A target
whose top-level package has not been imported is skipped: the function being
traced cannot use it, and tracing must not import Flax or Equinox for a plain
JAX function.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax

from jax2onnx.functions import exporting
from jax2onnx.macro import default_binder
from jax2onnx.rules import Interception
from jax2onnx.unsupported import check_supported, iter_equations

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


def trace(fn: Callable[..., Any], specs: Any, registry: Any, plugin_set: Any) -> tuple[Any, Any]:
    """``make_jaxpr`` of ``fn(*positional, **params)`` over the flat leaves of ``specs``.

    The registry's interceptions are active while ``fn`` traces; JAX's errors
    that a user can act on are said in their terms, and a primitive no plugin
    lowers is reported (with its source line) before anything is lowered.
    Returns the ClosedJaxpr and the pytree of output shapes.
    """

    def flat(*leaves):
        args, kwargs = specs.rebuild(leaves)
        return fn(*args, **kwargs)

    param_names = [k for k, _ in specs.params]
    try:
        with interceptions_active(registry.interceptions), exporting():
            closed, out_shapes = jax.make_jaxpr(flat, return_shape=True)(*specs.all_specs)
    except jax.errors.ConcretizationTypeError as err:
        if param_names:
            raise TypeError(
                f"tracing failed because a runtime parameter ({', '.join(param_names)}) is "
                "used in Python control flow; input_params become graph inputs, so use "
                f"jax.lax.cond/jnp.where on them instead. JAX said: {err}"
            ) from err
        raise
    except Exception as err:
        if type(err).__name__ != "InconclusiveDimensionOperation":
            raise
        raise ValueError(
            "JAX cannot decide a comparison of symbolic dimensions while tracing "
            f"(inputs {[s.shape for s in specs.all_specs]}). Use concrete sizes for the "
            "dimensions involved, or express the shape with the same symbols (e.g. 'B' and "
            f"'2*B' rather than two unrelated names). JAX said: {err}"
        ) from err
    check_supported(closed, registry, plugin_set)
    return closed, out_shapes


def retrace(
    fn: Callable[..., Any],
    specs: Sequence[Any],
    registry: Any,
    plugin_set: Any,
    enclosing: str,
) -> Any:
    """Trace ``fn`` on ``specs`` while lowering (a decomposition, a subgraph body).

    Every jaxpr made after the first trace goes through here, so a primitive
    no plugin lowers is reported like one in the user's function, at the
    user's line ``enclosing``.
    """
    closed = jax.make_jaxpr(fn)(*specs)
    check_supported(closed, registry, plugin_set, enclosing)
    return closed


def record_calls(closed: Any, path: str | os.PathLike[str]) -> None:
    """Write one line per equation (nested ones included): primitive, avals, params, line."""
    with open(path, "w", encoding="utf-8") as out:
        for eqn, line in iter_equations(closed):
            ins = ", ".join(v.aval.str_short() for v in eqn.invars)
            outs = ", ".join(v.aval.str_short() for v in eqn.outvars)
            params = {k: v for k, v in eqn.params.items() if "jaxpr" not in k}
            out.write(f"{eqn.primitive.name}\t({ins}) -> ({outs})\t{params}\t{line}\n")
