"""The plugin API is the only way across distributions, and the code keeps its shape.

* A plugin distribution imports of jax2onnx only ``jax2onnx`` (its public
  names) and ``jax2onnx.plugin``, and of another plugin only public modules
  and names (no ``_private``); the core imports no plugin.
* No source module is longer than 600 lines.
* Lowering rules stay small: the median body is at most four lines.
* Every plugin builds a new ``Rules`` per load, frozen once loaded.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import statistics
import textwrap

import pytest

import jax2onnx
from jax2onnx.frontend.loading import PluginSet

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_LINES = 600
MAX_MEDIAN_BODY = 4


def _sources() -> dict[str, list[pathlib.Path]]:
    """Import package name -> its source files, for every distribution in the repo."""
    found: dict[str, list[pathlib.Path]] = {}
    for src in [*ROOT.glob("packages/*/src"), *ROOT.glob("examples/*/src")]:
        for package in src.iterdir():
            if package.is_dir() and (package / "__init__.py").is_file():
                found[package.name] = sorted(package.rglob("*.py"))
    return found


SOURCES = _sources()
PACKAGES = set(SOURCES)


def _imports(path: pathlib.Path):
    """``(line, module, imported names)`` of every import in the file, nested ones too."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, tuple(a.name for a in node.names)


def _violations(package: str, path: pathlib.Path) -> list[str]:
    found = []
    where = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    for line, module, names in _imports(path):
        top = module.split(".", 1)[0]
        if top not in PACKAGES or top == package:
            continue
        if package == "jax2onnx":
            found.append(f"{where}:{line}: the core imports plugin {module}")
        elif top == "jax2onnx":
            if module == "jax2onnx.plugin":
                continue
            if module == "jax2onnx" and all(n in jax2onnx.__all__ for n in names):
                continue
            found.append(f"{where}:{line}: {module} {names or ''} is not the public plugin API")
        elif any(part.startswith("_") for part in module.split(".")) or any(
            n.startswith("_") for n in names
        ):
            found.append(f"{where}:{line}: private name of another plugin: {module} {names}")
    return found


def test_distributions_meet_only_through_public_api():
    problems = [
        problem
        for package, files in SOURCES.items()
        for path in files
        for problem in _violations(package, path)
    ]
    assert not problems, "\n".join(problems)


def test_the_boundary_check_catches_a_private_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from jax2onnx.values.dtypes import onnx_dtype\n"
        "from jax2onnx_lax._util import reshape\n"
        "def f():\n    import jax2onnx_testkit.check\n"
    )
    problems = _violations("jax2onnx_nn", bad)
    assert len(problems) == 2 and "jax2onnx.values.dtypes" in problems[0]
    assert "jax2onnx_lax._util" in problems[1]
    assert len(_violations("jax2onnx", bad)) == 2  # the core imports no plugin at all


@pytest.mark.parametrize("package", sorted(SOURCES))
def test_no_source_module_is_over_600_lines(package):
    long = {
        str(p.relative_to(ROOT)): n
        for p in SOURCES[package]
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"split these along their seams: {long}"


def _body_lines(fn) -> int | None:
    """Lines of ``fn``'s body without its docstring (None when the source is unavailable)."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None
    tree = ast.parse(source)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        return None
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body:
        return 0
    return body[-1].end_lineno - body[0].lineno + 1


def test_lowering_bodies_stay_small():
    seen, sizes = set(), []
    for plugin in jax2onnx.plugins().plugins:
        for lowering in plugin.rules.lowerings if plugin.rules else ():
            if id(lowering.fn) in seen:
                continue
            seen.add(id(lowering.fn))
            size = _body_lines(lowering.fn)
            if size is not None:
                sizes.append(size)
    assert len(sizes) > 200
    median = statistics.median(sizes)
    assert median <= MAX_MEDIAN_BODY, f"median lowering body {median} lines > {MAX_MEDIAN_BODY}"


def test_every_plugin_builds_new_frozen_rules_per_load():
    first, second = PluginSet.load(), PluginSet.load()
    by_name = {p.name: p.rules for p in second.plugins}
    for plugin in first.plugins:
        if plugin.rules is None:
            continue
        assert plugin.rules.frozen, plugin.name
        assert by_name[plugin.name] is not plugin.rules, f"{plugin.name} returns one global Rules"
        with pytest.raises(RuntimeError, match="frozen"):
            plugin.rules.add_cases("x", [])
