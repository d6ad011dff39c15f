"""Turning Equinox objects into pure functions ``to_onnx`` can trace.

An ``eqx.Module`` is already a pure callable pytree: its arrays become the
model's initializers as they are. What the hook adds is *inference mode*: the
traced function calls ``eqx.nn.inference_mode(model)``, a new pytree with every
``inference`` field set (``Dropout`` is the identity, ``BatchNorm`` uses its
running statistics), so a model left in training mode exports as a user deploys
it, and the user's model is never touched (Equinox modules are immutable; the
copy shares the arrays).

Recognised objects:

- an ``eqx.Module`` that is callable: a layer or model, a bound method
  (``model.encode`` is an ``eqx`` ``BoundMethod``), an ``eqx.filter_jit`` or
  ``eqx.filter_vmap`` wrapper, an ``eqx.Partial``;
- ``(model, state)``: a stateful model (``eqx.nn.make_with_state``) with its
  ``eqx.nn.State``, called as ``model(*inputs, state)``;
- ``functools.partial`` of one of these, and a plain function whose closure
  holds modules (``lambda x: model(x) + 1``, ``jax.vmap(model)``).

A stateful model called without its state raises a ``UsageError`` that says how
to pass it: passed alone (before the core checks ``inputs`` against its
arguments), or called so by the function (``lambda x: model(x)``). A function
that reads a stateful model from its module's globals is traced as it is (not
in inference mode), wrapped only to name that error.

A returned ``eqx.nn.State`` is dropped from the outputs: in inference mode it
is the state passed in. ``input_params={"inference": flag}`` leaves the modules
as they are and passes ``inference=flag`` to the call as a runtime graph input.
"""

from __future__ import annotations

import functools
import inspect
import re
import types
from typing import Any

from jax2onnx.plugin import PrepareConfig, Prepared, UsageError, module_paths


def prepare(fn: Any, config: PrepareConfig) -> Prepared | None:
    """The hook's work: ``None`` for objects that hold no Equinox module."""
    import equinox as eqx

    pinned = "inference" not in config.input_params
    if isinstance(fn, tuple) and len(fn) == 2 and isinstance(fn[1], eqx.nn.State):
        model, state = fn
        if not callable(model):
            raise UsageError(
                f"to_onnx((model, state), ...): the model must be callable, got "
                f"{type(model).__name__}"
            )
        return _prepare_stateful(model, state, pinned)
    if isinstance(fn, eqx.Module) and callable(fn):
        _check_state_argument(fn)
        return _prepared(_inference(fn, pinned), fn, _name(fn))
    if isinstance(fn, functools.partial) and _holds_module(fn):
        inner = functools.partial(
            _inference(fn.func, pinned),
            *_inference(fn.args, pinned),
            **_inference(fn.keywords, pinned),
        )
        return _prepared(inner, fn, _name(fn.func))
    positions = _closed_over_modules(fn)
    if positions:
        return _prepare_closure(fn, positions, pinned)
    stateful = [m for m, _ in _paths(_global_modules(fn)) if _needs_state(m)]
    if stateful:  # traced as it is, only naming a missing state
        return _naming_missing_state(fn, stateful)
    return None


def _inference(tree: Any, pinned: bool) -> Any:
    import equinox as eqx

    return eqx.nn.inference_mode(tree, value=True) if pinned else tree


def _prepare_stateful(model: Any, state: Any, pinned: bool) -> Prepared:
    call = _inference(model, pinned)

    def pure(*args: Any, **kwargs: Any) -> Any:
        return call(*args, state, **kwargs)

    signature = _signature(model)
    if signature is not None:
        params = [p for p in signature.parameters.values() if p.name != "state"]
        signature = signature.replace(parameters=params)
    return _prepared(pure, model, _name(model), signature=signature)


