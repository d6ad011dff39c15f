"""pytest plugin: parametrise any test that takes ``jax2onnx_case``.

The cases come from the plugins of the distribution the test file belongs to
(the entry points in the nearest ``pyproject.toml``; ``jax2onnx-core`` means
the core plugin). A test module may instead name plugins with
``jax2onnx_plugins = ["lax"]`` or bring its own ``Rules`` objects with
``jax2onnx_rules = [rules]`` (used as ``extra_rules`` in the conversions).
"""

from __future__ import annotations

import json
import pathlib
import tomllib

import pytest

_TIMINGS = pytest.StashKey["_TimingRecorder"]()


def pytest_addoption(parser):
    parser.addoption(
        "--quick",
        action="store_true",
        default=False,
        help="the development loop: one variant per jax2onnx case (the symbolic one where the "
        "case has symbolic dimensions, else its first precision), tests marked full_suite "
        "deselected, and JAX's compiled programs kept in .jax_cache/ for the next run",
    )
    parser.addoption(
        "--jax2onnx-timings",
        metavar="FILE",
        default=None,
        help="append one JSON line per test to FILE: its seconds (setup, call, teardown), and "
        "for jax2onnx cases the seconds of each check phase (benchmarks/suite_durations.py "
        "reads it)",
    )


class _TimingRecorder:
    """Writes the ``--jax2onnx-timings`` lines of this process.

    Test durations are written where every report arrives (the xdist controller,
    or the only process); check phases by the process that ran the check.
    """

    def __init__(self, path: pathlib.Path, *, worker: bool) -> None:
        from jax2onnx_testkit.timing import CompileMeter

        self.path = path
        self.worker = worker  # an xdist worker: its reports reach the controller
        self.meter = CompileMeter()
        self.meter.install()

    def write(self, line: dict) -> None:
        with open(self.path, "a") as f:  # one short write per line: processes interleave whole
            f.write(json.dumps(line) + "\n")

    def pytest_runtest_logreport(self, report):
        if self.worker:
            return  # the controller writes it, with the worker's name
        node = getattr(report, "node", None)
        worker = node.gateway.id if node is not None else "main"
        self.write(
            {
                "id": report.nodeid,
                "worker": worker,
                "when": report.when,
                "outcome": report.outcome,
                "seconds": report.duration,
                "start": report.start,
            }
        )

    def pytest_unconfigure(self, config):
        self.meter.uninstall()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "full_suite: a test that runs in the full suite only, not under --quick "
        "(the opset matrix, the docs pages, the site build)",
    )
    if config.getoption("--quick", False):
        _compilation_cache(pathlib.Path(str(config.rootpath)) / ".jax_cache")
    path = config.getoption("--jax2onnx-timings", None)
    if path is not None:
        recorder = _TimingRecorder(
            pathlib.Path(path).resolve(), worker=hasattr(config, "workerinput")
        )
        config.stash[_TIMINGS] = recorder
        config.pluginmanager.register(recorder, "jax2onnx-timings")


