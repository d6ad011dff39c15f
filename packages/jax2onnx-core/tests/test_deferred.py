"""Deferred family modules: imported when a conversion needs them, checked against the manifest."""

from __future__ import annotations

import importlib
import itertools
import subprocess
import sys
import textwrap
import threading

import numpy as np
import onnxruntime as ort
import pytest

import jax2onnx
from jax2onnx.plugin import (
    PluginConflictError,
    PluginLoadError,
    Rules,
    stale_manifest,
)
from jax2onnx.registration.registry import Registry

_COUNTER = itertools.count()

# a library defining its own primitive, as equinox does; the plugin lowers it
LIBRARY = """
import jax
from jax.extend.core import Primitive

triple_p = Primitive("{prefix}_triple")
triple_p.def_impl(lambda x: 3 * x)
triple_p.def_abstract_eval(lambda x: jax.core.ShapedArray(x.shape, x.dtype))

def triple(x):
    return triple_p.bind(x)

def double(x):
    return 2 * x
"""

# the family lowering the library's primitive
LOWERS = """
import numpy as np
from jax2onnx.plugin import Family

family = Family("{plugin}")

@family.lowering("{prefix}_triple"{options})
def triple(ctx, x):
    return ctx.op.Mul(x, ctx.const(np.asarray(3, np.float32)))

register = family.register
"""

# a family intercepting the library's function with a macro primitive of its own
INTERCEPTS = """
from jax2onnx.plugin import Family

family = Family("{plugin}")
double_p = family.primitive("double", impl=lambda x: 2 * x, batching="elementwise")
family.intercept("{prefix}_lib.double", double_p)

@family.lowering(double_p)
def double(ctx, x):
    return ctx.op.Add(x, x)

register = family.register
"""


def write_package(tmp_path, monkeypatch, *, plugin="mini", options="", extra=None):
    """A library and two family modules under a fresh prefix; returns (prefix, manifest)."""
    prefix = f"j2o_deferred_{next(_COUNTER)}"
    files = {
        f"{prefix}_lib": LIBRARY,
        f"{prefix}_lowers": LOWERS,
        f"{prefix}_intercepts": INTERCEPTS,
        **(extra or {}),
    }
    for name, text in files.items():
        body = text.format(prefix=prefix, plugin=plugin, options=options)
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    manifest = {
        f"{prefix}_lowers": {"lowers": [f"{prefix}_triple"]},
        f"{prefix}_intercepts": {
            "lowers": [f"{plugin}.double"],
            "intercepts": [f"{prefix}_lib.double"],
        },
    }
    return prefix, manifest


def deferred_rules(manifest, plugin="mini") -> Rules:
    rules = Rules(plugin)
    rules.defer(manifest)
    return rules


def run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def test_a_deferred_module_loads_when_its_primitive_is_converted(tmp_path, monkeypatch):
    prefix, manifest = write_package(tmp_path, monkeypatch)
    # a module that does not exist: importing it would fail the conversion
    manifest[f"{prefix}_never"] = {"lowers": [f"{prefix}_never"]}
    rules = deferred_rules(manifest)
    assert {f.module for f in rules.deferred} == set(manifest)
    assert f"{prefix}_lowers" not in sys.modules

    lib = importlib.import_module(f"{prefix}_lib")
    model = jax2onnx.to_onnx(lambda x: lib.triple(x) + 1.0, [(4,)], extra_rules=[rules])

    assert f"{prefix}_lowers" in sys.modules
    # the library is imported, so the module intercepting it loaded too; the other did not
    assert [f.module for f in rules.deferred] == [f"{prefix}_never"]
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(run(model, x), 3 * x + 1)
    assert [n.op_type for n in model.graph.node] == ["Mul", "Add"]


