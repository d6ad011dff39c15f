"""reduce_window and its specialisations, select_and_scatter_add, select_and_gather_add."""

from __future__ import annotations

from jax2onnx_lax._rules import rules  # noqa: F401
