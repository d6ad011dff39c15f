"""Entry point of jax2onnx-myops (``[project.entry-points.jax2onnx] myops``)."""

from __future__ import annotations

from jax2onnx.plugin import Rules, hookimpl

from jax2onnx_myops import lowerings  # noqa: F401 - registers the lowerings and the interception
from jax2onnx_myops._rules import rules


@hookimpl
def jax2onnx_rules() -> Rules:
    return rules
