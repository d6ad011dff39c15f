"""``import jax2onnx`` stays light: no Flax, Equinox, ONNX Runtime, onnx_ir or sympy."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HEAVY = ("flax", "equinox", "onnxruntime", "onnx_ir", "sympy")


def _imported_after(code: str) -> dict:
    script = (
        "import json, sys\n"
        f"{code}\n"
        f"heavy = {HEAVY!r}\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & set(heavy))))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX2ONNX_")}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_jax2onnx_loads_plugins_without_heavy_modules():
    code = (
        "import jax2onnx, jax2onnx.plugin\n"
        "names = {p.name for p in jax2onnx.plugins().plugins}\n"
        "assert {'core', 'lax', 'nn', 'flax', 'equinox'} <= names, names\n"
    )
    assert _imported_after(code) == []


def test_loading_the_installed_plugins_builds_no_case_and_compiles_nothing():
    code = (
        "import jax\n"
        "compiled = []\n"
        "listen = jax.monitoring.register_event_duration_secs_listener\n"
        "listen(lambda event, *_, **__: compiled.append(event) if 'compile' in event else None)\n"
        "from jax2onnx.registration import cases\n"
        "built = []\n"
        "original = cases.Case.__post_init__\n"
        "cases.Case.__post_init__ = lambda case: (built.append(case.name), original(case))[1]\n"
        "import jax2onnx\n"
        "plugin_set = jax2onnx.plugins()\n"
        "assert plugin_set.failures == (), plugin_set.failures\n"
        "assert built == [], f'{len(built)} cases built while loading: {built[:5]}'\n"
        "assert compiled == [], compiled  # no JAX computation while a plugin loads\n"
        "ours = {'core', 'lax', 'nn', 'flax', 'equinox'}\n"
        "counts = {r.name: len(r.cases) for r in plugin_set.rules()}  # what the testkit reads\n"
        "assert all(counts[name] > 0 for name in ours), counts\n"
        "assert len(built) >= sum(counts.values()), (len(built), counts)  # built on reading\n"
    )
    assert _imported_after(code) == []  # building the cases imports no Flax or Equinox either


def test_cli_works_without_onnxruntime(tmp_path):
    model_file = tmp_path / "tiny_model.py"
    model_file.write_text("import jax.numpy as jnp\n\ndef fn(x):\n    return jnp.tanh(x) * 2.0\n")
    out = tmp_path / "tiny.onnx"
    code = (
        "sys.modules['onnxruntime'] = None  # any import of onnxruntime now fails\n"
        "from jax2onnx import cli\n"
        f"assert cli.main(['plugins']) == 0\n"
        f"assert cli.main(['convert', {str(model_file) + ':fn'!r}, '--input', 'B,3', "
        f"'-o', {str(out)!r}]) == 0\n"
        "del sys.modules['onnxruntime']\n"
    )
    imported = _imported_after(code)
    assert "onnxruntime" not in imported and "flax" not in imported
    assert out.is_file()


def test_a_conversion_does_not_import_sympy_until_onnx_ir_needs_it():
    code = (
        "import jax.numpy as jnp\n"
        "from jax2onnx import to_onnx\n"
        "model = to_onnx(lambda x, y: jnp.tanh(x) @ y, [('B', 3), (3, 'N')])\n"
        "assert [n.op_type for n in model.graph.node] == ['Tanh', 'MatMul']\n"
        "assert 'sympy' not in sys.modules\n"
        "import onnx_ir as ir\n"
        "assert str(ir.SymbolicDim('B') * 2 + 1) == '2*B + 1'  # onnx_ir's sympy still works\n"
        "assert type(sys.modules['sympy']).__name__ == 'module'  # the real one\n"
    )
    assert _imported_after(code) == ["onnx_ir", "sympy"]


def test_sympy_imported_first_is_left_alone():
    code = (
        "import sympy\n"
        "import jax.numpy as jnp\n"
        "from jax2onnx import to_onnx\n"
        "to_onnx(jnp.tanh, [('B', 3)])\n"
        "import onnx_ir\n"
        "assert onnx_ir._core.sympy is sympy\n"
        "assert sympy.Symbol('x') + 1 == 1 + sympy.Symbol('x')\n"
    )
    assert "sympy" in _imported_after(code)
