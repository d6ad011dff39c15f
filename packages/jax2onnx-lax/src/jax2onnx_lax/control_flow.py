"""cond, while and scan as If, Loop and Scan."""

from __future__ import annotations

from jax2onnx_lax._rules import rules  # noqa: F401
