"""sort, top_k and the approximate top-k primitives."""

from __future__ import annotations

from jax2onnx_lax._rules import rules  # noqa: F401
