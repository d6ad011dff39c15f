"""Entry point of jax2onnx-lax: imports its family modules by name."""

from __future__ import annotations

from jax2onnx.plugin import Rules, hookimpl
from jax2onnx_lax import dot, elementwise, reduction, shape  # noqa: F401 - they register rules
from jax2onnx_lax._rules import rules


@hookimpl
def jax2onnx_rules() -> Rules:
    return rules
