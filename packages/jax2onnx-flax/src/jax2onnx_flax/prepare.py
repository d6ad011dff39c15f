"""Turning an NNX module into a pure function ``to_onnx`` can trace.

``to_onnx(module, ...)`` (or a bound method such as ``model.encode``) calls
the module on a *copy* made inside the trace: the module is split into its
graph definition and state once, and the traced function merges them again,
switches the copy to inference mode (``Dropout`` is identity, ``BatchNorm``
uses its running statistics) and calls it. The user's module is never
mutated, a module left in training mode converts without
``TraceContextError``, and the state's arrays are referenced as they are
(they become the model's initializers without a copy). A plain function
whose closure holds modules (``lambda x: model(x) + 1``) gets the same
treatment: it is called with inference-mode copies in those cells.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from typing import Any

from jax2onnx.plugin import PrepareConfig, Prepared, module_paths
from jax2onnx_flax import linen


def as_module_call(obj: Any) -> tuple[Any, str | None] | None:
    """``(module, method name)`` when ``obj`` is an NNX module or a bound method of one."""
    from flax import nnx

    if isinstance(obj, nnx.Module):
        return obj, None
    owner = getattr(obj, "__self__", None)
    if isinstance(owner, nnx.Module) and callable(obj):
        return owner, obj.__name__
    return None


def closed_over_modules(fn: Any) -> list[int]:
    """Positions of the closure cells of a plain function that hold NNX modules."""
    from flax import nnx

    if not isinstance(fn, types.FunctionType) or not fn.__closure__:
        return []
    found = []
    for i, cell in enumerate(fn.__closure__):
        try:
            if isinstance(cell.cell_contents, nnx.Module):
                found.append(i)
        except ValueError:  # an empty cell
            continue
    return found


def prepare_closure(fn: Any, positions: list[int], config: PrepareConfig) -> Prepared:
    """A copy of ``fn`` whose closed-over modules are inference-mode copies.

    The modules are split together, so submodules they share stay shared in
    the copies; the function's code, globals and defaults are the user's own.
    """
    from flax import nnx

    cells = fn.__closure__
    modules = tuple(cells[i].cell_contents for i in positions)
    names = tuple(fn.__code__.co_freevars[i] for i in positions)
    graphdef, state = nnx.split(modules)
    pinned = _pinned(config)

    def pure(*args: Any, **kwargs: Any) -> Any:
        copies = nnx.merge(graphdef, state)
        if pinned:
            for copy in copies:
                copy.set_attributes(**pinned, raise_if_not_found=False)
        linen.strip_bridge_rngs(copies)
        replaced = dict(zip(positions, copies))
        closure = tuple(
            types.CellType(replaced[i]) if i in replaced else cell for i, cell in enumerate(cells)
        )
        clone = types.FunctionType(
            fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, closure
        )
        clone.__kwdefaults__ = fn.__kwdefaults__
        with _linen_inference(config), module_paths(_paths(copies, names)):
            return clone(*args, **kwargs)

    _copy_signature(pure, fn)
    return Prepared(fn=pure, name=getattr(fn, "__qualname__", None))


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
        copy = nnx.merge(graphdef, state)
        if pinned:
            copy.set_attributes(**pinned, raise_if_not_found=False)
        linen.strip_bridge_rngs([copy])
        call = getattr(copy, method) if method else copy
        with _linen_inference(config), module_paths(_paths([copy], [""])):
            return call(*args, **kwargs)

    _copy_signature(pure, getattr(module, method) if method else module.__call__)
    return Prepared(fn=pure, name=target_name)


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