def _compilation_cache(directory: pathlib.Path) -> None:
    """``--quick`` keeps JAX's compiled programs in ``directory`` for the next run.

    Every program is kept (CPU programs compile in well under the default
    one-second threshold). Set through the environment, which the xdist
    workers inherit, and JAX's config where JAX is already imported; a cache
    directory the user set is left alone.
    """
    import os
    import sys

    settings = {
        "jax_compilation_cache_dir": str(directory),
        "jax_persistent_cache_min_compile_time_secs": "0",
        "jax_persistent_cache_min_entry_size_bytes": "0",
    }
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    for name, value in settings.items():
        os.environ[name.upper()] = value
    if "jax" in sys.modules:
        import jax

        jax.config.update("jax_compilation_cache_dir", str(directory))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--quick", False):
        return
    kept, deselected = [], []
    for item in items:
        (deselected if item.get_closest_marker("full_suite") else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def quick_variants(variants):
    """One variant per case: the symbolic one where there is one, else the first.

    What ``--quick`` runs. The symbolic variant converts with symbolic
    dimensions and runs at two sizes, so it reaches the most code of a case.
    """
    chosen: dict[tuple[str, str, str], object] = {}
    for variant in variants:
        key = (variant.plugin, variant.component, variant.case.name)
        if key not in chosen or (variant.dynamic and not chosen[key].dynamic):
            chosen[key] = variant
    return list(chosen.values())


def _distribution_plugins(test_file: str) -> list[str]:
    for folder in pathlib.Path(test_file).resolve().parents:
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            project = tomllib.loads(pyproject.read_text()).get("project", {})
            if project.get("name") == "jax2onnx-core":
                return ["core"]
            return sorted(project.get("entry-points", {}).get("jax2onnx", {}))
    return []


def collect_variants(plugin_names, extra_rules=()):
    """Every variant of every case of the named plugins and of ``extra_rules``.

    Reading a plugin's cases builds them (its case functions run now).
    Raises ``pytest.UsageError`` when a named plugin is not loaded, when its
    cases cannot be built (naming the plugin, the component and the line),
    or when two cases have the same id.
    """
    import jax2onnx
    from jax2onnx.plugin import CaseError
    from jax2onnx_testkit.check import variants_of

    loaded = {p.name: p for p in jax2onnx.plugins().plugins}
    missing = [n for n in plugin_names if n not in loaded]
    if missing:
        failures = "; ".join(f.describe() for f in jax2onnx.plugins().failures) or "none"
        raise pytest.UsageError(
            f"jax2onnx plugins {missing} are not loaded (failures: {failures}); "
            "install the distribution that provides them"
        )
    sources = [(n, loaded[n].rules) for n in plugin_names if loaded[n].rules is not None]
    for name, rules in sources:
        _check_manifest(loaded[name], rules)
    sources += [(r.name, r) for r in extra_rules]
    variants = []
    for plugin, rules in sources:
        try:
            cases = rules.cases  # the plugin's case functions run here, not at load
        except CaseError as err:
            raise pytest.UsageError(str(err)) from err
        for component, case in cases:
            variants.extend(variants_of(plugin, component, case, extra_rules))
    seen: set[str] = set()
    for variant in variants:
        if variant.id in seen:
            raise pytest.UsageError(
                f"two jax2onnx cases have the id {variant.id!r}: case names must be unique "
                "within their component"
            )
        seen.add(variant.id)
    return variants


def _check_manifest(plugin, rules) -> None:
    """Refuse to test a plugin whose deferred-module manifest no longer matches its modules."""
    import importlib

    from jax2onnx.plugin import stale_manifest

    if not rules.manifest:
        return
    module = importlib.import_module(plugin.module)
    package = plugin.module.rpartition(".")[0]
    listed = [f"{package}.{n}" if package else n for n in getattr(module, "FAMILIES", ())]
    problems = stale_manifest(rules.name, rules.manifest, listed)
    if problems:
        raise pytest.UsageError(
            f"the manifest of jax2onnx plugin {rules.name!r} is stale; regenerate it with "
            f"`jax2onnx manifest {plugin.name}`: " + "; ".join(problems)
        )


def pytest_generate_tests(metafunc):
    """Parametrise ``jax2onnx_case`` with every `CaseVariant` the test module selects.

    A case's ``skip`` becomes a skip mark and its ``xfail`` a strict xfail
    mark, each with its reason; the test ids are the variant ids. Under
    ``--quick``, one variant per case (`quick_variants`).
    """
    if "jax2onnx_case" not in metafunc.fixturenames:
        return
    module = metafunc.module
    extra = tuple(getattr(module, "jax2onnx_rules", ()))
    names = getattr(module, "jax2onnx_plugins", None)
    if names is None:
        names = [] if extra else _distribution_plugins(str(metafunc.definition.path))
    variants = collect_variants(list(names), extra)
    if metafunc.config.getoption("--quick", False):
        variants = quick_variants(variants)
    params = []
    for variant in variants:
        marks = []
        if variant.case.skip:
            marks.append(pytest.mark.skip(reason=variant.case.skip))
        if variant.case.xfail:
            marks.append(pytest.mark.xfail(reason=variant.case.xfail, strict=True))
        params.append(pytest.param(variant, id=variant.id, marks=marks))
    metafunc.parametrize("jax2onnx_case", params)


@pytest.fixture
def check_case(request):
    """The testkit's `check_case` function, as a fixture.

    Example:
        ```python
        def test_case(jax2onnx_case, check_case):
            check_case(jax2onnx_case)
        ```
    """
    from jax2onnx_testkit.check import check_case as check

    recorder = request.config.stash.get(_TIMINGS, None)
    if recorder is None:
        return check

    from jax2onnx_testkit.timing import PhaseClock

    def timed(variant, **kwargs):
        clock = PhaseClock(recorder.meter)
        try:
            return check(variant, clock=clock, **kwargs)
        finally:
            recorder.write({"id": request.node.nodeid, "phases": clock.times})

    return timed
