"""The plugin registers through its entry point and loads with the others.

Its rules land in later releases; then `tests/test_cases.py` runs their cases.
"""

import importlib.metadata

import jax2onnx


def test_entry_point_is_declared():
    names = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="jax2onnx")}
    assert names.get("flax") == "jax2onnx_flax.plugin"


def test_plugin_loads_with_its_rules():
    loaded = {p.name: p for p in jax2onnx.plugins().plugins}
    assert "flax" in loaded, jax2onnx.plugins().failures
    assert loaded["flax"].distribution == "jax2onnx-flax"
    assert loaded["flax"].rules is not None and loaded["flax"].rules.name == "flax"