def _prepared(call: Any, original: Any, name: str | None, signature: Any = None) -> Prepared:
    roots = _roots(call)

    def pure(*args: Any, **kwargs: Any) -> Any:
        paths = _paths(roots)
        with module_paths(paths):
            try:
                out = call(*args, **kwargs)
            except TypeError as err:
                missing = _missing_state(err, [m for m, _ in roots] + [m for m, _ in paths], name)
                if missing is None:
                    raise
                raise missing from err
            return _without_state(out)

    signature = signature if signature is not None else _signature(original)
    if signature is not None:
        pure.__signature__ = signature
    pure.__doc__ = getattr(original, "__doc__", None)
    return Prepared(fn=pure, name=name)


def _roots(call: Any) -> list[tuple[Any, str]]:
    """The modules a prepared call holds, with the names they go by: the module itself
    (no name), a partial's function and arguments, a clone's closure variables."""
    if isinstance(call, functools.partial):
        return [(call.func, ""), *((a, "") for a in call.args), *call.keywords.items()]
    if isinstance(call, types.FunctionType) and call.__closure__:
        cells = zip(call.__code__.co_freevars, call.__closure__)
        return [(cell.cell_contents, name) for name, cell in cells if _filled(cell)]
    return [(call, "")]


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _paths(roots: list[tuple[Any, str]]) -> list[tuple[Any, str]]:
    """Every Equinox module under ``roots`` with its field path (``layers.0.linear``);
    the first path wins for a module held twice."""
    import dataclasses

    import equinox as eqx

    found: dict[int, tuple[Any, str]] = {}

    def visit(node: Any, path: str, depth: int) -> None:
        if depth > 64:
            return
        join = (lambda key: f"{path}.{key}") if path else str
        if isinstance(node, eqx.Module):
            if id(node) in found:
                return
            if path:
                found[id(node)] = (node, path)
            for field in dataclasses.fields(node):
                visit(getattr(node, field.name, None), join(field.name), depth + 1)
        elif isinstance(node, (list, tuple)):
            for i, item in enumerate(node):
                visit(item, join(i), depth + 1)
        elif isinstance(node, dict):
            for key, item in node.items():
                visit(item, join(key), depth + 1)

    for root, name in roots:
        visit(root, name, 0)
    return list(found.values())


def _without_state(out: Any) -> Any:
    """``(y, state)`` -> ``y``: an inference-mode call returns the state it was given."""
    import equinox as eqx

    if isinstance(out, tuple) and len(out) >= 2 and isinstance(out[-1], eqx.nn.State):
        return out[0] if len(out) == 2 else out[:-1]
    return out


def _check_state_argument(module: Any) -> None:
    """A stateful model passed alone: say how to pass its state."""
    if _needs_state(module):
        raise UsageError(
            f"{_name(module)} takes a `state` argument (an eqx.nn.State): pass the model with "
            f"its state, to_onnx((model, state), inputs), and the state's arrays become the "
            f"model's initializers"
        )


def _needs_state(module: Any) -> bool:
    """Whether calling ``module`` needs a ``state`` argument (``eqx.nn.make_with_state``)."""
    signature = _signature(module)
    param = signature.parameters.get("state") if signature is not None else None
    return param is not None and param.default is inspect.Parameter.empty


# Python's message for a call without a required argument: "Net.__call__() missing 1
# required positional argument: 'state'"
_MISSING_ARGUMENT = re.compile(r"(?P<callee>[\w.<>]+)\(\) missing \d+ required positional argument")


_IN_THE_CALL = "pass it in the call, model(x, state)[0]"
# a module read from the function's globals is traced as it is, not in inference mode
_IN_THE_CALL_GLOBAL = (
    "pass it in the call with the model in inference mode (jax2onnx sets it only for modules "
    "passed to to_onnx or closed over, not for globals), "
    "eqx.nn.inference_mode(model)(x, state)[0]"
)


