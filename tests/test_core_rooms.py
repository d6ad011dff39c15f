"""The core's rooms: the top level holds only the public doors, each room uses only the
rooms its ``__init__`` docstring names ("May use: ..."), and no module imports itself
back through others (no import cycle, nested imports counted; ``TYPE_CHECKING``
imports are not run and do not count).
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORE = ROOT / "packages/jax2onnx-core/src/jax2onnx"
DOORS = {"__init__.py", "plugin.py", "cli.py"}


def _module(path: pathlib.Path) -> str:
    parts = list(path.relative_to(CORE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in CORE.rglob("*.py")}


def _runtime_nodes(tree: ast.AST):
    """Every node except the bodies of ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _resolve(name: str) -> str | None:
    while name not in MODULES:
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]
    return name


def _imports(module: str) -> set[str]:
    """The core modules ``module`` imports when run (a ``from`` import of a submodule
    counts as that submodule, not its package)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        for target in targets:
            resolved = _resolve(target) if target.startswith("jax2onnx") else None
            if resolved and resolved != module:
                found.add(resolved)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (CORE / parts[1]).is_dir() else None


def _allowed(room: str) -> set[str]:
    doc = ast.get_docstring(ast.parse((CORE / room / "__init__.py").read_text(encoding="utf-8")))
    match = re.search(r"May use: ([^.]*)\.", doc or "")
    assert match, f"jax2onnx/{room}/__init__.py: its docstring must end with 'May use: ...'"
    named = {r.strip() for r in match.group(1).split(",")}
    return set() if named == {"nothing else of jax2onnx"} else named


def test_the_top_level_holds_only_the_public_doors():
    loose = {p.name for p in CORE.glob("*.py")} - DOORS
    assert not loose, f"put {sorted(loose)} in the room of their role"


def test_each_room_uses_only_the_rooms_it_names():
    rooms = sorted(p.name for p in CORE.iterdir() if (p / "__init__.py").is_file())
    wrong = []
    for room in rooms:
        allowed = _allowed(room) | {room}
        for module, imported in GRAPH.items():
            if _room(module) != room:
                continue
            for target in sorted(imported):
                other = _room(target)
                if other is None and target != "jax2onnx":
                    wrong.append(f"{module} -> {target} (a public door)")
                elif other is not None and other not in allowed:
                    wrong.append(f"{module} -> {target}")
    assert not wrong, "imports across rooms the docstrings do not allow:\n" + "\n".join(wrong)


def test_no_import_cycle():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert not cycles, f"modules that import each other (directly or through others): {cycles}"
