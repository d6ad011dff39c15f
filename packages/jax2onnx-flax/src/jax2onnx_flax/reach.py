"""Which NNX modules a plain function reaches, and a copy of it that reaches copies.

A function given to ``to_onnx`` may call a module it never receives as an
argument: one held in a closure cell (``make_scaled(model)`` returning
``lambda x: model(x) * 2``), one named as a global (``lambda x: model(x)``
typed at a script's top level or in a notebook), or one a helper function it
calls reaches in the same ways (``lambda x: predict(x)`` with ``predict``
using the global ``model``; ``jax.vmap(model)`` closes over it). :func:`find`
walks these references: a function's closure cells, and the global names its
code (and the code of functions and lambdas nested in it) loads, followed
into every plain Python function found there, at most :data:`BUDGET`
functions. Attributes of other objects, containers, ``functools.partial``
and jitted functions are not looked into.

:func:`rebuild` makes, from the modules' copies, a copy of every function
on a path to a module: the same code, its cells replaced where they held a
module or such a function, and, where a global name is replaced, a shallow
copy of its globals (so a ``global`` statement in it writes to the copy).
The user's functions, cells and module namespaces are never changed.
"""

from __future__ import annotations

import dataclasses
import dis
import types
from collections.abc import Iterator
from typing import Any

BUDGET = 512  # plain functions looked into at most, per conversion

_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})


@dataclasses.dataclass
class Reach:
    """The modules a function reaches and the references that lead to them.

    ``cells[f][i]`` and ``names[f][name]`` are the targets that replace closure
    cell ``i`` and global ``name`` of function ``f`` (by ``id``): ``("module", k)``
    for ``modules[k]``, ``("function", id)`` for the copy of that function.
    """

    root: types.FunctionType
    functions: dict[int, types.FunctionType]
    modules: list[Any]
    labels: list[str]
    cells: dict[int, dict[int, tuple[str, int]]]
    names: dict[int, dict[str, tuple[str, int]]]


def find(fn: Any) -> Reach | None:
    """The modules ``fn`` reaches (see the module docstring), ``None`` when none."""
    from flax import nnx

    if not isinstance(fn, types.FunctionType):
        return None
    edges: dict[int, list[tuple[str, Any, Any]]] = {}
    functions: dict[int, types.FunctionType] = {}
    queue = [fn]
    while queue and len(functions) < BUDGET:
        f = queue.pop(0)
        if id(f) in functions:
            continue
        functions[id(f)] = f
        edges[id(f)] = []
        for kind, key, value in _references(f):
            if isinstance(value, nnx.Module) or isinstance(value, types.FunctionType):
                edges[id(f)].append((kind, key, value))
                if isinstance(value, types.FunctionType) and id(value) not in functions:
                    queue.append(value)
    reaching = _reaching(edges, nnx.Module)
    if id(fn) not in reaching:
        return None
    found = Reach(fn, {}, [], [], {}, {})
    index: dict[int, int] = {}
    for fid in reaching:
        found.functions[fid] = functions[fid]
        found.cells[fid], found.names[fid] = {}, {}
        for kind, key, value in edges[fid]:
            if isinstance(value, nnx.Module):
                if id(value) not in index:
                    index[id(value)] = len(found.modules)
                    found.modules.append(value)
                    found.labels.append(_label(functions[fid], kind, key))
                target = ("module", index[id(value)])
            elif id(value) in reaching:
                target = ("function", id(value))
            else:
                continue
            (found.cells if kind == "cell" else found.names)[fid][key] = target
    return found


def rebuild(found: Reach, copies: tuple[Any, ...]) -> types.FunctionType:
    """The copy of ``found.root`` whose references lead to ``copies`` (see the docstring)."""
    cells = {fid: {i: types.CellType() for i in found.cells[fid]} for fid in found.functions}
    spaces: dict[int, dict[str, Any]] = {}
    clones: dict[int, types.FunctionType] = {}
    for fid, f in found.functions.items():
        space = f.__globals__
        if found.names[fid]:
            space = spaces.setdefault(id(f.__globals__), dict(f.__globals__))
        closure = f.__closure__
        if closure is not None:
            closure = tuple(cells[fid].get(i, cell) for i, cell in enumerate(closure))
        clone = types.FunctionType(f.__code__, space, f.__name__, f.__defaults__, closure)
        clone.__kwdefaults__ = f.__kwdefaults__
        clone.__qualname__ = f.__qualname__
        clone.__dict__.update(f.__dict__)  # functools.wraps' __wrapped__ and the like
        clones[fid] = clone

    def value(target: tuple[str, int]) -> Any:
        kind, key = target
        return copies[key] if kind == "module" else clones[key]

    for fid, f in found.functions.items():
        for i, target in found.cells[fid].items():
            cells[fid][i].cell_contents = value(target)
        for name, target in found.names[fid].items():
            spaces[id(f.__globals__)][name] = value(target)
    return clones[id(found.root)]


def _references(f: types.FunctionType) -> Iterator[tuple[str, Any, Any]]:
    """``(kind, key, value)`` for each closure cell (``"cell"``, position) and each global
    name the code loads (``"name"``, name) that is bound."""
    for i, cell in enumerate(f.__closure__ or ()):
        try:
            yield "cell", i, cell.cell_contents
        except ValueError:  # an empty cell
            continue
    space = f.__globals__
    for name in sorted(_global_loads(f.__code__)):
        if name in space:
            yield "name", name, space[name]


def _global_loads(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the code nested in it (lambdas, inner functions,
    comprehensions, which share its globals) load."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in _LOADS}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_loads(const)
    return names


def _reaching(edges: dict[int, list[tuple[str, Any, Any]]], module_type: type) -> list[int]:
    """The functions (ids, in the order found) from which a module is reachable."""
    reaching = {
        fid for fid, out in edges.items() if any(isinstance(v, module_type) for *_, v in out)
    }
    grew = True
    while grew:
        grew = False
        for fid, out in edges.items():
            if fid not in reaching and any(id(v) in reaching for *_, v in out):
                reaching.add(fid)
                grew = True
    return [fid for fid in edges if fid in reaching]


def _label(f: types.FunctionType, kind: str, key: Any) -> str:
    """The module's name in the graph's metadata: the closure variable or global name."""
    return f.__code__.co_freevars[key] if kind == "cell" else key