def _missing_state(
    err: TypeError, modules: list[Any], fn_name: str | None, in_the_call: str = _IN_THE_CALL
) -> UsageError | None:
    """The error to raise for ``err`` if it is a stateful module called without its state."""
    import equinox as eqx

    found = _MISSING_ARGUMENT.match(str(err))
    if found is None or "'state'" not in str(err):
        return None
    for module in modules:
        if not (isinstance(module, eqx.Module) and callable(module)):
            continue
        if type(module).__call__.__qualname__ == found["callee"] and _needs_state(module):
            return UsageError(
                f"fn {fn_name or '(unnamed)'} calls {_name(module)} without its `state` "
                f"argument (an eqx.nn.State, made by eqx.nn.make_with_state): {in_the_call}, "
                f"or convert the model itself with its state, to_onnx((model, state), "
                f"inputs); the state's arrays become the model's initializers"
            )
    return None


def _naming_missing_state(fn: Any, modules: list[Any]) -> Prepared:
    """``fn`` as it is, but a call of a stateful module in ``modules`` (read from
    ``fn``'s globals) without its state raises the `UsageError` that says how to pass it."""
    name = getattr(fn, "__qualname__", None)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TypeError as err:
            missing = _missing_state(err, modules, name, _IN_THE_CALL_GLOBAL)
            if missing is None:
                raise
            raise missing from err

    return Prepared(fn=call, name=name)


def _global_modules(fn: Any) -> list[tuple[Any, str]]:
    """The Equinox modules a plain function reads from its module's globals, by name."""
    import equinox as eqx

    if not isinstance(fn, types.FunctionType):
        return []
    names: set[str] = set()

    def collect(code: types.CodeType) -> None:
        names.update(code.co_names)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):  # nested functions and lambdas
                collect(const)

    collect(fn.__code__)
    found = ((fn.__globals__.get(name), name) for name in sorted(names))
    return [(value, name) for value, name in found if isinstance(value, eqx.Module)]


def _holds_module(tree: Any) -> bool:
    import equinox as eqx
    import jax

    leaves = jax.tree_util.tree_leaves(
        (tree.func, tree.args, tree.keywords), is_leaf=lambda x: isinstance(x, eqx.Module)
    )
    return any(isinstance(leaf, eqx.Module) for leaf in leaves)


def _closed_over_modules(fn: Any) -> list[int]:
    """Positions of the closure cells of a plain function that hold Equinox modules."""
    import equinox as eqx

    if not isinstance(fn, types.FunctionType) or not fn.__closure__:
        return []
    found = []
    for i, cell in enumerate(fn.__closure__):
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(contents, eqx.Module):
            found.append(i)
        elif isinstance(contents, types.FunctionType) and _closed_over_modules(contents):
            found.append(i)  # jax.vmap(model) and other wrappers close over the module
    return found


def _prepare_closure(fn: Any, positions: list[int], pinned: bool) -> Prepared:
    """A copy of ``fn`` whose closed-over modules (or wrapped functions) are inference-mode."""
    cells = fn.__closure__
    replaced = {i: _closure_value(cells[i].cell_contents, pinned) for i in positions}
    closure = tuple(
        types.CellType(replaced[i]) if i in replaced else cell for i, cell in enumerate(cells)
    )
    clone = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    clone.__kwdefaults__ = fn.__kwdefaults__
    clone.__dict__.update(fn.__dict__)  # functools.wraps' __wrapped__ and the like
    return _prepared(clone, fn, getattr(fn, "__qualname__", None))


def _closure_value(value: Any, pinned: bool) -> Any:
    import equinox as eqx

    if isinstance(value, eqx.Module):
        return _inference(value, pinned)
    positions = _closed_over_modules(value)
    return _prepare_closure(value, positions, pinned).fn


def _signature(obj: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def _name(obj: Any) -> str | None:
    self = getattr(obj, "__self__", None)
    if self is not None and hasattr(obj, "__func__"):
        return f"{type(self).__name__}.{obj.__func__.__name__}"
    return type(obj).__name__
