"""Every distribution of ours registers its plugin through an entry point.

jax2onnx-nn, -flax and -equinox have no rules yet; their cases will run from
their own ``tests/test_cases.py`` once they do.
"""

import importlib.metadata

import pytest

import jax2onnx

OURS = ["lax", "nn", "flax", "equinox"]


@pytest.mark.parametrize("name", OURS)
def test_plugin_is_declared_and_loads(name):
    declared = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="jax2onnx")}
    assert declared.get(name) == f"jax2onnx_{name}.plugin"
    loaded = {p.name: p for p in jax2onnx.plugins().plugins}
    assert name in loaded, jax2onnx.plugins().failures
    assert loaded[name].distribution == f"jax2onnx-{name}"
    assert loaded[name].rules is not None and loaded[name].rules.name == name