def test_a_deferred_interception_is_installed_when_its_package_is_imported(tmp_path, monkeypatch):
    prefix, manifest = write_package(tmp_path, monkeypatch)
    rules = deferred_rules(manifest)
    registry = Registry([rules.freeze()])
    assert registry.interceptions == ()  # the library is not imported: nothing to load
    assert f"{prefix}_intercepts" not in sys.modules

    lib = importlib.import_module(f"{prefix}_lib")
    model = jax2onnx.to_onnx(lambda x: lib.double(x), [(3,)], extra_rules=[rules])
    assert f"{prefix}_intercepts" in sys.modules
    assert [n.op_type for n in model.graph.node] == ["Add"]  # the stand-in's lowering
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(run(model, x), 2 * x)
    assert lib.double(x).tolist() == (2 * x).tolist()  # the original is back


def test_reading_the_rules_loads_every_deferred_module(tmp_path, monkeypatch):
    prefix, manifest = write_package(tmp_path, monkeypatch)
    rules = deferred_rules(manifest).freeze()
    assert "deferred=2" in repr(rules)
    names = sorted(lw.primitive for lw in rules.lowerings)
    assert names == sorted([f"{prefix}_triple", "mini.double"])
    assert rules.deferred == ()
    assert [m.name for m in rules.macros] == ["mini.double"]
    assert [i.target for i in rules.interceptions] == [f"{prefix}_lib.double"]
    assert {f.module for f in rules.manifest} == set(manifest)  # kept after loading


def test_a_registry_sees_modules_loaded_by_reading_the_rules(tmp_path, monkeypatch):
    prefix, manifest = write_package(tmp_path, monkeypatch)
    rules = deferred_rules(manifest).freeze()
    registry = Registry([rules])
    assert registry.interceptions == ()
    assert rules.cases == ()  # as the testkit does: every module loads, outside the registry
    assert [i.target for i in registry.interceptions] == [f"{prefix}_lib.double"]
    assert registry.lookup(f"{prefix}_triple", 23).plugin == "mini"


def test_conflicts_are_decided_as_if_nothing_were_deferred(tmp_path, monkeypatch):
    prefix, manifest = write_package(tmp_path, monkeypatch)
    other = Rules("other")

    @other.lowering(f"{prefix}_triple")
    def triple(ctx, x):
        return ctx.op.Identity(x)

    with pytest.raises(PluginConflictError, match=f"{prefix}_lowers"):
        Registry([deferred_rules(manifest).freeze(), other.freeze()])

    # the deferred module's rule overrides: it is loaded when the registry is built
    prefix, manifest = write_package(tmp_path, monkeypatch, options=", override=True")
    other = Rules("other")
    other.lowering(f"{prefix}_triple")(triple)
    rules = deferred_rules(manifest).freeze()
    registry = Registry([rules, other.freeze()])
    assert f"{prefix}_lowers" in sys.modules
    (lowering,) = registry.lowerings(f"{prefix}_triple")
    assert lowering.plugin == "mini"


def test_a_broken_deferred_module_names_itself(tmp_path, monkeypatch):
    broken = "import numpy as np\nraise RuntimeError('boom')\n"
    prefix = f"j2o_deferred_{next(_COUNTER)}"
    (tmp_path / f"{prefix}_broken.py").write_text(broken)
    monkeypatch.syspath_prepend(str(tmp_path))
    rules = deferred_rules({f"{prefix}_broken": {"lowers": ["j2o_nothing"]}}).freeze()
    with pytest.raises(PluginLoadError, match=rf"{prefix}_broken of plugin 'mini'.*boom"):
        Registry([rules]).lookup("j2o_nothing", 23)


