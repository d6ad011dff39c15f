"""One release train: every distribution shares one version and our packages pin each other."""

from __future__ import annotations

import ast
import pathlib
import re
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = sorted(p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())
EXAMPLES = sorted(p for p in (ROOT / "examples").iterdir() if (p / "pyproject.toml").is_file())
EXPECTED_PACKAGES = {"core", "lax", "nn", "flax", "equinox", "testkit"}
_REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<spec>.*)$"
)


def _project(path: pathlib.Path) -> dict:
    with open(path / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _root_version() -> str:
    return _project(ROOT)["version"]


def _requirements(project: dict) -> list[str]:
    found = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        found.extend(extra)
    return found


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_package_folder_is_expected():
    assert {p.name.removeprefix("jax2onnx-") for p in PACKAGES} == EXPECTED_PACKAGES
    for path in PACKAGES:
        assert _project(path)["name"] == path.name


@pytest.mark.parametrize("path", [*PACKAGES, *EXAMPLES], ids=lambda p: p.name)
def test_one_version_for_every_distribution(path):
    assert _project(path)["version"] == _root_version(), (
        f"{path.name} has version {_project(path)['version']}, the root {_root_version()}"
    )


@pytest.mark.parametrize("path", PACKAGES, ids=lambda p: p.name)
def test_sibling_dependencies_are_pinned_exactly(path):
    version = _root_version()
    siblings = []
    for requirement in _requirements(_project(path)):
        requirement = requirement.split(";")[0]
        match = _REQUIREMENT.match(requirement)
        assert match, f"{path.name}: cannot parse requirement {requirement!r}"
        name = _normalize(match["name"])
        if name.startswith("jax2onnx-") or name == "jax2onnx":
            siblings.append(name)
            assert match["spec"].replace(" ", "") == f"=={version}", (
                f"{path.name} depends on {requirement!r}; pin our own packages as {name}=={version}"
            )
    if path.name != "jax2onnx-core":
        assert "jax2onnx-core" in siblings, f"{path.name} must depend on jax2onnx-core"


def test_meta_package_lists_every_package():
    tree = ast.parse((ROOT / "hatch_build.py").read_text(encoding="utf-8"))
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in ("CORE", "EXTRAS"):
                    values[target.id] = ast.literal_eval(node.value)
    assert set(values) == {"CORE", "EXTRAS"}, "hatch_build.py must define CORE and EXTRAS"
    # "equinox[test]": a package with one of its own extras
    listed = set(values["CORE"]) | {
        s.partition("[")[0] for group in values["EXTRAS"].values() for s in group
    }
    on_disk = {p.name.removeprefix("jax2onnx-") for p in PACKAGES}
    assert listed == on_disk == EXPECTED_PACKAGES
    assert {"core", "lax", "nn"} <= set(values["CORE"])


def test_examples_depend_on_the_released_core():
    for path in EXAMPLES:
        names = [_normalize(_REQUIREMENT.match(r)["name"]) for r in _requirements(_project(path))]
        assert "jax2onnx-core" in names, f"{path.name} must depend on jax2onnx-core"
