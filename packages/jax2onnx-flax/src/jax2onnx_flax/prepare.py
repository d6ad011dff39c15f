"""Turning an NNX module into a pure function ``to_onnx`` can trace.

``to_onnx(module, ...)`` (or a bound method such as ``model.encode``) calls
the module on a *copy* made inside the trace: the module is split into its
graph definition and state once, and the traced function merges them again
into new module and ``Variable`` objects (around the same arrays), switches
the copy to inference mode as ``model.eval()`` does (``Dropout`` is
identity, ``BatchNorm`` uses its running statistics; attributes of the
user's own, such as a ``training`` flag, are left as they are) and calls
it. The user's module is never mutated: whatever the call updates in place
(``BatchNorm`` statistics in a training branch, an RNG count) is updated on
the copy, which the trace owns, so it converts without ``TraceContextError``
and the update is not part of the export. The state's arrays are
referenced as they are (they become the model's initializers without a
copy).

A plain function that reaches modules through its closure cells or the
global names it loads, directly or through helper functions it calls
(``lambda x: model(x)`` at a script's top level; see :mod:`jax2onnx_flax.reach`),
gets the same treatment: a copy of it is called that reaches inference-mode
copies. A module reached any other way (an attribute of another object, a
container) is called as it is; if it tries to update its state while
traced, :func:`refusing_live_updates` turns Flax's ``TraceContextError``
into a :class:`~jax2onnx.plugin.UsageError` saying how to pass it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import sys
import traceback
from collections.abc import Iterator
from typing import Any

from jax2onnx.plugin import PrepareConfig, Prepared, UsageError, module_paths
from jax2onnx_flax import linen, reach

# Ids of the modules of the copies the running conversion calls (see is_prepared_copy).
_COPIES: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "jax2onnx_flax_prepared_copies", default=frozenset()
)


def as_module_call(obj: Any) -> tuple[Any, str | None] | None:
    """``(module, method name)`` when ``obj`` is an NNX module or a bound method of one."""
    from flax import nnx

    if isinstance(obj, nnx.Module):
        return obj, None
    owner = getattr(obj, "__self__", None)
    if isinstance(owner, nnx.Module) and callable(obj):
        return owner, obj.__name__
    return None


def prepare_function(fn: Any, config: PrepareConfig) -> Prepared | None:
    """A copy of the plain function ``fn`` calling inference-mode copies of the modules it
    reaches (``None`` when it reaches none).

    The modules are split together, so submodules they share stay shared in
    the copies; the functions' code, defaults and other globals are the user's own.
    """
    from flax import nnx

    found = reach.find(fn)
    if found is None:
        return None
    graphdef, state = nnx.split(tuple(found.modules))
    pinned = _pinned(config)

    def pure(*args: Any, **kwargs: Any) -> Any:
        copies = _inference_copies(graphdef, state, pinned)
        clone = reach.rebuild(found, copies)
        with _linen_inference(config), _calling(copies, found.labels):
            return clone(*args, **kwargs)

    _copy_signature(pure, fn)
    return Prepared(fn=pure, name=getattr(fn, "__qualname__", None))


def _inference_copies(graphdef: Any, state: Any, pinned: dict[str, bool]) -> Any:
    """New module objects over new Variables (the user's arrays), in inference mode.

    ``copy=True``: the copy's Variables are made here, inside the trace, so an
    update the model makes in place while traced touches the copy only (the
    user's Variables, made outside the trace, would raise ``TraceContextError``
    and would be changed).
    """
    from flax import nnx

    copies = nnx.merge(graphdef, state, copy=True)
    roots = copies if isinstance(copies, tuple) else (copies,)
    if pinned:
        for copy in roots:
            copy.set_attributes(**pinned, raise_if_not_found=False)
    linen.strip_bridge_rngs(roots)
    return copies


def _pinned(config: PrepareConfig) -> dict[str, bool]:
    """Switches the user passes as input_params stay runtime inputs: do not pin them (and a
    bool flag of the model's own, such as ``train``, leaves every switch to the model)."""
    return dict.fromkeys(sorted(linen.pinned_switches(config.input_params)), True)


def prepare_module(module: Any, method: str | None, config: PrepareConfig) -> Prepared:
    """A pure function calling an inference-mode copy of ``module``."""
    from flax import nnx

    if method is None and not callable(module):
        raise TypeError(
            f"{type(module).__name__} is an nnx.Module without __call__; pass the method to "
            f"export instead, e.g. to_onnx(model.{_first_method(module)}, ...)"
        )
    graphdef, state = nnx.split(module)
    pinned = _pinned(config)
    target_name = f"{type(module).__name__}.{method or '__call__'}"

    def pure(*args: Any, **kwargs: Any) -> Any:
        copy = _inference_copies(graphdef, state, pinned)
        call = getattr(copy, method) if method else copy
        with _linen_inference(config), _calling([copy], [""]):
            return call(*args, **kwargs)

    _copy_signature(pure, getattr(module, method) if method else module.__call__)
    return Prepared(fn=pure, name=target_name)


def is_prepared_copy(module: Any) -> bool:
    """Whether ``module`` belongs to a copy ``to_onnx`` made and is calling: state it
    updates in place is the copy's, and is not part of the export (a layer whose update
    *is* its purpose, such as an attention cache, refuses)."""
    return id(module) in _COPIES.get()


@contextlib.contextmanager
def _calling(roots: Any, names: Any) -> Iterator[None]:
    """While the copies are called: their module paths for the graph's metadata, and
    :func:`is_prepared_copy` for their modules."""
    paths = _paths(roots, names)
    token = _COPIES.set(_COPIES.get() | {id(module) for module, _ in paths})
    try:
        with module_paths(paths):
            yield
    finally:
        _COPIES.reset(token)


def _paths(roots: Any, names: Any) -> list[tuple[Any, str]]:
    """Each submodule of ``roots`` with its attribute path (``blocks.0.linear``), under
    the root's name (the closure variable's) when it has one; the first path wins for a
    shared submodule."""
    from flax import nnx

    found: dict[int, tuple[Any, str]] = {}
    for root, name in zip(roots, names):
        for path, node in nnx.iter_graph(root):
            if isinstance(node, nnx.Module) and id(node) not in found:
                dotted = ".".join(str(p) for p in (name, *path) if str(p))
                found[id(node)] = (node, dotted)
    return list(found.values())


def _linen_inference(config: PrepareConfig) -> Any:
    """Linen layers inside the module (``nnx.bridge.ToNNX``) run in inference mode too."""
    if "flax.linen" not in sys.modules:
        return contextlib.nullcontext()
    return linen.inference(config.input_params)


def _copy_signature(pure: Any, call: Any) -> None:
    """Give ``pure`` the signature of the module's call (input names come from it)."""
    import inspect

    try:
        pure.__signature__ = inspect.signature(call)
    except (TypeError, ValueError):
        return
    functools.update_wrapper(pure, call, assigned=("__doc__",), updated=())


def _first_method(module: Any) -> str:
    for name in dir(type(module)):
        if not name.startswith("_") and callable(getattr(type(module), name, None)):
            return name
    return "method"


# -- modules the preparation did not reach ----------------------------------------------


def refusing_live_updates() -> Any:
    """The tracing context (``Rules.tracing_context``) that explains a ``TraceContextError``.

    Every module ``to_onnx`` prepares is a copy the trace owns, so Flax raises
    ``TraceContextError`` only for an object of the user's that the
    preparation did not reach and that tries to update its state while traced.
    ``None`` while Flax NNX is not imported.
    """
    if "flax.nnx" not in sys.modules:
        return None
    return _refusing_live_updates()


@contextlib.contextmanager
def _refusing_live_updates() -> Iterator[None]:
    from flax import errors

    try:
        yield
    except errors.TraceContextError as err:
        line = _user_line(err.__traceback__)
        where = f" at {line}" if line else ""
        raise UsageError(
            "a Flax NNX object the converted function reaches other than as the object "
            "passed to to_onnx, a closure variable or a global name (through an attribute of "
            "another object, an item of a container, a jitted or partial function), or that "
            f"is not a module (an nnx.Rngs), tried to update its state while traced{where}; "
            "to_onnx never changes your objects, so only the modules it finds are copied and "
            "put in inference mode. Pass the module itself (to_onnx(model, ...) or a bound "
            "method), make it a global name or a closure variable of the function you "
            "convert, or call model.eval() on it before converting; draw random numbers from "
            f"a key passed as an input. Flax said: {str(err).splitlines()[0]}"
        ) from err


def _user_line(tb: Any) -> str | None:
    """The innermost line of the user's code in a traceback (``file:line (function)``):
    frames of installed libraries and of jax2onnx's packages are skipped."""
    ours = [
        os.path.join(os.path.dirname(os.path.abspath(module.__file__)), "")
        for name, module in list(sys.modules.items())
        if name.startswith("jax2onnx") and "." not in name and getattr(module, "__file__", None)
    ]
    for frame in reversed(traceback.extract_tb(tb)):
        path = os.path.abspath(frame.filename)
        if "site-packages" in path or "dist-packages" in path:
            continue
        if any(path.startswith(prefix) for prefix in ours):
            continue
        return f"{frame.filename}:{frame.lineno} ({frame.name})"
    return None
