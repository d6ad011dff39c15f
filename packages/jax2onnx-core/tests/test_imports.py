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