def test_a_deferred_module_cannot_register_a_tracing_context(tmp_path, monkeypatch):
    text = "def register(rules):\n    rules.tracing_context(lambda: None)\n"
    prefix = f"j2o_deferred_{next(_COUNTER)}"
    (tmp_path / f"{prefix}_ctx.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    rules = deferred_rules({f"{prefix}_ctx": {"lowers": ["j2o_ctx"]}})
    with pytest.raises(PluginLoadError, match="tracing context"):
        rules.load_deferred()


def test_bad_manifests_are_refused():
    rules = Rules("mini")
    with pytest.raises(ValueError, match="unknown keys"):
        rules.defer({"some.module": {"lower": ["x"]}})
    with pytest.raises(TypeError, match="list of names"):
        rules.defer({"some.module": {"lowers": "x"}})
    rules.defer({"some.module": {"lowers": ["x"]}})
    with pytest.raises(ValueError, match="twice"):
        rules.defer({"some.module": {}})
    with pytest.raises(RuntimeError, match="frozen"):
        rules.freeze().defer({"other.module": {}})


def test_a_stale_manifest_is_reported(tmp_path, monkeypatch):
    prefix, manifest = write_package(tmp_path, monkeypatch)
    assert stale_manifest("mini", deferred_rules(manifest).manifest) == []
    manifest[f"{prefix}_lowers"] = {"lowers": ["gone"]}
    manifest[f"{prefix}_intercepts"].pop("intercepts")
    problems = stale_manifest(
        "mini", deferred_rules(manifest).manifest, [*manifest, f"{prefix}_new"]
    )
    assert f"{prefix}_new is listed in FAMILIES but has no manifest entry" in problems
    assert any(f"not in the manifest ['{prefix}_triple']" in p for p in problems)
    assert any("no longer declared ['gone']" in p for p in problems)
    assert any(f"intercepts: not in the manifest ['{prefix}_lib.double']" in p for p in problems)


def test_installed_plugin_manifests_match_their_modules():
    checked = 0
    for plugin in jax2onnx.plugins().plugins:
        if plugin.rules is None or not plugin.rules.manifest:
            continue
        module = importlib.import_module(plugin.module)
        package = plugin.module.rpartition(".")[0]
        listed = [f"{package}.{name}" for name in getattr(module, "FAMILIES", ())]
        assert stale_manifest(plugin.rules.name, plugin.rules.manifest, listed) == [], (
            f"run `jax2onnx manifest {plugin.name}`"
        )
        checked += 1
    assert checked >= 3  # lax, nn, equinox defer their family modules


def test_manifest_command_writes_what_the_modules_declare(tmp_path):
    out = tmp_path / "manifest.py"
    done = subprocess.run(
        [sys.executable, "-m", "jax2onnx.cli", "manifest", "nn", "-o", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "6 family modules" in done.stdout
    namespace: dict = {}
    exec(out.read_text(), namespace)
    from jax2onnx_nn._manifest import MANIFEST

    assert namespace["MANIFEST"] == MANIFEST
    missing = subprocess.run(
        [sys.executable, "-m", "jax2onnx.cli", "manifest", "nope"], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "no installed plugin" in missing.stderr


def test_threads_loading_different_modules_at_once(tmp_path, monkeypatch):
    prefix, manifest = write_package(tmp_path, monkeypatch)
    rules = deferred_rules(manifest)
    lib = importlib.import_module(f"{prefix}_lib")
    results, errors = {}, []

    def convert(key, fn):
        try:
            results[key] = jax2onnx.to_onnx(fn, [(2,)], extra_rules=[rules])
        except Exception as err:  # reported below
            errors.append(err)

    threads = [
        threading.Thread(target=convert, args=(i, lib.triple if i % 2 else lib.double))
        for i in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    x = np.ones(2, np.float32)
    for i, model in results.items():
        np.testing.assert_allclose(run(model, x), (3 if i % 2 else 2) * x)


def test_a_fresh_process_imports_only_the_family_modules_it_needs():
    probe = """
import sys
import jax.numpy as jnp
import jax2onnx
jax2onnx.to_onnx(lambda x: jnp.sin(x) * 2.0, [(3,)])
loaded = sorted(m for m in sys.modules if m.startswith("jax2onnx_lax."))
print(",".join(loaded))
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    loaded = set(out.split(","))
    assert {"jax2onnx_lax.unary", "jax2onnx_lax.binary"} <= loaded
    for unneeded in ("jax2onnx_lax.linalg", "jax2onnx_lax.fft", "jax2onnx_lax.scatter"):
        assert unneeded not in loaded
