"""gather, dynamic_slice and dynamic_update_slice."""

from __future__ import annotations

from jax2onnx_lax._rules import rules  # noqa: F401
